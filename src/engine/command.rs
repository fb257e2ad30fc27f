//! What application threads ask an engine to do, and how they wait for its answer.

use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::engine::counters::DeviceCounters;
use crate::engine::error::Result;
use crate::engine::shared::cq::CqShared;
use crate::engine::shared::qp::{QpAttrs, QpInfo, QpShared};
use crate::engine::shared::srq::{SrqAttr, SrqShared};
use crate::transport::Time;
use crate::transport::cm::CmEndpoint;

/// Requests from application threads.
pub(crate) enum Command {
    CreateQp {
        shared: Arc<QpShared>,
        send_cq: Arc<CqShared>,
        recv_cq: Arc<CqShared>,
        reply: Sender<()>,
    },
    ModifyQp {
        qpn: u32,
        attrs: QpAttrs,
        reply: Sender<Result<()>>,
    },
    QueryQp {
        qpn: u32,
        reply: Sender<Option<QpInfo>>,
    },
    DestroyQp {
        qpn: u32,
        reply: Sender<()>,
    },
    Counters(Sender<DeviceCounters>),
    CreateSrq {
        shared: Arc<SrqShared>,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
        reply: Sender<Result<()>>,
    },
    ModifySrq {
        srqn: u32,
        max_wr: Option<u32>,
        limit: Option<u32>,
        reply: Sender<Result<()>>,
    },
    QuerySrq {
        srqn: u32,
        reply: Sender<Option<SrqAttr>>,
    },
    DestroySrq {
        srqn: u32,
        reply: Sender<()>,
    },
    /// Runs a closure on the device's IB CM endpoint (the RDMA CM layer's commands).
    Cm(Box<CmCommand>),
    /// Resize a CQ once the work already posted has run as far as it can locally (so a UD
    /// send posted before the resize has its completion counted); with `cqe` `None`, only
    /// that (the other engines of a device with several, before one resizes).
    ResizeCq {
        cq: Arc<CqShared>,
        cqe: Option<usize>,
        reply: Sender<Result<()>>,
    },
    Shutdown,
}

/// A command run on the device's IB CM endpoint.
pub(crate) type CmCommand = dyn FnOnce(&mut CmEndpoint, Time) + Send;
