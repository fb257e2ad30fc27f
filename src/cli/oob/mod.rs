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
//! * nothing here sets timeouts: the real tools have none. Callers (and tests) that must not wait
//!   forever set a read timeout on the [`TcpStream`]; an expired timeout becomes
//!   [`OobError::Timeout`].
// The UC, UD and SRQ exchanges wait for their tools (uc/ud/srq-pingpong).
#![allow(dead_code)]
pub mod perftest;
pub mod pingpong;

use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

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
    /// A read timeout set by the caller expired while waiting for a message.
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

    #[test]
    fn printable_escapes_bytes() {
        assert_eq!(printable(b"5.6\0\xff"), "5.6\\x00\\xff");
    }
}
