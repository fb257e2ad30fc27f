//! The Rust face of rsockets: [`RsStream`], [`RsListener`] and [`RsDatagram`], shaped like
//! std's `TcpStream`, `TcpListener` and `UdpSocket`, over the same calls as librdmacm's
//! `rsocket`, `rconnect`, `rsend`, … (and the same sockets: a C program and a Rust program
//! in one process share the table).

use std::io;
use std::net::{Shutdown, SocketAddr};

use libc::c_int;

use super::{Errno, calls};

fn os(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e)
}

fn domain(a: &SocketAddr) -> c_int {
    if a.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 }
}

/// An rsocket by number; closed when dropped.
#[derive(Debug)]
struct Fd(c_int);

impl Fd {
    fn new(towards: &SocketAddr, stream: bool) -> io::Result<Fd> {
        calls::socket(domain(towards), stream).map(Fd).map_err(os)
    }

    fn name(&self, peer: bool) -> io::Result<SocketAddr> {
        calls::name(self.0, peer).map_err(os)?.0.ok_or_else(|| os(libc::ENOTCONN))
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        let flags = calls::fcntl(self.0, libc::F_GETFL, 0).map_err(os)?;
        let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
        calls::fcntl(self.0, libc::F_SETFL, flags).map(|_| ()).map_err(os)
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        let _ = calls::close(self.0);
    }
}

/// A connected rsocket stream: bytes in order over an RC queue pair, with rdma-core 44's
/// rsocket protocol on the wire (so the peer may be rdma-core's librdmacm on kernel rxe).
///
/// Reads and writes block unless [`set_nonblocking`](RsStream::set_nonblocking) is on
/// (then they fail with [`io::ErrorKind::WouldBlock`]). A read of 0 bytes is the peer's
/// shutdown or close. Dropping the stream closes it (the peer sees a disconnect).
///
/// ```
/// use std::io::{Read, Write};
/// use softroce::rsocket::{RsListener, RsStream};
///
/// // A listener on loopback (port 0: any free one), a client in another thread.
/// let listener = RsListener::bind("127.0.0.1:0".parse()?)?;
/// let at = listener.local_addr()?;
/// let client = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
///     let mut s = RsStream::connect(at)?;
///     s.write_all(b"ping")?;
///     let mut answer = Vec::new();
///     s.read_to_end(&mut answer)?;
///     Ok(answer)
/// });
/// let (mut s, _peer) = listener.accept()?;
/// let mut question = [0u8; 4];
/// s.read_exact(&mut question)?;
/// assert_eq!(&question, b"ping");
/// s.write_all(b"pong")?;
/// drop(s); // the client's read_to_end ends here
/// assert_eq!(client.join().unwrap()?, b"pong");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RsStream(Fd);

impl RsStream {
    /// Connects to an rsocket listener at `peer` (resolving the route, opening the local
    /// device that reaches it if none is open, and exchanging the rsocket connection data).
    pub fn connect(peer: SocketAddr) -> io::Result<RsStream> {
        let fd = Fd::new(&peer, true)?;
        calls::connect(fd.0, peer).map_err(os)?;
        Ok(RsStream(fd))
    }

    /// Connects from local address `local` (its port 0: any) to `peer`.
    pub fn connect_from(local: SocketAddr, peer: SocketAddr) -> io::Result<RsStream> {
        let fd = Fd::new(&peer, true)?;
        calls::bind(fd.0, local).map_err(os)?;
        calls::connect(fd.0, peer).map_err(os)?;
        Ok(RsStream(fd))
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.name(true)
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.name(false)
    }

    /// Shuts down reading, writing or both (`rshutdown`): after [`Shutdown::Write`] the peer
    /// reads the end of the stream.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let how = match how {
            Shutdown::Read => libc::SHUT_RD,
            Shutdown::Write => libc::SHUT_WR,
            Shutdown::Both => libc::SHUT_RDWR,
        };
        calls::shutdown(self.0.0, how).map_err(os)
    }

    /// Non-blocking reads and writes on or off.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.0.set_nonblocking(on)
    }

    /// The rsocket's number (what librdmacm's `r*` calls take).
    pub fn as_rsocket(&self) -> c_int {
        self.0.0
    }
}

impl io::Read for RsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        calls::recv(self.0.0, buf, 0).map_err(os)
    }
}

impl io::Write for RsStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        calls::send(self.0.0, data, 0).map_err(os)
    }

    /// Nothing to do: a write has handed its bytes to the send queue when it returns.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A listening rsocket: [`accept`](RsListener::accept) gives the connected streams.
/// Connections are accepted in the background (the service thread) whether or not a call
/// to `accept` is waiting; `backlog` of them wait. See [`RsStream`] for an example.
#[derive(Debug)]
pub struct RsListener(Fd);

impl RsListener {
    /// Binds `local` (port 0: any free one) and listens, with a backlog of 128.
    pub fn bind(local: SocketAddr) -> io::Result<RsListener> {
        Self::bind_with_backlog(local, 128)
    }

    /// Binds `local` and listens with `backlog` waiting connections at most.
    pub fn bind_with_backlog(local: SocketAddr, backlog: u32) -> io::Result<RsListener> {
        let fd = Fd::new(&local, true)?;
        calls::bind(fd.0, local).map_err(os)?;
        calls::listen(fd.0, backlog.min(c_int::MAX as u32) as c_int).map_err(os)?;
        Ok(RsListener(fd))
    }

    /// The next connection and its peer's address (waits unless non-blocking).
    pub fn accept(&self) -> io::Result<(RsStream, SocketAddr)> {
        let (n, peer) = calls::accept(self.0.0).map_err(os)?;
        let s = RsStream(Fd(n));
        let peer = match peer {
            Some(p) => p,
            None => s.peer_addr()?,
        };
        Ok((s, peer))
    }

    /// The address listened on (with the port chosen if bound to port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.name(false)
    }

    /// Non-blocking [`accept`](RsListener::accept) on or off.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.0.set_nonblocking(on)
    }
}

/// An rsocket datagram socket: rdma-core's UD rsockets (each datagram over a UD queue pair;
/// the first to a peer also through a UDP socket that tells it our queue pair).
///
/// ```
/// use softroce::rsocket::RsDatagram;
///
/// let a = RsDatagram::bind("127.0.0.1:0".parse()?)?;
/// let b = RsDatagram::bind("127.0.0.1:0".parse()?)?;
/// a.send_to(b"hello", b.local_addr()?)?;
/// let mut buf = [0u8; 64];
/// let (n, from) = b.recv_from(&mut buf)?;
/// assert_eq!(&buf[..n], b"hello");
/// assert_eq!(from, a.local_addr()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RsDatagram(Fd);

impl RsDatagram {
    /// A datagram socket bound to `local` (port 0: any free one).
    pub fn bind(local: SocketAddr) -> io::Result<RsDatagram> {
        let fd = Fd::new(&local, false)?;
        calls::bind(fd.0, local).map_err(os)?;
        Ok(RsDatagram(fd))
    }

    /// Sends `data` as one datagram to `to`: how many bytes went.
    pub fn send_to(&self, data: &[u8], to: SocketAddr) -> io::Result<usize> {
        calls::dgram_send(self.0.0, data, 0, Some(to)).map_err(os)
    }

    /// The next datagram (waits unless non-blocking): its length (cut to `buf`) and sender.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let (n, from) = calls::dgram_recv(self.0.0, buf, 0).map_err(os)?;
        Ok((n, from.ok_or_else(|| os(libc::EPROTO))?))
    }

    /// Sets the peer that [`send`](RsDatagram::send) sends to.
    pub fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        calls::connect(self.0.0, peer).map_err(os)
    }

    /// Sends `data` to the [`connect`](RsDatagram::connect)ed peer.
    pub fn send(&self, data: &[u8]) -> io::Result<usize> {
        calls::dgram_send(self.0.0, data, 0, None).map_err(os)
    }

    /// The next datagram's bytes (cut to `buf`).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_from(buf).map(|(n, _)| n)
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.name(false)
    }

    /// Non-blocking sends and receives on or off.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.0.set_nonblocking(on)
    }
}
