//! `--faults SPEC` on the `softroce` tools: a pair of `rc-pingpong` under loss prints one summary
//! line each, the same from run to run, with the faults in `softroce counters`; a malformed SPEC
//! (flag or `SOFTROCE_FAULTS`) is a usage error naming the item.

mod common;

use std::process::{Command, Output, Stdio};

fn softroce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softroce"))
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// A TCP port per call, distinct across parallel tests (apart from cli_tools.rs's).
fn port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static N: AtomicU16 = AtomicU16::new(0);
    50000 + (std::process::id() % 3000) as u16 * 4 + N.fetch_add(1, Ordering::Relaxed) % 4
}

/// `rc-pingpong <args>` server and client with `--faults spec`; both must succeed. Returns
/// their summary lines.
fn pair(spec: &str, args: &[&str], run_dir: &std::path::Path) -> (String, String) {
    let (s, c) = (common::verbs::loopback_ip(), common::verbs::loopback_ip());
    let p = port().to_string();
    let server = softroce()
        .args(["rc-pingpong", "--faults", spec, "-d", &s, "-p", &p])
        .args(args)
        .env("SOFTROCE_RUN_DIR", run_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = softroce()
        .args(["--faults", spec, "rc-pingpong", "-d", &c, "-p", &p])
        .args(args)
        .arg(&s)
        .env("SOFTROCE_RUN_DIR", run_dir)
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    let (st, ct) = (text(&server), text(&client));
    assert!(server.status.success() && client.status.success(), "server:\n{st}\nclient:\n{ct}");
    let line = |t: &str| {
        let mut l = t.lines().filter(|l| l.starts_with("softroce faults: "));
        let first = l.next().unwrap_or_else(|| panic!("no summary line:\n{t}")).to_string();
        assert!(l.next().is_none(), "one summary line:\n{t}");
        first
    };
    (line(&st), line(&ct))
}

#[test]
fn rc_pingpong_under_faults_prints_the_same_summary_each_run() {
    let dir = std::env::temp_dir().join(format!("sr-cli-faults-{}", std::process::id()));
    let args = ["-n", "200", "-s", "1024", "-c"];
    // (two of three runs must agree: on a loaded machine a timer firing early adds a packet,
    // with a fate of its own, to one run)
    let mut seen: Vec<(String, String)> = Vec::new();
    let same = loop {
        let r = pair("seed=3,loss=5%", &args, &dir);
        if seen.contains(&r) {
            break r;
        }
        seen.push(r);
        assert!(seen.len() < 3, "no two of three runs agree: {seen:#?}");
    };
    assert!(
        same.0.starts_with("softroce faults: seed=3 dropped=") && !same.0.contains("dropped=0 "),
        "{same:?}"
    );
    // The counters file of an ended device lists the faults too.
    let o = softroce().args(["counters", "--all"]).env("SOFTROCE_RUN_DIR", &dir).output().unwrap();
    assert!(text(&o).contains("fault_dropped"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_spec_is_a_usage_error_naming_the_item() {
    let o =
        softroce().args(["rc-pingpong", "--faults", "seed=1,loss=2", "-d", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("bad fault spec item \"loss=2\""), "{}", text(&o));
    let o = softroce()
        .args(["rc-pingpong", "-d", &common::verbs::loopback_ip(), "-n", "1"])
        .env("SOFTROCE_FAULTS", "delay=5")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("SOFTROCE_FAULTS: bad fault spec item \"delay=5\""), "{}", text(&o));
}
