//! The rsocket functions (`RDMACM_1.0`): the C side of [`softroce::rsocket`] (argument
//! translation, `errno`, and [`call`] around every body: no panic reaches C; `errno` is left
//! alone on success). Design: `docs/design/rsockets.md`.

use std::net::SocketAddr;
use std::sync::OnceLock;

use libc::{c_int, c_void, off_t, size_t, sockaddr, socklen_t, ssize_t};

use softroce::rsocket::{calls, poll, table};

use crate::util::{Errno, errno, guard, set_errno};

/// Runs an rsocket call: `fail` (and `errno`) on error or panic, `errno` untouched on
/// success, the thread marked as inside the library meanwhile.
fn call<T: Copy>(fail: T, f: impl FnOnce() -> Result<T, Errno>) -> T {
    let saved = errno();
    let _inside = table::InCall::enter();
    guard(fail, || match f() {
        Ok(v) => {
            set_errno(saved);
            v
        }
        Err(e) => {
            set_errno(e);
            fail
        }
    })
}

/// An address argument (`addr`, `addrlen`): `AF_INET` or `AF_INET6`, long enough.
///
/// # Safety
/// `addr` is NULL or points to `len` readable bytes.
unsafe fn addr_in(addr: *const sockaddr, len: socklen_t) -> Result<SocketAddr, Errno> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least the family is readable.
    let need = match c_int::from(unsafe { (*addr).sa_family }) {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => return Err(libc::EAFNOSUPPORT),
    };
    if (len as usize) < need {
        return Err(libc::EINVAL);
    }
    // SAFETY: the whole sockaddr of its family is readable.
    unsafe { super::sockaddr_to(addr) }?.ok_or(libc::EFAULT)
}

/// Writes an address out as rdma-core's `rs_copy_addr` does: at most `*len` bytes of it,
/// then `*len` = its full size. `None` is the family `domain` with nothing in it.
///
/// # Safety
/// `addr` is NULL or points to `*len` writable bytes; `len` is NULL or valid.
unsafe fn addr_out(a: Option<SocketAddr>, domain: c_int, addr: *mut sockaddr, len: *mut socklen_t) {
    if len.is_null() {
        return;
    }
    // SAFETY: sockaddr_storage is plain data: all-zero is valid.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let full = match a {
        Some(a) => super::write_sockaddr(&mut st, Some(a)),
        None => {
            st.ss_family = domain as libc::sa_family_t;
            if domain == libc::AF_INET6 {
                std::mem::size_of::<libc::sockaddr_in6>() as socklen_t
            } else {
                std::mem::size_of::<libc::sockaddr_in>() as socklen_t
            }
        }
    };
    // SAFETY: per the caller.
    let room = unsafe { *len };
    let n = room.min(full) as usize;
    if !addr.is_null() && n > 0 {
        // SAFETY: `n` bytes fit at `addr` (per the caller) and `st` holds at least `full`.
        unsafe { std::ptr::copy_nonoverlapping((&raw const st).cast::<u8>(), addr.cast::<u8>(), n) };
    }
    // SAFETY: per the caller.
    unsafe { *len = full };
}

/// A C buffer as bytes (empty for a zero length, whatever the pointer).
///
/// # Safety
/// `p` points to `len` bytes the caller may read for the returned lifetime.
unsafe fn bytes<'a>(p: *const c_void, len: size_t) -> Result<&'a [u8], Errno> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: per the caller.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// A C buffer to fill (its bytes are taken as they are, as C does).
///
/// # Safety
/// `p` points to `len` bytes the caller may write for the returned lifetime.
unsafe fn bytes_mut<'a>(p: *mut c_void, len: size_t) -> Result<&'a mut [u8], Errno> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: per the caller.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// The bytes of an iovec array, gathered.
///
/// # Safety
/// `iov` points to `n` iovecs whose buffers are readable.
unsafe fn gather(iov: *const libc::iovec, n: c_int) -> Result<Vec<u8>, Errno> {
    if n < 0 || (n > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::new();
    for i in 0..n as usize {
        // SAFETY: per the caller.
        let e = unsafe { &*iov.add(i) };
        // SAFETY: per the caller.
        v.extend_from_slice(unsafe { bytes(e.iov_base, e.iov_len) }?);
    }
    Ok(v)
}

/// Registers (once) the exit handler that disconnects every rsocket still connected, as the
/// kernel does for a process whose `rdma_cm` descriptor closes: the peer's rsocket sees the
/// end at once instead of when its QP next times out.
fn register_exit() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: a function with no arguments that stays in the library (never unloaded).
        unsafe { libc::atexit(disconnect_at_exit) };
    });
}

/// At `exit`, in a thread of its own that the exiting thread waits for at most half a
/// second: `exit` may be called from a signal handler that interrupted this very library
/// (iperf3 does so on SIGTERM), holding a device's engine for inline progress, and a
/// disconnect needs the engine — the exit goes on without it rather than hang.
extern "C" fn disconnect_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("softroce-rs-exit".into()).spawn(move || {
            let Some(all) = table::all() else { return };
            let mut devices: Vec<softroce::verbs::Device> = Vec::new();
            for s in all {
                let Some(mut g) = s.inner.try_lock() else { continue };
                if let table::Kind::Stream(st) = &mut *g
                    && let Some(d) = st.disconnect_at_exit()
                {
                    devices.push(d);
                }
            }
            // One more round trip through each engine: the DREQs have left.
            for d in devices {
                let _ = d.counters();
            }
            let _ = tx.send(());
        });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(std::time::Duration::from_millis(500));
        }
    });
}

/// `rsocket`: `AF_INET`/`AF_INET6`, `SOCK_STREAM`/`SOCK_DGRAM` (else `ENOTSUP`). A call from
/// inside this library — `librspreload.so` turning its own `socket()` calls into rsockets —
/// gets `ENOTSUP`, so that they stay ordinary sockets.
pub extern "C" fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    if table::from_inside() {
        set_errno(libc::ENOTSUP);
        return -1;
    }
    call(-1, || {
        let ty = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
        let ok = matches!(domain, libc::AF_INET | libc::AF_INET6)
            && match ty {
                libc::SOCK_STREAM => protocol == 0 || protocol == libc::IPPROTO_TCP,
                libc::SOCK_DGRAM => protocol == 0 || protocol == libc::IPPROTO_UDP,
                _ => false,
            };
        if !ok {
            return Err(libc::ENOTSUP);
        }
        super::init();
        let fd = calls::socket(domain, ty == libc::SOCK_STREAM)?;
        register_exit();
        Ok(fd)
    })
}

/// `rbind`.
///
/// # Safety
/// As `bind`.
pub unsafe extern "C" fn rbind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: per the caller.
    call(-1, || calls::bind(fd, unsafe { addr_in(addr, len) }?).map(|()| 0))
}

/// `rlisten`.
pub extern "C" fn rlisten(fd: c_int, backlog: c_int) -> c_int {
    call(-1, || calls::listen(fd, backlog).map(|()| 0))
}

/// `raccept`.
///
/// # Safety
/// As `accept`.
pub unsafe extern "C" fn raccept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    call(-1, || {
        let (n, peer) = calls::accept(fd)?;
        if !addr.is_null() {
            // SAFETY: per the caller.
            unsafe { addr_out(peer, libc::AF_INET, addr, len) };
        }
        Ok(n)
    })
}

/// `rconnect`.
///
/// # Safety
/// As `connect`.
pub unsafe extern "C" fn rconnect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: per the caller.
    call(-1, || calls::connect(fd, unsafe { addr_in(addr, len) }?).map(|()| 0))
}

/// `rshutdown`.
pub extern "C" fn rshutdown(fd: c_int, how: c_int) -> c_int {
    call(-1, || {
        if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
            return Err(libc::EINVAL);
        }
        calls::shutdown(fd, how).map(|()| 0)
    })
}

/// `rclose`: 0, or — for a number that is no rsocket — `EBADF` itself (rdma-core returns
/// the value, not -1).
pub extern "C" fn rclose(fd: c_int) -> c_int {
    if table::lookup(fd).is_none() {
        set_errno(libc::EBADF);
        return libc::EBADF;
    }
    call(-1, || calls::close(fd).map(|()| 0))
}

/// `rrecv`.
///
/// # Safety
/// As `recv`.
pub unsafe extern "C" fn rrecv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: per the caller.
    call(-1, || calls::recv(fd, unsafe { bytes_mut(buf, len) }?, flags).map(|n| n as ssize_t))
}

/// `rrecvfrom`.
///
/// # Safety
/// As `recvfrom`.
pub unsafe extern "C" fn rrecvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    call(-1, || {
        // SAFETY: per the caller.
        let (n, from) = calls::recvfrom(fd, unsafe { bytes_mut(buf, len) }?, flags)?;
        if !addr.is_null() && from.is_some() {
            // SAFETY: per the caller.
            unsafe { addr_out(from, libc::AF_INET, addr, alen) };
        }
        Ok(n as ssize_t)
    })
}

/// `rrecvmsg`: into the first buffer (as rdma-core), the sender into `msg_name`; no
/// control data (`ENOTSUP`).
///
/// # Safety
/// As `recvmsg`.
pub unsafe extern "C" fn rrecvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    call(-1, || {
        if msg.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: per the caller.
        let m = unsafe { &mut *msg };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(libc::ENOTSUP);
        }
        let (base, len) = if m.msg_iovlen > 0 && !m.msg_iov.is_null() {
            // SAFETY: per the caller.
            let v = unsafe { &*m.msg_iov };
            (v.iov_base, v.iov_len)
        } else {
            (std::ptr::null_mut(), 0)
        };
        // SAFETY: per the caller.
        let (n, from) = calls::recvfrom(fd, unsafe { bytes_mut(base, len) }?, flags)?;
        if !m.msg_name.is_null() {
            // SAFETY: per the caller (`msg_namelen` bytes at `msg_name`).
            unsafe { addr_out(from, libc::AF_INET, m.msg_name.cast(), &mut m.msg_namelen) };
        }
        Ok(n as ssize_t)
    })
}

/// `rsend`.
///
/// # Safety
/// As `send`.
pub unsafe extern "C" fn rsend(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: per the caller.
    call(-1, || calls::send(fd, unsafe { bytes(buf, len) }?, flags).map(|n| n as ssize_t))
}

/// `rsendto`.
///
/// # Safety
/// As `sendto`.
pub unsafe extern "C" fn rsendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    call(-1, || {
        // SAFETY: per the caller.
        let to = if addr.is_null() { None } else { Some(unsafe { addr_in(addr, alen) }?) };
        // SAFETY: per the caller.
        calls::sendto(fd, unsafe { bytes(buf, len) }?, flags, to).map(|n| n as ssize_t)
    })
}

/// `rsendmsg`: every buffer, to `msg_name` if given; no control data (`ENOTSUP`).
///
/// # Safety
/// As `sendmsg`.
pub unsafe extern "C" fn rsendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    call(-1, || {
        if msg.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: per the caller.
        let m = unsafe { &*msg };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(libc::ENOTSUP);
        }
        // SAFETY: per the caller.
        let data = unsafe { gather(m.msg_iov, m.msg_iovlen as c_int) }?;
        let to = if m.msg_name.is_null() {
            None
        } else {
            // SAFETY: per the caller.
            Some(unsafe { addr_in(m.msg_name.cast(), m.msg_namelen) }?)
        };
        calls::sendto(fd, &data, flags, to).map(|n| n as ssize_t)
    })
}

/// `rread`.
///
/// # Safety
/// As `read`.
pub unsafe extern "C" fn rread(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: per the caller.
    unsafe { rrecv(fd, buf, count, 0) }
}

/// `rreadv`: into the first buffer (as rdma-core).
///
/// # Safety
/// As `readv`.
pub unsafe extern "C" fn rreadv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    if n <= 0 || iov.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: per the caller.
    let v = unsafe { &*iov };
    // SAFETY: per the caller.
    unsafe { rrecv(fd, v.iov_base, v.iov_len, 0) }
}

/// `rwrite`.
///
/// # Safety
/// As `write`.
pub unsafe extern "C" fn rwrite(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: per the caller.
    unsafe { rsend(fd, buf, count, 0) }
}

/// `rwritev`: every buffer.
///
/// # Safety
/// As `writev`.
pub unsafe extern "C" fn rwritev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    call(-1, || {
        // SAFETY: per the caller.
        let data = unsafe { gather(iov, n) }?;
        calls::send(fd, &data, 0).map(|n| n as ssize_t)
    })
}

/// `rgetpeername`.
///
/// # Safety
/// As `getpeername`.
pub unsafe extern "C" fn rgetpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    call(-1, || {
        let (a, domain) = calls::name(fd, true)?;
        // SAFETY: per the caller.
        unsafe { addr_out(a, domain, addr, len) };
        Ok(0)
    })
}

/// `rgetsockname`.
///
/// # Safety
/// As `getsockname`.
pub unsafe extern "C" fn rgetsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    call(-1, || {
        let (a, domain) = calls::name(fd, false)?;
        // SAFETY: per the caller.
        unsafe { addr_out(a, domain, addr, len) };
        Ok(0)
    })
}

/// `rsetsockopt`.
///
/// # Safety
/// As `setsockopt`.
pub unsafe extern "C" fn rsetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: per the caller.
    call(-1, || calls::setsockopt(fd, level, name, unsafe { bytes(val, len as size_t) }?).map(|()| 0))
}

/// `rgetsockopt`.
///
/// # Safety
/// As `getsockopt`.
pub unsafe extern "C" fn rgetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    call(-1, || {
        if len.is_null() {
            return Err(libc::EFAULT);
        }
        let v = calls::getsockopt(fd, level, name)?;
        // SAFETY: per the caller.
        let room = unsafe { *len } as usize;
        let n = room.min(v.len());
        // SAFETY: per the caller: `room` writable bytes at `val`.
        unsafe { bytes_mut(val, n) }?.copy_from_slice(&v[..n]);
        // SAFETY: per the caller.
        unsafe { *len = v.len() as socklen_t };
        Ok(0)
    })
}

/// `rfcntl(fd, cmd, ...)`: `F_GETFL`, `F_SETFL` (others `ENOTSUP`, as rdma-core). The
/// variadic argument arrives in the third argument register.
pub extern "C" fn rfcntl(fd: c_int, cmd: c_int, arg: libc::c_long) -> c_int {
    call(-1, || calls::fcntl(fd, cmd, arg as c_int))
}

/// `riomap`.
///
/// # Safety
/// `buf .. buf + len` stays valid until `riounmap` or `rclose`; the peer may write it at any
/// time (with `PROT_WRITE`).
pub unsafe extern "C" fn riomap(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    prot: c_int,
    _flags: c_int,
    offset: off_t,
) -> off_t {
    // SAFETY: per the caller.
    call(-1, || unsafe { calls::iomap(fd, buf.cast(), len, prot, offset) })
}

/// `riounmap`.
pub extern "C" fn riounmap(fd: c_int, buf: *mut c_void, len: size_t) -> c_int {
    call(-1, || calls::iounmap(fd, buf.cast(), len).map(|()| 0))
}

/// `riowrite` (returns `size_t`; -1 is `SIZE_MAX`).
///
/// # Safety
/// As `write`.
pub unsafe extern "C" fn riowrite(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off_t,
    flags: c_int,
) -> ssize_t {
    call(-1, || {
        // SAFETY: per the caller.
        let data = unsafe { bytes(buf, count) }?;
        calls::iowrite(fd, data, offset as u64, flags).map(|n| n as ssize_t)
    })
}

/// `rpoll`.
///
/// # Safety
/// As `poll`.
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    call(-1, || {
        if nfds == 0 {
            return poll::poll(&mut [], timeout);
        }
        if fds.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: per the caller.
        let fds = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
        poll::poll(fds, timeout)
    })
}

/// `rselect` (through `rpoll`, as rdma-core: readable = `POLLIN`/`POLLHUP`, writable =
/// `POLLOUT`, exceptional = anything else).
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
    call(-1, || {
        if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller: each set is NULL or valid.
        let isset = |s: *mut libc::fd_set, fd| !s.is_null() && unsafe { libc::FD_ISSET(fd, s) };
        let mut fds = Vec::new();
        for fd in 0..nfds {
            let mut events = 0;
            if isset(r, fd) {
                events |= libc::POLLIN;
            }
            if isset(w, fd) {
                events |= libc::POLLOUT;
            }
            if events != 0 || isset(e, fd) {
                fds.push(libc::pollfd { fd, events, revents: 0 });
            }
        }
        let timeout = if t.is_null() {
            -1
        } else {
            // SAFETY: per the caller.
            let tv = unsafe { &*t };
            (tv.tv_sec.max(0).saturating_mul(1000).saturating_add(tv.tv_usec.max(0) / 1000))
                .min(i64::from(c_int::MAX)) as c_int
        };
        let n = poll::poll(&mut fds, timeout)?;
        for s in [r, w, e] {
            if !s.is_null() {
                // SAFETY: per the caller.
                unsafe { libc::FD_ZERO(s) };
            }
        }
        if n == 0 {
            return Ok(0);
        }
        let mut count = 0;
        for p in &fds {
            for (s, hit) in [
                (r, p.revents & (libc::POLLIN | libc::POLLHUP) != 0),
                (w, p.revents & libc::POLLOUT != 0),
                (e, p.revents & !(libc::POLLIN | libc::POLLOUT) != 0),
            ] {
                if hit && !s.is_null() {
                    // SAFETY: per the caller; `p.fd` < nfds <= FD_SETSIZE.
                    unsafe { libc::FD_SET(p.fd, s) };
                    count += 1;
                }
            }
        }
        Ok(count)
    })
}
