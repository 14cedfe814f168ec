//! Per-provider health (SPEC section 4): the circuit breaker and the dead marks, shared by every
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
//!   *instead* (SPEC: "stays open that long instead"), capped at `max_cooldown`. A Retry-After
//!   shorter than the cooldown therefore shortens the open period; after it one probe still gates.
//!
//! # Dead marks
//! Set only when the reported class falls over in the request's chain (`Report::falls_over`):
//! - `model_not_found`: (provider, model) dead for `dead_marks.model_not_found`;
//! - `setup_fault`: the whole provider dead for `dead_marks.setup_fault`;
//! - `rate_limited` whose reset delay (`Report::retry_after_ms`) is longer than the breaker's
//!   cooldown: (provider, model) dead until then (capped at [`MAX_RATE_LIMIT_MARK_MS`]).
//!
//! Marks expire by themselves; a success for that model clears the model's mark and the
//! provider-wide mark. A record keeps at most [`MAX_MODEL_MARKS`] model marks (when full, the
//! mark expiring first is dropped); model names longer than [`MAX_MODEL_NAME`] bytes are never
//! marked.
//!
//! # Record layout (version 1, little-endian, no padding)
//! ```text
//! offset  size  field
//!      0     1  version = 1 (any other value: the record is read as fresh and healthy)
//!      1     1  last failure class (Class as u8), 0xFF = none
//!      2     1  M = number of model marks (0..=16)
//!      3     1  reserved, 0
//!      4     2  F = number of failure timestamps (u16, 0..=1000)
//!      6     2  reserved, 0
//!      8     8  open_until ms (0 = closed; <= now = half-open)
//!     16     8  probe_until ms (0 = no probe claim; <= now = the claim expired)
//!     24     8  last failure time ms (meaningful when the class byte is not 0xFF)
//!     32     8  provider dead until ms (0 = none; a setup_fault mark)
//!     40   8*F  failure timestamps ms, ascending
//!      …        M model marks, each: until ms (8), class (1), name length N (1, 1..=255),
//!               N bytes of UTF-8 model name
//! ```
//! The record must end exactly after the last mark. Anything that does not parse (short, too
//! long, wrong version, bad class byte, bad UTF-8, counts over the caps) reads as a fresh,
//! healthy record, and the next update overwrites it. A 10-failure record with no marks is
//! 120 bytes.

use crate::classify::Class;
use crate::config::{BreakerPolicy, DeadMarkPolicy};
use crate::host::{Clock, SetError, SharedStore};
use crate::wire::with_health_key;

/// Encoding version (first byte of every record).
pub const RECORD_VERSION: u8 = 1;
/// Most failure timestamps a record holds (the config cap on `breaker.failures`).
pub const MAX_FAILURES: usize = 1000;
/// Most model dead marks a record holds.
pub const MAX_MODEL_MARKS: usize = 16;
/// Longest model name (bytes) that can be marked dead.
pub const MAX_MODEL_NAME: usize = 255;
/// Compare-and-swap attempts per update before giving up. 64 was not enough: 8 threads hammering
/// one record through a mutex-backed store starved a writer 64 times in a row about once in
/// 60 000 reports. A retry costs one read and one failed write (about a microsecond).
pub const MAX_CAS_ATTEMPTS: u32 = 1024;
/// Longest dead mark a rate-limit reset can set (a garbage or hostile header cannot take a
/// provider away for longer than a day).
pub const MAX_RATE_LIMIT_MARK_MS: u64 = 24 * 3_600_000;

const HEADER_LEN: usize = 40;
const NO_CLASS: u8 = 0xFF;
const OFF_OPEN_UNTIL: usize = 8;
const OFF_PROBE_UNTIL: usize = 16;
const OFF_LAST_FAILURE: usize = 24;
const OFF_PROVIDER_DEAD: usize = 32;

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
    /// Gauge value: 0 closed, 1 open, 2 half-open (SPEC section 8).
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

    fn of(open_until: u64, now: u64) -> BreakerState {
        if open_until == 0 {
            BreakerState::Closed
        } else if now < open_until {
            BreakerState::Open
        } else {
            BreakerState::HalfOpen
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
}

impl Report {
    pub fn new(class: Class, falls_over: bool) -> Report {
        Report {
            class,
            falls_over,
            retry_after_ms: None,
        }
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
        with_health_key(provider, |key| {
            self.store.get(key).is_none()
                && self
                    .store
                    .set(key, &Record::default().encode(), None)
                    .is_ok()
        })
    }

    /// Records one attempt's outcome. Reads, then writes only when something changed.
    pub fn report(&self, provider: &str, model: &str, report: &Report) -> ReportEffect {
        let mut last_state = BreakerState::Closed;
        let effect = self.update(provider, |bytes, now| {
            let mut record = bytes.map_or_else(Record::default, |b| Record::decode(&b));
            record.prune(now, self.breaker.window_ms);
            let effect = record.apply(now, model, report, self.breaker, self.dead);
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

    /// The one read-modify-write loop behind every update: `step` sees the stored bytes (`None`
    /// when the key was never written) and the time, and either settles without writing or
    /// proposes new bytes, which are stored only if nobody wrote in between (compare-and-swap);
    /// otherwise it runs again on what is there now. `None` after `MAX_CAS_ATTEMPTS` lost races.
    fn update<T>(
        &self,
        provider: &str,
        mut step: impl FnMut(Option<Vec<u8>>, u64) -> Step<T>,
    ) -> Option<T> {
        with_health_key(provider, |key| {
            for attempt in 0..MAX_CAS_ATTEMPTS {
                let (bytes, cas) = match self.store.get(key) {
                    Some((bytes, cas)) => (Some(bytes), Some(cas)),
                    None => (None, None),
                };
                match step(bytes, self.clock.now_ms()) {
                    Step::Done(value) => return Some(value),
                    Step::Write(new, value) => match self.store.set(key, &new, cas) {
                        Ok(()) => return Some(value),
                        Err(SetError::CasMismatch) => {}
                        Err(SetError::Refused) => return None,
                    },
                }
                backoff(attempt);
            }
            None
        })
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
        }
    }
}

/// What one pass of [`Health::update`] decided.
enum Step<T> {
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

// ---------------------------------------------------------------------------------------------
// The record: a zero-copy view for reads, an owned form for updates.

fn get_u64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    if let Some(s) = b.get_mut(off..off + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

struct MarkRef<'a> {
    model: &'a str,
    until: u64,
    class: Class,
}

/// A validated record, borrowed from the bytes read.
#[derive(Default)]
struct View<'a> {
    last_failure: Option<(Class, u64)>,
    open_until: u64,
    probe_until: u64,
    provider_dead_until: u64,
    failures: &'a [u8],
    marks: &'a [u8],
}

impl<'a> View<'a> {
    /// Validates the whole layout; `None` for anything malformed.
    fn parse(b: &'a [u8]) -> Option<View<'a>> {
        let header = b.get(..HEADER_LEN)?;
        if header[0] != RECORD_VERSION {
            return None;
        }
        let n_models = usize::from(header[2]);
        let n_failures = usize::from(u16::from_le_bytes([header[4], header[5]]));
        if n_models > MAX_MODEL_MARKS || n_failures > MAX_FAILURES {
            return None;
        }
        let last_failure = match header[1] {
            NO_CLASS => None,
            c => Some((Class::from_u8(c)?, get_u64(header, OFF_LAST_FAILURE))),
        };
        let failures_end = HEADER_LEN + 8 * n_failures;
        let view = View {
            last_failure,
            open_until: get_u64(header, OFF_OPEN_UNTIL),
            probe_until: get_u64(header, OFF_PROBE_UNTIL),
            provider_dead_until: get_u64(header, OFF_PROVIDER_DEAD),
            failures: b.get(HEADER_LEN..failures_end)?,
            marks: b.get(failures_end..)?,
        };
        // Every mark must parse and the record must end right after the last one.
        let mut rest = view.marks;
        for _ in 0..n_models {
            let (_, after) = next_mark(rest)?;
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
        Some(view)
    }

    fn failures(&self) -> impl Iterator<Item = u64> + 'a {
        self.failures.chunks_exact(8).map(|c| get_u64(c, 0))
    }

    fn marks(&self) -> MarkIter<'a> {
        MarkIter { rest: self.marks }
    }
}

fn next_mark(b: &[u8]) -> Option<(MarkRef<'_>, &[u8])> {
    let until = get_u64(b.get(..8)?, 0);
    let class = Class::from_u8(*b.get(8)?)?;
    let len = usize::from(*b.get(9)?);
    if len == 0 {
        return None;
    }
    let model = std::str::from_utf8(b.get(10..10 + len)?).ok()?;
    Some((
        MarkRef {
            model,
            until,
            class,
        },
        b.get(10 + len..)?,
    ))
}

struct MarkIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for MarkIter<'a> {
    type Item = MarkRef<'a>;
    fn next(&mut self) -> Option<MarkRef<'a>> {
        let (mark, rest) = next_mark(self.rest)?;
        self.rest = rest;
        Some(mark)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelMark {
    model: String,
    until: u64,
    class: Class,
}

/// The owned record that updates work on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Record {
    last_failure: Option<(Class, u64)>,
    open_until: u64,
    probe_until: u64,
    provider_dead_until: u64,
    /// Ascending.
    failures: Vec<u64>,
    models: Vec<ModelMark>,
}

impl Record {
    /// Garbage reads as a fresh record.
    fn decode(b: &[u8]) -> Record {
        let Some(view) = View::parse(b) else {
            return Record::default();
        };
        let mut failures: Vec<u64> = view.failures().collect();
        if failures.windows(2).any(|w| w[0] > w[1]) {
            failures.sort_unstable();
        }
        Record {
            last_failure: view.last_failure,
            open_until: view.open_until,
            probe_until: view.probe_until,
            provider_dead_until: view.provider_dead_until,
            failures,
            models: view
                .marks()
                .map(|m| ModelMark {
                    model: m.model.to_string(),
                    until: m.until,
                    class: m.class,
                })
                .collect(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let failures = &self.failures[self.failures.len().saturating_sub(MAX_FAILURES)..];
        let models: Vec<&ModelMark> = self
            .models
            .iter()
            .filter(|m| !m.model.is_empty() && m.model.len() <= MAX_MODEL_NAME)
            .take(MAX_MODEL_MARKS)
            .collect();
        let marks_len: usize = models.iter().map(|m| 10 + m.model.len()).sum();
        let mut b = Vec::with_capacity(HEADER_LEN + 8 * failures.len() + marks_len);
        b.push(RECORD_VERSION);
        b.push(self.last_failure.map_or(NO_CLASS, |(c, _)| c as u8));
        b.push(u8::try_from(models.len()).unwrap_or(0));
        b.push(0);
        b.extend_from_slice(&u16::try_from(failures.len()).unwrap_or(0).to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.open_until.to_le_bytes());
        b.extend_from_slice(&self.probe_until.to_le_bytes());
        b.extend_from_slice(&self.last_failure.map_or(0, |(_, t)| t).to_le_bytes());
        b.extend_from_slice(&self.provider_dead_until.to_le_bytes());
        for t in failures {
            b.extend_from_slice(&t.to_le_bytes());
        }
        for m in models {
            b.extend_from_slice(&m.until.to_le_bytes());
            b.push(m.class as u8);
            b.push(u8::try_from(m.model.len()).unwrap_or(0));
            b.extend_from_slice(m.model.as_bytes());
        }
        b
    }

    /// Drops what has expired: failures outside the window, dead marks and probe claims past
    /// their end. Never changes what the record means.
    fn prune(&mut self, now: u64, window_ms: u64) {
        let window_start = now.saturating_sub(window_ms);
        let outside = self.failures.partition_point(|&t| t <= window_start);
        self.failures.drain(..outside);
        self.models.retain(|m| m.until > now);
        if self.provider_dead_until <= now {
            self.provider_dead_until = 0;
        }
        if self.probe_until <= now {
            self.probe_until = 0;
        }
    }

    /// Applies one report to a pruned record. `written` in the result says whether the record
    /// changed (and so must be stored).
    fn apply(
        &mut self,
        now: u64,
        model: &str,
        report: &Report,
        breaker: &BreakerPolicy,
        dead: &DeadMarkPolicy,
    ) -> ReportEffect {
        let state = BreakerState::of(self.open_until, now);
        let mut effect = ReportEffect::nothing(state);
        let class = report.class;
        match class {
            Class::Ok => {
                let before = self.models.len();
                self.models.retain(|m| m.model != model);
                if self.models.len() != before || self.provider_dead_until != 0 {
                    self.provider_dead_until = 0;
                    effect.cleared_dead_mark = true;
                    effect.written = true;
                }
                if state == BreakerState::HalfOpen {
                    self.open_until = 0;
                    self.probe_until = 0;
                    self.failures.clear();
                    effect.breaker = BreakerChange::Closed;
                    effect.state = BreakerState::Closed;
                    effect.written = true;
                }
                return effect;
            }
            Class::InvalidRequest | Class::ClientDisconnect => {
                self.release_probe_claim(now, &mut effect);
                return effect;
            }
            _ => {}
        }

        self.last_failure = Some((class, now));
        effect.written = true;
        if class.counts_toward_breaker() {
            match state {
                BreakerState::Closed => {
                    let at = self.failures.partition_point(|&t| t <= now);
                    self.failures.insert(at, now);
                    let cap = usize::try_from(breaker.failures)
                        .unwrap_or(MAX_FAILURES)
                        .clamp(1, MAX_FAILURES);
                    let excess = self.failures.len().saturating_sub(cap);
                    self.failures.drain(..excess);
                    effect.counted = true;
                    // After pruning every timestamp kept lies inside the window.
                    if self.failures.len() >= cap {
                        let until = self.open(now, report.retry_after_ms, breaker);
                        effect.breaker = BreakerChange::Opened { until_ms: until };
                        effect.state = BreakerState::Open;
                    }
                }
                // An attempt that was in flight when the breaker opened: already accounted for.
                BreakerState::Open => {}
                BreakerState::HalfOpen => {
                    let until = self.open(now, report.retry_after_ms, breaker);
                    self.failures.clear();
                    effect.breaker = BreakerChange::Reopened { until_ms: until };
                    effect.state = BreakerState::Open;
                }
            }
            return effect;
        }

        // Not counted: rate_limited, model_not_found, setup_fault.
        self.release_probe_claim(now, &mut effect);
        if !report.falls_over {
            return effect;
        }
        match class {
            Class::ModelNotFound if dead.model_not_found_ms > 0 => {
                let until = now.saturating_add(dead.model_not_found_ms);
                effect.dead_mark = self.mark_model(model, until, class);
            }
            Class::RateLimited => {
                if let Some(delay) = report.retry_after_ms.filter(|&d| d > breaker.cooldown_ms) {
                    let until = now.saturating_add(delay.min(MAX_RATE_LIMIT_MARK_MS));
                    effect.dead_mark = self.mark_model(model, until, class);
                }
            }
            Class::SetupFault if dead.setup_fault_ms > 0 => {
                let until = now
                    .saturating_add(dead.setup_fault_ms)
                    .max(self.provider_dead_until);
                self.provider_dead_until = until;
                effect.dead_mark = Some(DeadMarkSet {
                    scope: DeadScope::Provider,
                    until_ms: until,
                    class,
                });
            }
            _ => {}
        }
        effect
    }

    /// Opens the breaker from `now`; returns `open_until`.
    fn open(&mut self, now: u64, retry_after_ms: Option<u64>, breaker: &BreakerPolicy) -> u64 {
        let period = match retry_after_ms {
            Some(delay) => delay.min(breaker.max_cooldown_ms),
            None => breaker.cooldown_ms,
        };
        // Never 0: 0 means closed.
        self.open_until = now.saturating_add(period).max(1);
        self.probe_until = 0;
        self.open_until
    }

    /// A half-open breaker's probe claim goes when an outcome says nothing about the provider's
    /// health (neither a success nor a counted failure): the next request probes at once instead
    /// of waiting for the claim to expire. While half-open, the probe is normally the only
    /// attempt in flight, so the claim released is the reporter's own.
    fn release_probe_claim(&mut self, now: u64, effect: &mut ReportEffect) {
        if BreakerState::of(self.open_until, now) == BreakerState::HalfOpen && self.probe_until != 0
        {
            self.probe_until = 0;
            effect.probe_released = true;
            effect.written = true;
        }
    }

    /// Marks `model` dead until `until` (keeping a later existing end). When the record is full
    /// the mark expiring first is dropped, which may be this one.
    fn mark_model(&mut self, model: &str, until: u64, class: Class) -> Option<DeadMarkSet> {
        if model.is_empty() || model.len() > MAX_MODEL_NAME {
            return None;
        }
        let (until, class) = match self.models.iter_mut().find(|m| m.model == model) {
            Some(m) => {
                if until > m.until {
                    m.until = until;
                    m.class = class;
                }
                (m.until, m.class)
            }
            None => {
                self.models.push(ModelMark {
                    model: model.to_string(),
                    until,
                    class,
                });
                while self.models.len() > MAX_MODEL_MARKS {
                    let first = self
                        .models
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, m)| m.until)
                        .map(|(i, _)| i);
                    if let Some(i) = first {
                        self.models.remove(i);
                    }
                }
                if !self.models.iter().any(|m| m.model == model) {
                    return None;
                }
                (until, class)
            }
        };
        Some(DeadMarkSet {
            scope: DeadScope::Model,
            until_ms: until,
            class,
        })
    }
}

#[cfg(test)]
mod tests;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod host_tests;
