//! The run directory: where every device publishes its counters for other processes
//! (`softroce counters`), one small file per device.
//!
//! **Where.** `$SOFTROCE_RUN_DIR` when set; else, for root, `/run/softroce`; for anyone else
//! `$XDG_RUNTIME_DIR/softroce`, else `/tmp/softroce-<uid>`. The writer and the reader pick the
//! same one, so `softroce counters` shows the devices of its own user (root sees its own in
//! `/run/softroce`).
//!
//! **Who may write.** A directory is used only if it is a real directory (not a symbolic link)
//! owned by the effective user or by root, and not writable by group or others; a missing one
//! is created with mode 0755 (`/run/softroce`: others may read counters, nothing more) or 0700
//! (per-user directories). Otherwise publishing is off and `softroce counters` says why: a
//! directory someone else created in `/tmp`, or one another user can write, could be used to
//! forge counters or to plant symbolic links. Files are created under a temporary name with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644, then renamed over the published name (a rename
//! replaces a link, it never writes through it); readers open with `O_NOFOLLOW`, take only
//! regular files of the effective user or root, and read at most 64 KiB. A file holds the
//! device's name, address, interface, process id and counters — nothing else.
//!
//! **How long.** A device's file lives while the device does. Once the device is closed or
//! its process has ended, the file keeps its final counters (`softroce counters --all`) for
//! [`RETAIN_ENDED`], and only the [`KEEP_ENDED`] most recent ended devices are kept; every
//! device that opens prunes the rest, and temporary files left by a crash. So however many
//! processes come and go, the directory holds the running devices plus at most
//! [`KEEP_ENDED`] files.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long an ended device's final counters stay in the run directory.
pub const RETAIN_ENDED: Duration = Duration::from_secs(600);
/// How many ended devices' files are kept at most (the most recent).
pub const KEEP_ENDED: usize = 64;
/// Largest counters file a reader takes.
const MAX_FILE: u64 = 64 << 10;
/// Temporary files older than this are leftovers of a crash.
const STALE_TMP: Duration = Duration::from_secs(60);

/// Why the run directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// It could not be created, examined or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// It is a symbolic link.
    #[error("{}: is a symbolic link, not a directory", .0.display())]
    Symlink(PathBuf),
    /// It is not a directory.
    #[error("{}: not a directory", .0.display())]
    NotDirectory(PathBuf),
    /// Another user owns it.
    #[error("{}: owned by uid {owner}, not by this user (uid {me}) or root", path.display())]
    Owner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective user.
        me: u32,
    },
    /// Group or others may write in it.
    #[error("{}: writable by other users (mode {mode:03o})", path.display())]
    Writable {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// The effective user id (from `/proc/self/status`; 0 if it cannot be read).
pub fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The run directory's path for this process (see the module documentation).
pub fn run_dir_path() -> PathBuf {
    if let Some(d) = std::env::var_os("SOFTROCE_RUN_DIR") {
        return d.into();
    }
    let uid = effective_uid();
    if uid == 0 {
        return PathBuf::from("/run/softroce");
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("softroce");
    }
    PathBuf::from(format!("/tmp/softroce-{uid}"))
}

/// Checks that `path` is a directory only its owner (this user or root) may write.
fn check(path: &Path) -> Result<(), RunDirError> {
    let m =
        std::fs::symlink_metadata(path).map_err(|source| RunDirError::Io { path: path.into(), source })?;
    if m.file_type().is_symlink() {
        return Err(RunDirError::Symlink(path.into()));
    }
    if !m.is_dir() {
        return Err(RunDirError::NotDirectory(path.into()));
    }
    let me = effective_uid();
    if m.uid() != me && m.uid() != 0 {
        return Err(RunDirError::Owner { path: path.into(), owner: m.uid(), me });
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(RunDirError::Writable { path: path.into(), mode });
    }
    Ok(())
}

/// A checked run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// The run directory for publishing: created if missing, then checked.
    pub fn for_publishing() -> Result<RunDir, RunDirError> {
        let path = run_dir_path();
        if std::fs::symlink_metadata(&path).is_err() {
            let mode = if path == Path::new("/run/softroce") { 0o755 } else { 0o700 };
            let mut b = std::fs::DirBuilder::new();
            std::os::unix::fs::DirBuilderExt::mode(&mut b, mode);
            // Racing creators: whoever made it, the check below decides.
            let _ = b.create(&path);
        }
        check(&path)?;
        Ok(RunDir { path })
    }

    /// The run directory for reading: it must exist and pass the same checks.
    pub fn for_reading() -> Result<RunDir, RunDirError> {
        let path = run_dir_path();
        check(&path)?;
        Ok(RunDir { path })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces file `name` with `text`: written under a temporary name (never through a
    /// link), then renamed.
    pub(crate) fn publish(&self, name: &str, text: &str) -> io::Result<()> {
        let tmp = self.path.join(format!(".{name}.{}.tmp", std::process::id()));
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)
        };
        let mut f = match create() {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&tmp)?;
                create()?
            }
            r => r?,
        };
        let written = f.write_all(text.as_bytes());
        drop(f);
        match written.and_then(|_| std::fs::rename(&tmp, self.path.join(name))) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// Every published file: `(file name, contents)`, regular files of this user or root only,
    /// at most 64 KiB each, never through a link.
    pub fn read_published(&self) -> Vec<(String, String)> {
        let Ok(entries) = std::fs::read_dir(&self.path) else { return vec![] };
        let me = effective_uid();
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".counters") || name.starts_with('.') {
                continue;
            }
            let Ok(f) = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(e.path()) else {
                continue;
            };
            let Ok(m) = f.metadata() else { continue };
            if !m.is_file() || (m.uid() != me && m.uid() != 0) || m.len() > MAX_FILE {
                continue;
            }
            let mut text = String::new();
            if f.take(MAX_FILE).read_to_string(&mut text).is_ok() {
                out.push((name, text));
            }
        }
        out
    }

    /// Removes ended devices' files beyond [`KEEP_ENDED`] or older than [`RETAIN_ENDED`], and
    /// temporary files left by a crash. Returns how many files it removed.
    pub fn prune(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.path) else { return 0 };
        let now = SystemTime::now();
        let age = |m: &std::fs::Metadata| m.modified().ok().and_then(|t| now.duration_since(t).ok());
        let mut ended: Vec<(Duration, PathBuf)> = Vec::new();
        let mut removed = 0;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(m) = e.metadata() else { continue };
            if name.ends_with(".tmp") && age(&m).is_some_and(|a| a > STALE_TMP) {
                removed += std::fs::remove_file(e.path()).is_ok() as usize;
                continue;
            }
            if !name.ends_with(".counters") || !m.is_file() {
                continue;
            }
            let Ok(f) = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(e.path()) else {
                continue;
            };
            let mut text = String::new();
            if f.take(MAX_FILE).read_to_string(&mut text).is_err() {
                continue;
            }
            if !Header::parse(&text).running() {
                ended.push((age(&m).unwrap_or_default(), e.path()));
            }
        }
        ended.sort();
        for (i, (age, path)) in ended.into_iter().enumerate() {
            if i >= KEEP_ENDED || age > RETAIN_ENDED {
                removed += std::fs::remove_file(path).is_ok() as usize;
            }
        }
        removed
    }
}

/// The identifying lines of a counters file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Header {
    /// Process id.
    pub pid: Option<u32>,
    /// The process's start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub start: Option<u64>,
    /// `running` or `exited` as the device last wrote it.
    pub state: Option<String>,
}

/// Header lines of a counters file (the rest are counters).
pub const HEADER_KEYS: [&str; 6] = ["device", "ip", "netdev", "pid", "start", "state"];

impl Header {
    /// Reads the header lines of a counters file.
    pub fn parse(text: &str) -> Header {
        let mut h = Header::default();
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("pid", v)) => h.pid = v.parse().ok(),
                Some(("start", v)) => h.start = v.parse().ok(),
                Some(("state", v)) => h.state = Some(v.to_string()),
                _ => {}
            }
        }
        h
    }

    /// The device said it runs and its process is still the one that wrote the file (a pid
    /// reused by another process does not count).
    pub fn running(&self) -> bool {
        self.state.as_deref() == Some("running") && self.pid.is_some_and(|p| process_alive(p, self.start))
    }
}

/// The start time of process `pid` (clock ticks after boot), if it exists.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether process `pid` exists and, when `start` is known, started then.
pub fn process_alive(pid: u32, start: Option<u64>) -> bool {
    match (process_start(pid), start) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(s), Some(want)) => s == want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("softroce-rundir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        d
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id();
        let start = process_start(me).expect("own stat");
        assert!(process_alive(me, Some(start)));
        assert!(process_alive(me, None));
        assert!(!process_alive(me, Some(start + 1)), "a reused pid");
        assert!(!process_alive(u32::MAX - 1, None));
    }

    #[test]
    fn checks_refuse_links_files_and_group_writable_directories() {
        let d = temp_dir("check");
        assert!(check(&d).is_ok());
        let link = d.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(matches!(check(&link), Err(RunDirError::Symlink(_))));
        let file = d.join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(check(&file), Err(RunDirError::NotDirectory(_))));
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o770)).unwrap();
        assert!(matches!(check(&d), Err(RunDirError::Writable { mode: 0o770, .. })));
        let _ = std::fs::remove_file(&link);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn publish_never_writes_through_a_link() {
        let d = temp_dir("publish");
        let dir = RunDir { path: d.clone() };
        let victim = d.with_extension("victim");
        std::fs::write(&victim, "precious").unwrap();
        // A link planted at the published name and at the temporary name.
        std::os::unix::fs::symlink(&victim, d.join("x.counters")).unwrap();
        std::os::unix::fs::symlink(&victim, d.join(format!(".x.counters.{}.tmp", std::process::id())))
            .unwrap();
        dir.publish("x.counters", "pid 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let m = std::fs::symlink_metadata(d.join("x.counters")).unwrap();
        assert!(m.is_file() && m.mode() & 0o777 == 0o644);
        assert_eq!(dir.read_published(), vec![("x.counters".to_string(), "pid 1\n".to_string())]);
        // A reader does not follow a link either.
        std::os::unix::fs::symlink(&victim, d.join("y.counters")).unwrap();
        assert_eq!(dir.read_published().len(), 1);
        std::fs::remove_file(&victim).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn prune_keeps_running_devices_and_the_most_recent_ended_ones() {
        let d = temp_dir("prune");
        let dir = RunDir { path: d.clone() };
        let me = std::process::id();
        let start = process_start(me).unwrap();
        for i in 0..100 {
            dir.publish(&format!("ended-{i}.counters"), &format!("pid {me}\nstart {start}\nstate exited\n"))
                .unwrap();
            // Distinct modification times, oldest first.
            let t = SystemTime::now() - Duration::from_secs(300 - i);
            File::options()
                .write(true)
                .open(d.join(format!("ended-{i}.counters")))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        dir.publish("gone.counters", "pid 4294967294\nstate running\n").unwrap();
        dir.publish("reused.counters", &format!("pid {me}\nstart {}\nstate running\n", start + 1)).unwrap();
        dir.publish("live.counters", &format!("pid {me}\nstart {start}\nstate running\n")).unwrap();
        let old = d.join("ended-old.counters");
        dir.publish("ended-old.counters", &format!("pid {me}\nstate exited\n")).unwrap();
        File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(SystemTime::now() - RETAIN_ENDED * 2)
            .unwrap();
        std::fs::write(d.join(".stale.tmp"), "").unwrap();
        File::options()
            .write(true)
            .open(d.join(".stale.tmp"))
            .unwrap()
            .set_modified(SystemTime::now() - STALE_TMP * 2)
            .unwrap();
        dir.prune();
        let mut left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert!(left.contains(&"live.counters".to_string()));
        assert!(!left.contains(&"ended-old.counters".to_string()), "older than RETAIN_ENDED");
        assert!(!left.contains(&".stale.tmp".to_string()));
        // The crashed process's and the reused pid's files are ended devices too, and the
        // newest: kept, with the 62 most recent of the 100.
        assert!(left.contains(&"gone.counters".to_string()) && left.contains(&"reused.counters".to_string()));
        assert_eq!(left.len(), KEEP_ENDED + 1, "{left:?}");
        assert!(
            left.contains(&"ended-99.counters".to_string())
                && !left.contains(&"ended-37.counters".to_string())
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
