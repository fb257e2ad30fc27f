//! The unix-socket names members of a shared address meet at, and the three things done
//! with them: a lock (a bound name), a member's listener (its slot), and the credentials of
//! the process at the other end of a connection.
//!
//! Names live in the **abstract** namespace (a leading NUL byte): the kernel scopes them to the
//! network namespace — exactly the scope of the UDP address they stand for — and releases
//! them when the socket is closed, including by the death of its process. Nothing is ever
//! left behind on disk. Any local user can bind an abstract name, so the names carry the
//! user id, and a member trusts the other end of a connection only if the kernel says
//! (`SO_PEERCRED`) it runs as the same user: another user can at worst take names (a denial
//! of service it could also cause by binding the UDP port), never pose as a member.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{Domain, SockAddr, Socket, Type};

/// The name of `what` for the members of `<place>:<port>` of user `uid` (`place`: the address,
/// with its scope if link-local).
pub(crate) fn name(uid: u32, place: &str, port: u16, what: &str) -> Vec<u8> {
    format!("\0softroce/v1/{uid}/{place}/{port}/{what}").into_bytes()
}

/// The socket address of an abstract `name` (starting with NUL).
fn addr(name: &[u8]) -> io::Result<SockAddr> {
    use std::os::unix::ffi::OsStrExt;
    SockAddr::unix(std::ffi::OsStr::from_bytes(name))
}

/// A socket of `ty` bound to abstract `name`; `EADDRINUSE` when another socket holds it.
pub(crate) fn bind(ty: Type, name: &[u8]) -> io::Result<Socket> {
    let s = Socket::new(Domain::UNIX, ty, None)?;
    s.bind(&addr(name)?)?;
    Ok(s)
}

/// A held lock: the bound name (released when dropped, or when the process dies).
pub(crate) struct NameLock(#[allow(dead_code)] Socket);

impl NameLock {
    /// Waits until `name` can be bound (at most `patience`).
    pub(crate) fn acquire(name: &[u8], patience: Duration) -> io::Result<NameLock> {
        let until = Instant::now() + patience;
        let mut nap = Duration::from_micros(200);
        loop {
            match bind(Type::DGRAM, name) {
                Ok(s) => return Ok(NameLock(s)),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < until => {
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(Duration::from_millis(20));
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "another process holds the address's membership lock",
                    ));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Connects a `SOCK_SEQPACKET` socket to abstract `name`: `Ok(None)` if nobody listens there.
pub(crate) fn connect(name: &[u8], timeout: Duration) -> io::Result<Option<Socket>> {
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None)?;
    // A blocking connect to a listener whose queue is full waits for room, at most the send
    // timeout (`unix_wait_for_peer`).
    s.set_write_timeout(Some(timeout))?;
    match s.connect(&addr(name)?) {
        Ok(()) => Ok(Some(s)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOENT)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The process at the other end of a connected unix socket: `(pid, uid)`.
pub(crate) fn peer_cred(s: &Socket) -> io::Result<(u32, u32)> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes (the size of `cred`) into `cred`, which
    // lives for the call, and stores the written length in `len`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.pid as u32, cred.uid))
}

/// The effective user id of this process.
pub(crate) fn euid() -> u32 {
    crate::engine::rundir::effective_uid()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unique(what: &str) -> Vec<u8> {
        name(euid(), "127.99.0.1", std::process::id() as u16, what)
    }

    #[test]
    fn a_lock_is_exclusive_and_released_on_drop() {
        let n = unique("lock-test");
        let held = NameLock::acquire(&n, Duration::from_millis(10)).unwrap();
        let e = NameLock::acquire(&n, Duration::from_millis(30)).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(held);
        NameLock::acquire(&n, Duration::from_millis(10)).unwrap();
    }

    #[test]
    fn a_connection_tells_who_is_at_the_other_end() {
        let n = unique("slot-test");
        let l = bind(Type::SEQPACKET, &n).unwrap();
        l.listen(4).unwrap();
        let c = connect(&n, Duration::from_secs(1)).unwrap().expect("listening");
        let (a, _) = l.accept().unwrap();
        assert_eq!(peer_cred(&c).unwrap(), (std::process::id(), euid()));
        assert_eq!(peer_cred(&a).unwrap(), (std::process::id(), euid()));
        drop(l);
        assert!(connect(&n, Duration::from_secs(1)).unwrap().is_none(), "nobody listens any more");
    }
}
