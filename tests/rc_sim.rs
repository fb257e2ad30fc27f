//! The RC transport in the simulator: every operation, a grid of loss rates, path MTUs and
//! message sizes. Each run prints nothing unless it fails; a failure names its seed.
//!
//! The default grid runs in `cargo test`; the long one is `cargo test --release --test rc_sim
//! -- --ignored`.

mod common;

use common::workload::{Op, Workload};
use softroce::transport::Mtu;
use softroce::transport::sim::{LinkConfig, PairConfig};
use std::time::Duration;

const MTUS: [Mtu; 5] = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];

/// Sizes around the packet boundaries of `mtu`, plus zero and a few-packet message.
fn edge_sizes(mtu: u32) -> Vec<u32> {
    vec![0, 1, 3, mtu - 1, mtu, mtu + 1, 2 * mtu, 3 * mtu + 5]
}

/// Every operation at every edge size, interleaved.
fn mixed_ops(mtu: u32, big: u32) -> Vec<Op> {
    let mut ops = Vec::new();
    for (k, n) in edge_sizes(mtu).into_iter().chain([big]).enumerate() {
        ops.push(Op::Send(n));
        ops.push(Op::Write(n));
        ops.push(Op::Read(n));
        ops.push(Op::SendImm(n));
        ops.push(Op::WriteImm(n));
        ops.push(if k % 2 == 0 { Op::FetchAdd } else { Op::CmpSwap });
    }
    ops
}

/// The simulated link's round trip is some 20 µs: a probe floor far below the engine's 2 ms
/// makes the grid exercise early retransmission (probes) beside NAKs and timeouts.
fn cfg(seed: u64, mtu: Mtu, loss: f64) -> PairConfig {
    PairConfig {
        seed,
        probe_min: Duration::from_micros(100),
        mtu,
        a_to_b: LinkConfig::lossy(loss),
        b_to_a: LinkConfig::lossy(loss),
        ..PairConfig::default()
    }
}

#[test]
fn no_loss_every_op_every_mtu() {
    for mtu in MTUS {
        let w = Workload::new(mixed_ops(mtu.bytes(), 200_000), 7);
        let out = w.run(cfg(7, mtu, 0.0), Duration::from_secs(60));
        assert_eq!(out.retries, 0, "{mtu:?}: no loss, no retries");
        assert_eq!(out.probes, 0, "{mtu:?}: no loss, no probes");
        assert!(out.error.is_none());
    }
}

#[test]
fn loss_grid() {
    for (k, loss) in [0.01, 0.05, 0.2].into_iter().enumerate() {
        for (m, mtu) in MTUS.into_iter().enumerate() {
            let seed = 1000 + (k * 10 + m) as u64;
            let big = if loss > 0.1 { 20_000 } else { 100_000 };
            let w = Workload::new(mixed_ops(mtu.bytes(), big), seed);
            let out = w.run(cfg(seed, mtu, loss), Duration::from_secs(600));
            if loss <= 0.05 {
                assert!(out.error.is_none(), "seed {seed}: {out:?}");
            }
        }
    }
}

/// Fenced requests under loss, READs among them (what Open MPI's one-sided operations post
/// after a fence): a rewind must resend a fenced request it already sent, whatever holds a
/// READ credit now. (Every step also checks that outstanding work is always timed.)
#[test]
fn loss_grid_with_fences() {
    for (k, loss) in [0.01, 0.05, 0.2].into_iter().enumerate() {
        for (m, mtu) in [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096].into_iter().enumerate() {
            let seed = 2000 + (k * 10 + m) as u64;
            for fence_every in [1, 3] {
                let mut w = Workload::new(mixed_ops(mtu.bytes(), 20_000), seed);
                w.fence_every = fence_every;
                let out = w.run(cfg(seed, mtu, loss), Duration::from_secs(600));
                if loss <= 0.05 {
                    assert!(out.error.is_none(), "seed {seed} fence every {fence_every}: {out:?}");
                }
            }
        }
    }
}

#[test]
fn multi_sge_and_unsignaled() {
    for (seed, mtu) in [(21u64, Mtu::Mtu256), (22, Mtu::Mtu1024), (23, Mtu::Mtu4096)] {
        let mut w = Workload::new(mixed_ops(mtu.bytes(), 50_000), seed);
        w.gather = 3;
        w.scatter = 2;
        w.signal_every = 4;
        w.run(cfg(seed, mtu, 0.02), Duration::from_secs(600));
    }
}

#[test]
fn large_messages_with_loss() {
    let ops = vec![Op::Write(3 << 20), Op::Read(2 << 20), Op::Send(1 << 20), Op::WriteImm(1 << 20)];
    let w = Workload::new(ops, 31);
    let out = w.run(cfg(31, Mtu::Mtu4096, 0.01), Duration::from_secs(600));
    assert!(out.error.is_none(), "{out:?}");
    assert!(out.retries > 0, "1% loss over 7 MiB must have caused retransmissions: {out:?}");
}

/// The long grid: every MTU, loss up to 20 %, messages up to 8 MiB, several seeds
/// (`SOFTROCE_SIM_SEEDS`, default 3; CI runs one).
#[test]
#[ignore]
fn long_grid() {
    let seeds: u64 = std::env::var("SOFTROCE_SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    for seed in 0..seeds {
        for loss in [0.0, 0.01, 0.02, 0.05, 0.1, 0.2] {
            for mtu in MTUS {
                let big = if loss >= 0.1 { 256 << 10 } else { 8 << 20 };
                let s = seed * 1000 + (loss * 100.0) as u64 * 10 + mtu as u64;
                let w = Workload::new(mixed_ops(mtu.bytes(), big), s);
                let out = w.run(cfg(s, mtu, loss), Duration::from_secs(3600));
                eprintln!(
                    "seed {s} loss {loss} {mtu:?}: {} ops, {} retries, {} probes, {} tail probes, {} packets, {:?} virtual",
                    out.completed, out.retries, out.probes, out.tail_probes, out.packets_ab, out.elapsed
                );
            }
        }
    }
}

/// Goodput of a WRITE stream under 1 % loss each way, as a ratio to the lossless stream, in
/// virtual time (a 250 MB/s link, 20 µs each way, the engine's 2 ms probe floor), with the
/// tail probe on and off: 200 WRITEs of 64 KiB at PMTU 1024, eight seeds. Prints the ratios;
/// asserts only that the tail probe does not make the mean worse (virtual time: the run
/// replays exactly). About 0.74 without it, 0.86 with it when written.
#[test]
#[ignore]
fn tail_probe_goodput_in_virtual_time() {
    let n = 200usize;
    let ops = vec![Op::Write(64 << 10); n];
    let goodput = |loss: f64, seed: u64, tail: Option<Duration>| {
        let link = LinkConfig {
            drop: loss,
            delay: Duration::from_micros(20),
            ns_per_byte: 4.0,
            ..LinkConfig::default()
        };
        let cfg = PairConfig {
            seed,
            mtu: Mtu::Mtu1024,
            a_to_b: link,
            b_to_a: link,
            timeout: 14,
            tail_probe_min: tail,
            ..PairConfig::default()
        };
        let out = Workload::new(ops.clone(), seed).run(cfg, Duration::from_secs(100));
        assert!(out.error.is_none(), "{out:?}");
        (n as f64 * 65536.0 / out.elapsed.as_secs_f64(), out)
    };
    let on = Some(softroce::transport::TAIL_PROBE_MIN);
    let base = goodput(0.0, 1, on).0;
    let (mut sum_on, mut sum_off) = (0.0, 0.0);
    for seed in 1..=8 {
        let (off, o_off) = goodput(0.01, seed, None);
        let (with, o_on) = goodput(0.01, seed, on);
        sum_off += off / base;
        sum_on += with / base;
        eprintln!(
            "seed {seed}: ratio {:.3} without the tail probe ({} probes), {:.3} with it ({} probes, {} tail probes)",
            off / base,
            o_off.probes,
            with / base,
            o_on.probes,
            o_on.tail_probes
        );
    }
    eprintln!("mean ratio {:.3} without, {:.3} with", sum_off / 8.0, sum_on / 8.0);
    assert!(sum_on >= sum_off, "the tail probe made goodput under loss worse");
}
