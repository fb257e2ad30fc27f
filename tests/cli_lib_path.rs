//! `softroce lib-path` prints a directory whose `libibverbs.so.1` is softroce's, and an
//! unmodified Debian tool run with it as `LD_LIBRARY_PATH` sees softroce devices.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn lib_path_points_at_the_built_library() {
    let exe = Path::new(env!("CARGO_BIN_EXE_softroce"));
    let bin_dir = exe.parent().unwrap();
    let dir = common::built_lib_path();
    assert_eq!(Path::new(&dir), bin_dir.canonicalize().unwrap().join("softroce-lib"));
    let lib = Path::new(&dir).join("libibverbs.so.1").canonicalize().unwrap();
    assert_eq!(lib, bin_dir.join("libibverbs.so").canonicalize().unwrap());

    if Path::new("/usr/bin/ibv_devices").exists() {
        let o = Command::new("ibv_devices")
            .env("LD_LIBRARY_PATH", &dir)
            .env("SOFTROCE_DEVICES", "127.0.0.1")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && out.contains("softroce0"), "{out}");
    } else {
        println!("ibv_devices not installed (Debian ibverbs-utils): the LD_LIBRARY_PATH run is skipped");
    }
}

#[test]
fn lib_path_without_a_library_says_how_to_build_it() {
    let dir = std::env::temp_dir().join(format!("softroce-libpath-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("softroce");
    std::fs::copy(env!("CARGO_BIN_EXE_softroce"), &copy).unwrap();
    // A fork on another test's thread while the copy was open for writing holds a writable
    // descriptor of it in the child until that child execs: exec then fails with ETXTBSY for a
    // moment (the known race of copying and running a binary in a threaded process).
    let mut tries = 0;
    let o = loop {
        match Command::new(&copy).arg("lib-path").output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.unwrap(),
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cargo build --release"));
    assert!(o.stdout.is_empty());
}
