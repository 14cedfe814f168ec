//! The one read-modify-write loop behind every health update, with compare-and-swap so that
//! concurrent reports from every worker all count.

use super::Health;
use crate::host::{Clock, SetError, SharedStore};
use crate::wire::with_health_key;

/// Compare-and-swap attempts per update before giving up. 64 was not enough: 8 threads hammering
/// one record through a mutex-backed store starved a writer 64 times in a row about once in
/// 60 000 reports. A retry costs one read and one failed write (about a microsecond).
pub const MAX_CAS_ATTEMPTS: u32 = 1024;

/// What one pass of [`update_key`] decided.
pub enum Step<T> {
    /// Nothing to write: the answer is this.
    Done(T),
    /// Store these bytes; if that wins the race, the answer is this.
    Write(Vec<u8>, T),
}

/// After a lost compare-and-swap: spin a little, longer each time, so racing writers spread out
/// instead of colliding again in lockstep (no sleeping or yielding exists inside a proxy-wasm VM).
fn backoff(attempt: u32) {
    for _ in 0..(1u32 << attempt.min(10)) {
        std::hint::spin_loop();
    }
}

impl Health<'_> {
    /// [`update_key`] on the provider's health record.
    pub(super) fn update<T>(
        &self,
        provider: &str,
        step: impl FnMut(Option<Vec<u8>>, u64) -> Step<T>,
    ) -> Option<T> {
        with_health_key(provider, |key| {
            update_key(self.store, self.clock, key, step)
        })
    }
}

/// Stores `value` under `key` when nothing is stored there yet, and returns whether it did.
/// Call it at configure time: Envoy's shared data cannot compare-and-swap on a key that does
/// not exist yet (cas 0 means "no check"), so the first write must not race updates.
pub fn ensure_key(store: &dyn SharedStore, key: &str, value: &[u8]) -> bool {
    store.get(key).is_none() && store.set(key, value, None).is_ok()
}

/// The one read-modify-write loop behind every shared record's update (health, budgets):
/// `step` sees the stored bytes (`None` when the key was never written) and the time, and
/// either settles without writing or proposes new bytes, which are stored only if nobody wrote
/// in between (compare-and-swap); otherwise it runs again on what is there now. `None` after
/// `MAX_CAS_ATTEMPTS` lost races.
pub fn update_key<T>(
    store: &dyn SharedStore,
    clock: &dyn Clock,
    key: &str,
    mut step: impl FnMut(Option<Vec<u8>>, u64) -> Step<T>,
) -> Option<T> {
    for attempt in 0..MAX_CAS_ATTEMPTS {
        let (bytes, cas) = match store.get(key) {
            Some((bytes, cas)) => (Some(bytes), Some(cas)),
            None => (None, None),
        };
        match step(bytes, clock.now_ms()) {
            Step::Done(value) => return Some(value),
            Step::Write(new, value) => match store.set(key, &new, cas) {
                Ok(()) => return Some(value),
                Err(SetError::CasMismatch) => {}
                Err(SetError::Refused) => return None,
            },
        }
        backoff(attempt);
    }
    None
}
