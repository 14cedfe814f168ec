//! Per-provider health (docs/behaviour.md section 4): the circuit breaker and the dead marks, shared by every
//! Envoy worker through [`SharedStore`].
//!
//! One record per provider under [`crate::wire::health_key`], so planning a request costs one store
//! read per provider. Every update is a read-modify-write with compare-and-swap and a bounded
//! number of retries, so N failures reported concurrently from N workers count N.
//!
//! # Breaker
//! - **Closed** (`open_until == 0`): each counted failure (see
//!   [`Class::counts_toward_breaker`]) is timestamped; the record keeps the newest `failures`
//!   timestamps. When `failures` of them lie inside the last `window` (an exact sliding window)
//!   the breaker opens. Successes do not reset the count: it is a count inside the window.
//! - **Open** (`now < open_until`): requests are not sent. Counted failures reported meanwhile
//!   (attempts that were already in flight) change nothing but the last-failure fields.
//! - **Half-open** (`open_until <= now`): exactly one probe across all workers may go: the first
//!   [`Health::admit`] claims it by CAS, and the claim expires after the caller's probe timeout so
//!   a lost probe cannot wedge the provider. A success closes the breaker and forgets the failures;
//!   a counted failure opens it again.
//!   An outcome that says neither (429, 404, 4xx, client gone) releases the claim so the next
//!   request probes at once.
//! - **Open period**: `cooldown`; when the failing answer carried `Retry-After`, that delay
//!   *instead* (docs/behaviour.md section 4), capped at `max_cooldown`. A Retry-After
//!   shorter than the cooldown therefore shortens the open period; after it one probe still gates.
//!
//! # Dead marks
//! Set only when the reported class falls over in the request's chain (`Report::falls_over`):
//! - `model_not_found`: (provider, model) dead for `dead_marks.model_not_found`;
//! - `setup_fault`: the whole provider dead for `dead_marks.setup_fault`;
//! - `quota_exhausted`: the whole provider dead until the answer's reset (`Retry-After`,
//!   `X-RateLimit-Reset*`), else for `dead_marks.quota_exhausted`, at most
//!   [`MAX_RATE_LIMIT_MARK_MS`];
//! - `rate_limited` whose reset delay (`Report::retry_after_ms`) is longer than the breaker's
//!   cooldown: (provider, model) dead until then (capped at [`MAX_RATE_LIMIT_MARK_MS`]).
//!
//! Marks expire by themselves; a success for that model clears the model's mark and the
//! provider-wide mark. A record keeps at most [`MAX_MODEL_MARKS`] model marks (when full, the
//! mark expiring first is dropped); model names longer than [`MAX_MODEL_NAME`] bytes are never
//! marked.
//!
//! # Layout
//! - [`record`]: the shared-data record format (versioned bytes, a zero-copy view, an owned form);
//! - [`breaker`]: the state machine: what one report does to a record;
//! - [`update`]: the compare-and-swap loop every write goes through;
//! - [`tally`]: health over time (attempts and failures per minute over 15 minutes, the last
//!   answer), in the same record, and the answers a worker holds before writing them.

mod breaker;
mod record;
mod tally;
mod update;

use crate::classify::Class;
use crate::config::{BreakerPolicy, DeadMarkPolicy};
use crate::host::{Clock, SharedStore};
use crate::wire::with_health_key;
pub use breaker::MAX_RATE_LIMIT_MARK_MS;
use record::{put_u64, Record, View, OFF_AHEAD_UNTIL, OFF_PROBE_UNTIL};
#[cfg(test)]
use record::{ModelMark, HEADER_LEN};
pub use record::{MAX_FAILURES, MAX_MODEL_MARKS, MAX_MODEL_NAME, RECORD_VERSION};
#[cfg(test)]
use tally::Tally;
pub use tally::{HealthState, Pending, Recent, BUCKETS, BUCKET_MS};
pub use update::{ensure_key, update_key, Step, MAX_CAS_ATTEMPTS};

// ---------------------------------------------------------------------------------------------
// Public API.

/// Breaker state, as the `llm_failover_breaker_state` gauge reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BreakerState {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

impl BreakerState {
    /// Gauge value: 0 closed, 1 open, 2 half-open (docs/behaviour.md section 8).
    pub fn metric_value(self) -> u8 {
        self as u8
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Whether a provider may be tried for a request, from one read of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Send to it.
    /// - `probe`: the breaker is half-open and this call claimed its one probe (the only case
    ///   that writes). Report the attempt's outcome, or call [`Health::release_probe`] if the
    ///   request ends without sending it.
    /// - `pristine`: a success from this attempt would change nothing (breaker closed, no live
    ///   dead mark for this provider or model), so the caller may skip reporting `Class::Ok`.
    ///   Always `!probe` today: a closed breaker counts failures inside its window and successes
    ///   do not reset that count.
    Available { pristine: bool, probe: bool },
    /// Open, or half-open with the probe held by another request: skip (`breaker_open`).
    BreakerOpen,
    /// Marked dead for this model, or the whole provider is: skip (`dead`).
    Dead,
    /// Its last answer announced a spent rate limit (`crate::announced`): skip
    /// (`rate_limited_ahead`) until then (ms since the epoch), not even last.
    RateLimitedAhead { until_ms: u64 },
}

impl Admission {
    /// The breaker state the gauge must show after this admission, when it changes it: a
    /// request that claimed the probe after the cooldown made the breaker half-open.
    pub fn shown_state(self) -> Option<BreakerState> {
        matches!(self, Admission::Available { probe: true, .. }).then_some(BreakerState::HalfOpen)
    }
}

const AVAILABLE: Admission = Admission::Available {
    pristine: true,
    probe: false,
};
const PROBE: Admission = Admission::Available {
    pristine: false,
    probe: true,
};

/// One attempt's outcome, for [`Health::report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub class: Class,
    /// Does this class fall over in the request's chain? Dead marks are set only when it does.
    pub falls_over: bool,
    /// Delay the answer asked for (`Retry-After`, or for a 429 the rate-limit reset; see
    /// `retry_after::rate_limit_delay`), in ms from now.
    pub retry_after_ms: Option<u64>,
    /// How this attempt stands to an in-place retry: a request counts once toward the breaker
    /// however often it was tried in place (behaviour.md 16).
    pub in_place: InPlace,
}

/// An attempt and the in-place retry (behaviour.md 5) of one request on one provider. The breaker
/// counts the request once, by how it ended there: a retry that succeeds counts no failure (the
/// provider served the request); one that fails counts one, its own class's, or the first
/// try's when its own counts nothing (a `503` then a `429`, or the caller gone during the
/// wait). Each try is still an attempt in the provider's tally (health over time, behaviour.md 10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InPlace {
    /// No in-place retry before or after it.
    #[default]
    No,
    /// It is retried in place next: its failure is the tally's and the last failure's only;
    /// the breaker (counts, half-open probe, dead marks) waits for the retry's report.
    Retried,
    /// It is the in-place retry of a try that failed with this class.
    After(Class),
}

impl Report {
    pub fn new(class: Class, falls_over: bool) -> Report {
        Report {
            class,
            falls_over,
            retry_after_ms: None,
            in_place: InPlace::No,
        }
    }
    pub fn in_place(mut self, in_place: InPlace) -> Report {
        self.in_place = in_place;
        self
    }
    pub fn retry_after(mut self, ms: Option<u64>) -> Report {
        self.retry_after_ms = ms;
        self
    }
}

/// What a report did to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerChange {
    Unchanged,
    /// Closed → open (the threshold was reached).
    Opened {
        until_ms: u64,
    },
    /// Half-open → open (the probe, or a late attempt, failed).
    Reopened {
        until_ms: u64,
    },
    /// Half-open → closed (a success after the cooldown).
    Closed,
}

/// Which a dead mark covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadScope {
    Provider,
    Model,
}

/// A dead mark set (or extended) by a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadMarkSet {
    pub scope: DeadScope,
    pub until_ms: u64,
    pub class: Class,
}

/// What [`Health::report`] did, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportEffect {
    pub breaker: BreakerChange,
    /// Breaker state after the report (as read, when nothing was written).
    pub state: BreakerState,
    /// Was the failure counted toward the breaker (closed breaker, counted class)?
    pub counted: bool,
    pub dead_mark: Option<DeadMarkSet>,
    /// A success cleared a live dead mark (the model's or the provider's).
    pub cleared_dead_mark: bool,
    pub probe_released: bool,
    /// The record was written.
    pub written: bool,
    /// Every compare-and-swap attempt lost a race: the report was dropped.
    pub gave_up: bool,
}

impl ReportEffect {
    fn nothing(state: BreakerState) -> ReportEffect {
        ReportEffect {
            breaker: BreakerChange::Unchanged,
            state,
            counted: false,
            dead_mark: None,
            cleared_dead_mark: false,
            probe_released: false,
            written: false,
            gave_up: false,
        }
    }
}

/// A provider's health, for the status endpoint and the breaker-state gauge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSnapshot {
    pub state: BreakerState,
    /// Counted failures inside the current window.
    pub failures_in_window: u32,
    /// Class and time (ms) of the last failure reported, counted or not.
    pub last_failure: Option<(Class, u64)>,
    /// When the breaker (re)opened period ends; `None` when closed.
    pub open_until_ms: Option<u64>,
    /// A half-open probe is in flight.
    pub probe_in_flight: bool,
    /// Live provider-wide dead mark (setup_fault) end.
    pub provider_dead_until_ms: Option<u64>,
    /// Live model dead marks.
    pub dead_models: Vec<ModelDeadMark>,
    /// Health over the last 15 minutes (docs/behaviour.md section 10).
    pub recent: Recent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDeadMark {
    pub model: String,
    pub until_ms: u64,
    pub class: Class,
}

/// Provider health over a shared store. Cheap to build per request (four references).
pub struct Health<'a> {
    store: &'a dyn SharedStore,
    clock: &'a dyn Clock,
    breaker: &'a BreakerPolicy,
    dead: &'a DeadMarkPolicy,
}

impl<'a> Health<'a> {
    pub fn new(
        store: &'a dyn SharedStore,
        clock: &'a dyn Clock,
        breaker: &'a BreakerPolicy,
        dead: &'a DeadMarkPolicy,
    ) -> Health<'a> {
        Health {
            store,
            clock,
            breaker,
            dead,
        }
    }

    /// May `provider` be tried for `model` now? One store read; a write (the CAS claim) only when
    /// the breaker is half-open and nobody holds the probe. `probe_timeout_ms` is how long the
    /// claim lasts if its holder never reports (use the attempt timeout or more).
    pub fn admit(&self, provider: &str, model: &str, probe_timeout_ms: u64) -> Admission {
        let claimed = self.update(provider, |bytes, now| {
            let Some(mut bytes) = bytes else {
                return Step::Done(AVAILABLE);
            };
            let Some(view) = View::parse(&bytes) else {
                return Step::Done(AVAILABLE);
            };
            if view.provider_dead_until > now
                || view.marks().any(|m| m.model == model && m.until > now)
            {
                return Step::Done(Admission::Dead);
            }
            if view.ahead_until > now {
                return Step::Done(Admission::RateLimitedAhead {
                    until_ms: view.ahead_until,
                });
            }
            match BreakerState::of(view.open_until, now) {
                BreakerState::Closed => return Step::Done(AVAILABLE),
                BreakerState::Open => return Step::Done(Admission::BreakerOpen),
                BreakerState::HalfOpen if view.probe_until > now => {
                    return Step::Done(Admission::BreakerOpen)
                }
                BreakerState::HalfOpen => {}
            }
            // Claim the probe: patch probe_until in place (the layout was just validated).
            put_u64(
                &mut bytes,
                OFF_PROBE_UNTIL,
                now.saturating_add(probe_timeout_ms.max(1)),
            );
            Step::Write(bytes, PROBE)
        });
        // Lost every race: others are busy with this record, almost surely claiming the probe.
        claimed.unwrap_or(Admission::BreakerOpen)
    }

    /// Creates the provider's record (fresh and healthy) when none exists, and returns whether it
    /// did. Call it at configure time: Envoy's shared data cannot compare-and-swap on a key that
    /// does not exist yet (cas 0 means "no check"), so the first write must not race updates.
    pub fn ensure_record(&self, provider: &str) -> bool {
        let record = Record::default().encode();
        with_health_key(provider, |key| ensure_key(self.store, key, &record))
    }

    /// Records one attempt's outcome. Reads, then writes only when something changed.
    pub fn report(&self, provider: &str, model: &str, report: &Report) -> ReportEffect {
        self.report_with(provider, model, report, &Pending::default())
    }

    /// [`Health::report`], adding in the same write the answers this worker holds for the
    /// provider (`pending`; see [`Health::add_answers`]).
    pub fn report_with(
        &self,
        provider: &str,
        model: &str,
        report: &Report,
        pending: &Pending,
    ) -> ReportEffect {
        let mut last_state = BreakerState::Closed;
        let effect = self.update(provider, |bytes, now| {
            let mut record = bytes.map_or_else(Record::default, |b| Record::decode(&b));
            record.prune(now, self.breaker.window_ms);
            let mut effect = record.apply(now, model, report, self.breaker, self.dead);
            let counted = record.tally.record(now, report.class);
            let added = record.tally.add_pending(pending);
            effect.written |= counted || added;
            last_state = effect.state;
            if effect.written {
                Step::Write(record.encode(), effect)
            } else {
                Step::Done(effect)
            }
        });
        effect.unwrap_or(ReportEffect {
            gave_up: true,
            ..ReportEffect::nothing(last_state)
        })
    }

    /// Adds answers a worker counted without writing them (successes from a provider with
    /// nothing else to record: [`Pending`]). One compare-and-swap; returns whether they were
    /// written (`false`: none held, too old for their bucket, or every race lost).
    pub fn add_answers(&self, provider: &str, pending: &Pending) -> bool {
        if pending.is_empty() {
            return false;
        }
        let added = self.update(provider, |bytes, _| {
            let mut record = bytes.map_or_else(Record::default, |b| Record::decode(&b));
            if record.tally.add_pending(pending) {
                Step::Write(record.encode(), true)
            } else {
                Step::Done(false)
            }
        });
        added.unwrap_or(false)
    }

    /// Skips the provider until `until_ms` (ms since the epoch): one of its answers announced
    /// its rate limit spent (`crate::announced`). A later end than the one stored wins; an
    /// earlier one changes nothing. Returns whether it was written. A record that does not
    /// parse (none is created at configure time, `ensure_record`) is left to the next report,
    /// which writes it whole: no skip until then.
    pub fn skip_ahead(&self, provider: &str, until_ms: u64) -> bool {
        let written = self.update(provider, |bytes, _| {
            let Some(mut bytes) = bytes else {
                return Step::Done(false);
            };
            match View::parse(&bytes).map(|v| v.ahead_until) {
                // Patched in place: the layout was just validated.
                Some(stored) if stored < until_ms => {
                    put_u64(&mut bytes, OFF_AHEAD_UNTIL, until_ms);
                    Step::Write(bytes, true)
                }
                _ => Step::Done(false),
            }
        });
        written.unwrap_or(false)
    }

    /// A request that claimed the probe ([`Admission::Available`] with `probe`) ended without
    /// sending it: let the next request probe. Returns whether a live claim was released.
    /// (Claims carry no owner: a holder that outlived its claim's timeout could release the next
    /// holder's claim, letting one extra probe through; harmless and rare.)
    pub fn release_probe(&self, provider: &str) -> bool {
        let released = self.update(provider, |bytes, now| {
            let Some(mut bytes) = bytes else {
                return Step::Done(false);
            };
            let Some(view) = View::parse(&bytes) else {
                return Step::Done(false);
            };
            if BreakerState::of(view.open_until, now) != BreakerState::HalfOpen
                || view.probe_until <= now
            {
                return Step::Done(false);
            }
            put_u64(&mut bytes, OFF_PROBE_UNTIL, 0);
            Step::Write(bytes, true)
        });
        released.unwrap_or(false)
    }

    /// The fleet's failures of the provider reached the fleet's threshold (`crate::fleet`):
    /// a closed breaker opens here for its cooldown, as if this Envoy had counted them; an
    /// open or half-open one is left as it is (cooldown and probe stay this Envoy's). Returns
    /// the open period's end when it opened.
    pub fn open_for_fleet(&self, provider: &str) -> Option<u64> {
        let opened = self.update(provider, |bytes, now| {
            let mut record = bytes.map_or_else(Record::default, |b| Record::decode(&b));
            if BreakerState::of(record.open_until, now) != BreakerState::Closed {
                return Step::Done(None);
            }
            let until = record.open(now, None, self.breaker);
            record.failures.clear();
            Step::Write(record.encode(), Some(until))
        });
        opened.flatten()
    }

    /// The provider's health now (one read, no write).
    pub fn snapshot(&self, provider: &str) -> HealthSnapshot {
        let now = self.clock.now_ms();
        let bytes = with_health_key(provider, |key| self.store.get(key))
            .map(|(b, _)| b)
            .unwrap_or_default();
        let view = View::parse(&bytes).unwrap_or_default();
        let state = BreakerState::of(view.open_until, now);
        let window_start = now.saturating_sub(self.breaker.window_ms);
        let failures_in_window = view.failures().filter(|&t| t > window_start).count();
        HealthSnapshot {
            state,
            failures_in_window: u32::try_from(failures_in_window).unwrap_or(u32::MAX),
            last_failure: view.last_failure,
            open_until_ms: (state != BreakerState::Closed).then_some(view.open_until),
            probe_in_flight: state == BreakerState::HalfOpen && view.probe_until > now,
            provider_dead_until_ms: (view.provider_dead_until > now)
                .then_some(view.provider_dead_until),
            dead_models: view
                .marks()
                .filter(|m| m.until > now)
                .map(|m| ModelDeadMark {
                    model: m.model.to_string(),
                    until_ms: m.until,
                    class: m.class,
                })
                .collect(),
            recent: view.tally().recent(now),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod host_tests;
