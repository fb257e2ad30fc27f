//! How the transport touches memory: a small trait, so that tests use plain buffers and the
//! engine uses registered memory regions.
//!
//! Every access names a protection domain and a key, and the implementation checks the key,
//! the PD, the bounds and the access rights before any byte moves. The transport never gets a
//! pointer: it asks for copies and atomics, and a failed check comes back as a [`MemError`]
//! that the state machines turn into the IBTA's response (a NAK and QP error for remote
//! accesses, a local protection error completion for local ones).

use core::cell::RefCell;

use super::ids::{Lkey, Rkey};

/// Access rights of a memory region (`ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// No rights beyond local read.
    pub const NONE: Access = Access(0);
    /// `IBV_ACCESS_LOCAL_WRITE`: the local HCA may write (receives, READ responses).
    pub const LOCAL_WRITE: Access = Access(1);
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(2);
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to the region.
    pub const MW_BIND: Access = Access(0x10);
    /// `IBV_ACCESS_ZERO_BASED`: a window's addresses count from its first byte.
    pub const ZERO_BASED: Access = Access(0x20);
    /// Every local and remote right (not [`Access::MW_BIND`] nor [`Access::ZERO_BASED`]).
    pub const ALL: Access = Access(15);
    /// The remote rights.
    pub const REMOTE: Access = Access(14);

    /// The ibverbs bit value.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// From ibverbs bits (bits other than the rights, MW bind and zero-based are dropped).
    pub const fn from_bits(b: u32) -> Access {
        Access(b & 0x3f)
    }
    /// The rights of `self` that are also in `other`.
    pub const fn intersect(self, other: Access) -> Access {
        Access(self.0 & other.0)
    }
    /// True when every right of `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// The operands of a memory-window bind (`ibv_mw_bind_info` plus the keys rxe's WQE carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBind {
    /// The window's current rkey (`mw->rkey`): the bind fails when it is not.
    pub mw_rkey: Rkey,
    /// The rkey the window has after the bind: its low 8 bits (the key) replace the
    /// window's, the upper 24 (the index) are the window's.
    pub new_rkey: Rkey,
    /// The memory region the window opens (ignored for a zero length bind, which unbinds a
    /// type 1 window).
    pub lkey: Lkey,
    /// First byte of the window (an address inside the region).
    pub addr: u64,
    /// Length of the window in bytes.
    pub length: u64,
    /// Remote rights the window grants (`mw_access_flags`).
    pub access: Access,
}

/// Why a memory access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MemError {
    /// No region has this key (or it was deregistered or invalidated).
    #[error("invalid key")]
    InvalidKey,
    /// The region belongs to another protection domain.
    #[error("protection domain mismatch")]
    PdMismatch,
    /// The range is not inside the region.
    #[error("out of bounds")]
    OutOfBounds,
    /// The region lacks the access right.
    #[error("access denied")]
    AccessDenied,
    /// A memory-window bind or invalidate was refused (wrong state, type, PD, QP, region
    /// rights or range: the checks of IBTA 10.6.7 as rxe makes them).
    #[error("memory window operation refused")]
    BadWindow,
    /// An atomic target is not 8-byte aligned.
    #[error("misaligned atomic")]
    Misaligned,
}

/// An 8-byte atomic operation on remote memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Write `swap` if the current value equals `compare`.
    CompareSwap {
        /// Compare operand.
        compare: u64,
        /// Swap operand.
        swap: u64,
    },
    /// Add `add` (wrapping).
    FetchAdd {
        /// Addend.
        add: u64,
    },
}

/// Memory as the transport sees it. Values of `pd` and keys are the ones the verbs layer
/// handed out; `qpn` is the QP on whose behalf the access happens (a type 2 memory window
/// answers only the QP it was bound from). Multi-byte atomic values are in host order; the
/// wire carries them big-endian and the transport converts.
pub trait Memory {
    /// Copies `dst.len()` bytes at `addr` of the region with local key `lkey` (local reads
    /// need no access right).
    fn read_local(&self, pd: u32, lkey: u32, addr: u64, dst: &mut [u8]) -> Result<(), MemError>;
    /// Writes `src` at `addr` of the region with local key `lkey` (needs LOCAL_WRITE).
    fn write_local(&self, pd: u32, lkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError>;
    /// Checks that `len` bytes at `addr` under remote key `rkey` may be accessed with
    /// `access`, without moving data.
    fn check_remote(
        &self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(), MemError>;
    /// Copies from remote-readable memory (RDMA READ responder).
    fn read_remote(&self, pd: u32, qpn: u32, rkey: u32, addr: u64, dst: &mut [u8]) -> Result<(), MemError>;
    /// Copies into remote-writable memory (RDMA WRITE responder).
    fn write_remote(&self, pd: u32, qpn: u32, rkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError>;
    /// Performs an atomic on 8 aligned bytes of remote-atomic memory; returns the original
    /// value.
    fn atomic_remote(&self, pd: u32, qpn: u32, rkey: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError>;
    /// Invalidates a remote key (SEND with invalidate). Regions that cannot be invalidated
    /// remotely refuse with [`MemError::AccessDenied`].
    fn invalidate_remote(&self, pd: u32, qpn: u32, rkey: u32) -> Result<(), MemError>;
    /// Binds a memory window (`IBV_WR_BIND_MW`, run by QP `qpn` of protection domain `pd`).
    /// Memory without windows refuses every bind.
    fn bind_mw(&self, pd: u32, qpn: u32, bind: &MwBind) -> Result<(), MemError> {
        let _ = (pd, qpn, bind);
        Err(MemError::BadWindow)
    }
    /// Invalidates a key locally (`IBV_WR_LOCAL_INV`). Memory without windows refuses.
    fn invalidate_local(&self, pd: u32, qpn: u32, rkey: u32) -> Result<(), MemError> {
        let _ = (pd, qpn, rkey);
        Err(MemError::BadWindow)
    }
}

/// One region of a [`VecMemory`].
#[derive(Debug, Clone)]
pub struct VecRegion {
    /// Protection domain.
    pub pd: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Address of the first byte.
    pub addr: u64,
    /// Access rights.
    pub access: Access,
    /// Whether a SEND with invalidate may invalidate the rkey.
    pub invalidatable: bool,
    /// Cleared by invalidation.
    pub valid: bool,
    /// Contents.
    pub data: Vec<u8>,
}

/// Plain in-process memory for tests and the simulator: a list of regions in a `RefCell`.
#[derive(Debug, Default)]
pub struct VecMemory {
    regions: RefCell<Vec<VecRegion>>,
}

impl VecMemory {
    /// Empty memory.
    pub fn new() -> VecMemory {
        VecMemory::default()
    }

    /// Adds a region of `len` zero bytes at `addr`; its lkey and rkey are `key`.
    pub fn add(&self, pd: u32, key: u32, addr: u64, len: usize, access: Access) {
        self.regions.borrow_mut().push(VecRegion {
            pd,
            lkey: key,
            rkey: key,
            addr,
            access,
            invalidatable: false,
            valid: true,
            data: vec![0; len],
        });
    }

    /// Adds a fully described region.
    pub fn add_region(&self, r: VecRegion) {
        self.regions.borrow_mut().push(r);
    }

    /// Copies out `len` bytes at `addr` of the region with key `key` (panics if absent: test
    /// helper).
    pub fn get(&self, key: u32, addr: u64, len: usize) -> Vec<u8> {
        let regions = self.regions.borrow();
        let r = regions.iter().find(|r| r.lkey == key).expect("no such region");
        let off = (addr - r.addr) as usize;
        r.data[off..off + len].to_vec()
    }

    /// Overwrites bytes at `addr` of the region with key `key` (test helper).
    pub fn set(&self, key: u32, addr: u64, bytes: &[u8]) {
        let mut regions = self.regions.borrow_mut();
        let r = regions.iter_mut().find(|r| r.lkey == key).expect("no such region");
        let off = (addr - r.addr) as usize;
        r.data[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// Whether the region with key `key` is still valid.
    pub fn is_valid(&self, key: u32) -> bool {
        self.regions.borrow().iter().any(|r| r.lkey == key && r.valid)
    }

    #[allow(clippy::too_many_arguments)]
    fn with<T>(
        &self,
        pd: u32,
        key: u32,
        remote: bool,
        addr: u64,
        len: u64,
        need: Access,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> Result<T, MemError> {
        let mut regions = self.regions.borrow_mut();
        let r = regions
            .iter_mut()
            .find(|r| r.valid && if remote { r.rkey == key } else { r.lkey == key })
            .ok_or(MemError::InvalidKey)?;
        if r.pd != pd {
            return Err(MemError::PdMismatch);
        }
        if !r.access.contains(need) {
            return Err(MemError::AccessDenied);
        }
        let off = addr.checked_sub(r.addr).ok_or(MemError::OutOfBounds)?;
        let end = off.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > r.data.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        Ok(f(&mut r.data[off as usize..end as usize]))
    }
}

impl Memory for VecMemory {
    fn read_local(&self, pd: u32, lkey: u32, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        self.with(pd, lkey, false, addr, dst.len() as u64, Access::NONE, |m| dst.copy_from_slice(m))
    }
    fn write_local(&self, pd: u32, lkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError> {
        self.with(pd, lkey, false, addr, src.len() as u64, Access::LOCAL_WRITE, |m| m.copy_from_slice(src))
    }
    fn check_remote(
        &self,
        pd: u32,
        _qpn: u32,
        rkey: u32,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(), MemError> {
        self.with(pd, rkey, true, addr, len, access, |_| ())
    }
    fn read_remote(&self, pd: u32, _qpn: u32, rkey: u32, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        self.with(pd, rkey, true, addr, dst.len() as u64, Access::REMOTE_READ, |m| dst.copy_from_slice(m))
    }
    fn write_remote(&self, pd: u32, _qpn: u32, rkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError> {
        self.with(pd, rkey, true, addr, src.len() as u64, Access::REMOTE_WRITE, |m| m.copy_from_slice(src))
    }
    fn atomic_remote(&self, pd: u32, _qpn: u32, rkey: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        if !addr.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        self.with(pd, rkey, true, addr, 8, Access::REMOTE_ATOMIC, |m| {
            let mut b = [0u8; 8];
            b.copy_from_slice(m);
            let orig = u64::from_ne_bytes(b);
            let new = match op {
                AtomicOp::CompareSwap { compare, swap } => {
                    if orig == compare {
                        swap
                    } else {
                        orig
                    }
                }
                AtomicOp::FetchAdd { add } => orig.wrapping_add(add),
            };
            m.copy_from_slice(&new.to_ne_bytes());
            orig
        })
    }
    fn invalidate_remote(&self, pd: u32, _qpn: u32, rkey: u32) -> Result<(), MemError> {
        let mut regions = self.regions.borrow_mut();
        let r = regions.iter_mut().find(|r| r.valid && r.rkey == rkey).ok_or(MemError::InvalidKey)?;
        if r.pd != pd {
            return Err(MemError::PdMismatch);
        }
        if !r.invalidatable {
            return Err(MemError::AccessDenied);
        }
        r.valid = false;
        Ok(())
    }
}
