//! `softroce counters`: the counters of running softroce devices, read from another process.
//!
//! Every device's engine publishes its counters — kernel rxe's hw_counters names, then the
//! receive path's own — in a small file under [`softroce::verbs::device::counters_dir`]
//! (`/run/softroce` as root), rewritten while the device is busy and at its end. An ended
//! device's final counters stay for [`softroce::engine::rundir::RETAIN_ENDED`] (the
//! [`softroce::engine::rundir::KEEP_ENDED`] most recent ended devices).

use std::collections::BTreeMap;

use softroce::engine::rundir::{HEADER_KEYS, Header, RunDir, RunDirError};

use super::common::{CliError, exit, report};

/// Arguments of `softroce counters`.
#[derive(clap::Args, Debug)]
#[command(after_help = crate::cli::common::EXIT_CODES)]
pub struct CountersArgs {
    /// Only devices on this local IP address or device name
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Also devices that have ended (their final counters, kept 10 minutes; the last 64)
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Also counters that are zero
    #[arg(short = 'z', long)]
    pub zeros: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// One device's published counters.
#[derive(Debug, Clone)]
pub struct Published {
    /// Header fields (device, ip, netdev, pid, state).
    pub header: BTreeMap<String, String>,
    /// Counters in publication order.
    pub counters: Vec<(String, u64)>,
}

/// Reads every published counters file (of this user, or root's; see
/// [`softroce::engine::rundir`]).
pub fn read_all() -> Result<Vec<Published>, RunDirError> {
    let dir = RunDir::for_reading()?;
    let mut out = Vec::new();
    for (_, text) in dir.read_published() {
        let mut p = Published { header: BTreeMap::new(), counters: Vec::new() };
        for line in text.lines() {
            let Some((k, v)) = line.split_once(' ') else { continue };
            if HEADER_KEYS.contains(&k) {
                p.header.insert(k.to_string(), v.to_string());
            } else if let Ok(n) = v.parse::<u64>() {
                p.counters.push((k.to_string(), n));
            }
        }
        // A device whose process is gone (or whose pid now names another process) is shown as
        // exited.
        if !Header::parse(&text).running() {
            p.header.insert("state".into(), "exited".into());
        }
        out.push(p);
    }
    out.sort_by(|a, b| {
        (a.header.get("ip"), a.header.get("pid")).cmp(&(b.header.get("ip"), b.header.get("pid")))
    });
    Ok(out)
}

/// Runs `softroce counters`.
pub fn run(a: &CountersArgs) -> i32 {
    let all = match read_all() {
        Ok(all) => all,
        // No directory yet: no device has published anything.
        Err(RunDirError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => {
            return report("counters", &CliError::setup(format!("not reading the run directory: {e}")));
        }
    };
    let shown: Vec<Published> = all
        .into_iter()
        .filter(|p| a.all || p.header.get("state").map(String::as_str) == Some("running"))
        .filter(|p| {
            a.dev.as_ref().is_none_or(|d| {
                p.header.get("ip") == Some(d)
                    || p.header.get("device") == Some(d)
                    || p.header.get("netdev") == Some(d)
            })
        })
        .collect();
    if shown.is_empty() {
        // Nothing to show is an answer, not an error: say so and succeed (JSON: an empty list).
        let dir = softroce::verbs::device::counters_dir();
        if a.json {
            println!("[]");
        }
        eprintln!(
            "softroce counters: no {}softroce device found in {} (start one, or use --all for ended ones)",
            if a.all { "" } else { "running " },
            dir.display()
        );
        return exit::OK;
    }
    if a.json {
        let devs: Vec<serde_json::Value> = shown
            .iter()
            .map(|p| {
                let h = |k: &str| p.header.get(k).cloned().unwrap_or_default();
                let counters: serde_json::Map<String, serde_json::Value> =
                    p.counters.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
                serde_json::json!({
                    "device": h("device"),
                    "ip": h("ip"),
                    "netdev": h("netdev"),
                    "pid": h("pid").parse::<u64>().unwrap_or(0),
                    "state": h("state"),
                    "counters": counters,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(devs));
        return exit::OK;
    }
    for p in &shown {
        let h = |k: &str| p.header.get(k).cloned().unwrap_or_default();
        println!("{} {} ({}) pid {} {}", h("device"), h("ip"), h("netdev"), h("pid"), h("state"));
        for (k, v) in &p.counters {
            if *v != 0 || a.zeros {
                println!("    {k:<26} {v}");
            }
        }
    }
    exit::OK
}
