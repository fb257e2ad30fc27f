//! `examples/rsocket_copy`: a file moves between two processes over an rsocket stream of the
//! softroce crate's Rust API, byte for byte.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn file_moves_between_two_processes() {
    let bin = common::example("rsocket_copy");
    let dir = std::env::temp_dir().join(format!("softroce-rsocket-copy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, dst) = (dir.join("in"), dir.join("out"));
    // Not a multiple of any buffer: 3 MiB and 12345 bytes of a pattern with no period that
    // divides the 64 KiB pieces or the rsocket buffers.
    let data: Vec<u8> =
        (0..(3 << 20) + 12345u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let ip = common::verbs::loopback_ip();
    let mut server = Command::new(&bin)
        .args(["recv", &format!("{ip}:0"), dst.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let at = first.strip_prefix("listening on ").unwrap_or_else(|| panic!("server said {first:?}"));
    let client = Command::new(&bin).args(["send", at, src.to_str().unwrap()]).output().unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = server.wait().unwrap();
    let sent = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success() && status.success(),
        "client: {sent}{}\nserver: {rest:?}",
        String::from_utf8_lossy(&client.stderr)
    );
    let received = std::fs::read(&dst).unwrap();
    assert!(received == data, "{} bytes received of {}", received.len(), data.len());
    let hash = |s: &str| s.split_whitespace().last().map(str::to_string);
    assert_eq!(hash(sent.trim()), rest.last().and_then(|l| hash(l)), "{sent} / {rest:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
