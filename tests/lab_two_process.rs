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

/// examples/send_recv between two processes: the documented RECV + SEND program works as its
/// comment says, started from one shell line (the client waits for the server to listen).
#[test]
fn send_recv_example_between_two_processes() {
    let bin = common::example("send_recv");
    let (sa, ca) = (common::verbs::loopback_ip(), common::verbs::loopback_ip());
    let port = (40000 + std::process::id() % 20000).to_string();
    let client = Command::new(&bin)
        .args(["-d", &ca, "-p", &port, "-n", "50", &sa])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let server = Command::new(&bin).args(["-d", &sa, "-p", &port, "-n", "50"]).output().unwrap();
    let client = client.wait_with_output().unwrap();
    let (c, s) = (String::from_utf8_lossy(&client.stdout), String::from_utf8_lossy(&server.stdout));
    let errs =
        String::from_utf8_lossy(&client.stderr).into_owned() + &String::from_utf8_lossy(&server.stderr);
    assert!(client.status.success() && server.status.success(), "client:\n{c}\nserver:\n{s}\n{errs}");
    assert!(c.contains("50 messages, 50 answers checked"), "{c}");
    assert!(s.contains("50 messages, 0 answers checked"), "{s}");
}
