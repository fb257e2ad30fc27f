//! `softroce lib-path`: the directory of softroce's drop-in `libibverbs.so.1`, so that
//! unmodified ibverbs programs run on softroce:
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
//! exits with the setup code. (Installed binaries, e.g. from `cargo install`, are not handled
//! yet.)

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
    let link = dir.join("libibverbs.so.1");
    if !link.is_file() {
        let made = std::fs::create_dir_all(&dir).and_then(|()| {
            if std::fs::symlink_metadata(&link).is_ok() {
                std::fs::remove_file(&link)?;
            }
            std::os::unix::fs::symlink("../libibverbs.so", &link)
        });
        made.map_err(|e| CliError::setup(format!("cannot create {}: {e}", link.display())))?;
    }
    Ok(dir)
}

/// Runs `softroce lib-path`.
pub fn run(_a: &LibPathArgs) -> i32 {
    let bin_dir = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| CliError::setup(format!("cannot find this executable: {e}")))
        .and_then(|e| {
            e.parent().map(Path::to_path_buf).ok_or_else(|| CliError::setup("executable has no directory"))
        });
    match bin_dir.and_then(|d| lib_dir(&d)) {
        Ok(dir) => {
            println!("{}", dir.display());
            exit::OK
        }
        Err(e) => report("lib-path", &e),
    }
}
