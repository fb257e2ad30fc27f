//! The RDMA course lab's key-value store on loopback (issues 11 and 13): the Rust example
//! (`examples/kvstore.rs`) and the C peer of the same protocol (`tests/interop/kvpeer.c`,
//! built against the installed `<rdma/rdma_cma.h>` and run through our librdmacm.so.1 +
//! libibverbs.so.1, synchronous `rdma_create_ep` API) in every pairing: Rust ↔ Rust, C client
//! → Rust server, Rust client → C server, C ↔ C. Each server serves two clients one after
//! another; the first sets values and gets them back by RPC and by RDMA READ (an invalid key
//! gives −1 both ways), the second finds the first one's values and runs a short benchmark.
//! Also: the Rust server survives a client that vanishes (SIGKILL) and one that sends a
//! message of an unknown type.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// The kvstore example, built in the test run's profile.
fn kvstore_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_in_profile(&["--example", "kvstore"], "examples/kvstore")).clone()
}

/// kvpeer, compiled against the system headers into `dir`.
fn kvpeer_bin(dir: &std::path::Path) -> PathBuf {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/kvpeer.c");
    let exe = dir.join("kvpeer");
    let out = Command::new("gcc")
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("gcc");
    assert!(out.status.success(), "gcc: {}", text(&out));
    exe
}

#[derive(Clone, Copy, PartialEq)]
enum Lang {
    Rust,
    C,
}

/// Server command line.
fn server_args(lang: Lang, kvpeer: &str, ip: &str, port: &str, clients: u32) -> (String, Vec<String>) {
    let n = clients.to_string();
    match lang {
        Lang::Rust => {
            (kvstore_bin().to_string_lossy().into_owned(), args(&["server", "-a", ip, "-p", port, "-n", &n]))
        }
        Lang::C => (kvpeer.to_string(), args(&["-s", "-a", ip, "-p", port, "-n", &n])),
    }
}

/// Client command line (`ops`: operations and, first, `--bench N` if wanted).
fn client_args(
    lang: Lang,
    kvpeer: &str,
    ip: &str,
    server: &str,
    port: &str,
    bench: Option<u32>,
    ops: &[&str],
) -> (String, Vec<String>) {
    match lang {
        Lang::Rust => {
            let mut a = args(&["client", "-a", ip, "-p", port]);
            if let Some(n) = bench {
                a.extend(args(&["--bench", &n.to_string()]));
            }
            a.push(server.to_string());
            a.extend(args(ops));
            (kvstore_bin().to_string_lossy().into_owned(), a)
        }
        Lang::C => {
            let mut a = args(&["-p", port]);
            if let Some(n) = bench {
                a.extend(args(&["-B", &n.to_string()]));
            }
            a.push(server.to_string());
            a.extend(args(ops));
            (kvpeer.to_string(), a)
        }
    }
}

fn run(dir: &std::path::Path, dev: &str, (prog, a): &(String, Vec<String>)) -> std::process::Child {
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    spawn(dir, dev, prog, &a)
}

/// Waits until the server's device is up, and a little more for its listener.
fn wait_up(ip: &str, srv: &mut std::process::Child) {
    let t = Instant::now();
    while !roce_bound(ip) && t.elapsed() < Duration::from_secs(10) && srv.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
}

fn have_c(test: &str) -> bool {
    require(
        test,
        &[SYSTEM_LIB, "/usr/include/rdma/rdma_cma.h", "/usr/include/rdma/rdma_verbs.h"],
        "librdmacm-dev",
    )
}

/// One server, two clients in sequence; every value and exit status checked.
fn pairing(tag: &str, server: Lang, client: Lang) {
    let dir = lib_dir(tag);
    let kvpeer = if server == Lang::C || client == Lang::C {
        kvpeer_bin(&dir).to_string_lossy().into_owned()
    } else {
        String::new()
    };
    let (sip, c1, c2, port) = (addr(), addr(), addr(), port());
    let mut srv = run(&dir, &sip, &server_args(server, &kvpeer, &sip, &port, 2));
    wait_up(&sip, &mut srv);
    let ops = [
        "set", "7", "42", "set", "32767", "-5", "get", "7", "get", "32767", "get", "0", "get", "40000",
        "get", "-1", "set", "32768", "1",
    ];
    let (ok1, out1) =
        finish(run(&dir, &c1, &client_args(client, &kvpeer, &c1, &sip, &port, None, &ops)), LIMIT);
    let (ok2, out2) = if ok1 {
        finish(
            run(&dir, &c2, &client_args(client, &kvpeer, &c2, &sip, &port, Some(300), &["get", "7"])),
            LIMIT,
        )
    } else {
        (false, String::new())
    };
    let (sok, sout) = finish(srv, Duration::from_secs(if ok1 && ok2 { 15 } else { 2 }));
    let _ = std::fs::remove_dir_all(&dir);
    let all = format!("--- server:\n{sout}\n--- client 1:\n{out1}\n--- client 2:\n{out2}");
    assert!(ok1 && ok2 && sok, "exit status\n{all}");
    for want in [
        "table of 32768 keys",
        "set 7 42: ok",
        "get 7: rpc 42 read 42",
        "get 32767: rpc -5 read -5",
        "get 0: rpc 0 read 0",
        "get 40000: rpc -1 read -1",
        "get -1: rpc -1 read -1",
        "set 32768 1: ok",
        "disconnected",
    ] {
        assert!(out1.contains(want), "client 1 lacks {want:?}\n{all}");
    }
    // The second client sees the first one's values, then the benchmark (which checks every
    // value itself).
    assert!(out2.contains("get 7: rpc 42 read 42"), "{all}");
    for b in ["bench set       300 ops", "bench rpc-get   300 ops", "bench read-get  300 ops"] {
        assert!(out2.contains(b), "client 2 lacks {b:?}\n{all}");
    }
    assert!(sout.contains("Invalid key: 40000") && sout.contains("Invalid key: 32768"), "{all}");
    assert!(sout.contains("2 clients served"), "{all}");
}

#[test]
fn rust_server_rust_client() {
    pairing("kv-rr", Lang::Rust, Lang::Rust);
}

#[test]
fn c_client_rust_server() {
    if have_c("c_client_rust_server") {
        pairing("kv-cr", Lang::Rust, Lang::C);
    }
}

#[test]
fn rust_client_c_server() {
    if have_c("rust_client_c_server") {
        pairing("kv-rc", Lang::C, Lang::Rust);
    }
}

#[test]
fn c_client_c_server() {
    if have_c("c_client_c_server") {
        pairing("kv-cc", Lang::C, Lang::C);
    }
}

/// A client killed mid-benchmark, then one that sends a message of unknown type: the Rust
/// server drops both and serves the next client.
#[test]
fn rust_server_survives_vanished_and_hostile_clients() {
    if !have_c("rust_server_survives_vanished_and_hostile_clients") {
        return;
    }
    let dir = lib_dir("kv-bad");
    let kvpeer = kvpeer_bin(&dir).to_string_lossy().into_owned();
    let (sip, c1, c2, c3, port) = (addr(), addr(), addr(), addr(), port());
    let mut srv = run(
        &dir,
        &sip,
        &(
            kvstore_bin().to_string_lossy().into_owned(),
            args(&["server", "-a", &sip, "-p", &port, "-n", "3", "--idle-ms", "500"]),
        ),
    );
    wait_up(&sip, &mut srv);
    // 1. Vanishes: killed while it runs a long benchmark.
    let mut gone =
        run(&dir, &c1, &client_args(Lang::Rust, &kvpeer, &c1, &sip, &port, Some(100_000_000), &[]));
    std::thread::sleep(Duration::from_millis(1500));
    let _ = gone.kill();
    let _ = gone.wait();
    // 2. Hostile: a message of type 77 (kvpeer's `hostile` operation), after a good SET.
    let (ok2, out2) = finish(
        run(
            &dir,
            &c2,
            &client_args(Lang::C, &kvpeer, &c2, &sip, &port, None, &["set", "1", "11", "hostile"]),
        ),
        LIMIT,
    );
    // 3. A normal client is served.
    let (ok3, out3) = finish(
        run(&dir, &c3, &client_args(Lang::Rust, &kvpeer, &c3, &sip, &port, None, &["get", "1"])),
        LIMIT,
    );
    let (sok, sout) = finish(srv, Duration::from_secs(if ok3 { 15 } else { 2 }));
    let _ = std::fs::remove_dir_all(&dir);
    let all = format!("--- server:\n{sout}\n--- client 2:\n{out2}\n--- client 3:\n{out3}");
    assert!(ok2 && out2.contains("hostile: the server dropped the connection"), "{all}");
    assert!(ok3 && out3.contains("get 1: rpc 11 read 11"), "{all}");
    assert!(sok && sout.contains("dropped: message type 77") && sout.contains("3 clients served"), "{all}");
}
