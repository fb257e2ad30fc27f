//! What the handles of the verbs API share with the engines: one type per object (device,
//! completion queue, queue pair, shared receive queue, registered memory). A handle holds an
//! `Arc` of its object's shared part; the engines hold the same `Arc` and never a handle.

pub(crate) mod cq;
pub(crate) mod device;
pub(crate) mod memory;
pub(crate) mod qp;
pub(crate) mod srq;
