//! Keeps the fuzz corpus seeds in `fuzz/corpus/` in step with the rxe captures: every distinct
//! (opcode, payload length) packet of the captures is a seed of the packet and ICRC targets,
//! and every captured CM MAD (alone, and each capture's MADs in order) a seed of the `cm`
//! target. Run with `SOFTROCE_WRITE_CORPUS=1 cargo test --test fuzz_corpus` to regenerate them.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use softroce::wire::roce::RoceFrame;

fn seeds() -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for &(name, _) in common::CAPTURES {
        for (_, f) in common::read_pcap(name) {
            let Ok(fr) = RoceFrame::parse_ethernet(&f) else { continue };
            let p = fr.packet();
            let key = (p.info().name, p.payload().len(), fr.icrc_ok());
            if seen.insert(key) {
                let ip_len = fr.ip_header().len() + 8 + p.len();
                let id = format!("{}-{}-{}", key.0.to_lowercase(), key.1, if key.2 { "ok" } else { "bad" });
                out.push((id, p.as_bytes().to_vec(), f[14..14 + ip_len].to_vec()));
            }
        }
    }
    out
}

/// Seeds of the `cm` target (its input format is in `fuzz/fuzz_targets/cm.rs`): a seed byte,
/// then per MAD "inject 256 raw bytes to side 0 (what the server sent) or side 1 (what the
/// client sent)" followed by two deliveries, so that our answers travel too.
fn cm_seeds() -> Vec<(String, Vec<u8>)> {
    let mut names: Vec<&str> = vec!["rping_cm.pcap"];
    names.extend(common::CM_CAPTURES.iter().map(|c| c.0));
    let mut out = Vec::new();
    for name in names {
        let stem = Path::new(name).file_stem().unwrap().to_string_lossy().into_owned();
        let mut all = vec![0u8];
        for (i, (_, f)) in common::read_pcap(name).iter().enumerate() {
            let Ok(fr) = RoceFrame::parse_ethernet(f) else { continue };
            let p = fr.packet();
            if p.bth().dest_qp() != 1 {
                continue;
            }
            // The server is 10.77.0.2 / fd77::2 in every capture.
            let from_server = matches!(fr.src_addr().to_string().as_str(), "10.77.0.2" | "fd77::2");
            let op = if from_server { 0x00 } else { 0x80 };
            let mut one = vec![0u8, op, 0];
            one.extend_from_slice(p.payload());
            out.push((format!("rxe-{stem}-{i}"), one));
            all.extend_from_slice(&[op, 0]);
            all.extend_from_slice(p.payload());
            all.extend_from_slice(&[48, 0, 48, 0]);
        }
        out.push((format!("rxe-{stem}-all"), all));
    }
    out
}

fn check(path: &Path, bytes: &[u8], write: bool) {
    if write {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let have =
        std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e} (regenerate the corpus)", path.display()));
    assert_eq!(&have, bytes, "{}", path.display());
}

#[test]
fn corpus_holds_every_capture_seed() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let write = std::env::var_os("SOFTROCE_WRITE_CORPUS").is_some();
    let seeds = seeds();
    assert!(seeds.len() > 20, "{}", seeds.len());
    for (id, udp_payload, ip_packet) in seeds {
        for (target, bytes) in [("packet", &udp_payload), ("icrc", &ip_packet)] {
            check(&root.join(target).join(format!("rxe-{id}")), bytes, write);
        }
    }
    let cm = cm_seeds();
    assert_eq!(cm.len(), 48 + 8, "{}", cm.len());
    for (id, bytes) in cm {
        check(&root.join("cm").join(id), &bytes, write);
    }
}
