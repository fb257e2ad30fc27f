//! Fault injection: a seeded, reproducible faulty network under any program.
//!
//! A device opened with a fault SPEC (`SOFTROCE_FAULTS=SPEC` in the environment,
//! [`DeviceConfig::faults`](crate::verbs::DeviceConfig::faults) in Rust, `--faults SPEC` on
//! every `softroce` tool) loses, duplicates, corrupts, reorders and delays the packets it
//! sends and receives, can go dark for a while (`blackhole=T+D`) and can refuse SENDs with
//! RNR NAKs (`rnr=K`). The faults act on the real packets below the transport, so the
//! transports recover — or fail — exactly as they do on a bad network.
//!
//! This module is the pure part: the [`spec`] parser and the [`fate()`] of a packet, a function
//! of the seed and of the packet's identity only. The verbs layer wraps the device's packet
//! backend in a decorator that applies them (`engine::backend::faulty`), keeps the `fault_*`
//! counters and prints the summary line. docs/faults.md has the recipes,
//! docs/design/faults.md the design.

pub mod fate;
pub mod spec;

pub use fate::{Fate, PacketKey, Tracker, fate};
pub use spec::{Blackhole, FaultDir, FaultSpec, FaultSpecError};

/// The SPEC for devices whose configuration does not name one: what [`set_default`] set,
/// else `SOFTROCE_FAULTS` (read at every call).
pub fn default_spec() -> Option<String> {
    match PROCESS_DEFAULT.lock().clone() {
        Some(s) => Some(s),
        None => std::env::var("SOFTROCE_FAULTS").ok(),
    }
}

/// Sets the SPEC every device opened from now on gets by default, in place of
/// `SOFTROCE_FAULTS` (the tools' `--faults`); `None` goes back to the environment.
pub fn set_default(spec: Option<String>) {
    *PROCESS_DEFAULT.lock() = spec;
}

static PROCESS_DEFAULT: parking_lot::Mutex<Option<String>> = parking_lot::Mutex::new(None);
