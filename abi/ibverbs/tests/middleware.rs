//! Middleware as Debian 12 ships it, unmodified, through softroce's drop-in libraries between
//! two network namespaces joined by a veth pair (issue 26; docs/middleware.md):
//!
//! - UCX 1.13: `ucx_info -d` lists no softroce transport (and the library says why) until
//!   `softroce setup` has made the device nodes UCX insists on, then `rc_verbs` and
//!   `ud_verbs`; `ucx_perftest` UCT `am_lat` over both, `put_bw` 64 KiB zcopy over `rc_verbs`,
//!   UCP `tag_lat` and `tag_bw` 1 MiB, RMA, atomics and stream with `UCX_TLS=rc,self` (UCX's
//!   log must name rc_verbs on softroce0 as every lane) — no workaround variables;
//! - libfabric 1.17's verbs provider: `fi_pingpong -e msg` and `-e rdm` (ofi_rxm), data
//!   checked (`-e dgram` is in `interface_device.rs`);
//! - Open MPI 4.1: a 4-rank job (2 ranks per namespace, on the namespace's one address) and a
//!   2-rank job over `pml ucx` with `UCX_TLS=rc,self`, and the 4-rank job over `pml cm` +
//!   `mtl ofi` with `FI_PROVIDER="verbs;ofi_rxm"`: point-to-point, `MPI_Allreduce`,
//!   `MPI_Alltoall`, every byte checked (`tests/c/mpi_check.c`). The namespaces are the
//!   "hosts": `mpirun`'s rsh agent is a script that runs its command under `ip netns exec`.
//!
//! The device nodes live in a tmpfs mounted over `/dev/infiniband` in a private mount
//! namespace of each program (`unshare -m`), so the host's `/dev` is not touched (only an
//! empty `/dev/infiniband` directory is made as the mount point when there is none).
//!
//! Needs root (namespaces, veth, mounts), so every test is `#[ignore]`d: root runs them with
//! `cargo test -p softroce-ibverbs --test middleware -- --ignored` (.ci/run does, under
//! `flock /tmp/softroce-netns.lock`). Cost: about 25 s.

mod common;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use common::netns::{VethPair, require_root};
use common::*;

/// A veth pair, the drop-in libraries and the `softroce` command.
struct Hosts {
    p: VethPair,
    lib: PathBuf,
    cli: PathBuf,
}

/// What a program gets in its private mount namespace at `/dev/infiniband`.
#[derive(Clone, Copy, PartialEq)]
enum Nodes {
    /// An empty tmpfs: the step a user forgot.
    Missing,
    /// A tmpfs where `softroce setup` made the nodes.
    Setup,
}

impl Hosts {
    fn new(n: u32, tag: &str) -> Hosts {
        let p = VethPair::new(n);
        let lib = lib_dir_with_rdmacm(tag);
        Hosts { p, lib, cli: built_cli() }
    }

    /// The environment of a program in namespace `i`: its veth as the one softroce device.
    fn env(&self, i: usize) -> Vec<(&str, &str)> {
        vec![("SOFTROCE_DEVICES", self.p.dev[i].as_str()), ("LD_LIBRARY_PATH", self.lib.to_str().unwrap())]
    }

    /// `prog args` in namespace `i` with `extra` environment, in a private mount namespace whose
    /// `/dev/infiniband` is as `nodes` says.
    fn spawn(&self, i: usize, nodes: Nodes, extra: &[(&str, &str)], prog: &str, args: &[&str]) -> Child {
        let setup = match nodes {
            Nodes::Missing => "",
            Nodes::Setup => r#" && "$0" setup -n 1 >/dev/null"#,
        };
        let script = format!(
            "mkdir -p /dev/infiniband && mount -t tmpfs -o mode=0755 tmpfs /dev/infiniband{setup} && exec \"$@\""
        );
        let mut all =
            vec!["-m", "--propagation", "private", "sh", "-c", &script, self.cli.to_str().unwrap(), prog];
        all.extend_from_slice(args);
        let mut env = self.env(i);
        env.extend_from_slice(extra);
        self.p.spawn(i, &env, "unshare", &all)
    }

    fn wait_listening(&self, i: usize, port: u16) {
        let t = Instant::now();
        while !self.p.listening(i, port) && t.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A server in namespace 0 and its client in namespace 1 (the server's address appended to
    /// `client_args`); both must exit 0. Returns (server output, client output).
    fn pair(
        &self,
        what: &str,
        extra: &[(&str, &str)],
        prog: &str,
        server_args: &[&str],
        client_args: &[&str],
        port: u16,
    ) -> (String, String) {
        let server = self.spawn(0, Nodes::Setup, extra, prog, server_args);
        self.wait_listening(0, port);
        let mut cargs = client_args.to_vec();
        cargs.push(&self.p.v4[0]);
        let client = self.spawn(1, Nodes::Setup, extra, prog, &cargs);
        let (cok, cout) = finish(client, Duration::from_secs(90));
        let (sok, sout) = finish(server, Duration::from_secs(15));
        assert!(cok && sok, "{what}: {prog} {client_args:?}\n--- server:\n{sout}\n--- client:\n{cout}");
        (sout, cout)
    }

    /// `ucx_perftest` between the namespaces: the client's `Final:` line.
    fn ucx_perftest(&self, extra: &[(&str, &str)], args: &[&str]) -> String {
        self.ucx_perftest_output(extra, args).0
    }

    /// `ucx_perftest` between the namespaces: the client's `Final:` line and all its output.
    fn ucx_perftest_output(&self, extra: &[(&str, &str)], args: &[&str]) -> (String, String) {
        let port = free_port().to_string();
        let mut cargs = vec!["-p", &port];
        cargs.extend_from_slice(args);
        let (_, cout) = self.pair(
            &format!("ucx_perftest {args:?} {extra:?}"),
            extra,
            "ucx_perftest",
            &["-p", &port],
            &cargs,
            port.parse().unwrap(),
        );
        let fin = cout.lines().find(|l| l.starts_with("Final:")).map(str::to_string);
        (fin.unwrap_or_else(|| panic!("ucx_perftest {args:?}: no Final: line\n{cout}")), cout)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.lib);
    }
}

fn prerequisites(test: &str, paths: &[&str]) -> bool {
    require(test, paths, "ucx-utils, libfabric-bin, openmpi-bin, libopenmpi-dev")
}

#[test]
#[ignore = "needs root: network namespaces, mounts"]
fn ucx_lists_softroce_once_the_device_nodes_exist_and_says_so_before() {
    require_root();
    if !prerequisites("ucx_lists_softroce_once_the_device_nodes_exist", &["/usr/bin/ucx_info"]) {
        return;
    }
    let h = Hosts::new(0, "mw_ucx_info");
    let run = |nodes| finish(h.spawn(0, nodes, &[], "ucx_info", &["-d"]), Duration::from_secs(60));
    // Without the nodes UCX drops the device without a word; the library names the missing
    // node and both remedies.
    let (ok, out) = run(Nodes::Missing);
    assert!(ok, "{out}");
    assert!(!out.contains("Transport: rc_verbs"), "{out}");
    assert!(
        out.contains("/dev/infiniband/uverbs0 (softroce0) is missing")
            && out.contains("softroce setup")
            && out.contains("--device /dev/null:/dev/infiniband/uverbs0"),
        "no hint:\n{out}"
    );
    // After `softroce setup`: both transports on softroce0, and no hint.
    let (ok, out) = run(Nodes::Setup);
    assert!(ok, "{out}");
    let devices_of = |tl: &str| {
        out.split("#      Transport: ")
            .filter(|s| s.starts_with(tl))
            .filter_map(|s| s.lines().find(|l| l.contains("Device:")).map(str::trim))
            .collect::<Vec<_>>()
    };
    for tl in ["rc_verbs", "ud_verbs"] {
        assert_eq!(devices_of(tl), ["#         Device: softroce0:1"], "{tl}:\n{out}");
    }
    assert!(!out.contains("softroce setup"), "{out}");
}

#[test]
#[ignore = "needs root: mknod"]
fn softroce_setup_is_idempotent_and_undone() {
    require_root();
    let cli = built_cli();
    let dir = std::env::temp_dir().join(format!("softroce-setup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let setup = |args: &[&str]| {
        let o =
            std::process::Command::new(&cli).arg("setup").args(args).arg("--dir").arg(&dir).output().unwrap();
        assert!(o.status.success(), "setup {args:?}: {}", text(&o));
        text(&o)
    };
    let node = |n: u32| {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
        let m = std::fs::symlink_metadata(dir.join(format!("uverbs{n}"))).ok()?;
        Some((
            m.file_type().is_char_device(),
            m.rdev() == std::fs::metadata("/dev/null").unwrap().rdev(),
            m.permissions().mode() & 0o777,
        ))
    };
    assert!(setup(&["-n", "3"]).contains("3 created, 0 already there"));
    for n in 0..3 {
        assert_eq!(node(n), Some((true, true, 0o666)));
    }
    assert_eq!(node(3), None);
    assert!(setup(&["-n", "4"]).contains("1 created, 3 already there"));
    // Something else in the way is an error, and --undo leaves it alone.
    std::fs::write(dir.join("uverbs9"), b"").unwrap();
    let o = std::process::Command::new(&cli).args(["setup", "-n", "10", "--dir"]).arg(&dir).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("is not a character device"), "{}", text(&o));
    assert_eq!(node(4), None, "nothing is made when one node is in the way");
    assert!(setup(&["--undo"]).contains("removed 4 node(s)"));
    assert!(dir.join("uverbs9").exists());
    std::fs::remove_file(dir.join("uverbs9")).unwrap();
    assert!(setup(&["--undo"]).contains("removed 0 node(s)"));
    assert!(!dir.exists(), "an empty directory is removed");
}

#[test]
#[ignore = "needs root: network namespaces, mounts"]
fn ucx_uct_and_ucp_over_softroce_across_namespaces() {
    require_root();
    if !prerequisites("ucx_uct_and_ucp_over_softroce_across_namespaces", &["/usr/bin/ucx_perftest"]) {
        return;
    }
    let h = Hosts::new(1, "mw_ucx");
    let uct = |tl: &str, extra: &[&str]| {
        let mut args = vec!["-d", "softroce0:1", "-x", tl];
        args.extend_from_slice(extra);
        h.ucx_perftest(&[], &args)
    };
    // UCT: active messages over RC and UD (UD's receive completions carry the IPv4 layout of
    // their GRH area in wc.sl, as mlx5's: UCX 1.13 reads it), RDMA WRITE zero-copy.
    uct("rc_verbs", &["-t", "am_lat", "-n", "2000"]);
    uct("ud_verbs", &["-t", "am_lat", "-n", "2000"]);
    uct("rc_verbs", &["-t", "put_bw", "-s", "65536", "-D", "zcopy", "-n", "1000"]);
    // UCP with UCX_TLS=rc,self (rc_verbs for data, ud_verbs for wire-up): tag matching small
    // and 1 MiB (rendezvous, RDMA READ), RMA, atomics, stream. UCX's own log names the lanes
    // each endpoint got: all of them must be rc_verbs on softroce0 (with UCX's defaults it
    // takes shared memory between the namespaces, which share /dev/shm and /proc).
    let ucp = [("UCX_TLS", "rc,self"), ("UCX_LOG_LEVEL", "info")];
    let tests: [&[&str]; 8] = [
        &["-t", "tag_lat", "-n", "2000"],
        &["-t", "tag_bw", "-s", "1048576", "-n", "200"],
        &["-t", "ucp_put_bw", "-n", "500"],
        &["-t", "ucp_get", "-n", "500"],
        &["-t", "ucp_add", "-n", "500"],
        &["-t", "ucp_fadd", "-n", "500"],
        &["-t", "ucp_cswap", "-n", "500"],
        &["-t", "stream_lat", "-n", "500"],
    ];
    for args in tests {
        let (_, out) = h.ucx_perftest_output(&ucp, args);
        let lanes = ucp_lanes(&out);
        assert!(
            !lanes.is_empty() && lanes.iter().all(|l| l == "rc_verbs/softroce0:1"),
            "ucx_perftest {args:?}: lanes {lanes:?}\n{out}"
        );
    }
}

/// The transports/devices of every lane in UCX's `ep_cfg[N]: tag(rc_verbs/softroce0:1 ...)`
/// log lines.
fn ucp_lanes(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split_once("ep_cfg[").map(|(_, r)| r))
        .flat_map(|r| r.split('(').skip(1).filter_map(|g| g.split(')').next()))
        .flat_map(|g| g.split_whitespace().map(str::to_string))
        .collect()
}

#[test]
#[ignore = "needs root: network namespaces"]
fn libfabric_verbs_msg_and_rdm_endpoints_across_namespaces() {
    require_root();
    if !prerequisites("libfabric_verbs_msg_and_rdm_endpoints", &["/usr/bin/fi_pingpong"]) {
        return;
    }
    let h = Hosts::new(2, "mw_fabric");
    // -I iterations per size, -c data checked; the server's control port -B, the client's
    // -P. msg: RC QPs the rdma_cm connects (the server binds "localhost" to find the devices'
    // addresses: a loopback bind takes no device, as Linux's); rdm: ofi_rxm over msg.
    for (prov, ep) in [("verbs", "msg"), ("verbs;ofi_rxm", "rdm")] {
        let port = free_port().to_string();
        let args = ["-p", prov, "-e", ep, "-I", "100", "-c"];
        let (sout, cout) = h.pair(
            &format!("fi_pingpong -e {ep}"),
            &[],
            "fi_pingpong",
            &[&args[..], &["-B", &port]].concat(),
            &[&args[..], &["-P", &port]].concat(),
            port.parse().unwrap(),
        );
        for out in [&sout, &cout] {
            // bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec: 64 B up to 1 MiB.
            for size in ["64 ", "64k ", "1m "] {
                assert!(
                    out.lines().any(|l| l.starts_with(size) && l.contains("=100")),
                    "-e {ep}: {size}\n{out}"
                );
            }
        }
    }
}

/// The rsh agent that makes the namespaces hosts for `mpirun`: `agent HOST CMD...` runs CMD
/// in namespace HOST with that namespace's veth as the softroce device, the device node UCX
/// wants, and a session directory of the host's own (the namespaces share `/tmp`, and two
/// Open MPI daemons creating their job's directory in one place race: "mkdir ... File
/// exists").
fn write_agent(h: &Hosts, dir: &Path) -> PathBuf {
    let agent = dir.join("nsrsh");
    let (ns, dev, lib, cli) = (&h.p.ns, &h.p.dev, h.lib.display(), h.cli.display());
    let script = format!(
        r#"#!/bin/sh
host=$1; shift
case $host in {n0}) dev={d0} ;; {n1}) dev={d1} ;; *) echo "nsrsh: no host $host" >&2; exit 1 ;; esac
exec ip netns exec "$host" unshare -m --propagation private sh -c '
  mkdir -p /dev/infiniband && mount -t tmpfs -o mode=0755 tmpfs /dev/infiniband && {cli} setup -n 1 >/dev/null || exit 1
  export SOFTROCE_DEVICES='"$dev"' LD_LIBRARY_PATH={lib} OMPI_MCA_orte_tmpdir_base={dir}/'"$host"'
  mkdir -p "$OMPI_MCA_orte_tmpdir_base" || exit 1
  exec sh -c "$0"' "$*"
"#,
        n0 = ns[0],
        n1 = ns[1],
        d0 = dev[0],
        d1 = dev[1],
        dir = dir.display(),
    );
    std::fs::write(&agent, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    agent
}

#[test]
#[ignore = "needs root: network namespaces, mounts"]
fn open_mpi_jobs_over_ucx_and_libfabric_across_namespaces() {
    require_root();
    if !prerequisites("open_mpi_jobs", &["/usr/bin/mpirun", "/usr/bin/mpicc", "/usr/bin/ucx_info"]) {
        return;
    }
    let h = Hosts::new(3, "mw_mpi");
    let dir = std::env::temp_dir().join(format!("softroce-mw-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mpi_check.c");
    let exe = dir.join("mpi_check");
    let o = std::process::Command::new("mpicc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "mpicc: {}", text(&o));
    let agent = write_agent(&h, &dir);
    let ifaces = format!("{},{}", h.p.dev[0], h.p.dev[1]);
    let job = |np: u32, per_host: u32, mca: &[&str], env: &[&str]| {
        let hosts = format!("{}:{per_host},{}:{per_host}", h.p.ns[0], h.p.ns[1]);
        let np = np.to_string();
        let mut args = vec![
            "--allow-run-as-root",
            "-np",
            &np,
            "--host",
            &hosts,
            "--mca",
            "plm_rsh_agent",
            agent.to_str().unwrap(),
            "--mca",
            "oob_tcp_if_include",
            &ifaces,
        ];
        args.extend_from_slice(mca);
        for e in env {
            args.extend_from_slice(&["-x", e]);
        }
        args.push(exe.to_str().unwrap());
        let (ok, out) = finish(h.p.spawn(0, &[], "mpirun", &args), Duration::from_secs(120));
        let what = format!("mpirun -np {np} {mca:?} {env:?}");
        assert!(ok, "{what}:\n{out}");
        assert!(
            out.contains(&format!("PASSED: point-to-point, MPI_Allreduce, MPI_Alltoall, {np} ranks")),
            "{what}:\n{out}"
        );
        // Each namespace ran its share of the ranks, on its own device.
        for d in &h.p.dev {
            let here = out.lines().filter(|l| l.ends_with(&format!("on {d}: ok"))).count();
            assert_eq!(here, per_host as usize, "{what}: ranks on {d}\n{out}");
        }
    };
    let ucx = ["--mca", "pml", "ucx"];
    job(4, 2, &ucx, &["UCX_TLS=rc,self"]);
    job(2, 1, &ucx, &["UCX_TLS=rc,self"]);
    job(4, 2, &["--mca", "pml", "cm", "--mca", "mtl", "ofi"], &["FI_PROVIDER=verbs;ofi_rxm"]);
    let _ = std::fs::remove_dir_all(&dir);
}
