//! `ibv_get_sysfs_path` and `ibv_read_sysfs_file`.
//!
//! softroce devices have no sysfs directory. Their `ibdev_path` is
//! `/sys/class/infiniband/softroce<n>` (the shape programs expect), and `ibv_read_sysfs_file`
//! on that directory answers from the device itself: `node_type`, `node_guid`,
//! `sys_image_guid`, `fw_ver`, `ports/1/state`, `ports/1/link_layer`, `ports/1/pkeys/0`, and,
//! once the device is open in this process, `ports/1/gids/<i>` and
//! `ports/1/gid_attrs/types/<i>`. Anything else there (`board_id`, which `ibv_devinfo` asks
//! for, does not exist on rxe either) fails with `ENOENT`. Other directories are read from the
//! real filesystem, as the real library does.

use std::ffi::CString;
use std::sync::OnceLock;

use libc::{c_char, c_int, size_t};

use crate::runtime::{IBDEV_PATH_PREFIX, devices};
use crate::util::{guard, set_errno};

/// `ibv_get_sysfs_path`: `$SYSFS_PATH` without trailing slashes (ignored when setuid), else
/// `/sys`.
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    guard(c"/sys".as_ptr(), || {
        PATH.get_or_init(|| {
            // SAFETY: getuid/geteuid have no preconditions.
            let setuid = unsafe { libc::getuid() != libc::geteuid() };
            let env = if setuid { None } else { std::env::var("SYSFS_PATH").ok() };
            let p = env.map(|s| s.trim_end_matches('/').to_string()).unwrap_or_else(|| "/sys".into());
            CString::new(p).unwrap_or_else(|_| c"/sys".into())
        })
        .as_ptr()
    })
}

/// The contents of a file of a softroce device's pseudo sysfs directory, if `dir` is one.
/// `Some(None)`: the directory is a softroce device's, the file does not exist.
fn virtual_file(dir: &str, file: &str) -> Option<Option<String>> {
    let dir = dir.trim_end_matches('/');
    let dev = devices().iter().find(|d| dir == format!("{IBDEV_PATH_PREFIX}/{}", d.name))?;
    let guid = |g: u64| {
        format!("{:04x}:{:04x}:{:04x}:{:04x}", g >> 48, (g >> 32) & 0xffff, (g >> 16) & 0xffff, g & 0xffff)
    };
    let file = file.trim_start_matches('/');
    let rt = dev.current_runtime();
    let gid_index = |prefix: &str| file.strip_prefix(prefix).and_then(|i| i.parse::<usize>().ok());
    Some(match file {
        "node_type" => Some("1: CA".into()),
        "node_guid" | "sys_image_guid" => Some(guid(dev.guid)),
        "fw_ver" => Some(env!("CARGO_PKG_VERSION").into()),
        "ports/1/state" => Some("4: ACTIVE".into()),
        "ports/1/link_layer" => Some("Ethernet".into()),
        "ports/1/pkeys/0" => Some("0xffff".into()),
        _ => match (&rt, gid_index("ports/1/gids/"), gid_index("ports/1/gid_attrs/types/")) {
            (Some(rt), Some(i), _) => rt.info.gids.get(i).map(|g| g.to_ibv_string()),
            (Some(rt), _, Some(i)) => rt.info.gids.get(i).map(|_| "RoCE v2".into()),
            _ => None,
        },
    })
}

/// `ibv_read_sysfs_file(dir, file, buf, size)`: reads `dir/file` into `buf`, drops one
/// trailing newline and NUL-terminates; returns the length, or -1 with errno (also when the
/// contents do not fit with their terminator).
///
/// # Safety
/// `dir` and `file` are NUL-terminated strings; `buf` has room for `size` bytes.
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller passes NUL-terminated strings.
        let (Some(d), Some(f)) = (unsafe { crate::util::cstr(dir) }, unsafe { crate::util::cstr(file) })
        else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if buf.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let data = match virtual_file(&d, &f) {
            Some(Some(s)) => (s + "\n").into_bytes(),
            Some(None) => {
                set_errno(libc::ENOENT);
                return -1;
            }
            None => {
                use std::io::Read;
                let path = format!("{d}/{f}");
                let mut v = vec![0u8; size];
                match std::fs::File::open(&path).and_then(|mut fh| fh.read(&mut v)) {
                    Ok(n) => {
                        v.truncate(n);
                        v
                    }
                    Err(e) => {
                        set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                        return -1;
                    }
                }
            }
        };
        // SAFETY: the caller gives `size` writable bytes at `buf`.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        let mut len = data.len().min(size);
        out[..len].copy_from_slice(&data[..len]);
        if len > 0 {
            if out[len - 1] == b'\n' {
                len -= 1;
                out[len] = 0;
            } else if len < size {
                out[len] = 0;
            } else {
                return -1;
            }
        }
        len as c_int
    })
}
