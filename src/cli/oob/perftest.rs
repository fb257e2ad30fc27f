//! The TCP side channel of perftest 4.5-0.17 (version string "6.06"): message codecs, the
//! lock-step exchanges, and the whole per-tool session sequences.
//!
//! Spec: `docs/interop/oob-exchange.md`, Part B (B2–B4, B11) and Part C.
//!
//! Every exchange is lock-step, `X(n)`: the client writes its n bytes then reads n, the server
//! reads n then writes n. The messages:
//!
//! | name | size | content |
//! |---|---|---|
//! | V | 16 | version text `"6.06"`, NUL-padded |
//! | SYS | 4 + 4 | page size (`cycle_buffer`) and cache-line size, big-endian `int`s; both sides keep the max |
//! | M | 2 | MTU enum as ASCII digit + NUL (`"3\0"` = 1024); both sides keep the min |
//! | K | 108 | per-QP key text `%04x:%04x:%06x:%06x:%08x:%016llx:` + 16 × `%02x:` + `%08x:` + NUL (59 bytes without GID) |
//! | R | 5 × 8 | BW report: size, iters (big-endian u64), peak, avg, msg rate (big-endian f64 bits) |
//! | D | 5 | `"done\0"`, written by both sides after the last K and never read |
//!
//! [`run_session`] runs a tool's whole sequence (how many K barriers, where, and R/D) and calls
//! a [`SessionHooks`] implementation at the points where the tool creates and connects QPs,
//! prints, and runs the measurement.
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};

use super::{OobError, Role, SideChannel, printable, read_msg, write_msg};
use crate::cli::report::{BwReport, Verb};

/// Default TCP port (`-p`).
pub const DEFAULT_PORT: u16 = 18515;
/// The version we advertise: Debian's perftest 4.5-0.17 reports "6.06".
pub const VERSION: &str = "6.06";
/// Size of the version message (`MAX_VERSION`).
pub const VERSION_MSG_LEN: usize = 16;
/// Oldest peer version perftest 6.06 accepts.
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Size of the K message with a GID (`KEY_MSG_SIZE_GID`), always used on RoCE.
pub const KEY_MSG_LEN_GID: usize = 108;
/// Size of the K message without a GID (`KEY_MSG_SIZE`): IB link without `-x`.
pub const KEY_MSG_LEN_NO_GID: usize = 59;
/// Size of the K message over perftest's rdma_cm control channel (`-R`): `struct
/// pingpong_dest` as x86-64 lays it out, its integers big-endian (`HAVE_ENDIAN`).
pub const KEY_MSG_LEN_RDMA_CM: usize = 56;
/// Size of the MTU message for peers ≥ 5.31.
pub const MTU_MSG_LEN: usize = 2;
/// The final message, written by both sides and never read.
pub const DONE_MSG: &[u8; 5] = b"done\0";
/// Page size we advertise (`cycle_buffer`).
pub const DEFAULT_CYCLE_BUFFER: u32 = 4096;
/// Cache-line size we advertise.
pub const DEFAULT_CACHE_LINE: u32 = 64;
/// Largest page / cache-line size accepted from a peer (a sanity bound against garbage; real
/// values are 4 KiB..64 KiB and 64..256 bytes).
pub const MAX_SYS_VALUE: u32 = 1 << 30;
/// The default MTU enum (1024 bytes), for tests and defaults.
pub const MTU_1024: u8 = 3;

const WHAT_VERSION: &str = "perftest version";
const WHAT_PAGE: &str = "perftest page size";
const WHAT_CACHE: &str = "perftest cache-line size";
const WHAT_MTU: &str = "perftest MTU";
const WHAT_KEY: &str = "perftest QP key message";
const WHAT_REPORT: &str = "perftest BW report";
const WHAT_DONE: &str = "perftest \"done\" message";

/// `MTU_SIZE()`: bytes of an `ibv_mtu` enum value (1 → 256 … 5 → 4096).
pub fn mtu_bytes(mtu: u8) -> u64 {
    1u64 << (7 + u32::from(mtu.min(56)))
}

/// `BUFF_SIZE(size, cycle_buffer)`: the per-QP region size.
pub fn buff_size(size: u64, cycle_buffer: u64) -> u64 {
    size.max(cycle_buffer)
}

/// `INC(size, cache_line)`: the address step between consecutive messages.
pub fn inc(size: u64, cache_line: u64) -> u64 {
    if size > cache_line { size.div_ceil(cache_line.max(1)) * cache_line } else { cache_line }
}

/// Which K message format is read and written. perftest's reader picks it from its **own**
/// GID index: any index other than -1 (always on RoCE) means [`KeyFormat::Gid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KeyFormat {
    /// 108 bytes, with the GID.
    #[default]
    Gid,
    /// 59 bytes, no GID.
    NoGid,
    /// 56 bytes of binary `struct pingpong_dest`: perftest's `-R` control channel, where every
    /// message is one RDMA SEND (`rdma_write_keys`/`rdma_read_keys`).
    RdmaCm,
}

impl KeyFormat {
    /// The format perftest uses for a local GID index.
    pub fn for_gid_index(gid_index: i32) -> Self {
        if gid_index == -1 { KeyFormat::NoGid } else { KeyFormat::Gid }
    }

    /// Message size on the wire, NUL included.
    pub fn msg_len(self) -> usize {
        match self {
            KeyFormat::Gid => KEY_MSG_LEN_GID,
            KeyFormat::NoGid => KEY_MSG_LEN_NO_GID,
            KeyFormat::RdmaCm => KEY_MSG_LEN_RDMA_CM,
        }
    }
}

/// One QP's record in the K message (perftest's `struct pingpong_dest` as sent over TCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PerftestDest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA reads/atomics this side accepts as responder: 1 for send/write, the
    /// device maximum (128 on rxe) or `-o` for read/atomic. The peer uses it as `max_rd_atomic`.
    pub out_reads: u16,
    /// QP number (24 bits; higher bits are dropped on encode).
    pub qpn: u32,
    /// Initial PSN (24 bits; higher bits are dropped on encode).
    pub psn: u32,
    /// rkey of the MR the peer targets.
    pub rkey: u32,
    /// Address of this QP's remote-target region.
    pub vaddr: u64,
    /// GID in network byte order (not sent in the no-GID format).
    pub gid: [u8; 16],
    /// SRQ number (XRC/DC only; 0 otherwise).
    pub srqn: u32,
}

impl PerftestDest {
    fn head(&self) -> String {
        format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        )
    }

    /// The 108-byte GID-format message (107 characters and a NUL).
    pub fn encode_gid(&self) -> [u8; KEY_MSG_LEN_GID] {
        let mut text = self.head();
        text.push(':');
        for b in self.gid {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        let mut msg = [0u8; KEY_MSG_LEN_GID];
        msg[..KEY_MSG_LEN_GID - 1].copy_from_slice(text.as_bytes());
        msg
    }

    /// The 59-byte no-GID message `%04x:%04x:%06x:%06x:%08x:%016llx:%08x` and a NUL.
    pub fn encode_no_gid(&self) -> [u8; KEY_MSG_LEN_NO_GID] {
        let text = format!("{}:{:08x}", self.head(), self.srqn);
        let mut msg = [0u8; KEY_MSG_LEN_NO_GID];
        msg[..KEY_MSG_LEN_NO_GID - 1].copy_from_slice(text.as_bytes());
        msg
    }

    /// The 56-byte binary record of perftest's rdma_cm control channel: `int lid, out_reads,
    /// qpn, psn; unsigned rkey;` 4 bytes of padding, `unsigned long long vaddr; union ibv_gid
    /// gid; unsigned srqn; int gid_index`, the integers big-endian, the GID as is. We send
    /// GID index 0 in the last field: perftest never reads it.
    pub fn encode_rdma_cm(&self) -> [u8; KEY_MSG_LEN_RDMA_CM] {
        let mut m = [0u8; KEY_MSG_LEN_RDMA_CM];
        m[0..4].copy_from_slice(&u32::from(self.lid).to_be_bytes());
        m[4..8].copy_from_slice(&u32::from(self.out_reads).to_be_bytes());
        m[8..12].copy_from_slice(&(self.qpn & 0xff_ffff).to_be_bytes());
        m[12..16].copy_from_slice(&(self.psn & 0xff_ffff).to_be_bytes());
        m[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        m[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        m[32..48].copy_from_slice(&self.gid);
        m[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        m
    }

    /// Decodes the binary record as `rdma_read_keys` does: lid, out_reads, qpn, psn, rkey,
    /// vaddr and gid (perftest leaves `srqn` and `gid_index` unread). Values are truncated to
    /// the widths softroce keeps; never panics.
    pub fn decode_rdma_cm(msg: &[u8]) -> Result<Self, OobError> {
        let Some(m) = msg.get(..KEY_MSG_LEN_RDMA_CM) else {
            return Err(OobError::Malformed {
                what: WHAT_KEY,
                detail: format!("{} bytes instead of {KEY_MSG_LEN_RDMA_CM}", msg.len()),
            });
        };
        let u32_at = |o: usize| u32::from_be_bytes([m[o], m[o + 1], m[o + 2], m[o + 3]]);
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&m[24..32]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&m[32..48]);
        Ok(Self {
            lid: u32_at(0) as u16,
            out_reads: u32_at(4).min(u32::from(u16::MAX)) as u16,
            qpn: u32_at(8) & 0xff_ffff,
            psn: u32_at(12) & 0xff_ffff,
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid,
            srqn: 0,
        })
    }

    /// The message in `format`.
    pub fn encode(&self, format: KeyFormat) -> Vec<u8> {
        match format {
            KeyFormat::Gid => self.encode_gid().to_vec(),
            KeyFormat::NoGid => self.encode_no_gid().to_vec(),
            KeyFormat::RdmaCm => self.encode_rdma_cm().to_vec(),
        }
    }

    /// Decodes a K message of `format` (the no-GID format leaves `gid` zero).
    ///
    /// Strict: exact field widths and punctuation as perftest's `sprintf` produces them
    /// (hex digits in either case), the trailing `:` of the GID format, and the final NUL.
    /// Anything else is [`OobError::Malformed`]; never panics.
    pub fn decode(format: KeyFormat, msg: &[u8]) -> Result<Self, OobError> {
        if format == KeyFormat::RdmaCm {
            if msg.len() != KEY_MSG_LEN_RDMA_CM {
                return Err(OobError::Malformed {
                    what: WHAT_KEY,
                    detail: format!("{} bytes instead of {KEY_MSG_LEN_RDMA_CM}", msg.len()),
                });
            }
            return Self::decode_rdma_cm(msg);
        }
        const HEAD: [usize; 6] = [4, 4, 6, 6, 8, 16];
        let widths: Vec<usize> = match format {
            KeyFormat::Gid => HEAD.iter().copied().chain([2; 16]).chain([8]).collect(),
            KeyFormat::NoGid | KeyFormat::RdmaCm => HEAD.iter().copied().chain([8]).collect(),
        };
        let trailing_colon = format == KeyFormat::Gid;
        let bad = |detail: String| OobError::Malformed { what: WHAT_KEY, detail };
        if msg.len() != format.msg_len() {
            return Err(bad(format!("{} bytes instead of {}", msg.len(), format.msg_len())));
        }
        let mut fields = Vec::with_capacity(widths.len());
        let mut pos = 0;
        for (i, &w) in widths.iter().enumerate() {
            let field = &msg[pos..pos + w];
            if !field.iter().all(u8::is_ascii_hexdigit) {
                return Err(bad(format!("field {} is not {w} hex digits in \"{}\"", i + 1, printable(msg))));
            }
            // At most 16 hex digits: fits in a u64.
            fields.push(field.iter().fold(0u64, |acc, &c| (acc << 4) | u64::from(hex_val(c))));
            pos += w;
            if i + 1 < widths.len() || trailing_colon {
                if msg[pos] != b':' {
                    return Err(bad(format!("missing ':' after field {} in \"{}\"", i + 1, printable(msg))));
                }
                pos += 1;
            }
        }
        if msg[pos] != 0 {
            return Err(bad(format!("not NUL-terminated: \"{}\"", printable(msg))));
        }
        let mut gid = [0u8; 16];
        if format == KeyFormat::Gid {
            for (g, &v) in gid.iter_mut().zip(&fields[6..22]) {
                *g = v as u8;
            }
        }
        Ok(Self {
            lid: fields[0] as u16,
            out_reads: fields[1] as u16,
            qpn: fields[2] as u32,
            psn: fields[3] as u32,
            rkey: fields[4] as u32,
            vaddr: fields[5],
            gid,
            srqn: fields[fields.len() - 1] as u32,
        })
    }

    /// perftest's `ipv6_addr_v4mapped()`: `::ffff:a.b.c.d`, or the IPv4-encoded multicast form
    /// `ff0e::ffff:a.b.c.d`.
    pub fn has_ipv4_mapped_gid(&self) -> bool {
        let g = &self.gid;
        let tail = g[4..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff;
        tail && (g[..4] == [0, 0, 0, 0] || g[..4] == [0xff, 0x0e, 0, 0])
    }
}

fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

/// The C `atof()` of a version text: the longest leading decimal number (after leading white
/// space), or 0 if there is none; never NaN. Hex floats, `inf` and `nan` are not recognised (they give 0,
/// which fails the version check).
fn c_atof(text: &[u8]) -> f64 {
    let s = text.iter().skip_while(|b| b" \t\n\x0b\x0c\r".contains(b)).copied().collect::<Vec<u8>>();
    let mut end = 0;
    if matches!(s.first(), Some(b'+' | b'-')) {
        end = 1;
    }
    let digits = |from: usize| s[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let int = digits(end);
    end += int;
    let mut frac = 0;
    if s.get(end) == Some(&b'.') {
        frac = digits(end + 1);
        end += 1 + frac;
    }
    if int + frac == 0 {
        return 0.0;
    }
    if matches!(s.get(end), Some(b'e' | b'E')) {
        let mut e = end + 1;
        if matches!(s.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        let n = digits(e);
        if n > 0 {
            end = e + n;
        }
    }
    std::str::from_utf8(&s[..end]).ok().and_then(|t| t.parse().ok()).unwrap_or(0.0)
}

/// What this side brings to the prologue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalParams {
    /// Our page size (`cycle_buffer`); advertise [`DEFAULT_CYCLE_BUFFER`].
    pub cycle_buffer: u32,
    /// Our cache-line size; advertise [`DEFAULT_CACHE_LINE`].
    pub cache_line: u32,
    /// Our MTU as an `ibv_mtu` enum (1..=5): the port's active MTU, or `-m` clamped to it.
    pub mtu: u8,
}

impl Default for LocalParams {
    fn default() -> Self {
        Self { cycle_buffer: DEFAULT_CYCLE_BUFFER, cache_line: DEFAULT_CACHE_LINE, mtu: MTU_1024 }
    }
}

/// The outcome of the prologue (V, SYS, M): what both sides now use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's version text (up to its first NUL, made printable).
    pub remote_version: String,
    /// max(local, remote) page size: the buffer layout unit.
    pub cycle_buffer: u32,
    /// max(local, remote) cache-line size.
    pub cache_line: u32,
    /// min(local, remote) MTU enum (1..=5).
    pub mtu: u8,
}

/// A perftest side channel: a stream plus our role and K format.
#[derive(Debug)]
pub struct Channel<S> {
    stream: S,
    role: Role,
    key_format: KeyFormat,
}

impl<S: Read + Write> Channel<S> {
    /// Wraps a connected stream.
    pub fn new(stream: S, role: Role, key_format: KeyFormat) -> Self {
        Self { stream, role, key_format }
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The K format in use.
    pub fn key_format(&self) -> KeyFormat {
        self.key_format
    }

    /// The underlying stream (e.g. to set timeouts).
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// Gives the stream back.
    pub fn into_inner(self) -> S {
        self.stream
    }

    /// One lock-step exchange `X(n)` of equal-size messages: the client writes then reads,
    /// the server reads then writes. Returns the peer's bytes.
    pub fn exchange<const N: usize>(
        &mut self,
        mine: &[u8; N],
        what: &'static str,
    ) -> Result<[u8; N], OobError> {
        let mut theirs = [0u8; N];
        match self.role {
            Role::Client => {
                write_msg(&mut self.stream, mine, what)?;
                read_msg(&mut self.stream, &mut theirs, what)?;
            }
            Role::Server => {
                read_msg(&mut self.stream, &mut theirs, what)?;
                write_msg(&mut self.stream, mine, what)?;
            }
        }
        Ok(theirs)
    }

    /// V: exchanges version strings and applies `check_version_compatibility()`: a peer whose
    /// version text reads below 5.70 (or not as a number) is [`OobError::IncompatibleVersion`].
    /// Returns the peer's version text.
    pub fn exchange_versions(&mut self) -> Result<String, OobError> {
        let mut mine = [0u8; VERSION_MSG_LEN];
        mine[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let theirs = self.exchange(&mine, WHAT_VERSION)?;
        let text = &theirs[..theirs.iter().position(|&b| b == 0).unwrap_or(VERSION_MSG_LEN)];
        let shown = printable(text);
        if c_atof(text) < MIN_PEER_VERSION {
            return Err(OobError::IncompatibleVersion(shown));
        }
        Ok(shown)
    }

    /// SYS: exchanges page size and cache-line size (two X(4), big-endian `int`) and returns
    /// `(max page size, max cache line)`. Values outside `1..=MAX_SYS_VALUE` are malformed.
    pub fn exchange_sys_data(&mut self, cycle_buffer: u32, cache_line: u32) -> Result<(u32, u32), OobError> {
        let mut out = [0u32; 2];
        for (slot, (mine, what)) in out.iter_mut().zip([(cycle_buffer, WHAT_PAGE), (cache_line, WHAT_CACHE)])
        {
            let theirs = i32::from_be_bytes(self.exchange(&(mine as i32).to_be_bytes(), what)?);
            let valid = u32::try_from(theirs).ok().filter(|v| (1..=MAX_SYS_VALUE).contains(v));
            let Some(theirs) = valid else {
                return Err(OobError::Malformed { what, detail: format!("value {theirs}") });
            };
            *slot = mine.max(theirs);
        }
        Ok((out[0], out[1]))
    }

    /// M: exchanges MTU enums as `"<digit>\0"` and returns the smaller one.
    /// The peer's message must be a digit 1..=5 and a NUL.
    pub fn exchange_mtu(&mut self, local_mtu: u8) -> Result<u8, OobError> {
        if !(1..=5).contains(&local_mtu) {
            return Err(OobError::InvalidArgument(format!("MTU enum {local_mtu} is not 1..=5")));
        }
        let theirs = self.exchange(&[b'0' + local_mtu, 0], WHAT_MTU)?;
        match theirs {
            [d @ b'1'..=b'5', 0] => Ok(local_mtu.min(d - b'0')),
            _ => Err(OobError::Malformed { what: WHAT_MTU, detail: format!("\"{}\"", printable(&theirs)) }),
        }
    }

    /// The common prologue: V, SYS (page size, cache line), M.
    pub fn prologue(&mut self, local: &LocalParams) -> Result<Negotiated, OobError> {
        let remote_version = self.exchange_versions()?;
        let (cycle_buffer, cache_line) = self.exchange_sys_data(local.cycle_buffer, local.cache_line)?;
        let mtu = self.exchange_mtu(local.mtu)?;
        Ok(Negotiated { remote_version, cycle_buffer, cache_line, mtu })
    }

    /// K: one `ctx_hand_shake()`: exchanges key messages and returns the peer's record.
    pub fn hand_shake(&mut self, mine: &PerftestDest) -> Result<PerftestDest, OobError> {
        let theirs = match self.key_format {
            KeyFormat::Gid => self.exchange(&mine.encode_gid(), WHAT_KEY)?.to_vec(),
            KeyFormat::NoGid => self.exchange(&mine.encode_no_gid(), WHAT_KEY)?.to_vec(),
            KeyFormat::RdmaCm => self.exchange(&mine.encode_rdma_cm(), WHAT_KEY)?.to_vec(),
        };
        PerftestDest::decode(self.key_format, &theirs)
    }

    /// R: `xchg_bw_reports()`: five X(8) (size, iters, peak, avg, msg rate), plus four more
    /// (port 1/2 avg and rate) with `--report-per-port`. Returns the peer's report.
    pub fn exchange_bw_report(&mut self, mine: &BwReport, per_port: bool) -> Result<BwReport, OobError> {
        let mut x = |v: u64| self.exchange(&v.to_be_bytes(), WHAT_REPORT).map(u64::from_be_bytes);
        let mut r = BwReport {
            size: x(mine.size)?,
            iters: x(mine.iters)?,
            bw_peak: f64::from_bits(x(mine.bw_peak.to_bits())?),
            bw_avg: f64::from_bits(x(mine.bw_avg.to_bits())?),
            msg_rate: f64::from_bits(x(mine.msg_rate.to_bits())?),
            ..BwReport::default()
        };
        if per_port {
            r.bw_avg_p1 = f64::from_bits(x(mine.bw_avg_p1.to_bits())?);
            r.msg_rate_p1 = f64::from_bits(x(mine.msg_rate_p1.to_bits())?);
            r.bw_avg_p2 = f64::from_bits(x(mine.bw_avg_p2.to_bits())?);
            r.msg_rate_p2 = f64::from_bits(x(mine.msg_rate_p2.to_bits())?);
        }
        Ok(r)
    }

    /// D: writes `"done\0"` (nobody reads it).
    pub fn write_done(&mut self) -> Result<(), OobError> {
        write_msg(&mut self.stream, DONE_MSG, WHAT_DONE)
    }
}

impl<S: SideChannel> Channel<S> {
    /// `ctx_close_connection()`: a final K, then D, then close (after
    /// [`SideChannel::linger_close`], which drains the peer's `"done"`). Over the rdma_cm
    /// control channel ([`KeyFormat::RdmaCm`]) there is no D.
    pub fn close(mut self, mine: &PerftestDest) -> Result<(), OobError> {
        self.hand_shake(mine)?;
        if self.key_format != KeyFormat::RdmaCm {
            self.write_done()?;
        }
        self.stream.linger_close();
        Ok(())
    }
}

/// Connects to a perftest server: IPv4 only, optionally from `source_ip`, no retry.
pub fn connect(host: &str, port: u16, source_ip: Option<Ipv4Addr>) -> std::io::Result<TcpStream> {
    super::connect_tcp(host, port, true, source_ip.map(Into::into))
}

/// Opens a perftest server's listening socket on `0.0.0.0` (or `source_ip`).
/// Accept the single client with [`super::accept_one`].
pub fn listen(port: u16, source_ip: Option<Ipv4Addr>) -> std::io::Result<TcpListener> {
    super::listen_tcp(port, true, source_ip.map(Into::into))
}

// ---------------------------------------------------------------------------------------------
// Whole sessions
// ---------------------------------------------------------------------------------------------

/// The eight perftest tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerftestTest {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_atomic_bw`.
    AtomicBw,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_atomic_lat`.
    AtomicLat,
    /// `ib_send_lat`.
    SendLat,
}

impl PerftestTest {
    /// The verb under test.
    pub fn verb(self) -> Verb {
        match self {
            PerftestTest::WriteBw | PerftestTest::WriteLat => Verb::Write,
            PerftestTest::ReadBw | PerftestTest::ReadLat => Verb::Read,
            PerftestTest::AtomicBw | PerftestTest::AtomicLat => Verb::Atomic,
            PerftestTest::SendBw | PerftestTest::SendLat => Verb::Send,
        }
    }

    /// True for the `_bw` tools.
    pub fn is_bw(self) -> bool {
        matches!(
            self,
            PerftestTest::WriteBw | PerftestTest::ReadBw | PerftestTest::AtomicBw | PerftestTest::SendBw
        )
    }
}

/// How many measured runs a session has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RunMode {
    /// One run (perftest's `RUN_REGULAR`, also `-D`).
    #[default]
    Regular,
    /// `-a` (`RUN_ALL`): one run per size 2^1, 2^2, …, 2^count. perftest uses 23 sizes
    /// (up to 8 MiB), or log2(MTU) sizes for UD send tests. Not valid for atomic tests.
    AllSizes(usize),
}

impl RunMode {
    /// Number of runs.
    pub fn rounds(self) -> usize {
        match self {
            RunMode::Regular => 1,
            RunMode::AllSizes(n) => n,
        }
    }

    /// Message size of run `round` in `-a` mode: `2 << round`.
    pub fn all_sizes_size(round: usize) -> u64 {
        2u64 << round.min(62)
    }
}

/// What a session needs to know beyond the hooks. Test parameters (size, iterations, QP
/// count…) are not exchanged and must simply match the peer's command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// Which tool.
    pub test: PerftestTest,
    /// Client or server.
    pub role: Role,
    /// Our prologue values.
    pub local: LocalParams,
    /// K format ([`KeyFormat::for_gid_index`] of our GID index).
    pub key_format: KeyFormat,
    /// Regular or `-a`.
    pub run_mode: RunMode,
    /// `-b` (BW tests only).
    pub duplex: bool,
    /// `-D` (only changes the exchange of duplex send_bw: no R).
    pub duration: bool,
    /// `--report-per-port` (four more R fields).
    pub report_per_port: bool,
    /// `-R`: the test QPs are connected through rdma_cm (`create_rdma_cm_connection`): a K
    /// before and after [`SessionHooks::setup`], which connects them, and no GID type check.
    pub rdma_cm: bool,
}

impl SessionConfig {
    /// A default-option session of `test` as `role`.
    pub fn new(test: PerftestTest, role: Role) -> Self {
        Self {
            test,
            role,
            local: LocalParams::default(),
            key_format: KeyFormat::Gid,
            run_mode: RunMode::Regular,
            duplex: false,
            duration: false,
            report_per_port: false,
            rdma_cm: false,
        }
    }
}

/// The points of a perftest run where the tool does local work. [`run_session`] calls them in
/// the tool's order, with the TCP exchanges in between.
///
/// Only [`setup`](Self::setup), [`connect`](Self::connect) and
/// [`run_round`](Self::run_round) are required; the `show_*` hooks are where perftest prints.
pub trait SessionHooks {
    /// Error type of the caller's local work.
    type Error;

    /// After V/SYS/M: create resources for the negotiated layout and MTU, print the
    /// test-information block, and return our per-QP records (at least one).
    fn setup(&mut self, negotiated: &Negotiated) -> Result<Vec<PerftestDest>, Self::Error>;

    /// After the first K round (one record per QP, GID types checked): move the QPs to RTR
    /// (server of a non-duplex BW test) or RTR+RTS, and create UD address handles.
    fn connect(&mut self, remote: &[PerftestDest]) -> Result<(), Self::Error>;

    /// Print the ` local address` lines for all QPs.
    fn show_local(&mut self, _local: &[PerftestDest]) {}

    /// Print the ` remote address` line of QP `index` (called right after its K).
    fn show_remote(&mut self, _index: usize, _remote: &PerftestDest) {}

    /// Print `RESULT_LINE` and the column header (not called on read/atomic_lat servers).
    fn show_header(&mut self) {}

    /// Send tests only, before the pre-run barrier of run `round`: post receives (server, or
    /// both sides of send_lat / duplex) and build send WRs. The peer starts sending right after
    /// the barrier.
    fn prepare_round(&mut self, _round: usize) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Run measurement `round` and print its row(s). BW tests return their report: the client
    /// sends the last one in R (non-duplex), duplex sides exchange each one. Not called on the
    /// server of non-duplex write/read/atomic_bw nor on read/atomic_lat servers.
    fn run_round(&mut self, round: usize) -> Result<Option<BwReport>, Self::Error>;

    /// A BW report from the peer: on the non-duplex write/read/atomic_bw server this is the
    /// client's result, printed as the server's own row; in duplex mode, called after each run
    /// (perftest prints own + peer, see [`BwReport::combined`]).
    fn peer_report(&mut self, _peer: &BwReport) {}

    /// Print the final `RESULT_LINE`.
    fn show_footer(&mut self) {}
}

/// A session failure: the side channel's, or the caller's own from a hook.
#[derive(Debug)]
pub enum SessionError<E> {
    /// The exchange failed.
    Oob(OobError),
    /// A hook failed.
    Hook(E),
}

impl<E: std::fmt::Display> std::fmt::Display for SessionError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Oob(e) => e.fmt(f),
            SessionError::Hook(e) => e.fmt(f),
        }
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for SessionError<E> {}

impl<E> From<OobError> for SessionError<E> {
    fn from(e: OobError) -> Self {
        SessionError::Oob(e)
    }
}

/// What a completed session exchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOutcome {
    /// The prologue's result.
    pub negotiated: Negotiated,
    /// Our records, as returned by [`SessionHooks::setup`].
    pub local: Vec<PerftestDest>,
    /// The peer's records (from the last K of each QP).
    pub remote: Vec<PerftestDest>,
}

/// Runs one perftest tool's complete side-channel sequence (spec B4) over `stream` as
/// `cfg.role`, calling `hooks` at the tool's local steps. Consumes the stream: it is closed
/// (after `"done"`) at the end, or simply dropped for write_lat, which never closes.
///
/// Common to all: V, SYS, SYS, M → `setup`. Then, with N QPs and `Kᵢ` one exchange of QP i's
/// record (`K` = QP 0's):
///
/// * **write/read/atomic_bw**: K₀…K_{N-1} → `connect` → `show_local` → Kᵢ + `show_remote(i)`
///   for each i → K → `show_header`.
///   * non-duplex server: K (waits for the client's end) → R (we send zeros) → `peer_report`
///     → close (K, D) → `show_footer` (atomic_bw: footer before the close);
///   * client / duplex: per round: [duplex: K] `run_round` [duplex with `-a`: K]
///     [duplex: R → `peer_report`]; then `show_footer`; [non-duplex client: K, R with the last
///     report]; close (K, D).
/// * **send_bw**: K₀…K_{N-1} → `connect` → K → `show_local` → Kᵢ + `show_remote(i)` →
///   `show_header` → per round: `prepare_round`, K, `run_round`, [duplex and not `-D`: R →
///   `peer_report`], [`-a`: K] → `show_footer` → close.
/// * **write_lat**: K, K₀ → `connect` → `show_local` → K₀ + `show_remote` → K →
///   `show_header` → `run_round` per round → `show_footer`. No close, no D.
/// * **read_lat / atomic_lat**: as write_lat up to the last K; then the server closes at once
///   (K, D) → `show_footer`; the client `show_header` → `run_round` per round → close →
///   `show_footer`.
/// * **send_lat**: K₀ → `connect` → K → `show_local` → K₀ + `show_remote` → `show_header` → per
///   round: `prepare_round`, K, `run_round` → `show_footer` → close.
pub fn run_session<S: SideChannel, H: SessionHooks>(
    stream: S,
    cfg: &SessionConfig,
    hooks: &mut H,
) -> Result<SessionOutcome, SessionError<H::Error>> {
    use PerftestTest::*;
    let test = cfg.test;
    if cfg.duplex && !test.is_bw() {
        return Err(OobError::InvalidArgument("duplex (-b) is for BW tests only".into()).into());
    }
    if matches!(test, AtomicBw | AtomicLat) && cfg.run_mode != RunMode::Regular {
        return Err(OobError::InvalidArgument("atomic tests cannot run all sizes (-a)".into()).into());
    }
    if cfg.run_mode.rounds() == 0 {
        return Err(OobError::InvalidArgument("-a with zero sizes".into()).into());
    }
    let mut ch = Channel::new(stream, cfg.role, cfg.key_format);
    let negotiated = ch.prologue(&cfg.local)?;
    let local = if cfg.rdma_cm {
        // `create_rdma_cm_connection`: a K (perftest's records are still zero) before the
        // test QPs connect, and one after.
        ch.hand_shake(&PerftestDest::default())?;
        let local = hooks.setup(&negotiated).map_err(SessionError::Hook)?;
        ch.hand_shake(local.first().unwrap_or(&PerftestDest::default()))?;
        local
    } else {
        hooks.setup(&negotiated).map_err(SessionError::Hook)?
    };
    if local.is_empty() {
        return Err(OobError::InvalidArgument("setup returned no QP records".into()).into());
    }
    let remote = vec![PerftestDest::default(); local.len()];
    let mut s = Session { ch, negotiated, local, remote, rdma_cm: cfg.rdma_cm };
    let client = cfg.role == Role::Client;
    let rounds = cfg.run_mode.rounds();
    let run_all = matches!(cfg.run_mode, RunMode::AllSizes(_));
    let zero = BwReport::default();

    match test {
        WriteBw | ReadBw | AtomicBw => {
            s.key_round()?;
            s.connect(hooks)?;
            hooks.show_local(&s.local);
            s.key_round_shown(hooks)?;
            s.k()?;
            hooks.show_header();
            if !client && !cfg.duplex {
                s.k()?;
                let peer = s.ch.exchange_bw_report(&zero, cfg.report_per_port)?;
                hooks.peer_report(&peer);
                if test == AtomicBw {
                    hooks.show_footer();
                }
                let outcome = s.close()?;
                if test != AtomicBw {
                    hooks.show_footer();
                }
                return Ok(outcome);
            }
            let mut last = None;
            for round in 0..rounds {
                if cfg.duplex {
                    s.k()?;
                }
                let report = hooks.run_round(round).map_err(SessionError::Hook)?;
                if cfg.duplex {
                    if run_all {
                        s.k()?;
                    }
                    let peer =
                        s.ch.exchange_bw_report(report.as_ref().unwrap_or(&zero), cfg.report_per_port)?;
                    hooks.peer_report(&peer);
                }
                last = report;
            }
            hooks.show_footer();
            if client && !cfg.duplex {
                s.k()?;
                // The server's values are uninitialised memory in perftest: ignore them.
                s.ch.exchange_bw_report(last.as_ref().unwrap_or(&zero), cfg.report_per_port)?;
            }
            Ok(s.close()?)
        }
        SendBw | SendLat => {
            s.key_round()?;
            s.connect(hooks)?;
            s.k()?;
            hooks.show_local(&s.local);
            s.key_round_shown(hooks)?;
            hooks.show_header();
            for round in 0..rounds {
                hooks.prepare_round(round).map_err(SessionError::Hook)?;
                s.k()?;
                let report = hooks.run_round(round).map_err(SessionError::Hook)?;
                if test == SendBw {
                    if cfg.duplex && !cfg.duration {
                        let peer =
                            s.ch.exchange_bw_report(report.as_ref().unwrap_or(&zero), cfg.report_per_port)?;
                        hooks.peer_report(&peer);
                    }
                    if run_all {
                        s.k()?;
                    }
                }
            }
            hooks.show_footer();
            Ok(s.close()?)
        }
        WriteLat | ReadLat | AtomicLat => {
            s.k()?;
            s.key_round()?;
            s.connect(hooks)?;
            hooks.show_local(&s.local);
            s.key_round_shown(hooks)?;
            s.k()?;
            if test != WriteLat && !client {
                let outcome = s.close()?;
                hooks.show_footer();
                return Ok(outcome);
            }
            hooks.show_header();
            for round in 0..rounds {
                hooks.run_round(round).map_err(SessionError::Hook)?;
            }
            if test == WriteLat {
                hooks.show_footer();
                // write_lat never closes explicitly: the process exits. Dropping does the same.
                let Session { negotiated, local, remote, .. } = s;
                // (Over rdma_cm, too, write_lat ends without a closing K.)
                return Ok(SessionOutcome { negotiated, local, remote });
            }
            let outcome = s.close()?;
            hooks.show_footer();
            Ok(outcome)
        }
    }
}

/// Session state: the channel, the prologue's result and the latest records.
struct Session<S> {
    ch: Channel<S>,
    negotiated: Negotiated,
    local: Vec<PerftestDest>,
    remote: Vec<PerftestDest>,
    /// `-R`: no GID type check.
    rdma_cm: bool,
}

impl<S: SideChannel> Session<S> {
    /// K with QP 0's record.
    fn k(&mut self) -> Result<(), OobError> {
        self.remote[0] = self.ch.hand_shake(&self.local[0])?;
        Ok(())
    }

    /// K₀…K_{N-1}.
    fn key_round(&mut self) -> Result<(), OobError> {
        for i in 0..self.local.len() {
            self.remote[i] = self.ch.hand_shake(&self.local[i])?;
        }
        Ok(())
    }

    /// K₀…K_{N-1}, showing each remote record after its exchange.
    fn key_round_shown<H: SessionHooks>(&mut self, hooks: &mut H) -> Result<(), OobError> {
        for i in 0..self.local.len() {
            self.remote[i] = self.ch.hand_shake(&self.local[i])?;
            hooks.show_remote(i, &self.remote[i]);
        }
        Ok(())
    }

    /// GID type check, then the caller's QP connection.
    fn connect<H: SessionHooks>(&mut self, hooks: &mut H) -> Result<(), SessionError<H::Error>> {
        if !self.rdma_cm && self.local[0].has_ipv4_mapped_gid() != self.remote[0].has_ipv4_mapped_gid() {
            return Err(OobError::GidIncompatible.into());
        }
        hooks.connect(&self.remote).map_err(SessionError::Hook)
    }

    /// Final K and D.
    fn close(self) -> Result<SessionOutcome, OobError> {
        let Session { ch, negotiated, local, remote, .. } = self;
        ch.close(&local[0])?;
        Ok(SessionOutcome { negotiated, local, remote })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::oob::accept_one;
    use std::sync::{Arc, Mutex};
    use std::thread;
    use std::time::Duration;

    const MAPPED_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 122, 10];

    /// The spec's B3 example, as text (NUL appended by `wire`).
    const SPEC_K: &str = "0000:0001:000011:a1b2c3:00001234:00007f0012345000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:7a:0a:00000000:";

    fn wire(text: &str) -> Vec<u8> {
        let mut v = text.as_bytes().to_vec();
        v.push(0);
        v
    }

    fn spec_dest() -> PerftestDest {
        PerftestDest {
            lid: 0,
            out_reads: 1,
            qpn: 0x11,
            psn: 0xa1b2c3,
            rkey: 0x1234,
            vaddr: 0x7f00_1234_5000,
            gid: MAPPED_GID,
            srqn: 0,
        }
    }

    #[test]
    fn key_message_matches_spec_example() {
        let expected = wire(SPEC_K);
        assert_eq!(expected.len(), 108);
        assert_eq!(spec_dest().encode_gid().to_vec(), expected);
        assert_eq!(PerftestDest::decode(KeyFormat::Gid, &expected).unwrap(), spec_dest());
    }

    /// The `-R` record: `struct pingpong_dest` as x86-64 lays it out, big-endian integers,
    /// the GID raw; what perftest's `rdma_read_keys` reads back.
    #[test]
    fn key_message_rdma_cm_format() {
        let m = spec_dest().encode_rdma_cm();
        assert_eq!(m.len(), 56);
        assert_eq!(
            &m[0..20],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0x11, 0, 0xa1, 0xb2, 0xc3, 0, 0, 0x12, 0x34]
        );
        assert_eq!(&m[20..24], &[0; 4], "padding after rkey");
        assert_eq!(&m[24..32], &0x7f00_1234_5000u64.to_be_bytes());
        assert_eq!(&m[32..48], &MAPPED_GID);
        assert_eq!(PerftestDest::decode(KeyFormat::RdmaCm, &m).unwrap(), spec_dest());
        assert!(PerftestDest::decode(KeyFormat::RdmaCm, &m[..55]).is_err());
        // Out-of-range fields from a peer are truncated, never a panic.
        let mut junk = [0xffu8; 56];
        junk[4..8].copy_from_slice(&0x0001_0000u32.to_be_bytes());
        let d = PerftestDest::decode(KeyFormat::RdmaCm, &junk).unwrap();
        assert_eq!((d.qpn, d.psn, d.out_reads), (0xff_ffff, 0xff_ffff, u16::MAX));
    }

    #[test]
    fn key_message_no_gid_format() {
        let expected = wire("0000:0001:000011:a1b2c3:00001234:00007f0012345000:00000000");
        assert_eq!(expected.len(), 59);
        assert_eq!(spec_dest().encode_no_gid().to_vec(), expected);
        let d = PerftestDest::decode(KeyFormat::NoGid, &expected).unwrap();
        assert_eq!(d, PerftestDest { gid: [0; 16], ..spec_dest() });
    }

    #[test]
    fn key_message_masks_and_uppercase() {
        let d = PerftestDest {
            lid: 0xffff,
            out_reads: 0x80,
            qpn: 0xff12_3456,
            psn: 0x1ff_ffff,
            rkey: 0xdead_beef,
            vaddr: u64::MAX,
            gid: [0xfe; 16],
            srqn: 0x1234_5678,
        };
        let text = "ffff:0080:123456:ffffff:deadbeef:ffffffffffffffff:fe:fe:fe:fe:fe:fe:fe:fe:fe:fe:fe:fe:fe:fe:fe:fe:12345678:";
        assert_eq!(d.encode_gid().to_vec(), wire(text));
        let upper = wire(&text.to_uppercase());
        assert_eq!(
            PerftestDest::decode(KeyFormat::Gid, &upper).unwrap(),
            PerftestDest { qpn: 0x123456, psn: 0xffffff, ..d }
        );
    }

    #[test]
    fn key_message_rejects_garbage() {
        let good = wire(SPEC_K);
        let mut cases = vec![good[..107].to_vec(), vec![0u8; 108], vec![b':'; 108]];
        let mut no_trailing_colon = good.clone();
        no_trailing_colon[106] = 0;
        cases.push(no_trailing_colon);
        let mut bad_digit = good.clone();
        bad_digit[0] = b'x';
        cases.push(bad_digit);
        let mut no_nul = good.clone();
        no_nul[107] = b'0';
        cases.push(no_nul);
        for c in cases {
            assert!(
                matches!(PerftestDest::decode(KeyFormat::Gid, &c), Err(OobError::Malformed { .. })),
                "{c:?}"
            );
        }
        // A GID-format message read as no-GID (and vice versa) is rejected too.
        assert!(PerftestDest::decode(KeyFormat::NoGid, &good[..59]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn key_decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..130)) {
            let _ = PerftestDest::decode(KeyFormat::Gid, &bytes);
            let _ = PerftestDest::decode(KeyFormat::NoGid, &bytes);
        }

        #[test]
        fn key_decode_never_panics_near_valid(pos in 0usize..108, byte: u8) {
            let mut m = wire(SPEC_K);
            m[pos] = byte;
            let _ = PerftestDest::decode(KeyFormat::Gid, &m);
        }

        #[test]
        fn key_roundtrip(lid: u16, out_reads: u16, qpn in 0u32..0x100_0000, psn in 0u32..0x100_0000,
                         rkey: u32, vaddr: u64, gid: [u8; 16], srqn: u32) {
            let d = PerftestDest { lid, out_reads, qpn, psn, rkey, vaddr, gid, srqn };
            proptest::prop_assert_eq!(PerftestDest::decode(KeyFormat::Gid, &d.encode_gid()).unwrap(), d);
            proptest::prop_assert_eq!(
                PerftestDest::decode(KeyFormat::NoGid, &d.encode_no_gid()).unwrap(),
                PerftestDest { gid: [0; 16], ..d });
        }
    }

    #[test]
    fn ipv4_mapped_rule() {
        assert!(spec_dest().has_ipv4_mapped_gid());
        let mut g = MAPPED_GID;
        g[0] = 0xff;
        g[1] = 0x0e;
        assert!(PerftestDest { gid: g, ..spec_dest() }.has_ipv4_mapped_gid());
        let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56];
        assert!(!PerftestDest { gid: link_local, ..spec_dest() }.has_ipv4_mapped_gid());
        assert!(!PerftestDest::default().has_ipv4_mapped_gid());
    }

    #[test]
    fn atof_like_c() {
        assert_eq!(c_atof(b"6.06"), 6.06);
        assert_eq!(c_atof(b"5.70"), 5.70);
        assert_eq!(c_atof(b" 5.7abc"), 5.7);
        assert_eq!(c_atof(b"6."), 6.0);
        assert_eq!(c_atof(b".5"), 0.5);
        assert_eq!(c_atof(b"1e1x"), 10.0);
        assert_eq!(c_atof(b"1e"), 1.0);
        assert_eq!(c_atof(b""), 0.0);
        assert_eq!(c_atof(b"abc"), 0.0);
        assert_eq!(c_atof(b"-."), 0.0);
    }

    #[test]
    fn geometry_helpers() {
        assert_eq!((mtu_bytes(1), mtu_bytes(3), mtu_bytes(5)), (256, 1024, 4096));
        assert_eq!((buff_size(2, 4096), buff_size(65536, 4096)), (4096, 65536));
        assert_eq!((inc(8, 64), inc(64, 64), inc(65, 64), inc(2048, 64)), (64, 64, 128, 2048));
        assert_eq!((RunMode::all_sizes_size(0), RunMode::all_sizes_size(22)), (2, 8_388_608));
    }

    // --- loopback plumbing -------------------------------------------------------------------

    /// A TcpStream that logs each write's size into a shared log.
    struct Logged {
        inner: TcpStream,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Read for Logged {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.inner.read(buf)
        }
    }

    impl Write for Logged {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = self.inner.write(buf)?;
            self.log.lock().unwrap().push(format!("w{n}"));
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }

    impl SideChannel for Logged {
        fn linger_close(&mut self) {
            self.inner.linger_close();
        }
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = listen(0, Some(Ipv4Addr::LOCALHOST)).unwrap();
        let port = l.local_addr().unwrap().port();
        let c = connect("127.0.0.1", port, None).unwrap();
        let s = accept_one(l).unwrap();
        for t in [&c, &s] {
            t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        (c, s)
    }

    /// Hooks that log every call into the same log as the stream's writes.
    struct Recorder {
        log: Arc<Mutex<Vec<String>>>,
        local: Vec<PerftestDest>,
        report: BwReport,
        peer: Vec<BwReport>,
        negotiated: Option<Negotiated>,
    }

    impl Recorder {
        fn push(&self, s: impl Into<String>) {
            self.log.lock().unwrap().push(s.into());
        }
    }

    impl SessionHooks for Recorder {
        type Error = String;
        fn setup(&mut self, n: &Negotiated) -> Result<Vec<PerftestDest>, String> {
            self.negotiated = Some(n.clone());
            self.push("setup");
            Ok(self.local.clone())
        }
        fn connect(&mut self, remote: &[PerftestDest]) -> Result<(), String> {
            self.push(format!("connect{}", remote.len()));
            Ok(())
        }
        fn show_local(&mut self, _l: &[PerftestDest]) {
            self.push("local");
        }
        fn show_remote(&mut self, i: usize, _r: &PerftestDest) {
            self.push(format!("remote{i}"));
        }
        fn show_header(&mut self) {
            self.push("header");
        }
        fn prepare_round(&mut self, r: usize) -> Result<(), String> {
            self.push(format!("prepare{r}"));
            Ok(())
        }
        fn run_round(&mut self, r: usize) -> Result<Option<BwReport>, String> {
            self.push(format!("run{r}"));
            Ok(Some(BwReport { size: 2 << r, ..self.report }))
        }
        fn peer_report(&mut self, p: &BwReport) {
            self.push("peer");
            self.peer.push(*p);
        }
        fn show_footer(&mut self) {
            self.push("footer");
        }
    }

    fn qps(n: usize, base: u32, gid: [u8; 16]) -> Vec<PerftestDest> {
        (0..n as u32)
            .map(|i| PerftestDest {
                lid: 0,
                out_reads: 128,
                qpn: base + i,
                psn: 0x10_0000 + base + i,
                rkey: 0xabc0 + i,
                vaddr: 0x7f00_0000_0000 + u64::from(i) * 0x1_0000,
                gid,
                srqn: 0,
            })
            .collect()
    }

    struct Side {
        log: Vec<String>,
        outcome: SessionOutcome,
        peer: Vec<BwReport>,
        negotiated: Negotiated,
    }

    /// Runs our client against our server and returns both logs and outcomes.
    fn run_both(client_cfg: SessionConfig, server_cfg: SessionConfig, n: usize) -> (Side, Side) {
        let (c, s) = pair();
        let go = move |stream: TcpStream, cfg: SessionConfig, base: u32, report: BwReport| {
            let log = Arc::new(Mutex::new(Vec::new()));
            let mut hooks = Recorder {
                log: log.clone(),
                local: qps(n, base, MAPPED_GID),
                report,
                peer: vec![],
                negotiated: None,
            };
            let outcome = run_session(Logged { inner: stream, log: log.clone() }, &cfg, &mut hooks).unwrap();
            let log = log.lock().unwrap().clone();
            Side { log, outcome, peer: hooks.peer, negotiated: hooks.negotiated.unwrap() }
        };
        let srv_report = BwReport { bw_avg: 2.0, ..Default::default() };
        let server = thread::spawn(move || go(s, server_cfg, 0x200, srv_report));
        let client = go(
            c,
            client_cfg,
            0x100,
            BwReport { iters: 5000, bw_peak: 1.5, bw_avg: 1.25, ..Default::default() },
        );
        let server = server.join().unwrap();
        assert_eq!(client.outcome.remote, qps(n, 0x200, MAPPED_GID));
        assert_eq!(server.outcome.remote, qps(n, 0x100, MAPPED_GID));
        (client, server)
    }

    fn expect(spec: &str) -> Vec<String> {
        let mut v = Vec::new();
        for tok in spec.split_whitespace() {
            match tok.split_once('*') {
                Some((t, n)) => v.extend(std::iter::repeat_n(t.to_string(), n.parse().unwrap())),
                None => v.push(tok.to_string()),
            }
        }
        v
    }

    const PROLOGUE: &str = "w16 w4 w4 w2 setup";

    fn cfg(test: PerftestTest, role: Role) -> SessionConfig {
        SessionConfig::new(test, role)
    }

    #[test]
    fn write_read_atomic_bw_sessions() {
        for test in [PerftestTest::WriteBw, PerftestTest::ReadBw, PerftestTest::AtomicBw] {
            let (c, s) = run_both(cfg(test, Role::Client), cfg(test, Role::Server), 1);
            // 2N+1 = 3 K before the run; then K, R x5, K, D.
            assert_eq!(
                c.log,
                expect(&format!(
                    "{PROLOGUE} w108 connect1 local w108 remote0 w108 header run0 footer w108 w8*5 w108 w5"
                )),
                "{test:?} client"
            );
            let server_tail = if test == PerftestTest::AtomicBw {
                "w108 w8*5 peer footer w108 w5"
            } else {
                "w108 w8*5 peer w108 w5 footer"
            };
            assert_eq!(
                s.log,
                expect(&format!("{PROLOGUE} w108 connect1 local w108 remote0 w108 header {server_tail}")),
                "{test:?} server"
            );
            // The server got the client's last report.
            assert_eq!(
                s.peer,
                vec![BwReport { size: 2, iters: 5000, bw_peak: 1.5, bw_avg: 1.25, ..Default::default() }]
            );
            assert!(c.peer.is_empty());
            assert_eq!(c.negotiated.remote_version, "6.06");
            assert_eq!((s.negotiated.cycle_buffer, s.negotiated.cache_line, s.negotiated.mtu), (4096, 64, 3));
        }
    }

    #[test]
    fn write_bw_multi_qp_and_all_sizes() {
        let mut cc = cfg(PerftestTest::WriteBw, Role::Client);
        cc.run_mode = RunMode::AllSizes(3);
        let mut sc = cfg(PerftestTest::WriteBw, Role::Server);
        sc.run_mode = RunMode::AllSizes(3);
        let (c, s) = run_both(cc, sc, 3);
        // 2N+1 = 7 K before; -a runs with no sync between sizes.
        assert_eq!(
            c.log,
            expect(&format!(
                "{PROLOGUE} w108*3 connect3 local w108 remote0 w108 remote1 w108 remote2 w108 header \
                 run0 run1 run2 footer w108 w8*5 w108 w5"
            ))
        );
        assert_eq!(
            s.log,
            expect(&format!(
                "{PROLOGUE} w108*3 connect3 local w108 remote0 w108 remote1 w108 remote2 w108 header \
                 w108 w8*5 peer w108 w5 footer"
            ))
        );
        assert_eq!(s.peer[0].size, 8, "the report of the last size");
    }

    #[test]
    fn duplex_bw_sessions() {
        let mut cc = cfg(PerftestTest::WriteBw, Role::Client);
        cc.duplex = true;
        let mut sc = cfg(PerftestTest::WriteBw, Role::Server);
        sc.duplex = true;
        let (c, s) = run_both(cc, sc, 1);
        let e = expect(&format!(
            "{PROLOGUE} w108 connect1 local w108 remote0 w108 header w108 run0 w8*5 peer footer w108 w5"
        ));
        assert_eq!(c.log, e);
        assert_eq!(s.log, e);
        assert_eq!(c.peer[0].bw_avg, 2.0);
        assert_eq!(s.peer[0].bw_avg, 1.25);

        cc.run_mode = RunMode::AllSizes(2);
        sc.run_mode = RunMode::AllSizes(2);
        let (c, s) = run_both(cc, sc, 1);
        let e = expect(&format!(
            "{PROLOGUE} w108 connect1 local w108 remote0 w108 header \
             w108 run0 w108 w8*5 peer w108 run1 w108 w8*5 peer footer w108 w5"
        ));
        assert_eq!(c.log, e);
        assert_eq!(s.log, e);
    }

    #[test]
    fn send_bw_sessions() {
        let (c, s) =
            run_both(cfg(PerftestTest::SendBw, Role::Client), cfg(PerftestTest::SendBw, Role::Server), 2);
        // 2N+2 = 6 K before the first data packet, the last after prepare; then K, D.
        let e = expect(&format!(
            "{PROLOGUE} w108*2 connect2 w108 local w108 remote0 w108 remote1 header prepare0 w108 run0 footer w108 w5"
        ));
        assert_eq!(c.log, e);
        assert_eq!(s.log, e);

        let mut cc = cfg(PerftestTest::SendBw, Role::Client);
        cc.run_mode = RunMode::AllSizes(2);
        let mut sc = cfg(PerftestTest::SendBw, Role::Server);
        sc.run_mode = RunMode::AllSizes(2);
        let (c, s) = run_both(cc, sc, 1);
        let e = expect(&format!(
            "{PROLOGUE} w108 connect1 w108 local w108 remote0 header \
             prepare0 w108 run0 w108 prepare1 w108 run1 w108 footer w108 w5"
        ));
        assert_eq!(c.log, e);
        assert_eq!(s.log, e);

        // Duplex: R after each run, except in -D mode.
        cc.run_mode = RunMode::Regular;
        sc.run_mode = RunMode::Regular;
        cc.duplex = true;
        sc.duplex = true;
        let (c, _) = run_both(cc, sc, 1);
        assert_eq!(
            c.log,
            expect(&format!(
                "{PROLOGUE} w108 connect1 w108 local w108 remote0 header prepare0 w108 run0 w8*5 peer footer w108 w5"
            ))
        );
        cc.duration = true;
        sc.duration = true;
        let (c, _) = run_both(cc, sc, 1);
        assert_eq!(
            c.log,
            expect(&format!(
                "{PROLOGUE} w108 connect1 w108 local w108 remote0 header prepare0 w108 run0 footer w108 w5"
            ))
        );
    }

    #[test]
    fn write_lat_session() {
        let (c, s) =
            run_both(cfg(PerftestTest::WriteLat, Role::Client), cfg(PerftestTest::WriteLat, Role::Server), 1);
        // 4 K, and nothing after the run: no closing K, no D.
        let e = expect(&format!("{PROLOGUE} w108 w108 connect1 local w108 remote0 w108 header run0 footer"));
        assert_eq!(c.log, e);
        assert_eq!(s.log, e);
    }

    #[test]
    fn read_atomic_lat_sessions() {
        for test in [PerftestTest::ReadLat, PerftestTest::AtomicLat] {
            let (c, s) = run_both(cfg(test, Role::Client), cfg(test, Role::Server), 1);
            assert_eq!(
                c.log,
                expect(&format!(
                    "{PROLOGUE} w108 w108 connect1 local w108 remote0 w108 header run0 w108 w5 footer"
                ))
            );
            // The server prints no header and no row; its close K waits for the client's run.
            assert_eq!(
                s.log,
                expect(&format!("{PROLOGUE} w108 w108 connect1 local w108 remote0 w108 w108 w5 footer"))
            );
        }
        let mut cc = cfg(PerftestTest::ReadLat, Role::Client);
        cc.run_mode = RunMode::AllSizes(2);
        let (c, _) = run_both(cc, cfg(PerftestTest::ReadLat, Role::Server), 1);
        assert_eq!(
            c.log,
            expect(&format!(
                "{PROLOGUE} w108 w108 connect1 local w108 remote0 w108 header run0 run1 w108 w5 footer"
            ))
        );
    }

    #[test]
    fn send_lat_session() {
        let (c, s) =
            run_both(cfg(PerftestTest::SendLat, Role::Client), cfg(PerftestTest::SendLat, Role::Server), 1);
        let e = expect(&format!(
            "{PROLOGUE} w108 connect1 w108 local w108 remote0 header prepare0 w108 run0 footer w108 w5"
        ));
        assert_eq!(c.log, e);
        assert_eq!(s.log, e);
        let mut cc = cfg(PerftestTest::SendLat, Role::Client);
        cc.run_mode = RunMode::AllSizes(2);
        let mut sc = cfg(PerftestTest::SendLat, Role::Server);
        sc.run_mode = RunMode::AllSizes(2);
        let (c, _) = run_both(cc, sc, 1);
        assert_eq!(
            c.log,
            expect(&format!(
                "{PROLOGUE} w108 connect1 w108 local w108 remote0 header prepare0 w108 run0 prepare1 w108 run1 \
                 footer w108 w5"
            ))
        );
    }

    // --- against scripted C-like peers (raw bytes from the spec) -------------------------------

    /// Our client against a raw server following trace D2 (ib_write_bw, one QP).
    #[test]
    fn write_bw_client_against_raw_trace_d2() {
        let (c, mut s) = pair();
        let peer = thread::spawn(move || {
            let mut got: Vec<Vec<u8>> = Vec::new();
            let mut x = |s: &mut TcpStream, reply: &[u8]| {
                let mut buf = vec![0u8; reply.len()];
                s.read_exact(&mut buf).unwrap();
                s.write_all(reply).unwrap();
                got.push(buf);
            };
            x(&mut s, b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
            x(&mut s, &[0, 0, 0x10, 0]);
            x(&mut s, &[0, 0, 0, 0x40]);
            x(&mut s, b"4\0"); // the server's port allows 2048: min is ours (1024)
            let k = wire(SPEC_K);
            for _ in 0..3 {
                x(&mut s, &k);
            }
            x(&mut s, &k); // end barrier
            for _ in 0..5 {
                x(&mut s, &[0xa5; 8]); // uninitialised garbage in the real server
            }
            x(&mut s, &k);
            s.write_all(b"done\0").unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            (got, rest)
        });
        struct Client(Vec<PerftestDest>);
        impl SessionHooks for Client {
            type Error = String;
            fn setup(&mut self, n: &Negotiated) -> Result<Vec<PerftestDest>, String> {
                assert_eq!(n.mtu, 3);
                Ok(self.0.clone())
            }
            fn connect(&mut self, r: &[PerftestDest]) -> Result<(), String> {
                assert_eq!(r, &[spec_dest()]);
                Ok(())
            }
            fn run_round(&mut self, _: usize) -> Result<Option<BwReport>, String> {
                Ok(Some(BwReport {
                    size: 65536,
                    iters: 5000,
                    bw_peak: 1.0,
                    bw_avg: -2.5,
                    msg_rate: 0.0,
                    ..Default::default()
                }))
            }
        }
        let mine = PerftestDest { qpn: 0x456, psn: 0xc0ffe, ..spec_dest() };
        let out = run_session(c, &cfg(PerftestTest::WriteBw, Role::Client), &mut Client(vec![mine])).unwrap();
        assert_eq!(out.remote, vec![spec_dest()]);
        let (got, rest) = peer.join().unwrap();
        assert_eq!(got[0], b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(got[1], [0x00, 0x00, 0x10, 0x00]);
        assert_eq!(got[2], [0x00, 0x00, 0x00, 0x40]);
        assert_eq!(got[3], b"3\0");
        let my_k = wire(
            "0000:0001:000456:0c0ffe:00001234:00007f0012345000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:7a:0a:00000000:",
        );
        for k in &got[4..8] {
            assert_eq!(k, &my_k);
        }
        assert_eq!(got[8], [0, 0, 0, 0, 0, 1, 0, 0]); // size 65536, big-endian
        assert_eq!(got[9], [0, 0, 0, 0, 0, 0, 0x13, 0x88]); // iters 5000
        assert_eq!(got[10], [0x3f, 0xf0, 0, 0, 0, 0, 0, 0]); // 1.0
        assert_eq!(got[11], [0xc0, 0x04, 0, 0, 0, 0, 0, 0]); // -2.5
        assert_eq!(got[12], [0; 8]);
        assert_eq!(got[13], my_k);
        assert_eq!(rest, b"done\0");
    }

    /// Our read_lat server against a raw client; the client's final K comes late.
    #[test]
    fn read_lat_server_against_raw_client() {
        let (mut c, s) = pair();
        let peer = thread::spawn(move || {
            let x = |c: &mut TcpStream, mine: &[u8]| {
                c.write_all(mine).unwrap();
                let mut buf = vec![0u8; mine.len()];
                c.read_exact(&mut buf).unwrap();
                buf
            };
            assert_eq!(x(&mut c, b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"), b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
            assert_eq!(x(&mut c, &[0, 0, 0x40, 0]), [0, 0, 0x10, 0]); // 16 KiB pages on the client
            assert_eq!(x(&mut c, &[0, 0, 0, 0x80]), [0, 0, 0, 0x40]);
            assert_eq!(x(&mut c, b"2\0"), b"3\0");
            let k = wire(SPEC_K);
            for _ in 0..4 {
                x(&mut c, &k);
            }
            thread::sleep(Duration::from_millis(50)); // the client's run
            x(&mut c, &k);
            c.write_all(b"done\0").unwrap();
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
            rest
        });
        struct Server(Option<Negotiated>);
        impl SessionHooks for Server {
            type Error = String;
            fn setup(&mut self, n: &Negotiated) -> Result<Vec<PerftestDest>, String> {
                self.0 = Some(n.clone());
                Ok(vec![spec_dest()])
            }
            fn connect(&mut self, _: &[PerftestDest]) -> Result<(), String> {
                Ok(())
            }
            fn run_round(&mut self, _: usize) -> Result<Option<BwReport>, String> {
                Err("the read_lat server never runs".into())
            }
        }
        let mut h = Server(None);
        run_session(s, &cfg(PerftestTest::ReadLat, Role::Server), &mut h).unwrap();
        let n = h.0.unwrap();
        assert_eq!((n.cycle_buffer, n.cache_line, n.mtu), (16384, 128, 2));
        assert_eq!(peer.join().unwrap(), b"done\0");
    }

    /// Runs a server session of `test` against a raw client that sends `version` and reports
    /// the error.
    fn server_error_with(first: &'static [u8]) -> SessionError<String> {
        let (mut c, s) = pair();
        let peer = thread::spawn(move || {
            c.write_all(first).unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            let _ = c.read_to_end(&mut rest);
        });
        struct Never;
        impl SessionHooks for Never {
            type Error = String;
            fn setup(&mut self, _: &Negotiated) -> Result<Vec<PerftestDest>, String> {
                Err("not reached".into())
            }
            fn connect(&mut self, _: &[PerftestDest]) -> Result<(), String> {
                Ok(())
            }
            fn run_round(&mut self, _: usize) -> Result<Option<BwReport>, String> {
                Ok(None)
            }
        }
        let e = run_session(s, &cfg(PerftestTest::SendBw, Role::Server), &mut Never).unwrap_err();
        peer.join().unwrap();
        e
    }

    #[test]
    fn version_and_garbage_errors() {
        let e = server_error_with(b"5.60\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(e.to_string(), "peer is not perftest 5.70+ compatible (sent version \"5.60\")");
        let e = server_error_with(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            e.to_string(),
            "peer is not perftest 5.70+ compatible (sent version \"GET / HTTP/1.1\\r\\n\")"
        );
        let e = server_error_with(b"6.0");
        assert!(matches!(e, SessionError::Oob(OobError::PeerClosed { expected: 16, got: 3, .. })), "{e}");
        assert_eq!(
            e.to_string(),
            "peer closed the connection after 3 of the 16 bytes of the perftest version"
        );
        let e = server_error_with(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0\xff\xff\xff\xff");
        assert!(
            matches!(e, SessionError::Oob(OobError::Malformed { what: "perftest page size", .. })),
            "{e}"
        );
        let e = server_error_with(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x10\0\0\0\0\x40x\0");
        assert_eq!(e.to_string(), "malformed perftest MTU from the peer: \"x\\x00\"");
        let e = server_error_with(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x10\0\0\0\0\x40\x33\0");
        assert!(matches!(e, SessionError::Hook(ref h) if h == "not reached"), "{e}");
    }

    #[test]
    fn gid_type_mismatch_is_reported() {
        let (c, s) = pair();
        struct H(PerftestDest);
        impl SessionHooks for H {
            type Error = String;
            fn setup(&mut self, _: &Negotiated) -> Result<Vec<PerftestDest>, String> {
                Ok(vec![self.0])
            }
            fn connect(&mut self, _: &[PerftestDest]) -> Result<(), String> {
                panic!("connect must not be reached");
            }
            fn run_round(&mut self, _: usize) -> Result<Option<BwReport>, String> {
                Ok(None)
            }
        }
        let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56];
        let t = thread::spawn(move || {
            run_session(
                s,
                &cfg(PerftestTest::WriteLat, Role::Server),
                &mut H(PerftestDest { gid: link_local, ..spec_dest() }),
            )
            .unwrap_err()
            .to_string()
        });
        let e = run_session(c, &cfg(PerftestTest::WriteLat, Role::Client), &mut H(spec_dest())).unwrap_err();
        assert!(matches!(e, SessionError::Oob(OobError::GidIncompatible)));
        assert!(t.join().unwrap().starts_with("GID types are incompatible"));
    }

    #[test]
    fn invalid_configs() {
        let (c, _s) = pair();
        let mut bad = cfg(PerftestTest::AtomicBw, Role::Client);
        bad.run_mode = RunMode::AllSizes(23);
        let mut h = Recorder {
            log: Default::default(),
            local: vec![],
            report: Default::default(),
            peer: vec![],
            negotiated: None,
        };
        assert!(matches!(run_session(c, &bad, &mut h), Err(SessionError::Oob(OobError::InvalidArgument(_)))));
        let (c, _s) = pair();
        let mut bad = cfg(PerftestTest::WriteLat, Role::Client);
        bad.duplex = true;
        assert!(matches!(run_session(c, &bad, &mut h), Err(SessionError::Oob(OobError::InvalidArgument(_)))));
    }
}
