//! Address handles (`ibv_ah`): where a UD send goes.
//!
//! ```no_run
//! # use softroce::prelude::*;
//! # fn f(dev: &Device, pd: &ProtectionDomain, qp: &QueuePair, mr: &MemoryRegion, peer: Gid)
//! #     -> Result<(), VerbsError> {
//! let ah = pd.create_ah(&AddressVector::new(peer, dev.default_gid_index()))?;
//! let dest = ah.dest(Qpn::new(0x12), Qkey::new(0x1111_1111)); // the peer's QPN and Q_Key
//! qp.post_send(SendWr::send(1, &[mr.sge(0, 64)]).to(dest))?;
//! # Ok(()) }
//! ```

use super::device::Device;
use super::error::{Error, Result};
use super::pd::ProtectionDomain;
use super::qp::{AddressVector, AhEntry};
use crate::transport::{Qkey, Qpn, UdDest};

/// An address handle. Dropping it destroys it; a send already posted with it that has not
/// left yet completes with `LOC_QP_OP_ERR` (counted as `send_err`) and takes its QP to the
/// error state, as on rxe.
#[derive(Debug)]
pub struct AddressHandle {
    id: u32,
    av: AddressVector,
    device: Device,
}

impl AddressHandle {
    pub(crate) fn create(pd: &ProtectionDomain, av: &AddressVector) -> Result<AddressHandle> {
        let dev = &pd.device;
        let sgid = dev.gid(av.sgid_index)?;
        if av.dgid.is_zero() || av.dgid.to_ip().is_ipv4() != sgid.to_ip().is_ipv4() {
            return Err(Error::Unreachable(av.dgid));
        }
        let max = dev.shared.attr.max_ah;
        let mut ahs = dev.shared.ahs.write();
        if ahs.len() >= max as usize {
            return Err(Error::Limit { what: "max_ah", max: max as u64 });
        }
        let id = dev.shared.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ahs.insert(id, AhEntry { pd: pd.id, av: *av });
        Ok(AddressHandle { id, av: *av, device: dev.clone() })
    }

    /// The handle's number (what [`UdDest::ah`] carries).
    pub fn id(&self) -> u32 {
        self.id
    }
    /// The address vector it was created with.
    pub fn attr(&self) -> &AddressVector {
        &self.av
    }
    /// The destination of a UD send through this handle to QP `remote_qpn` with `qkey` (a
    /// Q_Key with the high bit set means "the sending QP's own Q_Key", as in ibverbs).
    pub fn dest(&self, remote_qpn: Qpn, qkey: Qkey) -> UdDest {
        UdDest { ah: self.id, remote_qpn, remote_qkey: qkey }
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        self.device.shared.ahs.write().remove(&self.id);
    }
}

impl ProtectionDomain {
    /// `ibv_create_ah`: an address handle for UD sends (the destination GID must be of the
    /// device's address family).
    pub fn create_ah(&self, av: &AddressVector) -> Result<AddressHandle> {
        AddressHandle::create(self, av)
    }
}
