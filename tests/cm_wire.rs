//! The CM wire layer against the MADs kernel rxe sent (rping_cm.pcap and tests/data/cm/):
//! every MAD is recognised, every field table reproduces it bit for bit, and the facts the
//! protocol code relies on hold in the captures.

mod common;

use std::collections::BTreeMap;

use softroce::wire::cm::{CmAttr, GSI_QPN, QP1_QKEY};
use softroce::wire::mad::{MAD_LEN, Mad, MadBody, MadRepr};
use softroce::wire::roce::RoceFrame;

/// Every (capture, frame index, MAD bytes) of UD packets to QP1.
fn captured_mads() -> Vec<(String, usize, [u8; MAD_LEN])> {
    let mut names: Vec<String> = vec!["rping_cm.pcap".into()];
    names.extend(common::CM_CAPTURES.iter().map(|c| c.0.to_string()));
    let mut out = Vec::new();
    for name in names {
        for (i, (_, f)) in common::read_pcap(&name).iter().enumerate() {
            let fr = RoceFrame::parse_ethernet(f).unwrap_or_else(|e| panic!("{name} frame {i}: {e}"));
            assert!(fr.icrc_ok(), "{name} frame {i}");
            let p = fr.packet();
            if p.bth().dest_qp() != GSI_QPN {
                continue;
            }
            let deth = p.deth().expect("UD to QP1 has a DETH");
            assert_eq!(deth.qkey(), QP1_QKEY);
            assert_eq!(deth.src_qp(), GSI_QPN);
            assert_eq!(fr.src_port(), 55410, "rxe's QP1 UDP source port");
            let mad: [u8; MAD_LEN] = p.payload().try_into().expect("exactly 256 bytes");
            out.push((name.clone(), i, mad));
        }
    }
    out
}

#[test]
fn every_captured_mad_parses_and_re_emits_bit_exactly() {
    let mads = captured_mads();
    let mut per_attr: BTreeMap<CmAttr, usize> = BTreeMap::new();
    for (name, i, b) in &mads {
        let mad = Mad::new_checked(&b[..]).unwrap();
        let attr = mad.cm_attr().unwrap_or_else(|| panic!("{name} frame {i}: not a CM MAD"));
        *per_attr.entry(attr).or_default() += 1;
        let repr = MadRepr::parse(&mad);
        assert!(!matches!(repr.body, MadBody::Other(_)), "{name} frame {i}");
        assert_eq!(repr.body.cm_attr(), Some(attr));
        assert_eq!(&repr.to_bytes()[..], &b[..], "{name} frame {i}");
        // The header is the one cm_format_mad_hdr writes.
        let h = mad.header();
        assert_eq!((h.base_version(), h.class_version(), h.method(), h.status()), (1, 2, 3, 0));
        assert_eq!(h.attribute_modifier(), 0, "no ECE in these captures");
    }
    let total: usize = common::CM_CAPTURES.iter().map(|c| c.2).sum::<usize>() + 5;
    assert_eq!(mads.len(), total);
    for attr in [
        CmAttr::Req,
        CmAttr::Rep,
        CmAttr::Rtu,
        CmAttr::Rej,
        CmAttr::Dreq,
        CmAttr::Drep,
        CmAttr::SidrReq,
        CmAttr::SidrRep,
    ] {
        assert!(per_attr.contains_key(&attr), "{attr:?} missing from the captures: {per_attr:?}");
    }
}

/// Facts of Linux's CM that the protocol code copies, read off the captures.
#[test]
fn linux_conventions_visible_in_the_captures() {
    for (name, i, b) in captured_mads() {
        let repr = MadRepr::parse(&Mad::new_checked(&b[..]).unwrap());
        let tid = repr.header.transaction_id;
        match &repr.body {
            MadBody::Req(r) => {
                // TID = (agent hi_tid << 32) | the local comm ID's bytes reversed (x86).
                assert_eq!(tid as u32, r.local_comm_id.swap_bytes(), "{name} {i}");
                assert_eq!(tid >> 32, 2, "{name} {i}");
                assert_eq!((r.primary_local_lid, r.primary_remote_lid), (0xffff, 0xffff));
                assert_eq!(r.primary_local_ack_timeout, 19);
                assert_eq!((r.remote_cm_response_timeout, r.local_cm_response_timeout), (20, 20));
                assert_eq!(r.max_cm_retries, 15);
                assert_eq!(r.alternate_local_lid, 0);
                assert_eq!(r.private_data[0], 0, "cma_version");
                // The flow label is (cma_hdr source port * 31 + service port) & 0xfffff.
                let sport = u16::from_be_bytes([r.private_data[2], r.private_data[3]]);
                assert_eq!(
                    r.primary_flow_label,
                    softroce::wire::cma::roce_udp_flow_label(sport, r.service_id as u16),
                    "{name} {i}"
                );
            }
            MadBody::Rep(r) => {
                assert_eq!(r.target_ack_delay, 15, "rxe's local_ca_ack_delay");
                assert_eq!(r.local_qkey, 0);
            }
            MadBody::Rej(r) => {
                // No listener: REJ 8 built from the REQ (local comm ID 0). Consumer reject of a
                // user-space rdma_cm id: REJ 28 from MRA_REQ_SENT, so the local comm ID is set.
                match r.reason {
                    8 => assert_eq!(r.local_comm_id, 0, "{name} {i}"),
                    28 => assert_ne!(r.local_comm_id, 0, "{name} {i}"),
                    other => panic!("{name} {i}: reason {other}"),
                }
                assert_eq!(r.message_rejected, 0, "REQ rejected");
                assert_eq!(r.rejected_info_length, 0);
            }
            MadBody::Dreq(d) => assert_ne!(d.remote_qpn, 0),
            _ => {}
        }
    }
}
