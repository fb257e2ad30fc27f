//! `softroce lib-path`: the directory of softroce's drop-in `libibverbs.so.1` and
//! `librdmacm.so.1`, so that unmodified ibverbs and rdma_cm programs run on softroce:
//!
//! ```sh
//! cargo build --release
//! LD_LIBRARY_PATH=$(target/release/softroce lib-path) ibv_devinfo
//! ```
//!
//! How it finds the directory: beside this executable. `cargo build` puts `softroce` and the
//! `softroce-ibverbs` cdylib (`libibverbs.so`) in the same `target/<profile>/`, and that crate's
//! build script links `target/<profile>/softroce-lib/libibverbs.so.1 -> ../libibverbs.so` (the
//! loader looks for the SONAME, `libibverbs.so.1`). `lib-path` prints that directory, creating
//! the link if it is missing; without a built library beside it, it says how to build one and
//! exits with the setup code. The `softroce-rdmacm` cdylib (`librdmacm.so`) gets its
//! `librdmacm.so.1` link there the same way, when it is built.
//!
//! An installed binary (`cargo install --path . --features embed-libs`) has no build beside it:
//! it carries the library in itself (see `build.rs`) and writes it, once, into
//! `$XDG_CACHE_HOME/softroce/lib-<version>-<checksum>/` (default `~/.cache`), checked against
//! its checksum on every call, and prints that directory.

use std::path::{Path, PathBuf};

use super::common::{CliError, exit, report};

/// Arguments of `softroce lib-path` (none).
#[derive(clap::Args, Debug)]
pub struct LibPathArgs {}

/// The directory to put in `LD_LIBRARY_PATH`, given the directory of the `softroce`
/// executable.
pub fn lib_dir(bin_dir: &Path) -> Result<PathBuf, CliError> {
    let lib = bin_dir.join("libibverbs.so");
    if !lib.is_file() {
        return Err(CliError::setup(format!(
            "no softroce libibverbs.so in {} (build it with `cargo build --release`, which builds the \
             softroce-ibverbs crate beside this tool, or `cargo build --release -p softroce-ibverbs`)",
            bin_dir.display()
        )));
    }
    let dir = bin_dir.join("softroce-lib");
    for (file, soname) in [("libibverbs.so", "libibverbs.so.1"), ("librdmacm.so", "librdmacm.so.1")] {
        let link = dir.join(soname);
        if link.is_file() || !bin_dir.join(file).is_file() {
            continue;
        }
        let made = std::fs::create_dir_all(&dir).and_then(|()| {
            if std::fs::symlink_metadata(&link).is_ok() {
                std::fs::remove_file(&link)?;
            }
            std::os::unix::fs::symlink(format!("../{file}"), &link)
        });
        made.map_err(|e| CliError::setup(format!("cannot create {}: {e}", link.display())))?;
    }
    Ok(dir)
}

/// The libraries this binary carries (file name as the loader looks for it, contents): built
/// into it by `build.rs` with the `embed-libs` feature, none otherwise.
#[cfg(softroce_embedded_libs)]
const EMBEDDED: &[(&str, &[u8])] = &[
    ("libibverbs.so.1", include_bytes!(env!("SOFTROCE_EMBEDDED_IBVERBS"))),
    ("librdmacm.so.1", include_bytes!(env!("SOFTROCE_EMBEDDED_RDMACM"))),
];
#[cfg(not(softroce_embedded_libs))]
const EMBEDDED: &[(&str, &[u8])] = &[];

/// Writes the carried libraries into `cache/softroce/lib-<version>-<checksum>/` unless they are
/// there already, intact, and returns that directory (`None`: this binary carries none).
pub fn unpack_embedded(cache: &Path, libs: &[(&str, &[u8])]) -> Result<Option<PathBuf>, CliError> {
    if libs.is_empty() {
        return Ok(None);
    }
    let mut all = crc32fast::Hasher::new();
    for (name, bytes) in libs {
        all.update(name.as_bytes());
        all.update(bytes);
    }
    let dir =
        cache.join("softroce").join(format!("lib-{}-{:08x}", env!("CARGO_PKG_VERSION"), all.finalize()));
    let setup = |what: &str, p: &Path, e: std::io::Error| {
        CliError::setup(format!("cannot {what} {}: {e}", p.display()))
    };
    std::fs::create_dir_all(&dir).map_err(|e| setup("create", &dir, e))?;
    for (name, bytes) in libs {
        let path = dir.join(name);
        if std::fs::read(&path).is_ok_and(|have| have == *bytes) {
            continue;
        }
        // Written beside, then renamed: a concurrent caller or a loader never sees half a file.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(|e| setup("write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| setup("write", &path, e))?;
    }
    Ok(Some(dir))
}

/// The user's cache directory: `$XDG_CACHE_HOME`, else `$HOME/.cache`.
fn cache_home() -> Result<PathBuf, CliError> {
    let nonempty = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty()).map(PathBuf::from);
    nonempty("XDG_CACHE_HOME").or_else(|| nonempty("HOME").map(|h| h.join(".cache"))).ok_or_else(|| {
        CliError::setup("neither XDG_CACHE_HOME nor HOME is set: no cache directory for the library")
    })
}

/// Runs `softroce lib-path`.
pub fn run(_a: &LibPathArgs) -> i32 {
    let bin_dir = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| CliError::setup(format!("cannot find this executable: {e}")))
        .and_then(|e| {
            e.parent().map(Path::to_path_buf).ok_or_else(|| CliError::setup("executable has no directory"))
        });
    let found = bin_dir.and_then(|d| match lib_dir(&d) {
        Err(_) if !EMBEDDED.is_empty() => {
            unpack_embedded(&cache_home()?, EMBEDDED)?.ok_or_else(|| CliError::setup("no library carried"))
        }
        Err(e) => Err(CliError::setup(format!(
            "{e}; an installed softroce carries the library only when built with \
             `cargo install --path . --features embed-libs`",
            e = e.msg
        ))),
        found => found,
    });
    match found {
        Ok(dir) => {
            println!("{}", dir.display());
            exit::OK
        }
        Err(e) => report("lib-path", &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carried_libraries_are_written_once_and_repaired() {
        let cache = std::env::temp_dir().join(format!("softroce-lib-path-test-{}", std::process::id()));
        let libs: &[(&str, &[u8])] = &[("libibverbs.so.1", b"\x7fELF not really")];
        let dir = unpack_embedded(&cache, libs).unwrap().unwrap();
        let lib = dir.join("libibverbs.so.1");
        assert_eq!(std::fs::read(&lib).unwrap(), libs[0].1);
        // Intact: left alone (same inode). Damaged: written again.
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = ino(&lib);
        assert_eq!(unpack_embedded(&cache, libs).unwrap().unwrap(), dir);
        assert_eq!(ino(&lib), before);
        std::fs::write(&lib, b"truncated").unwrap();
        unpack_embedded(&cache, libs).unwrap();
        assert_eq!(std::fs::read(&lib).unwrap(), libs[0].1);
        // Other contents: another directory (an upgrade never overwrites a library in use).
        let other: &[(&str, &[u8])] = &[("libibverbs.so.1", b"\x7fELF other")];
        assert_ne!(unpack_embedded(&cache, other).unwrap().unwrap(), dir);
        assert_eq!(unpack_embedded(&cache, &[]).unwrap(), None);
        std::fs::remove_dir_all(&cache).unwrap();
    }
}
