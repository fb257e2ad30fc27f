//! `rpoll`: rsockets and ordinary descriptors in one call (rdma-core's `rpoll`). Each round
//! takes what arrived on every rsocket and asks it which of the requested events hold
//! (`StreamSock::poll_events`), and polls the ordinary descriptors without
//! waiting; if nothing is ready it arms the rsockets and sleeps on their descriptors and the
//! ordinary ones together, then looks again.

use std::time::{Duration, Instant};

use libc::c_int;

use super::Errno;
use super::table::{self, Kind};
use super::wait;

/// `rpoll(fds, nfds, timeout)`: how many entries have events.
pub fn poll(fds: &mut [libc::pollfd], timeout: c_int) -> Result<c_int, Errno> {
    let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let socks: Vec<_> = fds.iter().map(|p| if p.fd >= 0 { table::lookup(p.fd) } else { None }).collect();
    loop {
        let mut ready = 0;
        let mut changed = false;
        let mut sleep_on: Vec<libc::pollfd> = Vec::new();
        let mut plain: Vec<usize> = Vec::new();
        for (i, p) in fds.iter_mut().enumerate() {
            p.revents = 0;
            let Some(sock) = &socks[i] else {
                if p.fd >= 0 {
                    plain.push(i);
                }
                continue;
            };
            let mut g = sock.inner.lock();
            match &mut *g {
                Kind::Stream(s) => {
                    changed |= s.progress();
                    p.revents = s.poll_events(p.events);
                    if p.revents == 0 && timeout != 0 {
                        sleep_on.extend(s.arm());
                    }
                }
                Kind::Datagram(d) => {
                    changed |= d.progress();
                    p.revents = d.poll_events(p.events);
                    if p.revents == 0 && timeout != 0 {
                        sleep_on.extend(d.arm());
                    }
                }
                Kind::Closed => p.revents = libc::POLLNVAL,
            }
            if p.revents != 0 {
                ready += 1;
            }
        }
        if changed {
            wait::signal();
        }
        let mut others: Vec<libc::pollfd> = plain
            .iter()
            .map(|&i| libc::pollfd { fd: fds[i].fd, events: fds[i].events, revents: 0 })
            .collect();
        if !others.is_empty() && wait::poll_now(&mut others) > 0 {
            for (&i, o) in plain.iter().zip(&others) {
                fds[i].revents = o.revents;
                if o.revents != 0 {
                    ready += 1;
                }
            }
        }
        let expired = deadline.is_some_and(|d| Instant::now() >= d);
        if ready > 0 || expired {
            return Ok(ready);
        }
        if timeout == 0 {
            super::calls::yield_cpu();
            return Ok(0);
        }
        sleep_on.extend(others.iter().map(|o| libc::pollfd { fd: o.fd, events: o.events, revents: 0 }));
        wait::sleep(&mut sleep_on, deadline);
    }
}
