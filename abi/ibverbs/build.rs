//! Links libibverbs.so with Debian's version nodes and SONAME, and prepares the directory that
//! users point `LD_LIBRARY_PATH` at.
//!
//! The symbols get their versions from `.symver` directives in `src/exports.rs`; the map file
//! only declares the nodes (recipe G of the libibverbs ABI note, §2.3).

use std::path::Path;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rerun-if-changed=build.rs");
    lib_dir();
}

/// Creates `target/<profile>/softroce-lib/libibverbs.so.1 -> ../libibverbs.so`, so that one
/// `cargo build` gives a directory for `LD_LIBRARY_PATH` (the loader looks for the SONAME,
/// `libibverbs.so.1`; cargo names the file `libibverbs.so`). The link dangles until the library
/// is linked, moments later. `softroce lib-path` prints the directory and repairs the link.
///
/// This is the one thing this build script writes outside `OUT_DIR`: a symlink inside the
/// profile directory cargo itself owns.
fn lib_dir() {
    let Ok(out) = std::env::var("OUT_DIR") else { return };
    // OUT_DIR is <target>/<profile>/build/softroce-ibverbs-<hash>/out.
    let Some(profile) = Path::new(&out).ancestors().nth(3) else { return };
    let lib = profile.join("softroce-lib");
    let link = lib.join("libibverbs.so.1");
    let result = std::fs::create_dir_all(&lib).and_then(|()| {
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link)?;
        }
        std::os::unix::fs::symlink("../libibverbs.so", &link)
    });
    if let Err(e) = result {
        println!("cargo:warning=cannot create {}: {e}", link.display());
    }
}
