//! Datagram rsockets (`SOCK_DGRAM`): not yet.

use std::net::SocketAddr;

use libc::c_int;

use super::table::{Defaults, Socket};
use crate::util::Errno;

/// A datagram rsocket.
pub struct DgramSock {
    fd: c_int,
    /// `rfcntl` flags.
    pub fd_flags: c_int,
}

impl DgramSock {
    /// `rsocket(domain, SOCK_DGRAM, 0)`.
    pub fn new(_domain: c_int, _d: &Defaults) -> Result<DgramSock, Errno> {
        Err(libc::ENOTSUP)
    }
    /// The socket's number.
    pub fn fd(&self) -> c_int {
        self.fd
    }
    /// `rbind`.
    pub fn bind(&mut self, _a: SocketAddr) -> Result<(), Errno> {
        Err(libc::ENOTSUP)
    }
    /// `rconnect`.
    pub fn connect(&mut self, _a: SocketAddr) -> Result<(), Errno> {
        Err(libc::ENOTSUP)
    }
    /// `rshutdown`.
    pub fn shutdown(&mut self) {}
    /// Takes what arrived.
    pub fn progress(&mut self) -> bool {
        false
    }
    /// `rpoll`'s view.
    pub fn poll_events(&mut self, _events: i16) -> i16 {
        0
    }
    /// Prepares a sleep.
    pub fn arm(&mut self) -> Vec<libc::pollfd> {
        Vec::new()
    }
    /// `rclose`.
    pub fn close(&mut self) {}
    /// `rgetsockname` / `rgetpeername`.
    pub fn name(&self, _peer: bool) -> Result<(Option<SocketAddr>, c_int), Errno> {
        Err(libc::ENOTSUP)
    }
    /// `rsetsockopt`.
    pub fn setsockopt(&mut self, _l: c_int, _n: c_int, _v: &[u8]) -> Result<(), Errno> {
        Err(libc::ENOTSUP)
    }
    /// `rgetsockopt`.
    pub fn getsockopt(&mut self, _l: c_int, _n: c_int) -> Result<Vec<u8>, Errno> {
        Err(libc::ENOTSUP)
    }
}

/// `rsendto`.
pub fn send(_s: &Socket, _d: &[u8], _f: c_int, _to: Option<SocketAddr>) -> Result<usize, Errno> {
    Err(libc::ENOTSUP)
}

/// `rrecvfrom`.
pub fn recv(_s: &Socket, _b: &mut [u8], _f: c_int) -> Result<(usize, Option<SocketAddr>), Errno> {
    Err(libc::ENOTSUP)
}
