//! The README's one-liners, exactly as written there: every line of the first code block of its
//! Tools section of the form `softroce … & softroce …` (a server and its client started from one shell line, with
//! no sleep between them) is run `SOFTROCE_ONELINER_RUNS` times (default 50) by `sh`, with the
//! built `softroce` first on `PATH`. Each run must end within a minute with both sides exiting 0:
//! no lost race between the server's `listen` and the client's `connect`, no hang after a peer
//! exits, no UC loss on loopback.
//!
//! About two minutes in a release build, so it is `#[ignore]`d; .ci/run runs it with
//! `cargo test --release --test readme_oneliners -- --ignored`. The lines use the README's fixed
//! addresses (127.0.0.1 and 127.0.0.2) and TCP port 18515; runs take turns through a lock file
//! with any other copy of this test on the machine.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `server & client` lines of the first code block of the README's Tools section (the
/// loopback one; comments after `#` removed).
fn oneliners() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let tools = readme.split("\n## Tools").nth(1).expect("a Tools section");
    let block = tools.split("```sh\n").nth(1).expect("a code block").split("```").next().unwrap();
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .filter(|l| l.starts_with("softroce ") && l.contains(" & softroce "))
        .map(str::to_string)
        .collect()
}

/// Runs `line` once as `sh` would; `Err` with what both sides printed unless both exit 0 in
/// time.
fn run(line: &str, bin_dir: &str) -> Result<Duration, String> {
    let (server, client) = line.split_once(" & ").unwrap();
    let script = format!(
        "{server} & S=$!; {client}; C=$?; wait $S; R=$?; echo \"exit: client $C server $R\"; [ $C = 0 ] && [ $R = 0 ]"
    );
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let out_path = std::env::temp_dir().join(format!("softroce-oneliner-{}.out", std::process::id()));
    let out = std::fs::File::create(&out_path).unwrap();
    let t0 = Instant::now();
    let mut child = Command::new("flock")
        .args(["/tmp/softroce-readme-oneliners.lock", "sh", "-c", &script])
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            // A hang: stop the whole group (flock, sh, both tools).
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    let mut text = String::new();
    let _ = std::fs::File::open(&out_path).and_then(|mut f| f.read_to_string(&mut text));
    let _ = std::fs::remove_file(&out_path);
    match status {
        Some(s) if s.success() => Ok(took),
        Some(_) => Err(format!("failed after {took:?}:\n{text}")),
        None => Err(format!("hung (killed after {took:?}):\n{text}")),
    }
}

#[test]
#[ignore = "about two minutes (250 runs): .ci/run runs it with `cargo test --release --test readme_oneliners -- --ignored`"]
fn readme_oneliners_never_race_fail_or_hang() {
    let lines = oneliners();
    for want in ["rc-pingpong", "perf write-bw", "ud-pingpong", "srq-pingpong", "perf send-bw -c UC"] {
        assert!(lines.iter().any(|l| l.contains(want)), "the README lost its {want} one-liner: {lines:#?}");
    }
    let runs: usize = std::env::var("SOFTROCE_ONELINER_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_softroce"));
    let bin_dir = bin.parent().unwrap().to_str().unwrap().to_string();
    let mut failures = Vec::new();
    for line in &lines {
        let mut slowest = Duration::ZERO;
        let t0 = Instant::now();
        for i in 0..runs {
            match run(line, &bin_dir) {
                Ok(took) => slowest = slowest.max(took),
                Err(e) => failures.push(format!("{line}\nrun {i}: {e}")),
            }
        }
        println!(
            "{runs} x {line}: {:.1} s, slowest run {:.2} s",
            t0.elapsed().as_secs_f64(),
            slowest.as_secs_f64()
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        runs * lines.len(),
        failures.join("\n\n")
    );
}

/// The extraction itself: the README keeps its one-liners, each a server and a client.
#[test]
fn readme_has_server_and_client_oneliners() {
    let lines = oneliners();
    assert!(lines.len() >= 5, "{lines:#?}");
    for l in &lines {
        let (s, c) = l.split_once(" & ").unwrap();
        assert!(s.starts_with("softroce ") && c.starts_with("softroce "), "{l}");
        assert!(
            c.split_whitespace().last().unwrap().parse::<std::net::IpAddr>().is_ok(),
            "the client names the server: {l}"
        );
    }
}
