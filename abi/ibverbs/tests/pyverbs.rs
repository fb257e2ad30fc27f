//! rdma-core's own test suite (pyverbs, Debian's copy in `/usr/share/doc/rdma-core/tests`, partly
//! gzipped) run against our library the way its users run it (`--dev softroce0`, no `--gid`:
//! the suite picks GID index 0): the device, PD, MR, CQ, CQ-event, extended CQ, QP,
//! extended QP, atomic, address-handle and relaxed-ordering modules. No failure, no error, no
//! module running past a minute, and
//! at least as many passes per module as recorded below (a drop means a regression, or a test
//! that now skips: look at the printed skip reasons). Cost: about 3 s (one Python process per
//! module).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// Debian's interpreter: pyverbs is installed for it (another `python3` on `PATH` may lack it).
const PYTHON: &str = "/usr/bin/python3";
/// How long one module may take (each takes well under a second): past it, it is killed and
/// counted as a failure.
const MODULE_LIMIT: Duration = Duration::from_secs(60);

/// Module and the passes it has today (softroce, Debian 12's rdma-core 44 tests). The skips are
/// the suite's own for capabilities softroce lacks (ODP, dmabuf, device
/// memory, XRC, raw packet, completion timestamps, rereg of the translation).
const FLOORS: &[(&str, u32)] = &[
    ("test_device", 12),
    ("test_pd", 4),
    ("test_mr", 11),
    ("test_cq", 4),
    ("test_cq_events", 2),
    ("test_cqex", 4),
    ("test_qp", 21),
    ("test_qpex", 17),
    ("test_atomic", 7),
    ("test_addr", 3),
    ("test_relaxed_ordering", 2),
];

/// unittest's verdict for one module.
#[derive(Debug, Default, PartialEq)]
struct Counts {
    ran: u32,
    skipped: u32,
    failures: u32,
    errors: u32,
    expected_failures: u32,
    unexpected_successes: u32,
}

impl Counts {
    fn passed(&self) -> u32 {
        self.ran.saturating_sub(
            self.skipped + self.failures + self.errors + self.expected_failures + self.unexpected_successes,
        )
    }
}

/// Reads `Ran N tests in …` and the verdict line (`OK`, `OK (skipped=3)`,
/// `FAILED (failures=1, errors=2, skipped=3)`) that unittest prints last; `None` without them.
fn parse(out: &str) -> Option<Counts> {
    let mut c = Counts::default();
    let ran_line = out.lines().rev().find(|l| l.starts_with("Ran ") && l.contains(" test"))?;
    c.ran = ran_line.split_whitespace().nth(1)?.parse().ok()?;
    let verdict = out.lines().rev().find(|l| l.starts_with("OK") || l.starts_with("FAILED"))?;
    if let (Some(a), Some(b)) = (verdict.find('('), verdict.rfind(')')) {
        for kv in verdict[a + 1..b].split(',') {
            let (k, v) = kv.trim().split_once('=')?;
            let v: u32 = v.parse().ok()?;
            match k {
                "skipped" => c.skipped = v,
                "failures" => c.failures = v,
                "errors" => c.errors = v,
                "expected failures" => c.expected_failures = v,
                "unexpected successes" => c.unexpected_successes = v,
                _ => return None,
            }
        }
    } else if verdict.trim() != "OK" {
        return None;
    }
    Some(c)
}

#[test]
fn parse_reads_unittest_verdicts() {
    assert_eq!(parse("x\nRan 4 tests in 0.1s\n\nOK\n").map(|c| c.passed()), Some(4));
    let c = parse("Ran 27 tests in 0.2s\n\nFAILED (failures=1, errors=2, skipped=20)\n").unwrap();
    assert_eq!((c.passed(), c.failures, c.errors, c.skipped), (4, 1, 2, 20));
    assert_eq!(parse("Ran 5 tests in 0.2s\n\nOK (skipped=1)\nnoise after\n").map(|c| c.passed()), Some(4));
    assert_eq!(parse("Traceback …\nImportError\n"), None);
}

/// The suite in a scratch directory, `.py.gz` files unpacked.
fn unpack(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(SUITE).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if let Some(plain) = name.strip_suffix(".gz") {
            let out = Command::new("gzip").arg("-dc").arg(&p).output().expect("gzip");
            assert!(out.status.success(), "gzip -dc {}: {}", p.display(), text(&out));
            std::fs::write(dir.join(plain), out.stdout).unwrap();
        } else if p.is_file() {
            std::fs::copy(&p, dir.join(&name)).unwrap();
        }
    }
}

/// Runs one module of the suite in `suite` on device `devices` (`SOFTROCE_DEVICES`) with the
/// library in `lib`: its output (stdout and stderr, through a file: a pipe nobody reads
/// would stall a talkative module). A hang is a failure, not a stuck CI (`test_cq_events_ud`
/// once waited forever): past [`MODULE_LIMIT`] the process is killed.
/// `netns`: in that network namespace.
fn run_module(suite: &Path, lib: &Path, module: &str, devices: &str, netns: Option<&str>) -> String {
    let log = suite.join(format!("{module}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, PYTHON]);
            c
        }
        None => Command::new(PYTHON),
    };
    let mut child = cmd
        .args(["run_tests.py", "--dev", "softroce0", "-v", module])
        .current_dir(suite)
        .env("LD_LIBRARY_PATH", lib)
        .env("SOFTROCE_DEVICES", devices)
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("python3");
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() && t.elapsed() < MODULE_LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    let mut out = std::fs::read_to_string(&log).unwrap_or_default();
    if t.elapsed() >= MODULE_LIMIT {
        out.push_str(&format!("\n(killed after {MODULE_LIMIT:?}, {status})\n"));
    }
    out
}

#[test]
fn pyverbs_modules_pass_on_softroce() {
    // A loopback device: no link-local address, GID 0 is its own address again.
    let devices = addr();
    run_suite("pyverbs_modules_pass_on_softroce", &devices, None);
}

/// The same on a device opened on an interface (a veth in a network namespace): GID 0 is the
/// interface's link-local address, served like the IPv4 one (root only).
#[test]
#[ignore = "needs root: network namespaces"]
fn pyverbs_modules_pass_on_an_interface_device() {
    common::netns::require_root();
    let pair = common::netns::VethPair::new(3);
    run_suite("pyverbs_modules_pass_on_an_interface_device", &pair.dev[0], Some(&pair.ns[0]));
}

/// Every module of [`FLOORS`] on device `devices` (in namespace `netns`): no failure, no error,
/// no fewer passes than the floor.
fn run_suite(test: &str, devices: &str, netns: Option<&str>) {
    if !require(
        test,
        &[SUITE, PYTHON, "/usr/lib/python3/dist-packages/pyverbs", "/usr/bin/gzip"],
        "python3-pyverbs (its tests are in /usr/share/doc/rdma-core/tests), gzip",
    ) {
        return;
    }
    let lib = lib_dir(test);
    let suite = std::env::temp_dir().join(format!("softroce-{test}-{}", std::process::id()));
    unpack(&suite);
    let mut bad = Vec::new();
    println!("{:<24} {:>4} {:>4} {:>4} {:>5}", "module", "pass", "skip", "fail", "error");
    for &(module, floor) in FLOORS {
        // No `--gid`, as users run it: the suite picks GID index 0.
        let all = run_module(&suite, &lib, module, devices, netns);
        let Some(c) = parse(&all) else {
            bad.push(format!("{module}: no unittest verdict:\n{all}"));
            continue;
        };
        println!("{module:<24} {:>4} {:>4} {:>4} {:>5}", c.passed(), c.skipped, c.failures, c.errors);
        for l in all.lines().filter(|l| l.contains("skipped '")) {
            println!("    {}", l.trim());
        }
        if c.failures + c.errors + c.unexpected_successes > 0 || c.passed() < floor {
            bad.push(format!("{module}: {c:?}, {} passed (at least {floor} expected):\n{all}", c.passed()));
        }
    }
    let _ = std::fs::remove_dir_all(&suite);
    let _ = std::fs::remove_dir_all(&lib);
    assert!(bad.is_empty(), "pyverbs regressions:\n{}", bad.join("\n\n"));
}
