//! With the `embed-libs` feature (`cargo install --path . --features embed-libs`), builds the
//! drop-in `libibverbs.so.1` and `librdmacm.so.1` (the `abi/ibverbs` and `abi/rdmacm` crates)
//! with a nested cargo and hands its path to
//! the `softroce` binary, which carries the library and writes it, once, into a per-user cache
//! directory for `softroce lib-path`. Without the feature this script does nothing: a workspace
//! build (`cargo build`) builds the library beside the tool anyway.
//!
//! The nested build has its own target directory under `OUT_DIR` (the outer cargo holds a lock
//! on its own), so the stack is compiled twice: that is the price of one `cargo install`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set for the nested build.
const NESTED: &str = "SOFTROCE_EMBED_LIBS_NESTED";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(softroce_embedded_libs)");
    println!("cargo::rerun-if-changed=build.rs");
    // (The nested build must not embed again: it inherits this script's environment, where
    // cargo set CARGO_FEATURE_EMBED_LIBS, so it is told apart by its own variable too.)
    if std::env::var_os("CARGO_FEATURE_EMBED_LIBS").is_none() || std::env::var_os(NESTED).is_some() {
        return;
    }
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = root.join("abi/ibverbs/Cargo.toml");
    if !manifest.is_file() {
        println!(
            "cargo::warning=embed-libs: {} is missing (a packaged crate carries no abi/ sources): \
             `softroce lib-path` will have no library to offer; install from a clone or git instead",
            manifest.display()
        );
        return;
    }
    for dir in [
        "abi/ibverbs/src",
        "abi/ibverbs/build.rs",
        "abi/ibverbs/libibverbs.map",
        "abi/rdmacm/src",
        "abi/rdmacm/build.rs",
        "abi/rdmacm/librdmacm.map",
        "abi/rdmacm/exports.tsv",
        "src",
    ] {
        println!("cargo::rerun-if-changed={dir}");
    }
    let libs = [("libibverbs.so", out.join("libibverbs.so.1")), ("librdmacm.so", out.join("librdmacm.so.1"))];
    // Lints (`cargo clippy --all-features`) build no binary: empty stand-ins are enough to
    // check the code that carries the libraries, without a nested release build.
    if std::env::var("RUSTC_WORKSPACE_WRAPPER").is_ok_and(|w| w.contains("clippy-driver")) {
        for (_, lib) in &libs {
            std::fs::write(lib, b"").expect("embed-libs: writing a stand-in library");
        }
    } else {
        build_nested(&manifest, &out.join("abi-target"), &libs);
    }
    println!("cargo::rustc-env=SOFTROCE_EMBEDDED_IBVERBS={}", libs[0].1.display());
    println!("cargo::rustc-env=SOFTROCE_EMBEDDED_RDMACM={}", libs[1].1.display());
    println!("cargo::rustc-cfg=softroce_embedded_libs");
}

/// Builds the libraries with a nested cargo into `target` and copies each (cargo's file name)
/// to its path.
fn build_nested(manifest: &Path, target: &Path, libs: &[(&str, PathBuf)]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "-p", "softroce-ibverbs", "-p", "softroce-rdmacm", "--manifest-path"])
        .arg(manifest)
        .arg("--target-dir")
        .arg(target);
    // What the outer build set for itself must not steer the nested one.
    for var in ["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS"] {
        cmd.env_remove(var);
    }
    for (var, _) in std::env::vars_os() {
        if var.to_str().is_some_and(|v| v.starts_with("CARGO_FEATURE_")) {
            cmd.env_remove(var);
        }
    }
    cmd.env(NESTED, "1");
    let status = cmd.status().expect("embed-libs: cannot run cargo for the nested build");
    assert!(status.success(), "embed-libs: the nested build of abi/ibverbs and abi/rdmacm failed ({status})");
    for (name, lib) in libs {
        let built = target.join("release").join(name);
        std::fs::copy(&built, lib).unwrap_or_else(|e| panic!("embed-libs: copying {}: {e}", built.display()));
    }
}
