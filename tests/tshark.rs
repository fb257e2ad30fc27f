//! Wireshark agrees: a pcap of packets our builder produced for every opcode, decoded by
//! `tshark`, shows the opcode and field values we set, and no malformed or expert errors.
//!
//! Needs `tshark` on the PATH (Debian package `tshark`; `.ci/run` installs it).

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;

use softroce::wire::opcode::ALL;
use softroce::wire::roce::{IpRepr, RoceFrameRepr};
use softroce::wire::*;

/// Opcodes Wireshark 4.0 (Debian 12) has no name for: the Memory Placement Extensions came
/// later. For them we check the BTH only.
const UNKNOWN_TO_WIRESHARK_4_0: [Opcode; 2] = [Opcode::RC_FLUSH, Opcode::RC_ATOMIC_WRITE];

struct Case {
    repr: PacketRepr,
    payload: Vec<u8>,
    v6: bool,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (k, info) in ALL.iter().enumerate() {
        // Lengths a requester really produces: First and Middle carry exactly one PMTU, Last
        // 1..=PMTU, Only 0..=PMTU (PMTU 1024 here, 4096 for the IPv6 variant).
        let lens: &[usize] = match (info.payload, info.position) {
            (false, _) => &[0],
            (true, Position::First | Position::Middle) => &[1024, 1024, 1024, 4096],
            (true, Position::Last) => &[1, 1023, 1024, 4093],
            (true, Position::Only) => &[0, 1, 1024, 4093],
        };
        for (variant, &len) in lens.iter().enumerate() {
            let k = k as u32;
            let mut bth = BthRepr::new(info.opcode, 0x1000 + k, Psn::new(0xfff000 + k * 7 + variant as u32));
            bth.ack_req = variant % 2 == 1 || info.position.ends();
            bth.solicited = variant == 2;
            let mut r = PacketRepr::new(bth);
            let h = info.headers;
            if h.contains(Headers::DETH) {
                r.deth = Some(DethRepr { qkey: 0x1111_1111 + k, resv8: 0, src_qp: 0xab + k });
            }
            if h.contains(Headers::FETH) {
                r.feth = Some(FethRepr::new(1, 1));
            }
            if h.contains(Headers::RETH) {
                r.reth = Some(RethRepr {
                    va: 0x7f00_dead_0000 + k as u64,
                    rkey: 0x1234_5600 + k,
                    dma_len: 3000 + k,
                });
            }
            if h.contains(Headers::ATOMIC_ETH) {
                r.atomic_eth = Some(AtomicEthRepr {
                    va: 0x5000 + 8 * k as u64,
                    rkey: 0x714,
                    swap_add: 77 + k as u64,
                    compare: 99,
                });
            }
            if h.contains(Headers::AETH) {
                // Vary the syndrome over ACK, RNR NAK and the NAK codes.
                let syn = match variant + k as usize % 4 {
                    0 => Syndrome::Ack { credits: 31 },
                    1 => Syndrome::RnrNak { timer: 12 },
                    2 => Syndrome::Nak(NakCode::PsnSequenceError),
                    _ => Syndrome::Nak(NakCode::RemoteAccessError),
                };
                let syn = if info.opcode == Opcode::RC_ACK { syn } else { Syndrome::Ack { credits: 31 } };
                r.aeth = Some(AethRepr::new(syn, 100 + k));
            }
            if h.contains(Headers::ATOMIC_ACK_ETH) {
                r.atomic_ack_eth = Some(AtomicAckEthRepr { orig: 0x0123_4567_89ab_cdef });
            }
            if h.contains(Headers::IMMDT) {
                r.immdt = Some(ImmDtRepr { imm: 0x1122_3344 });
            }
            if h.contains(Headers::IETH) {
                r.ieth = Some(IethRepr { rkey: 0xcafe_0000 + k });
            }
            let payload = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            out.push(Case { repr: r, payload, v6: variant == 3 || (!info.payload && k % 2 == 1) });
        }
    }
    out
}

fn frame(c: &Case) -> Vec<u8> {
    let ip = if c.v6 {
        IpRepr::V6 {
            src: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
            traffic_class: 0,
            flow_label: 0x12345,
            hop_limit: 64,
        }
    } else {
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 77, 0, 1),
            dst: Ipv4Addr::new(10, 77, 0, 2),
            tos: 0,
            ttl: 64,
            id: 0,
            df: true,
        }
    };
    let f = RoceFrameRepr { ip, src_port: 0xc0de, dst_port: ROCEV2_UDP_PORT, udp_checksum: false };
    let mut buf = vec![0u8; 14 + f.header_len() + c.repr.buffer_len(c.payload.len())];
    buf[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    buf[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    buf[12..14].copy_from_slice(&if c.v6 { [0x86, 0xdd] } else { [0x08, 0x00] });
    let n = f.emit(&mut buf[14..], &c.repr, &c.payload).unwrap();
    buf.truncate(14 + n);
    buf
}

const FIELDS: &[&str] = &[
    "frame.number",
    "frame.protocols",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.padcnt",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
    "infiniband.ieth",
    "data.len",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.message",
];

const PAYLOAD_HEURISTICS: &[&str] = &[
    "rpcrdma_infiniband",
    "smcr_infiniband",
    "smb_direct_infiniband",
    "iser_infiniband",
    "lnet_ib",
    "eth_over_ib",
    "sdp_infiniband",
    "fc_infiniband",
    "mellanox_eoib",
];

fn hex(n: u64) -> String {
    format!("{n}")
}

#[test]
fn tshark_decodes_every_opcode_as_built() {
    let cases = cases();
    let dir = std::env::temp_dir().join(format!("softroce-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("every_opcode.pcap");
    {
        let f = std::fs::File::create(&path).unwrap();
        let hdr =
            pcap_file::pcap::PcapHeader { datalink: pcap_file::DataLink::ETHERNET, ..Default::default() };
        let mut w = pcap_file::pcap::PcapWriter::with_header(f, hdr).unwrap();
        for (i, c) in cases.iter().enumerate() {
            let data = frame(c);
            let p = pcap_file::pcap::PcapPacket::new(
                std::time::Duration::from_millis(i as u64),
                data.len() as u32,
                &data,
            );
            w.write_packet(&p).unwrap();
        }
    }
    let mut cmd = Command::new("tshark");
    // Our payloads are test patterns, not upper-layer protocols: keep Wireshark's payload
    // heuristics (RPC-over-RDMA, iSER, SMB Direct...) from guessing at them.
    for h in PAYLOAD_HEURISTICS {
        cmd.args(["--disable-heuristic", h]);
    }
    cmd.args(["-n", "-r"]).arg(&path).args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark must be installed (apt-get install tshark)");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<HashMap<&str, &str>> =
        text.lines().map(|l| FIELDS.iter().copied().zip(l.split('|')).collect()).collect();
    assert_eq!(rows.len(), cases.len());
    for (c, row) in cases.iter().zip(&rows) {
        let r = &c.repr;
        let name = r.bth.opcode.name().unwrap();
        let ctx = format!("{name} payload {} v6 {}: {row:?}", c.payload.len(), c.v6);
        assert!(
            row["frame.protocols"].ends_with(":infiniband")
                || row["frame.protocols"].ends_with(":infiniband:data"),
            "{ctx}"
        );
        assert_eq!(row["_ws.malformed"], "", "{ctx}");
        assert_eq!(row["_ws.expert.severity"], "", "{ctx}");
        assert_eq!(row["infiniband.bth.opcode"], hex(r.bth.opcode.0 as u64), "{ctx}");
        assert_eq!(row["infiniband.bth.destqp"], format!("{:#08x}", r.bth.dest_qp), "{ctx}");
        assert_eq!(row["infiniband.bth.psn"], hex(r.bth.psn.value() as u64), "{ctx}");
        assert_eq!(row["infiniband.bth.a"], if r.bth.ack_req { "1" } else { "0" }, "{ctx}");
        assert_eq!(row["infiniband.bth.se"], if r.bth.solicited { "1" } else { "0" }, "{ctx}");
        assert_eq!(row["infiniband.bth.padcnt"], hex(pad_len(c.payload.len()) as u64), "{ctx}");
        assert_eq!(row["infiniband.bth.p_key"], "65535", "{ctx}");
        if UNKNOWN_TO_WIRESHARK_4_0.contains(&r.bth.opcode) {
            continue;
        }
        let opt = |v: Option<String>| v.unwrap_or_default();
        assert_eq!(row["infiniband.deth.q_key"], opt(r.deth.map(|d| format!("{:#018x}", d.qkey))), "{ctx}");
        assert_eq!(row["infiniband.deth.srcqp"], opt(r.deth.map(|d| format!("{:#010x}", d.src_qp))), "{ctx}");
        // Wireshark shows the AtomicETH's address and key under the RETH's field names.
        let va = r.reth.map(|x| x.va).or(r.atomic_eth.map(|a| a.va));
        let rkey = r.reth.map(|x| x.rkey).or(r.atomic_eth.map(|a| a.rkey));
        assert_eq!(row["infiniband.reth.va"], opt(va.map(|v| format!("{v:#018x}"))), "{ctx}");
        assert_eq!(row["infiniband.reth.r_key"], opt(rkey.map(|v| format!("{v:#010x}"))), "{ctx}");
        assert_eq!(row["infiniband.reth.dmalen"], opt(r.reth.map(|x| hex(x.dma_len as u64))), "{ctx}");
        assert_eq!(row["infiniband.atomiceth.swapdt"], opt(r.atomic_eth.map(|a| hex(a.swap_add))), "{ctx}");
        assert_eq!(row["infiniband.atomiceth.cmpdt"], opt(r.atomic_eth.map(|a| hex(a.compare))), "{ctx}");
        assert_eq!(row["infiniband.aeth.syndrome"], opt(r.aeth.map(|a| hex(a.syndrome_raw as u64))), "{ctx}");
        assert_eq!(row["infiniband.aeth.msn"], opt(r.aeth.map(|a| hex(a.msn as u64))), "{ctx}");
        assert_eq!(
            row["infiniband.atomicacketh.origremdt"],
            opt(r.atomic_ack_eth.map(|a| hex(a.orig))),
            "{ctx}"
        );
        let bytes = |v: u32| format!("{v:08x}");
        assert_eq!(row["infiniband.immdt"], opt(r.immdt.map(|i| bytes(i.imm))), "{ctx}");
        assert_eq!(row["infiniband.ieth"], opt(r.ieth.map(|i| bytes(i.rkey))), "{ctx}");
        // Wireshark 4.0 shows the pad bytes as part of the data: it does not subtract PadCnt.
        let shown = c.payload.len() + pad_len(c.payload.len());
        let data_len = if shown == 0 { String::new() } else { shown.to_string() };
        assert_eq!(row["data.len"], data_len, "{ctx}");
    }
    // Leave one opcode's decode for the curious (run with --nocapture).
    let v = Command::new("tshark").args(["-n", "-r"]).arg(&path).args(["-V", "-c", "1"]).output().unwrap();
    println!("{}", String::from_utf8_lossy(&v.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}
