//! The rsocket service thread (`softroce-rsocket`, started with the first listener or
//! keep-alive): it accepts connections as they are requested, whether or not the application
//! is in `raccept` (rdma-core's `listen_svc`), and sends keep-alives (`tcp_svc`).

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use libc::c_int;
use parking_lot::Mutex;

use super::table::{Kind, Socket};
use super::wait;

struct Svc {
    poke: UnixStream,
    /// Listeners and their event channel descriptors.
    listeners: Mutex<Vec<(Weak<Socket>, c_int)>>,
    /// Sockets with keep-alives: the next time, the period.
    keepalives: Mutex<Vec<(Weak<Socket>, Instant, Duration)>>,
}

fn svc() -> Option<&'static Svc> {
    static SVC: OnceLock<Option<Svc>> = OnceLock::new();
    SVC.get_or_init(|| {
        let (tx, rx) = UnixStream::pair().ok()?;
        tx.set_nonblocking(true).ok()?;
        rx.set_nonblocking(true).ok()?;
        let spawned = std::thread::Builder::new().name("softroce-rsocket".into()).spawn(move || run(rx));
        spawned.ok()?;
        Some(Svc { poke: tx, listeners: Mutex::new(Vec::new()), keepalives: Mutex::new(Vec::new()) })
    })
    .as_ref()
}

fn poke(s: &Svc) {
    let _ = std::io::Write::write(&mut &s.poke, &[1]);
}

/// Accepts `listener`'s requests from now on; false if the thread could not start.
pub fn add_listener(listener: &Arc<Socket>, chan_fd: c_int) -> bool {
    let Some(s) = svc() else { return false };
    s.listeners.lock().push((Arc::downgrade(listener), chan_fd));
    poke(s);
    true
}

/// Stops accepting for listener `fd` (before it closes).
pub fn remove_listener(fd: c_int) {
    let Some(s) = svc() else { return };
    s.listeners.lock().retain(|(w, _)| w.upgrade().is_some_and(|l| l.fd != fd));
    poke(s);
}

/// Keep-alives for `sock` every `period` (`None`: none).
pub fn set_keepalive(sock: &Arc<Socket>, period: Option<Duration>) -> bool {
    let Some(s) = svc() else { return false };
    let mut k = s.keepalives.lock();
    k.retain(|(w, _, _)| w.upgrade().is_some_and(|x| !Arc::ptr_eq(&x, sock)));
    if let Some(p) = period {
        k.push((Arc::downgrade(sock), Instant::now() + p, p));
    }
    drop(k);
    poke(s);
    true
}

fn run(poke_rx: UnixStream) {
    // (Waits until the thread that started this one has finished making the service.)
    let Some(s) = svc() else { return };
    loop {
        let (ls, next) = {
            let mut l = s.listeners.lock();
            l.retain(|(w, _)| w.strong_count() > 0);
            let mut k = s.keepalives.lock();
            k.retain(|(w, _, _)| w.strong_count() > 0);
            (l.clone(), k.iter().map(|x| x.1).min())
        };
        let pfd = |fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let mut fds: Vec<libc::pollfd> = vec![pfd(poke_rx.as_raw_fd())];
        fds.extend(ls.iter().map(|(_, fd)| pfd(*fd)));
        let timeout = next.map(|t| t.saturating_duration_since(Instant::now()));
        if timeout != Some(Duration::ZERO) {
            wait::poll_until(&mut fds, timeout);
        }
        let mut sink = [0u8; 64];
        while (&poke_rx).read(&mut sink).is_ok_and(|n| n > 0) {}
        for ((w, _), f) in ls.iter().zip(&fds[1..]) {
            if f.revents == 0 {
                continue;
            }
            let Some(l) = w.upgrade() else { continue };
            let new = match &mut *l.inner.lock() {
                Kind::Stream(st) => st.accept_pending(),
                _ => 0,
            };
            if new > 0 {
                wait::signal();
            }
        }
        let now = Instant::now();
        let due: Vec<Arc<Socket>> = {
            let mut k = s.keepalives.lock();
            k.iter_mut()
                .filter(|x| x.1 <= now)
                .filter_map(|x| {
                    x.1 = now + x.2;
                    x.0.upgrade()
                })
                .collect()
        };
        for sock in due {
            if let Kind::Stream(st) = &mut *sock.inner.lock() {
                st.send_keepalive();
            }
        }
    }
}
