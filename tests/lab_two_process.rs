//! Two processes exchange every RC operation through the public API: the lab example as
//! server and as client (protocol LAB1, the one labpeer speaks against kernel rxe).

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn lab_binary() -> PathBuf {
    common::example("lab")
}

fn run(mtu: u32, size: usize, psn: &str, port: u16) {
    let (sa, ca) = (common::verbs::loopback_ip(), common::verbs::loopback_ip());
    let server = Command::new(lab_binary())
        .args(["-s", "-d", &sa, "-p", &port.to_string(), "-P", psn, "-t", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("examples/lab is built by cargo test");
    let client = Command::new(lab_binary())
        .args([
            "-d",
            &ca,
            "-p",
            &port.to_string(),
            "-m",
            &mtu.to_string(),
            "-z",
            &size.to_string(),
            "-t",
            "20",
            &sa,
        ])
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    let (c, s) = (String::from_utf8_lossy(&client.stdout), String::from_utf8_lossy(&server.stdout));
    assert!(
        client.status.success(),
        "client:\n{c}\n{}\nserver:\n{s}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(server.status.success(), "server:\n{s}");
    for out in [&c, &s] {
        assert!(out.contains("result: PASS 14/14"), "{out}");
        assert_eq!(out.lines().filter(|l| l.starts_with("step ") && l.ends_with(": ok")).count(), 14);
    }
}

#[test]
fn lab_sequence_between_two_processes() {
    let base = 20000 + (std::process::id() % 20000) as u16;
    run(1024, 10000, "123456", base);
    run(4096, 100_000, "fffff0", base + 1); // PSNs wrap through 0
    run(256, 100, "0", base + 2);
}
