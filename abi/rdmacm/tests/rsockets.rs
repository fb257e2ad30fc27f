//! rsockets (librdmacm's socket API) on softroce, judged by programs nobody here wrote: Debian's
//! unmodified `rstream` and `riostream` (rdmacm-utils) between two processes, each with our
//! `libibverbs.so.1` + `librdmacm.so.1` and a loopback address of its own, in blocking,
//! non-blocking, asynchronous (rpoll) and the default mode, sizes from 1 byte to 1 MiB, data
//! verified (`-T v`); plain socket programs (tests/c/sockxfer.c, a checksummed transfer, and
//! Debian's `iperf3`) through rdma-core's `librspreload.so`; a peer that closes or dies
//! mid-stream, or is no rsocket (garbage private data, tests/c/rsbad.c); and the API's
//! semantics in one process (tests/c/rsapi.c). About 30 s in all on
//! an idle machine (most of it the killed peer's retry timeout).

mod common;

// The ibverbs tests' helpers, for their network namespaces (netns::VethPair).
#[path = "../../ibverbs/tests/common/mod.rs"]
mod ibverbs_common;

use std::process::Child;
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// rdma-core's preload library, as Debian's `librdmacm1` installs it.
const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";

fn have(test: &str, progs: &[&str]) -> bool {
    let mut paths = vec![SYSTEM_LIB];
    paths.extend_from_slice(progs);
    require(test, &paths, "rdmacm-utils librdmacm1 iperf3")
}

/// Runs Debian's `prog` (rstream or riostream) as server and client with the same options;
/// both must exit 0 and print their result line (`custom`, the transfer size in bytes).
fn stream_pair(prog: &str, opts: &[&str], size: &str) -> (String, String) {
    let port = port();
    let mut common = args(opts);
    common.extend(args(&["-S", size, "-p", &port]));
    let tag = format!("{}{}", prog.rsplit('/').next().unwrap(), opts.join("").replace(['-', ' '], ""));
    let (s, c) = pair(
        &tag,
        prog,
        |ip| {
            let mut a = args(&["-b", ip]);
            a.extend(common.iter().cloned());
            a
        },
        |ip| {
            let mut a = args(&["-s", ip]);
            a.extend(common.iter().cloned());
            a
        },
        LIMIT,
    );
    for (side, out) in [("server", &s), ("client", &c)] {
        assert!(
            out.lines().any(|l| l.starts_with("custom")),
            "{prog} {opts:?} -S {size}: no result line from the {side}:\n{out}"
        );
    }
    (s, c)
}

/// Builds tests/c/`name`.c and runs it on a fresh address (its arguments: the address and a
/// port), with why an rconnect failed on its stderr should one (`RUST_LOG`: the CM folds
/// several causes into EINVAL): whether it succeeded, its output; `None` without the headers.
fn one_process(name: &str) -> Option<(bool, String)> {
    let (dir, exe) = build_c(name, RDMA_LIBS)?;
    let ip = addr();
    let env = [("RUST_LOG", "softroce::rsocket=debug")];
    let r =
        finish(spawn_env(&dir, &ip, &env, exe.to_str().unwrap(), &[&ip, &port()]), Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
    Some(r)
}

/// Sizes from one byte to rstream's largest (1 MiB), each `-C 10 -I 2` (ten transfers per
/// iteration, each iteration both ways) with `-T v` (every byte checked).
const SIZES: &[&str] = &["1", "4000", "65536", "1048576"];

#[test]
fn rstream_blocking() {
    if !have("rstream_blocking", &["/usr/bin/rstream"]) {
        return;
    }
    for size in SIZES {
        stream_pair("/usr/bin/rstream", &["-T", "b", "-T", "v", "-C", "10", "-I", "2"], size);
    }
    // A 1 MiB socket buffer (-B) and no inline data (-i 0).
    stream_pair("/usr/bin/rstream", &["-T", "b", "-B", "1048576", "-i", "0", "-C", "10"], "1048576");
}

#[test]
fn rstream_nonblocking() {
    if !have("rstream_nonblocking", &["/usr/bin/rstream"]) {
        return;
    }
    for size in SIZES {
        stream_pair("/usr/bin/rstream", &["-T", "n", "-T", "v", "-C", "10", "-I", "2"], size);
    }
    // Non-blocking through rpoll (-T a), a small socket buffer.
    stream_pair("/usr/bin/rstream", &["-T", "n", "-T", "a", "-B", "65536", "-T", "v", "-C", "10"], "1048576");
}

#[test]
fn rstream_default_mode() {
    if !have("rstream_default_mode", &["/usr/bin/rstream"]) {
        return;
    }
    for size in SIZES {
        stream_pair("/usr/bin/rstream", &["-T", "v", "-C", "10", "-I", "2"], size);
    }
    // Keep-alive on, addresses through rdma_getaddrinfo (-T r).
    stream_pair("/usr/bin/rstream", &["-k", "1", "-T", "r", "-C", "10"], "65536");
}

#[test]
fn riostream_modes() {
    if !have("riostream_modes", &["/usr/bin/riostream"]) {
        return;
    }
    // riostream writes each transfer with riowrite into the peer's riomap'd buffer.
    for opts in [&["-T", "v"][..], &["-T", "b", "-T", "v"], &["-T", "n", "-T", "v"], &["-T", "a", "-T", "v"]]
    {
        for size in ["4000", "1048576"] {
            let mut o = opts.to_vec();
            o.extend(["-C", "10", "-I", "2"]);
            stream_pair("/usr/bin/riostream", &o, size);
        }
    }
}

/// The rsocket calls' semantics in one process (tests/c/rsapi.c: errors, options, rfcntl,
/// rpoll and rselect with a pipe, MSG_PEEK/MSG_WAITALL, rshutdown, rclose with data queued,
/// the peer's close, riomap/riowrite, non-blocking rconnect).
#[test]
fn rsocket_api_semantics() {
    let Some((ok, out)) = one_process("rsapi") else { return };
    assert!(ok, "{out}");
    assert!(out.contains("ok nonblocking-connect"), "{out}");
}

/// A writer killed while the reader has nothing to send (it read all, granted all): only the
/// reader's keep-alive (`SO_KEEPALIVE`, `TCP_KEEPIDLE` 1 s, through librspreload.so) finds out;
/// its recv then fails within the keep-alive time plus the retry limit (about 17-19 s). Without
/// keep-alive such a reader waits (checked by hand: sockxfer's 30 s poll timeout), as TCP's for
/// a peer host that vanished.
#[test]
fn idle_reader_keepalive_finds_killed_peer() {
    if !have("idle_reader_keepalive_finds_killed_peer", &[PRELOAD]) {
        return;
    }
    let (stop, none) = ((1u64 << 20).to_string(), u64::MAX.to_string());
    let (t, sout) = kill_writer(&["poll", &none, "1"], &[&stop, "pause"], Duration::from_millis(1000));
    assert!(sout.contains("server: recv failed after"), "the idle reader ends with an error:\n{sout}");
    eprintln!("the idle reader saw the killed writer after {t:?}: {}", sout.trim());
}

/// Peers that are no rsockets (tests/c/rsbad.c, plain rdma_cm in the same process): requests
/// with garbage private data are refused and the listener serves on; an rconnect answered with
/// garbage fails with ENOTSUP.
#[test]
fn garbage_private_data() {
    let Some((ok, out)) = one_process("rsbad") else { return };
    assert!(ok, "{out}");
    assert!(out.contains("ok garbage-answer-fails"), "{out}");
}

/// A client process: still running, or already done (exited, its output).
enum Client {
    Running(Child),
    Done((bool, String)),
}

impl Client {
    /// Its outcome, waiting at most `limit`.
    fn finish(self, limit: Duration) -> (bool, String) {
        match self {
            Client::Running(c) => finish(c, limit),
            Client::Done(r) => r,
        }
    }

    /// The running process (to kill it); fails the test if it already ended.
    fn running(self) -> Child {
        match self {
            Client::Running(c) => c,
            Client::Done((_, out)) => panic!("the client ended early:\n{out}"),
        }
    }
}

/// Starts `exe server_args` through librspreload.so on a fresh address, waits until its
/// device is up (it opens one only when the preload library turned its socket into an
/// rsocket), then `exe client_args(server ip, client ip)` on another address. A client refused
/// within its first 300 ms (the server's device was up but it had not listened yet: an rsocket
/// listener has no kernel socket to wait for) runs again, at most 10 times — the client alone:
/// the server has accepted nothing. Returns (client, server).
fn preload_pair(
    dir: &std::path::Path,
    exe: &str,
    server_args: impl Fn(&str) -> Vec<String>,
    client_args: impl Fn(&str, &str) -> Vec<String>,
) -> (Client, Child) {
    let (sip, cip) = (addr(), addr());
    let env = [("LD_PRELOAD", PRELOAD)];
    let sa = server_args(&sip);
    let sa: Vec<&str> = sa.iter().map(String::as_str).collect();
    let mut server = spawn_env(dir, &sip, &env, exe, &sa);
    let t0 = Instant::now();
    while !roce_bound(&sip) {
        if t0.elapsed() > Duration::from_secs(10) || server.try_wait().unwrap().is_some() {
            let _ = server.kill();
            panic!("the server's device never started (no rsocket?):\n{}", finish(server, LIMIT).1);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let ca = client_args(&sip, &cip);
    let ca: Vec<&str> = ca.iter().map(String::as_str).collect();
    let client = start_heard(|| spawn_env(dir, &cip, &env, exe, &ca));
    (client, server)
}

/// Starts the client `start` gives; one refused within its first 300 ms starts again, at most
/// 10 times, 200 ms apart.
fn start_heard(start: impl Fn() -> Child) -> Client {
    let mut tries = 0;
    loop {
        tries += 1;
        std::thread::sleep(Duration::from_millis(200));
        let mut client = start();
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(300) && client.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
        if client.try_wait().unwrap().is_none() {
            return Client::Running(client);
        }
        let (ok, out) = finish(client, LIMIT);
        if ok || !out.contains("Connection refused") || tries == 10 {
            return Client::Done((ok, out));
        }
    }
}

/// A plain socket program (tests/c/sockxfer.c: socket, bind, listen, accept, connect, send,
/// recv, poll or select, shutdown; linked with nothing but libc) through
/// `LD_PRELOAD=librspreload.so`: 64 MiB in sends from 1 byte to 128 KiB, the checksums of both
/// sides equal.
#[test]
fn preload_socket_program_checksummed() {
    if !have("preload_socket_program_checksummed", &[PRELOAD]) {
        return;
    }
    let Some((dir, exe)) = build_c("sockxfer", &[]) else { return };
    let exe = exe.to_str().unwrap();
    let bytes = (64u64 << 20).to_string();
    for mode in ["poll", "select"] {
        let port = port();
        let (client, server) = preload_pair(
            &dir,
            exe,
            |s| args(&["server", s, &port, &bytes, mode]),
            |s, c| args(&["client", s, &port, &bytes, c]),
        );
        let (cok, cout) = client.finish(LIMIT);
        let (sok, sout) = finish(server, Duration::from_secs(10));
        assert!(cok && sok, "{mode}:\n--- server:\n{sout}\n--- client:\n{cout}");
        let sum = |out: &str| out.split("checksum ").nth(1).map(|t| t[..16].to_string());
        assert!(
            sum(&sout).is_some() && sum(&sout) == sum(&cout),
            "{mode}: checksums differ:\n{sout}\n{cout}"
        );
        assert!(sout.contains(&format!("received {bytes} bytes")), "{sout}");
        assert!(
            sout.contains("server transport: rsocket") && cout.contains("client transport: rsocket"),
            "{mode}: the preload library left an ordinary socket:\n{sout}\n{cout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Debian's unmodified iperf3 (a control connection and a data connection, select, non-blocking
/// sockets) through librspreload.so: one second of data, the server exits after one test.
#[test]
fn preload_iperf3() {
    if !have("preload_iperf3", &[PRELOAD, "/usr/bin/iperf3"]) {
        return;
    }
    let dir = lib_dir("iperf3");
    let port = port();
    let (client, server) = preload_pair(
        &dir,
        "/usr/bin/iperf3",
        |s| args(&["-s", "-1", "-B", s, "-p", &port]),
        |s, c| args(&["-c", s, "-B", c, "-p", &port, "-t", "1"]),
    );
    let (cok, cout) = client.finish(LIMIT);
    let (sok, sout) = finish(server, Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(cok && sok, "--- server:\n{sout}\n--- client:\n{cout}");
    assert!(cout.contains("receiver") && cout.contains("iperf Done."), "{cout}");
}

/// A peer that closes its socket and exits mid-stream, each way: the reader sees the end of
/// the stream (fewer bytes than announced), the writer's send fails with ECONNRESET; neither
/// waits for its 30 s poll timeout.
#[test]
fn peer_closes_mid_stream() {
    if !have("peer_closes_mid_stream", &[PRELOAD]) {
        return;
    }
    let Some((dir, exe)) = build_c("sockxfer", &[]) else { return };
    let exe = exe.to_str().unwrap();
    let (total, stop, none) = ((1u64 << 30).to_string(), (16u64 << 20).to_string(), u64::MAX.to_string());
    let limit = Duration::from_secs(20);
    // (server's STOP, client's STOP, what the one that stops says, what the other says)
    let cases = [
        (&none, &stop, "client: closing after", "server: end of stream after"),
        (&stop, &none, "server: closing after", "client: send failed after"),
    ];
    for (server_stop, client_stop, stopper, other) in cases {
        let port = port();
        let (client, server) = preload_pair(
            &dir,
            exe,
            |s| args(&["server", s, &port, &total, "poll", server_stop]),
            |s, c| args(&["client", s, &port, &total, c, client_stop]),
        );
        let t0 = Instant::now();
        let (_, cout) = client.finish(limit);
        let (_, sout) = finish(server, limit);
        let both = format!("--- server:\n{sout}\n--- client:\n{cout}");
        assert!(both.contains(stopper) && both.contains(other), "{both}");
        if other.starts_with("client") {
            assert!(cout.contains("Connection reset by peer"), "{both}");
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "took {:?}", t0.elapsed());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kills the writer of a transfer through librspreload.so (sockxfer with the given extra
/// server and client arguments) once it has run for `after`; the reader's output once it
/// ended, and how long that took after the kill.
fn kill_writer(server_extra: &[&str], client_extra: &[&str], after: Duration) -> (Duration, String) {
    let Some((dir, exe)) = build_c("sockxfer", &[]) else { panic!("gcc or the headers are missing") };
    let exe = exe.to_str().unwrap();
    let total = (1u64 << 40).to_string();
    let port = port();
    let (client, server) = preload_pair(
        &dir,
        exe,
        |s| {
            let mut a = args(&["server", s, &port, &total]);
            a.extend(args(server_extra));
            a
        },
        |s, c| {
            let mut a = args(&["client", s, &port, &total, c]);
            a.extend(args(client_extra));
            a
        },
    );
    std::thread::sleep(after);
    let mut client = client.running();
    assert!(client.try_wait().unwrap().is_none(), "the writer ended early");
    client.kill().unwrap();
    let _ = client.wait();
    let t0 = Instant::now();
    let (_, sout) = finish(server, LIMIT);
    let _ = std::fs::remove_dir_all(&dir);
    (t0.elapsed(), sout)
}

/// A writer killed mid-stream while data flows (SIGKILL: no close, no disconnect; its engine
/// is gone), the reader in rselect and rrecv with keep-alive on (`TCP_KEEPIDLE` 1 s): its recv
/// fails once its QP gives up on the dead peer (the transport's retry limit, about 17 s). The
/// keep-alive makes sure the reader transmits: without it, a reader whose last credit update
/// went out before the kill has nothing to send and waits (without keep-alive this test failed
/// once that way, in a full `cargo test` on a loaded machine).
#[test]
fn peer_killed_mid_stream() {
    if !have("peer_killed_mid_stream", &[PRELOAD]) {
        return;
    }
    let none = u64::MAX.to_string();
    let (t, sout) = kill_writer(&["select", &none, "1"], &[], Duration::from_millis(700));
    assert!(
        sout.contains("server: recv failed after") || sout.contains("server: end of stream after"),
        "the reader ends with an error or the end of the stream, not a timeout:\n{sout}"
    );
    eprintln!("the reader saw the killed writer after {t:?}: {}", sout.trim());
}

/// Namespace `i`'s program `prog args` through librspreload.so on its veth interface's device.
fn netns_run(p: &ibverbs_common::netns::VethPair, i: usize, lib: &str, prog: &str, args: &[&str]) -> Child {
    let env = [("SOFTROCE_DEVICES", p.dev[i].as_str()), ("LD_LIBRARY_PATH", lib), ("LD_PRELOAD", PRELOAD)];
    p.spawn(i, &env, prog, args)
}

/// The plain socket program (64 MiB, checksummed) and iperf3 through librspreload.so between two
/// network namespaces joined by a veth pair, each process on its interface's device (root:
/// `cargo test -p softroce-rdmacm --test rsockets -- --ignored`, under
/// `flock /tmp/softroce-netns.lock`; about 5 s).
#[test]
#[ignore = "needs root: network namespaces"]
fn preload_between_namespaces() {
    ibverbs_common::netns::require_root();
    if !have("preload_between_namespaces", &[PRELOAD, "/usr/bin/iperf3"]) {
        return;
    }
    let Some((dir, exe)) = build_c("sockxfer", &[]) else { return };
    let (lib, exe) = (dir.to_str().unwrap(), exe.to_str().unwrap());
    let p = ibverbs_common::netns::VethPair::new(0);
    let sip = p.v4[0].clone();
    let bytes = (64u64 << 20).to_string();
    let port = port();
    let server = netns_run(&p, 0, lib, exe, &["server", &sip, &port, &bytes, "poll"]);
    let (cok, cout) =
        start_heard(|| netns_run(&p, 1, lib, exe, &["client", &sip, &port, &bytes])).finish(LIMIT);
    let (sok, sout) = finish(server, Duration::from_secs(10));
    assert!(cok && sok, "--- server:\n{sout}\n--- client:\n{cout}");
    assert!(
        sout.contains("server transport: rsocket") && cout.contains("client transport: rsocket"),
        "{sout}{cout}"
    );
    let sum = |out: &str| out.split("checksum ").nth(1).map(|t| t[..16].to_string());
    assert!(sum(&sout).is_some() && sum(&sout) == sum(&cout), "checksums differ:\n{sout}\n{cout}");

    let port = common::port();
    let server = netns_run(&p, 0, lib, "/usr/bin/iperf3", &["-s", "-1", "-B", &sip, "-p", &port]);
    let (cok, cout) =
        start_heard(|| netns_run(&p, 1, lib, "/usr/bin/iperf3", &["-c", &sip, "-p", &port, "-t", "1"]))
            .finish(LIMIT);
    let (sok, sout) = finish(server, Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(cok && sok, "--- server:\n{sout}\n--- client:\n{cout}");
    assert!(cout.contains("receiver") && cout.contains("iperf Done."), "{cout}");
    eprintln!(
        "{}",
        cout.lines()
            .filter(|l| l.contains("sender") || l.contains("receiver"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// True once a UDP socket is bound to `ip`:`port`.
fn udp_bound(ip: &str, port: &str) -> bool {
    let o: Vec<u8> = ip.split('.').map(|x| x.parse().unwrap()).collect();
    let p: u16 = port.parse().unwrap();
    let want = format!("{:02X}{:02X}{:02X}{:02X}:{p:04X}", o[3], o[2], o[1], o[0]);
    std::fs::read_to_string("/proc/net/udp").unwrap_or_default().lines().any(|l| l.contains(&want))
}

/// Debian's `udpong` (datagram rsockets) as server and client, each with our libraries and a
/// loopback address of its own: the client's run must end with its result line (`custom`:
/// every echo came back with the right sequence number, or the server counted what arrived).
/// The server never exits by itself: it is killed afterwards.
fn udpong_pair(opts: &[&str]) {
    let dir = lib_dir("udpong");
    let (sip, cip, port) = (addr(), addr(), port());
    let mut server = args(&["-b", &sip, "-p", &port]);
    server.extend(args(opts));
    let sa: Vec<&str> = server.iter().map(String::as_str).collect();
    let mut srv = spawn(&dir, &sip, "/usr/bin/udpong", &sa);
    let t = Instant::now();
    while !udp_bound(&sip, &port) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut client = args(&["-s", &sip, "-p", &port]);
    client.extend(args(opts));
    let ca: Vec<&str> = client.iter().map(String::as_str).collect();
    let (ok, cout) = finish(spawn(&dir, &cip, "/usr/bin/udpong", &ca), LIMIT);
    let _ = srv.kill();
    let (_, sout) = finish(srv, Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        ok && cout.lines().any(|l| l.starts_with("custom")),
        "udpong {opts:?}\n--- client:\n{cout}\n--- server:\n{sout}"
    );
}

/// Datagram rsockets between two processes: Debian's udpong, echo and one-way, in the default
/// (non-blocking, spinning), blocking and rpoll modes, 64 to 1500 bytes.
#[test]
fn udpong_modes() {
    if !have("udpong_modes", &["/usr/bin/udpong"]) {
        return;
    }
    udpong_pair(&["-T", "e", "-S", "64", "-C", "300"]);
    udpong_pair(&["-T", "e", "-T", "b", "-S", "1500", "-C", "300"]);
    udpong_pair(&["-T", "e", "-T", "a", "-S", "1000", "-C", "300"]);
    udpong_pair(&["-S", "1000", "-C", "2000"]);
}

/// Datagram rsockets' semantics in one process (tests/c/rsdgram.c: bytes and sources both
/// ways, the first datagram through the UDP socket and the rest over the QPs, MSG_PEEK,
/// EAGAIN, EMSGSIZE, EINVAL, EDESTADDRREQ, garbage on the UDP port ignored).
#[test]
fn datagram_semantics() {
    let Some((ok, out)) = one_process("rsdgram") else { return };
    assert!(ok, "{out}");
    assert!(out.contains("ok close"), "{out}");
}

/// A plain UDP program through rdma-core's `librspreload.so` (tests/py/udpecho.py: 100
/// datagrams of 1 to 1400 bytes, each answered with its SHA-1 and checked): its sockets are
/// datagram rsockets (both sides read `RDMA_SQSIZE`, which only an rsocket answers).
#[test]
fn preload_udp_program() {
    if !have("preload_udp_program", &[PRELOAD, "/usr/bin/python3"]) {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/udpecho.py");
    let dir = lib_dir("udpecho");
    let (sip, cip, port) = (addr(), addr(), port());
    let env = [("LD_PRELOAD", PRELOAD)];
    let srv = spawn_env(&dir, &sip, &env, "python3", &[script, "server", &sip, &port]);
    let t = Instant::now();
    while !udp_bound(&sip, &port) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (cok, cout) = finish(spawn_env(&dir, &cip, &env, "python3", &[script, "client", &sip, &port]), LIMIT);
    let (sok, sout) = finish(srv, Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(cok && sok, "--- client:\n{cout}\n--- server:\n{sout}");
    for out in [&cout, &sout] {
        assert!(out.contains("sqsize 384"), "not an rsocket:\n{out}");
    }
}

/// A stream peer that stops granting credits (tests/c/rscredit.c: it never reads): the
/// non-blocking writer gets EAGAIN after a bounded amount and rpoll(POLLOUT) times out; a
/// blocking writer sleeps (as rdma-core's, like a TCP writer facing a zero window) without
/// spinning (under 10% of a core while blocked); once the peer closes without reading, the
/// blocked rsend returns within 10 s (what it wrote, or ECONNRESET).
#[test]
fn peer_stops_granting_credits() {
    let Some((ok, out)) = one_process("rscredit") else { return };
    assert!(ok, "{out}");
    assert!(out.contains("ok peer-gone"), "{out}");
}
