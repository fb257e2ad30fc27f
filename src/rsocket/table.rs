//! The process's rsockets by number, the defaults, and the guard that keeps
//! `librspreload.so` from turning this library's own sockets into rsockets.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use libc::c_int;
use parking_lot::{Mutex, RwLock};

use super::datagram_socket::DatagramSock;
use super::stream_socket::StreamSock;

/// What an rsocket is.
pub enum Kind {
    /// `SOCK_STREAM`.
    Stream(Box<StreamSock>),
    /// `SOCK_DGRAM`.
    Datagram(Box<DatagramSock>),
    /// Closed (another thread still held it).
    Closed,
}

/// An rsocket: its number and its state behind one lock.
pub struct Socket {
    /// The number the application uses (a descriptor this socket owns).
    pub fd: c_int,
    /// The state.
    pub inner: Mutex<Kind>,
}

impl Socket {
    /// A stream socket (numbered by its event channel's descriptor).
    pub fn stream(s: StreamSock) -> Arc<Socket> {
        Arc::new(Socket { fd: s.fd(), inner: Mutex::new(Kind::Stream(Box::new(s))) })
    }

    /// A stream socket already boxed.
    pub fn stream_boxed(s: Box<StreamSock>) -> Arc<Socket> {
        Arc::new(Socket { fd: s.fd(), inner: Mutex::new(Kind::Stream(s)) })
    }

    /// A datagram socket (numbered by its UDP socket's descriptor).
    pub fn datagram(s: DatagramSock) -> Arc<Socket> {
        Arc::new(Socket { fd: s.fd(), inner: Mutex::new(Kind::Datagram(Box::new(s))) })
    }
}

static TABLE: LazyLock<RwLock<HashMap<c_int, Arc<Socket>>>> = LazyLock::new(|| RwLock::new(HashMap::new()));

/// The rsocket numbered `fd`.
pub fn lookup(fd: c_int) -> Option<Arc<Socket>> {
    TABLE.read().get(&fd).cloned()
}

/// Enters a socket.
pub fn insert(s: Arc<Socket>) {
    TABLE.write().insert(s.fd, s);
}

/// Takes a socket out (`rclose`).
pub fn remove(fd: c_int) -> Option<Arc<Socket>> {
    TABLE.write().remove(&fd)
}

/// Every socket (for the exit handler; `None` if another thread holds the table).
pub fn all() -> Option<Vec<Arc<Socket>>> {
    TABLE.try_read().map(|t| t.values().cloned().collect())
}

/// rdma-core's defaults, or what `/etc/rdma/rsocket/*` says (`rs_configure`).
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    /// `inline_default` (64).
    pub inline: u16,
    /// `sqsize_default` (384).
    pub sqsize: u16,
    /// `rqsize_default` (384).
    pub rqsize: u16,
    /// `mem_default` (128 KiB): the receive buffer.
    pub mem: u32,
    /// `wmem_default` (128 KiB): the send buffer.
    pub wmem: u32,
    /// `iomap_size` (0).
    pub iomap_size: u16,
}

/// Where rdma-core reads its defaults.
pub const CONF_DIR: &str = "/etc/rdma/rsocket";

/// The defaults (read once).
pub fn defaults() -> &'static Defaults {
    static D: OnceLock<Defaults> = OnceLock::new();
    D.get_or_init(|| {
        let read = |name: &str| -> Option<u64> {
            std::fs::read_to_string(format!("{CONF_DIR}/{name}"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        let mut d =
            Defaults { inline: 64, sqsize: 384, rqsize: 384, mem: 1 << 17, wmem: 1 << 17, iomap_size: 0 };
        if let Some(v) = read("inline_default") {
            d.inline = v as u16;
        }
        if let Some(v) = read("sqsize_default") {
            d.sqsize = v as u16;
        }
        if let Some(v) = read("rqsize_default") {
            d.rqsize = v as u16;
        }
        if let Some(v) = read("mem_default") {
            d.mem = (v as u32).max(1);
        }
        if let Some(v) = read("wmem_default") {
            d.wmem = v as u32;
            if d.wmem < super::proto::SNDLOWAT {
                d.wmem = super::proto::SNDLOWAT << 1;
            }
        }
        if let Some(v) = read("iomap_size") {
            let s = super::proto::value_to_scale(super::proto::scale_to_value(v as u32 & 0xFFFF, 8), 8);
            d.iomap_size = (s & 0xFF) as u16;
        }
        d
    })
}

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Marks the calling thread as inside an rsocket call while it lives.
pub struct InCall(());

impl InCall {
    /// Enters.
    pub fn enter() -> InCall {
        DEPTH.with(|d| d.set(d.get() + 1));
        InCall(())
    }
}

impl Drop for InCall {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Whether an `rsocket` call comes from inside this library rather than from the
/// application: a nested call (`librspreload.so` intercepts `socket()`, and the device a
/// `rbind` or `rconnect` opens makes UDP sockets), or one of softroce's own threads (engines,
/// the rsocket service). Those get `ENOTSUP`, which makes the preload library fall back to
/// the real `socket()`.
pub fn from_inside() -> bool {
    DEPTH.with(|d| d.get() > 0) || std::thread::current().name().is_some_and(|n| n.starts_with("softroce-"))
}
