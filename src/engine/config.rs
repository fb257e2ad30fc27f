//! How a device is opened: its address, backend, engines and policies.

use crate::engine::backend::memory::MemoryNetwork;

/// The IANA port of RoCEv2.
pub const ROCE_PORT: u16 = crate::wire::ROCEV2_UDP_PORT;

/// How long the engine polls after activity before it sleeps (50 µs; `SOFTROCE_SPIN_US`
/// overrides it).
fn default_spin() -> std::time::Duration {
    let us = std::env::var("SOFTROCE_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    std::time::Duration::from_micros(us)
}

/// How packets leave and arrive.
#[derive(Debug, Clone, Default)]
pub enum BackendKind {
    /// A UDP socket bound to `<address>:4791` (unprivileged; the default).
    #[default]
    Udp,
    /// An `AF_PACKET` socket on the network interface of the address (needs `CAP_NET_RAW`;
    /// see [`crate::engine::backend::raw`]): whole frames built by softroce, every received ICRC
    /// checked over the real IP header. Opened by interface name, the device serves every
    /// address of the interface (IPv4 and IPv6, each a GID); opened by address, that address.
    Raw,
    /// An in-process network for tests.
    Memory(MemoryNetwork),
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    /// `udp` or `raw` (what `--backend` takes).
    fn from_str(s: &str) -> std::result::Result<BackendKind, String> {
        match s {
            "udp" => Ok(BackendKind::Udp),
            "raw" => Ok(BackendKind::Raw),
            _ => Err(format!("unknown backend {s:?} (udp or raw)")),
        }
    }
}

/// What to open.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// A local IP address, or an interface name (its first IPv4 address, else IPv6).
    pub address: String,
    /// The backend.
    pub backend: BackendKind,
    /// UDP port (4791; another value only pairs with softroce devices using the same).
    pub port: u16,
    /// How long the engine keeps polling after the last activity before it sleeps
    /// (lower latency, more CPU); also how long [`CompletionQueue::wait`](crate::verbs::CompletionQueue::wait) looks at
    /// an empty CQ (yielding the CPU between looks) before it sleeps.
    pub spin: std::time::Duration,
    /// Device name (`softroce0` by default).
    pub name: Option<String>,
    /// Send runs of equal-sized packets with UDP GSO (one system call for up to 64
    /// packets; the raw backend sends them as one GSO super-frame). Without it, every packet
    /// is its own `sendmsg` (the raw backend: its own frame, 64 per `sendmmsg`).
    pub gso: bool,
    /// Mark packets that carry payload ECN-capable (ECT(0)) unless the address vector's
    /// traffic class already sets ECN bits, so that switches mark congestion (CE) instead
    /// of dropping. Received CE marks are counted (`rcvd_ecn_ce`) either way.
    pub ecn: bool,
    /// Inline progress (on by default; `SOFTROCE_INLINE_PROGRESS=0` turns it off for every
    /// device the process opens): an application thread that polls an empty CQ or posts a send drives the device itself —
    /// reads the socket, runs the transport, sends, publishes completions — when no other
    /// thread is doing so at that moment, instead of handing the work to the engine thread
    /// and waiting for it to wake. The engine thread stays: it runs timers and the IB CM, and
    /// moves packets whenever no application thread calls in (one-sided operations complete
    /// without the target's application), and it sleeps rather than spin while an
    /// application polls. Off, every packet goes through the engine thread.
    pub inline_progress: bool,
    /// With inline progress, an application thread whose CQ polls find nothing gives its
    /// CPU away (`sched_yield`) when the CPU is contended or after 50 µs of polling in vain
    /// ([`crate::engine::pacer`]), so that the threads that must do the work it waits for — the
    /// peer's engine on the same host, another process — are not kept waiting for the end of
    /// its time slice. On by default; `SOFTROCE_POLL_YIELD=0` turns it off for every device
    /// the process opens.
    pub poll_yield: bool,
    /// With inline progress, an application thread whose CQ polls keep finding nothing
    /// takes the device's sockets out of the engine threads' poll sets while it reads them
    /// itself, so that each arriving datagram does not also wake an engine thread (a context
    /// switch, on a small machine the preemption of another spinning thread) for a packet
    /// the poller reads. A poll that finds an RDMA WRITE's completion (the application may
    /// now wait on memory for the peer's WRITE, which only the engine executes; unless the
    /// same poll executed a request of the peer on that QP and held its ACK:
    /// [`DeviceConfig::hold_acks`]), the thread's
    /// next send after other completions (until its next poll in vain), a CQ armed for a
    /// notification or a wait that goes to sleep puts them back, and an engine listens again
    /// on its own once nobody has read its socket inline for a millisecond. On by default;
    /// `SOFTROCE_QUIET_ENGINE=0` turns it off for every device the process opens.
    pub quiet_engine: bool,
    /// With quiet engines ([`DeviceConfig::quiet_engine`]), a plain ACK that an application
    /// thread's poll produces (the receive of a SEND it is about to answer, say) waits for
    /// that QP's next packet and leaves with it in one system call, instead of costing one
    /// of its own between the completion and the answer. It waits at most until the
    /// thread's next call into the device (a poll, a post, destroying or modifying the QP,
    /// closing the device, the process's `exit` through the drop-in library) or a quiet
    /// engine's next turn, a millisecond at the most. The engine thread holds the ACK of a
    /// request it executed too, when the QP's application answered the last two within
    /// 100 µs: then for 100 µs at most (the one-sided ping-pong, `ib_write_lat`, whose
    /// application sees the peer's WRITE in memory and answers with its own; the ACK and the
    /// answer reach the peer as it polls for that ACK, and its poll executes the answer). On
    /// by default; `SOFTROCE_HOLD_ACKS=0` turns it off for every device the process opens.
    pub hold_acks: bool,
    /// Progress engine threads (1 by default; `SOFTROCE_ENGINE_THREADS` sets the default for
    /// every device the process opens). With `n > 1` the device runs `n` engines, each a
    /// thread with its own QPs and its own UDP socket on `<address>:<port>` (`SO_REUSEPORT`);
    /// the kernel steers each arriving packet to the socket of the engine that owns its
    /// destination QP (QP number modulo `n`) with a classic BPF program, so a process with
    /// many QPs can use as many cores. The IB CM (QP1) runs on engine `1 % n`; a QP that uses
    /// an SRQ gets a number on the SRQ's engine. Only the UDP backend steers packets: the raw
    /// and in-memory backends run one engine whatever this says (with a logged warning).
    pub engine_threads: usize,
    /// Share the address with the devices of other processes (on by default;
    /// `SOFTROCE_SHARE=0` turns it off for every device the process opens): a UDP device on
    /// `<address>:<port>` joins the other softroce devices of the same user on it, as the
    /// processes of a host share a kernel RDMA device — QP numbers unique per address, each
    /// packet steered by the kernel to the process that owns its QP, the CM's messages to the
    /// process whose connection or listener they are for (docs/design/shared-device.md). Off,
    /// the device binds the port alone and a second device on the address fails with "address
    /// in use". The raw and in-memory backends never share; nor does port 0.
    pub share: bool,
    /// A fault SPEC (see [`crate::faults::spec`]): the device loses, duplicates, corrupts,
    /// reorders and delays its packets, goes dark, or forces RNR NAKs, reproducibly from a
    /// seed; `None` or blank: none. By default `SOFTROCE_FAULTS` (or what
    /// [`crate::faults::set_default`] set). A malformed SPEC makes [`Device::open`](crate::verbs::Device::open) fail with
    /// [`Error::Faults`](crate::engine::error::Error::Faults), naming the bad item.
    pub faults: Option<String>,
}

/// Whether devices share their address by default: yes; `SOFTROCE_SHARE=0` turns it off.
fn default_share() -> bool {
    std::env::var("SOFTROCE_SHARE").as_deref() != Ok("0")
}

/// The default number of engine threads: `SOFTROCE_ENGINE_THREADS` (1 to
/// [`MAX_ENGINE_THREADS`]), else 1.
fn default_engine_threads() -> usize {
    std::env::var("SOFTROCE_ENGINE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(1, |n| n.clamp(1, MAX_ENGINE_THREADS))
}

/// The most engine threads a device runs ([`DeviceConfig::engine_threads`] is capped to it).
pub const MAX_ENGINE_THREADS: usize = 64;

/// Whether inline progress is on by default: yes (the interop matrix against kernel rxe passes
/// with it); `SOFTROCE_INLINE_PROGRESS=0` turns it off for the process (any other value on).
fn default_inline_progress() -> bool {
    std::env::var("SOFTROCE_INLINE_PROGRESS").as_deref() != Ok("0")
}

impl DeviceConfig {
    /// A UDP device on `address` (an IP address or an interface name).
    pub fn new(address: impl Into<String>) -> DeviceConfig {
        DeviceConfig {
            address: address.into(),
            backend: BackendKind::Udp,
            port: ROCE_PORT,
            spin: default_spin(),
            name: None,
            gso: true,
            ecn: false,
            inline_progress: default_inline_progress(),
            poll_yield: std::env::var("SOFTROCE_POLL_YIELD").as_deref() != Ok("0"),
            quiet_engine: std::env::var("SOFTROCE_QUIET_ENGINE").as_deref() != Ok("0"),
            hold_acks: std::env::var("SOFTROCE_HOLD_ACKS").as_deref() != Ok("0"),
            engine_threads: default_engine_threads(),
            share: default_share(),
            faults: crate::faults::default_spec(),
        }
    }
    /// The same with sharing of the address on or off (see [`DeviceConfig::share`]).
    pub fn with_share(self, share: bool) -> DeviceConfig {
        DeviceConfig { share, ..self }
    }
    /// The same with fault SPEC `spec` (see [`DeviceConfig::faults`]; `""`: no faults,
    /// whatever `SOFTROCE_FAULTS` says).
    pub fn with_faults(self, spec: impl Into<String>) -> DeviceConfig {
        DeviceConfig { faults: Some(spec.into()), ..self }
    }
    /// The same with `n` engine threads (see [`DeviceConfig::engine_threads`]).
    pub fn with_engine_threads(self, n: usize) -> DeviceConfig {
        DeviceConfig { engine_threads: n, ..self }
    }
    /// The same with another backend.
    pub fn with_backend(self, backend: BackendKind) -> DeviceConfig {
        DeviceConfig { backend, ..self }
    }
    /// The same on an in-memory network.
    pub fn in_memory(net: &MemoryNetwork, address: impl Into<String>) -> DeviceConfig {
        DeviceConfig { backend: BackendKind::Memory(net.clone()), ..DeviceConfig::new(address) }
    }
}
