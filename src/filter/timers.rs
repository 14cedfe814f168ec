//! Per-attempt timers of the upstream role (behaviour.md 5: in-place retry back-off, first-token
//! timeout, the budget's end). proxy-wasm gives one tick per root context, which every root
//! runs every [`super::TICK`] (health answers reach shared data then); this keeps the attempts'
//! deadlines and brings the tick forward to the nearest one, so a deadline is met to the
//! millisecond Envoy's timer allows, and puts the period back when none is left.

use super::envoy_host::EnvoyHost;
use crate::host::Clock;
use crate::roles::Upstream;
use proxy_wasm::hostcalls;
use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Duration;

pub type Shared = Rc<RefCell<Upstream<EnvoyHost>>>;

struct Entry {
    context_id: u32,
    at: u64,
    attempt: Weak<RefCell<Upstream<EnvoyHost>>>,
}

/// The deadlines of one root context's attempts (one wasm VM is one thread: no locking).
#[derive(Default)]
pub struct Timers {
    entries: RefCell<Vec<Entry>>,
    /// When the tick is set to fire next, if it is set.
    armed: RefCell<Option<u64>>,
}

impl Timers {
    /// Sets (or clears, `None`) the deadline of attempt `context_id`.
    pub fn set(&self, context_id: u32, at: Option<u64>, attempt: &Shared) {
        let mut entries = self.entries.borrow_mut();
        entries.retain(|e| e.context_id != context_id);
        if let Some(at) = at {
            entries.push(Entry {
                context_id,
                at,
                attempt: Rc::downgrade(attempt),
            });
            drop(entries);
            if self.armed.borrow().map_or(true, |armed| at < armed) {
                self.arm(Some(at));
            }
        }
    }

    /// The tick fired: wakes every attempt whose deadline passed, then sets the tick for the
    /// nearest deadline left (or back to its period).
    pub fn fire(&self) {
        let now = EnvoyHost.now_ms();
        let due: Vec<(u32, Weak<RefCell<Upstream<EnvoyHost>>>)> = {
            let mut entries = self.entries.borrow_mut();
            let (due, later): (Vec<Entry>, Vec<Entry>) =
                entries.drain(..).partition(|e| e.at <= now);
            *entries = later;
            due.into_iter().map(|e| (e.context_id, e.attempt)).collect()
        };
        for (context_id, attempt) in due {
            let Some(attempt) = attempt.upgrade() else {
                continue;
            };
            // The attempt's hostcalls act on its own stream; a stream already gone refuses.
            if hostcalls::set_effective_context(context_id).is_err() {
                continue;
            }
            let next = {
                let mut upstream = attempt.borrow_mut();
                upstream.on_timer();
                upstream.deadline()
            };
            if let Some(at) = next {
                self.entries.borrow_mut().push(Entry {
                    context_id,
                    at,
                    attempt: Rc::downgrade(&attempt),
                });
            }
        }
        let next = self.entries.borrow().iter().map(|e| e.at).min();
        self.arm(next);
    }

    fn arm(&self, at: Option<u64>) {
        *self.armed.borrow_mut() = at;
        let period = at.map_or(super::TICK, |at| {
            Duration::from_millis(at.saturating_sub(EnvoyHost.now_ms()).max(1)).min(super::TICK)
        });
        // Sets the tick of this VM's root context, whichever context calls it.
        let _ = hostcalls::set_tick_period(period);
    }
}
