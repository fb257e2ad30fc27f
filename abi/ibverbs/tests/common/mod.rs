//! What the ABI tests share: the built library in a directory of its own (as
//! `libibverbs.so.1`), the Debian prerequisites check, C programs built against the installed
//! headers.

#![allow(dead_code)]

pub mod netns;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The Debian 12 library this one replaces.
pub const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// What a test that compiles one of `tests/c/` ([`build_c`]) needs, and the Debian packages
/// that bring it, for [`require`].
pub const C_BUILD: &[&str] = &[SYSTEM_LIB, "/usr/include/infiniband/verbs.h", "/usr/bin/gcc"];
pub const C_BUILD_PACKAGES: &str = "libibverbs-dev gcc";

/// True if every path exists; otherwise prints that the test is skipped and why (visible in
/// `cargo test` output) and returns false. Under `CI` a missing prerequisite fails instead.
pub fn require(test: &str, paths: &[&str], packages: &str) -> bool {
    let missing: Vec<&str> = paths.iter().copied().filter(|p| !Path::new(p).exists()).collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!("SKIPPED {test}: missing {missing:?} (install Debian packages: {packages})");
    assert!(std::env::var_os("CI").is_none(), "{why} — fatal under CI");
    eprintln!("{why}");
    println!("{why}");
    false
}

/// The cdylib, built for this test run (`target/<profile>/libibverbs.so`).
///
/// `cargo test` does not build a cdylib-only library for its integration tests, so the first
/// call runs `cargo build -p softroce-ibverbs` in the profile of the test executable (cargo
/// does not hold its build lock while tests run).
pub fn built_lib() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_in_test_profile("softroce-ibverbs", "libibverbs.so")).clone()
}

/// The drop-in librdmacm, built as [`built_lib`] is, for the programs that need both
/// libraries.
pub fn built_rdmacm() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_in_test_profile("softroce-rdmacm", "librdmacm.so")).clone()
}

/// The `softroce` command, built as [`built_lib`] is (for `softroce setup`).
pub fn built_cli() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_in_test_profile("softroce", "softroce")).clone()
}

/// `cargo build -p <package>` in the profile of the test executable; the path of `file` it
/// built there.
fn build_in_test_profile(package: &str, file: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/[<triple>/]<profile>/deps/<test>-<hash>
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()).unwrap() {
        "debug" => "dev".to_string(),
        other => other.to_string(),
    };
    let out = Command::new(env!("CARGO"))
        .args(["build", "-p", package, "--profile", &profile])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo");
    assert!(out.status.success(), "cargo build -p {package} failed:\n{}", text(&out));
    let lib = profile_dir.join(file);
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

/// [`lib_dir`] with `librdmacm.so.1` -> the built drop-in librdmacm beside it.
pub fn lib_dir_with_rdmacm(tag: &str) -> PathBuf {
    let dir = lib_dir(tag);
    std::os::unix::fs::symlink(built_rdmacm(), dir.join("librdmacm.so.1")).unwrap();
    dir
}

/// A fresh directory holding `libibverbs.so.1` -> the built library, for `LD_LIBRARY_PATH`.
pub fn lib_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softroce-abi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(built_lib(), dir.join("libibverbs.so.1")).unwrap();
    dir
}

/// Compiles `tests/c/<name>.c` against the installed headers and library into `dir`.
pub fn build_c(name: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    let exe = dir.join(name);
    let out = Command::new("gcc")
        .args(["-Wall", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-libverbs", "-lpthread"])
        .output()
        .expect("gcc");
    assert!(out.status.success(), "gcc {name}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// Runs `cmd` with our library first on the loader path.
pub fn run_with(dir: &Path, cmd: &mut Command) -> Output {
    cmd.env("LD_LIBRARY_PATH", dir).output().expect("spawn")
}

/// stdout + stderr of an output, for assertion messages.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A fresh loopback address for this process and call (127.220-249.x.y, apart from the
/// ranges the other test files use).
pub fn addr() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let k = std::process::id().wrapping_mul(64).wrapping_add(n);
    format!("127.{}.{}.{}", 220 + (k / (254 * 256)) % 30, (k / 254) % 256, k % 254 + 1)
}

/// A TCP port free right now (the server binds it a moment later).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// True once some socket listens on TCP `port` (read from /proc/net/tcp{,6}, without
/// connecting: a probe connection would be taken for the peer).
pub fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .any(|f| listens_in(&std::fs::read_to_string(f).unwrap_or_default(), port))
}

/// True if a `/proc/net/tcp`-style table has a socket listening on `port`.
pub fn listens_in(table: &str, port: u16) -> bool {
    let want = format!(":{port:04X} ");
    table.lines().any(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        cols.len() > 3
            && cols[1].len() >= 5
            && format!("{} ", &cols[1][cols[1].len() - 5..]) == want
            && cols[3] == "0A"
    })
}

/// Starts `prog -d softroce0 <args> [server]` on device `dev` (one explicit address) with
/// our library.
pub fn spawn(dir: &Path, prog: &str, dev: &str, args: &[&str], server: Option<&str>) -> Child {
    spawn_env(dir, prog, dev, &[], args, server)
}

/// [`spawn`] with more environment variables.
pub fn spawn_env(
    dir: &Path,
    prog: &str,
    dev: &str,
    env: &[(&str, &str)],
    args: &[&str],
    server: Option<&str>,
) -> Child {
    let mut c = Command::new(prog);
    c.args(["-d", "softroce0"]).args(args);
    if let Some(s) = server {
        c.arg(s);
    }
    c.env("LD_LIBRARY_PATH", dir)
        .env("SOFTROCE_DEVICES", dev)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Waits for `c` at most `limit`, killing it past that; its output and whether it succeeded.
pub fn finish(mut c: Child, limit: Duration) -> (bool, String) {
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let o = c.wait_with_output().unwrap();
    (o.status.success(), text(&o))
}

/// Runs `prog <args>` as server (device `addr()`) and as client of 127.0.0.1 (another
/// `addr()`), with a fresh TCP port appended as `<port_flag> <port>`; both must succeed
/// within `limit`. Returns (server output, client output).
pub fn run_pair(test: &str, prog: &str, args: &[&str], port_flag: &str, limit: Duration) -> (String, String) {
    let dir = lib_dir(test);
    let port = free_port().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(&[port_flag, &port]);
    let server = spawn(&dir, prog, &addr(), &all, None);
    let t = Instant::now();
    while !listening(port.parse().unwrap()) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = spawn(&dir, prog, &addr(), &all, Some("127.0.0.1"));
    let (cok, cout) = finish(client, limit);
    let (sok, sout) = finish(server, Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(cok && sok, "{prog} {args:?}\n--- server:\n{sout}\n--- client:\n{cout}");
    (sout, cout)
}
