//! Registered memory as the engines see it: a region's bytes as atomic words, the table of
//! regions and windows by key, and the checks a remote access passes (the memory model is
//! described in [`crate::verbs::mr`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};

use crate::transport::{Access, AtomicOp, MemError, Memory, MwBind};

/// The bytes of a region as atomic words plus, for borrowed memory that does not start or end
/// on an 8-byte boundary, a head and a tail of atomic bytes that no word overlaps. Offsets are
/// the region's; the words start at offset `head_len`.
pub(crate) struct AtomicBytes {
    storage: Storage,
    len: usize,
}

enum Storage {
    Owned(Box<[AtomicU64]>),
    Borrowed {
        /// The first byte of the region.
        base: *mut u8,
        /// The bytes before the first aligned word (0 to 7).
        head_len: usize,
        ptr: *const AtomicU64,
        words: usize,
        tail: *const AtomicU8,
        tail_len: usize,
    },
}

// SAFETY: the storage is only ever accessed through atomic operations (or through the
// `unsafe` slice accessors whose callers promise exclusivity), so sharing it between threads
// is sound. Borrowed pointers stay valid for the registration's lifetime (the caller of
// `register_raw` promised that).
unsafe impl Send for AtomicBytes {}
// SAFETY: as above.
unsafe impl Sync for AtomicBytes {}

impl AtomicBytes {
    /// `len` zeroed bytes, or `None` when the memory cannot be had. The allocation is zeroed
    /// by the allocator (pages the OS hands out are already zero and are not touched here), so
    /// a large region costs memory only as it is used, and a failure is an error, not an abort.
    fn owned(len: usize) -> Option<AtomicBytes> {
        let words = len.div_ceil(8).max(1);
        let layout = std::alloc::Layout::array::<AtomicU64>(words).ok()?;
        // SAFETY: `layout` has a nonzero size (at least one word).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut AtomicU64;
        if ptr.is_null() {
            return None;
        }
        // SAFETY: `ptr` was allocated by the global allocator with the layout of `[AtomicU64;
        // words]`, and all-zero bytes are a valid `AtomicU64`; the box takes ownership.
        let b = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, words)) };
        Some(AtomicBytes { storage: Storage::Owned(b), len })
    }

    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for as long as the returned
    /// value lives, and only accessed atomically (or exclusively) meanwhile. It need not be
    /// aligned: the bytes before the first 8-byte boundary are a head of loose bytes.
    unsafe fn borrowed(ptr: *mut u8, len: usize) -> AtomicBytes {
        let head_len = ptr.align_offset(8).min(len);
        let words = (len - head_len) / 8;
        // SAFETY: `head_len <= len`: inside (or at the end of) the caller's allocation.
        let aligned = unsafe { ptr.add(head_len) };
        AtomicBytes {
            storage: Storage::Borrowed {
                base: ptr,
                head_len,
                ptr: aligned as *const AtomicU64,
                words,
                // SAFETY: the tail starts inside (or at the end of) the caller's allocation.
                tail: unsafe { aligned.add(words * 8) } as *const AtomicU8,
                tail_len: len - head_len - words * 8,
            },
            len,
        }
    }

    /// The loose bytes before the first aligned word (borrowed, unaligned memory only).
    fn head(&self) -> &[AtomicU8] {
        match &self.storage {
            Storage::Owned(_) => &[],
            // SAFETY: `base` is valid for `head_len` bytes before the first word (see
            // `borrowed`); `AtomicU8` has the layout of `u8`.
            Storage::Borrowed { base, head_len, .. } => unsafe {
                std::slice::from_raw_parts(*base as *const AtomicU8, *head_len)
            },
        }
    }

    fn words(&self) -> &[AtomicU64] {
        match &self.storage {
            Storage::Owned(b) => b,
            // SAFETY: `ptr` is aligned and valid for `words` words (see `borrowed`), and
            // `AtomicU64` has the same layout as `u64`.
            Storage::Borrowed { ptr, words, .. } => unsafe { std::slice::from_raw_parts(*ptr, *words) },
        }
    }

    fn tail(&self) -> &[AtomicU8] {
        match &self.storage {
            Storage::Owned(_) => &[],
            // SAFETY: `tail` is valid for `tail_len` bytes after the last whole word.
            Storage::Borrowed { tail, tail_len, .. } => unsafe {
                std::slice::from_raw_parts(*tail, *tail_len)
            },
        }
    }

    /// Start of the bytes, for the `unsafe` slice accessors.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        match &self.storage {
            Storage::Owned(b) => b.as_ptr() as *mut u8,
            Storage::Borrowed { base, .. } => *base,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address of the first byte (what ibverbs users see as the region's address).
    pub(crate) fn addr(&self) -> u64 {
        self.as_ptr() as u64
    }

    /// Copies `dst.len()` bytes starting at byte `off` (bounds checked by the caller).
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) {
        let head = self.head();
        let n = head.len().saturating_sub(off).min(dst.len());
        for (d, h) in dst[..n].iter_mut().zip(&head[off.min(head.len())..]) {
            *d = h.load(Relaxed);
        }
        if n < dst.len() {
            self.read_words(off + n - head.len(), &mut dst[n..]);
        }
    }

    /// [`AtomicBytes::read`] from the first word on (`off` counted from it).
    fn read_words(&self, off: usize, dst: &mut [u8]) {
        let words = self.words();
        let word_bytes = words.len() * 8;
        let (mut pos, mut out) = (off, 0);
        // Head: the rest of a partial word.
        if pos % 8 != 0 && pos < word_bytes {
            let b = pos % 8;
            let n = (8 - b).min(dst.len());
            let bytes = words[pos / 8].load(Relaxed).to_ne_bytes();
            dst[..n].copy_from_slice(&bytes[b..b + n]);
            out += n;
            pos += n;
        }
        // Middle: whole words, eight bytes at a time (fixed-size copies compile to moves).
        let whole = ((dst.len() - out) / 8).min(word_bytes.saturating_sub(pos) / 8);
        if whole > 0 {
            let w0 = pos / 8;
            for (d, w) in dst[out..out + whole * 8].chunks_exact_mut(8).zip(&words[w0..w0 + whole]) {
                d.copy_from_slice(&w.load(Relaxed).to_ne_bytes());
            }
            out += whole * 8;
            pos += whole * 8;
        }
        // Tail: a partial word, or the borrowed bytes no word covers.
        if out < dst.len() {
            if pos < word_bytes {
                let n = dst.len() - out;
                let bytes = words[pos / 8].load(Relaxed).to_ne_bytes();
                dst[out..].copy_from_slice(&bytes[..n]);
            } else {
                for (i, d) in dst[out..].iter_mut().enumerate() {
                    *d = self.tail()[pos - word_bytes + i].load(Relaxed);
                }
            }
        }
    }

    /// Merges `src` into word `w` at byte `b` (partial word) in one atomic step: the word's
    /// other bytes stay as concurrent writers left them, and a reader sees the old bytes or
    /// the new ones, never a mix. (A `fetch_and` that cleared them and a `fetch_or` that set
    /// them let a reader in between see zeros: an application spinning on a 4-byte counter
    /// the peer WRITEs saw it drop to 0.)
    fn merge(word: &AtomicU64, b: usize, src: &[u8]) {
        let mut v = [0u8; 8];
        let mut m = [0u8; 8];
        v[b..b + src.len()].copy_from_slice(src);
        m[b..b + src.len()].fill(0xff);
        let (v, m) = (u64::from_ne_bytes(v), u64::from_ne_bytes(m));
        let _ = word.fetch_update(Relaxed, Relaxed, |w| Some((w & !m) | v));
    }

    /// Writes `src` starting at byte `off` (bounds checked by the caller). Whole words are
    /// stored; partial words are merged (see `merge`).
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        let head = self.head();
        let n = head.len().saturating_sub(off).min(src.len());
        for (s, h) in src[..n].iter().zip(&head[off.min(head.len())..]) {
            h.store(*s, Relaxed);
        }
        if n < src.len() {
            self.write_words(off + n - head.len(), &src[n..]);
        }
    }

    /// [`AtomicBytes::write`] from the first word on (`off` counted from it).
    fn write_words(&self, off: usize, src: &[u8]) {
        let words = self.words();
        let word_bytes = words.len() * 8;
        let (mut pos, mut done) = (off, 0);
        if pos % 8 != 0 && pos < word_bytes {
            let b = pos % 8;
            let n = (8 - b).min(src.len());
            Self::merge(&words[pos / 8], b, &src[..n]);
            done += n;
            pos += n;
        }
        let whole = ((src.len() - done) / 8).min(word_bytes.saturating_sub(pos) / 8);
        if whole > 0 {
            let w0 = pos / 8;
            for (s, w) in src[done..done + whole * 8].chunks_exact(8).zip(&words[w0..w0 + whole]) {
                let mut v = [0u8; 8];
                v.copy_from_slice(s);
                w.store(u64::from_ne_bytes(v), Relaxed);
            }
            done += whole * 8;
            pos += whole * 8;
        }
        if done < src.len() {
            if pos < word_bytes {
                Self::merge(&words[pos / 8], 0, &src[done..]);
            } else {
                for (i, s) in src[done..].iter().enumerate() {
                    self.tail()[pos - word_bytes + i].store(*s, Relaxed);
                }
            }
        }
    }

    /// Fills `len` bytes at `off` with `byte`.
    pub(crate) fn fill(&self, off: usize, len: usize, byte: u8) {
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(off + done, &chunk[..n]);
            done += n;
        }
    }

    /// The word at byte `off`, if an aligned word of memory starts there (8-byte aligned
    /// addresses: RDMA atomics need them).
    pub(crate) fn word(&self, off: usize) -> Option<&AtomicU64> {
        let w = off.checked_sub(self.head().len())?;
        if !w.is_multiple_of(8) || off + 8 > self.len {
            return None;
        }
        self.words().get(w / 8)
    }
}

/// What the engine and the application share about one region.
pub(crate) struct MrInner {
    pub pd: u32,
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub access: Access,
    /// Shared with the region's earlier incarnations when `ibv_rereg_mr` changed its PD or
    /// access (the memory and the keys stay; the table entry is replaced).
    pub bytes: Arc<AtomicBytes>,
    /// Cleared when a SEND with invalidate invalidated the rkey.
    pub rkey_valid: AtomicBool,
    pub remote_invalidate: bool,
}

impl MrInner {
    /// Byte offset of `[addr, addr+len)` inside the region, if it is inside.
    fn offset(&self, addr: u64, len: u64) -> Result<usize, MemError> {
        let off = addr.checked_sub(self.addr).ok_or(MemError::OutOfBounds)?;
        let end = off.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > self.bytes.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        Ok(off as usize)
    }
}

/// Multiplicative hashing for random 32-bit keys (they need no SipHash).
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ *b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Default, Clone, Copy)]
pub(crate) struct KeyBuild;
impl BuildHasher for KeyBuild {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// The kind of a memory window (`enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// `IBV_MW_TYPE_1`: bound with [`QueuePair::bind_mw`](crate::verbs::QueuePair::bind_mw) (`ibv_bind_mw`), usable
    /// from any QP of its PD, unbound by a zero-length bind.
    Type1,
    /// `IBV_MW_TYPE_2` (type 2B, as rxe): bound with an [`crate::transport::SendOp::BindMw`]
    /// work request, answers only the QP that bound it, invalidated by a local invalidate or
    /// a peer's SEND with invalidate.
    Type2,
}

impl MwType {
    /// The ibverbs value (1 or 2).
    pub fn value(self) -> u32 {
        match self {
            MwType::Type1 => 1,
            MwType::Type2 => 2,
        }
    }
}

/// Where a window is in its life (rxe's `RXE_MW_STATE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MwPhase {
    /// Bound (type 1: also allocated and not yet bound, with length 0).
    Valid,
    /// A type 2 window not bound (allocated or invalidated).
    Free,
}

/// What a window currently opens.
#[derive(Clone)]
pub(crate) struct MwState {
    pub rkey: u32,
    pub phase: MwPhase,
    pub access: Access,
    pub addr: u64,
    pub length: u64,
    /// The region the window opens (its key and its bytes, so that a region deregistered
    /// and a new one under a reused key are never confused).
    pub mr: Option<(u32, Arc<AtomicBytes>)>,
    /// The QP a type 2 window was bound from.
    pub qpn: Option<u32>,
}

/// A memory window as the engine and the application share it.
pub(crate) struct MwInner {
    pub pd: u32,
    pub mw_type: MwType,
    pub state: parking_lot::Mutex<MwState>,
}

enum Entry {
    Mr(Arc<MrInner>),
    Mw(Arc<MwInner>),
}

/// The registered regions and allocated memory windows of a device, by key index.
///
/// A region has one key, used both as lkey and as rkey (as kernel rxe does since Linux 6.0:
/// `rxe_mr_init` sets both to the same value whatever the access). A region without remote
/// access rights still has its rkey, and remote requests naming it are refused for the
/// missing right, so `ibv_rereg_mr` can grant or withdraw remote access without changing
/// the keys the application already handed out.
///
/// As in rxe, a key is an index (its upper 24 bits) and an 8-bit key: a window keeps its
/// index and takes a new 8-bit key at every bind, so an rkey handed out for an earlier bind
/// stops working. Indexes are unique across regions and windows, so a key names at most one
/// object; lookups compare the whole key.
#[derive(Default)]
pub(crate) struct MrTable {
    by_index: HashMap<u32, Entry, KeyBuild>,
    regions: usize,
    windows: usize,
}

impl MrTable {
    /// Registered regions.
    pub(crate) fn len(&self) -> usize {
        self.regions
    }

    /// Allocated memory windows.
    pub(crate) fn windows(&self) -> usize {
        self.windows
    }

    /// A random key whose index no region or window has.
    fn fresh_key(&self) -> u32 {
        loop {
            let k = crate::engine::random::u32();
            if k >> 8 != 0 && !self.by_index.contains_key(&(k >> 8)) {
                break k;
            }
        }
    }

    /// Inserts a region under a fresh random key (lkey = rkey); returns the region.
    pub(crate) fn insert(
        &mut self,
        pd: u32,
        addr: u64,
        access: Access,
        bytes: AtomicBytes,
        remote_invalidate: bool,
    ) -> Arc<MrInner> {
        let key = self.fresh_key();
        let mr = Arc::new(MrInner {
            pd,
            lkey: key,
            rkey: key,
            addr,
            access,
            bytes: Arc::new(bytes),
            rkey_valid: AtomicBool::new(true),
            remote_invalidate,
        });
        self.by_index.insert(key >> 8, Entry::Mr(mr.clone()));
        self.regions += 1;
        mr
    }

    /// Allocates a memory window of protection domain `pd` (`ibv_alloc_mw`): a type 1 window
    /// starts valid with nothing bound, a type 2 window free.
    pub(crate) fn insert_mw(&mut self, pd: u32, mw_type: MwType) -> Arc<MwInner> {
        let rkey = self.fresh_key();
        let phase = if mw_type == MwType::Type1 { MwPhase::Valid } else { MwPhase::Free };
        let mw = Arc::new(MwInner {
            pd,
            mw_type,
            state: parking_lot::Mutex::new(MwState {
                rkey,
                phase,
                access: Access::NONE,
                addr: 0,
                length: 0,
                mr: None,
                qpn: None,
            }),
        });
        self.by_index.insert(rkey >> 8, Entry::Mw(mw.clone()));
        self.windows += 1;
        mw
    }

    /// How many windows are bound to the region registered under `lkey` (rxe's `num_mw`).
    /// Scans the windows only when there are any.
    pub(crate) fn windows_bound_to(&self, lkey: u32) -> usize {
        if self.windows == 0 {
            return 0;
        }
        self.by_index
            .values()
            .filter(|e| match e {
                Entry::Mw(mw) => {
                    let st = mw.state.lock();
                    st.phase == MwPhase::Valid
                        && st.length > 0
                        && st.mr.as_ref().is_some_and(|(k, _)| *k == lkey)
                }
                Entry::Mr(_) => false,
            })
            .count()
    }

    /// Deallocates the window `mw` (`ibv_dealloc_mw`): its rkey stops working at once.
    pub(crate) fn remove_mw(&mut self, mw: &Arc<MwInner>) {
        let index = mw.state.lock().rkey >> 8;
        if let Some(Entry::Mw(m)) = self.by_index.get(&index)
            && Arc::ptr_eq(m, mw)
        {
            self.by_index.remove(&index);
            self.windows -= 1;
        }
    }

    /// Moves the region registered under `key` to protection domain `pd` and/or gives it the
    /// rights `access`, keeping its memory and keys (rxe's `rereg_user_mr` for
    /// `IB_MR_REREG_PD`/`IB_MR_REREG_ACCESS`). Work requests and packets processed after this
    /// call see the new PD and rights. Returns the region's new description.
    pub(crate) fn rereg(
        &mut self,
        key: u32,
        pd: Option<u32>,
        access: Option<Access>,
    ) -> Option<Arc<MrInner>> {
        let old = self.region(key)?;
        let mr = Arc::new(MrInner {
            pd: pd.unwrap_or(old.pd),
            lkey: old.lkey,
            rkey: old.rkey,
            addr: old.addr,
            access: access.unwrap_or(old.access),
            bytes: old.bytes.clone(),
            rkey_valid: AtomicBool::new(old.rkey_valid.load(Relaxed)),
            remote_invalidate: old.remote_invalidate,
        });
        self.by_index.insert(key >> 8, Entry::Mr(mr.clone()));
        Some(mr)
    }

    pub(crate) fn remove(&mut self, lkey: u32) {
        if self.region(lkey).is_some() {
            self.by_index.remove(&(lkey >> 8));
            self.regions -= 1;
        }
    }

    /// The region whose key is exactly `key`.
    fn region(&self, key: u32) -> Option<&Arc<MrInner>> {
        match self.by_index.get(&(key >> 8)) {
            Some(Entry::Mr(mr)) if mr.lkey == key => Some(mr),
            _ => None,
        }
    }

    /// The window whose current rkey is exactly `rkey`, with its state locked.
    fn window(&self, rkey: u32) -> Option<(&MwInner, parking_lot::MutexGuard<'_, MwState>)> {
        match self.by_index.get(&(rkey >> 8)) {
            Some(Entry::Mw(mw)) => {
                let st = mw.state.lock();
                (st.rkey == rkey).then_some((&**mw, st))
            }
            _ => None,
        }
    }

    pub(crate) fn local(&self, pd: u32, lkey: u32) -> Result<&MrInner, MemError> {
        let mr = self.region(lkey).ok_or(MemError::InvalidKey)?;
        if mr.pd != pd {
            return Err(MemError::PdMismatch);
        }
        Ok(mr)
    }

    /// Resolves a remote access of `len` bytes at `addr` under `rkey` needing `need`: the
    /// region whose bytes are reached and the byte offset in it. A window's checks are rxe's
    /// `rxe_lookup_mw` (same PD, a type 2 window only for the QP that bound it, bound and
    /// not empty, the rights) plus the window's range (zero-based windows count `addr` from
    /// their first byte).
    fn remote(
        &self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<(&MrInner, usize), MemError> {
        match self.by_index.get(&(rkey >> 8)) {
            Some(Entry::Mr(mr)) if mr.rkey == rkey => {
                if !mr.rkey_valid.load(Relaxed) {
                    return Err(MemError::InvalidKey);
                }
                if mr.pd != pd {
                    return Err(MemError::PdMismatch);
                }
                if !mr.access.contains(need) {
                    return Err(MemError::AccessDenied);
                }
                Ok((mr, mr.offset(addr, len)?))
            }
            Some(Entry::Mw(mw)) => {
                let st = mw.state.lock();
                if st.rkey != rkey || st.phase != MwPhase::Valid || st.length == 0 {
                    return Err(MemError::InvalidKey);
                }
                if mw.pd != pd {
                    return Err(MemError::PdMismatch);
                }
                if mw.mw_type == MwType::Type2 && st.qpn != Some(qpn) {
                    return Err(MemError::InvalidKey);
                }
                if !st.access.contains(need) {
                    return Err(MemError::AccessDenied);
                }
                let va = if st.access.contains(Access::ZERO_BASED) {
                    st.addr.checked_add(addr).ok_or(MemError::OutOfBounds)?
                } else {
                    addr
                };
                let end = va.checked_add(len).ok_or(MemError::OutOfBounds)?;
                if va < st.addr || st.addr.checked_add(st.length).is_none_or(|e| end > e) {
                    return Err(MemError::OutOfBounds);
                }
                let (mr_key, bytes) = st.mr.as_ref().ok_or(MemError::InvalidKey)?;
                // The region must still be registered (a deregistered region's memory may
                // be gone: ibverbs programs free it).
                let mr = self.region(*mr_key).ok_or(MemError::InvalidKey)?;
                if !Arc::ptr_eq(&mr.bytes, bytes) {
                    return Err(MemError::InvalidKey);
                }
                Ok((mr, mr.offset(va, len)?))
            }
            _ => Err(MemError::InvalidKey),
        }
    }

    /// Invalidates the type 2 window or the invalidatable region named by `rkey` (rxe's
    /// `rxe_invalidate_mw` / `rxe_invalidate_mr`).
    fn invalidate(&self, pd: u32, qpn: u32, rkey: u32, remote: bool) -> Result<(), MemError> {
        if let Some((mw, mut st)) = self.window(rkey) {
            // o10-37.2.26: a type 1 window cannot be invalidated; a remote invalidation must
            // come through the QP the window was bound from.
            if mw.mw_type == MwType::Type1 || st.phase != MwPhase::Valid || (remote && st.qpn != Some(qpn)) {
                return Err(MemError::BadWindow);
            }
            *st = MwState {
                rkey: st.rkey,
                phase: MwPhase::Free,
                access: Access::NONE,
                addr: 0,
                length: 0,
                mr: None,
                qpn: None,
            };
            return Ok(());
        }
        let mr = self.region(rkey).ok_or(MemError::InvalidKey)?;
        if mr.pd != pd {
            return Err(MemError::PdMismatch);
        }
        if !mr.remote_invalidate {
            return Err(MemError::AccessDenied);
        }
        mr.rkey_valid.store(false, Relaxed);
        Ok(())
    }
}

impl Memory for MrTable {
    fn read_local(&self, pd: u32, lkey: u32, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let mr = self.local(pd, lkey)?;
        let off = mr.offset(addr, dst.len() as u64)?;
        mr.bytes.read(off, dst);
        Ok(())
    }
    fn write_local(&self, pd: u32, lkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let mr = self.local(pd, lkey)?;
        if !mr.access.contains(Access::LOCAL_WRITE) {
            return Err(MemError::AccessDenied);
        }
        let off = mr.offset(addr, src.len() as u64)?;
        mr.bytes.write(off, src);
        Ok(())
    }
    fn check_remote(
        &self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(), MemError> {
        self.remote(pd, qpn, rkey, addr, len, access).map(|_| ())
    }
    fn read_remote(&self, pd: u32, qpn: u32, rkey: u32, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (mr, off) = self.remote(pd, qpn, rkey, addr, dst.len() as u64, Access::REMOTE_READ)?;
        mr.bytes.read(off, dst);
        Ok(())
    }
    fn write_remote(&self, pd: u32, qpn: u32, rkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let (mr, off) = self.remote(pd, qpn, rkey, addr, src.len() as u64, Access::REMOTE_WRITE)?;
        mr.bytes.write(off, src);
        Ok(())
    }
    fn atomic_remote(&self, pd: u32, qpn: u32, rkey: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        let (mr, off) = self.remote(pd, qpn, rkey, addr, 8, Access::REMOTE_ATOMIC)?;
        let word = mr.bytes.word(off).ok_or(MemError::Misaligned)?;
        Ok(match op {
            AtomicOp::CompareSwap { compare, swap } => {
                word.compare_exchange(compare, swap, Relaxed, Relaxed).unwrap_or_else(|v| v)
            }
            AtomicOp::FetchAdd { add } => word.fetch_add(add, Relaxed),
        })
    }
    fn invalidate_remote(&self, pd: u32, qpn: u32, rkey: u32) -> Result<(), MemError> {
        self.invalidate(pd, qpn, rkey, true)
    }
    fn invalidate_local(&self, pd: u32, qpn: u32, rkey: u32) -> Result<(), MemError> {
        self.invalidate(pd, qpn, rkey, false)
    }
    /// rxe's `rxe_check_bind_mw` + `rxe_do_bind_mw`, with one check more: the region must be
    /// of the window's protection domain (IBTA C10-71; rxe leaves it out).
    fn bind_mw(&self, pd: u32, qpn: u32, b: &MwBind) -> Result<(), MemError> {
        let (mw, mut st) = self.window(b.mw_rkey.value()).ok_or(MemError::BadWindow)?;
        let access = b.access;
        // Local write and MW bind in a window's rights mean nothing and are accepted, as
        // rxe does (pyverbs binds with LOCAL_WRITE | REMOTE_WRITE).
        if mw.pd != pd {
            return Err(MemError::BadWindow);
        }
        let mr =
            if b.length != 0 { Some(self.region(b.lkey.value()).ok_or(MemError::BadWindow)?) } else { None };
        match mw.mw_type {
            MwType::Type1 => {
                if st.phase != MwPhase::Valid || access.contains(Access::ZERO_BASED) {
                    return Err(MemError::BadWindow);
                }
            }
            MwType::Type2 => {
                if st.phase != MwPhase::Free || mr.is_none() {
                    return Err(MemError::BadWindow);
                }
            }
        }
        if let Some(mr) = mr {
            let writable = access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC);
            // A zero-based window too must lie inside the region (rxe checks only its
            // length; the window's own range then bounds every access).
            let inside = b.addr >= mr.addr
                && b.addr.checked_add(b.length).is_some_and(|end| end <= mr.addr + mr.bytes.len() as u64);
            if mr.pd != mw.pd
                || mr.access.contains(Access::ZERO_BASED)
                || !mr.access.contains(Access::MW_BIND)
                || (writable && !mr.access.contains(Access::LOCAL_WRITE))
                || !inside
            {
                return Err(MemError::BadWindow);
            }
        }
        *st = MwState {
            rkey: (st.rkey & !0xff) | (b.new_rkey.value() & 0xff),
            phase: MwPhase::Valid,
            access,
            addr: b.addr,
            length: b.length,
            mr: mr.map(|m| (m.lkey, m.bytes.clone())),
            qpn: (mw.mw_type == MwType::Type2).then_some(qpn),
        };
        Ok(())
    }
}

pub(crate) fn new_owned_bytes(len: usize) -> Option<AtomicBytes> {
    AtomicBytes::owned(len)
}

/// # Safety
/// See [`super::ProtectionDomain::register_raw`].
pub(crate) unsafe fn new_borrowed_bytes(ptr: *mut u8, len: usize) -> AtomicBytes {
    // SAFETY: forwarded from the caller.
    unsafe { AtomicBytes::borrowed(ptr, len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_reads_and_writes() {
        let b = AtomicBytes::owned(37).unwrap();
        let data: Vec<u8> = (0..37).collect();
        b.write(0, &data);
        for off in 0..37 {
            for len in 0..(37 - off) {
                let mut out = vec![0; len];
                b.read(off, &mut out);
                assert_eq!(out, &data[off..off + len]);
            }
        }
        b.write(3, &[0xaa; 11]);
        let mut out = vec![0; 37];
        b.read(0, &mut out);
        assert_eq!(&out[..3], &data[..3]);
        assert_eq!(&out[3..14], &[0xaa; 11]);
        assert_eq!(&out[14..], &data[14..]);
    }

    /// A write of part of a word is one atomic step: a reader spinning on those bytes sees
    /// the old value or the new one, never the zeros of a clear-then-set.
    #[test]
    fn a_partial_word_write_never_shows_bytes_nobody_wrote() {
        let b = std::sync::Arc::new(AtomicBytes::owned(64).unwrap());
        b.write(0, &[0x5a; 64]);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let writer = {
            let (b, stop) = (b.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut k = 0u32;
                while !stop.load(Relaxed) {
                    b.write(8, &(k % 2 + 1).to_le_bytes());
                    k = k.wrapping_add(1);
                }
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
        let mut bad = None;
        while bad.is_none() && std::time::Instant::now() < deadline {
            for _ in 0..10_000 {
                let mut got = [0u8; 8];
                b.read(8, &mut got);
                let v = u32::from_le_bytes(got[..4].try_into().unwrap());
                if !(v == 1 || v == 2 || v == 0x5a5a_5a5a) || got[4..] != [0x5a; 4] {
                    bad = Some(got);
                    break;
                }
            }
        }
        stop.store(true, Relaxed);
        writer.join().unwrap();
        assert_eq!(bad, None, "a read saw bytes nobody wrote");
    }

    #[test]
    fn borrowed_tail() {
        let mut backing = vec![0u64; 3];
        let ptr = backing.as_mut_ptr() as *mut u8;
        // SAFETY: 8-aligned, 21 valid bytes, accessed only through `b` in this test.
        let b = unsafe { AtomicBytes::borrowed(ptr, 21) };
        let data: Vec<u8> = (100..121).collect();
        b.write(0, &data);
        let mut out = vec![0; 21];
        b.read(0, &mut out);
        assert_eq!(out, data);
        b.write(15, &[1, 2, 3, 4, 5, 6]);
        b.read(14, &mut out[..7]);
        assert_eq!(&out[..7], &[114, 1, 2, 3, 4, 5, 6]);
        assert!(b.word(16).is_none(), "the tail has no whole word");
        assert!(b.word(8).is_some());
    }

    #[test]
    fn borrowed_unaligned_head() {
        let mut backing = vec![0u64; 4];
        let base = backing.as_mut_ptr() as *mut u8;
        // SAFETY: 27 valid bytes from offset 3, accessed only through `b` in this test.
        let b = unsafe { AtomicBytes::borrowed(base.add(3), 27) };
        assert_eq!(b.addr(), base as u64 + 3);
        let data: Vec<u8> = (1..28).collect();
        b.write(0, &data);
        let mut out = vec![0; 27];
        b.read(0, &mut out);
        assert_eq!(out, data);
        b.read(2, &mut out[..4]);
        assert_eq!(&out[..4], &[3, 4, 5, 6]);
        // Words only where memory is 8-byte aligned: region offsets 5, 13; not 0 or 8.
        assert!(b.word(0).is_none() && b.word(8).is_none() && b.word(3).is_none());
        assert!(b.word(5).is_some() && b.word(13).is_some());
        assert!(b.word(21).is_none(), "a word past the end");
        assert_eq!(b.word(5).unwrap().load(Relaxed).to_ne_bytes(), [6, 7, 8, 9, 10, 11, 12, 13]);
    }

    proptest::proptest! {
        /// Reads and writes at any offset and length behave like a plain byte vector, for
        /// owned storage and for borrowed storage with a tail of loose bytes.
        #[test]
        fn behaves_like_a_vec(
            len in 1usize..200,
            borrowed in proptest::bool::ANY,
            shift in 0usize..8,
            ops in proptest::collection::vec((0usize..200, 0usize..80, proptest::num::u8::ANY, proptest::bool::ANY), 1..40),
        ) {
            let mut backing = vec![0u64; (len + shift).div_ceil(8)];
            let b = if borrowed {
                // SAFETY: `len` valid bytes from `shift` on (any alignment), only accessed
                // through `b` below.
                unsafe { AtomicBytes::borrowed((backing.as_mut_ptr() as *mut u8).add(shift), len) }
            } else {
                AtomicBytes::owned(len).unwrap()
            };
            let mut model = vec![0u8; len];
            for (off, n, seed, is_write) in ops {
                let off = off % len;
                let n = n.min(len - off);
                if is_write {
                    let data: Vec<u8> = (0..n).map(|i| seed.wrapping_add(i as u8)).collect();
                    b.write(off, &data);
                    model[off..off + n].copy_from_slice(&data);
                } else {
                    let mut out = vec![0xaa; n];
                    b.read(off, &mut out);
                    proptest::prop_assert_eq!(&out[..], &model[off..off + n]);
                }
            }
            let mut all = vec![0u8; len];
            b.read(0, &mut all);
            proptest::prop_assert_eq!(all, model);
        }
    }

    #[test]
    fn concurrent_partial_writes_keep_neighbours() {
        let b = Arc::new(AtomicBytes::owned(8).unwrap());
        let t: Vec<_> = (0..8u8)
            .map(|i| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        b.write(i as usize, &[i + 1]);
                    }
                })
            })
            .collect();
        t.into_iter().for_each(|h| h.join().unwrap());
        let mut out = [0u8; 8];
        b.read(0, &mut out);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
