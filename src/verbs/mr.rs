//! Memory regions and the memory model.
//!
//! # The model
//!
//! A remote peer writes into a registered region from the engine's thread at any moment the
//! region is registered, while the application may be reading or writing it. In Rust, plain
//! reads and writes that race are undefined behaviour, so softroce never lets two threads
//! touch region memory with plain accesses at the same time:
//!
//! - A [`MemoryRegion`] created by [`super::ProtectionDomain::alloc_mr`] **owns** its buffer,
//!   stored as 8-byte atomic words. Every access — the application's ([`MemoryRegion::read`],
//!   [`MemoryRegion::write`], [`MemoryRegion::fill`], [`MemoryRegion::atomic_u64`]) and the
//!   engine's (packet payloads in and out, RDMA atomics) — goes through relaxed atomic loads and
//!   stores (a compare-and-swap that replaces only its bytes for a partial word), which compile
//!   to plain moves. Racing accesses are therefore defined: a reader may see a mix of old and
//!   new bytes (of different words), exactly as with RDMA hardware, but never bytes nobody
//!   wrote, and never undefined behaviour. RDMA atomics use the same
//!   `AtomicU64`, so they are atomic with respect to the application's
//!   [`MemoryRegion::atomic_u64`] too.
//! - For zero-copy use, [`MemoryRegion::as_slice`] and [`MemoryRegion::as_mut_slice`] hand out
//!   plain slices. They are `unsafe`: the caller promises that no remote access and no engine
//!   access (no posted work request using the region) can happen meanwhile — for example after
//!   the completion that ended the transfer, with the rkey not given to any peer.
//! - [`super::ProtectionDomain::register_raw`] registers memory the application owns (for
//!   example a buffer shared with other code). It is `unsafe` for the same reasons and because
//!   the memory must outlive the registration.
//!
//! Keys are random 32-bit values drawn from the OS's random seed, so a peer cannot guess an
//! rkey it was not given (kernel rxe uses an index with 8 random bits).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::device::Device;
use super::error::Error;
pub use crate::engine::error::OutOfRegion;
pub use crate::engine::shared::memory::MwType;
pub(crate) use crate::engine::shared::memory::{
    AtomicBytes, MrInner, MwInner, new_borrowed_bytes, new_owned_bytes,
};
use crate::transport::{Access, Lkey, MemError, RemoteAddr, Rkey};

/// A registered memory region (`ibv_mr`). Dropping it deregisters it.
pub struct MemoryRegion {
    pub(crate) inner: Arc<MrInner>,
    pub(crate) device: Arc<super::device::DeviceShared>,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.inner.addr))
            .field("len", &self.inner.bytes.len())
            .field("lkey", &format_args!("{:#x}", self.inner.lkey))
            .field("rkey", &format_args!("{:#x}", self.inner.rkey))
            .field("access", &self.inner.access)
            .finish()
    }
}

impl MemoryRegion {
    /// The address to use in scatter/gather entries and to give a peer (the region's first
    /// byte).
    pub fn addr(&self) -> u64 {
        self.inner.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.bytes.len()
    }
    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Local key, for scatter/gather entries (see [`MemoryRegion::sge`]).
    pub fn lkey(&self) -> Lkey {
        Lkey::new(self.inner.lkey)
    }
    /// Remote key, for peers (see [`MemoryRegion::remote`]). Like kernel rxe's, it equals the
    /// lkey, also for a region without remote rights (remote requests are then refused for
    /// the missing right), and it survives [`MemoryRegion::rereg`].
    pub fn rkey(&self) -> Rkey {
        Rkey::new(self.inner.rkey)
    }
    /// Access rights.
    pub fn access(&self) -> Access {
        self.inner.access
    }
    /// A scatter/gather entry for `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> crate::transport::Sge {
        crate::transport::Sge { addr: self.inner.addr + offset as u64, length: len, lkey: self.lkey() }
    }
    /// What a peer names to reach the byte at `offset` with RDMA READ, WRITE or an atomic: the
    /// address and the rkey (send it to the peer out of band).
    pub fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr { addr: self.inner.addr + offset as u64, rkey: self.rkey() }
    }

    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_PD` and/or `IBV_REREG_MR_CHANGE_ACCESS`: moves
    /// the region to protection domain `pd` (of the same device) and/or replaces its access
    /// rights, keeping its memory, address and keys, as kernel rxe does. Work requests
    /// executed afterwards (also ones posted before) are checked against the new PD and
    /// rights: a peer's RDMA naming the rkey of a region that lost its remote rights gets a
    /// remote access error, a receive into a region moved to another PD ends in a protection
    /// error. Changing the memory itself (`IBV_REREG_MR_CHANGE_TRANSLATION`) is not offered,
    /// as in rxe: register a new region instead.
    pub fn rereg(
        &mut self,
        pd: Option<&super::ProtectionDomain>,
        access: Option<Access>,
    ) -> Result<(), super::Error> {
        if let Some(p) = pd
            && !Arc::ptr_eq(&p.device.shared, &self.device)
        {
            return Err(super::Error::InvalidArgument("the protection domain belongs to another device"));
        }
        if let Some(a) = access
            && (a.contains(Access::REMOTE_WRITE) || a.contains(Access::REMOTE_ATOMIC))
            && !a.contains(Access::LOCAL_WRITE)
        {
            return Err(super::Error::InvalidArgument("remote write or atomic access needs local write"));
        }
        let mut table = self.device.mrs.write();
        let inner = table
            .rereg(self.inner.lkey, pd.map(|p| p.id), access)
            .ok_or(super::Error::InvalidArgument("the region is no longer registered"))?;
        self.device.mr_table_changed();
        drop(table);
        self.inner = inner;
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfRegion> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(OutOfRegion { offset, len, size: self.len() }),
        }
    }

    /// Copies `dst.len()` bytes at `offset` out of the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRegion> {
        self.check(offset, dst.len())?;
        self.inner.bytes.read(offset, dst);
        Ok(())
    }
    /// Copies `src` into the region at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfRegion> {
        self.check(offset, src.len())?;
        self.inner.bytes.write(offset, src);
        Ok(())
    }
    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), OutOfRegion> {
        self.check(offset, len)?;
        self.inner.bytes.fill(offset, len, byte);
        Ok(())
    }
    /// Copies the whole region into a vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.inner.bytes.read(0, &mut v);
        v
    }
    /// Reads one byte (e.g. the flag byte a latency test polls).
    pub fn load_u8(&self, offset: usize) -> Result<u8, OutOfRegion> {
        let mut b = [0u8];
        self.read(offset, &mut b)?;
        Ok(b[0])
    }
    /// The 8-byte word at `offset` (a multiple of 8) as an atomic: RDMA atomics from peers
    /// operate on the same word.
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, OutOfRegion> {
        self.inner.bytes.word(offset).ok_or(OutOfRegion { offset, len: 8, size: self.len() })
    }

    /// The region as a plain slice, for zero-copy reads.
    ///
    /// # Safety
    /// Nothing may write the region while the slice lives: no peer holding the rkey may
    /// issue RDMA WRITE or atomics, and no posted receive or RDMA READ may target it.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller guarantees no concurrent writer; the bytes are initialised and
        // valid for `len()` bytes.
        unsafe { std::slice::from_raw_parts(self.inner.bytes.as_ptr(), self.len()) }
    }

    /// The region as a plain mutable slice, for zero-copy writes.
    ///
    /// # Safety
    /// Nothing else may access the region while the slice lives: no peer RDMA READ, WRITE or
    /// atomic, no posted work request using it, and no other slice or handle access.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: the caller guarantees exclusive access for the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.inner.bytes.as_ptr(), self.len()) }
    }

    /// How many memory windows are bound to this region now. `ibv_dereg_mr` of a region with
    /// windows bound fails with `EINVAL` (IBA 10.6.7.2.6, as rxe); dropping the handle
    /// deregisters it regardless, and the windows keep the memory alive until they are
    /// invalidated, rebound or deallocated.
    pub fn bound_windows(&self) -> usize {
        self.device.mrs.read().windows_bound_to(self.inner.lkey)
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        let mut table = self.device.mrs.write();
        table.remove(self.inner.lkey);
        self.device.mr_table_changed();
    }
}

/// Checks receive or send SGEs against the device's memory regions: key, PD, bounds and
/// (for what the engine writes) LOCAL_WRITE.
pub(crate) fn check_sges(
    device: &Device,
    pd: u32,
    sges: &[crate::transport::Sge],
    need_write: bool,
) -> super::error::Result<()> {
    // The region this thread checked last, while no region of any device has gone or changed
    // since: no lock, no table lookup (a post's SGE is nearly always in the region of the
    // post before). Read before the table, so that a change during the check leaves a memo
    // that no longer matches.
    let generation = device.shared.mr_generation.load(Ordering::Acquire);
    let memo = SGE_MEMO.get();
    if memo.is_some_and(|m| {
        m.generation == generation
            && m.pd == pd
            && (m.local_write || !need_write)
            && sges.iter().all(|s| m.holds(s))
    }) {
        return Ok(());
    }
    let table = device.shared.mrs.read();
    for s in sges {
        let mr = match table.local(pd, s.lkey.value()) {
            Ok(mr) => mr,
            Err(MemError::PdMismatch) => return Err(Error::PdMismatch(s.lkey)),
            Err(_) => return Err(Error::BadLkey(s.lkey)),
        };
        let inside = s
            .addr
            .checked_sub(mr.addr)
            .and_then(|o| o.checked_add(s.length as u64))
            .is_some_and(|end| end <= mr.bytes.len() as u64);
        if !inside {
            return Err(Error::SgeOutOfRegion { addr: s.addr, len: s.length, lkey: s.lkey });
        }
        if need_write && !mr.access.contains(Access::LOCAL_WRITE) {
            return Err(Error::NotLocalWrite(s.lkey));
        }
        SGE_MEMO.set(Some(SgeMemo {
            generation,
            pd,
            lkey: s.lkey.value(),
            addr: mr.addr,
            len: mr.bytes.len() as u64,
            local_write: mr.access.contains(Access::LOCAL_WRITE),
        }));
    }
    Ok(())
}

/// A region that passed [`check_sges`] on this thread, and the table generation it passed
/// in (`DeviceShared::mr_generation`).
#[derive(Debug, Clone, Copy)]
struct SgeMemo {
    generation: u64,
    pd: u32,
    lkey: u32,
    addr: u64,
    len: u64,
    local_write: bool,
}

impl SgeMemo {
    /// Whether `s` lies in this region under its key (the checks of [`check_sges`]).
    fn holds(&self, s: &crate::transport::Sge) -> bool {
        s.lkey.value() == self.lkey
            && s.addr
                .checked_sub(self.addr)
                .and_then(|o| o.checked_add(s.length as u64))
                .is_some_and(|end| end <= self.len)
    }
}

thread_local! {
    static SGE_MEMO: std::cell::Cell<Option<SgeMemo>> = const { std::cell::Cell::new(None) };
}
