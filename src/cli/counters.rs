//! `softroce counters`: the counters of running softroce devices, read from another process.
//!
//! Every device's engine publishes its counters — kernel rxe's hw_counters names, then the
//! receive path's own — in a small file under [`softroce::verbs::device::counters_dir`]
//! (`/run/softroce` as root), rewritten while the device is busy and at its end.

use std::collections::BTreeMap;

use super::common::exit;

/// Arguments of `softroce counters`.
#[derive(clap::Args, Debug)]
#[command(after_help = crate::cli::common::EXIT_CODES)]
pub struct CountersArgs {
    /// Only devices on this local IP address or device name
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Also devices whose process has ended (their final counters)
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

/// Reads every published counters file.
pub fn read_all() -> Vec<Published> {
    let dir = softroce::verbs::device::counters_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else { return vec![] };
    let mut out = Vec::new();
    for e in entries.flatten() {
        if e.path().extension().and_then(|x| x.to_str()) != Some("counters") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
        let mut p = Published { header: BTreeMap::new(), counters: Vec::new() };
        for line in text.lines() {
            let Some((k, v)) = line.split_once(' ') else { continue };
            match v.parse::<u64>() {
                Ok(n) if !matches!(k, "pid") => p.counters.push((k.to_string(), n)),
                _ => {
                    p.header.insert(k.to_string(), v.to_string());
                }
            }
        }
        // A process that died without saying so is shown as exited.
        let alive =
            p.header.get("pid").is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            p.header.insert("state".into(), "exited".into());
        }
        out.push(p);
    }
    out.sort_by(|a, b| {
        (a.header.get("ip"), a.header.get("pid")).cmp(&(b.header.get("ip"), b.header.get("pid")))
    });
    out
}

/// Runs `softroce counters`.
pub fn run(a: &CountersArgs) -> i32 {
    let shown: Vec<Published> = read_all()
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
