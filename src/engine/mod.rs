//! The engine layer: what runs below the verbs API and above the transport's state machines.
//!
//! A device's engines are threads that own every queue pair's state machine
//! ([`crate::transport`]) and move packets between them and a backend. Everything the device
//! does without the application lives here: the backends that carry packets, an address
//! shared with other processes' devices, admission and the junk filter, the receive pipeline
//! and the transmit path, timers, fault injection, the stall clock and the run directory
//! other processes read counters from. The verbs API ([`crate::verbs`]) sits on top and holds
//! handles; nothing here is an application's handle.
//!
//! - `shared`: what the API's handles share with the engines (a device's links to its engine
//!   threads, completion queues, queue pairs, registered memory).
//! - [`config`]: how a device is opened; [`error`]: the errors of the verbs API.
//! - `core`: the engine thread, its loop and one received datagram's way to its QP.
//! - [`backend`]: where packets go and come from (UDP sockets, `AF_PACKET`, an in-process
//!   network), and the fault-injecting decorator (`backend::faulty`).
//! - `share`: one address shared by the devices of several processes (steering, membership).
//! - `flood`: the junk flood watch; `stall`: how long the engine was kept from running;
//!   `injector`: a device's fault state, shared by its engines; [`pacer`]: how a polling
//!   thread yields the CPU; [`rundir`]: the per-device run directory.

pub mod backend;
pub(crate) mod command;
pub mod config;
pub(crate) mod core;
pub mod counters;
pub mod error;
pub(crate) mod flood;
pub(crate) mod handle;
pub(crate) mod injector;
pub mod pacer;
pub mod random;
pub mod rundir;
pub(crate) mod share;
pub(crate) mod shared;
pub(crate) mod stall;
