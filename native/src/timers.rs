//! The upstream role's per-attempt deadlines (in-place retry back-off, first-token timeout,
//! the budget's end: docs/behaviour.md section 5). proxy-wasm gives a root context a tick; a
//! dynamic module has no timer it can arm on a worker, but it can ask Envoy to run an event on
//! the filter's own worker from any thread (`scheduler_commit`). So one thread of the module's
//! own keeps every attempt's next deadline and, when it passes, commits the event; Envoy then
//! calls `on_http_filter_scheduled` on the worker, which wakes the attempt.
//!
//! The same thread commits each filter configuration's one-second tick ([`Tick`]) to Envoy's
//! main thread (`on_http_filter_config_scheduled`): a configuration's periodic work that needs
//! no worker (the downstream role's gauges read from shared data).

use crate::abi::{self, FilterEnvoy, Scheduler};
use std::sync::{Condvar, Mutex, Once};
use std::time::Duration;

struct Entry {
    at: u64,
    /// A scheduler Envoy made (a filter's or a configuration's; only committed while listed
    /// here), and how to commit to it.
    scheduler: usize,
    commit: unsafe extern "C" fn(Scheduler, u64),
    /// 0: once; else committed again this many milliseconds later.
    every: u64,
}

static ENTRIES: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static WAKE: Condvar = Condvar::new();
static START: Once = Once::new();

/// The event id the shell's scheduled hook is given (one kind of event).
pub const DEADLINE_EVENT: u64 = 1;

/// The event id of a configuration's tick.
pub const TICK_EVENT: u64 = 2;

/// Milliseconds since the Unix epoch (the roles' clock).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn entries() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    ENTRIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// One attempt's timer: its scheduler, made the first time it needs one.
#[derive(Default)]
pub struct Timer {
    scheduler: Option<usize>,
    deadline: Option<u64>,
}

impl Timer {
    /// Sets (or clears) the attempt's deadline, when it changed.
    pub fn set(&mut self, filter: FilterEnvoy, at: Option<u64>) {
        if at == self.deadline {
            return;
        }
        self.deadline = at;
        let scheduler = match (self.scheduler, at) {
            (Some(s), _) => s,
            (None, None) => return,
            (None, Some(_)) => {
                // SAFETY: a live filter pointer, on its worker thread.
                let s =
                    unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_new(filter) };
                if s.is_null() {
                    return;
                }
                self.scheduler = Some(s as usize);
                s as usize
            }
        };
        let mut list = entries();
        list.retain(|e| e.scheduler != scheduler);
        if let Some(at) = at {
            list.push(Entry {
                at,
                scheduler,
                commit: abi::envoy_dynamic_module_callback_http_filter_scheduler_commit,
                every: 0,
            });
            drop(list);
            wake();
        }
    }

    /// The attempt is gone: its deadline with it, then its scheduler.
    pub fn close(&mut self) {
        self.deadline = None;
        if let Some(scheduler) = self.scheduler.take() {
            entries().retain(|e| e.scheduler != scheduler);
            // SAFETY: made by `scheduler_new`, no longer listed, so never committed again.
            unsafe {
                abi::envoy_dynamic_module_callback_http_filter_scheduler_delete(
                    scheduler as Scheduler,
                )
            };
        }
    }

    /// The deadline fired (the thread took it off the list).
    pub fn fired(&mut self) {
        self.deadline = None;
    }
}

/// The thread runs (started the first time) and looks at its list again.
fn wake() {
    START.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("llm_failover_timers".into())
            .spawn(run);
    });
    WAKE.notify_one();
}

/// A filter configuration's tick: [`TICK_EVENT`] committed to its main-thread scheduler every
/// `period_ms` while it lives.
pub struct Tick {
    scheduler: usize,
}

impl Tick {
    /// Starts ticking `config` (on Envoy's main thread, while the configuration loads).
    pub fn start(config: abi::FilterConfigEnvoy, period_ms: u64) -> Option<Tick> {
        // SAFETY: Envoy's configuration pointer, in its config_new hook.
        let s =
            unsafe { abi::envoy_dynamic_module_callback_http_filter_config_scheduler_new(config) };
        if s.is_null() {
            return None;
        }
        let scheduler = s as usize;
        entries().push(Entry {
            at: now_ms() + period_ms,
            scheduler,
            commit: abi::envoy_dynamic_module_callback_http_filter_config_scheduler_commit,
            every: period_ms,
        });
        wake();
        Some(Tick { scheduler })
    }
}

impl Drop for Tick {
    fn drop(&mut self) {
        entries().retain(|e| e.scheduler != self.scheduler);
        // SAFETY: made by `config_scheduler_new`, no longer listed, so never committed again.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_scheduler_delete(
                self.scheduler as Scheduler,
            )
        };
    }
}

/// The timer thread: commits each passed deadline's event, sleeps until the next one.
fn run() {
    let mut list = entries();
    loop {
        let now = now_ms();
        let mut next = None::<u64>;
        list.retain_mut(|e| {
            if e.at <= now {
                let event = if e.every == 0 {
                    DEADLINE_EVENT
                } else {
                    TICK_EVENT
                };
                // SAFETY: listed, so its owner has not deleted it (deletion unlists first,
                // under this lock); commit only posts to the owner's thread.
                unsafe { (e.commit)(e.scheduler as Scheduler, event) };
                if e.every == 0 {
                    return false;
                }
                e.at = now + e.every;
            }
            next = Some(next.map_or(e.at, |n| n.min(e.at)));
            true
        });
        let wait = next.map_or(Duration::from_secs(1), |at| {
            Duration::from_millis(at.saturating_sub(now).max(1))
        });
        list = WAKE
            .wait_timeout(list, wait)
            .map(|(guard, _)| guard)
            .unwrap_or_else(|e| e.into_inner().0);
    }
}
