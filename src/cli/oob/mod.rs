//! Out-of-band exchanges of the tools softroce pairs with.
//!
//! rdma-core's pingpong examples and perftest both set up their RDMA connection over a plain TCP
//! "side channel" (see `docs/interop/oob-exchange.md`). [`pingpong`] and [`perftest`] implement
//! those exchanges byte for byte; this module holds what they share: the error type, exact-size
//! message I/O and socket setup.
//!
//! Message I/O rules (spec, Part C):
//! * every outgoing message is issued with a single `write_all` (the C peers do one `read()` and
//!   demand the full count);
//! * every incoming message is read with a loop until exactly its size has arrived, never more
//!   (peers may leave a `"done"` unread);
//! * the real tools wait forever and connect once; softroce's tools do not (the bytes on the wire
//!   are the same): a client retries a refused connection for a bounded time
//!   ([`connect_retry`]), a server waits a bounded time for its client ([`accept_within`]), and
//!   every read gives up after a bounded silence of the peer ([`Watched`]). An expired wait
//!   becomes [`OobError::Timeout`].
// The UC, UD and SRQ exchanges wait for their tools (uc/ud/srq-pingpong).
#![allow(dead_code)]
pub mod perftest;
pub mod pingpong;

use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Which end of a side channel this process is.
///
/// The client is the side started with a server name; in every lock-step exchange it writes
/// first and then reads, the server reads first and then writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Started with a server name; connects, and writes first in each exchange.
    Client,
    /// Started without a server name; listens, and reads first in each exchange.
    Server,
}

/// A failure of a side-channel exchange.
///
/// The `Display` text is a one-line message meant to be printed after the tool's name.
#[derive(Debug, thiserror::Error)]
pub enum OobError {
    /// The peer closed (or reset) the connection before a whole message arrived.
    #[error("peer closed the connection after {got} of the {expected} bytes of the {what}")]
    PeerClosed {
        /// Which message was being read or written.
        what: &'static str,
        /// Size of the message.
        expected: usize,
        /// Bytes of it that had arrived.
        got: usize,
    },
    /// The peer stayed silent for longer than the wait allows (see [`Watched`]).
    #[error("timed out waiting for the {what} from the peer")]
    Timeout {
        /// Which message was awaited.
        what: &'static str,
    },
    /// Any other socket error.
    #[error("side-channel error on the {what}: {source}")]
    Io {
        /// Which message was being read or written.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The peer sent bytes that are not a valid message of the expected kind.
    #[error("malformed {what} from the peer: {detail}")]
    Malformed {
        /// Which message was malformed.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The peer's perftest version string is missing or below 5.70 (the text it sent, made
    /// printable).
    #[error("peer is not perftest 5.70+ compatible (sent version \"{0}\")")]
    IncompatibleVersion(String),
    /// One GID is IPv4-mapped and the other is not (perftest's GID type check).
    #[error(
        "GID types are incompatible (one side uses an IPv4-mapped GID, the other does not); \
             use a GID of the same IP version on both sides"
    )]
    GidIncompatible,
    /// A local argument cannot be expressed in the exchange (a caller bug, not peer input).
    #[error("invalid side-channel argument: {0}")]
    InvalidArgument(String),
}

/// Makes a byte string printable for an error message: printable ASCII is kept, anything else
/// becomes `\xNN`.
pub(crate) fn printable(bytes: &[u8]) -> String {
    bytes.iter().flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect()
}

fn io_error(what: &'static str, expected: usize, got: usize, e: io::Error) -> OobError {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => OobError::Timeout { what },
        ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::BrokenPipe
        | ErrorKind::UnexpectedEof => OobError::PeerClosed { what, expected, got },
        _ => OobError::Io { what, source: e },
    }
}

/// Reads exactly `buf.len()` bytes, accumulating partial reads.
pub(crate) fn read_msg<R: Read + ?Sized>(
    r: &mut R,
    buf: &mut [u8],
    what: &'static str,
) -> Result<(), OobError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Err(OobError::PeerClosed { what, expected: buf.len(), got }),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(what, buf.len(), got, e)),
        }
    }
    Ok(())
}

/// Writes a whole message with one `write_all` and flushes.
pub(crate) fn write_msg<W: Write + ?Sized>(
    w: &mut W,
    msg: &[u8],
    what: &'static str,
) -> Result<(), OobError> {
    w.write_all(msg).and_then(|()| w.flush()).map_err(|e| io_error(what, msg.len(), 0, e))
}

/// A byte stream usable as a side channel.
///
/// Implemented for [`TcpStream`]; test doubles get the no-op default.
pub trait SideChannel: Read + Write {
    /// Called after the last message of a session was written, just before the stream is
    /// dropped. The default does nothing.
    fn linger_close(&mut self) {}
}

/// How long [`SideChannel::linger_close`] waits for the peer to close on a [`TcpStream`].
pub const LINGER_TIMEOUT: Duration = Duration::from_secs(2);

impl SideChannel for TcpStream {
    /// Half-closes our side and drains what the peer still sends (perftest's unread `"done"`)
    /// until it closes, for at most [`LINGER_TIMEOUT`]. Closing a socket with unread input makes
    /// Linux send a RST, which can make the peer's own final `write` fail; draining first gives
    /// both sides a clean FIN. Errors are ignored: the session is already complete.
    fn linger_close(&mut self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
        let _ = self.set_read_timeout(Some(LINGER_TIMEOUT));
        let mut sink = [0u8; 64];
        for _ in 0..16 {
            match self.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

/// Resolves `host:port` and connects to the first address that accepts, like the C tools'
/// `getaddrinfo` + `connect` loop. No retry over time. With `ipv4_only`, IPv6 results are
/// skipped (perftest resolves with `AF_INET`). With `source`, the socket is bound to that
/// address (port 0) before connecting (perftest's `--source_ip`).
pub fn connect_tcp(host: &str, port: u16, ipv4_only: bool, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let mut last = io::Error::new(ErrorKind::NotFound, format!("no usable address for {host}"));
    for addr in (host, port).to_socket_addrs()? {
        if ipv4_only && !addr.is_ipv4() {
            continue;
        }
        match connect_one(addr, source) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn connect_one(addr: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let Some(src) = source else { return TcpStream::connect(addr) };
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    sock.bind(&SocketAddr::new(src, 0).into())?;
    sock.connect(&addr.into())?;
    Ok(sock.into())
}

/// Opens the listening socket of a server: `SO_REUSEADDR`, backlog 1, like the C tools.
///
/// With `bind_addr`, only that address is used. Otherwise, unless `ipv4_only`, the dual-stack
/// wildcard `[::]` is tried first (IPv4 clients can still connect), falling back to `0.0.0.0`.
pub fn listen_tcp(port: u16, ipv4_only: bool, bind_addr: Option<IpAddr>) -> io::Result<TcpListener> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let candidates: Vec<IpAddr> = match bind_addr {
        Some(a) => vec![a],
        None if ipv4_only => vec![Ipv4Addr::UNSPECIFIED.into()],
        None => vec![Ipv6Addr::UNSPECIFIED.into(), Ipv4Addr::UNSPECIFIED.into()],
    };
    let mut last = io::Error::new(ErrorKind::AddrNotAvailable, "no address to listen on");
    for ip in candidates {
        match listen_one(SocketAddr::new(ip, port)) {
            Ok(l) => return Ok(l),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn listen_one(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(false)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(1)?;
    Ok(sock.into())
}

/// Accepts the single peer and closes the listening socket, as the C servers do.
pub fn accept_one(listener: TcpListener) -> io::Result<TcpStream> {
    let (stream, _) = listener.accept()?;
    drop(listener);
    Ok(stream)
}

/// How long a client keeps retrying a refused connection by default (`--connect-timeout`).
pub const DEFAULT_CONNECT_RETRY: Duration = Duration::from_secs(10);
/// The longest silence of the peer a tool accepts by default (`--peer-timeout`).
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(60);

/// [`connect_tcp`], retrying while the connection is refused for up to `retry` (zero: one
/// attempt, as the C tools). A server started in the same shell line as its client
/// (`server & client`) may not be listening yet when the client first tries; nothing else is
/// retried (an unknown host or an unreachable network fails at once).
pub fn connect_retry(
    host: &str,
    port: u16,
    ipv4_only: bool,
    source: Option<IpAddr>,
    retry: Duration,
) -> io::Result<TcpStream> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        match connect_tcp(host, port, ipv4_only, source) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused && start.elapsed() + pause <= retry => {
                tracing::debug!(
                    host,
                    port,
                    waited_ms = start.elapsed().as_millis() as u64,
                    limit_ms = retry.as_millis() as u64,
                    "connection refused (the server is not listening yet, or the address is wrong): retrying"
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            r => return r,
        }
    }
}

/// Accepts the single peer like [`accept_one`], waiting at most `limit` (`None`: forever).
/// No client within the limit is an error of kind [`ErrorKind::TimedOut`].
pub fn accept_within(listener: TcpListener, limit: Option<Duration>) -> io::Result<TcpStream> {
    let Some(limit) = limit else { return accept_one(listener) };
    use std::os::fd::AsRawFd;
    let fd = listener.as_raw_fd();
    let mut poll = mio::Poll::new()?;
    poll.registry().register(&mut mio::unix::SourceFd(&fd), mio::Token(0), mio::Interest::READABLE)?;
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + limit;
    let mut events = mio::Events::with_capacity(1);
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                // Linux does not pass O_NONBLOCK on to the accepted socket; make sure anyway.
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(ErrorKind::TimedOut, "no client connected"));
        }
        match poll.poll(&mut events, Some(left)) {
            Err(e) if e.kind() != ErrorKind::Interrupted => return Err(e),
            _ => {}
        }
    }
}

/// What tells a [`Watched`] channel that the peer is alive although it sends nothing on the
/// channel: a count that changes while the peer works (the device's received packets).
pub type Activity = Box<dyn FnMut() -> u64 + Send>;

/// A TCP side channel whose reads give up after the peer has been silent for `idle`.
///
/// Silent means no byte on the channel and no change of the [`Activity`] count: a perftest
/// server waits on the channel for the whole of its client's RDMA WRITE run, and is not to give
/// up while the writes keep arriving. Reads wake up at least once a second to look. Writes
/// give up after `idle` too (a peer that stopped reading). Nothing changes on the wire.
pub struct Watched {
    stream: TcpStream,
    idle: Option<Duration>,
    activity: Option<Activity>,
}

impl Watched {
    /// Watches `stream`: reads fail with [`ErrorKind::TimedOut`] after `idle` of silence
    /// (`None`: never), where `activity` (if any) changing counts as a sign of life.
    pub fn new(stream: TcpStream, idle: Option<Duration>, activity: Option<Activity>) -> io::Result<Watched> {
        stream.set_write_timeout(idle)?;
        Ok(Watched { stream, idle, activity })
    }

    /// The stream.
    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }

    fn probe(&mut self) -> Option<u64> {
        self.activity.as_mut().map(|f| f())
    }
}

impl Read for Watched {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(idle) = self.idle else { return self.stream.read(buf) };
        self.stream.set_read_timeout(Some(idle.clamp(Duration::from_millis(1), Duration::from_secs(1))))?;
        let mut quiet_since = Instant::now();
        let mut seen = self.probe();
        loop {
            match self.stream.read(buf) {
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    let now = self.probe();
                    if now != seen {
                        seen = now;
                        quiet_since = Instant::now();
                    } else if quiet_since.elapsed() >= idle {
                        return Err(io::Error::new(ErrorKind::TimedOut, "the peer stayed silent"));
                    }
                }
                r => return r,
            }
        }
    }
}

impl Write for Watched {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

impl SideChannel for Watched {
    fn linger_close(&mut self) {
        self.stream.linger_close();
    }
}

/// What a side channel's peer did, seen without consuming anything (see [`peek_peer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// Nothing new.
    Quiet,
    /// Bytes wait to be read: the peer finished its part and wrote its next message.
    Spoke,
    /// The peer closed the connection (it exited, or was stopped).
    Closed,
}

/// Looks at `stream` without blocking and without taking bytes: has the peer written, or
/// closed? Used during a run, when the channel is otherwise idle.
pub fn peek_peer(stream: &TcpStream) -> PeerState {
    let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    match socket2::SockRef::from(stream).recv_with_flags(&mut b, libc::MSG_PEEK | libc::MSG_DONTWAIT) {
        Ok(0) => PeerState::Closed,
        Ok(_) => PeerState::Spoke,
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => PeerState::Quiet,
        Err(_) => PeerState::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its data in fixed-size pieces.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn read_msg_accumulates_partial_reads_and_never_reads_ahead() {
        let mut r = Trickle { data: b"abcdefghij", step: 3 };
        let mut buf = [0u8; 7];
        read_msg(&mut r, &mut buf, "test").unwrap();
        assert_eq!(&buf, b"abcdefg");
        assert_eq!(r.data, b"hij");
    }

    #[test]
    fn read_msg_reports_short_message() {
        let mut r = Trickle { data: b"abc", step: 2 };
        let mut buf = [0u8; 5];
        match read_msg(&mut r, &mut buf, "thing") {
            Err(OobError::PeerClosed { what: "thing", expected: 5, got: 3 }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn read_timeout_becomes_timeout_error() {
        let l = listen_tcp(0, true, Some("127.0.0.1".parse().unwrap())).unwrap();
        let port = l.local_addr().unwrap().port();
        let c = connect_tcp("127.0.0.1", port, true, None).unwrap();
        let mut s = accept_one(l).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 4];
        assert!(matches!(read_msg(&mut s, &mut buf, "x"), Err(OobError::Timeout { what: "x" })));
        drop(c);
    }

    /// A free TCP port on 127.0.0.1 (bound and released).
    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn client_retries_until_the_server_listens() {
        let port = free_port();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let l = listen_tcp(port, true, Some("127.0.0.1".parse().unwrap())).unwrap();
            accept_within(l, Some(Duration::from_secs(5))).unwrap()
        });
        let t0 = Instant::now();
        let c = connect_retry("127.0.0.1", port, true, None, Duration::from_secs(5)).unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(250), "{:?}", t0.elapsed());
        drop(c);
        late.join().unwrap();
    }

    #[test]
    fn client_without_retry_fails_at_once_and_retry_is_bounded() {
        let port = free_port();
        let t0 = Instant::now();
        let e = connect_retry("127.0.0.1", port, true, None, Duration::ZERO).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
        assert!(t0.elapsed() < Duration::from_millis(200));
        let t0 = Instant::now();
        let e = connect_retry("127.0.0.1", port, true, None, Duration::from_millis(400)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(2), "{took:?}");
    }

    #[test]
    fn server_gives_up_waiting_for_a_client() {
        let l = listen_tcp(0, true, Some("127.0.0.1".parse().unwrap())).unwrap();
        let t0 = Instant::now();
        let e = accept_within(l, Some(Duration::from_millis(200))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(200) && t0.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn watched_read_gives_up_on_silence_unless_the_peer_is_busy() {
        let l = listen_tcp(0, true, Some("127.0.0.1".parse().unwrap())).unwrap();
        let port = l.local_addr().unwrap().port();
        let c = connect_tcp("127.0.0.1", port, true, None).unwrap();
        let s = accept_one(l).unwrap();
        // Silent peer: gives up after the idle time.
        let mut w = Watched::new(s.try_clone().unwrap(), Some(Duration::from_millis(200)), None).unwrap();
        let t0 = Instant::now();
        let mut buf = [0u8; 4];
        assert!(matches!(read_msg(&mut w, &mut buf, "x"), Err(OobError::Timeout { what: "x" })));
        assert!(t0.elapsed() >= Duration::from_millis(200));
        // Busy peer (the activity count moves for 600 ms): keeps waiting, then the message
        // arrives.
        let start = Instant::now();
        let busy: Activity = Box::new(move || (start.elapsed().as_millis() as u64).min(600) / 50);
        let mut w = Watched::new(s, Some(Duration::from_millis(200)), Some(busy)).unwrap();
        let mut c2 = c.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            c2.write_all(b"abcd").unwrap();
        });
        read_msg(&mut w, &mut buf, "x").unwrap();
        assert_eq!(&buf, b"abcd");
        writer.join().unwrap();
        drop(c);
    }

    #[test]
    fn peek_sees_words_and_close_without_taking_bytes() {
        let l = listen_tcp(0, true, Some("127.0.0.1".parse().unwrap())).unwrap();
        let port = l.local_addr().unwrap().port();
        let mut c = connect_tcp("127.0.0.1", port, true, None).unwrap();
        let mut s = accept_one(l).unwrap();
        assert_eq!(peek_peer(&s), PeerState::Quiet);
        c.write_all(b"K").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(peek_peer(&s), PeerState::Spoke);
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"K");
        drop(c);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(peek_peer(&s), PeerState::Closed);
    }

    #[test]
    fn printable_escapes_bytes() {
        assert_eq!(printable(b"5.6\0\xff"), "5.6\\x00\\xff");
    }
}
