//! Several processes on one address (`DeviceConfig::share`): what a host with a kernel RDMA
//! device lets its processes do. The processes are this test binary run again with
//! `SHARED_CHILD` naming a role (the `child` test below), driven over stdin/stdout: lines the
//! child prints that start with `@@ ` are for the parent.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use softroce::verbs::cm::{CmId, PortSpace};
use softroce::verbs::*;

// ---- the parent's side ----------------------------------------------------------------

/// A child process and its `@@` lines.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    name: String,
}

impl Proc {
    /// Runs role `role` with `env`, inside network namespace `netns` if given.
    fn spawn(name: &str, role: &str, env: &[(&str, String)], netns: Option<&str>) -> Proc {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env("SHARED_CHILD", role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(std::result::Result::ok) {
                // (The harness prints "test child ... " before the child's first line.)
                if let Some(at) = line.find("@@ ")
                    && tx.send(line[at + 3..].to_string()).is_err()
                {
                    return;
                }
            }
        });
        Proc { stdin: child.stdin.take(), child, lines: rx, name: name.into() }
    }

    /// The next `@@` line (panics after `within`).
    fn line(&self, within: Duration) -> String {
        self.lines
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("{}: no line within {within:?} ({e})", self.name))
    }

    /// The next line starting with `word`, skipping others.
    fn expect(&self, word: &str, within: Duration) -> String {
        let until = Instant::now() + within;
        loop {
            let l = self.line(until.saturating_duration_since(Instant::now()));
            if l.starts_with(word) {
                return l;
            }
        }
    }

    fn send(&mut self, line: &str) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{line}").unwrap();
        s.flush().unwrap();
    }

    fn kill9(&mut self) {
        // SAFETY: kill(2) with a pid of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }

    fn wait_ok(&mut self, within: Duration) {
        self.stdin = None;
        let until = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "{}: {st}", self.name);
                return;
            }
            assert!(Instant::now() < until, "{} did not exit", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn addr(n: u32) -> String {
    // 127.24.<pid-derived>.<n>: this test binary's own, so parallel runs differ.
    format!("127.24.{}.{n}", std::process::id() % 250 + 1)
}

/// The abstract unix names of softroce's sharing still bound (in this network namespace).
fn share_names() -> Vec<String> {
    std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| n.starts_with("@softroce/v1/"))
        .map(str::to_string)
        .collect()
}

// ---- the roles --------------------------------------------------------------------------

/// The child processes' entry point (does nothing in an ordinary test run).
#[test]
fn child() {
    let Ok(role) = std::env::var("SHARED_CHILD") else { return };
    let env = |k: &str| std::env::var(k).unwrap();
    match role.as_str() {
        "mesh" => mesh_member(&env("SHARED_IP"), env("SHARED_ID").parse().unwrap()),
        "hold_port" => hold_port(&env("SHARED_IP"), env("SHARED_PORT").parse().unwrap()),
        "listen" => listen(&env("SHARED_IP"), env("SHARED_PORT").parse().unwrap()),
        r => panic!("unknown role {r}"),
    }
    std::process::exit(0);
}

fn say(s: &str) {
    println!("@@ {s}");
    let _ = std::io::stdout().flush();
}

fn read_line() -> String {
    let mut l = String::new();
    std::io::stdin().read_line(&mut l).unwrap();
    l.trim().to_string()
}

/// Binds an rdma_cm id to `ip:port`, says so, and holds it until stdin closes.
fn hold_port(ip: &str, port: u16) {
    let mut id = CmId::new(None, PortSpace::Tcp).unwrap();
    id.bind_addr(format!("{ip}:{port}").parse().unwrap()).unwrap();
    say("BOUND");
    let _ = read_line();
}

/// Listens on `ip:port` (rdma_cm, RC, synchronous), accepts one connection, receives one
/// message on it and says what it was; then holds the connection until stdin closes.
fn listen(ip: &str, port: u16) {
    let mut l = CmId::new(None, PortSpace::Tcp).unwrap();
    l.bind_addr(format!("{ip}:{port}").parse().unwrap()).unwrap();
    l.listen(8).unwrap();
    say("LISTENING");
    let mut id = l.get_request().unwrap();
    let dev = id.device().unwrap().clone();
    let (pd, cq) = (dev.alloc_pd().unwrap(), dev.create_cq(16).unwrap());
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    id.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq)).unwrap();
    id.qp().unwrap().post_recv(RecvWr::new(1, &[mr.sge(0, 64)])).unwrap();
    id.accept(None).unwrap();
    let wc = cq.poll_one_wait(Duration::from_secs(20)).unwrap().expect("a message");
    let mut b = vec![0u8; wc.byte_len as usize];
    mr.read(0, &mut b).unwrap();
    say(&format!("GOT {}", String::from_utf8_lossy(&b)));
    let _ = read_line();
}

/// Connects (synchronously) to `ip:port`; sends `text` once established.
fn connect_and_send(ip: &str, port: u16, text: &str) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let mut id = CmId::new(None, PortSpace::Tcp)?;
    id.resolve_addr(None, format!("{ip}:{port}").parse().unwrap(), Duration::from_secs(2))?;
    id.resolve_route(Duration::from_secs(2))?;
    let dev = id.device().unwrap().clone();
    let (pd, cq) = (dev.alloc_pd()?, dev.create_cq(16)?);
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    id.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq))?;
    id.connect(None)?;
    mr.write(0, text.as_bytes())?;
    id.qp().unwrap().post_send(SendWr::new(1, SendOp::Send, &[mr.sge(0, text.len() as u32)]))?;
    let wc = cq.poll_one_wait(Duration::from_secs(20))?.expect("a send completion");
    assert_eq!(wc.status, WcStatus::Success);
    Ok(())
}

const BLOCK: usize = 32 << 10;

/// The bytes member `from` writes to member `to` in round `r`.
fn pattern(from: usize, to: usize, r: usize) -> Vec<u8> {
    (0..BLOCK).map(|i| (i as u64 * 31 + from as u64 * 7 + to as u64 * 13 + r as u64 * 101) as u8).collect()
}

/// One member of an all-to-all mesh: an RC QP to every other member; each round it WRITEs a
/// block into each peer's memory, SENDs it a numbered message and READs the block back,
/// every byte checked; it receives every peer's messages in order. A peer whose work
/// completes in error is dead to it (reported); the others must finish.
fn mesh_member(ip: &str, me: usize) {
    let n: usize = std::env::var("SHARED_N").unwrap().parse().unwrap();
    let rounds: usize = std::env::var("SHARED_ROUNDS").unwrap().parse().unwrap();
    let dev = Device::open(DeviceConfig::new(ip).with_share(true)).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8192).unwrap();
    let rcq = dev.create_cq(8192).unwrap();
    // Inbox (one block per peer), then scratch for READs and the message buffers.
    let mr = pd.alloc_mr(n * BLOCK * 2 + n * 64 * rounds + n * 16, Access::ALL).unwrap();
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: rounds as u32 + 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qps: Vec<Option<QueuePair>> = Vec::new();
    for j in 0..n {
        if j == me {
            qps.push(None);
            continue;
        }
        let mut init = QpInitAttr::rc(&cq, &rcq);
        init.cap = caps;
        let qp = pd.create_qp(&init).unwrap();
        qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
        for r in 0..rounds {
            let at = 2 * n * BLOCK + (j * rounds + r) * 64;
            qp.post_recv(RecvWr::new((j * rounds + r) as u64, &[mr.sge(at, 64)])).unwrap();
        }
        qps.push(Some(qp));
    }
    let gid = dev.gid(dev.default_gid_index()).unwrap();
    let qpns: Vec<String> =
        qps.iter().map(|q| q.as_ref().map_or(0, |q| q.qp_num().value()).to_string()).collect();
    let psn = 0x1000 + me as u32;
    say(&format!(
        "EP {me} {} {} {} {} {}",
        gid.to_ip(),
        psn,
        mr.rkey().value(),
        mr.remote(0).addr,
        qpns.join(",")
    ));
    // Every member's endpoint, then GO.
    let mut eps = vec![None; n];
    loop {
        let l = read_line();
        if l == "GO" {
            break;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let j: usize = f[1].parse().unwrap();
        let their_qpns: Vec<u32> = f[6].split(',').map(|q| q.parse().unwrap()).collect();
        eps[j] = Some((
            f[2].parse::<std::net::IpAddr>().unwrap(),
            f[3].parse::<u32>().unwrap(),
            f[4].parse::<u32>().unwrap(),
            f[5].parse::<u64>().unwrap(),
            their_qpns[me],
        ));
    }
    for (j, qp) in qps.iter().enumerate() {
        let (Some(qp), Some((ip, their_psn, _, _, qpn))) = (qp, eps[j]) else { continue };
        let av = AddressVector::new(Gid::from_ip(ip), dev.default_gid_index());
        let mut rtr = QpAttrs::rtr(av, Mtu::Mtu1024, Qpn::new(qpn), Psn::new(their_psn));
        rtr.max_dest_rd_atomic = Some(4);
        qp.modify(&rtr).unwrap();
        let mut rts = QpAttrs::rts(Psn::new(psn));
        rts.timeout = Some(12);
        rts.retry_cnt = Some(4);
        qp.modify(&rts).unwrap();
    }
    let mut dead: BTreeSet<usize> = BTreeSet::new();
    let mut got = vec![0usize; n];
    let mut wc = vec![WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0)); 64];
    let take_recvs = |got: &mut Vec<usize>, dead: &mut BTreeSet<usize>, wc: &mut Vec<WorkCompletion>| {
        let k = rcq.poll(wc).unwrap();
        for c in &wc[..k] {
            let (j, r) = (c.wr_id as usize / rounds, c.wr_id as usize % rounds);
            if c.status != WcStatus::Success {
                dead.insert(j);
                continue;
            }
            let mut m = [0u8; 16];
            mr.read(2 * n * BLOCK + (j * rounds + r) * 64, &mut m).unwrap();
            assert_eq!(r, got[j], "member {me}: message {r} from {j} out of order");
            assert_eq!(m, msg(j, me, r), "member {me}: message {r} from {j}");
            got[j] += 1;
        }
    };
    for r in 0..rounds {
        for j in 0..n {
            if j == me || dead.contains(&j) {
                continue;
            }
            let qp = qps[j].as_ref().unwrap();
            let (_, _, rkey, base, _) = eps[j].unwrap();
            let remote = RemoteAddr { addr: base + (me * BLOCK) as u64, rkey: Rkey::new(rkey) };
            let src = n * BLOCK + j * BLOCK;
            mr.write(src, &pattern(me, j, r)).unwrap();
            let m = 2 * n * BLOCK + (n * rounds) * 64;
            let ops = [
                SendWr::new(1, SendOp::RdmaWrite(remote), &[mr.sge(src, BLOCK as u32)]),
                SendWr::new(2, SendOp::Send, &[mr.sge(m + j * 16, 16)]),
                SendWr::new(3, SendOp::RdmaRead(remote), &[mr.sge(src, BLOCK as u32)]),
            ];
            mr.write(m + j * 16, &msg(me, j, r)).unwrap();
            let mut failed = false;
            for wr in ops {
                let id = wr.wr_id;
                if qp.post_send(wr).is_err() {
                    failed = true;
                    break;
                }
                // Completions of this QP only come back in order; wait for this one.
                let until = Instant::now() + Duration::from_secs(30);
                loop {
                    take_recvs(&mut got, &mut dead, &mut wc);
                    let k = cq.poll(&mut wc[..1]).unwrap();
                    if k == 1 {
                        if wc[0].status != WcStatus::Success || wc[0].wr_id != id {
                            say(&format!("PEERERR {me} {j} {:?}", wc[0].status));
                            failed = true;
                        }
                        break;
                    }
                    assert!(Instant::now() < until, "member {me}: no completion from {j} in 30 s");
                    std::thread::yield_now();
                }
                if failed {
                    break;
                }
            }
            if failed {
                dead.insert(j);
                continue;
            }
            // The READ brought back what the WRITE put there.
            let mut back = vec![0u8; BLOCK];
            mr.read(src, &mut back).unwrap();
            assert!(back == pattern(me, j, r), "member {me}: READ from {j} round {r} differs");
        }
        if r == 2 {
            say(&format!("ROUND {me} {r}"));
        }
    }
    // Every live peer's messages.
    let until = Instant::now() + Duration::from_secs(60);
    while (0..n).any(|j| j != me && !dead.contains(&j) && got[j] < rounds) {
        take_recvs(&mut got, &mut dead, &mut wc);
        assert!(Instant::now() < until, "member {me}: messages missing {got:?} dead {dead:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    // And each live peer's last block in our inbox.
    for j in (0..n).filter(|j| *j != me && !dead.contains(j)) {
        let mut b = vec![0u8; BLOCK];
        mr.read(j * BLOCK, &mut b).unwrap();
        assert!(b == pattern(j, me, rounds - 1), "member {me}: inbox of {j}");
    }
    let dead: Vec<String> = dead.iter().map(|d| d.to_string()).collect();
    say(&format!("DONE {me} dead={}", dead.join(",")));
    // Peers may still READ our memory: stay until told.
    let _ = read_line();
}

fn msg(from: usize, to: usize, r: usize) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&(from as u64 * 1000 + to as u64).to_le_bytes());
    m[8..].copy_from_slice(&(r as u64).to_le_bytes());
    m
}

// ---- the tests ---------------------------------------------------------------------------

/// Runs a mesh of `ips.len()` members (member k on `ips[k]`, in namespace `nss[k]`), kills
/// `victim` with SIGKILL once every member has made progress, and while the others go on
/// starts two newcomers (a mesh of their own on the first two members' addresses).
fn mesh(ips: &[String], nss: &[Option<String>], victim: usize, rounds: usize) {
    let n = ips.len();
    let run_dir = std::env::temp_dir().join(format!("softroce-shared-{}", std::process::id()));
    let env = |k: usize, n: usize, ip: &str| {
        vec![
            ("SHARED_IP", ip.to_string()),
            ("SHARED_ID", k.to_string()),
            ("SHARED_N", n.to_string()),
            ("SHARED_ROUNDS", rounds.to_string()),
            ("SOFTROCE_RUN_DIR", run_dir.display().to_string()),
        ]
    };
    let start = |names: &[String], ips: &[String], nss: &[Option<String>]| -> Vec<Proc> {
        let mut ps: Vec<Proc> = (0..ips.len())
            .map(|k| Proc::spawn(&names[k], "mesh", &env(k, ips.len(), &ips[k]), nss[k].as_deref()))
            .collect();
        let eps: Vec<String> = ps.iter().map(|p| p.expect("EP", Duration::from_secs(30))).collect();
        for p in &mut ps {
            for e in &eps {
                p.send(e);
            }
            p.send("GO");
        }
        ps
    };
    let names: Vec<String> = (0..n).map(|k| format!("member {k}")).collect();
    let mut ps = start(&names, ips, nss);
    for p in &ps {
        p.expect("ROUND", Duration::from_secs(60));
    }
    ps[victim].kill9();
    let newcomers = start(&["newcomer 0".to_string(), "newcomer 1".to_string()], &ips[..2], &nss[..2]);
    let mut all: Vec<Proc> = Vec::new();
    for (k, p) in ps.into_iter().enumerate() {
        if k == victim {
            continue;
        }
        let done = p.expect("DONE", Duration::from_secs(120));
        assert_eq!(done, format!("DONE {k} dead={victim}"), "{}", p.name);
        all.push(p);
    }
    for (k, p) in newcomers.into_iter().enumerate() {
        let done = p.expect("DONE", Duration::from_secs(120));
        assert_eq!(done, format!("DONE {k} dead="), "{}", p.name);
        all.push(p);
    }
    for p in &mut all {
        p.wait_ok(Duration::from_secs(20));
    }
    // Nothing left behind: no member names, no files but the devices' counters.
    if nss.iter().all(Option::is_none) {
        let left: Vec<String> = share_names()
            .into_iter()
            .filter(|n| ips.iter().any(|ip| n.contains(&format!("/{ip}/"))))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
    if let Ok(rd) = std::fs::read_dir(&run_dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                name.ends_with(".json") || name.starts_with("softroce"),
                "left behind in the run dir: {name}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&run_dir);
}

#[test]
fn eight_processes_on_two_addresses_all_to_all_survive_a_kill() {
    let ips: Vec<String> = (0..8).map(|k| addr(1 + (k % 2) as u32)).collect();
    mesh(&ips, &vec![None; 8], 3, 60);
}

/// The check: 4 processes per namespace over veth, all to all, one killed.
#[test]
#[ignore = "needs root: network namespaces (CI runs it in the root phase)"]
fn eight_processes_in_two_namespaces_all_to_all_survive_a_kill() {
    let ns = common::netns::Netns::new(24, 0);
    let (a, b) = (ns.a.clone(), ns.b.clone());
    let ips: Vec<String> =
        (0..8).map(|k| if k % 2 == 0 { "10.201.0.1".into() } else { "10.201.0.2".into() }).collect();
    let nss: Vec<Option<String>> =
        (0..8).map(|k| Some(if k % 2 == 0 { a.clone() } else { b.clone() })).collect();
    mesh(&ips, &nss, 5, 60);
    for n in [&a, &b] {
        let out = common::netns::sh(&["ip", "netns", "exec", n, "cat", "/proc/net/unix"]);
        assert!(!out.contains("@softroce/v1/"), "member names left behind in {n}");
    }
}

#[test]
fn an_rdma_cm_port_is_one_processs_at_a_time() {
    let ip = addr(20);
    let mut holder = Proc::spawn(
        "holder",
        "hold_port",
        &[("SHARED_IP", ip.clone()), ("SHARED_PORT", "7321".into())],
        None,
    );
    holder.expect("BOUND", Duration::from_secs(20));
    let mut id = CmId::new(None, PortSpace::Tcp).unwrap();
    let e = id.bind_addr(format!("{ip}:7321").parse().unwrap()).unwrap_err();
    assert!(matches!(e, softroce::verbs::cm::Error::AddrInUse(_)), "{e}");
    // Another address, the same port: fine; the wildcard: taken.
    let mut other = CmId::new(None, PortSpace::Tcp).unwrap();
    other.bind_addr(format!("{}:7321", addr(21)).parse().unwrap()).unwrap();
    drop(other);
    let mut any = CmId::new(None, PortSpace::Tcp).unwrap();
    assert!(any.bind_addr("0.0.0.0:7321".parse().unwrap()).is_err());
    // The holder killed: the port is free at once.
    holder.kill9();
    let mut again = CmId::new(None, PortSpace::Tcp).unwrap();
    again.bind_addr(format!("{ip}:7321").parse().unwrap()).unwrap();
}

#[test]
fn a_listener_in_another_process_gets_its_requests_and_a_dead_ones_port_refuses() {
    let ip = addr(30);
    let mut lp =
        Proc::spawn("listener", "listen", &[("SHARED_IP", ip.clone()), ("SHARED_PORT", "7331".into())], None);
    lp.expect("LISTENING", Duration::from_secs(20));
    // This process's device joins the listener's address; the kernel hands the REQ to
    // either member, and the one that gets it passes it on to the listener's.
    let here = Device::open(DeviceConfig::new(&ip).with_share(true)).unwrap();
    connect_and_send(&ip, 7331, "across processes").unwrap();
    assert_eq!(lp.expect("GOT", Duration::from_secs(20)), "GOT across processes");
    lp.kill9();
    // This member sees the listener's process go (its unix connection closes) and forgets
    // its listeners: within moments, not at a timeout.
    let members = || here.sharing().map(|s| s.members);
    let seen = Instant::now();
    while members() != Some(1) {
        assert!(seen.elapsed() < Duration::from_secs(2), "the listener's death unseen: {:?}", here.sharing());
        std::thread::sleep(Duration::from_millis(1));
    }
    let t0 = Instant::now();
    let e = connect_and_send(&ip, 7331, "nobody").unwrap_err();
    assert!(e.to_string().contains("refused: invalid service ID"), "{e}");
    // (Seen twice in about fourteen full suites, when the REQ left right after the kill:
    // refused only after 6.15 s, the REQ's retry. Now the REQ leaves once the death is seen;
    // the counters say where a first REQ went if it happens again.)
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "refused at once, not after retries ({:?}); this member's counters: {}",
        t0.elapsed(),
        here.counters().map(|c| c.nonzero_summary()).unwrap_or_else(|e| e.to_string())
    );
    drop(here);
}
