//! Our export table against Debian 12's libibverbs.so.1: the same symbols, version nodes,
//! default/compat versions and types; `dlvsym` finds ours by version; and every binary of
//! ibverbs-utils, rdmacm-utils, perftest and the pyverbs extensions links against us with no
//! undefined symbol (`ldd -r`).

mod common;

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::path::Path;
use std::process::Command;

use common::*;

/// `(name, version node, default, FUNC/OBJECT)`.
type Symbol = (String, String, bool, String);

/// Every defined, versioned dynamic symbol, from `objdump -T`; plus the names defined without
/// a version.
fn exports(lib: &Path) -> (BTreeSet<Symbol>, Vec<String>) {
    let out = Command::new("objdump").arg("-T").arg(lib).output().expect("objdump");
    assert!(out.status.success(), "objdump -T {}", lib.display());
    let mut set = BTreeSet::new();
    let mut unversioned = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // 000000000003358b g    DF .text	0000000000000005  IBVERBS_1.1 ibv_query_port
        let Some((head, tail)) = line.split_once('\t') else { continue };
        let f: Vec<&str> = head.split_whitespace().collect();
        if f.len() < 3 || f.contains(&"*UND*") || f.contains(&"*ABS*") || !f.contains(&"g") {
            continue;
        }
        let kind = if f.iter().any(|x| x.ends_with('O')) { "OBJECT" } else { "FUNC" };
        let t: Vec<&str> = tail.split_whitespace().collect();
        if t.len() < 3 {
            continue;
        }
        let (ver, name) = (t[1], t[2]);
        if ver == "Base" {
            unversioned.push(name.to_string());
            continue;
        }
        let default = !ver.starts_with('(');
        let node = ver.trim_matches(|c| c == '(' || c == ')');
        set.insert((name.to_string(), node.to_string(), default, kind.to_string()));
    }
    (set, unversioned)
}

#[test]
fn export_table_matches_debian() {
    if !require("export_table_matches_debian", &[SYSTEM_LIB, "/usr/bin/objdump"], "libibverbs1 binutils") {
        return;
    }
    let (theirs, _) = exports(Path::new(SYSTEM_LIB));
    let (ours, unversioned) = exports(&built_lib());
    let (own, ours): (BTreeSet<_>, BTreeSet<_>) = ours.into_iter().partition(|e| e.1 == "SOFTROCE_PRIVATE_1");
    let missing: Vec<_> = theirs.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&theirs).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing: {missing:#?}\nextra: {extra:#?}");
    assert!(unversioned.is_empty(), "symbols exported without a version: {unversioned:?}");
    assert!(own.iter().any(|e| e.0 == "softroce_private_version"), "{own:?}");
    assert_eq!(theirs.len(), 180, "Debian's table changed?");
    println!(
        "{} versioned symbols match Debian's libibverbs.so.1 (+{} SOFTROCE_PRIVATE_1)",
        ours.len(),
        own.len()
    );
}

#[test]
fn dlvsym_finds_ours_by_version() {
    let lib = built_lib();
    let path = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: dlopen/dlvsym/dladdr with valid NUL-terminated strings; the library's
    // constructors are Rust's (none of ours run code at load).
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen: {:?}", CStr::from_ptr(libc::dlerror()));
        let v11 = libc::dlvsym(h, c"ibv_get_device_list".as_ptr(), c"IBVERBS_1.1".as_ptr());
        let v10 = libc::dlvsym(h, c"ibv_get_device_list".as_ptr(), c"IBVERBS_1.0".as_ptr());
        let v15 = libc::dlvsym(h, c"ibv_get_device_list".as_ptr(), c"IBVERBS_1.5".as_ptr());
        let dflt = libc::dlsym(h, c"ibv_get_device_list".as_ptr());
        assert!(!v11.is_null() && !v10.is_null() && v11 != v10, "{v11:?} {v10:?}");
        assert!(v15.is_null());
        assert_eq!(dflt, v11, "dlsym binds the default version");
        let mut info: libc::Dl_info = std::mem::zeroed();
        assert!(libc::dladdr(v11, &mut info) != 0);
        let from = CStr::from_ptr(info.dli_fname).to_string_lossy().into_owned();
        assert_eq!(Path::new(&from).canonicalize().unwrap(), lib.canonicalize().unwrap(), "found in {from}");
        for (sym, node) in [
            ("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34"),
            ("verbs_register_driver_34", "IBVERBS_PRIVATE_34"),
            ("ibv_query_gid_type", "IBVERBS_PRIVATE_34"),
            ("_ibv_query_gid_ex", "IBVERBS_1.11"),
            ("ibv_reg_mr_iova2", "IBVERBS_1.8"),
            ("softroce_private_version", "SOFTROCE_PRIVATE_1"),
        ] {
            let (s, n) = (CString::new(sym).unwrap(), CString::new(node).unwrap());
            assert!(!libc::dlvsym(h, s.as_ptr(), n.as_ptr()).is_null(), "{sym}@{node}");
        }
        let ver = libc::dlvsym(h, c"softroce_private_version".as_ptr(), c"SOFTROCE_PRIVATE_1".as_ptr());
        let ver: extern "C" fn() -> u32 = std::mem::transmute(ver);
        assert_eq!(ver(), 1);
        // Handles stay open: unloading a Rust cdylib is not something programs do.
    }
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
    let pyverbs = "/usr/lib/python3/dist-packages/pyverbs";
    if !require(
        "debian_binaries_link_against_us",
        &[
            SYSTEM_LIB,
            "/usr/bin/ibv_devinfo",
            "/usr/bin/rping",
            "/usr/bin/ib_write_bw",
            pyverbs,
            "/usr/bin/ldd",
        ],
        "ibverbs-utils rdmacm-utils perftest python3-pyverbs",
    ) {
        return;
    }
    let dir = lib_dir("ldd");
    let mut files = Vec::new();
    for (pkg, prefix) in [
        ("ibverbs-utils", "/usr/bin/"),
        ("rdmacm-utils", "/usr/bin/"),
        ("perftest", "/usr/bin/"),
        ("python3-pyverbs", pyverbs),
    ] {
        let f = package_files(pkg, prefix);
        assert!(!f.is_empty(), "no binaries in {pkg}");
        files.extend(f);
    }
    let mut bad = Vec::new();
    let mut bound = 0;
    for f in &files {
        let out = run_with(&dir, Command::new("ldd").arg("-r").arg(f));
        let t = text(&out);
        if t.contains("undefined symbol") || t.contains("not found") || !out.status.success() {
            bad.push(format!("{f}:\n{t}"));
        }
        if let Some(line) = t.lines().find(|l| l.contains("libibverbs.so.1 =>")) {
            if !line.contains(dir.to_str().unwrap()) {
                bad.push(format!("{f}: libibverbs.so.1 is not ours: {line}"));
            }
            bound += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(bound >= 40, "only {bound} of {} files load libibverbs", files.len());
    println!("ldd -r clean for {} files ({bound} load our libibverbs.so.1)", files.len());
}
