//! Keeps the fuzz corpus seeds in `fuzz/corpus/` in step with the rxe captures: every distinct
//! (opcode, payload length) packet of the captures is a seed of both fuzz targets. Run with
//! `SOFTROCE_WRITE_CORPUS=1 cargo test --test fuzz_corpus` to regenerate them.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

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

#[test]
fn corpus_holds_every_capture_seed() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let write = std::env::var_os("SOFTROCE_WRITE_CORPUS").is_some();
    let seeds = seeds();
    assert!(seeds.len() > 20, "{}", seeds.len());
    for (id, udp_payload, ip_packet) in seeds {
        for (target, bytes) in [("packet", &udp_payload), ("icrc", &ip_packet)] {
            let path = root.join(target).join(format!("rxe-{id}"));
            if write {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, bytes).unwrap();
            }
            let have = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (regenerate the corpus)", path.display()));
            assert_eq!(&have, bytes, "{}", path.display());
        }
    }
}
