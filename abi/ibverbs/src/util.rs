//! errno, panic containment and the three ways libibverbs reports errors (ABI note §2.7).
//!
//! Every exported function runs its body inside [`guard`]: a panic (a bug here, never bad
//! input) is caught, printed by the panic hook, and turned into the function's failure value
//! with `errno = EIO`, so that no Rust unwind ever reaches C. Blocking reads that a
//! `pthread_cancel` may interrupt happen *outside* the guard, in frames with nothing to drop
//! (see `context::ibv_get_async_event`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use libc::c_int;

/// An errno value (positive).
pub type Errno = c_int;

/// Sets the calling thread's `errno`.
pub fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno`.
pub fn errno() -> Errno {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

/// Runs `f`; a panic becomes `fail` with `errno = EIO`.
pub fn guard<R>(fail: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            fail
        }
    }
}

/// Pointer style: the pointer, or NULL with `errno` set.
pub fn ptr_or_errno<T>(f: impl FnOnce() -> Result<*mut T, Errno>) -> *mut T {
    guard(std::ptr::null_mut(), || match f() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// "0 or a positive errno value" style (errno is set too, as some callers read it).
pub fn zero_or_errno(f: impl FnOnce() -> Result<(), Errno>) -> c_int {
    guard(libc::EIO, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    })
}

/// "-1 with errno" style.
pub fn zero_or_minus1(f: impl FnOnce() -> Result<(), Errno>) -> c_int {
    guard(-1, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// The errno the real library would give for a softroce error.
pub fn errno_of(e: &softroce::verbs::Error) -> Errno {
    e.errno()
}

/// Copies a Rust string into a fixed C `char` array, truncated, NUL-terminated.
pub fn copy_cstr(dst: &mut [libc::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as libc::c_char;
    }
    for d in dst[n..].iter_mut() {
        *d = 0;
    }
}

/// Reads a NUL-terminated C string (lossily), or `None` for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub unsafe fn cstr<'a>(p: *const libc::c_char) -> Option<std::borrow::Cow<'a, str>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller promises a NUL-terminated string.
    Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_eio() {
        let r = zero_or_errno(|| panic!("a bug"));
        assert_eq!(r, libc::EIO);
        assert_eq!(errno(), libc::EIO);
        let p: *mut u8 = ptr_or_errno(|| Err(libc::EOPNOTSUPP));
        assert!(p.is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!(zero_or_minus1(|| Err(libc::EINVAL)), -1);
        assert_eq!(errno(), libc::EINVAL);
    }

    #[test]
    fn cstr_copies_truncate() {
        let mut a = [1 as libc::c_char; 4];
        copy_cstr(&mut a, "softroce0");
        assert_eq!(a.map(|c| c as u8), *b"sof\0");
        copy_cstr(&mut a, "x");
        assert_eq!(a.map(|c| c as u8), *b"x\0\0\0");
    }
}
