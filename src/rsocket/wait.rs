//! Sleeping until something happens to an rsocket, and waking every sleeper when one thread
//! changes what the others are waiting for.
//!
//! A thread sleeps on descriptors: a CQ's completion channel, an event channel, a listener's
//! accept queue, plus ordinary descriptors in `rpoll`. When several threads use one socket
//! (one in `rrecv`, another in `rsend` or `rpoll`), the one that takes the completions also
//! takes the notification the others sleep on, and their state may have changed — so, as
//! rdma-core's `rs_poll_signal`, a thread that changed anything writes to one process-wide
//! eventfd every sleeper also waits on; they wake and look again. The last sleeper to leave
//! clears it, and nobody goes to sleep while it is set (they yield and look again instead),
//! so no wake-up is lost and none repeats forever.
//!
//! The sleep is the `ppoll` system call itself, not glibc's wrapper: no cancellation point
//! inside the library, so a `pthread_cancel` never unwinds through Rust frames (it takes
//! effect at the application's next cancellation point), and no `poll` that
//! `librspreload.so` would route back into `rpoll`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

struct Gate {
    sleepers: usize,
    signalled: bool,
}

static GATE: Mutex<Gate> = Mutex::new(Gate { sleepers: 0, signalled: false });
static SLEEPERS: AtomicUsize = AtomicUsize::new(0);

fn signal_fd() -> Option<RawFd> {
    static FD: OnceLock<Option<OwnedFd>> = OnceLock::new();
    FD.get_or_init(|| {
        // SAFETY: eventfd takes no pointers; a non-negative result is a descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        // SAFETY: as above.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    })
    .as_ref()
    .map(|f| f.as_raw_fd())
}

/// Wakes every thread sleeping in [`sleep`] (cheap when none is).
pub fn signal() {
    if SLEEPERS.load(Ordering::SeqCst) == 0 {
        return;
    }
    let mut g = GATE.lock();
    if g.sleepers > 0 && !g.signalled {
        g.signalled = true;
        if let Some(fd) = signal_fd() {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64.
            unsafe { libc::write(fd, (&raw const one).cast(), 8) };
        }
    }
}

/// `ppoll` without glibc (no cancellation point, no interposition).
fn raw_ppoll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> libc::c_long {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a live array of `fds.len()` pollfds; `tsp` is NULL or a live timespec;
    // no signal mask.
    unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null::<libc::sigset_t>(),
            8usize,
        )
    }
}

/// Polls `fds` once without sleeping (their `revents` are set); how many are ready.
pub fn poll_now(fds: &mut [libc::pollfd]) -> usize {
    if fds.is_empty() {
        return 0;
    }
    raw_ppoll(fds, Some(Duration::ZERO)).max(0) as usize
}

/// Sleeps until one of `fds` is ready or `timeout` passes (`None`: no limit), outside the
/// gate of [`sleep`] (for the service thread, which no [`signal`] concerns).
pub fn poll_until(fds: &mut [libc::pollfd], timeout: Option<Duration>) {
    raw_ppoll(fds, timeout);
}

/// Sleeps until one of `fds` is ready, another thread [`signal`]s, or `deadline` passes
/// (`None`: no limit); `fds`' `revents` are set. Returns at once (all `revents` 0) when a
/// signal is still being delivered: the caller looks at its state again either way. `EINTR`
/// is a wake-up like any other.
pub fn sleep(fds: &mut Vec<libc::pollfd>, deadline: Option<Instant>) {
    {
        let mut g = GATE.lock();
        if g.signalled {
            drop(g);
            std::thread::yield_now();
            return;
        }
        g.sleepers += 1;
        SLEEPERS.fetch_add(1, Ordering::SeqCst);
    }
    let sig = signal_fd();
    if let Some(fd) = sig {
        fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
    }
    let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    raw_ppoll(fds, timeout);
    if sig.is_some() {
        fds.pop();
    }
    let mut g = GATE.lock();
    g.sleepers -= 1;
    SLEEPERS.fetch_sub(1, Ordering::SeqCst);
    if g.sleepers == 0 && g.signalled {
        g.signalled = false;
        if let Some(fd) = sig {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a live u64 (non-blocking descriptor).
            unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_wakes_a_sleeper_and_a_deadline_ends_a_sleep() {
        let t = std::thread::spawn(|| {
            let t0 = Instant::now();
            let mut fds = Vec::new();
            sleep(&mut fds, Some(Instant::now() + Duration::from_secs(20)));
            t0.elapsed()
        });
        while SLEEPERS.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        signal();
        assert!(t.join().unwrap() < Duration::from_secs(10));
        assert!(!GATE.lock().signalled, "the last sleeper cleared the signal");
        // (In the same test: a signal would cut this sleep short.)
        let t0 = Instant::now();
        sleep(&mut Vec::new(), Some(Instant::now() + Duration::from_millis(30)));
        assert!(t0.elapsed() >= Duration::from_millis(25));
    }
}
