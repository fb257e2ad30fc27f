//! The rsocket functions (`RDMACM_1.0`): softroce has no rsockets. `rsocket` fails with
//! `ENOSYS`; a call on a descriptor fails with `EBADF` (no descriptor is an rsocket); `rpoll`
//! and `rselect`, which the real library also lets work on ordinary descriptors, are `poll`
//! and `select` — the rdmacm-utils programs import `rpoll` only because of BIND_NOW.

use libc::{c_int, c_void, off_t, size_t, sockaddr, socklen_t, ssize_t};

use crate::util::set_errno;

fn ebadf<T: From<i8>>() -> T {
    set_errno(libc::EBADF);
    T::from(-1)
}

/// `rsocket`: -1 + `ENOSYS`.
pub extern "C" fn rsocket(_domain: c_int, _ty: c_int, _proto: c_int) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

macro_rules! no_rsocket {
    ($( $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty; )*) => {$(
        #[doc = concat!("`", stringify!($name), "`: -1 + `EBADF` (no descriptor is an rsocket).")]
        pub extern "C" fn $name(_fd: c_int, $(_: $t),*) -> $r {
            ebadf()
        }
    )*};
}

no_rsocket! {
    rbind(a: *const sockaddr, b: socklen_t) -> c_int;
    rlisten(a: c_int) -> c_int;
    raccept(a: *mut sockaddr, b: *mut socklen_t) -> c_int;
    rconnect(a: *const sockaddr, b: socklen_t) -> c_int;
    rshutdown(a: c_int) -> c_int;
    rclose() -> c_int;
    rrecv(a: *mut c_void, b: size_t, c: c_int) -> ssize_t;
    rrecvfrom(a: *mut c_void, b: size_t, c: c_int, d: *mut sockaddr, e: *mut socklen_t) -> ssize_t;
    rrecvmsg(a: *mut libc::msghdr, b: c_int) -> ssize_t;
    rsend(a: *const c_void, b: size_t, c: c_int) -> ssize_t;
    rsendto(a: *const c_void, b: size_t, c: c_int, d: *const sockaddr, e: socklen_t) -> ssize_t;
    rsendmsg(a: *const libc::msghdr, b: c_int) -> ssize_t;
    rread(a: *mut c_void, b: size_t) -> ssize_t;
    rreadv(a: *const libc::iovec, b: c_int) -> ssize_t;
    rwrite(a: *const c_void, b: size_t) -> ssize_t;
    rwritev(a: *const libc::iovec, b: c_int) -> ssize_t;
    rgetpeername(a: *mut sockaddr, b: *mut socklen_t) -> c_int;
    rgetsockname(a: *mut sockaddr, b: *mut socklen_t) -> c_int;
    rsetsockopt(a: c_int, b: c_int, c: *const c_void, d: socklen_t) -> c_int;
    rgetsockopt(a: c_int, b: c_int, c: *mut c_void, d: *mut socklen_t) -> c_int;
    rfcntl(a: c_int, b: libc::c_long) -> c_int;
    riomap(a: *mut c_void, b: size_t, c: c_int, d: c_int, e: off_t) -> off_t;
    riounmap(a: *mut c_void, b: size_t) -> c_int;
    riowrite(a: *const c_void, b: size_t, c: off_t, d: c_int) -> ssize_t;
}

/// `rpoll`: `poll` (no descriptor is an rsocket).
///
/// # Safety
/// As `poll`.
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: per the caller.
    unsafe { libc::poll(fds, nfds, timeout) }
}

/// `rselect`: `select`.
///
/// # Safety
/// As `select`.
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: per the caller.
    unsafe { libc::select(nfds, r, w, e, t) }
}
