//! `softroce dump` on the rxe captures.

mod common;

use std::process::Command;

fn dump(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_softroce")).arg("dump").args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap())
}

#[test]
fn one_line_per_packet_and_a_summary() {
    for &(name, count) in common::CAPTURES {
        let path = common::data(name);
        let (code, text) = dump(&[path.to_str().unwrap()]);
        assert_eq!(code, 0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), count + 1, "{name}");
        let bad = common::BAD_ICRC.iter().filter(|b| b.0 == name).count();
        assert!(
            lines[count].contains(&format!("{count} RoCEv2 packets, ICRC bad={bad}, malformed=0")),
            "{}",
            lines[count]
        );
        assert_eq!(lines.iter().filter(|l| l.contains(" BAD ")).count(), bad);
    }
}

#[test]
fn line_shows_the_fields_users_look_for() {
    let (_, text) = dump(&[common::data("imm.pcap").to_str().unwrap()]);
    let line = text.lines().find(|l| l.contains("RC_WRITE_FIRST")).unwrap();
    for want in [
        "10.77.0.3:49681 > 10.77.0.2:4791",
        "id=0x7bfc",
        "DF",
        "qp=0x000017",
        "psn=0x7db79b",
        "A=0",
        "pad=0",
        "RETH(va=0x555c5bf6c000 rkey=0x844 len=3000)",
        "len=1024",
        "icrc=0xf66e45df ok",
    ] {
        assert!(line.contains(want), "{want} missing in {line}");
    }
    let line = text.lines().find(|l| l.contains("RC_SEND_LAST_IMM")).unwrap();
    assert!(line.contains("ImmDt(0x22222222) len=952"), "{line}");
}

#[test]
fn verbose_prints_every_header() {
    let (_, text) = dump(&["-v", common::data("atomic.pcap").to_str().unwrap()]);
    let first: Vec<&str> = text.lines().take(8).collect();
    assert!(first[1].trim_start().starts_with("IPv4") && first[1].contains("id=0x7862"), "{first:?}");
    assert!(first[2].trim_start().starts_with("UDP") && first[2].contains("dport=4791"));
    assert!(first[3].trim_start().starts_with("BTH") && first[3].contains("RC_FETCH_ADD"));
    assert!(first[4].trim_start().starts_with("AtomicETH"));
    assert!(first[6].trim_start().starts_with("ICRC") && first[6].contains("ok"));
}

#[test]
fn check_flag_fails_on_bad_icrc_and_explains_it() {
    let (code, text) = dump(&["--check", common::data("host_gsi_probe.pcap").to_str().unwrap()]);
    assert_eq!(code, 1, "the check failed: exit 1, as every tool's failed test");
    assert!(text.contains("it matches IP id=0x0000 DF"), "{text}");
    let (code, _) = dump(&["--check", common::data("imm.pcap").to_str().unwrap()]);
    assert_eq!(code, 0);
    let (code, _) = dump(&["/nonexistent.pcap"]);
    assert_eq!(code, 4, "an unreadable file is local setup");
}

#[test]
fn cm_mads_are_decoded_one_line_each() {
    for &(name, count, mads) in common::CM_CAPTURES {
        let (code, text) = dump(&[common::data(name).to_str().unwrap()]);
        assert_eq!(code, 0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), count + 1, "{name}");
        assert_eq!(lines.iter().filter(|l| l.contains(" | CM ")).count(), mads, "{name}");
    }
    let (_, text) = dump(&[common::data("cm/rping_refused.pcap").to_str().unwrap()]);
    let rej = text.lines().find(|l| l.contains("CM REJ")).unwrap();
    for want in ["local=0x00000000", "remote=0x590e6bdb", "rejected=REQ", "reason=8 (invalid service ID)"] {
        assert!(rej.contains(want), "{want} missing in {rej}");
    }
    let req = text.lines().find(|l| l.contains("CM REQ")).unwrap();
    for want in
        ["svc=0x0000000001061f3f(TCP:7999)", "qpn=0x00001e", "10.77.0.3 > 10.77.0.2", "cma(10.77.0.3:"]
    {
        assert!(req.contains(want), "{want} missing in {req}");
    }
}

#[test]
fn verbose_prints_every_cm_field() {
    let (_, text) = dump(&["-v", common::data("rping_cm.pcap").to_str().unwrap()]);
    let req: Vec<&str> = text.lines().skip_while(|l| !l.contains("| CM REQ")).take(80).collect();
    let field = |name: &str| req.iter().find(|l| l.split_whitespace().nth(1) == Some(name)).copied();
    assert!(field("starting_psn").unwrap().contains("0x9cc876"), "{req:?}");
    assert!(field("primary_flow_label").unwrap().contains("0x274e3"));
    assert!(field("primary_local_gid").unwrap().contains("10.77.0.3"));
    assert!(field("local_cm_response_timeout").unwrap().contains("0x14 (20)"));
    assert!(field("cma_hdr").unwrap().contains("10.77.0.3:38787 > 10.77.0.2"));
    assert!(req.iter().any(|l| l.trim_start().starts_with("MAD ") && l.contains("attribute_id=0x0010")));
}
