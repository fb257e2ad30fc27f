//! What the librdmacm tests share: both built libraries in a directory of their own (as
//! `libibverbs.so.1` and `librdmacm.so.1`), the Debian prerequisites check, loopback
//! addresses, and running a server/client pair of Debian's programs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The Debian 12 library this one replaces.
pub const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

/// True if every path exists; otherwise prints that the test is skipped and why. Under `CI` a
/// missing prerequisite fails instead.
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

/// The profile directory holding both cdylibs, built for this test run (`cargo test` does
/// not build cdylib-only packages for integration tests: the first call runs `cargo build` of
/// both in the test executable's profile).
pub fn profile_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
            let profile = match dir.file_name().and_then(|n| n.to_str()).unwrap() {
                "debug" => "dev".to_string(),
                other => other.to_string(),
            };
            let out = Command::new(env!("CARGO"))
                .args(["build", "-p", "softroce-ibverbs", "-p", "softroce-rdmacm", "--profile", &profile])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .expect("cargo");
            assert!(out.status.success(), "cargo build failed:\n{}", text(&out));
            for l in ["libibverbs.so", "librdmacm.so"] {
                assert!(dir.join(l).exists(), "{l} not built in {}", dir.display());
            }
            dir
        })
        .clone()
}

/// Our librdmacm.so.
pub fn built_rdmacm() -> PathBuf {
    profile_dir().join("librdmacm.so")
}

/// Our libibverbs.so.
pub fn built_ibverbs() -> PathBuf {
    profile_dir().join("libibverbs.so")
}

/// A fresh directory with `libibverbs.so.1` and `librdmacm.so.1` -> the built libraries.
pub fn lib_dir(tag: &str) -> PathBuf {
    // A number per call: tests running in parallel may use one tag.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("softroce-rdmacm-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(built_ibverbs(), dir.join("libibverbs.so.1")).unwrap();
    std::os::unix::fs::symlink(built_rdmacm(), dir.join("librdmacm.so.1")).unwrap();
    dir
}

/// stdout + stderr of an output.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A fresh loopback address for this process and call (127.250-254.x.y, apart from the
/// ranges the other test files use).
pub fn addr() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let k = std::process::id().wrapping_mul(64).wrapping_add(n);
    format!("127.{}.{}.{}", 250 + (k / (254 * 256)) % 5, (k / 254) % 256, k % 254 + 1)
}

/// A port number unlikely to be in use by another test (the rdma_cm port space is per
/// process on softroce, so only the peers must agree).
pub fn port() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    // (Below the kernel's ephemeral ports, 32768 and up: some of these are TCP ports —
    // perftest's and the tools' side channels — that listen on every address.)
    (20000 + (std::process::id() * 7 + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) % 12000)
        .to_string()
}

/// True once a UDP socket is bound to `ip`:4791 (the device's engine is up).
pub fn roce_bound(ip: &str) -> bool {
    let o: Vec<u8> = ip.split('.').map(|x| x.parse().unwrap()).collect();
    let want = format!("{:02X}{:02X}{:02X}{:02X}:12B7", o[3], o[2], o[1], o[0]);
    std::fs::read_to_string("/proc/net/udp").unwrap_or_default().lines().any(|l| l.contains(&want))
}

/// Starts `prog <args>` with our libraries and device `dev`.
pub fn spawn(dir: &Path, dev: &str, prog: &str, args: &[&str]) -> Child {
    spawn_env(dir, dev, &[], prog, args)
}

/// [`spawn`] with more environment variables.
pub fn spawn_env(dir: &Path, dev: &str, env: &[(&str, &str)], prog: &str, args: &[&str]) -> Child {
    // Unbuffered stdout (stdbuf), so that a run killed at the time limit still shows how far
    // it came.
    Command::new("stdbuf")
        .args(["-o0", "-e0", prog])
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .env("SOFTROCE_DEVICES", dev)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Waits for `c` at most `limit`, killing it past that; whether it succeeded, its output
/// (read while it runs, so that a chatty program never blocks on a full pipe).
pub fn finish(c: Child, limit: Duration) -> (bool, String) {
    finish_or(c, limit, String::new)
}

/// [`finish`], adding what `diagnose` reports when the program hangs (before it is killed).
pub fn finish_or(c: Child, limit: Duration, diagnose: impl FnOnce() -> String) -> (bool, String) {
    let pid = c.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(c.wait_with_output());
    });
    let o = match rx.recv_timeout(limit) {
        Ok(o) => o,
        Err(_) => {
            // Where it hangs, for the failure message (when gdb is there).
            let stacks = Command::new("gdb")
                .args(["-p", &pid, "-batch", "-ex", "thread apply all bt"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let more = diagnose();
            let _ = Command::new("kill").args(["-9", &pid]).status();
            let o = rx.recv().expect("the waiting thread answers").expect("wait");
            return (
                false,
                format!("{}\n--- killed after {limit:?}; its threads:\n{stacks}\n{more}", text(&o)),
            );
        }
    }
    .expect("wait");
    let mut t = text(&o);
    if t.len() > 20_000 {
        t = format!("{} [...] {}", &t[..10_000], &t[t.len() - 10_000..]);
    }
    (o.status.success(), t)
}

/// Runs a server (`server(ip)` gives its arguments) on one fresh address and a client
/// (`client(server ip)`) on another, both Debian's program `prog` with our libraries; both
/// must succeed within `limit`. The client starts once the server's device is up. Returns
/// (server output, client output).
///
/// A client refused because nobody listened yet ([`refused_unheard`]: the server had not
/// reached `rdma_listen`, which a loaded machine can delay past the device start) reruns the
/// *whole pair* on fresh addresses, at most 4 times. Never the client alone: the server may
/// be past its first connection by then (perftest connects twice — its parameter exchange, then
/// the test's QP — and listens again in between), and a second client would be wired to the
/// server's second listener while the server waits on its first connection: the new client's
/// first SEND then meets a QP with no receive posted and is answered with RNR NAKs forever.
pub fn pair(
    tag: &str,
    prog: &str,
    server: impl Fn(&str) -> Vec<String>,
    client: impl Fn(&str) -> Vec<String>,
    limit: Duration,
) -> (String, String) {
    pair_on(tag, prog, server, client, limit, false)
}

/// [`pair`] with the server and the client on ONE address (two processes sharing it, as on a
/// kernel device: docs/design/shared-device.md).
pub fn pair_on_one_address(
    tag: &str,
    prog: &str,
    server: impl Fn(&str) -> Vec<String>,
    client: impl Fn(&str) -> Vec<String>,
    limit: Duration,
) -> (String, String) {
    pair_on(tag, prog, server, client, limit, true)
}

fn pair_on(
    tag: &str,
    prog: &str,
    server: impl Fn(&str) -> Vec<String>,
    client: impl Fn(&str) -> Vec<String>,
    limit: Duration,
    one_address: bool,
) -> (String, String) {
    let mut reruns = Vec::new();
    loop {
        let (ok, sout, cout, sargs, cargs) = pair_once(tag, prog, &server, &client, limit, one_address);
        if ok {
            if !reruns.is_empty() {
                eprintln!("{prog}: the pair ran again after {} refused client(s): {reruns:?}", reruns.len());
            }
            return (sout, cout);
        }
        if refused_unheard(&cout) && reruns.len() < 4 {
            reruns.push(
                cout.lines()
                    .find(|l| l.contains("REJECTED") || l.contains("bl blka"))
                    .unwrap_or("")
                    .to_string(),
            );
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        panic!(
            "{prog}\n--- server {sargs:?}:\n{sout}\n--- client {cargs:?}:\n{cout}\n--- reruns after a refusal: {reruns:?}"
        );
    }
}

/// True if a client's output says its connection request found no listener (REJ reason 8,
/// invalid service ID, as the IB CM answers a REQ for a port nobody listens on): rping's and
/// ucmatose's `RDMA_CM_EVENT_REJECTED, error 8`, perftest's `RDMA_CM_EVENT_REJECTED; error: 8`
/// (its test connection; Debian's perftest 4.5-0.17 cannot retry it: its retry loop reuses the
/// ids it has just destroyed, fixed upstream later), `Unexpected CM event bl blka 8` (its
/// parameter-exchange connection, where 8 is the event, REJECTED) and rstream's and
/// riostream's `rconnect: Connection refused`.
pub fn refused_unheard(client_out: &str) -> bool {
    client_out.contains("RDMA_CM_EVENT_REJECTED, error 8")
        || client_out.contains("rconnect: Connection refused")
        || client_out.contains("RDMA_CM_EVENT_REJECTED, error: 8")
        || client_out.contains("RDMA_CM_EVENT_REJECTED; error: 8.")
        || client_out.contains("Unexpected CM event bl blka 8")
}

/// One run of [`pair`]: (both succeeded, server output, client output, server args, client
/// args).
fn pair_once(
    tag: &str,
    prog: &str,
    server: &impl Fn(&str) -> Vec<String>,
    client: &impl Fn(&str) -> Vec<String>,
    limit: Duration,
    one_address: bool,
) -> (bool, String, String, Vec<String>, Vec<String>) {
    let dir = lib_dir(tag);
    let sip = addr();
    let cip = if one_address { sip.clone() } else { addr() };
    let sargs = server(&sip);
    let cargs = client(&sip);
    let sa: Vec<&str> = sargs.iter().map(String::as_str).collect();
    let ca: Vec<&str> = cargs.iter().map(String::as_str).collect();
    // (rsockets say why an rconnect failed, should one: the CM folds several causes into one
    // errno.)
    let env = [("RUST_LOG", "softroce::rsocket=debug")];
    let mut srv = spawn_env(&dir, &sip, &env, prog, &sa);
    let t = Instant::now();
    while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) && srv.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    let (cok, cout) = finish_or(spawn_env(&dir, &cip, &env, prog, &ca), limit, || wire(&sip, &cip));
    let (sok, sout) = if cok {
        finish(srv, Duration::from_secs(10))
    } else {
        // The server of a failed client may wait for it forever: no need to wait the limit.
        finish(srv, Duration::from_secs(2))
    };
    let _ = std::fs::remove_dir_all(&dir);
    (cok && sok, sout, cout, sargs, cargs)
}

/// For a hung pair: the two devices' UDP sockets (queues, drops) and two seconds of the RoCE
/// traffic between them as tshark decodes it (when tshark can capture).
pub fn wire(a: &str, b: &str) -> String {
    let hex = |ip: &str| {
        let o: Vec<u8> = ip.split('.').map(|x| x.parse().unwrap()).collect();
        format!("{:02X}{:02X}{:02X}{:02X}:12B7", o[3], o[2], o[1], o[0])
    };
    let (ha, hb) = (hex(a), hex(b));
    let udp: Vec<String> = std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&ha) || l.contains(&hb))
        .map(str::to_string)
        .collect();
    let cap = Command::new("timeout")
        .args(["3", "tshark", "-i", "lo", "-a", "duration:2", "-c", "40", "-d", "udp.port==4791,infiniband"])
        .args(["-T", "fields", "-e", "frame.time_relative", "-e", "ip.src", "-e", "infiniband.bth.opcode"])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn", "-e", "infiniband.aeth.syndrome"])
        .args(["-e", "infiniband.aeth.msn", "-f"])
        .arg(format!("udp port 4791 and host {a} and host {b}"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    format!("--- /proc/net/udp of {a} and {b}:\n{}\n--- 2 s of their traffic:\n{cap}", udp.join("\n"))
}

/// The libraries a C test program that calls librdmacm links with.
pub const RDMA_LIBS: &[&str] = &["-lrdmacm", "-libverbs", "-lpthread"];

/// Builds `tests/c/<name>.c` against the installed headers (linked with `libs`) into a
/// directory holding our libraries: (the directory, the executable); `None` when the headers
/// are missing.
pub fn build_c(name: &str, libs: &[&str]) -> Option<(PathBuf, PathBuf)> {
    if !require(name, &[SYSTEM_LIB, "/usr/include/rdma/rdma_cma.h"], "librdmacm-dev") {
        return None;
    }
    let dir = lib_dir(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = dir.join(name);
    let out = Command::new("gcc")
        .args(["-Wall", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(libs)
        .output()
        .expect("gcc");
    assert!(out.status.success(), "gcc: {}", text(&out));
    Some((dir, exe))
}

/// `v` as owned strings.
pub fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The `softroce` tool, built for this test run in the same profile.
pub fn softroce_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_in_profile(&["--bin", "softroce"], "softroce")).clone()
}

/// Builds a target of the `softroce` package (`what`: cargo's target selection, e.g.
/// `["--example", "kvstore"]`) in the test run's profile; returns `rel` in that profile's
/// directory.
pub fn build_in_profile(what: &[&str], rel: &str) -> PathBuf {
    let dir = profile_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()).unwrap() {
        "debug" => "dev".to_string(),
        other => other.to_string(),
    };
    let out = Command::new(env!("CARGO"))
        .args(["build", "-p", "softroce", "--profile", &profile])
        .args(what)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo");
    assert!(out.status.success(), "cargo build {what:?} failed:\n{}", text(&out));
    dir.join(rel)
}
