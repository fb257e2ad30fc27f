//! Field positions checked against MADs kernel rxe sent (rping_cm.pcap frames 1-2,
//! cm/udaddy.pcap frames 1-2), and the lossless round trip of every message type.

use super::*;
use crate::wire::mad::{MAD_LEN, Mad, MadBody, MadRepr, Recipient, recipient, unsupported_method_response};

fn hex(s: &str) -> [u8; MAD_LEN] {
    let v: Vec<u8> = (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect();
    v.try_into().unwrap()
}

const RPING_REQ: &str = "010702030000000000000002a53045dc0010000000000000dc4530a5000000000000000001061c06505400fffe77000300000000000000000000180100000001000000a09cc876a7ffff37f0ffffffff00000000000000000000ffff0a4d000300000000000000000000ffff0a4d0002274e3000004000980000000000000000000000000000000000000000000000000000000000000000000000000000000000000000004097830000000000000000000000000a4d00030000000000000000000000000a4d00020000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
const RPING_REP: &str = "010702030000000000000002a53045dc0013000000000000cee6b161dc4530a500000000000018000000000012a96d00010178e0505400fffe77000200000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
const UDADDY_SIDR_REQ: &str = "010702030000000000000002db6b0e440017000000000000440e6bdbffff00000000000001111c060040de360000000000000000000000000a4d00030000000000000000000000000a4d0002000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
const UDADDY_SIDR_REP: &str = "010702030000000000000002db6b0e440018000000000000440e6bdb0000000000001d000000000001111c060123456700000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";

#[test]
fn rping_req_fields() {
    let b = hex(RPING_REQ);
    let mad = Mad::new_checked(&b[..]).unwrap();
    let h = mad.header();
    assert_eq!((h.base_version(), h.mgmt_class(), h.class_version(), h.method()), (1, 7, 2, 3));
    assert_eq!(h.transaction_id(), 0x0000_0002_a530_45dc);
    assert_eq!(mad.cm_attr(), Some(CmAttr::Req));
    let r = Req::new_checked(mad.data()).unwrap();
    assert_eq!(r.local_comm_id(), 0xdc45_30a5);
    assert_eq!(r.service_id(), 0x0106_1c06);
    assert_eq!(r.local_ca_guid(), 0x5054_00ff_fe77_0003);
    assert_eq!(r.local_qpn(), 0x18);
    assert_eq!(r.responder_resources(), 1);
    assert_eq!(r.initiator_depth(), 1);
    assert_eq!(r.remote_cm_response_timeout(), 20);
    assert_eq!(r.transport_service_type(), 0);
    assert_eq!(r.starting_psn(), 0x9c_c876);
    assert_eq!(r.local_cm_response_timeout(), 20);
    assert_eq!(r.retry_count(), 7);
    assert_eq!(r.partition_key(), 0xffff);
    assert_eq!(r.path_mtu(), 3);
    assert_eq!(r.rnr_retry_count(), 7);
    assert_eq!(r.max_cm_retries(), 15);
    assert_eq!((r.primary_local_lid(), r.primary_remote_lid()), (0xffff, 0xffff));
    assert_eq!(&r.primary_local_gid()[10..], &[0xff, 0xff, 10, 77, 0, 3]);
    assert_eq!(&r.primary_remote_gid()[10..], &[0xff, 0xff, 10, 77, 0, 2]);
    assert_eq!(r.primary_flow_label(), 0x274e3);
    assert_eq!(r.primary_packet_rate(), 0);
    assert_eq!(r.primary_hop_limit(), 64);
    assert_eq!(r.primary_sl(), 0);
    assert_eq!(r.primary_subnet_local(), 0);
    assert_eq!(r.primary_local_ack_timeout(), 19);
    assert!(!r.has_alternate_path());
    assert_eq!(&r.private_data()[..4], &[0x00, 0x40, 0x97, 0x83]);
    assert_eq!(
        CmTransport::from_req(r.transport_service_type(), r.extended_transport_type()),
        CmTransport::Rc
    );
}

#[test]
fn rping_rep_fields() {
    let b = hex(RPING_REP);
    let r = Rep::new_checked(&b[24..]).unwrap();
    assert_eq!(r.local_comm_id(), 0xcee6_b161);
    assert_eq!(r.remote_comm_id(), 0xdc45_30a5);
    assert_eq!(r.local_qkey(), 0);
    assert_eq!(r.local_qpn(), 0x18);
    assert_eq!(r.starting_psn(), 0x12_a96d);
    assert_eq!((r.responder_resources(), r.initiator_depth()), (1, 1));
    assert_eq!(r.target_ack_delay(), 15);
    assert_eq!((r.failover_accepted(), r.end_to_end_flow_control()), (0, 0));
    assert_eq!(r.rnr_retry_count(), 7);
    assert_eq!(r.srq(), 0);
    assert_eq!(r.local_ca_guid(), 0x5054_00ff_fe77_0002);
}

#[test]
fn udaddy_sidr_fields() {
    let b = hex(UDADDY_SIDR_REQ);
    let r = SidrReq::new_checked(&b[24..]).unwrap();
    assert_eq!(r.request_id(), 0x440e_6bdb);
    assert_eq!(r.partition_key(), 0xffff);
    assert_eq!(r.service_id(), 0x0111_1c06);
    assert_eq!(&r.private_data()[..4], &[0x00, 0x40, 0xde, 0x36]);
    let b = hex(UDADDY_SIDR_REP);
    let r = SidrRep::new_checked(&b[24..]).unwrap();
    assert_eq!(r.request_id(), 0x440e_6bdb);
    assert_eq!(SidrStatus::from_u8(r.status()), Some(SidrStatus::Success));
    assert_eq!(r.qpn(), 0x1d);
    assert_eq!(r.service_id(), 0x0111_1c06);
    assert_eq!(r.qkey(), 0x0123_4567);
}

#[test]
fn captured_mads_round_trip() {
    for s in [RPING_REQ, RPING_REP, UDADDY_SIDR_REQ, UDADDY_SIDR_REP] {
        let b = hex(s);
        let repr = MadRepr::parse(&Mad::new_checked(&b[..]).unwrap());
        assert!(!matches!(repr.body, MadBody::Other(_)));
        assert_eq!(repr.to_bytes(), b);
    }
}

/// Every bit of every message survives parse + emit: the field tables cover all 232 bytes
/// with disjoint masks.
#[test]
fn every_message_is_lossless() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    for attr in [0x0001u16, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b] {
        for _ in 0..64 {
            let mut b = [0u8; MAD_LEN];
            for x in b.iter_mut() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                *x = (seed >> 56) as u8;
            }
            b[1] = MGMT_CLASS_CM;
            b[16..18].copy_from_slice(&attr.to_be_bytes());
            let repr = MadRepr::parse(&Mad::new_checked(&b[..]).unwrap());
            assert_eq!(repr.to_bytes(), b, "attr {attr:#x}");
        }
        // All-ones is the sharpest test of the masks.
        let mut b = [0xffu8; MAD_LEN];
        b[1] = MGMT_CLASS_CM;
        b[16..18].copy_from_slice(&attr.to_be_bytes());
        assert_eq!(MadRepr::parse(&Mad::new_checked(&b[..]).unwrap()).to_bytes(), b);
    }
}

#[test]
fn setters_keep_neighbours() {
    let mut b = [0u8; 232];
    let mut r = Req::new_unchecked(&mut b[..]);
    r.set_local_qpn(0xabcdef);
    r.set_responder_resources(0x12);
    r.set_starting_psn(0xfff_ffff); // truncated to 24 bits
    r.set_local_cm_response_timeout(20);
    r.set_retry_count(7);
    r.set_primary_flow_label(0x274e3);
    r.set_primary_packet_rate(0x3f);
    assert_eq!(&b[32..36], &[0xab, 0xcd, 0xef, 0x12]);
    assert_eq!(&b[44..48], &[0xff, 0xff, 0xff, 0xa7]);
    assert_eq!(&b[88..92], &[0x27, 0x4e, 0x30, 0x3f]);
}

#[test]
fn short_buffers_are_refused() {
    assert!(Req::new_checked(&[0u8; 231][..]).is_err());
    assert!(Mad::new_checked(&[0u8; 255][..]).is_err());
    assert!(crate::wire::cma::CmaHdr::new_checked(&[0u8; 35][..]).is_err());
}

#[test]
fn timers_as_linux_computes_them() {
    assert_eq!(iba_time_to_ms(20), 4096);
    assert_eq!(iba_time_to_ms(19), 2048);
    assert_eq!(iba_time_to_ms(24), 65536);
    assert_eq!(iba_time_to_ms(0), 1);
    assert_eq!(iba_time_to_ms(255), 1 << 55);
    assert_eq!(cm_ack_timeout(15, 18), 19);
    assert_eq!(cm_ack_timeout(15, 16), 17);
    assert_eq!(cm_ack_timeout(15, 14), 16);
    assert_eq!(cm_ack_timeout(15, 10), 15);
    assert_eq!(cm_ack_timeout(0, 31), 31);
    assert_eq!(cm_ack_timeout(255, 255), 31);
}

#[test]
fn class_port_info_get_gets_unsupported() {
    let mut get = [0u8; MAD_LEN];
    get[..4].copy_from_slice(&[1, MGMT_CLASS_CM, 2, 0x01]);
    get[8..16].copy_from_slice(&42u64.to_be_bytes());
    get[16..18].copy_from_slice(&1u16.to_be_bytes());
    let resp = unsupported_method_response(&get).unwrap();
    assert_eq!(resp[3], 0x81);
    assert_eq!(&resp[4..6], &[0x00, 0x0c]);
    assert_eq!(&resp[8..16], &get[8..16]);
    let mut send = get;
    send[3] = 0x03;
    assert!(unsupported_method_response(&send).is_none());
}

#[test]
fn rej_reasons() {
    assert_eq!(RejReason::from_u16(8), Some(RejReason::InvalidServiceId));
    assert_eq!(RejReason::InvalidServiceId.as_str(), "invalid service ID");
    assert_eq!(RejReason::from_u16(28).map(|r| r.as_str()), Some("consumer defined"));
    assert_eq!(RejReason::from_u16(34), None);
    assert_eq!(RejReason::VendorOptionNotSupported as u16, 35);
}

#[test]
fn the_recipient_of_each_captured_mad() {
    // A new request names its service; the answers name the receiver's own IDs.
    assert_eq!(recipient(&hex(RPING_REQ)), Recipient::Service(0x0106_1c06));
    assert_eq!(recipient(&hex(RPING_REP)), Recipient::Id(0xdc45_30a5));
    assert_eq!(recipient(&hex(UDADDY_SIDR_REQ)), Recipient::Service(0x0111_1c06));
    assert_eq!(recipient(&hex(UDADDY_SIDR_REP)), Recipient::Id(0x440e_6bdb));
    // Too short, another class, ClassPortInfo: the device.
    let req = hex(RPING_REQ);
    for n in 0..40 {
        assert_eq!(recipient(&req[..n]), Recipient::Device, "{n} bytes");
    }
    let mut other = req;
    other[1] = 0x04;
    assert_eq!(recipient(&other), Recipient::Device);
    let mut cpi = req;
    cpi[16..18].copy_from_slice(&1u16.to_be_bytes());
    assert_eq!(recipient(&cpi), Recipient::Device);
}
