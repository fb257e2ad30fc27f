//! Memory windows (`ibv_mw`): a remote key for part of a memory region, granted and revoked
//! without registering memory again.
//!
//! A window is allocated in a protection domain ([`super::ProtectionDomain::alloc_mw`]) and
//! bound to a range of a region registered with [`Access::MW_BIND`]. Binding is a work
//! request: it runs when the send queue reaches it and completes in order with the requests
//! posted before it, as in kernel rxe. Every bind gives the window a new rkey (its low 8
//! bits change), so an rkey from an earlier bind stops working.
//!
//! - **Type 1** ([`MwType::Type1`]): bound with [`super::QueuePair::bind_mw`]
//!   (`ibv_bind_mw`), usable from every QP of the PD; a zero-length bind unbinds it.
//! - **Type 2** ([`MwType::Type2`], type 2B as rxe): bound by posting
//!   [`SendOp::BindMw`] (build it with
//!   [`MemoryWindow::bind_op`]); it answers only the QP that bound it and is revoked by a
//!   local invalidate ([`SendOp::LocalInv`]) or by the
//!   peer's SEND with invalidate naming its rkey.
//!
//! Remote requests through a window are checked against the window's rights and range, not
//! the region's. Dropping the window deallocates it; its rkey stops working at once.

use std::sync::Arc;

use super::device::DeviceShared;
use super::mr::{MemoryRegion, MwInner};
use crate::transport::{Access, MwBind, RemoteAddr, Rkey, SendOp};

pub use super::mr::MwType;

/// A memory window (`ibv_mw`). Dropping it deallocates it.
pub struct MemoryWindow {
    pub(crate) inner: Arc<MwInner>,
    pub(crate) device: Arc<DeviceShared>,
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("type", &self.inner.mw_type)
            .field("rkey", &format_args!("{:#x}", self.rkey().value()))
            .finish()
    }
}

/// Increments the 8-bit key of an rkey, keeping its index (`ibv_inc_rkey`).
pub fn inc_rkey(rkey: Rkey) -> Rkey {
    let r = rkey.value();
    Rkey::new((r & !0xff) | (r.wrapping_add(1) & 0xff))
}

impl MemoryWindow {
    /// The window's kind.
    pub fn mw_type(&self) -> MwType {
        self.inner.mw_type
    }

    /// The window's rkey as the last bind that ran left it (the allocation's rkey before
    /// the first bind). A bind still queued has not changed it yet: use the rkey that
    /// [`MemoryWindow::bind_op`] or [`super::QueuePair::bind_mw`] returned.
    pub fn rkey(&self) -> Rkey {
        Rkey::new(self.inner.state.lock().rkey)
    }

    /// What a peer names to reach the byte at `addr` through the window (for a window bound
    /// with [`Access::ZERO_BASED`], `addr` counts from the window's first byte).
    pub fn remote(&self, addr: u64) -> RemoteAddr {
        RemoteAddr { addr, rkey: self.rkey() }
    }

    /// The work request operation that binds the window to `len` bytes at `offset` of `mr`
    /// with the remote rights `access` (plus [`Access::ZERO_BASED`] if wanted), and the rkey
    /// the window has once that bind ran (the current one with its 8-bit key incremented,
    /// as `ibv_inc_rkey`). Post it on a QP of the window's PD (a type 2 window then answers
    /// that QP only). A zero `len` unbinds a type 1 window.
    pub fn bind_op(&self, mr: &MemoryRegion, offset: u64, len: u64, access: Access) -> (SendOp, Rkey) {
        let mw_rkey = self.rkey();
        let new_rkey = inc_rkey(mw_rkey);
        let op = SendOp::BindMw(MwBind {
            mw_rkey,
            new_rkey,
            lkey: mr.lkey(),
            addr: mr.addr().wrapping_add(offset),
            length: len,
            access,
        });
        (op, new_rkey)
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        let mut table = self.device.mrs.write();
        table.remove_mw(&self.inner);
        // (A window's index is no region's; changed anyway, for the memo's sake.)
        self.device.mr_table_changed();
    }
}
