//! The device nodes middleware looks for, and a clear message when they are missing.
//!
//! softroce needs no kernel device, but UCX (1.13, Debian 12's) keeps an ibverbs device only
//! if `/dev/infiniband/<dev_name>` is a character device the process may read and write
//! (`uct_ib_device_is_accessible`, `src/uct/ib/base/ib_md.c`: `stat`, `S_ISCHR`,
//! `access(R_OK | W_OK)`), and says nothing when it drops one: `ucx_info -d` just lists no
//! softroce transport. Device *n* has the stable `dev_name` `uverbs<n>`; `softroce setup`
//! (root, once per host) creates the nodes, a container gets them with `--device
//! /dev/null:/dev/infiniband/uverbs0`.
//!
//! So when a process that has UCX loaded (`libuct`, `libucs` or `libucp` among its shared
//! objects) lists the devices and a node is missing, the library says so once, on stderr,
//! naming the node and both remedies. Other programs never see the message.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::runtime::{SrDevice, warn};

/// Where the nodes are.
pub const DIR: &str = "/dev/infiniband";

/// The shared objects that mark a process as using UCX.
const UCX_LIBS: [&str; 3] = ["libuct.so", "libucs.so", "libucp.so"];

/// True if one of the process's loaded shared objects has a file name starting with one of
/// `names`.
pub fn loaded(names: &[&str]) -> bool {
    struct Search<'a> {
        names: &'a [&'a str],
        found: bool,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Search` passed below, alive for the whole iteration; the
        // loader passes a valid `dl_phdr_info` whose `dlpi_name` is NULL or a C string.
        let (s, name) = unsafe { (&mut *data.cast::<Search<'_>>(), (*info).dlpi_name) };
        if !name.is_null() {
            // SAFETY: a C string from the loader.
            let path = unsafe { CStr::from_ptr(name) }.to_bytes();
            let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
            if s.names.iter().any(|n| file.starts_with(n.as_bytes())) {
                s.found = true;
                return 1;
            }
        }
        0
    }
    let mut s = Search { names, found: false };
    // SAFETY: the callback only reads what the loader hands it and writes `s`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut s).cast()) };
    s.found
}

/// Why UCX would not take the node at `path`, if it would not (its own test: a character
/// device, readable and writable by this process).
pub fn unusable(path: &CStr) -> Option<&'static str> {
    // SAFETY: plain C data; all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a C string and a stat buffer of ours.
    if unsafe { libc::stat(path.as_ptr(), &mut st) } != 0 {
        return Some("missing");
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return Some("not a character device");
    }
    // SAFETY: a C string.
    if unsafe { libc::access(path.as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
        return Some("not readable and writable by this process");
    }
    None
}

/// The message for the devices whose nodes UCX would not take (`None`: all are there).
pub fn missing_message(devs: &[&SrDevice], dir: &str) -> Option<String> {
    let bad: Vec<String> = devs
        .iter()
        .filter_map(|d| {
            let node = format!("{dir}/uverbs{}", d.index);
            let c = std::ffi::CString::new(node.clone()).ok()?;
            unusable(&c).map(|why| format!("{node} ({}) is {why}", d.name))
        })
        .collect();
    if bad.is_empty() {
        return None;
    }
    Some(format!(
        "UCX uses a device only if {dir}/<dev_name> is a character device it can read and write: {}, so \
         UCX will not use {}. Run `sudo softroce setup` once on this host (it creates them as /dev/null's \
         node; `softroce setup --undo` removes them), or give a container --device \
         /dev/null:{dir}/uverbs0 (one per device)",
        bad.join(", "),
        if bad.len() == 1 { "that device" } else { "those devices" }
    ))
}

/// Called when the device list is read: once per process, if UCX is loaded and a node is
/// missing, says what to do.
pub fn check(devs: &[&SrDevice]) {
    static DONE: AtomicBool = AtomicBool::new(false);
    if devs.is_empty() || DONE.load(Ordering::Relaxed) || !loaded(&UCX_LIBS) {
        return;
    }
    if DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    if let Some(msg) = missing_message(devs, DIR) {
        warn(&msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_libc_and_no_ucx() {
        assert!(loaded(&["libc.so"]));
        assert!(!loaded(&UCX_LIBS));
    }

    #[test]
    fn a_node_ucx_would_take() {
        assert_eq!(unusable(c"/dev/null"), None);
        assert_eq!(unusable(c"/nonexistent/uverbs0"), Some("missing"));
        assert_eq!(unusable(c"/"), Some("not a character device"));
    }
}
