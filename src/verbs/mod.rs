//! The user-facing API, shaped like ibverbs.
//!
//! This module will hold the device, protection domain, memory region, completion queue, queue
//! pair and shared receive queue objects, and the I/O engine that drives the transport through
//! a backend (UDP socket, raw AF_PACKET, in-memory lossy link).
