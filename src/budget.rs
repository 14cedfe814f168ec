//! Token budgets per provider and per caller (docs/behaviour.md section 15): at most `tokens`
//! (input and output) per window; a provider whose window is spent is skipped
//! (`budget_exhausted`) until the window rolls over, a caller whose window is spent is refused
//! (`429 budget_exhausted`, no attempt).
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
//! # Record (`llm_failover.budget.<name>`, 16 or 48 bytes, little-endian)
//! ```text
//! offset  size  field
//!      0     8  end of the window the count is for (ms since the epoch)
//!      8     8  tokens this Envoy spent in that window
//!  with the fleet's store (`crate::fleet`; the record is created 48 bytes long):
//!     16     8  of those, reported to the store (its answer came)
//!     24     8  of those, handed to a sync whose answer has not come
//!     32     8  the fleet's tokens left at its last answer
//!     40     8  the window end that figure is for (0: none yet)
//! ```
//! Anything else reads as nothing spent. A record for another window (it rolled over, or the
//! window's length changed) reads as nothing spent too.
//!
//! With the fleet's figure for this window, what is left is that figure minus what this Envoy
//! spent since its last answered report (docs/behaviour.md section 15).
//!
//! Budgets are counters keyed by a name: a provider's is its name, a caller's
//! [`caller_counter`]. [`counters`] lists every one the configuration has; the records, the
//! fleet's sync and the status page follow that list.

pub use crate::config::{caller_counter, Budget};
use crate::config::{Caller, Config, Provider};
use crate::health::{ensure_key, update_key, Step};
use crate::host::{Clock, SharedStore};
use crate::usage::Usage;
use crate::wire::with_key;

const KEY_PREFIX: &str = "llm_failover.budget.";
const RECORD_LEN: usize = 16;
const FLEET_RECORD_LEN: usize = 48;

/// One budget counter: its name (the record's and the fleet descriptor's) and its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub name: String,
    pub budget: Budget,
}

/// Every budget counter of the configuration, in order: the providers' (named by the
/// provider), then the callers' (named by [`caller_counter`]).
pub fn counters(config: &Config) -> Vec<Counter> {
    let providers = (config.providers.iter()).map(|p| (&p.name, p.budget));
    let callers = (config.callers.iter()).map(|c| (&c.counter, c.budget));
    (providers.chain(callers))
        .filter_map(|(name, budget)| {
            Some(Counter {
                name: name.clone(),
                budget: budget?,
            })
        })
        .collect()
}

/// What is left of a budget now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// Tokens spent in the current window (may pass the budget: requests already running
    /// when it was crossed finish, and count). With the fleet's figure: the fleet's.
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
    /// What is left of counter `name`'s `budget` now.
    fn left(&self, name: &str, budget: &Budget) -> Left;
    /// Counts an answer's `tokens` against counter `name`'s `budget` now.
    fn spend(&self, name: &str, budget: &Budget, tokens: u64);
}

/// The usage counting's one call when an answer's usage is known (the answer the caller got;
/// failed attempts cost nothing): counts its tokens against the provider's budget and the
/// caller's (a caller the file names), whichever has one.
pub fn spend(budgets: &dyn Budgets, provider: &Provider, caller: Option<&Caller>, usage: &Usage) {
    let tokens = usage.total();
    if let Some(budget) = &provider.budget {
        budgets.spend(&provider.name, budget, tokens);
    }
    if let Some((caller, budget)) = caller.and_then(|c| Some((c, c.budget.as_ref()?))) {
        budgets.spend(&caller.counter, budget, tokens);
    }
}

/// Whether an answer for `caller` from `provider` spends any budget (what [`spend`] would
/// count): the usage counting reads the clock only then.
pub fn spends(provider: &Provider, caller: Option<&Caller>) -> bool {
    provider.budget.is_some() || caller.is_some_and(|c| c.budget.is_some())
}

/// A stored record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Record {
    end: u64,
    spent: u64,
    /// The fleet's fields follow (a 48-byte record).
    fleet: bool,
    reported: u64,
    in_flight: u64,
    fleet_left: u64,
    fleet_end: u64,
}

impl Record {
    fn decode(bytes: &[u8]) -> Record {
        let at = |i: usize| {
            bytes
                .get(i..i + 8)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .map_or(0, u64::from_le_bytes)
        };
        match bytes.len() {
            RECORD_LEN => Record {
                end: at(0),
                spent: at(8),
                ..Record::default()
            },
            FLEET_RECORD_LEN => Record {
                end: at(0),
                spent: at(8),
                fleet: true,
                reported: at(16),
                in_flight: at(24),
                fleet_left: at(32),
                fleet_end: at(40),
            },
            _ => Record::default(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let fleet = [
            self.reported,
            self.in_flight,
            self.fleet_left,
            self.fleet_end,
        ];
        let fleet = if self.fleet { &fleet[..] } else { &[] };
        let mut out = Vec::with_capacity(RECORD_LEN + 8 * fleet.len());
        for field in [self.end, self.spent].iter().chain(fleet) {
            out.extend_from_slice(&field.to_le_bytes());
        }
        out
    }

    /// The record for the window ending at `end`: itself, or (another window) a fresh one.
    fn in_window(self, end: u64) -> Record {
        if self.end == end {
            self
        } else {
            Record {
                end,
                fleet: self.fleet,
                ..Record::default()
            }
        }
    }

    /// What it leaves of `budget` (the record is for the current window).
    fn left(&self, budget: &Budget) -> Left {
        let (spent, tokens) = if self.fleet && self.fleet_end == self.end {
            let unreported = self.spent.saturating_sub(self.reported);
            let tokens = self.fleet_left.saturating_sub(unreported);
            (budget.tokens.saturating_sub(tokens), tokens)
        } else {
            (self.spent, budget.tokens.saturating_sub(self.spent))
        };
        Left {
            spent,
            tokens,
            resets_at_ms: self.end,
        }
    }
}

/// What `bytes` (a stored record, if any) leave of `budget` at `now`.
/// A counter's spend handed to one sync (`SharedBudgets::take`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// The window it is for.
    pub end: u64,
    /// Tokens to report (0: the sync only reads).
    pub tokens: u64,
}

/// Budgets in this Envoy's shared data: one read per budgeted provider planning considers,
/// one compare-and-swap per answer.
pub struct SharedBudgets<'a> {
    pub store: &'a dyn SharedStore,
    pub clock: &'a dyn Clock,
}

impl SharedBudgets<'_> {
    /// Creates the counter's record when none exists (configure time: Envoy's shared data
    /// cannot compare-and-swap on a key that does not exist yet); with the fleet's store
    /// (`fleet`), in its longer form.
    pub fn ensure_record(&self, name: &str, fleet: bool) {
        let record = Record {
            fleet,
            ..Record::default()
        }
        .encode();
        with_key(KEY_PREFIX, name, |key| ensure_key(self.store, key, &record));
    }

    /// One compare-and-swap of the counter's record, for the window `budget` is in now.
    fn update<T>(&self, name: &str, budget: &Budget, f: impl Fn(&mut Record) -> T) -> Option<T> {
        with_key(KEY_PREFIX, name, |key| {
            update_key(self.store, self.clock, key, |bytes, now| {
                let read = (bytes.as_deref())
                    .map_or_else(Record::default, Record::decode)
                    .in_window(budget.window_end(now));
                let mut record = read;
                let out = f(&mut record);
                // Unchanged (a sync with nothing to report): no write, so a spend racing it
                // does not lose its compare-and-swap for nothing.
                if record == read {
                    return Step::Done(out);
                }
                Step::Write(record.encode(), out)
            })
        })
    }

    /// The fleet's sync takes what this Envoy spent and has not reported (nor handed to a sync
    /// still waiting): it is in flight until [`SharedBudgets::settle`]. Atomic, so two workers
    /// never report the same tokens. `None` when the record is not a fleet record.
    pub fn take(&self, name: &str, budget: &Budget) -> Option<Taken> {
        self.update(name, budget, |r| {
            r.fleet.then(|| {
                let tokens = r.spent.saturating_sub(r.reported + r.in_flight);
                r.in_flight += tokens;
                Taken { end: r.end, tokens }
            })
        })
        .flatten()
    }

    /// The sync's answer for what [`SharedBudgets::take`] gave it: the fleet's tokens left
    /// (`Some`: the taken tokens are reported), or none (the store failed: they are held and
    /// taken again by the next sync; `closed`: the budget counts as spent meanwhile). An
    /// answer for a window that has ended changes nothing.
    pub fn settle(
        &self,
        name: &str,
        budget: &Budget,
        taken: Taken,
        left: Option<u64>,
        closed: bool,
    ) {
        self.update(name, budget, |r| {
            if r.end != taken.end || !r.fleet {
                return;
            }
            r.in_flight = r.in_flight.saturating_sub(taken.tokens);
            match left {
                Some(left) => {
                    r.reported = r.reported.saturating_add(taken.tokens);
                    (r.fleet_left, r.fleet_end) = (left, r.end);
                }
                None if closed => (r.fleet_left, r.fleet_end) = (0, r.end),
                None => {}
            }
        });
    }

    /// What is left of the counter's budget, and the tokens this Envoy spent and has not
    /// reported (held while the store fails), from one read.
    pub fn left_and_unreported(&self, name: &str, budget: &Budget) -> (Left, u64) {
        let r = self.record(name, budget);
        (r.left(budget), r.spent.saturating_sub(r.reported))
    }

    /// The counter's record for the window `budget` is in now.
    fn record(&self, name: &str, budget: &Budget) -> Record {
        let now = self.clock.now_ms();
        with_key(KEY_PREFIX, name, |key| {
            let stored = self.store.get(key);
            (stored.as_ref())
                .map_or_else(Record::default, |(b, _)| Record::decode(b))
                .in_window(budget.window_end(now))
        })
    }
}

impl Budgets for SharedBudgets<'_> {
    fn left(&self, name: &str, budget: &Budget) -> Left {
        self.record(name, budget).left(budget)
    }

    fn spend(&self, name: &str, budget: &Budget, tokens: u64) {
        if tokens == 0 {
            return;
        }
        self.update(name, budget, |r| r.spent = r.spent.saturating_add(tokens));
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
        b.ensure_record("p", false);
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
    fn spend_counts_the_answers_input_and_output_against_the_provider_and_the_caller() {
        let config = crate::config::Config::from_json(
            br#"{"providers":[{"name":"a","budget":{"tokens":100,"window":"10s"}},{"name":"b"}],
                "chains":[{"name":"c","providers":["a","b"]}],"caller_header":"x-team",
                "callers":[{"name":"team-a","budget":{"tokens":50,"window":"10s"}},
                           {"name":"team-b"}]}"#,
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
        let team_a = config.caller(config.team(Some("team-a")));
        for p in &config.providers {
            spend(&b, p, team_a, &usage);
        }
        assert_eq!(b.left("a", &BUDGET).spent, 42);
        assert_eq!(store.get("llm_failover.budget.b"), None);
        // Both answers count against team-a's own budget, whichever provider served them.
        let caller_budget = config.callers[0].budget.unwrap();
        let left = b.left("caller:team-a", &caller_budget);
        assert_eq!((left.spent, left.tokens), (84, 0));
        assert!(left.exhausted());
        // A caller without a budget, another caller and no caller spend only the provider's.
        for caller in [Some("team-b"), Some("team-c"), None] {
            let team = config.caller(config.team(caller));
            assert!(!spends(&config.providers[1], team));
            assert!(spends(&config.providers[0], team));
            spend(&b, &config.providers[0], team, &usage);
        }
        assert_eq!(b.left("a", &BUDGET).spent, 42 * 4);
        assert_eq!(b.left("caller:team-a", &caller_budget).spent, 84);
        assert!(spends(&config.providers[1], team_a));
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
        .ensure_record("p", false);
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
