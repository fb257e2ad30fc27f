//! Asynchronous events from C (`tests/c/async.c`): a thread blocked in `ibv_get_async_event`
//! gets `IBV_EVENT_CQ_ERR` for an overflowed CQ while the program calls nothing else (the
//! engine delivers events as it raises them), and destroying the CQ succeeds once the event
//! was acknowledged.

mod common;

use std::process::Command;

use common::*;

#[test]
fn async_events_wake_a_blocked_waiter() {
    if !require("async_events_wake_a_blocked_waiter", C_BUILD, C_BUILD_PACKAGES) {
        return;
    }
    let dir = lib_dir("async");
    let exe = build_c("async", &dir);
    let o = run_with(&dir, Command::new(&exe).arg("softroce0").env("SOFTROCE_DEVICES", addr()));
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for (k, v) in [
        ("objects", "1"),
        ("connect", "0 0"),
        ("posted", "8"),
        ("woke_without_calls", "cq_err 1"),
        ("destroy", "0 0 0 0"),
    ] {
        let got = out.lines().find_map(|l| l.strip_prefix(&format!("{k} ")));
        assert_eq!(got, Some(v), "{k}:\n{out}");
    }
}
