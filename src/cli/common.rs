//! What every command shares: exit codes, one-line errors, opening the device, CPU time, the
//! progress line.

use std::io::IsTerminal;
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use softroce::verbs::{BackendKind, Device, DeviceConfig, Error as VerbsError};

/// Exit codes scripts can rely on, the same for every tool (the real tools exit 1 for every
/// failure; these refine it). [`EXIT_CODES`] is the table every `--help` shows.
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// The test ran and failed: an error completion, wrong data, lost messages, a bad packet
    /// found by `dump --check`.
    pub const FAILED: i32 = 1;
    /// Bad command line: an unknown flag, or a value outside its range or the device's limits.
    pub const USAGE: i32 = 2;
    /// The peer: not listening, closed the side channel early, silent for longer than
    /// `--peer-timeout`, or not a compatible tool.
    pub const NETWORK: i32 = 3;
    /// Local setup failed: no such address or interface, GID index, TCP port in use, memory,
    /// an unreadable file.
    pub const SETUP: i32 = 4;
}

/// The exit-code table as a literal, for `concat!` in help texts (see [`EXIT_CODES`]).
#[macro_export]
macro_rules! exit_codes {
    () => {
        "\
Exit codes (all softroce tools):
  0  success
  1  the test ran and failed: error completion, wrong data, lost messages, dump --check found a bad packet
  2  bad command line: unknown flag, or a value outside its range or the device's limits
  3  the peer: not listening, closed the connection early, silent past --peer-timeout, not a compatible tool
  4  local setup: no such address or interface, GID index, TCP port in use, out of memory, unreadable file"
    };
}

/// The exit-code table, as every tool's `--help` shows it (and the README).
pub const EXIT_CODES: &str = exit_codes!();

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
            | VerbsError::NoMemory(_)
            | VerbsError::Limit { .. } => CliError::setup(e.to_string()),
            // (SOFTROCE_FAULTS: `--faults` is checked with the other flags)
            VerbsError::Faults(_) => CliError::usage(format!("SOFTROCE_FAULTS: {e}")),
            other => CliError::failed(other.to_string()),
        }
    }
}

/// `--faults SPEC`: checked while the command line is parsed, so that a bad item is a usage
/// error (exit 2) naming it.
pub fn parse_faults(s: &str) -> Result<String, String> {
    softroce::faults::FaultSpec::parse(s).map(|_| s.to_string()).map_err(|e| e.to_string())
}

/// C `strtol(s, NULL, 0)` for a whole string: `0x` hex, leading-`0` octal, or decimal.
fn parse_c_int(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// A message size flag (`-s`): a number (decimal, `0x` hex or `0` octal, as C's `strtol`) with
/// an optional `K` (×1024) or `M` (×1024²) suffix, in `min..=max`. Every tool checks its sizes
/// with this before it allocates anything, with the same message and exit code
/// ([`exit::USAGE`]).
pub fn parse_size(flag: &str, text: &str, min: u64, max: u64) -> Result<u64, CliError> {
    let (num, factor) = match text.strip_suffix('K') {
        Some(n) => (n, 1024),
        None => match text.strip_suffix('M') {
            Some(n) => (n, 1024 * 1024),
            None => (text, 1),
        },
    };
    let bad = || {
        CliError::usage(format!(
            "{flag} {text}: Message Size should be between {min} and {max} (K and M suffixes allowed)"
        ))
    };
    let v = parse_c_int(num).ok_or_else(bad)?.checked_mul(factor).ok_or_else(bad)?;
    if v < min || v > max {
        return Err(bad());
    }
    Ok(v)
}

/// Checks a count flag against its range: `"{flag} {v}: {what} should be between {min} and
/// {max}"`, exit [`exit::USAGE`] (perftest's wording, used by every tool).
pub fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    flag: &str,
    what: &str,
    v: T,
    min: T,
    max: T,
) -> Result<T, CliError> {
    if v < min || v > max {
        return Err(CliError::usage(format!("{flag} {v}: {what} should be between {min} and {max}")));
    }
    Ok(v)
}

/// Prints `softroce <cmd>: <error>` and returns its exit code.
pub fn report(cmd: &str, e: &CliError) -> i32 {
    eprintln!("softroce {cmd}: {}", e.msg);
    e.code
}

/// How long a tool waits for its peer: `--connect-timeout` and `--peer-timeout`, shared by
/// every tool with a TCP side channel.
#[derive(clap::Args, Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitArgs {
    /// Client: retry a refused connection for up to SECONDS, so that a server started in the
    /// same shell line (`server & client`) has time to listen; 0 tries once, like the real
    /// tools [softroce only]
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub connect_timeout: u64,
    /// Give up when the peer has been silent for SECONDS: no client connecting to the server,
    /// no side-channel message, no progress during the run (RDMA traffic counts as progress);
    /// 0 waits forever, like the real tools [softroce only]
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub peer_timeout: u64,
}

impl Default for WaitArgs {
    fn default() -> WaitArgs {
        WaitArgs { connect_timeout: 10, peer_timeout: 60 }
    }
}

impl WaitArgs {
    /// How long the client retries a refused connection.
    pub fn connect_retry(&self) -> Duration {
        Duration::from_secs(self.connect_timeout)
    }
    /// The longest silence of the peer (`None`: no limit).
    pub fn idle(&self) -> Option<Duration> {
        (self.peer_timeout > 0).then(|| Duration::from_secs(self.peer_timeout))
    }
    /// The message of a wait that ran out: what was awaited, and how to wait longer.
    pub fn silence(&self, what: &str) -> String {
        format!(
            "{what}: the peer was silent for {} s (it stopped, or is stuck; --peer-timeout sets the limit, 0 waits forever)",
            self.peer_timeout
        )
    }
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
    let ifaces = pnet_datalink::interfaces();
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
    softroce::verbs::random_psn().value()
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

/// Sends the library's `tracing` events to stderr: the filter in `RUST_LOG` if set (e.g.
/// `RUST_LOG=debug`, `RUST_LOG=softroce::transport=trace`), else by `-v` count (none: nothing
/// is logged; 1: warnings; 2: debug; 3: trace). With logging off, events cost one relaxed load
/// at each call site and nothing is formatted.
pub fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(f) if !f.trim().is_empty() => EnvFilter::new(f),
        _ => EnvFilter::new(match verbose {
            0 => "off",
            1 => "warn",
            2 => "softroce=debug,warn",
            _ => "softroce=trace,debug",
        }),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true)
        .try_init();
}
