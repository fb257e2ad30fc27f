//! rsockets: librdmacm's socket API over softroce's RDMA CM and verbs, speaking rdma-core
//! 44's rsocket protocol on the wire, so that either side may be rdma-core's rsockets (on
//! kernel rxe, or anywhere). Design: `docs/design/rsockets.md`.
//!
//! A Rust program uses [`RsStream`] and [`RsListener`] (stream sockets, like std's
//! `TcpStream` and `TcpListener`) and [`RsDatagram`] (datagram sockets, like `UdpSocket`);
//! softroce's `librdmacm.so.1` translates librdmacm's C calls (`rsocket`, `rconnect`,
//! `rsend`, `rpoll`, …) to the same calls, on the same socket table. The local device is the
//! RDMA CM's: an open [`Device`](crate::verbs::Device) that serves the address, or one the CM
//! opens ([`set_device_opener`](crate::verbs::cm::registry::set_device_opener)).
//!
//! | module | what |
//! |---|---|
//! | `api` | [`RsStream`], [`RsListener`], [`RsDatagram`] |
//! | [`proto`] | the messages (connection data, immediate data, SGL and iomap entries, datagram headers): pure, fuzzable |
//! | [`stream`] | the stream protocol's credit and sequence state machine, without I/O |
//! | `stream_socket` | stream sockets: the id, QP, CQ and buffers around a [`stream::Stream`] |
//! | `datagram_socket` | datagram sockets: UD QPs, the UDP socket that finds a peer's QP |
//! | `calls` | each call with Rust types: blocking, non-blocking, waiting |
//! | `poll` | `rpoll` over rsockets and ordinary descriptors |
//! | `wait` | sleeping on descriptors; waking the other sleepers |
//! | `svc` | the service thread: accepting, keep-alives |
//! | `table` | rsockets by number; defaults; the guard against `librspreload.so` recursion |

mod api;
#[doc(hidden)]
pub mod calls;
mod datagram_socket;
#[doc(hidden)]
pub mod poll;
pub mod proto;
pub mod stream;
mod stream_socket;
mod svc;
#[doc(hidden)]
pub mod table;
mod wait;

use std::sync::Arc;

use parking_lot::RwLock;

pub use api::{RsDatagram, RsListener, RsStream};

/// An errno value (positive): what the calls fail with, as rdma-core's.
pub type Errno = i32;

/// The calling thread's `errno` after a failed system call.
fn last_errno() -> Errno {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// What [`set_device_starter`] sets.
pub type DeviceStarter = dyn Fn() + Send + Sync;

static STARTER: RwLock<Option<Arc<DeviceStarter>>> = RwLock::new(None);

/// Sets what runs when an rsocket needs the process's devices up without naming one: a
/// listener on a wildcard address, a connection or a datagram's route from a socket bound to
/// no device (as `rdma_resolve_addr` without a source, with the kernel's every RDMA device
/// always up). softroce's `librdmacm.so.1` starts every listed device; by default nothing
/// runs, and the RDMA CM opens a device for the address it needs.
pub fn set_device_starter(starter: Option<Arc<DeviceStarter>>) {
    *STARTER.write() = starter;
}

/// Runs the [`set_device_starter`] hook.
fn start_devices() {
    let s = STARTER.read().clone();
    if let Some(f) = s {
        f();
    }
}
