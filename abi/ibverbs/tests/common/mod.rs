//! What the ABI tests share: the built library in a directory of its own (as
//! `libibverbs.so.1`), the Debian prerequisites check, C programs built against the installed
//! headers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The Debian 12 library this one replaces.
pub const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// True if every path exists; otherwise prints that the test is skipped and why (visible in
/// `cargo test` output) and returns false. Under `CI` a missing prerequisite fails instead.
pub fn require(test: &str, paths: &[&str], packages: &str) -> bool {
    let missing: Vec<&str> = paths.iter().copied().filter(|p| !Path::new(p).exists()).collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!("SKIPPED {test}: missing {missing:?} (install Debian packages: {packages})");
    assert!(std::env::var_os("CI").is_none(), "{why} — fatal under CI");
    eprintln!("{why}");
    println!("{why}");
    false
}

/// The cdylib, built for this test run (`target/<profile>/libibverbs.so`).
///
/// `cargo test` does not build a cdylib-only library for its integration tests, so the first
/// call runs `cargo build -p softroce-ibverbs` in the profile of the test executable (cargo
/// does not hold its build lock while tests run).
pub fn built_lib() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            // target/[<triple>/]<profile>/deps/<test>-<hash>
            let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
            let profile = match profile_dir.file_name().and_then(|n| n.to_str()).unwrap() {
                "debug" => "dev".to_string(),
                other => other.to_string(),
            };
            let out = Command::new(env!("CARGO"))
                .args(["build", "-p", "softroce-ibverbs", "--profile", &profile])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .expect("cargo");
            assert!(out.status.success(), "cargo build -p softroce-ibverbs failed:\n{}", text(&out));
            let lib = profile_dir.join("libibverbs.so");
            assert!(lib.exists(), "{} not built", lib.display());
            lib
        })
        .clone()
}

/// A fresh directory holding `libibverbs.so.1` -> the built library, for `LD_LIBRARY_PATH`.
pub fn lib_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softroce-abi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(built_lib(), dir.join("libibverbs.so.1")).unwrap();
    dir
}

/// Compiles `tests/c/<name>.c` against the installed headers and library into `dir`.
pub fn build_c(name: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    let exe = dir.join(name);
    let out = Command::new("gcc")
        .args(["-Wall", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-libverbs", "-lpthread"])
        .output()
        .expect("gcc");
    assert!(out.status.success(), "gcc {name}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// Runs `cmd` with our library first on the loader path.
pub fn run_with(dir: &Path, cmd: &mut Command) -> Output {
    cmd.env("LD_LIBRARY_PATH", dir).output().expect("spawn")
}

/// stdout + stderr of an output, for assertion messages.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}
