//! The fleet acts as one (docs/behaviour.md section 15, docs/internals.md "The fleet's store"):
//! budgets and the breaker's failure counts shared by every Envoy replica through Envoy's
//! rate-limit service. Nothing here is on a request's path: planning reads the budget records
//! as it always does (`crate::budget`), and once per `fleet.sync` one worker per Envoy
//! ([`claim`]) reports what this Envoy spent and failed since its last report and reads back
//! what the fleet has left ([`start`], then [`finish`] with the service's answer). The glue
//! (`filter`) only dispatches the gRPC call and applies the [`Outcome`].
//!
//! Each budget counter (`budget::counters`) is one descriptor `[("budget", name)]` carrying
//! its limit and window as the service's limit override, with this Envoy's unreported spend as
//! its `hits_addend` (0: read only). With `breaker.fleet_failures`, each provider is one more,
//! `[("failures", provider)]`, carrying the failures counted here since the last report; the
//! fleet's count reaching the threshold opens the provider here ([`Health::open_for_fleet`]),
//! once per window.
//!
//! The store failing stops nothing: each Envoy goes on from the fleet's last figure minus its
//! own spend, holds what it could not report and reports it with the next answer (while its
//! window lasts); [`StoreState`] changes are logged once, counted, and shown on the status page.
//!
//! # Records (little-endian u64s)
//! - `llm_failover.fleet.sync`: when the next sync may start, the store's state (0 unknown,
//!   1 ok, 2 unavailable, 3 refuses the domain), since when, the last answer's time, the last
//!   attempt's time.
//! - `llm_failover.fleet.failures.<provider>`: failures counted here and not yet handed to a
//!   sync, failures handed to a sync still waiting, the end of the window this Envoy last
//!   opened the provider for.

pub mod wire;

use crate::budget::{self, Counter, SharedBudgets, Taken};
use crate::config::{Config, Fleet, WindowUnit};
use crate::health::{ensure_key, update_key, Health, Step};
use crate::host::{Clock, SharedStore};
use crate::wire::with_key;
use wire::{Descriptor, Status};

const SYNC_KEY: &str = "llm_failover.fleet.sync";
const FAILURES_PREFIX: &str = "llm_failover.fleet.failures.";

/// The descriptor keys.
pub const BUDGET_KEY: &str = "budget";
pub const FAILURES_KEY: &str = "failures";

/// The gRPC service and method the sync calls.
pub const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
pub const METHOD: &str = "ShouldRateLimit";

/// What the store did at the last sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum StoreState {
    /// No sync has ended yet.
    #[default]
    Unknown = 0,
    Ok = 1,
    /// Unreachable, slow past `fleet.timeout`, or answering errors.
    Unavailable = 2,
    /// It answered but does not know the domain (its config names no `domain: <ours>`).
    Refused = 3,
}

impl StoreState {
    fn of(n: u64) -> StoreState {
        match n {
            1 => StoreState::Ok,
            2 => StoreState::Unavailable,
            3 => StoreState::Refused,
            _ => StoreState::Unknown,
        }
    }

    /// The status page's word, and the `result` label of `llm_failover_fleet_sync_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreState::Unknown => "unknown",
            StoreState::Ok => "ok",
            StoreState::Unavailable => "unavailable",
            StoreState::Refused => "refused",
        }
    }

    /// The results a sync ends with, in the metric's order.
    pub const RESULTS: [StoreState; 3] =
        [StoreState::Ok, StoreState::Unavailable, StoreState::Refused];
}

/// The Envoy-wide sync record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncRecord {
    pub next_at: u64,
    pub state: StoreState,
    /// Since when the store is in `state` (ms since the epoch).
    pub since_ms: u64,
    /// The last answer (ms since the epoch; 0: none yet).
    pub last_ok_ms: u64,
    /// The last sync's end, answered or not.
    pub last_try_ms: u64,
}

fn u64_at(bytes: &[u8], i: usize) -> u64 {
    bytes
        .get(i * 8..i * 8 + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn encode(fields: &[u64]) -> Vec<u8> {
    fields.iter().flat_map(|f| f.to_le_bytes()).collect()
}

/// A failure record's step: writes `fields` unless the record already holds them (a sync with
/// nothing counted), so an attempt's failure racing the sync does not lose its swap for nothing.
fn write_changed<T>(before: &[u8], fields: &[u64], out: T) -> Step<T> {
    let after = encode(fields);
    if after == before {
        Step::Done(out)
    } else {
        Step::Write(after, out)
    }
}

impl SyncRecord {
    fn decode(bytes: &[u8]) -> SyncRecord {
        SyncRecord {
            next_at: u64_at(bytes, 0),
            state: StoreState::of(u64_at(bytes, 1)),
            since_ms: u64_at(bytes, 2),
            last_ok_ms: u64_at(bytes, 3),
            last_try_ms: u64_at(bytes, 4),
        }
    }

    fn encode(&self) -> Vec<u8> {
        encode(&[
            self.next_at,
            self.state as u64,
            self.since_ms,
            self.last_ok_ms,
            self.last_try_ms,
        ])
    }

    /// The record as stored now.
    pub fn read(store: &dyn SharedStore) -> SyncRecord {
        store
            .get(SYNC_KEY)
            .map(|(b, _)| SyncRecord::decode(&b))
            .unwrap_or_default()
    }
}

/// Creates the sync record and each provider's failure record (configure time: shared data
/// cannot compare-and-swap on a key that does not exist).
pub fn ensure_records(config: &Config, store: &dyn SharedStore) {
    ensure_key(store, SYNC_KEY, &SyncRecord::default().encode());
    if config.breaker.fleet_failures > 0 {
        for p in &config.providers {
            with_key(FAILURES_PREFIX, &p.name, |key| {
                ensure_key(store, key, &encode(&[0, 0, 0]))
            });
        }
    }
}

/// Whether this worker syncs now: the first worker of this Envoy whose tick comes once the
/// interval has passed claims it (compare-and-swap), so N workers make one call.
pub fn claim(fleet: &Fleet, store: &dyn SharedStore, clock: &dyn Clock) -> bool {
    let claimed = update_key(store, clock, SYNC_KEY, |bytes, now| {
        let mut r = bytes.as_deref().map(SyncRecord::decode).unwrap_or_default();
        if now < r.next_at {
            return Step::Done(false);
        }
        // A quarter of the interval early: ticks come a little late, and a sync that waits
        // for the next tick would wait a whole tick.
        r.next_at = now + fleet.sync_ms - fleet.sync_ms / 4;
        Step::Write(r.encode(), true)
    });
    claimed.unwrap_or(false)
}

/// Counts one failure of `provider` toward the fleet's breaker count (the upstream role, when
/// the local breaker counted it and `breaker.fleet_failures` is set).
pub fn count_failure(store: &dyn SharedStore, clock: &dyn Clock, provider: &str) {
    with_key(FAILURES_PREFIX, provider, |key| {
        update_key(store, clock, key, |bytes, _| {
            let b = bytes.unwrap_or_default();
            let fields = [u64_at(&b, 0) + 1, u64_at(&b, 1), u64_at(&b, 2)];
            Step::Write(encode(&fields), ())
        })
    });
}

/// One sync on its way: what it took from the records, and the request's bytes.
#[derive(Debug)]
pub struct Sync {
    budgets: Vec<(Counter, Taken)>,
    /// (provider, failures taken).
    failures: Vec<(String, u64)>,
    pub message: Vec<u8>,
}

/// Builds this Envoy's report: takes each counter's unreported spend and each provider's
/// unreported failures (they are in flight until [`finish`]). `None` when there is nothing
/// to sync (no budget, no fleet breaker count).
pub fn start(config: &Config, store: &dyn SharedStore, clock: &dyn Clock) -> Option<Sync> {
    let fleet = config.fleet.as_ref()?;
    let budgets = SharedBudgets { store, clock };
    // A counter the service cannot count (validation refuses one with the store on) is in
    // neither the request nor the answer's matching, so the two stay in step.
    let taken: Vec<(Counter, Taken)> = budget::counters(config)
        .into_iter()
        .filter_map(|c| {
            budget_descriptor(&c, 0)?;
            let t = budgets.take(&c.name, &c.budget)?;
            Some((c, t))
        })
        .collect();
    let failures = take_failures(config, store, clock);
    if taken.is_empty() && failures.is_empty() {
        return None;
    }
    let mut descriptors: Vec<Descriptor> = (taken.iter())
        .filter_map(|(c, t)| budget_descriptor(c, t.tokens))
        .collect();
    if let Some(unit) = WindowUnit::of(config.breaker.fleet_window_ms) {
        descriptors.extend(failures.iter().map(|(p, n)| Descriptor {
            key: FAILURES_KEY,
            value: p,
            limit: config.breaker.fleet_failures,
            unit,
            hits: *n,
        }));
    }
    let message = wire::encode_request(&fleet.domain, &descriptors);
    Some(Sync {
        budgets: taken,
        failures,
        message,
    })
}

/// A budget counter's descriptor reporting `hits`; `None` when the service cannot count it.
fn budget_descriptor(c: &Counter, hits: u64) -> Option<Descriptor<'_>> {
    Some(Descriptor {
        key: BUDGET_KEY,
        value: &c.name,
        limit: u32::try_from(c.budget.tokens).ok()?,
        unit: WindowUnit::of(c.budget.window_ms)?,
        hits,
    })
}

fn take_failures(
    config: &Config,
    store: &dyn SharedStore,
    clock: &dyn Clock,
) -> Vec<(String, u64)> {
    // No threshold, or a window the service cannot count (validation refuses it with the
    // store on): nothing is taken, so nothing waits for an answer that cannot come.
    if config.breaker.fleet_failures == 0
        || WindowUnit::of(config.breaker.fleet_window_ms).is_none()
    {
        return Vec::new();
    }
    (config.providers.iter())
        .map(|p| {
            let n = with_key(FAILURES_PREFIX, &p.name, |key| {
                update_key(store, clock, key, |bytes, _| {
                    let b = bytes.unwrap_or_default();
                    let (counted, in_flight) = (u64_at(&b, 0), u64_at(&b, 1));
                    write_changed(&b, &[0, in_flight + counted, u64_at(&b, 2)], counted)
                })
            });
            (p.name.clone(), n.unwrap_or(0))
        })
        .collect()
}

/// What one sync's end did, for the glue to log and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// How the sync ended (the metric's `result`).
    pub result: StoreState,
    /// The store's state before, when this sync changed it (one log line).
    pub changed_from: Option<StoreState>,
    /// Providers this Envoy opened because the fleet's failures reached the threshold.
    pub opened: Vec<String>,
    /// Tokens reported that the store had not heard of because it failed before.
    pub held_reported: u64,
    /// What to log (`log::Level`, line): a change of the store's state, providers opened.
    pub lines: Vec<(log::Level, String)>,
}

/// Ends a sync with the service's answer (`Some(bytes)`: a `RateLimitResponse`) or its failure
/// (`None`: a gRPC error, a timeout). Writes the fleet's figures into the budget records,
/// hands back what could not be reported, opens providers the fleet's failures reached the
/// threshold for, and records the store's state.
pub fn finish(
    config: &Config,
    store: &dyn SharedStore,
    clock: &dyn Clock,
    sync: Sync,
    answer: Option<&[u8]>,
) -> Outcome {
    let closed = config.fleet.as_ref().is_some_and(|f| f.closed);
    let statuses = answer.and_then(wire::decode_response);
    let expected = sync.budgets.len() + sync.failures.len();
    let result = match &statuses {
        Some(s) if s.len() == expected && s.iter().all(|s| s.limit.is_some()) => StoreState::Ok,
        Some(s) if s.len() == expected => StoreState::Refused,
        _ => StoreState::Unavailable,
    };
    let statuses = statuses
        .filter(|_| result == StoreState::Ok)
        .unwrap_or_default();
    let budgets = SharedBudgets { store, clock };
    let before = SyncRecord::read(store);
    let mut held_reported = 0;
    for (i, (c, taken)) in sync.budgets.iter().enumerate() {
        let left = statuses.get(i).map(|s| u64::from(s.remaining));
        if left.is_some() && before.state != StoreState::Ok && before.last_try_ms != 0 {
            held_reported += taken.tokens;
        }
        budgets.settle(&c.name, &c.budget, *taken, left, closed);
    }
    let failure_statuses = statuses.get(sync.budgets.len()..).unwrap_or_default();
    let opened = settle_failures(config, store, clock, &sync.failures, failure_statuses);
    let changed_from = record_state(store, clock, result);
    let mut lines = Vec::new();
    if let (Some(from), Some(f)) = (changed_from, &config.fleet) {
        let level = match result {
            StoreState::Refused => log::Level::Error,
            StoreState::Ok => log::Level::Info,
            _ => log::Level::Warn,
        };
        lines.push((level, change_line(f, from, result, held_reported)));
    }
    for provider in &opened {
        lines.push((log::Level::Warn, format!(
            "llm_failover: {provider}: the fleet's failures reached breaker.fleet_failures ({}): breaker open on this replica",
            config.breaker.fleet_failures
        )));
    }
    Outcome {
        result,
        changed_from,
        opened,
        held_reported,
        lines,
    }
}

/// Gives back what a sync took without an answer (its worker's VM goes away with the call in
/// flight, e.g. on a configuration change): the next sync of any worker reports it. The
/// store's state is left as it is.
pub fn hand_back(config: &Config, store: &dyn SharedStore, clock: &dyn Clock, sync: Sync) {
    let budgets = SharedBudgets { store, clock };
    for (c, taken) in &sync.budgets {
        budgets.settle(&c.name, &c.budget, *taken, None, false);
    }
    settle_failures(config, store, clock, &sync.failures, &[]);
}

/// Hands failures back when the store did not answer; otherwise opens each provider whose
/// fleet count reached the threshold, once per window.
fn settle_failures(
    config: &Config,
    store: &dyn SharedStore,
    clock: &dyn Clock,
    taken: &[(String, u64)],
    statuses: &[Status],
) -> Vec<String> {
    let health = Health::new(store, clock, &config.breaker, &config.dead_marks);
    let window = config.breaker.fleet_window_ms.max(1);
    let mut opened = Vec::new();
    for (i, (provider, n)) in taken.iter().enumerate() {
        let status = statuses.get(i);
        let reached = with_key(FAILURES_PREFIX, provider, |key| {
            update_key(store, clock, key, |bytes, now| {
                let b = bytes.unwrap_or_default();
                let (counted, in_flight, opened_end) =
                    (u64_at(&b, 0), u64_at(&b, 1), u64_at(&b, 2));
                let in_flight = in_flight.saturating_sub(*n);
                let end = (now / window + 1) * window;
                let Some(status) = status else {
                    // Not reported: counted again with the next sync.
                    return write_changed(&b, &[counted + n, in_flight, opened_end], false);
                };
                let reached = status.remaining == 0 && opened_end != end;
                let opened_end = if reached { end } else { opened_end };
                write_changed(&b, &[counted, in_flight, opened_end], reached)
            })
        });
        if reached == Some(true) && health.open_for_fleet(provider).is_some() {
            opened.push(provider.clone());
        }
    }
    opened
}

/// Writes the sync's result into the sync record; the state before when it changed.
fn record_state(
    store: &dyn SharedStore,
    clock: &dyn Clock,
    result: StoreState,
) -> Option<StoreState> {
    update_key(store, clock, SYNC_KEY, |bytes, now| {
        let mut r = bytes.as_deref().map(SyncRecord::decode).unwrap_or_default();
        let before = r.state;
        if before != result {
            (r.state, r.since_ms) = (result, now);
        }
        if result == StoreState::Ok {
            r.last_ok_ms = now;
        }
        r.last_try_ms = now;
        Step::Write(r.encode(), (before != result).then_some(before))
    })
    .flatten()
}

/// The log line for a change of the store's state.
pub fn change_line(fleet: &Fleet, from: StoreState, to: StoreState, held: u64) -> String {
    let what = match to {
        StoreState::Ok if held > 0 => {
            format!("answers again: budgets and breaker counts are the fleet's; reported {held} tokens held meanwhile")
        }
        StoreState::Ok => "answers: budgets and breaker counts are the fleet's".to_string(),
        StoreState::Unavailable => format!(
            "does not answer: each replica goes on from its own counts ({}), holding its spend to report later",
            if fleet.closed { "on_unavailable: closed, budgeted providers count as spent" } else { "on_unavailable: open" }
        ),
        StoreState::Refused => format!(
            "refuses domain {:?}: add `domain: {}` to the rate-limit service's config (docs/operations.md \"Several gateways\"); each replica counts alone meanwhile",
            fleet.domain, fleet.domain
        ),
        StoreState::Unknown => "unknown".to_string(),
    };
    format!(
        "llm_failover: fleet store (cluster {}) {what} (was {})",
        fleet.cluster,
        from.as_str()
    )
}

/// The status page's `fleet` section: the store's state, and per budget counter what is left
/// and what this Envoy holds unreported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub sync: SyncRecord,
    /// (counter, tokens left, tokens this Envoy has not reported).
    pub budgets: Vec<(Counter, budget::Left, u64)>,
}

/// What the status page shows.
pub fn report(config: &Config, store: &dyn SharedStore, clock: &dyn Clock) -> Report {
    let budgets = SharedBudgets { store, clock };
    Report {
        sync: SyncRecord::read(store),
        budgets: budget::counters(config)
            .into_iter()
            .map(|c| {
                let (left, held) = budgets.left_and_unreported(&c.name, &c.budget);
                (c, left, held)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
