//! ICRC verification on arbitrary IP packets.
//!
//! Invariants, whenever the bytes parse as a RoCEv2 datagram: verification never panics; an
//! IPv4 packet whose ICRC verifies yields exactly its own IP identification and DF flag when
//! they are hidden and recovered from the ICRC (the UDP backend's receive check); and flipping
//! one covered bit (chosen by the input) makes a verifying packet fail. The engine's solver
//! (tables for one length, a shift for the others, a cache of verified lengths kept across
//! inputs) answers as the one-shot elimination does, right ICRC or wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softroce::wire::icrc::{self, RecoveredIpv4};
use softroce::wire::pretty::{FrameDetail, FrameLine};
use softroce::wire::roce::RoceFrame;

thread_local! {
    static SOLVER: std::cell::RefCell<icrc::Ipv4IdSolver> = std::cell::RefCell::new(icrc::Ipv4IdSolver::new());
}

fuzz_target!(|data: &[u8]| {
    let Ok(fr) = RoceFrame::parse_ip(data) else { return };
    let _ = format!("{}{}", FrameLine(&fr), FrameDetail(&fr));
    let ok = fr.icrc_ok();
    let p = fr.packet();
    if let (Some(id), Some(df), Ok(hdr)) = (fr.ip_id(), fr.df(), <[u8; 20]>::try_from(fr.ip_header())) {
        let got = icrc::recover_ipv4_id(&hdr, fr.udp_header(), p.without_icrc(), p.icrc()).unwrap();
        let solved =
            SOLVER.with(|s| s.borrow_mut().recover(&hdr, fr.udp_header(), p.without_icrc(), p.icrc()).unwrap());
        assert_eq!(solved, got);
        if ok && hdr[6] & 0xbf == 0 && hdr[7] == 0 {
            assert_eq!(got, Some(RecoveredIpv4 { id, df }));
        }
    }
    if ok {
        // Flip one bit of the transport packet, outside BTH byte 4 (masked) and the ICRC.
        let ip_len = fr.ip_header().len() + 8;
        let body = p.len() - 4;
        let at = data.len() % body;
        if at != 4 {
            let mut ib = p.without_icrc().to_vec();
            ib[at] ^= 1 << (data.len() % 8);
            let c = icrc::compute(fr.ip_header(), fr.udp_header(), &ib).unwrap();
            assert_ne!(c, p.icrc(), "flip at {}", ip_len + at);
        }
    }
});
