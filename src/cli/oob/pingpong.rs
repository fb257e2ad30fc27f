//! The TCP exchange of rdma-core's `ibv_{rc,uc,ud,srq}_pingpong` (v44.0) and their address lines.
//!
//! Spec: `docs/interop/oob-exchange.md`, Part A (A1, A2, A6, A9).
//!
//! The wire record ("dest message") is 52 bytes: `"%04x:%06x:%06x:%s"` of LID, QPN, PSN and the
//! GID as 32 lowercase hex characters (the 16 raw bytes in order), plus the terminating NUL.
//!
//! rc/uc/ud exchange one record each way:
//!
//! | step | client | server |
//! |---|---|---|
//! | 1 | write own record (52) | read client record (52) — [`server_read_remote`] |
//! | 2 | — | *caller* moves its QP to RTR/RTS (UD: RTS + AH), receives already posted |
//! | 3 | read server record (52) | write own record (52) — [`server_reply`] |
//! | 4 | write `"done\0"` (5) | read 5 bytes |
//!
//! srq exchanges [`SRQ_RECORDS`] (256) records each way in the same pattern; the entries past
//! the real QPs are all-zero records.
//!
//! Formatting helpers return one line without its trailing newline.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use super::{OobError, read_msg, write_msg};
use crate::cli::report::PingpongStats;

/// Default TCP port (`-p`).
pub const DEFAULT_PORT: u16 = 18515;
/// Size of one address record on the wire: 51 characters plus the NUL.
pub const DEST_MSG_LEN: usize = 52;
/// The client's final message: the four letters plus the NUL. Its content is never checked.
pub const DONE_MSG: &[u8; 5] = b"done\0";
/// Number of records `ibv_srq_pingpong` sends each way, whatever `-q` is (`MAX_QP`).
pub const SRQ_RECORDS: usize = 256;
/// Largest `-q` srq_pingpong accepts (`num_qp` must be less than [`SRQ_RECORDS`]).
pub const SRQ_MAX_QPS: usize = SRQ_RECORDS - 1;
/// Size of the tools' GID text buffer (`char gid[33]`), see [`GidTextBuffer`].
pub const GID_TEXT_BUF_LEN: usize = 33;

const WHAT_DEST: &str = "pingpong address record";
const WHAT_DONE: &str = "pingpong \"done\" message";

/// Which pingpong tool: selects the record count and the local-address line variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PingpongKind {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_uc_pingpong`.
    Uc,
    /// `ibv_ud_pingpong` (local line reads `PSN 0x%06x: GID`).
    Ud,
    /// `ibv_srq_pingpong` (256 records each way).
    Srq,
}

/// One QP's address as exchanged by the pingpong examples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PingpongDest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits; higher bits are dropped on encode).
    pub qpn: u32,
    /// Initial PSN (24 bits; higher bits are dropped on encode).
    pub psn: u32,
    /// GID in network byte order (all zero when the tool runs without `-g`).
    pub gid: [u8; 16],
}

impl PingpongDest {
    /// Encodes the 52-byte wire record `"%04x:%06x:%06x:<32 hex>\0"`.
    pub fn encode(&self) -> [u8; DEST_MSG_LEN] {
        let mut text = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn & 0xff_ffff, self.psn & 0xff_ffff);
        for b in self.gid {
            text.push_str(&format!("{b:02x}"));
        }
        let mut msg = [0u8; DEST_MSG_LEN];
        msg[..DEST_MSG_LEN - 1].copy_from_slice(text.as_bytes());
        msg
    }

    /// Decodes a 52-byte wire record.
    ///
    /// Strict: the record must be exactly `4 hex ':' 6 hex ':' 6 hex ':' 32 hex NUL` (what the
    /// C tools always send; hex digits in either case). Anything else is
    /// [`OobError::Malformed`]; never panics.
    pub fn decode(msg: &[u8]) -> Result<Self, OobError> {
        let bad = |detail: String| OobError::Malformed { what: WHAT_DEST, detail };
        if msg.len() != DEST_MSG_LEN {
            return Err(bad(format!("{} bytes instead of {DEST_MSG_LEN}", msg.len())));
        }
        if msg[DEST_MSG_LEN - 1] != 0 {
            return Err(bad(format!("not NUL-terminated: \"{}\"", super::printable(msg))));
        }
        let text = &msg[..DEST_MSG_LEN - 1];
        let shape_ok = [4usize, 11, 18].iter().all(|&i| text[i] == b':')
            && text.iter().enumerate().all(|(i, c)| matches!(i, 4 | 11 | 18) || c.is_ascii_hexdigit());
        if !shape_ok {
            return Err(bad(format!(
                "expected \"LLLL:QQQQQQ:PPPPPP:<32 hex GID>\", got \"{}\"",
                super::printable(text)
            )));
        }
        // Every byte was checked to be an ASCII hex digit above, so these cannot fail.
        let hex = |s: &[u8]| s.iter().fold(0u32, |acc, &c| (acc << 4) | hex_val(c));
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = hex(&text[19 + 2 * i..21 + 2 * i]) as u8;
        }
        Ok(Self { lid: hex(&text[0..4]) as u16, qpn: hex(&text[5..11]), psn: hex(&text[12..18]), gid })
    }

    /// True if the GID's interface ID (bytes 8..16) is nonzero: the tools then put a GRH in
    /// the address vector (`is_global = 1`, `hop_limit = 1`), otherwise none.
    pub fn uses_grh(&self) -> bool {
        self.gid[8..].iter().any(|&b| b != 0)
    }
}

fn hex_val(c: u8) -> u32 {
    match c {
        b'0'..=b'9' => u32::from(c - b'0'),
        b'a'..=b'f' => u32::from(c - b'a' + 10),
        b'A'..=b'F' => u32::from(c - b'A' + 10),
        _ => 0,
    }
}

fn read_dest<R: Read + ?Sized>(r: &mut R) -> Result<PingpongDest, OobError> {
    let mut msg = [0u8; DEST_MSG_LEN];
    read_msg(r, &mut msg, WHAT_DEST)?;
    PingpongDest::decode(&msg)
}

fn write_dest<W: Write + ?Sized>(w: &mut W, dest: &PingpongDest) -> Result<(), OobError> {
    write_msg(w, &dest.encode(), WHAT_DEST)
}

/// Client side of rc/uc/ud: writes our record, reads the server's, writes `"done\0"`.
///
/// The caller then drops the stream, moves its QP to RTR/RTS (or creates the AH) and posts the
/// first send right away: the server is ready by the time its record arrives.
pub fn client_exchange<S: Read + Write + ?Sized>(
    stream: &mut S,
    local: &PingpongDest,
) -> Result<PingpongDest, OobError> {
    write_dest(stream, local)?;
    let remote = read_dest(stream)?;
    write_msg(stream, DONE_MSG, WHAT_DONE)?;
    Ok(remote)
}

/// Server side of rc/uc/ud, phase 1: reads the client's record.
///
/// Before calling [`server_reply`] the caller must move its QP to RTR and RTS (UD: RTS and
/// create the AH) with receives posted: the client sends data as soon as it has our record.
pub fn server_read_remote<S: Read + ?Sized>(stream: &mut S) -> Result<PingpongDest, OobError> {
    read_dest(stream)
}

/// Server side of rc/uc/ud, phase 2: writes our record, then reads the client's 5-byte
/// `"done"` (its content is not checked, as in the C server).
pub fn server_reply<S: Read + Write + ?Sized>(stream: &mut S, local: &PingpongDest) -> Result<(), OobError> {
    write_dest(stream, local)?;
    let mut done = [0u8; DONE_MSG.len()];
    read_msg(stream, &mut done, WHAT_DONE)
}

fn check_srq_count(n: usize) -> Result<(), OobError> {
    if n == 0 || n > SRQ_MAX_QPS {
        return Err(OobError::InvalidArgument(format!("{n} srq QPs; srq_pingpong needs 1..={SRQ_MAX_QPS}")));
    }
    Ok(())
}

fn write_srq_records<W: Write + ?Sized>(w: &mut W, local: &[PingpongDest]) -> Result<(), OobError> {
    check_srq_count(local.len())?;
    let zero = PingpongDest::default();
    for i in 0..SRQ_RECORDS {
        write_dest(w, local.get(i).unwrap_or(&zero))?;
    }
    Ok(())
}

fn read_srq_records<R: Read + ?Sized>(r: &mut R) -> Result<Vec<PingpongDest>, OobError> {
    (0..SRQ_RECORDS).map(|_| read_dest(r)).collect()
}

/// Client side of srq: writes 256 records (ours, then zero records), reads the server's 256,
/// writes `"done\0"`. Returns all 256 remote records; the caller uses the first `local.len()`
/// (`-q` is not transmitted and must match) and the GID of record 0 for every QP.
pub fn srq_client_exchange<S: Read + Write + ?Sized>(
    stream: &mut S,
    local: &[PingpongDest],
) -> Result<Vec<PingpongDest>, OobError> {
    write_srq_records(stream, local)?;
    let remote = read_srq_records(stream)?;
    write_msg(stream, DONE_MSG, WHAT_DONE)?;
    Ok(remote)
}

/// Server side of srq, phase 1: reads the client's 256 records (all returned).
///
/// The caller then connects its `num_qp` QPs to the first `num_qp` records before calling
/// [`srq_server_reply`].
pub fn srq_server_read_remote<S: Read + ?Sized>(stream: &mut S) -> Result<Vec<PingpongDest>, OobError> {
    read_srq_records(stream)
}

/// Server side of srq, phase 2: writes our records padded to 256, then reads the 5-byte
/// `"done"`.
pub fn srq_server_reply<S: Read + Write + ?Sized>(
    stream: &mut S,
    local: &[PingpongDest],
) -> Result<(), OobError> {
    write_srq_records(stream, local)?;
    let mut done = [0u8; DONE_MSG.len()];
    read_msg(stream, &mut done, WHAT_DONE)
}

/// Connects to a pingpong server (any address family, first address that answers, no retry).
pub fn connect(host: &str, port: u16) -> std::io::Result<TcpStream> {
    super::connect_tcp(host, port, false, None)
}

/// Opens a pingpong server's listening socket (dual-stack wildcard, or `0.0.0.0`).
/// Accept the single client with [`super::accept_one`].
pub fn listen(port: u16) -> std::io::Result<TcpListener> {
    super::listen_tcp(port, false, None)
}

/// glibc `inet_ntop(AF_INET6, ...)` text of a GID: the longest run (first on ties) of at least
/// two zero words becomes `::`, words are lowercase `%x`, and `::a.b.c.d` / `::ffff:a.b.c.d` are
/// used when the first 96 bits are zero (except `::` and `::1`) or IPv4-mapped.
pub fn inet_ntop6(gid: &[u8; 16]) -> String {
    let words: Vec<u16> = gid.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]])).collect();
    // Longest run of zero words, as (base, len).
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for (i, &w) in words.iter().enumerate() {
        if w == 0 {
            cur = Some(cur.map_or((i, 1), |(b, l)| (b, l + 1)));
        } else if let Some(c) = cur.take()
            && best.is_none_or(|b| c.1 > b.1)
        {
            best = Some(c);
        }
    }
    if let Some(c) = cur
        && best.is_none_or(|b| c.1 > b.1)
    {
        best = Some(c);
    }
    let best = best.filter(|b| b.1 >= 2);
    let mut out = String::new();
    let mut i = 0;
    while i < 8 {
        if let Some((base, len)) = best
            && i >= base
            && i < base + len
        {
            if i == base {
                out.push(':');
            }
            i += 1;
            continue;
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6
            && let Some((0, len)) = best
            && (len == 6 || (len == 5 && words[5] == 0xffff))
        {
            out.push_str(&format!("{}.{}.{}.{}", gid[12], gid[13], gid[14], gid[15]));
            return out;
        }
        out.push_str(&format!("{:x}", words[i]));
        i += 1;
    }
    if let Some((base, len)) = best
        && base + len == 8
    {
        out.push(':');
    }
    out
}

/// Emulates the tools' single `char gid[33]` buffer that `inet_ntop` writes into before each
/// address line.
///
/// A text longer than 32 characters (a GID without a compressible zero run, e.g. a global IPv6
/// address with all eight words nonzero) does not fit: `inet_ntop` fails with `ENOSPC` and the C
/// tool prints whatever the buffer held before — the previous line's text, or uninitialised
/// stack for the first line, which we render as the empty string.
#[derive(Clone, Debug, Default)]
pub struct GidTextBuffer {
    text: String,
}

impl GidTextBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The text the C tool would print for `gid` at this point.
    pub fn render(&mut self, gid: &[u8; 16]) -> &str {
        let text = inet_ntop6(gid);
        if text.len() < GID_TEXT_BUF_LEN {
            self.text = text;
        }
        &self.text
    }
}

/// `  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s` (UD: `PSN 0x%06x: GID %s`).
/// `gid_text` is what [`GidTextBuffer::render`] returned.
pub fn format_local_line(kind: PingpongKind, dest: &PingpongDest, gid_text: &str) -> String {
    let sep = if kind == PingpongKind::Ud { ":" } else { "," };
    format!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {gid_text}",
        dest.lid, dest.qpn, dest.psn
    )
}

/// `  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s` (all four tools).
pub fn format_remote_line(dest: &PingpongDest, gid_text: &str) -> String {
    format!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {gid_text}",
        dest.lid, dest.qpn, dest.psn
    )
}

/// `%lld bytes in %.2f seconds = %.2f Mbit/sec`.
pub fn format_bytes_line(stats: &PingpongStats) -> String {
    format!(
        "{} bytes in {} seconds = {} Mbit/sec",
        stats.bytes,
        crate::cli::report::c_fixed(stats.seconds, 2),
        crate::cli::report::c_fixed(stats.mbit_per_sec, 2)
    )
}

/// `%d iters in %.2f seconds = %.2f usec/iter`.
pub fn format_iters_line(stats: &PingpongStats) -> String {
    format!(
        "{} iters in {} seconds = {} usec/iter",
        stats.iters,
        crate::cli::report::c_fixed(stats.seconds, 2),
        crate::cli::report::c_fixed(stats.usec_per_iter, 2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::oob::accept_one;
    use std::net::Ipv6Addr;
    use std::thread;
    use std::time::Duration;

    const MAPPED_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 122, 10];

    fn dest(qpn: u32, psn: u32, gid: [u8; 16]) -> PingpongDest {
        PingpongDest { lid: 0, qpn, psn, gid }
    }

    /// Byte string with a trailing NUL, built from the spec's text.
    fn wire(text: &str) -> Vec<u8> {
        let mut v = text.as_bytes().to_vec();
        v.push(0);
        v
    }

    #[test]
    fn encode_matches_spec_example() {
        let d = dest(0x11, 0xa1b2c3, MAPPED_GID);
        assert_eq!(d.encode().to_vec(), wire("0000:000011:a1b2c3:00000000000000000000ffffc0a87a0a"));
        assert_eq!(
            PingpongDest::decode(&wire("0000:000011:a1b2c3:00000000000000000000ffffc0a87a0a")).unwrap(),
            d
        );
    }

    #[test]
    fn trace_d1_records() {
        let c = wire("0000:000123:4f1a2b:00000000000000000000ffff0a000002");
        let s = wire("0000:000456:0c0ffe:00000000000000000000ffff0a000001");
        let cd = PingpongDest::decode(&c).unwrap();
        assert_eq!((cd.qpn, cd.psn), (0x123, 0x4f1a2b));
        assert_eq!(cd.gid, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);
        assert_eq!(cd.encode().to_vec(), c);
        let sd = PingpongDest::decode(&s).unwrap();
        assert_eq!((sd.qpn, sd.psn), (0x456, 0x0c0ffe));
        assert_eq!(sd.encode().to_vec(), s);
        assert!(sd.uses_grh());
    }

    #[test]
    fn zero_record_and_masking() {
        let z = wire("0000:000000:000000:00000000000000000000000000000000");
        assert_eq!(PingpongDest::default().encode().to_vec(), z);
        assert!(!PingpongDest::default().uses_grh());
        let d = PingpongDest { lid: 0xbeef, qpn: 0x1ab_cdef, psn: 0xff12_3456, gid: [0xab; 16] };
        assert_eq!(d.encode().to_vec(), wire("beef:abcdef:123456:abababababababababababababababab"));
        let upper = wire("BEEF:ABCDEF:123456:ABABABABABABABABABABABABABABABAB");
        assert_eq!(PingpongDest::decode(&upper).unwrap(), PingpongDest { qpn: 0xabcdef, psn: 0x123456, ..d });
    }

    #[test]
    fn decode_rejects_garbage() {
        let good = wire("0000:000011:a1b2c3:00000000000000000000ffffc0a87a0a");
        assert!(PingpongDest::decode(&good[..51]).is_err());
        let mut no_nul = good.clone();
        no_nul[51] = b'0';
        assert!(PingpongDest::decode(&no_nul).is_err());
        let mut bad_sep = good.clone();
        bad_sep[4] = b'-';
        assert!(PingpongDest::decode(&bad_sep).is_err());
        let mut bad_hex = good.clone();
        bad_hex[30] = b'g';
        assert!(PingpongDest::decode(&bad_hex).is_err());
        // A short GID padded with NULs: "fewer than 32 GID characters means garbage".
        let mut short = wire("0000:000011:a1b2c3:ffff");
        short.resize(52, 0);
        assert!(PingpongDest::decode(&short).is_err());
        let e = PingpongDest::decode(&[0xff; 52]).unwrap_err().to_string();
        assert!(e.starts_with("malformed pingpong address record from the peer"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let _ = PingpongDest::decode(&bytes);
        }

        #[test]
        fn encode_decode_roundtrip(
            lid: u16, qpn in 0u32..0x100_0000, psn in 0u32..0x100_0000, gid: [u8; 16]
        ) {
            let d = PingpongDest { lid, qpn, psn, gid };
            proptest::prop_assert_eq!(PingpongDest::decode(&d.encode()).unwrap(), d);
        }
    }

    #[test]
    fn ntop_matches_glibc() {
        // Expectations checked against glibc's inet_ntop.
        let t = |s: &str| inet_ntop6(&s.parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(inet_ntop6(&MAPPED_GID), "::ffff:192.168.122.10");
        assert_eq!(t("fe80::5054:ff:fe12:3456"), "fe80::5054:ff:fe12:3456");
        assert_eq!(t("::"), "::");
        assert_eq!(t("::1"), "::1");
        assert_eq!(t("::10.0.0.1"), "::10.0.0.1"); // glibc's deprecated-compatible form
        assert_eq!(t("::ffff:0.0.0.0"), "::ffff:0.0.0.0");
        assert_eq!(t("1:0:0:2:0:0:0:3"), "1:0:0:2::3");
        assert_eq!(t("1:0:0:2:0:0:3:4"), "1::2:0:0:3:4"); // first run wins a tie
        assert_eq!(t("1:0:2:3:4:5:6:7"), "1:0:2:3:4:5:6:7"); // a single zero word is kept
        assert_eq!(t("2001:db8::"), "2001:db8::");
        assert_eq!(t("fe80::"), "fe80::");
        assert_eq!(t("::2:3:4:5:6:7"), "::2:3:4:5:6:7");
        assert_eq!(t("0:0:1::"), "0:0:1::");
        assert_eq!(t("ff0e::ffff:1.2.3.4"), "ff0e::ffff:102:304");
    }

    #[test]
    fn gid_buffer_keeps_previous_text_when_too_long() {
        let long: [u8; 16] = "2001:db8:1234:5678:9abc:def0:1234:5678".parse::<Ipv6Addr>().unwrap().octets();
        let mut buf = GidTextBuffer::new();
        assert_eq!(buf.render(&long), "");
        assert_eq!(buf.render(&MAPPED_GID), "::ffff:192.168.122.10");
        assert_eq!(buf.render(&long), "::ffff:192.168.122.10");
        // 32 characters still fit (33 with the NUL); 33 do not (checked against glibc).
        let fits: [u8; 16] = "2001:db8:12:5678:9abc:def0::678".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(buf.render(&fits), "2001:db8:12:5678:9abc:def0:0:678");
        let over: [u8; 16] = "2001:db8:123:5678:9abc:def0::678".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(inet_ntop6(&over), "2001:db8:123:5678:9abc:def0:0:678");
        assert_eq!(buf.render(&over), "2001:db8:12:5678:9abc:def0:0:678");
    }

    #[test]
    fn address_lines() {
        let d = dest(0x11, 0xa1b2c3, MAPPED_GID);
        assert_eq!(
            format_local_line(PingpongKind::Rc, &d, "::ffff:192.168.122.10"),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0xa1b2c3, GID ::ffff:192.168.122.10"
        );
        assert_eq!(
            format_local_line(PingpongKind::Ud, &d, "::"),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0xa1b2c3: GID ::"
        );
        assert_eq!(
            format_remote_line(&d, "fe80::5054:ff:fe12:3456"),
            "  remote address: LID 0x0000, QPN 0x000011, PSN 0xa1b2c3, GID fe80::5054:ff:fe12:3456"
        );
    }

    #[test]
    fn result_lines() {
        // 4096 B x 1000 iters in 123456 us (as rc_pingpong computes it).
        let s = crate::cli::report::compute_pingpong_stats(4096, 1000, 123_456);
        assert_eq!(format_bytes_line(&s), "8192000 bytes in 0.12 seconds = 530.84 Mbit/sec");
        assert_eq!(format_iters_line(&s), "1000 iters in 0.12 seconds = 123.46 usec/iter");
    }

    /// Runs `client` and `server` on the two ends of a loopback connection.
    fn run_pair<C, S, A, B>(client: C, server: S) -> (A, B)
    where
        C: FnOnce(&mut TcpStream) -> A + Send + 'static,
        S: FnOnce(&mut TcpStream) -> B + Send + 'static,
        A: Send + 'static,
        B: Send + 'static,
    {
        let l = listen(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let srv = thread::spawn(move || {
            let mut s = accept_one(l).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            server(&mut s)
        });
        let mut c = connect("127.0.0.1", port).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let a = client(&mut c);
        drop(c);
        (a, srv.join().unwrap())
    }

    #[test]
    fn rc_uc_ud_session_over_loopback() {
        let cl = dest(0x123, 0x4f1a2b, [1; 16]);
        let sv = dest(0x456, 0x0c0ffe, [2; 16]);
        let ((got_by_client, client_done), (got_by_server, reply_start)) = run_pair(
            move |s| {
                let remote = client_exchange(s, &cl).unwrap();
                (remote, std::time::Instant::now())
            },
            move |s| {
                let remote = server_read_remote(s).unwrap();
                // The caller's QP setup happens here: the client must stay blocked meanwhile.
                thread::sleep(Duration::from_millis(50));
                let reply_start = std::time::Instant::now();
                server_reply(s, &sv).unwrap();
                // After "done" the client closes: EOF, no stray bytes.
                let mut extra = [0u8; 1];
                assert_eq!(s.read(&mut extra).unwrap(), 0);
                (remote, reply_start)
            },
        );
        assert_eq!(got_by_client, sv);
        assert_eq!(got_by_server, cl);
        assert!(client_done >= reply_start, "the client got our record before the server's QP setup ended");
    }

    #[test]
    fn client_sees_exact_bytes() {
        // A scripted C-like server: one read of 52, reply, then exactly 5 bytes of "done".
        let cl = dest(0x11, 0xa1b2c3, MAPPED_GID);
        let (remote, seen) = run_pair(
            move |s| client_exchange(s, &cl).unwrap(),
            |s| {
                let mut rec = [0u8; 52];
                s.read_exact(&mut rec).unwrap();
                s.write_all(&wire("0000:000456:0c0ffe:00000000000000000000ffff0a000001")).unwrap();
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
                (rec.to_vec(), rest)
            },
        );
        assert_eq!(seen.0, wire("0000:000011:a1b2c3:00000000000000000000ffffc0a87a0a"));
        assert_eq!(seen.1, b"done\0");
        assert_eq!((remote.qpn, remote.psn), (0x456, 0x0c0ffe));
    }

    #[test]
    fn server_handles_trickled_client_and_reports_short_done() {
        let sv = dest(0x456, 0x0c0ffe, MAPPED_GID);
        let (_, res) = run_pair(
            |s| {
                let rec = wire("0000:000123:4f1a2b:00000000000000000000ffff0a000002");
                for chunk in rec.chunks(7) {
                    s.write_all(chunk).unwrap();
                    s.flush().unwrap();
                    thread::sleep(Duration::from_millis(2));
                }
                let mut reply = [0u8; 52];
                s.read_exact(&mut reply).unwrap();
                s.write_all(b"don").unwrap(); // then close: a short "done"
            },
            move |s| {
                let remote = server_read_remote(s).unwrap();
                assert_eq!(remote.qpn, 0x123);
                server_reply(s, &sv)
            },
        );
        match res {
            Err(OobError::PeerClosed { expected: 5, got: 3, .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn server_rejects_garbage_client() {
        let (_, res) = run_pair(|s| s.write_all(&[b'x'; 52]).unwrap(), server_read_remote::<TcpStream>);
        assert!(matches!(res, Err(OobError::Malformed { .. })));
    }

    #[test]
    fn srq_session_over_loopback() {
        let cl: Vec<_> = (0..16).map(|i| dest(0x100 + i, 0x1000 + i, MAPPED_GID)).collect();
        let sv: Vec<_> = (0..16).map(|i| dest(0x200 + i, 0x2000 + i, [7; 16])).collect();
        let (cl2, sv2) = (cl.clone(), sv.clone());
        let (got_by_client, got_by_server) = run_pair(
            move |s| srq_client_exchange(s, &cl2).unwrap(),
            move |s| {
                let remote = srq_server_read_remote(s).unwrap();
                srq_server_reply(s, &sv2).unwrap();
                remote
            },
        );
        assert_eq!(got_by_client.len(), SRQ_RECORDS);
        assert_eq!(got_by_server.len(), SRQ_RECORDS);
        assert_eq!(&got_by_client[..16], &sv[..]);
        assert_eq!(&got_by_server[..16], &cl[..]);
        assert!(
            got_by_client[16..].iter().chain(&got_by_server[16..]).all(|d| *d == PingpongDest::default())
        );
    }

    #[test]
    fn srq_client_sends_256_records_then_done() {
        let cl = vec![dest(0x11, 0x22, MAPPED_GID)];
        let (remote, seen) = run_pair(
            move |s| srq_client_exchange(s, &cl).unwrap(),
            |s| {
                let mut recs = vec![0u8; 52 * 256];
                s.read_exact(&mut recs).unwrap();
                for _ in 0..256 {
                    s.write_all(&wire("0000:000000:000000:00000000000000000000000000000000")).unwrap();
                }
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
                (recs, rest)
            },
        );
        let (recs, rest) = seen;
        assert_eq!(&recs[..52], &wire("0000:000011:000022:00000000000000000000ffffc0a87a0a")[..]);
        for r in recs[52..].chunks(52) {
            assert_eq!(r, &wire("0000:000000:000000:00000000000000000000000000000000")[..]);
        }
        assert_eq!(rest, b"done\0");
        assert_eq!(remote.len(), 256);
    }

    #[test]
    fn srq_rejects_bad_qp_counts() {
        let mut sink = Vec::new();
        assert!(write_srq_records(&mut sink, &[]).is_err());
        assert!(write_srq_records(&mut sink, &vec![PingpongDest::default(); 256]).is_err());
        assert!(sink.is_empty());
    }
}
