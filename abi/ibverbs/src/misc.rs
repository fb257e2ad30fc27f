//! The string helpers, rate conversions and fork calls.
//!
//! The strings and rate tables are part of the ABI: programs print them and parse nothing,
//! but test suites compare them. `tests/device_verbs.rs` checks every value against the
//! installed library.
//!
//! fork: the real `ibv_fork_init` marks registered memory `MADV_DONTFORK` so that hardware
//! DMA into pinned pages survives the parent's copy-on-write. softroce has no DMA — the engine
//! copies through the process's own mappings — so there is nothing to protect:
//! `ibv_fork_init` succeeds, `ibv_is_fork_initialized` says `IBV_FORK_UNNEEDED` (what the real
//! library says on kernels with copy-on-fork), and `ibv_dontfork_range`/`ibv_dofork_range`
//! succeed without `madvise`. What fork does break for a userspace stack is the runtime: see
//! `runtime.rs`.

use std::ffi::CStr;

use libc::{c_char, c_int, c_void, size_t};

use crate::ffi::*;

fn table(strs: &'static [&'static CStr], i: i64) -> *const c_char {
    usize::try_from(i).ok().and_then(|i| strs.get(i)).copied().unwrap_or(c"unknown").as_ptr()
}

/// `ibv_wc_status_str`.
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const S: &[&CStr] = &[
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    table(S, status as i64)
}

/// `ibv_node_type_str`.
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    const S: &[&CStr] = &[
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    table(S, node_type as i64)
}

/// `ibv_port_state_str`.
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    const S: &[&CStr] = &[c"no state change (NOP)", c"down", c"init", c"armed", c"active", c"active defer"];
    table(S, state as i64)
}

/// `ibv_event_type_str`.
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const S: &[&CStr] = &[
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    table(S, event as i64)
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s, Mb/s); -1 where the real library has none.
const RATES: &[(c_int, c_int, c_int)] = &[
    // (enum value, mult, mbps)
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s, -1 for none.
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`: `IBV_RATE_MAX` (0) for a multiple with no rate.
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES.iter().find(|r| r.1 == mult && mult > 0).map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps`: -1 for none.
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`: `IBV_RATE_MAX` (0) for a speed with no rate.
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

/// `ibv_fork_init`: 0 (nothing to do without DMA; see the module docs).
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`.
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}

/// `ibv_dontfork_range`: 0 (no `madvise` needed).
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: size_t) -> c_int {
    0
}

/// `ibv_dofork_range`: 0.
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: size_t) -> c_int {
    0
}
