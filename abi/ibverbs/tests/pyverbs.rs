//! rdma-core's own test suite (pyverbs, Debian's copy in `/usr/share/doc/rdma-core/tests`, partly
//! gzipped) run against our library: the device, PD, MR, CQ, CQ-event, extended CQ, QP,
//! extended QP, atomic, address-handle and relaxed-ordering modules. No failure, no error, and
//! at least as many passes per module as recorded below (a drop means a regression, or a test
//! that now skips: look at the printed skip reasons). Cost: about 3 s (one Python process per
//! module).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// Debian's interpreter: pyverbs is installed for it (another `python3` on `PATH` may lack it).
const PYTHON: &str = "/usr/bin/python3";

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

#[test]
fn pyverbs_modules_pass_on_softroce() {
    if !require(
        "pyverbs_modules_pass_on_softroce",
        &[SUITE, PYTHON, "/usr/lib/python3/dist-packages/pyverbs", "/usr/bin/gzip"],
        "python3-pyverbs (its tests are in /usr/share/doc/rdma-core/tests), gzip",
    ) {
        return;
    }
    let lib = lib_dir("pyverbs");
    let suite = std::env::temp_dir().join(format!("softroce-pyverbs-{}", std::process::id()));
    unpack(&suite);
    let mut bad = Vec::new();
    println!("{:<24} {:>4} {:>4} {:>4} {:>5}", "module", "pass", "skip", "fail", "error");
    for &(module, floor) in FLOORS {
        // GID index 1: the device's IPv4 GID (index 0 is the link-local one).
        let out = Command::new(PYTHON)
            .args(["run_tests.py", "--dev", "softroce0", "--gid", "1", "-v", module])
            .current_dir(&suite)
            .env("LD_LIBRARY_PATH", &lib)
            .env("SOFTROCE_DEVICES", addr())
            .output()
            .expect("python3");
        let all = text(&out);
        let Some(c) = parse(&all) else {
            bad.push(format!("{module}: no unittest verdict (exit {:?}):\n{all}", out.status.code()));
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
