//! `softroce setup`: the one step a host takes for middleware that insists on a kernel device
//! node before it uses an RDMA device.
//!
//! UCX (1.13, Debian 12's) keeps an ibverbs device only if `/dev/infiniband/<dev_name>` is a
//! character device the process may read and write (`uct_ib_device_is_accessible` in
//! `src/uct/ib/base/ib_md.c`: `stat`, `S_ISCHR`, `access(R_OK | W_OK)`); it never opens it.
//! softroce's device *n* (`softroce<n>`, the *n*-th entry of `SOFTROCE_DEVICES` or of the
//! default list) has the stable `dev_name` `uverbs<n>`, so this command creates
//! `/dev/infiniband/uverbs0` … `uverbs<N-1>` as character devices 1:3 — the numbers of
//! `/dev/null`, mode 0666 — which is all UCX looks at. Opening one opens `/dev/null`: nothing
//! pretends to be a kernel RDMA device.
//!
//! Idempotent: a node that is already there as 1:3 is kept (its mode set again); a character
//! device with other numbers is a kernel device (ib_uverbs) and is left alone; anything else
//! in the way is an error. `--undo` removes every `uverbs*` node in the directory that is 1:3
//! (so whatever count made them) and the directory when nothing else is left in it. In a
//! container, which gets a fresh `/dev` from its runtime, the same is one run flag without
//! privilege: `--device /dev/null:/dev/infiniband/uverbs0` (docs/middleware.md).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::common::{CliError, exit, report};

/// Where UCX looks for device nodes.
pub const DEFAULT_DIR: &str = "/dev/infiniband";

/// The device numbers of the nodes: those of `/dev/null` (memory device, minor 3).
const NODE_DEV: (u32, u32) = (1, 3);

/// Arguments of `softroce setup`.
#[derive(clap::Args, Debug)]
pub struct SetupArgs {
    /// How many nodes: uverbs0 up to uverbs<N-1>, one per softroce device index (softroce<n>
    /// has dev_name uverbs<n>).
    #[arg(short = 'n', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub count: u32,
    /// Remove the nodes this command made (every uverbs* there that is a 1:3 character device)
    /// instead, and the directory if it is then empty.
    #[arg(long)]
    pub undo: bool,
    /// The directory of the nodes (a root filesystem being prepared for a container or VM
    /// image can name its own).
    #[arg(long, default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
}

/// What became of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// Made now.
    Created(PathBuf),
    /// Already a 1:3 node (its mode set to 0666 again).
    Present(PathBuf),
    /// A character device with other numbers: a kernel device, left alone.
    Kernel(PathBuf),
    /// Removed (`--undo`).
    Removed(PathBuf),
}

fn is_ours(meta: &std::fs::Metadata) -> bool {
    let rdev = meta.rdev() as libc::dev_t;
    meta.file_type().is_char_device() && (libc::major(rdev), libc::minor(rdev)) == NODE_DEV
}

fn io_error(what: &str, p: &Path, e: std::io::Error) -> CliError {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (device nodes need root, CAP_MKNOD: `sudo softroce setup`; in a container use the run \
             flag --device /dev/null:/dev/infiniband/uverbs0 instead)"
        }
        _ => "",
    };
    CliError::setup(format!("cannot {what} {}: {e}{hint}", p.display()))
}

fn in_the_way(p: &Path) -> CliError {
    CliError::setup(format!("{} exists and is not a character device: remove it first", p.display()))
}

/// Creates `dir/uverbs0` … `dir/uverbs<count-1>` (and `dir`) where they are missing.
pub fn create(dir: &Path, count: u32) -> Result<Vec<Node>, CliError> {
    if !dir.is_dir() {
        std::fs::create_dir_all(dir).map_err(|e| io_error("create", dir, e))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| io_error("set the mode of", dir, e))?;
    }
    let paths: Vec<PathBuf> = (0..count).map(|n| dir.join(format!("uverbs{n}"))).collect();
    // Nothing is made when something is in the way of one of them.
    if let Some(p) =
        paths.iter().find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_char_device()))
    {
        return Err(in_the_way(p));
    }
    let mut out = Vec::new();
    for path in paths {
        match std::fs::symlink_metadata(&path) {
            Ok(m) if is_ours(&m) => out.push(Node::Present(path.clone())),
            Ok(m) if m.file_type().is_char_device() => {
                out.push(Node::Kernel(path));
                continue;
            }
            Ok(_) => return Err(in_the_way(&path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let c = std::ffi::CString::new(path.as_os_str().as_bytes())
                    .map_err(|_| CliError::usage("a path with a NUL byte"))?;
                let dev = libc::makedev(NODE_DEV.0, NODE_DEV.1);
                // SAFETY: a NUL-terminated path; mknod reads nothing else of ours.
                if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, dev) } != 0 {
                    return Err(io_error("create", &path, std::io::Error::last_os_error()));
                }
                out.push(Node::Created(path.clone()));
            }
            Err(e) => return Err(io_error("inspect", &path, e)),
        }
        // The umask may have taken bits off mknod's mode; UCX wants read and write for all.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| io_error("set the mode of", &path, e))?;
    }
    Ok(out)
}

/// Removes every `uverbs*` 1:3 node in `dir`, then `dir` if it is empty.
pub fn remove(dir: &Path) -> Result<Vec<Node>, CliError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("read", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("read", dir, e))?;
        let path = entry.path();
        if !entry.file_name().as_bytes().starts_with(b"uverbs") {
            continue;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if is_ours(&m) => {
                std::fs::remove_file(&path).map_err(|e| io_error("remove", &path, e))?;
                out.push(Node::Removed(path));
            }
            Ok(m) if m.file_type().is_char_device() => out.push(Node::Kernel(path)),
            _ => {}
        }
    }
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none()) {
        // A mount point (a container's or a test's own /dev/infiniband) stays.
        match std::fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() != Some(libc::EBUSY) => return Err(io_error("remove", dir, e)),
            _ => {}
        }
    }
    Ok(out)
}

/// Runs `softroce setup`.
pub fn run(a: &SetupArgs) -> i32 {
    let done = if a.undo { remove(&a.dir) } else { create(&a.dir, a.count) };
    let nodes = match done {
        Ok(n) => n,
        Err(e) => return report("setup", &e),
    };
    let count = |f: fn(&Node) -> bool| nodes.iter().filter(|n| f(n)).count();
    for n in &nodes {
        if let Node::Kernel(p) = n {
            println!("{}: a kernel device (not 1:3), left alone", p.display());
        }
    }
    if a.undo {
        println!("{}: removed {} node(s)", a.dir.display(), count(|n| matches!(n, Node::Removed(_))));
    } else {
        println!(
            "{}/uverbs0..uverbs{}: character devices 1:3 (as /dev/null), mode 0666 ({} created, {} already \
             there): UCX now takes softroce0..softroce{}",
            a.dir.display(),
            a.count - 1,
            count(|n| matches!(n, Node::Created(_))),
            count(|n| matches!(n, Node::Present(_))),
            a.count - 1,
        );
    }
    exit::OK
}
