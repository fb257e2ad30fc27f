//! librdmacm's event semantics through our libraries, checked by a C program built against the
//! installed `<rdma/rdma_cma.h>` (tests/c/cmevents.c): non-blocking channels (EAGAIN),
//! REJECTED status 8 for a port nobody listens on and 28 with private data for an application
//! reject, CONNECT_REQUEST with a new id and the request's private data, ESTABLISHED with the
//! QP in RTS, DISCONNECTED on both sides, `rdma_destroy_id` waiting for an unacknowledged
//! event, a synchronous `rdma_connect` refused with ECONNREFUSED, `rdma_getaddrinfo` of a host
//! name, `rdma_get_devices`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn event_semantics() {
    if !require("event_semantics", &[SYSTEM_LIB, "/usr/include/rdma/rdma_cma.h"], "librdmacm-dev") {
        return;
    }
    let dir = lib_dir("events");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cmevents.c");
    let exe = dir.join("cmevents");
    let out = Command::new("gcc")
        .args(["-Wall", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs", "-lpthread"])
        .output()
        .expect("gcc");
    assert!(out.status.success(), "gcc: {}", text(&out));
    let ip = addr();
    let (ok, out) = finish(spawn(&dir, &ip, exe.to_str().unwrap(), &[&ip, &port()]), Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "{out}");
    for what in [
        "nonblocking",
        "rejected-no-listener",
        "rejected-by-application",
        "established",
        "disconnected-both-sides",
        "destroy-waits-for-ack",
        "sync-refused",
        "addrinfo-devices",
    ] {
        assert!(out.contains(&format!("ok {what}\n")), "{what}:\n{out}");
    }
}
