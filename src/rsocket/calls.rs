//! The rsocket calls with Rust types: what each `extern "C"` function in [`super`] does once
//! its arguments are translated. Errors are errno values, as rdma-core's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use libc::c_int;

use super::Errno;
use super::datagram_socket::DatagramSock;
use super::proto::{
    self, OLAP_START_SIZE, RDMA_INLINE, RDMA_IOMAPSIZE, RDMA_ROUTE, RDMA_RQSIZE, RDMA_SQSIZE, SOL_RDMA,
};
use super::stream;
use super::stream_socket::{Phase, StreamSock};
use super::svc;
use super::table::{self, Kind, Socket};
use super::wait;

/// What a step of a blocking call found.
enum Step<T> {
    /// The call's result.
    Done(Result<T, Errno>),
    /// Nothing yet: sleep (or `EAGAIN` when non-blocking).
    Wait,
    /// Something changed under the step: run it again at once.
    Again,
}

/// Runs `step` on stream socket `sock` (after taking what arrived) until it answers,
/// sleeping on the socket's descriptors in between; `EAGAIN` instead of sleeping when
/// `nonblock`.
fn drive<T>(
    sock: &Socket,
    nonblock: bool,
    mut step: impl FnMut(&mut StreamSock) -> Step<T>,
) -> Result<T, Errno> {
    loop {
        let mut fds = {
            let mut g = sock.inner.lock();
            let Kind::Stream(s) = &mut *g else { return Err(libc::EBADF) };
            s.progress();
            let r = step(s);
            wait::signal();
            match r {
                Step::Done(Err(libc::EAGAIN)) => {
                    drop(g);
                    yield_cpu();
                    return Err(libc::EAGAIN);
                }
                Step::Wait if nonblock => {
                    drop(g);
                    yield_cpu();
                    return Err(libc::EAGAIN);
                }
                Step::Done(r) => return r,
                Step::Wait => s.arm(),
                Step::Again => continue,
            }
        };
        wait::sleep(&mut fds, None);
    }
}

/// Gives the CPU away after a call that found nothing to do without waiting (`EAGAIN`, an
/// `rpoll` with no timeout that found nothing): an application that spins on non-blocking
/// calls would otherwise keep the core from the peer on the same host — a softroce peer is its
/// own NIC and needs CPU time to answer. Free when no other thread wants the core.
pub fn yield_cpu() {
    std::thread::yield_now();
}

fn get(fd: c_int) -> Result<Arc<Socket>, Errno> {
    table::lookup(fd).ok_or(libc::EBADF)
}

fn nonblocking(sock: &Socket, flags: c_int) -> bool {
    let fd_flags = match &*sock.inner.lock() {
        Kind::Stream(s) => s.fd_flags,
        Kind::Datagram(d) => d.fd_flags,
        Kind::Closed => 0,
    };
    (fd_flags & libc::O_NONBLOCK) != 0 || (flags & libc::MSG_DONTWAIT) != 0
}

/// `rsocket`, once the C side has checked the arguments (`domain` `AF_INET` or
/// `AF_INET6`, `stream` for `SOCK_STREAM`, else `SOCK_DGRAM`).
pub fn socket(domain: c_int, stream: bool) -> Result<c_int, Errno> {
    let d = table::defaults();
    let s = if stream {
        Socket::stream(StreamSock::new(domain, d)?)
    } else {
        Socket::datagram(DatagramSock::new(domain, d)?)
    };
    let fd = s.fd;
    table::insert(s);
    Ok(fd)
}

/// `rbind`.
pub fn bind(fd: c_int, addr: SocketAddr) -> Result<(), Errno> {
    let sock = get(fd)?;
    let mut g = sock.inner.lock();
    match &mut *g {
        Kind::Stream(s) => {
            let id = s.id.as_mut().ok_or(libc::EBADF)?;
            id.bind_addr(addr).map_err(|e| e.errno())?;
            s.phase = Phase::Bound;
            Ok(())
        }
        Kind::Datagram(d) => d.bind(addr),
        Kind::Closed => Err(libc::EBADF),
    }
}

/// `rlisten`.
pub fn listen(fd: c_int, backlog: c_int) -> Result<(), Errno> {
    let sock = get(fd)?;
    let chan_fd = {
        let mut g = sock.inner.lock();
        let Kind::Stream(s) = &mut *g else { return Err(libc::EOPNOTSUPP) };
        if s.phase == Phase::Listening {
            return Ok(());
        }
        s.listen(backlog)?;
        s.fd()
    };
    if !svc::add_listener(&sock, chan_fd) {
        return Err(libc::EAGAIN);
    }
    Ok(())
}

/// `raccept`: the new socket's number and its peer's address.
pub fn accept(fd: c_int) -> Result<(c_int, Option<SocketAddr>), Errno> {
    let sock = get(fd)?;
    let nonblock = nonblocking(&sock, 0);
    let new = drive(&sock, nonblock, |s| {
        if s.phase != Phase::Listening {
            return Step::Done(Err(libc::EBADF));
        }
        match s.take_accepted() {
            Some(n) => Step::Done(n),
            None => Step::Wait,
        }
    })?;
    table::insert(new.clone());
    let peer = match &*new.inner.lock() {
        Kind::Stream(s) => s.peer_addr(),
        _ => None,
    };
    Ok((new.fd, peer))
}

/// `rconnect`.
pub fn connect(fd: c_int, addr: SocketAddr) -> Result<(), Errno> {
    let sock = get(fd)?;
    let nonblock = nonblocking(&sock, 0);
    {
        let mut g = sock.inner.lock();
        match &mut *g {
            Kind::Stream(s) => match s.phase {
                Phase::Init | Phase::Bound => {
                    s.start_connect(addr)?;
                    // A non-blocking rconnect that started the connection returns EINPROGRESS
                    // however fast the peer answers (rpoll then reports POLLOUT): librdmacm's
                    // address resolution alone waits for a kernel event, so its first call
                    // never finds the connection made, and programs check for EINPROGRESS.
                    if nonblock {
                        return Err(libc::EINPROGRESS);
                    }
                }
                Phase::Connecting => {}
                Phase::Connected => return Ok(()),
                Phase::ConnectError => return Err(libc::ENOTCONN),
                Phase::Listening => return Err(libc::EINVAL),
            },
            Kind::Datagram(d) => return d.connect(addr),
            Kind::Closed => return Err(libc::EBADF),
        }
    }
    drive(&sock, nonblock, |s| match s.connect_state() {
        Ok(()) => Step::Done(Ok(())),
        Err(libc::EINPROGRESS) => Step::Wait,
        Err(_) => Step::Done(Err(if s.err != 0 { s.err } else { libc::ENOTCONN })),
    })
    .map_err(|e| if e == libc::EAGAIN { libc::EINPROGRESS } else { e })
}

/// The step of a data call on a socket that may still be connecting: `None` to go on.
fn connected<T>(s: &StreamSock) -> Option<Step<T>> {
    match s.phase {
        Phase::Connected => None,
        Phase::Connecting => Some(Step::Wait),
        _ => Some(Step::Done(Err(libc::ENOTCONN))),
    }
}

/// `rsend` (and `rwrite`, `rsendto` without an address on a stream).
pub fn send(fd: c_int, data: &[u8], flags: c_int) -> Result<usize, Errno> {
    let sock = get(fd)?;
    let nonblock = nonblocking(&sock, flags);
    if matches!(&*sock.inner.lock(), Kind::Datagram(_)) {
        return dgram_send(fd, data, flags, None);
    }
    write_all(&sock, data.len(), nonblock, false, |s, done, olen| s.send_step(&data[done..], olen))
}

/// `riowrite`.
pub fn iowrite(fd: c_int, data: &[u8], offset: u64, flags: c_int) -> Result<usize, Errno> {
    let sock = get(fd)?;
    let nonblock = nonblocking(&sock, flags);
    // A short step while the socket can still send means no mapping covers the rest
    // (rdma-core returns what it wrote, maybe 0).
    write_all(&sock, data.len(), nonblock, true, |s, done, olen| {
        s.write_step(&data[done..], offset + done as u64, olen)
    })
}

/// The loop of `rsend` and `riowrite` over `len` bytes: `step(socket, bytes done, olen)` writes
/// what it can of the rest and says how much. It waits for credits (or, non-blocking, returns
/// what was done, EAGAIN if nothing); a socket that can no longer write returns what was done,
/// ECONNRESET if nothing. `short_ends`: a short step while the socket could still send ends
/// the call.
fn write_all(
    sock: &Socket,
    len: usize,
    nonblock: bool,
    short_ends: bool,
    mut step: impl FnMut(&mut StreamSock, usize, &mut u32) -> usize,
) -> Result<usize, Errno> {
    let mut olen = OLAP_START_SIZE;
    let mut done = 0;
    drive(sock, false, |s| {
        if let Some(step) = connected(s) {
            return match step {
                Step::Wait if nonblock => Step::Done(Err(libc::EAGAIN)),
                x => x,
            };
        }
        if len == 0 {
            return Step::Done(Ok(0));
        }
        done += step(s, done, &mut olen);
        if done == len {
            return Step::Done(Ok(done));
        }
        let st = s.stream().expect("a connected socket has a stream");
        if st.state & stream::WRITABLE == 0 {
            return Step::Done(if done > 0 { Ok(done) } else { Err(libc::ECONNRESET) });
        }
        if st.can_send() {
            return if short_ends { Step::Done(Ok(done)) } else { Step::Again };
        }
        if nonblock {
            return Step::Done(if done > 0 { Ok(done) } else { Err(libc::EAGAIN) });
        }
        Step::Wait
    })
}

/// `rrecv` (and `rread`, `rrecvfrom` on a stream).
pub fn recv(fd: c_int, buf: &mut [u8], flags: c_int) -> Result<usize, Errno> {
    let sock = get(fd)?;
    let nonblock = nonblocking(&sock, flags);
    if matches!(&*sock.inner.lock(), Kind::Datagram(_)) {
        return dgram_recv(fd, buf, flags).map(|(n, _)| n);
    }
    let peek = flags & libc::MSG_PEEK != 0;
    let waitall = flags & libc::MSG_WAITALL != 0;
    let mut done = 0;
    drive(&sock, false, |s| {
        if let Some(step) = connected(s) {
            return match step {
                Step::Wait if nonblock => Step::Done(Err(libc::EAGAIN)),
                x => x,
            };
        }
        if buf.is_empty() {
            return Step::Done(Ok(0));
        }
        let n = s.recv_step(&mut buf[done..], peek);
        if peek && n > 0 {
            return Step::Done(Ok(n));
        }
        done += n;
        let st = s.stream().expect("a connected socket has a stream");
        if done == buf.len() || (done > 0 && !(waitall && st.state & stream::READABLE != 0)) {
            return Step::Done(Ok(done));
        }
        if !st.have_data() && st.state & stream::READABLE == 0 {
            // The end of the stream; a failed connection says why.
            return Step::Done(if done > 0 || st.state & stream::ERROR == 0 {
                Ok(done)
            } else {
                Err(if st.err != 0 { st.err } else { libc::ECONNRESET })
            });
        }
        if nonblock && !st.have_data() {
            return Step::Done(if done > 0 { Ok(done) } else { Err(libc::EAGAIN) });
        }
        if st.have_data() {
            return Step::Again;
        }
        Step::Wait
    })
}

/// `rshutdown`.
pub fn shutdown(fd: c_int, how: c_int) -> Result<(), Errno> {
    let sock = get(fd)?;
    if let Kind::Datagram(d) = &mut *sock.inner.lock() {
        d.shutdown();
        return Ok(());
    }
    svc::set_keepalive(&sock, None);
    let ctrl = {
        let mut g = sock.inner.lock();
        let Kind::Stream(s) = &mut *g else { return Err(libc::EBADF) };
        if s.phase != Phase::Connected {
            return Ok(());
        }
        s.progress();
        s.shutdown_flags(how)
    };
    if let Some(c) = ctrl {
        // A control slot frees up as earlier control messages complete (blocking, as
        // rdma-core's rshutdown, whatever O_NONBLOCK says).
        drive(&sock, false, |s| match s.stream() {
            Some(st) if st.connected() && !st.ctrl_avail() => Step::Wait,
            _ => Step::Done(Ok(())),
        })?;
        if let Kind::Stream(s) = &mut *sock.inner.lock() {
            s.send_ctrl(c);
        }
    }
    drive(&sock, false, |s| match s.stream() {
        Some(st) if !st.all_sends_done() => Step::Wait,
        _ => Step::Done(Ok(())),
    })?;
    if let Kind::Stream(s) = &mut *sock.inner.lock() {
        s.shutdown_done();
    }
    wait::signal();
    Ok(())
}

/// `rclose`.
pub fn close(fd: c_int) -> Result<(), Errno> {
    let sock = get(fd)?;
    let connected = match &*sock.inner.lock() {
        Kind::Stream(s) => s.phase == Phase::Connected && s.stream().is_some_and(|st| st.connected()),
        _ => false,
    };
    if connected {
        let _ = shutdown(fd, libc::SHUT_RDWR);
    }
    svc::remove_listener(fd);
    svc::set_keepalive(&sock, None);
    table::remove(fd);
    {
        let mut g = sock.inner.lock();
        match &mut *g {
            Kind::Stream(s) => s.close(),
            Kind::Datagram(d) => d.close(),
            Kind::Closed => {}
        }
        *g = Kind::Closed;
    }
    wait::signal();
    Ok(())
}

/// `rgetsockname` / `rgetpeername`: the address, or the socket's family with nothing in it.
pub fn name(fd: c_int, peer: bool) -> Result<(Option<SocketAddr>, c_int), Errno> {
    let sock = get(fd)?;
    let g = sock.inner.lock();
    match &*g {
        Kind::Stream(s) => Ok((if peer { s.peer_addr() } else { s.local_addr() }, s.domain)),
        Kind::Datagram(d) => d.name(peer),
        Kind::Closed => Err(libc::EBADF),
    }
}

fn int_of(val: &[u8]) -> Result<c_int, Errno> {
    let b: [u8; 4] = val.get(..4).and_then(|b| b.try_into().ok()).ok_or(libc::EINVAL)?;
    Ok(c_int::from_ne_bytes(b))
}

fn set_bit(bits: &mut u64, name: c_int, on: bool) {
    let bit = 1u64 << (name as u32 % 64);
    if on {
        *bits |= bit;
    } else {
        *bits &= !bit;
    }
}

/// `rsetsockopt` (rdma-core's options; others `ENOTSUP`).
pub fn setsockopt(fd: c_int, level: c_int, name: c_int, val: &[u8]) -> Result<(), Errno> {
    let sock = get(fd)?;
    let mut keepalive = None;
    {
        let mut g = sock.inner.lock();
        let s = match &mut *g {
            Kind::Stream(s) => s,
            Kind::Datagram(d) => return d.setsockopt(level, name, val),
            Kind::Closed => return Err(libc::EBADF),
        };
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) | (libc::SOL_SOCKET, libc::SO_OOBINLINE) => {
                set_bit(&mut s.opts.so_opts, name, int_of(val)? != 0)
            }
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
                let v = int_of(val)? as u32;
                if s.ep.is_none() {
                    s.opts.rbuf_size = v.saturating_mul(2);
                }
            }
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
                let v = int_of(val)? as u32;
                if s.ep.is_none() {
                    s.opts.sbuf_size = v.saturating_mul(2).max(proto::SNDLOWAT << 1);
                }
            }
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                let on = int_of(val)? != 0;
                // Inverted, so that the default (0) means "on", as rdma-core keeps it.
                set_bit(&mut s.opts.so_opts, name, !on);
            }
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
                let on = int_of(val)? != 0;
                if on && s.opts.keepalive_time == 0 {
                    s.opts.keepalive_time = system_keepalive_time();
                }
                s.keepalive = on;
                set_bit(&mut s.opts.so_opts, name, on);
                keepalive = Some(on.then(|| Duration::from_secs(u64::from(s.opts.keepalive_time))));
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) | (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => {}
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
                let v = int_of(val)?;
                if v <= 0 {
                    return Err(libc::EINVAL);
                }
                s.opts.keepalive_time = v as u32;
                if s.keepalive {
                    keepalive = Some(Some(Duration::from_secs(v as u64)));
                }
            }
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => set_bit(&mut s.opts.tcp_opts, name, int_of(val)? != 0),
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {}
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
                set_bit(&mut s.opts.ipv6_opts, name, int_of(val)? != 0)
            }
            (SOL_RDMA, _) => {
                if matches!(s.phase, Phase::Connecting | Phase::Connected | Phase::ConnectError) {
                    return Err(libc::EINVAL);
                }
                match name {
                    RDMA_SQSIZE => {
                        s.opts.sq_size = (int_of(val)? as u32).min(u32::from(proto::QP_MAX_SIZE)) as u16
                    }
                    RDMA_RQSIZE => {
                        s.opts.rq_size = (int_of(val)? as u32).min(u32::from(proto::QP_MAX_SIZE)) as u16
                    }
                    RDMA_INLINE => {
                        s.opts.sq_inline = (int_of(val)? as u32).min(u32::from(proto::QP_MAX_SIZE))
                    }
                    RDMA_IOMAPSIZE => {
                        let v = proto::value_to_scale(int_of(val)?.max(0) as u32, 8) & 0xFF;
                        s.opts.iomap_size = proto::scale_to_value(v, 8) as u16;
                    }
                    RDMA_ROUTE => s.opts.route = Some(val.to_vec()),
                    _ => return Err(libc::ENOTSUP),
                }
            }
            _ => return Err(libc::ENOTSUP),
        }
    }
    if let Some(k) = keepalive
        && !svc::set_keepalive(&sock, k)
    {
        return Err(libc::ENOMEM);
    }
    Ok(())
}

/// The default keep-alive period when `TCP_KEEPIDLE` was not set: the kernel's
/// `tcp_keepalive_time` (rdma-core reads the same file), else two hours.
fn system_keepalive_time() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(7200)
}

/// `rgetsockopt`: the bytes of the value.
pub fn getsockopt(fd: c_int, level: c_int, name: c_int) -> Result<Vec<u8>, Errno> {
    let sock = get(fd)?;
    let mut g = sock.inner.lock();
    let s = match &mut *g {
        Kind::Stream(s) => s,
        Kind::Datagram(d) => return d.getsockopt(level, name),
        Kind::Closed => return Err(libc::EBADF),
    };
    let int = |v: c_int| Ok(v.to_ne_bytes().to_vec());
    let bit = |bits: u64| int(((bits >> (name as u32 % 64)) & 1) as c_int);
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            bit(s.opts.so_opts)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => int(s.opts.rbuf_size as c_int),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => int(s.opts.sbuf_size as c_int),
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            let on = (s.opts.so_opts >> libc::SO_LINGER) & 1 == 0;
            let mut v = (on as c_int).to_ne_bytes().to_vec();
            v.extend_from_slice(&0i32.to_ne_bytes());
            Ok(v)
        }
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            s.progress();
            let e = std::mem::take(&mut s.err);
            int(e)
        }
        (libc::SOL_SOCKET, libc::SO_TYPE) => int(libc::SOCK_STREAM),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => int(1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => int(s.opts.keepalive_time as c_int),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(s.opts.tcp_opts),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => int(s.max_seg()),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => bit(s.opts.ipv6_opts),
        (SOL_RDMA, RDMA_SQSIZE) => int(s.opts.sq_size.into()),
        (SOL_RDMA, RDMA_RQSIZE) => int(s.opts.rq_size.into()),
        (SOL_RDMA, RDMA_INLINE) => int(s.opts.sq_inline as c_int),
        (SOL_RDMA, RDMA_IOMAPSIZE) => int(s.opts.iomap_size.into()),
        // No path records on RoCE here (`id->route.num_paths` is 0): what was set, or none.
        (SOL_RDMA, RDMA_ROUTE) => Ok(s.opts.route.clone().unwrap_or_default()),
        _ => Err(libc::ENOTSUP),
    }
}

/// `rfcntl`: `F_GETFL` and `F_SETFL` (rdma-core's two).
pub fn fcntl(fd: c_int, cmd: c_int, arg: c_int) -> Result<c_int, Errno> {
    let sock = get(fd)?;
    let mut g = sock.inner.lock();
    let flags = match &mut *g {
        Kind::Stream(s) => &mut s.fd_flags,
        Kind::Datagram(d) => &mut d.fd_flags,
        Kind::Closed => return Err(libc::EBADF),
    };
    match cmd {
        libc::F_GETFL => Ok(*flags),
        libc::F_SETFL => {
            *flags = arg;
            Ok(0)
        }
        _ => Err(libc::ENOTSUP),
    }
}

/// `riomap`.
///
/// # Safety
/// `buf .. buf + len` stays valid until `riounmap` or `rclose`.
pub unsafe fn iomap(fd: c_int, buf: *mut u8, len: usize, prot: c_int, offset: i64) -> Result<i64, Errno> {
    let sock = get(fd)?;
    let mut g = sock.inner.lock();
    let Kind::Stream(s) = &mut *g else { return Err(libc::EINVAL) };
    if prot & !(libc::PROT_WRITE | libc::PROT_NONE) != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: forwarded.
    unsafe { s.iomap(buf, len, prot & libc::PROT_WRITE != 0, offset) }
}

/// `riounmap`.
pub fn iounmap(fd: c_int, buf: *mut u8, len: usize) -> Result<(), Errno> {
    let sock = get(fd)?;
    let mut g = sock.inner.lock();
    let Kind::Stream(s) = &mut *g else { return Err(libc::EINVAL) };
    s.iounmap(buf, len)
}

// ---- datagrams ------------------------------------------------------------------------

/// `rsendto` / `rsend` on a datagram socket (`to`: `None` for the connected address).
pub fn dgram_send(fd: c_int, data: &[u8], flags: c_int, to: Option<SocketAddr>) -> Result<usize, Errno> {
    let sock = get(fd)?;
    super::datagram_socket::send(&sock, data, flags, to)
}

/// `rrecvfrom` / `rrecv` on a datagram socket: the length and the sender.
pub fn dgram_recv(fd: c_int, buf: &mut [u8], flags: c_int) -> Result<(usize, Option<SocketAddr>), Errno> {
    let sock = get(fd)?;
    super::datagram_socket::recv(&sock, buf, flags)
}

/// `rsendto`.
pub fn sendto(fd: c_int, data: &[u8], flags: c_int, to: Option<SocketAddr>) -> Result<usize, Errno> {
    let sock = get(fd)?;
    let stream = matches!(&*sock.inner.lock(), Kind::Stream(_));
    if stream {
        if to.is_some() {
            return Err(libc::EISCONN);
        }
        return send(fd, data, flags);
    }
    dgram_send(fd, data, flags, to)
}

/// `rrecvfrom`: the length and the sender.
pub fn recvfrom(fd: c_int, buf: &mut [u8], flags: c_int) -> Result<(usize, Option<SocketAddr>), Errno> {
    let sock = get(fd)?;
    let stream = matches!(&*sock.inner.lock(), Kind::Stream(_));
    if stream {
        let n = recv(fd, buf, flags)?;
        let peer = if n > 0 { name(fd, true)?.0 } else { None };
        return Ok((n, peer));
    }
    dgram_recv(fd, buf, flags)
}
