//! Requests in flight per provider across every worker, for `least_busy` groups
//! (docs/behaviour.md 2.10): one 4-byte count per provider in shared data, raised when an
//! attempt to it starts (the upstream role's request headers) and lowered when that attempt's
//! stream ends (`on_done`, whatever ended it: an answer, a reset, a timeout, the caller gone).
//! Only providers in a `least_busy` group are counted (`Config::counts_in_flight`): other
//! attempts pay nothing.

use crate::health::{ensure_key, update_key, Step};
use crate::host::{FixedClock, SharedStore};
use crate::wire::with_key;

const KEY_PREFIX: &str = "llm_failover.busy.";

fn decode(bytes: Option<&[u8]>) -> u32 {
    bytes
        .and_then(|b| b.get(..4)?.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// The provider's count created when none exists (configure time: Envoy's shared data cannot
/// compare-and-swap on a key that does not exist yet).
pub fn ensure_record(store: &dyn SharedStore, provider: &str) {
    with_key(KEY_PREFIX, provider, |key| {
        ensure_key(store, key, &0u32.to_le_bytes())
    });
}

/// Requests in flight to `provider` now: one shared-data read.
pub fn in_flight(store: &dyn SharedStore, provider: &str) -> u32 {
    with_key(KEY_PREFIX, provider, |key| {
        decode(store.get(key).as_ref().map(|(b, _)| b.as_slice()))
    })
}

/// An attempt to `provider` started (`up`) or ended: the count moves by one, never below 0.
pub fn count(store: &dyn SharedStore, provider: &str, up: bool) {
    with_key(KEY_PREFIX, provider, |key| {
        // The count needs no time: a fixed clock spares the host a clock read per try.
        update_key(store, &FixedClock(0), key, |bytes, _| {
            let n = decode(bytes.as_deref());
            let next = if up {
                n.saturating_add(1)
            } else {
                n.saturating_sub(1)
            };
            Step::Write(next.to_le_bytes().to_vec(), ())
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::MemoryStore;

    #[test]
    fn starts_and_ends_add_up_and_never_go_below_zero() {
        let store = MemoryStore::default();
        ensure_record(&store, "a");
        assert_eq!(in_flight(&store, "a"), 0);
        for _ in 0..3 {
            count(&store, "a", true);
        }
        count(&store, "a", false);
        assert_eq!((in_flight(&store, "a"), in_flight(&store, "b")), (2, 0));
        for _ in 0..5 {
            count(&store, "a", false);
        }
        assert_eq!(in_flight(&store, "a"), 0);
    }
}
