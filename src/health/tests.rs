//! Unit tests of `health` (they also run compiled to wasm).

use super::*;
use crate::host::{Cas, ManualClock, MemoryStore, SetError};
use crate::wire::health_key;

const T0: u64 = 1_700_000_000_000;
const S: u64 = 1_000;
const H: u64 = 3_600_000;
const PROBE_TIMEOUT: u64 = 120 * S;

fn spec_breaker() -> BreakerPolicy {
    BreakerPolicy {
        failures: 10,
        window_ms: 30 * S,
        cooldown_ms: 60 * S,
        max_cooldown_ms: 300 * S,
        fleet_failures: 0,
        fleet_window_ms: 60_000,
    }
}

fn spec_dead() -> DeadMarkPolicy {
    DeadMarkPolicy {
        model_not_found_ms: 6 * H,
        setup_fault_ms: H,
        quota_exhausted_ms: H,
        rate_limited_ahead_ms: 60_000,
    }
}

struct Fixture {
    store: MemoryStore,
    clock: ManualClock,
    breaker: BreakerPolicy,
    dead: DeadMarkPolicy,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            store: MemoryStore::default(),
            clock: ManualClock::at(T0),
            breaker: spec_breaker(),
            dead: spec_dead(),
        }
    }
    fn health(&self) -> Health<'_> {
        Health::new(&self.store, &self.clock, &self.breaker, &self.dead)
    }
    fn report(&self, report: Report) -> ReportEffect {
        self.health().report("p", "m", &report)
    }
    fn fail(&self, class: Class) -> ReportEffect {
        self.report(Report::new(class, true))
    }
    fn admit(&self) -> Admission {
        self.health().admit("p", "m", PROBE_TIMEOUT)
    }
    fn snapshot(&self) -> HealthSnapshot {
        self.health().snapshot("p")
    }
    /// Opens the breaker with `failures` server errors at the current time.
    fn trip(&self) {
        for _ in 0..self.breaker.failures {
            self.fail(Class::ServerError);
        }
        assert_eq!(self.admit(), Admission::BreakerOpen);
    }
}

#[test]
fn threshold_failures_inside_the_window_open_the_breaker() {
    let f = Fixture::new();
    for i in 0..9 {
        let e = f.fail(if i % 2 == 0 {
            Class::ServerError
        } else {
            Class::Timeout
        });
        assert_eq!(e.breaker, BreakerChange::Unchanged);
        assert!(e.counted && e.written);
        f.clock.advance(3 * S);
        assert_eq!(f.admit(), AVAILABLE);
    }
    // The 10th failure, 27 s after the first: inside the 30 s window.
    let e = f.fail(Class::ConnectionError);
    let until = T0 + 27 * S + 60 * S;
    assert_eq!(e.breaker, BreakerChange::Opened { until_ms: until });
    assert_eq!(e.state, BreakerState::Open);
    assert_eq!(f.admit(), Admission::BreakerOpen);
    let snap = f.snapshot();
    assert_eq!(snap.state.metric_value(), 1);
    assert_eq!(snap.open_until_ms, Some(until));
    assert_eq!(snap.failures_in_window, 10);
}

#[test]
fn the_same_failures_spread_over_more_than_the_window_leave_it_closed() {
    let f = Fixture::new();
    for _ in 0..50 {
        assert_eq!(f.fail(Class::Overloaded).breaker, BreakerChange::Unchanged);
        // 10 failures span 9 × 3.4 s = 30.6 s > 30 s.
        f.clock.advance(3_400);
    }
    assert_eq!(f.admit(), AVAILABLE);
    let snap = f.snapshot();
    assert_eq!(snap.state, BreakerState::Closed);
    // Now 3.4 s after the last one: those of the last 26.6 s remain.
    assert_eq!(snap.failures_in_window, 8);
}

#[test]
fn after_the_cooldown_exactly_one_probe_goes_through() {
    let f = Fixture::new();
    f.trip();
    f.clock.advance(60 * S - 1);
    assert_eq!(f.admit(), Admission::BreakerOpen);
    f.clock.advance(1);
    assert_eq!(f.snapshot().state, BreakerState::HalfOpen);
    assert!(!f.snapshot().probe_in_flight);
    assert_eq!(
        f.admit(),
        Admission::Available {
            pristine: false,
            probe: true
        }
    );
    for _ in 0..5 {
        assert_eq!(f.admit(), Admission::BreakerOpen);
    }
    let snap = f.snapshot();
    assert!(snap.probe_in_flight);
    assert_eq!(snap.state.metric_value(), 2);
}

#[test]
fn probe_success_closes_the_breaker_and_forgets_the_failures() {
    let f = Fixture::new();
    f.trip();
    f.clock.advance(60 * S);
    assert_eq!(f.admit(), PROBE);
    let e = f.report(Report::new(Class::Ok, false));
    assert_eq!(e.breaker, BreakerChange::Closed);
    assert_eq!(e.state, BreakerState::Closed);
    assert_eq!(f.admit(), AVAILABLE);
    let snap = f.snapshot();
    assert_eq!(snap.failures_in_window, 0);
    assert_eq!(snap.open_until_ms, None);
    assert!(!snap.probe_in_flight);
    // A fresh start: 9 more failures do not reopen it.
    for _ in 0..9 {
        f.fail(Class::ServerError);
    }
    assert_eq!(f.admit(), AVAILABLE);
}

#[test]
fn probe_failure_reopens_for_the_cooldown() {
    let f = Fixture::new();
    f.trip();
    f.clock.advance(60 * S);
    assert_eq!(f.admit(), PROBE);
    f.clock.advance(5 * S);
    let e = f.fail(Class::Timeout);
    let until = T0 + 125 * S;
    assert_eq!(e.breaker, BreakerChange::Reopened { until_ms: until });
    assert_eq!(f.admit(), Admission::BreakerOpen);
    assert_eq!(f.snapshot().open_until_ms, Some(until));
    assert!(!f.snapshot().probe_in_flight);
    f.clock.advance(60 * S - 1);
    assert_eq!(f.admit(), Admission::BreakerOpen);
    f.clock.advance(1);
    assert_eq!(f.admit(), PROBE);
}

#[test]
fn retry_after_sets_the_open_period_instead_and_is_capped() {
    let f = Fixture::new();
    for _ in 0..9 {
        f.fail(Class::Overloaded);
    }
    let with_ra = |ms| Report::new(Class::Overloaded, true).retry_after(Some(ms));
    let e = f.report(with_ra(120 * S));
    assert_eq!(
        e.breaker,
        BreakerChange::Opened {
            until_ms: T0 + 120 * S
        }
    );
    // The probe fails again asking for an hour: capped at max_cooldown (300 s).
    f.clock.advance(120 * S);
    assert_eq!(f.admit(), PROBE);
    let e = f.report(with_ra(H));
    assert_eq!(
        e.breaker,
        BreakerChange::Reopened {
            until_ms: T0 + 420 * S
        }
    );
    // Shorter than the cooldown: that long instead (the probe still gates).
    f.clock.advance(300 * S);
    assert_eq!(f.admit(), PROBE);
    let e = f.report(with_ra(5 * S));
    assert_eq!(
        e.breaker,
        BreakerChange::Reopened {
            until_ms: T0 + 425 * S
        }
    );
}

#[test]
fn non_counting_classes_do_not_move_the_breaker() {
    let f = Fixture::new();
    for class in [
        Class::RateLimited,
        Class::ModelNotFound,
        Class::SetupFault,
        Class::InvalidRequest,
        Class::ClientDisconnect,
    ] {
        for _ in 0..20 {
            let e = f.health().report("p", "other", &Report::new(class, false));
            assert!(!e.counted, "{class:?}");
            assert_eq!(e.breaker, BreakerChange::Unchanged);
        }
    }
    assert_eq!(f.admit(), AVAILABLE);
    let snap = f.snapshot();
    assert_eq!(snap.failures_in_window, 0);
    // invalid_request and client_disconnect are the caller's doing, not the provider's.
    assert_eq!(snap.last_failure, Some((Class::SetupFault, T0)));
    assert!(snap.dead_models.is_empty() && snap.provider_dead_until_ms.is_none());
}

#[test]
fn rate_limit_with_a_reset_past_the_cooldown_marks_the_model_dead_until_then() {
    let f = Fixture::new();
    let r429 = |ms| Report::new(Class::RateLimited, true).retry_after(Some(ms));
    // A reset within the cooldown: nothing.
    assert_eq!(f.report(r429(60 * S)).dead_mark, None);
    assert_eq!(f.admit(), AVAILABLE);
    // A spent daily quota: dead until the reset.
    let e = f.report(r429(5 * H));
    let mark = DeadMarkSet {
        scope: DeadScope::Model,
        until_ms: T0 + 5 * H,
        class: Class::RateLimited,
    };
    assert_eq!(e.dead_mark, Some(mark));
    assert_eq!(f.admit(), Admission::Dead);
    assert_eq!(
        f.snapshot().dead_models,
        vec![ModelDeadMark {
            model: "m".into(),
            until_ms: T0 + 5 * H,
            class: Class::RateLimited
        }]
    );
    // Only that model.
    assert_eq!(f.health().admit("p", "other", PROBE_TIMEOUT), AVAILABLE);
    // An absurd reset is capped at a day.
    let e = f.health().report("p", "x", &r429(400 * H));
    assert_eq!(
        e.dead_mark.map(|m| m.until_ms),
        Some(T0 + MAX_RATE_LIMIT_MARK_MS)
    );
    // No reset at all: nothing.
    assert_eq!(
        f.health()
            .report("p", "y", &Report::new(Class::RateLimited, true))
            .dead_mark,
        None
    );
    // A later, shorter reset does not shorten the mark.
    let e = f.report(r429(2 * H));
    assert_eq!(e.dead_mark.map(|m| m.until_ms), Some(T0 + 5 * H));
}

#[test]
fn model_not_found_marks_the_model_dead_for_six_hours() {
    let f = Fixture::new();
    let e = f.fail(Class::ModelNotFound);
    let mark = DeadMarkSet {
        scope: DeadScope::Model,
        until_ms: T0 + 6 * H,
        class: Class::ModelNotFound,
    };
    assert_eq!(e.dead_mark, Some(mark));
    assert_eq!(f.admit(), Admission::Dead);
    assert_eq!(f.health().admit("p", "m2", PROBE_TIMEOUT), AVAILABLE);
    f.clock.advance(6 * H - 1);
    assert_eq!(f.admit(), Admission::Dead);
    f.clock.advance(1);
    assert_eq!(f.admit(), AVAILABLE);
}

#[test]
fn setup_fault_marks_the_provider_dead_for_an_hour() {
    let f = Fixture::new();
    let e = f.fail(Class::SetupFault);
    let mark = DeadMarkSet {
        scope: DeadScope::Provider,
        until_ms: T0 + H,
        class: Class::SetupFault,
    };
    assert_eq!(e.dead_mark, Some(mark));
    for model in ["m", "anything"] {
        assert_eq!(f.health().admit("p", model, PROBE_TIMEOUT), Admission::Dead);
    }
    assert_eq!(f.health().admit("q", "m", PROBE_TIMEOUT), AVAILABLE);
    assert_eq!(f.snapshot().provider_dead_until_ms, Some(T0 + H));
    f.clock.advance(H - 1);
    assert_eq!(f.admit(), Admission::Dead);
    f.clock.advance(1);
    assert_eq!(f.admit(), AVAILABLE);
}

#[test]
fn a_spent_quota_marks_the_provider_dead_until_its_reset_at_most_a_day() {
    let f = Fixture::new();
    // Reset named by the answer (Retry-After / X-RateLimit-Reset): dead until then, any model.
    let e = f.report(Report::new(Class::QuotaExhausted, true).retry_after(Some(3 * H)));
    assert_eq!(
        e.dead_mark,
        Some(DeadMarkSet {
            scope: DeadScope::Provider,
            until_ms: T0 + 3 * H,
            class: Class::QuotaExhausted,
        })
    );
    assert!(!e.counted, "a spent quota never counts toward the breaker");
    assert_eq!(
        f.health().admit("p", "other", PROBE_TIMEOUT),
        Admission::Dead
    );
    assert_eq!(f.snapshot().state, BreakerState::Closed);
    assert_eq!(f.snapshot().last_failure, Some((Class::QuotaExhausted, T0)));
    // A reset further than a day is capped at a day.
    let g = Fixture::new();
    let e = g.report(Report::new(Class::QuotaExhausted, true).retry_after(Some(90 * H)));
    assert_eq!(
        e.dead_mark.map(|m| m.until_ms),
        Some(T0 + MAX_RATE_LIMIT_MARK_MS)
    );
    // No reset named: dead_marks.quota_exhausted.
    let h = Fixture::new();
    let e = h.fail(Class::QuotaExhausted);
    assert_eq!(e.dead_mark.map(|m| m.until_ms), Some(T0 + H));
    h.clock.advance(H);
    assert_eq!(h.admit(), AVAILABLE);
    // Many of them never open the breaker.
    let k = Fixture::new();
    for _ in 0..20 {
        k.report(Report::new(Class::QuotaExhausted, false));
    }
    assert_eq!(k.snapshot().state, BreakerState::Closed);
    assert_eq!(k.snapshot().failures_in_window, 0);
}

#[test]
fn no_dead_mark_when_the_class_does_not_fall_over() {
    let f = Fixture::new();
    for class in [
        Class::ModelNotFound,
        Class::SetupFault,
        Class::QuotaExhausted,
    ] {
        assert_eq!(f.report(Report::new(class, false)).dead_mark, None);
    }
    let r429 = Report::new(Class::RateLimited, false).retry_after(Some(5 * H));
    assert_eq!(f.report(r429).dead_mark, None);
    assert_eq!(f.admit(), AVAILABLE);
}

#[test]
fn dead_marks_expire_by_themselves_and_are_pruned() {
    let f = Fixture::new();
    f.fail(Class::SetupFault);
    f.fail(Class::ModelNotFound);
    let snap = f.snapshot();
    assert_eq!(snap.provider_dead_until_ms, Some(T0 + H));
    assert_eq!(snap.dead_models.len(), 1);
    f.clock.advance(6 * H);
    let snap = f.snapshot();
    assert_eq!(snap.provider_dead_until_ms, None);
    assert!(snap.dead_models.is_empty());
    assert_eq!(f.admit(), AVAILABLE);
    // The next write drops the expired marks from the record.
    f.fail(Class::Timeout);
    let len = f.store.get(&health_key("p")).map(|(b, _)| b.len());
    assert_eq!(len, Some(HEADER_LEN + 8 + tally::TALLY_LEN));
}

#[test]
fn a_success_clears_that_models_mark_and_the_provider_mark() {
    let f = Fixture::new();
    let h = f.health();
    h.report("p", "m", &Report::new(Class::ModelNotFound, true));
    h.report("p", "m2", &Report::new(Class::ModelNotFound, true));
    h.report("p", "m", &Report::new(Class::SetupFault, true));
    let e = h.report("p", "m", &Report::new(Class::Ok, false));
    assert!(e.cleared_dead_mark && e.written);
    assert_eq!(h.admit("p", "m", PROBE_TIMEOUT), AVAILABLE);
    assert_eq!(h.admit("p", "m2", PROBE_TIMEOUT), Admission::Dead);
    // A success reported on a healthy record changes only its tally (successes the planner
    // saw as pristine are not reported at all: `Pending`).
    let e = h.report("p", "m", &Report::new(Class::Ok, false));
    assert!(e.written && !e.cleared_dead_mark && e.breaker == BreakerChange::Unchanged);
    assert_eq!(h.snapshot("p").recent.attempts, 5);
}

#[test]
fn a_lost_probe_claim_expires() {
    let f = Fixture::new();
    f.trip();
    f.clock.advance(60 * S);
    assert_eq!(f.admit(), PROBE);
    f.clock.advance(PROBE_TIMEOUT - 1);
    assert_eq!(f.admit(), Admission::BreakerOpen);
    f.clock.advance(1);
    assert_eq!(f.admit(), PROBE);
    assert_eq!(f.admit(), Admission::BreakerOpen);
}

#[test]
fn releasing_a_probe_lets_the_next_request_probe() {
    let f = Fixture::new();
    assert!(!f.health().release_probe("p"));
    f.trip();
    assert!(!f.health().release_probe("p"));
    f.clock.advance(60 * S);
    assert!(!f.health().release_probe("p"));
    assert_eq!(f.admit(), PROBE);
    assert!(f.health().release_probe("p"));
    assert!(!f.health().release_probe("p"));
    assert_eq!(f.admit(), PROBE);
}

#[test]
fn a_probe_answer_that_says_nothing_about_health_releases_the_claim() {
    let f = Fixture::new();
    f.trip();
    f.clock.advance(60 * S);
    for class in [
        Class::InvalidRequest,
        Class::ClientDisconnect,
        Class::RateLimited,
        Class::ModelNotFound,
    ] {
        assert_eq!(f.admit(), PROBE, "{class:?}");
        let e = f.report(Report::new(class, false));
        assert!(e.probe_released && e.written, "{class:?}");
        assert_eq!(e.state, BreakerState::HalfOpen);
    }
    // Without a claim there is nothing to release; a caller who left says nothing at all.
    let e = f.report(Report::new(Class::InvalidRequest, false));
    assert!(e.written && !e.probe_released, "tallied");
    let e = f.report(Report::new(Class::ClientDisconnect, false));
    assert!(!e.written && !e.probe_released);
}

#[test]
fn failures_of_attempts_in_flight_while_open_change_nothing() {
    let f = Fixture::new();
    f.trip();
    let until = f.snapshot().open_until_ms;
    f.clock.advance(10 * S);
    let e = f.report(Report::new(Class::ServerError, true).retry_after(Some(200 * S)));
    assert_eq!(e.breaker, BreakerChange::Unchanged);
    assert!(!e.counted);
    assert_eq!(f.snapshot().open_until_ms, until);
    // And a success while open does not close it early.
    f.report(Report::new(Class::Ok, false));
    assert_eq!(f.admit(), Admission::BreakerOpen);
    assert_eq!(f.snapshot().open_until_ms, until);
}

#[test]
fn model_marks_are_bounded_dropping_the_one_expiring_first() {
    let f = Fixture::new();
    let h = f.health();
    for i in 0..MAX_MODEL_MARKS as u64 {
        let r = Report::new(Class::RateLimited, true).retry_after(Some(2 * H + i * S));
        assert!(h.report("p", &format!("m{i}"), &r).dead_mark.is_some());
    }
    // A 17th mark that outlives m0: m0 goes.
    let e = h.report("p", "new", &Report::new(Class::ModelNotFound, true));
    assert!(e.dead_mark.is_some());
    let snap = h.snapshot("p");
    assert_eq!(snap.dead_models.len(), MAX_MODEL_MARKS);
    assert!(!snap.dead_models.iter().any(|m| m.model == "m0"));
    assert_eq!(h.admit("p", "m0", PROBE_TIMEOUT), AVAILABLE);
    // One that would expire before all others is not kept.
    let short = Report::new(Class::RateLimited, true).retry_after(Some(H));
    assert_eq!(h.report("p", "short", &short).dead_mark, None);
    // Names too long to store are never marked.
    let long = "x".repeat(MAX_MODEL_NAME + 1);
    assert_eq!(
        h.report("p", &long, &Report::new(Class::ModelNotFound, true))
            .dead_mark,
        None
    );
}

#[test]
fn garbage_short_and_other_version_records_read_as_healthy_and_are_overwritten() {
    let f = Fixture::new();
    let key = health_key("p");
    let mut old_version = Record {
        open_until: T0 + H,
        ..Record::default()
    }
    .encode();
    old_version[0] = 0;
    let mut trailing = Record::default().encode();
    trailing.push(0);
    for bytes in [
        vec![],
        vec![1],
        vec![0xFF; 39],
        vec![1; 41],
        old_version,
        trailing,
    ] {
        let cas = f.store.get(&key).map(|(_, c)| c);
        assert!(f.store.set(&key, &bytes, cas).is_ok());
        assert_eq!(f.admit(), AVAILABLE, "{bytes:?}");
        assert_eq!(f.snapshot().state, BreakerState::Closed);
        assert!(!f.health().release_probe("p"));
        assert!(!f.health().ensure_record("p"));
    }
    let e = f.fail(Class::Timeout);
    assert!(e.written && !e.gave_up);
    assert_eq!(f.snapshot().failures_in_window, 1);
}

#[test]
fn ensure_record_creates_a_fresh_record_once() {
    let f = Fixture::new();
    assert!(f.health().ensure_record("p"));
    assert_eq!(
        f.store.get(&health_key("p")).map(|(b, _)| b),
        Some(Record::default().encode())
    );
    f.fail(Class::Timeout);
    assert!(!f.health().ensure_record("p"));
    assert_eq!(f.snapshot().failures_in_window, 1);
    assert_eq!(f.admit(), AVAILABLE);
}

#[test]
fn the_encoding_is_the_documented_layout() {
    let mut tally = Tally {
        last_answer: 8,
        ..Tally::default()
    };
    tally.add(16, 5, 2);
    let r = Record {
        tally,
        last_failure: Some((Class::Timeout, 7)),
        open_until: 0x0102,
        probe_until: 3,
        provider_dead_until: 4,
        ahead_until: 10,
        failures: vec![5, 6],
        models: vec![ModelMark {
            model: "gpt".into(),
            until: 9,
            class: Class::ModelNotFound,
        }],
    };
    let b = r.encode();
    let mut want = vec![3, Class::Timeout as u8, 1, 0, 2, 0, 0, 0];
    for v in [0x0102u64, 3, 7, 4, 10, 5, 6, 9] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.extend_from_slice(&[Class::ModelNotFound as u8, 3, b'g', b'p', b't']);
    want.extend_from_slice(&8u64.to_le_bytes());
    for minute in 0..15u32 {
        let (m, a, f) = if minute == 1 {
            (16u32, 5u32, 2u32)
        } else {
            (0, 0, 0)
        };
        assert_eq!(minute == 1, 16 % 15 == minute);
        for v in [m, a, f] {
            want.extend_from_slice(&v.to_le_bytes());
        }
    }
    assert_eq!(b, want);
    assert_eq!(Record::decode(&b), r);
    let ten = Record {
        failures: (0..10).collect(),
        ..Record::default()
    };
    assert_eq!(ten.encode().len(), 316);
}

/// A store whose writes always lose the race.
struct AlwaysContended(MemoryStore);
impl SharedStore for AlwaysContended {
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)> {
        self.0.get(key)
    }
    fn set(&self, _: &str, _: &[u8], _: Option<Cas>) -> Result<(), SetError> {
        Err(SetError::CasMismatch)
    }
}

/// A store that refuses every write outright, counting the attempts.
struct AlwaysRefused(MemoryStore, std::cell::Cell<u32>);
impl SharedStore for AlwaysRefused {
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)> {
        self.0.get(key)
    }
    fn set(&self, _: &str, _: &[u8], _: Option<Cas>) -> Result<(), SetError> {
        self.1.set(self.1.get() + 1);
        Err(SetError::Refused)
    }
}

#[test]
fn a_refused_write_is_not_retried() {
    let f = Fixture::new();
    f.trip();
    f.clock.advance(60 * S);
    let store = AlwaysRefused(f.store, std::cell::Cell::new(0));
    let h = Health::new(&store, &f.clock, &f.breaker, &f.dead);
    let e = h.report("p", "m", &Report::new(Class::ServerError, true));
    assert!(e.gave_up && !e.written);
    assert_eq!(store.1.get(), 1, "one try, not MAX_CAS_ATTEMPTS");
    // The probe claim is a write too: refused once, the provider stays skipped.
    assert_eq!(h.admit("p", "m", PROBE_TIMEOUT), Admission::BreakerOpen);
    assert_eq!(store.1.get(), 2);
}

#[test]
fn updates_give_up_after_bounded_retries() {
    let f = Fixture::new();
    f.trip();
    f.clock.advance(60 * S);
    let store = AlwaysContended(f.store);
    let h = Health::new(&store, &f.clock, &f.breaker, &f.dead);
    let e = h.report("p", "m", &Report::new(Class::ServerError, true));
    assert!(e.gave_up && !e.written);
    assert_eq!(h.admit("p", "m", PROBE_TIMEOUT), Admission::BreakerOpen);
    // A report that needs no write never gives up (a caller who left says nothing).
    assert!(
        !h.report("q", "m", &Report::new(Class::ClientDisconnect, false))
            .gave_up
    );
}

#[test]
fn snapshot_shows_everything_the_status_endpoint_needs() {
    let f = Fixture::new();
    let h = f.health();
    let healthy = HealthSnapshot {
        state: BreakerState::Closed,
        failures_in_window: 0,
        last_failure: None,
        open_until_ms: None,
        probe_in_flight: false,
        provider_dead_until_ms: None,
        dead_models: vec![],
        recent: Recent {
            attempts: 0,
            failed: 0,
            state: HealthState::Idle,
            last_answer_ms: None,
            answered_recently: false,
        },
    };
    assert_eq!(h.snapshot("p"), healthy);
    h.report("p", "m", &Report::new(Class::ServerError, true));
    f.clock.advance(S);
    h.report("p", "m", &Report::new(Class::ModelNotFound, true));
    let snap = h.snapshot("p");
    assert_eq!(snap.failures_in_window, 1);
    assert_eq!(snap.last_failure, Some((Class::ModelNotFound, T0 + S)));
    let mark = ModelDeadMark {
        model: "m".into(),
        until_ms: T0 + S + 6 * H,
        class: Class::ModelNotFound,
    };
    assert_eq!(snap.dead_models, vec![mark]);
    assert_eq!(
        (snap.recent.attempts, snap.recent.failed, snap.recent.state),
        (2, 2, HealthState::Healthy),
        "fewer than 5 attempts"
    );
    f.clock.advance(30 * S);
    assert_eq!(h.snapshot("p").failures_in_window, 0);
    assert_eq!(
        h.snapshot("p").recent.attempts,
        2,
        "health keeps 15 minutes"
    );
}

#[test]
fn only_a_claimed_probe_moves_the_gauge_to_half_open() {
    assert_eq!(PROBE.shown_state(), Some(BreakerState::HalfOpen));
    for unchanged in [
        AVAILABLE,
        Admission::Available {
            pristine: false,
            probe: false,
        },
        Admission::BreakerOpen,
        Admission::Dead,
    ] {
        assert_eq!(unchanged.shown_state(), None, "{unchanged:?}");
    }
}

#[test]
fn a_record_with_failures_out_of_order_reads_them_ascending() {
    // The filter writes them ascending; a record it did not write is put in order on reading.
    let scrambled = Record {
        failures: vec![9, 3, 7, 3, 1, 12, 0],
        ..Record::default()
    };
    let read = Record::decode(&scrambled.encode());
    assert_eq!(read.failures, vec![0, 1, 3, 3, 7, 9, 12]);
}

#[test]
fn a_request_tried_in_place_counts_once() {
    let f = Fixture::new();
    let retried = |class| Report::new(class, true).in_place(InPlace::Retried);
    let retry = |class, first| Report::new(class, true).in_place(InPlace::After(first));
    // The first try waits for its retry: the tally and the last failure have it, not the
    // breaker.
    let effect = f.report(retried(Class::Overloaded));
    assert!(!effect.counted && effect.written);
    let s = f.snapshot();
    assert_eq!(s.failures_in_window, 0);
    assert_eq!(s.last_failure, Some((Class::Overloaded, T0)));
    assert_eq!(s.recent.attempts, 1);
    // Its retry fails: one failure.
    assert!(
        f.report(retry(Class::Overloaded, Class::Overloaded))
            .counted
    );
    assert_eq!(f.snapshot().failures_in_window, 1);
    assert_eq!(f.snapshot().recent.attempts, 2);
    // It succeeds: none.
    f.report(retried(Class::ServerError));
    assert!(!f.report(retry(Class::Ok, Class::ServerError)).counted);
    assert_eq!(f.snapshot().failures_in_window, 1);
    // It fails with a class that counts nothing, or the caller left: the first try's counts.
    for second in [
        Class::RateLimited,
        Class::ClientDisconnect,
        Class::InvalidRequest,
    ] {
        f.report(retried(Class::ServerError));
        assert!(
            f.report(retry(second, Class::ServerError)).counted,
            "{second:?}"
        );
    }
    assert_eq!(f.snapshot().failures_in_window, 4);
    // Neither counts: nothing.
    f.report(retried(Class::RateLimited));
    assert!(
        !f.report(retry(Class::RateLimited, Class::RateLimited))
            .counted
    );
    assert_eq!(f.snapshot().failures_in_window, 4);
}
