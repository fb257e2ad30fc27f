//! What keeps a device's engines running: the handle every API object holds (through its
//! device), whose drop stops and joins the engine threads, and the inline progress of an
//! application thread on an engine's state.

use std::net::IpAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::engine::command::Command;
use crate::engine::shared::device::{DeviceShared, Pass};

/// One turn of inline progress on an engine's state, unless another thread holds it.
pub(crate) fn progress_on(core: &Mutex<crate::engine::core::Core>, recv: bool) -> Pass {
    let Some(mut c) = core.try_lock() else { return Pass::default() };
    c.progress_inline(recv)
}

pub(crate) struct EngineHandle {
    pub shared: Arc<DeviceShared>,
    pub threads: Mutex<Vec<JoinHandle<()>>>,
    /// The engines' state, by index, for application threads' inline progress (empty: off).
    pub cores: Vec<Arc<Mutex<crate::engine::core::Core>>>,
    /// The addresses and UDP port the engines bind (see [`closing`]).
    pub bound: Vec<(IpAddr, u16)>,
}

/// The addresses whose engines this process is closing. A device opened on one of them in
/// that moment (a thread opening a context as another closes the last one) waits until the
/// close has ended instead of finding the closing engine's sockets still there: with a shared
/// address it would join the closing device's group as a second member of its own process, and
/// then, as the first leaves, steer the group anew while its own engines were not yet
/// running to answer the probes (naps and probe rounds of up to hundreds of milliseconds,
/// holding up every open after it).
pub(crate) mod closing {
    use std::net::IpAddr;
    use std::time::{Duration, Instant};

    use parking_lot::{Condvar, Mutex};

    static CLOSING: Mutex<Vec<(IpAddr, u16)>> = Mutex::new(Vec::new());
    static ENDED: Condvar = Condvar::new();

    /// Marks `bound` as closing until the guard drops.
    pub(crate) fn begin(bound: &[(IpAddr, u16)]) -> Guard<'_> {
        CLOSING.lock().extend_from_slice(bound);
        Guard(bound)
    }

    pub(crate) struct Guard<'a>(&'a [(IpAddr, u16)]);

    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            let mut c = CLOSING.lock();
            for b in self.0 {
                if let Some(i) = c.iter().position(|x| x == b) {
                    c.swap_remove(i);
                }
            }
            drop(c);
            ENDED.notify_all();
        }
    }

    /// Waits (at most `patience`) until no engine of this process bound to one of `bound` is
    /// closing.
    pub(crate) fn wait(bound: &[(IpAddr, u16)], patience: Duration) {
        let until = Instant::now() + patience;
        let mut c = CLOSING.lock();
        while c.iter().any(|b| bound.contains(b)) {
            if ENDED.wait_until(&mut c, until).timed_out() {
                return;
            }
        }
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        let bound = std::mem::take(&mut self.bound);
        let _closing = closing::begin(&bound);
        for link in &self.shared.engines {
            let _ = link.cmd_tx.send(Command::Shutdown);
            let _ = link.waker.wake();
        }
        for t in self.threads.lock().drain(..) {
            if t.thread().id() != std::thread::current().id() {
                // (An engine thread itself may drop the last handle, through an object it
                // held for the application: it then stops on the Shutdown without joining
                // itself.)
                let _ = t.join();
            }
        }
        // Then the engines' sockets (inline progress holds their state too) and only then the
        // member's connections: the other members of a shared address see this one go when
        // its sockets have left the group, and renew their steering without it.
        self.cores.clear();
        if let Some(share) = &self.shared.share {
            share.close();
        }
        if let Some(f) = &self.shared.faults {
            f.report();
        }
    }
}
