//! Property tests of the wire layer: emit and parse are inverse, arbitrary bytes never panic,
//! PSN arithmetic is right across the wrap, the ICRC covers exactly what it should.

use proptest::prelude::*;
use softroce::wire::icrc;
use softroce::wire::opcode::ALL;
use softroce::wire::pretty::{FrameDetail, FrameLine, PacketLine};
use softroce::wire::roce::{IpRepr, RoceFrame, RoceFrameRepr};
use softroce::wire::*;
use std::net::{Ipv4Addr, Ipv6Addr};

fn any_bth(op: Opcode) -> impl Strategy<Value = BthRepr> {
    (any::<(bool, bool, u8, u16, bool, bool, u8)>(), any::<(u32, bool, u8, u32)>()).prop_map(
        move |((se, m, tver, pkey, fecn, becn, resv6), (qp, a, resv7, psn))| BthRepr {
            opcode: op,
            solicited: se,
            mig_req: m,
            pad: 0,
            tver: tver & 0xf,
            pkey,
            fecn,
            becn,
            resv6: resv6 & 0x3f,
            dest_qp: qp & 0xff_ffff,
            ack_req: a,
            resv7: resv7 & 0x7f,
            psn: Psn::new(psn),
        },
    )
}

/// An arbitrary packet representation of any known opcode, with a payload (empty when the
/// opcode carries none).
fn any_packet() -> impl Strategy<Value = (PacketRepr, Vec<u8>)> {
    (0..ALL.len())
        .prop_flat_map(|i| {
            let info = ALL[i];
            let max = if info.payload { 4096 } else { 0 };
            (
                any_bth(info.opcode),
                any::<[u64; 8]>(),
                proptest::collection::vec(any::<u8>(), 0..=max),
                Just(info),
            )
        })
        .prop_map(|(bth, w, payload, info)| {
            let h = info.headers;
            let mut r = PacketRepr::new(bth);
            let (a, b, c, d) = (w[0], w[1], w[2], w[3]);
            if h.contains(Headers::DETH) {
                r.deth = Some(DethRepr {
                    qkey: a as u32,
                    resv8: (a >> 32) as u8,
                    src_qp: (a >> 40) as u32 & 0xff_ffff,
                });
            }
            if h.contains(Headers::FETH) {
                r.feth = Some(FethRepr { word: b as u32 });
            }
            if h.contains(Headers::RETH) {
                r.reth = Some(RethRepr { va: c, rkey: d as u32, dma_len: (d >> 32) as u32 });
            }
            if h.contains(Headers::ATOMIC_ETH) {
                r.atomic_eth =
                    Some(AtomicEthRepr { va: w[4], rkey: w[5] as u32, swap_add: w[6], compare: w[7] });
            }
            if h.contains(Headers::AETH) {
                r.aeth = Some(AethRepr { syndrome_raw: b as u8, msn: (b >> 8) as u32 & 0xff_ffff });
            }
            if h.contains(Headers::ATOMIC_ACK_ETH) {
                r.atomic_ack_eth = Some(AtomicAckEthRepr { orig: w[5] });
            }
            if h.contains(Headers::IMMDT) {
                r.immdt = Some(ImmDtRepr { imm: (c >> 32) as u32 });
            }
            if h.contains(Headers::IETH) {
                r.ieth = Some(IethRepr { rkey: w[6] as u32 });
            }
            r.bth.pad = pad_len(payload.len()) as u8;
            (r, payload)
        })
}

fn any_ip() -> impl Strategy<Value = IpRepr> {
    prop_oneof![
        any::<([u8; 4], [u8; 4], u8, u8, u16, bool)>().prop_map(|(s, d, tos, ttl, id, df)| IpRepr::V4 {
            src: Ipv4Addr::from(s),
            dst: Ipv4Addr::from(d),
            tos,
            ttl,
            id,
            df
        }),
        any::<([u8; 16], [u8; 16], u8, u32, u8)>().prop_map(|(s, d, tc, fl, hop)| IpRepr::V6 {
            src: Ipv6Addr::from(s),
            dst: Ipv6Addr::from(d),
            traffic_class: tc,
            flow_label: fl & 0xf_ffff,
            hop_limit: hop
        }),
    ]
}

/// Exercises every accessor and printer of a checked packet (they must not panic).
fn touch(p: &Packet<'_>) -> usize {
    let r = PacketRepr::parse(p);
    let s = format!("{}", PacketLine(p));
    s.len() + r.header_len() + p.payload().len() + p.pad_bytes().len() + p.icrc() as usize % 7
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn emit_then_parse_is_identity((repr, payload) in any_packet()) {
        let mut buf = vec![0u8; repr.buffer_len(payload.len())];
        let n = repr.emit(&mut buf, &payload).unwrap();
        prop_assert_eq!(n, buf.len());
        prop_assert_eq!(n % 4, 0);
        let p = Packet::new_checked(&buf).unwrap();
        prop_assert_eq!(PacketRepr::parse(&p), repr);
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert_eq!(p.pad_bytes().len(), pad_len(payload.len()));
        prop_assert!(p.pad_bytes().iter().all(|&b| b == 0));
    }

    #[test]
    fn framed_packets_round_trip_with_a_valid_icrc(
        (repr, payload) in any_packet(), ip in any_ip(), sport in any::<u16>(), cs in any::<bool>()
    ) {
        let f = RoceFrameRepr { ip, src_port: sport, dst_port: ROCEV2_UDP_PORT, udp_checksum: cs };
        let mut buf = vec![0u8; f.header_len() + repr.buffer_len(payload.len())];
        let n = f.emit(&mut buf, &repr, &payload).unwrap();
        let fr = RoceFrame::parse_ip(&buf[..n]).unwrap();
        prop_assert!(fr.icrc_ok());
        prop_assert_eq!(fr.frame_repr(), RoceFrameRepr { udp_checksum: cs || matches!(ip, IpRepr::V6 { .. }), ..f });
        prop_assert_eq!(PacketRepr::parse(&fr.packet()), repr);
        // The send-side shortcut (ICRC without building the headers) agrees.
        if let IpRepr::V4 { .. } = ip {
            prop_assert_eq!(f.icrc(fr.packet().without_icrc()).unwrap(), fr.packet().icrc());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(p) = Packet::new_checked(&bytes) {
            touch(&p);
            prop_assert_eq!(p.header_len() + p.payload().len() + p.pad_bytes().len() + ICRC_LEN, bytes.len());
        }
        for f in [RoceFrame::parse_ip(&bytes), RoceFrame::parse_ethernet(&bytes)].into_iter().flatten() {
            let _ = format!("{}\n{}", FrameLine(&f), FrameDetail(&f));
            touch(&f.packet());
        }
    }

    #[test]
    fn mutated_valid_packets_never_panic(
        (repr, payload) in any_packet(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>()
    ) {
        let f = RoceFrameRepr {
            ip: IpRepr::V4 { src: Ipv4Addr::LOCALHOST, dst: Ipv4Addr::LOCALHOST, tos: 0, ttl: 64, id: 0, df: true },
            src_port: 1, dst_port: ROCEV2_UDP_PORT, udp_checksum: false,
        };
        let mut buf = vec![0u8; f.header_len() + repr.buffer_len(payload.len())];
        f.emit(&mut buf, &repr, &payload).unwrap();
        for (at, x) in flips {
            let n = buf.len();
            buf[at % n] ^= x;
        }
        let len = buf.len() - cut % 8;
        if let Ok(fr) = RoceFrame::parse_ip(&buf[..len]) {
            let _ = format!("{}\n{}", FrameLine(&fr), FrameDetail(&fr));
            touch(&fr.packet());
        }
        if let Ok(p) = Packet::new_checked(&buf[28..len]) {
            touch(&p);
        }
    }

    #[test]
    fn psn_order_is_antisymmetric(a in 0u32..1 << 24, d in 1u32..1 << 23) {
        let x = Psn::new(a);
        let y = x.add(d);
        prop_assert!(x.is_before(y));
        prop_assert!(y.is_after(x));
        prop_assert!(!y.is_before(x));
        prop_assert_eq!(y.diff(x), d as i32);
        prop_assert_eq!(x.diff(y), -(d as i32));
        prop_assert_eq!(y.distance_from(x), d);
        prop_assert_eq!(y.sub(d), x);
        prop_assert_eq!(x.cmp_wrapping(y), y.cmp_wrapping(x).reverse());
    }

    #[test]
    fn psn_is_right_across_the_wrap(back in 1u32..1000, fwd in 0u32..1000) {
        let before = Psn::new(Psn::MODULUS - back);
        let after = Psn::new(fwd);
        prop_assert!(before.is_before(after));
        prop_assert_eq!(after.diff(before), (back + fwd) as i32);
        prop_assert_eq!(before.add(back + fwd), after);
    }

    #[test]
    fn icrc_covers_exactly_the_unmasked_fields(
        (repr, payload) in any_packet(), ip in any_ip(), sport in any::<u16>(), which in 0usize..12, x in 1u8..=255
    ) {
        let f = RoceFrameRepr { ip, src_port: sport, dst_port: ROCEV2_UDP_PORT, udp_checksum: false };
        let mut buf = vec![0u8; f.header_len() + repr.buffer_len(payload.len())];
        let n = f.emit(&mut buf, &repr, &payload).unwrap();
        let ihl = f.ip.header_len();
        let fr = RoceFrame::parse_ip(&buf[..n]).unwrap();
        let base = fr.computed_icrc();
        let ib = fr.packet().without_icrc().to_vec();
        let (mut iph, mut udp) = (fr.ip_header().to_vec(), fr.udp_header().to_vec());
        let mut ibm = ib.clone();
        // Masked fields never change the ICRC.
        let masked_changed = match which {
            0 => { if ihl == 20 { iph[1] ^= x } else { iph[1] ^= x; iph[0] ^= x & 0x0f; } true }
            1 => { if ihl == 20 { iph[8] ^= x } else { iph[7] ^= x } true }
            2 => { if ihl == 20 { iph[10] ^= x } else { iph[3] ^= x } true }
            3 => { udp[6] ^= x; true }
            4 => { ibm[4] ^= x; true }
            // Covered fields always do.
            5 => { if ihl == 20 { iph[4] ^= x } else { iph[8] ^= x } false }   // IPv4 ID / IPv6 src
            6 => { if ihl == 20 { iph[6] ^= x & 0x40 | 1 } else { iph[4] ^= x } false } // flags / payload len
            7 => { iph[ihl - 1] ^= x; false }                                   // destination address
            8 => { udp[0] ^= x; false }                                         // source port
            9 => { ibm[0] ^= x; false }                                         // opcode
            10 => { ibm[11] ^= x; false }                                       // PSN
            _ => { let at = ibm.len() - 1; ibm[at] ^= x; false }               // last byte
        };
        let now = icrc::compute(&iph, &udp, &ibm).unwrap();
        prop_assert_eq!(now == base, masked_changed, "field {}", which);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Any bytes as a MAD: parsing never panics, re-emitting gives the same 256 bytes, and
    /// `softroce dump`'s MAD printers never panic. CM-class MADs of every attribute are
    /// generated often (class 0x07 and attribute 0x0010-0x001a are forced half the time).
    #[test]
    fn any_mad_parses_prints_and_round_trips(mut b in proptest::collection::vec(any::<u8>(), 0..300), cm in any::<bool>(), attr in 0u16..0x1c) {
        use softroce::wire::mad::{Mad, MadRepr};
        use softroce::wire::pretty::{MadDetail, MadLine};
        if cm && b.len() >= 24 {
            b[1] = 0x07;
            b[16..18].copy_from_slice(&attr.to_be_bytes());
        }
        let _ = format!("{} {}", MadLine(&b), MadDetail(&b));
        if let Ok(m) = Mad::new_checked(&b[..]) {
            let r = MadRepr::parse(&m);
            prop_assert_eq!(&r.to_bytes()[..], &b[..256]);
        } else {
            prop_assert!(b.len() < 256);
        }
    }
}
