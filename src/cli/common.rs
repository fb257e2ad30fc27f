//! What every command shares: exit codes, one-line errors, opening the device, CPU time, the
//! progress line.

use std::io::IsTerminal;
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use softroce::verbs::{BackendKind, Device, DeviceConfig, Error as VerbsError};

/// Exit codes scripts can rely on (the real tools exit 1 for every failure; these refine it).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// The test ran and failed: an error completion, wrong data, a peer-reported failure.
    pub const FAILED: i32 = 1;
    /// Bad command line.
    pub const USAGE: i32 = 2;
    /// The side channel failed: peer not listening, closed early, or not a compatible tool.
    pub const NETWORK: i32 = 3;
    /// Local setup failed: no such address or interface, GID index, port in use.
    pub const SETUP: i32 = 4;
}

/// A failure with the exit code it maps to and a one-line message that says what to do.
#[derive(Debug)]
pub struct CliError {
    /// Exit code (see [`exit`]).
    pub code: i32,
    /// The message, without the program name.
    pub msg: String,
}

impl CliError {
    /// A failure of the test itself.
    pub fn failed(msg: impl Into<String>) -> CliError {
        CliError { code: exit::FAILED, msg: msg.into() }
    }
    /// A usage error.
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError { code: exit::USAGE, msg: msg.into() }
    }
    /// A side-channel failure.
    pub fn network(msg: impl Into<String>) -> CliError {
        CliError { code: exit::NETWORK, msg: msg.into() }
    }
    /// A local setup failure.
    pub fn setup(msg: impl Into<String>) -> CliError {
        CliError { code: exit::SETUP, msg: msg.into() }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl From<VerbsError> for CliError {
    fn from(e: VerbsError) -> CliError {
        match e {
            VerbsError::NoSuchAddress(_)
            | VerbsError::NoSuchInterface(_)
            | VerbsError::NoAddress(_)
            | VerbsError::Bind { .. }
            | VerbsError::NeedsCapNetRaw { .. }
            | VerbsError::RawSocket { .. }
            | VerbsError::GidIndex { .. }
            | VerbsError::Limit { .. } => CliError::setup(e.to_string()),
            other => CliError::failed(other.to_string()),
        }
    }
}

/// Prints `softroce <cmd>: <error>` and returns its exit code.
pub fn report(cmd: &str, e: &CliError) -> i32 {
    eprintln!("softroce {cmd}: {}", e.msg);
    e.code
}

/// `--backend`: how a device's packets leave and arrive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// A UDP socket on port 4791 (unprivileged; the default).
    #[default]
    Udp,
    /// An AF_PACKET socket on the interface: full-strength ICRC checks on receive, every
    /// header field set by softroce (needs CAP_NET_RAW).
    Raw,
}

impl BackendArg {
    /// The library's backend.
    pub fn kind(self) -> BackendKind {
        match self {
            BackendArg::Udp => BackendKind::Udp,
            BackendArg::Raw => BackendKind::Raw,
        }
    }
}

/// The local address that reaches `peer` (the kernel's route choice; nothing is sent).
pub fn local_ip_towards(peer: IpAddr) -> Option<IpAddr> {
    let bind: IpAddr =
        if peer.is_ipv4() { [0, 0, 0, 0].into() } else { std::net::Ipv6Addr::UNSPECIFIED.into() };
    let s = UdpSocket::bind((bind, 0)).ok()?;
    s.connect((peer, 4791)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// The first up, non-loopback interface address (IPv4 preferred), else 127.0.0.1.
pub fn default_local_ip() -> IpAddr {
    let ifaces = pnet::datalink::interfaces();
    let pick = |v4: bool| {
        ifaces
            .iter()
            .filter(|i| i.is_up() && !i.is_loopback())
            .flat_map(|i| i.ips.iter().map(|n| n.ip()))
            .find(|ip| ip.is_ipv4() == v4 && !ip.is_loopback())
    };
    pick(true).or_else(|| pick(false)).unwrap_or_else(|| [127, 0, 0, 1].into())
}

/// Opens the device a command names with `-d` (an IP address or interface name). Without
/// `-d`: the address that reaches `peer` (clients), else the first interface address. `backend`
/// is `--backend`.
pub fn open_device(dev: Option<&str>, peer: Option<&str>, backend: BackendArg) -> Result<Device, CliError> {
    let address = match dev {
        Some(d) => d.to_string(),
        None => match peer.and_then(|p| resolve_host(p).ok()).and_then(local_ip_towards) {
            Some(ip) => ip.to_string(),
            None => default_local_ip().to_string(),
        },
    };
    Device::open(DeviceConfig::new(&address).with_backend(backend.kind())).map_err(|e| match e {
        VerbsError::NoSuchInterface(name) if looks_like_rdma_device(&name) => CliError::setup(format!(
            "no network interface {name:?}: softroce devices are named by the local IP address or network interface to use (e.g. -d eth0 or -d 10.0.0.1)"
        )),
        other => other.into(),
    })
}

fn looks_like_rdma_device(name: &str) -> bool {
    ["rxe", "mlx", "softroce", "siw", "irdma", "bnxt", "qedr", "efa", "hfi", "erdma"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Resolves a host name or address to an IP address (IPv4 first).
pub fn resolve_host(host: &str) -> Result<IpAddr, CliError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip);
    }
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| CliError::network(format!("cannot resolve {host:?}: {e}")))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.ip())
        .ok_or_else(|| CliError::network(format!("{host:?} has no address")))
}

/// CPU time this process used so far (user + system), from /proc/self/stat.
pub fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return Duration::ZERO };
    // Fields after the parenthesised command name: utime is field 14, stime 15 (1-based).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // f[0] is field 3 (state): utime is f[11], stime f[12]. USER_HZ is 100 on Linux.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// A once-per-second rate line on stderr when it is a terminal; silent when piped.
pub struct Progress {
    on: bool,
    start: Instant,
    last: Instant,
    last_units: u64,
    label: &'static str,
}

impl Progress {
    /// A progress line counting `label` (e.g. "iters").
    pub fn new(label: &'static str) -> Progress {
        let now = Instant::now();
        Progress { on: std::io::stderr().is_terminal(), start: now, last: now, last_units: 0, label }
    }

    /// Reports progress: `units` done so far of `total` (0 if open-ended), `bytes` moved.
    pub fn tick(&mut self, units: u64, total: u64, bytes: u64) {
        if !self.on || self.last.elapsed() < Duration::from_secs(1) {
            return;
        }
        let dt = self.last.elapsed().as_secs_f64();
        let rate = (units - self.last_units) as f64 / dt;
        let el = self.start.elapsed().as_secs_f64();
        let of = if total > 0 { format!("/{total}") } else { String::new() };
        eprint!(
            "\r  {units}{of} {} in {el:.0} s, {rate:.0} {}/s, {:.2} Gb/s   ",
            self.label,
            self.label,
            bytes as f64 * 8.0 / el / 1e9
        );
        self.last = Instant::now();
        self.last_units = units;
    }

    /// Clears the line.
    pub fn finish(&mut self) {
        if self.on && self.start.elapsed() >= Duration::from_secs(1) {
            eprint!("\r{:70}\r", "");
        }
    }
}

/// A random 24-bit PSN.
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    h.finish() as u32 & 0xff_ffff
}

/// How long a finished tool keeps its device answering after the peer's last packet, and at
/// most how long it waits for that (see [`Device::wait_quiet`]): longer than rdma-core's and
/// perftest's ACK timeout (code 14, 67 ms) stretched as far as a starved softroce peer
/// stretches it ([`softroce::transport::LOCAL_ACK_STRETCH`] × 67 ms), plus a round trip.
pub const LINGER_QUIET: Duration = Duration::from_millis(300);
/// See [`LINGER_QUIET`].
pub const LINGER_LIMIT: Duration = Duration::from_secs(2);

/// Keeps the device answering until the peer has been silent for [`LINGER_QUIET`], so that a
/// peer whose last ACK was lost (or not acted on: seen once with kernel rxe in the interop
/// matrix) gets its retransmission acknowledged instead of retrying forever.
pub fn linger(dev: &Device) {
    let _ = dev.wait_quiet(LINGER_QUIET, LINGER_LIMIT);
}
