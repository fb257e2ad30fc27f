//! The object verbs from C, as applications call them (`tests/c/objects.c`, built against the
//! installed headers so the inline `ibv_post_send`/`ibv_poll_cq`/`ibv_req_notify_cq` go
//! through our ops slots): two RC QPs on one device, a sender thread posting SEND with
//! immediate while the main thread polls (every message exactly once, in order), an event
//! thread blocked in `ibv_get_cq_event`, completion channel semantics (pollable fd,
//! `O_NONBLOCK`/`EAGAIN`, one event per arm, `EBUSY` while used), RDMA WRITE with an rkey,
//! `pthread_cancel` of a thread blocked in `ibv_get_cq_event`, the extended CQ
//! (`ibv_start_poll` and the readers) with the new post API (`ibv_wr_*`), and the errno of bad
//! input.

mod common;

use std::process::Command;

use common::*;

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key} ");
    out.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no line {key:?} in:\n{out}"))
}

#[test]
fn object_verbs_from_c() {
    if !require("object_verbs_from_c", C_BUILD, C_BUILD_PACKAGES) {
        return;
    }
    let dir = lib_dir("objects");
    let exe = build_c("objects", &dir);
    let o = run_with(&dir, Command::new(&exe).arg("softroce0").env("SOFTROCE_DEVICES", addr()));
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let (einval, ebusy) = (libc::EINVAL, libc::EBUSY);
    assert_eq!(line(&out, "pd"), "1");
    // Bad input gets the real library's (rxe's) errno.
    assert_eq!(line(&out, "reg_mr_remote_write_without_local"), format!("0 errno {einval}"));
    assert_eq!(line(&out, "reg_mr_null_pd"), format!("0 errno {einval}"));
    for k in ["create_cq_zero", "create_cq_huge", "create_cq_vector", "create_qp_too_deep"] {
        assert_eq!(line(&out, k), format!("0 errno {einval}"), "{k}");
    }
    assert_eq!(line(&out, "create_qp_xrc"), format!("0 errno {}", libc::EOPNOTSUPP));
    for k in ["dealloc_pd_null", "dereg_mr_null", "destroy_cq_null", "destroy_qp_null"] {
        assert_eq!(line(&out, k), einval.to_string(), "{k}");
    }
    assert_eq!(line(&out, "mr"), "1 1 addr_ok 1");
    assert_eq!(line(&out, "cq"), "1 1 cqe_ok 1");
    assert_eq!(line(&out, "destroy_busy_channel"), ebusy.to_string());
    assert_eq!(line(&out, "qp"), "1 1");
    assert_eq!(line(&out, "post_send_reset"), format!("{einval} bad_ok 1"));
    assert_eq!(line(&out, "modify_reset_to_rts"), einval.to_string());
    assert_eq!(line(&out, "connect"), "0 0");
    assert_eq!(line(&out, "query_qp"), "0 state 3 dest_ok 1 mtu 3 recv_cq_ok 1");
    assert_eq!(line(&out, "transfer"), "recvd 2000 sent 125 errors 0 bad_data 0 event 1");
    assert_eq!(line(&out, "cq_event_nonblock"), format!("-1 errno {}", libc::EAGAIN));
    assert_eq!(line(&out, "channel_poll_idle"), "0");
    assert_eq!(line(&out, "channel_poll_ready"), "1");
    assert_eq!(line(&out, "cq_event_once"), "0 -1 cq_ok 1", "one event per arm");
    assert_eq!(
        line(&out, "solicited_only"),
        "plain_recv 1 idle 0 ready 1 event 0",
        "ibv_req_notify_cq(cq, 1) fires for the solicited receive only"
    );
    assert_eq!(line(&out, "rdma_write"), "1 status 0 opcode 1 data_ok 1");
    assert_eq!(
        line(&out, "dereg_bound"),
        "bind 0 done 1 status 0 dereg 22 dealloc 0 dereg_after 0",
        "ibv_dereg_mr with a window bound: EINVAL"
    );
    assert_eq!(line(&out, "cq_ex_timestamp"), format!("0 errno {}", libc::EOPNOTSUPP));
    assert_eq!(line(&out, "qp_ex"), "1 1 1 to_qp_ex_plain_null 1");
    assert_eq!(line(&out, "connect_ex"), "0 0");
    assert_eq!(line(&out, "wr_complete"), "0");
    assert_eq!(line(&out, "poll_ex"), "seen 2 send_ok 1 recv_ok 1");
    assert_eq!(line(&out, "destroy_ex"), "0 0 0 0");
    assert_eq!(line(&out, "cancelled"), "1 cleanup_ran 1");
    assert_eq!(line(&out, "destroy"), "0 0 0 0 0 0 0 0 0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Verbs arguments as kernel rxe answers them (tests/c/verbsargs.c, whose every check also
/// passes on kernel rxe in the rig's guest; the differences the conformance probe found):
/// objects in use are `EBUSY`, memory registration refuses what the kernel refuses and takes
/// unaligned regions, the QP state table, the AV's port, P_Key queries past the table.
#[test]
fn verbs_arguments_as_kernel_rxe() {
    if !require("verbs_arguments_as_kernel_rxe", C_BUILD, C_BUILD_PACKAGES) {
        return;
    }
    let dir = lib_dir("verbsargs");
    let exe = build_c("verbsargs", &dir);
    let o = run_with(&dir, Command::new(&exe).env("SOFTROCE_DEVICES", addr()));
    let out = text(&o);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{out}");
    for what in ["port", "memory-regions", "qp-states", "objects-in-use"] {
        assert!(out.contains(&format!("ok {what}\n")), "{what}:\n{out}");
    }
}
