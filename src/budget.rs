//! Token budgets per provider (docs/behaviour.md section 15): at most `tokens` (input and
//! output) per window; a provider whose window is spent is skipped (`budget_exhausted`) until
//! the window rolls over.
//!
//! Planning asks one small interface, [`Budgets`], what is left; the usage counting makes one
//! call, [`spend`], when an answer's usage is known. Today's store is this Envoy's shared data
//! ([`SharedBudgets`]: every worker of one Envoy, exact under concurrency as the breaker is);
//! a fleet-wide store (a rate-limit service counting tokens as hits) can take its place
//! without touching planning.
//!
//! Windows are aligned to the Unix epoch (a `24h` window rolls over at 00:00 UTC), so every
//! worker and every replica agrees on when one ends.
//!
//! # Record (`llm_failover.budget.<provider>`, 16 bytes, little-endian)
//! ```text
//! offset  size  field
//!      0     8  end of the window the count is for (ms since the epoch)
//!      8     8  tokens spent in that window
//! ```
//! Anything else reads as nothing spent. A record for another window (it rolled over, or the
//! window's length changed) reads as nothing spent too.

pub use crate::config::Budget;
use crate::config::Provider;
use crate::health::{ensure_key, update_key, Step};
use crate::host::{Clock, SharedStore};
use crate::usage::Usage;
use crate::wire::with_key;

const KEY_PREFIX: &str = "llm_failover.budget.";
const RECORD_LEN: usize = 16;

/// What is left of a budget now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// Tokens spent in the current window (may pass the budget: requests already running
    /// when it was crossed finish, and count).
    pub spent: u64,
    /// Tokens left (0 when spent).
    pub tokens: u64,
    /// When the window rolls over (ms since the epoch).
    pub resets_at_ms: u64,
}

impl Left {
    pub fn exhausted(&self) -> bool {
        self.tokens == 0
    }
}

/// Where budgets are counted. Planning asks only [`Budgets::left`]; the usage counting calls
/// [`Budgets::spend`] (through [`spend`]) once per answer.
pub trait Budgets {
    /// What is left of `provider`'s `budget` now.
    fn left(&self, provider: &str, budget: &Budget) -> Left;
    /// Counts an answer's `tokens` against `provider`'s `budget` now.
    fn spend(&self, provider: &str, budget: &Budget, tokens: u64);
}

/// The usage counting's one call when an answer's usage is known (the answer the caller got;
/// failed attempts cost nothing): counts its tokens against the provider's budget, if it has
/// one.
pub fn spend(budgets: &dyn Budgets, provider: &Provider, usage: &Usage) {
    if let Some(budget) = &provider.budget {
        budgets.spend(&provider.name, budget, usage.total());
    }
}

/// The stored count: (window end, spent).
fn decode(bytes: &[u8]) -> (u64, u64) {
    let at = |i: usize| {
        bytes
            .get(i..i + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, u64::from_le_bytes)
    };
    if bytes.len() == RECORD_LEN {
        (at(0), at(8))
    } else {
        (0, 0)
    }
}

fn encode(end: u64, spent: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(RECORD_LEN);
    b.extend_from_slice(&end.to_le_bytes());
    b.extend_from_slice(&spent.to_le_bytes());
    b
}

/// What `bytes` (a stored record, if any) leave of `budget` at `now`.
fn left_of(bytes: Option<&[u8]>, budget: &Budget, now: u64) -> Left {
    let end = budget.window_end(now);
    let (stored_end, spent) = bytes.map_or((0, 0), decode);
    let spent = if stored_end == end { spent } else { 0 };
    Left {
        spent,
        tokens: budget.tokens.saturating_sub(spent),
        resets_at_ms: end,
    }
}

/// Budgets in this Envoy's shared data: one read per budgeted provider planning considers,
/// one compare-and-swap per answer.
pub struct SharedBudgets<'a> {
    pub store: &'a dyn SharedStore,
    pub clock: &'a dyn Clock,
}

impl SharedBudgets<'_> {
    /// Creates the provider's record when none exists (configure time: Envoy's shared data
    /// cannot compare-and-swap on a key that does not exist yet).
    pub fn ensure_record(&self, provider: &str) {
        let record = encode(0, 0);
        with_key(KEY_PREFIX, provider, |key| {
            ensure_key(self.store, key, &record)
        });
    }
}

impl Budgets for SharedBudgets<'_> {
    fn left(&self, provider: &str, budget: &Budget) -> Left {
        let now = self.clock.now_ms();
        with_key(KEY_PREFIX, provider, |key| {
            let stored = self.store.get(key);
            left_of(stored.as_ref().map(|(b, _)| b.as_slice()), budget, now)
        })
    }

    fn spend(&self, provider: &str, budget: &Budget, tokens: u64) {
        if tokens == 0 {
            return;
        }
        with_key(KEY_PREFIX, provider, |key| {
            update_key(self.store, self.clock, key, |bytes, now| {
                let left = left_of(bytes.as_deref(), budget, now);
                let spent = left.spent.saturating_add(tokens);
                Step::Write(encode(left.resets_at_ms, spent), ())
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{ManualClock, MemoryStore};

    const BUDGET: Budget = Budget {
        tokens: 100,
        window_ms: 10_000,
    };

    #[test]
    fn a_budget_rolls_over_at_its_window_end() {
        let store = MemoryStore::default();
        let clock = ManualClock::at(12_000);
        let b = SharedBudgets {
            store: &store,
            clock: &clock,
        };
        b.ensure_record("p");
        assert_eq!(
            b.left("p", &BUDGET),
            Left {
                spent: 0,
                tokens: 100,
                resets_at_ms: 20_000
            }
        );
        b.spend("p", &BUDGET, 60);
        clock.advance(7_999);
        assert_eq!(
            b.left("p", &BUDGET),
            Left {
                spent: 60,
                tokens: 40,
                resets_at_ms: 20_000
            }
        );
        // A request already running when the budget was crossed counts in full.
        b.spend("p", &BUDGET, 60);
        let spent = b.left("p", &BUDGET);
        assert!(spent.exhausted());
        assert_eq!((spent.spent, spent.tokens), (120, 0));
        // The next window starts empty; spending there forgets the last one.
        clock.advance(1);
        assert_eq!(
            b.left("p", &BUDGET),
            Left {
                spent: 0,
                tokens: 100,
                resets_at_ms: 30_000
            }
        );
        b.spend("p", &BUDGET, 5);
        assert_eq!(b.left("p", &BUDGET).spent, 5);
        // Another window length is another window; garbage reads as nothing spent.
        let longer = Budget {
            tokens: 100,
            window_ms: 60_000,
        };
        assert_eq!(b.left("p", &longer).spent, 0);
        store.set("llm_failover.budget.q", b"junk", None).unwrap();
        assert_eq!(b.left("q", &BUDGET).spent, 0);
    }

    #[test]
    fn spend_counts_the_answers_input_and_output_only_for_a_provider_with_a_budget() {
        let config = crate::config::Config::from_json(
            br#"{"providers":[{"name":"a","budget":{"tokens":100,"window":"10s"}},{"name":"b"}],
                "chains":[{"name":"c","providers":["a","b"]}]}"#,
            &|_| None,
        )
        .unwrap();
        let store = MemoryStore::default();
        let clock = ManualClock::at(1_000);
        let b = SharedBudgets {
            store: &store,
            clock: &clock,
        };
        let usage = Usage {
            input: 30,
            output: 12,
            cached_input: 20,
        };
        for p in &config.providers {
            spend(&b, p, &usage);
        }
        assert_eq!(b.left("a", &BUDGET).spent, 42);
        assert_eq!(store.get("llm_failover.budget.b"), None);
    }

    #[test]
    #[cfg(not(target_arch = "wasm32"))] // no threads in wasm32-wasip1
    fn concurrent_spending_counts_exactly() {
        let store = MemoryStore::default();
        let clock = ManualClock::at(1_000);
        let budget = Budget {
            tokens: 1_000_000,
            window_ms: 60_000,
        };
        SharedBudgets {
            store: &store,
            clock: &clock,
        }
        .ensure_record("p");
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let b = SharedBudgets {
                        store: &store,
                        clock: &clock,
                    };
                    for _ in 0..250 {
                        b.spend("p", &budget, 7);
                    }
                });
            }
        });
        let b = SharedBudgets {
            store: &store,
            clock: &clock,
        };
        assert_eq!(b.left("p", &budget).spent, 8 * 250 * 7);
    }
}
