//! The fault SPEC: `SOFTROCE_FAULTS`, `DeviceConfig::faults`, `--faults`.
//!
//! A comma-separated list of items (blanks around items are ignored, an empty item too):
//!
//! | item | meaning |
//! |---|---|
//! | `seed=N` | the seed of every random choice (default 1) |
//! | `dir=tx\|rx\|both` | which packets the random faults act on: sent, received, or both (default) |
//! | `loss=P%` | drop the packet |
//! | `dup=P%` | deliver the packet twice |
//! | `corrupt=P%` | flip one bit after the ICRC was computed: the receiver drops it, as a NIC would |
//! | `reorder=P%` | hold the packet back behind the next `depth` packets of its direction |
//! | `depth=K` | how many packets overtake a reordered one (default 1; needs `reorder`) |
//! | `delay=D` | hold every packet for `D` (`200us`, `3ms`, `1s`) |
//! | `jitter=D` | add a random `0..D` to each packet's delay (packets may then overtake each other) |
//! | `qp=N` | only packets of local QP `N` (decimal or `0x` hex; repeatable) |
//! | `opcode=NAME` | only packets of this BTH opcode, named as `softroce dump` prints it (repeatable) |
//! | `mad` | only QP1's packets: the connection manager's MADs (same as `qp=1`) |
//! | `blackhole=T+D` | from `T` after the device started, drop every packet both ways for `D` (repeatable) |
//! | `rnr=K` | answer the next `K` incoming RC SENDs with an RNR NAK even if a receive is posted |
//!
//! Filters narrow every fault: `qp` and `mad` items are one set (a packet of any of them), the
//! `opcode` items another (any of them), and a packet must be in both sets that are given.
//!
//! Anything else is refused with a [`FaultSpecError`] naming the item: an unknown key, a
//! missing or malformed value, a percentage without its `%` or above 100, a duration without
//! its unit, a key given twice, `depth` without `reorder`.

use std::fmt;
use std::time::Duration;

use crate::wire::Opcode;

/// Which packets the random faults act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultDir {
    /// Packets the device sends.
    Tx,
    /// Packets the device receives.
    Rx,
    /// Both (the default).
    #[default]
    Both,
}

impl FaultDir {
    fn name(self) -> &'static str {
        match self {
            FaultDir::Tx => "tx",
            FaultDir::Rx => "rx",
            FaultDir::Both => "both",
        }
    }
}

/// A scheduled black hole: every packet dropped, both ways, from `start` after the device
/// started, for `length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blackhole {
    /// When it starts, from the device's start.
    pub start: Duration,
    /// How long it lasts.
    pub length: Duration,
}

impl Blackhole {
    /// Whether `since_start` (time since the device started) falls inside it.
    pub fn covers(&self, since_start: Duration) -> bool {
        since_start >= self.start && since_start - self.start < self.length
    }
}

/// A parsed fault SPEC (see the [module documentation](self)). `Default` is "no faults",
/// seed 1.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    /// `seed=N`.
    pub seed: u64,
    /// `dir=`.
    pub dir: FaultDir,
    /// `loss=`, in percent (`0..=100`).
    pub loss: f64,
    /// `dup=`, in percent.
    pub dup: f64,
    /// `corrupt=`, in percent.
    pub corrupt: f64,
    /// `reorder=`, in percent.
    pub reorder: f64,
    /// `depth=`: packets that overtake a reordered one.
    pub depth: u32,
    /// `delay=`.
    pub delay: Duration,
    /// `jitter=`.
    pub jitter: Duration,
    /// `qp=` items, and 1 for `mad`.
    pub qps: Vec<u32>,
    /// `opcode=` items.
    pub opcodes: Vec<Opcode>,
    /// `blackhole=` items.
    pub blackholes: Vec<Blackhole>,
    /// `rnr=K`.
    pub rnr: u32,
}

impl Default for FaultSpec {
    fn default() -> FaultSpec {
        FaultSpec {
            seed: 1,
            dir: FaultDir::Both,
            loss: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            reorder: 0.0,
            depth: 1,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            qps: Vec::new(),
            opcodes: Vec::new(),
            blackholes: Vec::new(),
            rnr: 0,
        }
    }
}

/// A SPEC item that was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault spec item {item:?}: {reason}")]
pub struct FaultSpecError {
    /// The item as written.
    pub item: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The longest `depth`.
pub const MAX_DEPTH: u32 = 1024;
/// The longest `delay` plus `jitter`.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

impl FaultSpec {
    /// Parses a SPEC. An empty SPEC (or one of blanks and commas) is "no faults", seed 1.
    pub fn parse(text: &str) -> Result<FaultSpec, FaultSpecError> {
        let mut spec = FaultSpec::default();
        let mut seen: Vec<&str> = Vec::new();
        let mut depth_item = None;
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = |reason: String| FaultSpecError { item: item.to_string(), reason };
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            if key == "mad" {
                if value.is_some() {
                    return Err(bad("`mad` takes no value".into()));
                }
                if !spec.qps.contains(&1) {
                    spec.qps.push(1);
                }
                continue;
            }
            let Some(value) = value else {
                return Err(bad(match key_help(key) {
                    Some(form) => format!("needs a value ({form})"),
                    None => unknown_key(key),
                }));
            };
            let repeatable = matches!(key, "qp" | "opcode" | "blackhole");
            if !repeatable && key_help(key).is_some() {
                if seen.contains(&key) {
                    return Err(bad(format!("{key} is given twice")));
                }
                seen.push(key);
            }
            match key {
                "seed" => spec.seed = parse_int(value).ok_or_else(|| bad("the seed is a number".into()))?,
                "dir" => {
                    spec.dir = match value {
                        "tx" => FaultDir::Tx,
                        "rx" => FaultDir::Rx,
                        "both" => FaultDir::Both,
                        _ => return Err(bad("dir is tx, rx or both".into())),
                    }
                }
                "loss" => spec.loss = parse_percent(value).map_err(bad)?,
                "dup" => spec.dup = parse_percent(value).map_err(bad)?,
                "corrupt" => spec.corrupt = parse_percent(value).map_err(bad)?,
                "reorder" => spec.reorder = parse_percent(value).map_err(bad)?,
                "depth" => {
                    spec.depth = parse_int(value)
                        .and_then(|d| u32::try_from(d).ok())
                        .filter(|d| (1..=MAX_DEPTH).contains(d))
                        .ok_or_else(|| bad(format!("depth is a number of packets, 1 to {MAX_DEPTH}")))?;
                    depth_item = Some(item);
                }
                "delay" => spec.delay = parse_duration(value).map_err(bad)?,
                "jitter" => spec.jitter = parse_duration(value).map_err(bad)?,
                "qp" => {
                    let qpn = parse_int(value)
                        .and_then(|q| u32::try_from(q).ok())
                        .filter(|q| *q <= 0xff_ffff)
                        .ok_or_else(|| bad("a QP number is 0 to 0xffffff (decimal or 0x hex)".into()))?;
                    if !spec.qps.contains(&qpn) {
                        spec.qps.push(qpn);
                    }
                }
                "opcode" => {
                    let op = parse_opcode(value).ok_or_else(|| {
                        bad("no such BTH opcode (names as `softroce dump` prints them: RC_SEND_ONLY, RC_ACK, RC_WRITE_FIRST, RC_READ_RESP_MIDDLE, UD_SEND_ONLY, ...)".into())
                    })?;
                    if !spec.opcodes.contains(&op) {
                        spec.opcodes.push(op);
                    }
                }
                "blackhole" => {
                    let (t, d) = value
                        .split_once('+')
                        .ok_or_else(|| bad("a black hole is START+LENGTH, e.g. blackhole=1s+60s".into()))?;
                    let start = parse_duration(t.trim()).map_err(bad)?;
                    let length = parse_duration(d.trim()).map_err(bad)?;
                    spec.blackholes.push(Blackhole { start, length });
                }
                "rnr" => {
                    spec.rnr = parse_int(value)
                        .and_then(|k| u32::try_from(k).ok())
                        .ok_or_else(|| bad("rnr is a number of SENDs".into()))?
                }
                _ => return Err(bad(unknown_key(key))),
            }
        }
        if let Some(item) = depth_item
            && spec.reorder == 0.0
        {
            return Err(FaultSpecError {
                item: item.to_string(),
                reason: "depth says how far reordered packets fall back: it needs reorder=P%".into(),
            });
        }
        if spec.delay + spec.jitter > MAX_DELAY {
            let item = text
                .split(',')
                .map(str::trim)
                .rfind(|i| i.starts_with("delay") || i.starts_with("jitter"))
                .unwrap_or(text);
            return Err(FaultSpecError {
                item: item.to_string(),
                reason: format!("delay plus jitter is at most {} s", MAX_DELAY.as_secs()),
            });
        }
        Ok(spec)
    }

    /// Whether the SPEC changes anything at all (a SPEC of only a seed, filters or `dir` does
    /// not).
    pub fn is_active(&self) -> bool {
        self.has_random_faults() || !self.blackholes.is_empty() || self.rnr > 0
    }

    /// Whether the SPEC has random faults (loss, dup, corrupt, reorder, delay, jitter): without
    /// them no packet's fate needs to be drawn.
    pub fn has_random_faults(&self) -> bool {
        self.loss > 0.0
            || self.dup > 0.0
            || self.corrupt > 0.0
            || self.reorder > 0.0
            || !self.delay.is_zero()
            || !self.jitter.is_zero()
    }

    /// Whether the random faults (loss, dup, corrupt, reorder, delay) act on packets of this
    /// direction (`tx`: sent).
    pub fn acts_on(&self, tx: bool) -> bool {
        match self.dir {
            FaultDir::Both => true,
            FaultDir::Tx => tx,
            FaultDir::Rx => !tx,
        }
    }

    /// Whether a packet of local QP `qpn` with BTH opcode `opcode` passes the filters.
    pub fn selects(&self, qpn: u32, opcode: u8) -> bool {
        (self.qps.is_empty() || self.qps.contains(&qpn))
            && (self.opcodes.is_empty() || self.opcodes.contains(&Opcode(opcode)))
    }
}

impl std::str::FromStr for FaultSpec {
    type Err = FaultSpecError;
    fn from_str(s: &str) -> Result<FaultSpec, FaultSpecError> {
        FaultSpec::parse(s)
    }
}

/// The SPEC in its canonical form (what [`FaultSpec::parse`] reads back to an equal value).
impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed={}", self.seed)?;
        if self.dir != FaultDir::Both {
            write!(f, ",dir={}", self.dir.name())?;
        }
        for (k, p) in
            [("loss", self.loss), ("dup", self.dup), ("corrupt", self.corrupt), ("reorder", self.reorder)]
        {
            if p > 0.0 {
                write!(f, ",{k}={p}%")?;
            }
        }
        if self.reorder > 0.0 && self.depth != 1 {
            write!(f, ",depth={}", self.depth)?;
        }
        if !self.delay.is_zero() {
            write!(f, ",delay={}ns", self.delay.as_nanos())?;
        }
        if !self.jitter.is_zero() {
            write!(f, ",jitter={}ns", self.jitter.as_nanos())?;
        }
        for q in &self.qps {
            write!(f, ",qp={q}")?;
        }
        for o in &self.opcodes {
            match o.name() {
                Some(n) => write!(f, ",opcode={n}")?,
                None => write!(f, ",opcode={:#04x}", o.0)?,
            }
        }
        for b in &self.blackholes {
            write!(f, ",blackhole={}ns+{}ns", b.start.as_nanos(), b.length.as_nanos())?;
        }
        if self.rnr > 0 {
            write!(f, ",rnr={}", self.rnr)?;
        }
        Ok(())
    }
}

/// The form of a known key's value, `None` for an unknown key.
fn key_help(key: &str) -> Option<&'static str> {
    Some(match key {
        "seed" => "seed=N",
        "dir" => "dir=tx|rx|both",
        "loss" => "loss=P%",
        "dup" => "dup=P%",
        "corrupt" => "corrupt=P%",
        "reorder" => "reorder=P%",
        "depth" => "depth=K",
        "delay" => "delay=D, e.g. delay=200us",
        "jitter" => "jitter=D, e.g. jitter=50us",
        "qp" => "qp=N",
        "opcode" => "opcode=NAME",
        "blackhole" => "blackhole=T+D, e.g. blackhole=1s+60s",
        "rnr" => "rnr=K",
        _ => return None,
    })
}

fn unknown_key(key: &str) -> String {
    format!(
        "unknown item {key:?} (known: seed, dir, loss, dup, corrupt, reorder, depth, delay, jitter, qp, opcode, mad, blackhole, rnr)"
    )
}

/// A decimal or `0x` hexadecimal number.
fn parse_int(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `P%` with `P` in `0..=100` (decimals allowed), in percent.
fn parse_percent(s: &str) -> Result<f64, String> {
    let Some(num) = s.strip_suffix('%') else {
        return Err(format!("a percentage needs its % sign (e.g. {s}%)"));
    };
    let p: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|p: &f64| p.is_finite())
        .ok_or_else(|| "a percentage is a number followed by % (e.g. 2% or 0.5%)".to_string())?;
    if !(0.0..=100.0).contains(&p) {
        return Err("a percentage is between 0% and 100%".into());
    }
    Ok(p)
}

/// A duration with its unit: `ns`, `us` (or `µs`), `ms` or `s`; decimals allowed.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let units: [(&str, f64); 5] = [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)];
    let Some((num, scale)) = units.iter().find_map(|(u, scale)| s.strip_suffix(u).map(|n| (n, *scale)))
    else {
        return Err(format!("a duration needs its unit: ns, us, ms or s (e.g. 200us, 3ms, 1s), not {s:?}"));
    };
    let v: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{s:?} is not a duration (e.g. 200us, 3ms, 1.5s)"))?;
    let ns = v * scale;
    if ns > 1e9 * 86_400.0 {
        return Err(format!("{s:?} is longer than a day"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// A BTH opcode by the name `softroce dump` prints (any case), by the IBTA's longer
/// spelling (`RC_RDMA_READ_RESPONSE_MIDDLE`, `RC_SEND_ONLY_WITH_IMMEDIATE`,
/// `RC_ACKNOWLEDGE`), or by number (`0x11`).
pub fn parse_opcode(s: &str) -> Option<Opcode> {
    if let Some(n) = parse_int(s) {
        return u8::try_from(n).ok().map(Opcode).filter(|o| o.info().is_some());
    }
    let mut name = s.trim().to_ascii_uppercase().replace(['-', ' '], "_");
    for (long, short) in [
        ("RDMA_READ_REQUEST", "READ_REQ"),
        ("RDMA_READ_RESPONSE", "READ_RESP"),
        ("RDMA_WRITE", "WRITE"),
        ("READ_REQUEST", "READ_REQ"),
        ("READ_RESPONSE", "READ_RESP"),
        ("_WITH_IMMEDIATE", "_IMM"),
        ("_IMMEDIATE", "_IMM"),
        ("_WITH_INVALIDATE", "_INV"),
        ("_INVALIDATE", "_INV"),
        ("ATOMIC_ACKNOWLEDGE", "ATOMIC_ACK"),
        ("ACKNOWLEDGE", "ACK"),
        ("COMPARE_SWAP", "CMP_SWAP"),
        ("COMPARE_AND_SWAP", "CMP_SWAP"),
        ("FETCH_AND_ADD", "FETCH_ADD"),
    ] {
        name = name.replace(long, short);
    }
    crate::wire::opcode::ALL.iter().find(|i| i.name == name).map(|i| i.opcode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> FaultSpecError {
        FaultSpec::parse(s).expect_err(s)
    }

    #[test]
    fn parses_every_item() {
        let s = FaultSpec::parse(
            " seed=7, dir=tx,loss=2%,dup=1%,corrupt=0.5%,reorder=1%,depth=3,delay=200us,jitter=3ms,qp=0x11,qp=18,opcode=RC_ACK,opcode=rc_rdma_read_response_middle,mad,blackhole=1s+60s,blackhole=2.5s+10ms,rnr=3,",
        )
        .unwrap();
        assert_eq!(s.seed, 7);
        assert_eq!(s.dir, FaultDir::Tx);
        assert_eq!((s.loss, s.dup, s.corrupt, s.reorder), (2.0, 1.0, 0.5, 1.0));
        assert_eq!(s.depth, 3);
        assert_eq!((s.delay, s.jitter), (Duration::from_micros(200), Duration::from_millis(3)));
        assert_eq!(s.qps, vec![0x11, 18, 1]);
        assert_eq!(s.opcodes, vec![Opcode::RC_ACK, Opcode::RC_READ_RESP_MIDDLE]);
        assert_eq!(
            s.blackholes,
            vec![
                Blackhole { start: Duration::from_secs(1), length: Duration::from_secs(60) },
                Blackhole { start: Duration::from_millis(2500), length: Duration::from_millis(10) }
            ]
        );
        assert_eq!(s.rnr, 3);
        assert!(s.is_active());
        // The canonical form reads back to the same SPEC.
        assert_eq!(FaultSpec::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn empty_is_no_faults() {
        for t in ["", " ", ",,", "seed=5", "mad", "dir=rx,qp=3"] {
            assert!(!FaultSpec::parse(t).unwrap().is_active(), "{t}");
        }
        assert_eq!(FaultSpec::parse("").unwrap(), FaultSpec::default());
    }

    #[test]
    fn refuses_and_names_the_bad_item() {
        for (spec, item, says) in [
            ("loss=2", "loss=2", "% sign"),
            ("seed=1,los=2%", "los=2%", "unknown item"),
            ("loss=101%", "loss=101%", "between 0% and 100%"),
            ("loss=-1%", "loss=-1%", "between"),
            ("loss=abc%", "loss=abc%", "number"),
            ("loss=NaN%", "loss=NaN%", "number"),
            ("loss", "loss", "needs a value"),
            ("loss=1%,loss=2%", "loss=2%", "twice"),
            ("dir=up", "dir=up", "tx, rx or both"),
            ("delay=5", "delay=5", "unit"),
            ("delay=5m", "delay=5m", "unit"),
            ("jitter=-1ms", "jitter=-1ms", "not a duration"),
            ("delay=9s,jitter=2s", "jitter=2s", "at most"),
            ("depth=3", "depth=3", "needs reorder"),
            ("reorder=1%,depth=0", "depth=0", "1 to 1024"),
            ("qp=0x1000000", "qp=0x1000000", "0xffffff"),
            ("qp=x", "qp=x", "QP number"),
            ("opcode=RC_NOPE", "opcode=RC_NOPE", "no such BTH opcode"),
            ("opcode=0x15", "opcode=0x15", "no such"),
            ("mad=1", "mad=1", "no value"),
            ("blackhole=1s", "blackhole=1s", "START+LENGTH"),
            ("blackhole=1s+x", "blackhole=1s+x", "unit"),
            ("rnr=-1", "rnr=-1", "number of SENDs"),
            ("seed=", "seed=", "number"),
            ("=3", "=3", "unknown item"),
            ("loss=2%;dup=1%", "loss=2%;dup=1%", "number"),
        ] {
            let e = err(spec);
            assert_eq!(e.item, item, "{spec}: {e}");
            assert!(e.reason.contains(says), "{spec}: {e}");
            assert!(e.to_string().contains(item), "{e}");
        }
    }

    #[test]
    fn opcode_names() {
        for info in crate::wire::opcode::ALL {
            assert_eq!(parse_opcode(info.name), Some(info.opcode));
            assert_eq!(parse_opcode(&info.name.to_lowercase()), Some(info.opcode));
            assert_eq!(parse_opcode(&format!("{:#04x}", info.opcode.0)), Some(info.opcode));
        }
        assert_eq!(parse_opcode("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"), Some(Opcode::RC_WRITE_ONLY_IMM));
        assert_eq!(parse_opcode("RC_RDMA_READ_REQUEST"), Some(Opcode::RC_READ_REQ));
        assert_eq!(parse_opcode("RC_ACKNOWLEDGE"), Some(Opcode::RC_ACK));
        assert_eq!(parse_opcode("RC_ATOMIC_ACKNOWLEDGE"), Some(Opcode::RC_ATOMIC_ACK));
        assert_eq!(parse_opcode("RC_SEND_LAST_WITH_INVALIDATE"), Some(Opcode::RC_SEND_LAST_INV));
        assert_eq!(parse_opcode("RC_COMPARE_SWAP"), Some(Opcode::RC_CMP_SWAP));
        assert_eq!(parse_opcode("nothing"), None);
    }

    #[test]
    fn filters_and_directions() {
        let s = FaultSpec::parse("qp=17,mad,opcode=RC_ACK,opcode=UD_SEND_ONLY,dir=rx").unwrap();
        assert!(s.selects(17, Opcode::RC_ACK.0));
        assert!(s.selects(1, Opcode::UD_SEND_ONLY.0));
        assert!(!s.selects(18, Opcode::RC_ACK.0));
        assert!(!s.selects(17, Opcode::RC_SEND_ONLY.0));
        assert!(s.acts_on(false) && !s.acts_on(true));
        let all = FaultSpec::default();
        assert!(all.selects(12345, 0xff) && all.acts_on(true) && all.acts_on(false));
    }

    #[test]
    fn blackhole_window() {
        let b = Blackhole { start: Duration::from_secs(1), length: Duration::from_secs(2) };
        assert!(!b.covers(Duration::from_millis(999)));
        assert!(b.covers(Duration::from_secs(1)));
        assert!(b.covers(Duration::from_millis(2999)));
        assert!(!b.covers(Duration::from_secs(3)));
    }

    proptest::proptest! {
        /// No text panics the parser; what it accepts prints back to an equal SPEC.
        #[test]
        fn any_text_parses_or_is_refused(text in "[a-z0-9=%,.+_ x]{0,60}") {
            if let Ok(s) = FaultSpec::parse(&text) {
                proptest::prop_assert_eq!(FaultSpec::parse(&s.to_string()).unwrap(), s);
            }
        }

        /// Generated SPECs round-trip through their canonical form.
        #[test]
        fn specs_round_trip(
            seed in proptest::num::u64::ANY,
            loss in 0u32..=100, dup in 0u32..=100, reorder in 0u32..=100,
            depth in 1u32..=MAX_DEPTH, delay in 0u64..5_000_000, qp in 0u32..=0xff_ffff,
        ) {
            let text = format!(
                "seed={seed},loss={loss}%,dup={dup}%,reorder={reorder}%{},delay={delay}ns,qp={qp}",
                if reorder > 0 { format!(",depth={depth}") } else { String::new() }
            );
            let s = FaultSpec::parse(&text).unwrap();
            proptest::prop_assert_eq!(s.loss, loss as f64);
            proptest::prop_assert_eq!(FaultSpec::parse(&s.to_string()).unwrap(), s);
        }
    }
}
