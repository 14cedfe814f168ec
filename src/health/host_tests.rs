//! Host-only tests of `health`: property tests and threads.

use super::*;
use crate::host::{ManualClock, MemoryStore};
use crate::wire::health_key;
use proptest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

const T0: u64 = 1_700_000_000_000;

/// The default window and cooldowns with `failures` as the threshold.
fn policies(failures: u32) -> (BreakerPolicy, DeadMarkPolicy) {
    let breaker = BreakerPolicy {
        failures,
        window_ms: 30_000,
        cooldown_ms: 60_000,
        max_cooldown_ms: 300_000,
        fleet_failures: 0,
        fleet_window_ms: 60_000,
    };
    let dead = DeadMarkPolicy {
        model_not_found_ms: 1,
        setup_fault_ms: 1,
        quota_exhausted_ms: 1,
        rate_limited_ahead_ms: 1,
    };
    (breaker, dead)
}

fn class_strategy() -> impl Strategy<Value = Class> {
    (0u8..10).prop_map(|v| Class::from_u8(v).unwrap_or(Class::Ok))
}

fn record_strategy() -> impl Strategy<Value = Record> {
    let mark = ("[a-z0-9.\\-]{1,40}|é{1,3}", any::<u64>(), class_strategy()).prop_map(
        |(model, until, class)| ModelMark {
            model,
            until,
            class,
        },
    );
    (
        proptest::option::of((class_strategy(), any::<u64>())),
        (any::<u64>(), any::<u64>()),
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec(any::<u64>(), 0..40),
        proptest::collection::vec(mark, 0..=MAX_MODEL_MARKS),
        (
            any::<u64>(),
            proptest::collection::vec(any::<(u32, u32, u32)>(), BUCKETS),
        ),
    )
        .prop_map(
            |(
                last_failure,
                (open_until, ahead_until),
                probe_until,
                provider_dead_until,
                mut failures,
                models,
                (last_answer, buckets),
            )| {
                failures.sort_unstable();
                let mut tally = Tally {
                    last_answer,
                    ..Tally::default()
                };
                for (b, (minute, attempts, failed)) in tally.buckets.iter_mut().zip(buckets) {
                    *b = tally::Bucket {
                        minute,
                        attempts,
                        failed,
                    };
                }
                Record {
                    last_failure,
                    open_until,
                    probe_until,
                    provider_dead_until,
                    ahead_until,
                    failures,
                    models,
                    tally,
                }
            },
        )
}

proptest! {
    #[test]
    fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = Record::decode(&bytes);
        let mut versioned = bytes.clone();
        if let Some(b) = versioned.first_mut() { *b = RECORD_VERSION; }
        let _ = Record::decode(&versioned);
    }

    #[test]
    fn encode_decode_round_trips(record in record_strategy()) {
        prop_assert_eq!(Record::decode(&record.encode()), record);
    }

    #[test]
    fn every_operation_survives_arbitrary_stored_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..200), class in class_strategy(), now in any::<u64>(),
    ) {
        let store = MemoryStore::default();
        let clock = ManualClock::at(now);
        let (breaker, dead) = (BreakerPolicy { failures: 2, window_ms: 1000, cooldown_ms: 10, max_cooldown_ms: 100 , fleet_failures: 0, fleet_window_ms: 60_000},
            DeadMarkPolicy { model_not_found_ms: 5, setup_fault_ms: 5, quota_exhausted_ms: 5, rate_limited_ahead_ms: 5 });
        store.set(&health_key("p"), &bytes, None).map_err(|_| TestCaseError::fail("set"))?;
        let h = Health::new(&store, &clock, &breaker, &dead);
        let _ = h.admit("p", "m", 0);
        let _ = h.snapshot("p");
        let _ = h.release_probe("p");
        let _ = h.ensure_record("p");
        let e = h.report("p", "m", &Report::new(class, true).retry_after(Some(now)));
        prop_assert!(!e.gave_up);
        let _ = h.admit("p", "m", u64::MAX);
    }
}

#[test]
fn concurrent_reports_from_8_threads_count_exactly() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 120;
    let store = MemoryStore::default();
    let clock = ManualClock::at(T0);
    let (breaker, dead) = policies(1000);
    let barrier = Barrier::new(THREADS);
    let gave_up = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let h = Health::new(&store, &clock, &breaker, &dead);
                barrier.wait();
                for i in 0..PER_THREAD {
                    // Mix in reports that write without counting, to add contention.
                    let class = if i % 3 == 0 {
                        Class::RateLimited
                    } else {
                        Class::ServerError
                    };
                    let e = h.report("p", "m", &Report::new(class, true));
                    if e.gave_up {
                        gave_up.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(gave_up.load(Ordering::Relaxed), 0);
    let snap = Health::new(&store, &clock, &breaker, &dead).snapshot("p");
    assert_eq!(
        snap.failures_in_window as usize,
        THREADS * (PER_THREAD - PER_THREAD / 3)
    );
    assert_eq!(snap.state, BreakerState::Closed);
}

#[test]
fn concurrent_reports_and_pending_answers_tally_exactly() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 200;
    let store = MemoryStore::default();
    let clock = ManualClock::at(T0);
    let (breaker, dead) = policies(1000);
    let barrier = Barrier::new(THREADS);
    let lost = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, clock, breaker, dead, barrier, lost) =
                (&store, &clock, &breaker, &dead, &barrier, &lost);
            s.spawn(move || {
                let h = Health::new(store, clock, breaker, dead);
                let mut pending = Pending::default();
                barrier.wait();
                for i in 0..PER_THREAD {
                    // Each thread is a worker: failures are reported, successes held and
                    // written now and then, alone or folded into a report.
                    if i % 4 == 0 {
                        let held = if t % 2 == 0 {
                            pending.take()
                        } else {
                            Pending::default()
                        };
                        let e =
                            h.report_with("p", "m", &Report::new(Class::ServerError, true), &held);
                        if e.gave_up {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                    } else if let Some(earlier) = pending.add(clock.now_ms()) {
                        assert!(h.add_answers("p", &earlier));
                    }
                    if i % 10 == 9 && !h.add_answers("p", &pending.take()) {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
                h.add_answers("p", &pending.take());
            });
        }
    });
    assert_eq!(lost.load(Ordering::Relaxed), 0);
    let recent = Health::new(&store, &clock, &breaker, &dead)
        .snapshot("p")
        .recent;
    assert_eq!(
        (recent.attempts as usize, recent.failed as usize),
        (THREADS * PER_THREAD, THREADS * PER_THREAD / 4)
    );
    assert_eq!(recent.state, HealthState::Degraded);
    assert_eq!(recent.last_answer_ms, Some(T0));
}

#[test]
fn concurrent_threshold_opens_exactly_once() {
    const THREADS: usize = 8;
    let store = MemoryStore::default();
    let clock = ManualClock::at(T0);
    let (breaker, dead) = policies(40);
    let barrier = Barrier::new(THREADS);
    let opened = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let h = Health::new(&store, &clock, &breaker, &dead);
                barrier.wait();
                for _ in 0..5 {
                    if matches!(
                        h.report("p", "m", &Report::new(Class::Timeout, true))
                            .breaker,
                        BreakerChange::Opened { .. }
                    ) {
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(opened.load(Ordering::Relaxed), 1);
}

#[test]
fn exactly_one_of_many_threads_gets_the_probe() {
    const THREADS: usize = 16;
    let store = MemoryStore::default();
    let clock = ManualClock::at(T0);
    let (breaker, dead) = policies(1);
    for round in 0..20 {
        let h = Health::new(&store, &clock, &breaker, &dead);
        // Open (or reopen) the breaker, then let the cooldown pass.
        let e = h.report("p", "m", &Report::new(Class::ServerError, true));
        assert!(
            matches!(
                e.breaker,
                BreakerChange::Opened { .. } | BreakerChange::Reopened { .. }
            ),
            "round {round}: {e:?}"
        );
        clock.advance(60_000);
        let barrier = Barrier::new(THREADS);
        let probes = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    let h = Health::new(&store, &clock, &breaker, &dead);
                    barrier.wait();
                    for _ in 0..10 {
                        match h.admit("p", "m", 120_000) {
                            PROBE => {
                                probes.fetch_add(1, Ordering::Relaxed);
                            }
                            Admission::BreakerOpen => {}
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                });
            }
        });
        assert_eq!(probes.load(Ordering::Relaxed), 1, "round {round}");
    }
}
