//! Our librdmacm.so.1 against Debian 12's: the same symbols, version nodes and default
//! versions; its SONAME and `DT_NEEDED libibverbs.so.1`; every `softroce_*` it imports is
//! exported by our libibverbs under `SOFTROCE_PRIVATE_1`; and the rdmacm-utils and perftest
//! binaries load both our libraries with no undefined symbol (`ldd -r`).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::*;

/// `(name, node, default)` of every defined versioned symbol; the undefined versioned ones
/// `(name, node)`; the names exported without a version.
#[allow(clippy::type_complexity)]
fn dynsyms(lib: &Path) -> (BTreeSet<(String, String, bool)>, BTreeSet<(String, String)>, Vec<String>) {
    let out = Command::new("objdump").arg("-T").arg(lib).output().expect("objdump");
    assert!(out.status.success(), "objdump -T {}", lib.display());
    let (mut def, mut und, mut unversioned) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((head, tail)) = line.split_once('\t') else { continue };
        let f: Vec<&str> = head.split_whitespace().collect();
        let t: Vec<&str> = tail.split_whitespace().collect();
        if f.len() < 3 || t.len() < 3 || f.contains(&"*ABS*") {
            continue;
        }
        let (ver, name) = (t[1], t[2]);
        let node = ver.trim_matches(|c| c == '(' || c == ')').to_string();
        if f.contains(&"*UND*") {
            und.insert((name.to_string(), node));
        } else if f.contains(&"g") {
            if ver == "Base" {
                unversioned.push(name.to_string());
            } else {
                def.insert((name.to_string(), node, !ver.starts_with('(')));
            }
        }
    }
    (def, und, unversioned)
}

#[test]
fn export_table_matches_debian() {
    if !require("export_table_matches_debian", &[SYSTEM_LIB, "/usr/bin/objdump"], "librdmacm1 binutils") {
        return;
    }
    let (theirs, _, _) = dynsyms(Path::new(SYSTEM_LIB));
    let (ours, imports, unversioned) = dynsyms(&built_rdmacm());
    let missing: Vec<_> = theirs.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&theirs).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing: {missing:#?}\nextra: {extra:#?}");
    assert!(unversioned.is_empty(), "exported without a version: {unversioned:?}");
    assert_eq!(theirs.len(), 68, "Debian's table changed?");

    // Every forwarded name is imported by version and exported by our libibverbs.
    let private: BTreeSet<_> = imports.iter().filter(|(_, n)| n == "SOFTROCE_PRIVATE_1").cloned().collect();
    assert_eq!(private.len(), 68, "{private:?}");
    let (ibv, _, _) = dynsyms(&built_ibverbs());
    for (name, node) in &private {
        assert!(ibv.contains(&(name.clone(), node.clone(), true)), "libibverbs lacks {name}@@{node}");
        assert!(theirs.iter().any(|(n, _, _)| Some(n.as_str()) == name.strip_prefix("softroce_")));
    }

    let d = Command::new("readelf").arg("-d").arg(built_rdmacm()).output().expect("readelf");
    let d = String::from_utf8_lossy(&d.stdout);
    assert!(d.contains("Library soname: [librdmacm.so.1]"), "{d}");
    assert!(d.contains("Shared library: [libibverbs.so.1]"), "{d}");
    println!("{} symbols match Debian's librdmacm.so.1; each forwards to libibverbs", ours.len());
}

/// The ELF files of a Debian package under `prefix`.
fn package_files(pkg: &str, prefix: &str) -> Vec<String> {
    let out = Command::new("dpkg").args(["-L", pkg]).output().expect("dpkg");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter(|l| {
            std::fs::read(l).map(|b| b.starts_with(b"\x7fELF")).unwrap_or(false)
                && std::fs::metadata(l).is_ok_and(|m| m.is_file())
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn debian_binaries_link_against_us() {
    if !require(
        "debian_binaries_link_against_us",
        &[SYSTEM_LIB, "/usr/bin/rping", "/usr/bin/ib_send_bw", "/usr/bin/ldd"],
        "rdmacm-utils perftest",
    ) {
        return;
    }
    let dir = lib_dir("ldd");
    let mut files = package_files("rdmacm-utils", "/usr/bin/");
    files.extend(package_files("perftest", "/usr/bin/"));
    let mut bad = Vec::new();
    let mut bound = 0;
    for f in &files {
        let out = Command::new("ldd").arg("-r").arg(f).env("LD_LIBRARY_PATH", &dir).output().expect("ldd");
        let t = text(&out);
        if t.contains("undefined symbol") || t.contains("not found") || !out.status.success() {
            bad.push(format!("{f}:\n{t}"));
        }
        if let Some(line) = t.lines().find(|l| l.contains("librdmacm.so.1 =>")) {
            if !line.contains(dir.to_str().unwrap()) {
                bad.push(format!("{f}: librdmacm.so.1 is not ours: {line}"));
            }
            bound += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(bound >= 20, "only {bound} of {} files load librdmacm", files.len());
    println!("ldd -r clean for {} files ({bound} load our librdmacm.so.1)", files.len());
}
