//! How every object handed to C is laid out: the C struct first, the Rust object behind it.
//!
//! ```text
//! Obj<ibv_pd, Pd>  (repr C, boxed, never moves)
//!   +0   ibv_pd   <- the pointer the application holds; its `context` is our ibv_context
//!   +16  magic    (per object kind)
//!   +24  Pd       the Rust side (e.g. a softroce::verbs::ProtectionDomain)
//! ```
//!
//! The header inlines dereference only the C part (`qp->context->ops.post_send`,
//! `cq_ex->start_poll`, `mr->lkey`, …); our slot functions get the C pointer back and reach the
//! Rust side with [`Obj::from_c`]. The C part of objects with a mutex/cond (CQ, QP, SRQ, WQ)
//! must be initialised in place after boxing (`pthread_*_init`), as [`Obj::into_c`] leaves it
//! as given.
//!
//! The context is the one exception to "C struct first": its `ibv_context` sits at offset
//! 320 inside the `verbs_context` (see [`crate::context`]).

/// A fresh `handle` for a C object (the kernel's per-object handle; only uniqueness matters).
pub fn next_handle() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// How many objects use a PD, CQ or SRQ: the kernel refuses to destroy one still in use
/// (`EBUSY`), and so does this library. Each child holds one count from its creation to its
/// destruction (a QP holds its PD, both CQs and its SRQ).
#[derive(Debug, Default)]
pub struct Users(std::sync::atomic::AtomicUsize);

impl Users {
    /// A child was made.
    pub fn hold(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    /// A child went away.
    pub fn release(&self) {
        let _ = self.0.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |n| n.checked_sub(1),
        );
    }
    /// Whether some child still uses the object (destroy: `EBUSY`).
    pub fn busy(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst) > 0
    }
}

/// A C struct with its Rust object behind it.
#[repr(C)]
pub struct Obj<C, R> {
    /// The part C sees; must stay first.
    pub c: C,
    magic: u64,
    /// The Rust side.
    pub rust: R,
}

impl<C, R> Obj<C, R> {
    /// Boxes `c` and `rust` together and returns the pointer to hand to C. `magic` identifies
    /// the object kind (any constant distinct per kind).
    pub fn into_c(c: C, magic: u64, rust: R) -> *mut C {
        Box::into_raw(Box::new(Obj { c, magic, rust })).cast::<C>()
    }

    /// The object behind a pointer [`Obj::into_c`] returned with this `magic`, or `None` (NULL, or
    /// the magic differs: not ours, another kind, or destroyed).
    ///
    /// # Safety
    /// `p` is NULL or points to a `C` that is the start of an `Obj<C, R>` or of another object
    /// at least as large (anything else is undefined, as with the real library).
    pub unsafe fn from_c<'a>(p: *const C, magic: u64) -> Option<&'a Obj<C, R>> {
        if p.is_null() || !(p as usize).is_multiple_of(std::mem::align_of::<Self>()) {
            return None;
        }
        let o = p.cast::<Obj<C, R>>();
        // SAFETY: per the caller, `o` points to a live Obj (or an equally large object).
        unsafe { ((*o).magic == magic).then(|| &*o) }
    }

    /// Takes the object back from C (destroy): the box, with the magic cleared so a stale
    /// pointer is refused.
    ///
    /// # Safety
    /// `p` came from [`Obj::into_c`] with this `magic`, and C will not use it again.
    pub unsafe fn take(p: *mut C, magic: u64) -> Option<Box<Obj<C, R>>> {
        // SAFETY: per the caller.
        unsafe { Self::from_c(p, magic)? };
        // SAFETY: p came from Box::into_raw of an Obj<C, R>.
        let mut b = unsafe { Box::from_raw(p.cast::<Obj<C, R>>()) };
        b.magic = 0;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::ibv_pd;

    #[test]
    fn the_c_part_is_first_and_magic_guards() {
        const PD: u64 = 0x5044;
        let c = ibv_pd { context: std::ptr::null_mut(), handle: 7 };
        let p = Obj::<ibv_pd, String>::into_c(c, PD, "rust side".into());
        // SAFETY: p came from Obj::into_c.
        unsafe {
            assert_eq!((*p).handle, 7);
            assert_eq!(Obj::<ibv_pd, String>::from_c(p, PD).unwrap().rust, "rust side");
            assert!(Obj::<ibv_pd, String>::from_c(p, PD + 1).is_none());
            let b = Obj::<ibv_pd, String>::take(p, PD).unwrap();
            assert_eq!(b.rust, "rust side");
        }
    }
}
