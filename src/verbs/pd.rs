//! Protection domains: memory regions and queue pairs of one PD can only reach each other.

use super::device::Device;
use super::error::{Error, Result};
use super::mr::{MemoryRegion, new_borrowed_bytes, new_owned_bytes};
use crate::transport::Access;

/// A protection domain (`ibv_pd`).
#[derive(Debug)]
pub struct ProtectionDomain {
    pub(crate) id: u32,
    pub(crate) device: Device,
}

impl ProtectionDomain {
    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Zeroed bytes for a region the library owns: within `max_mr_size`, and a typed error when
    /// the memory is not there.
    fn owned_bytes(&self, len: usize) -> Result<super::mr::AtomicBytes> {
        let max = self.device.shared.attr.max_mr_size;
        if len as u64 > max {
            return Err(Error::Limit { what: "max_mr_size", max });
        }
        new_owned_bytes(len).ok_or(Error::NoMemory(len))
    }

    fn check_mr_limit(&self) -> Result<()> {
        let max = self.device.shared.attr.max_mr;
        if self.device.shared.mrs.read().len() >= max as usize {
            return Err(Error::Limit { what: "max_mr", max: max as u64 });
        }
        Ok(())
    }

    /// Allocates and registers a zeroed region of `len` bytes that the library owns (see the
    /// memory model in [`super::mr`]).
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        self.check_mr_limit()?;
        let bytes = self.owned_bytes(len)?;
        let mut table = self.device.shared.mrs.write();
        // The region's address is where its bytes live, as with ibverbs.
        let addr = 0x1000u64.max(bytes_addr(&bytes));
        let inner = table.insert(self.id, addr, access, bytes, false);
        drop(table);
        Ok(MemoryRegion { inner, device: self.device.shared.clone() })
    }

    /// Like [`ProtectionDomain::alloc_mr`], and a peer's SEND with invalidate may invalidate
    /// the region's rkey (for protocols that hand out one-shot rkeys).
    pub fn alloc_mr_remote_invalidate(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        self.check_mr_limit()?;
        let bytes = self.owned_bytes(len)?;
        let addr = 0x1000u64.max(bytes_addr(&bytes));
        let inner = self.device.shared.mrs.write().insert(self.id, addr, access, bytes, true);
        Ok(MemoryRegion { inner, device: self.device.shared.clone() })
    }

    /// Registers memory the caller owns, for zero-copy use.
    ///
    /// # Safety
    /// `ptr` (any alignment) must be valid for reads and writes of `len` bytes until the
    /// returned region is dropped, and while it is registered the memory must only be
    /// accessed through the region (its atomic accessors) or not at all: the engine and remote
    /// peers write it from another thread at any time.
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize, access: Access) -> Result<MemoryRegion> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.register_raw_iova(ptr, len, ptr as u64, access) }
    }

    /// Like [`ProtectionDomain::register_raw`], but peers and scatter/gather entries name the
    /// region's first byte `iova` instead of its address (`ibv_reg_mr_iova`): the region
    /// covers `iova .. iova + len`.
    ///
    /// # Safety
    /// As for [`ProtectionDomain::register_raw`].
    pub unsafe fn register_raw_iova(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion> {
        if iova.checked_add(len as u64).is_none() {
            return Err(Error::InvalidArgument("iova + length overflows"));
        }
        self.check_mr_limit()?;
        // SAFETY: forwarded from this function's contract.
        let bytes = unsafe { new_borrowed_bytes(ptr, len) };
        let inner = self.device.shared.mrs.write().insert(self.id, iova, access, bytes, false);
        Ok(MemoryRegion { inner, device: self.device.shared.clone() })
    }

    /// `ibv_alloc_mw`: a memory window of this protection domain (see [`super::mw`]).
    pub fn alloc_mw(&self, mw_type: super::MwType) -> Result<super::MemoryWindow> {
        let max = self.device.shared.attr.max_mw;
        let mut table = self.device.shared.mrs.write();
        if table.windows() >= max as usize {
            return Err(Error::Limit { what: "max_mw", max: max as u64 });
        }
        let inner = table.insert_mw(self.id, mw_type);
        drop(table);
        Ok(super::MemoryWindow { inner, device: self.device.shared.clone() })
    }
}

fn bytes_addr(b: &super::mr::AtomicBytes) -> u64 {
    b.addr()
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        self.device.shared.pd_count.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
