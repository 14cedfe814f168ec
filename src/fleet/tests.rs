//! The sync's arithmetic and state over an in-memory store, the service's answers written with
//! the same encoder the golden bytes hold (`wire::tests`).

use super::*;
use crate::budget::Budgets;
use crate::host::{ManualClock, MemoryStore};

fn config(extra: &str) -> Config {
    let json = format!(
        r#"{{"providers":[{{"name":"a","budget":{{"tokens":100,"window":"1m"}}}},{{"name":"b"}}],
            "chains":[{{"name":"c","providers":["a","b"]}}],
            "fleet":{{"address":"127.0.0.1:8081"{extra}}},
            "breaker":{{"fleet_failures":5,"fleet_window":"1m"}}}}"#
    );
    Config::from_json(json.as_bytes(), &|_| None).unwrap()
}

/// A `RateLimitResponse` with one status per (limit, remaining) (`None`: no current limit).
fn answer(statuses: &[(Option<u32>, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (limit, remaining) in statuses {
        let mut s = vec![0x08, 0x01];
        if let Some(l) = limit {
            let mut inner = vec![0x08];
            let mut v = *l;
            while v >= 0x80 {
                inner.push((v as u8) | 0x80);
                v >>= 7;
            }
            inner.push(v as u8);
            s.push(0x12);
            s.push(inner.len() as u8);
            s.extend(inner);
        }
        if *remaining > 0 {
            s.push(0x18);
            s.push(*remaining as u8);
        }
        out.push(0x12);
        out.push(s.len() as u8);
        out.extend(s);
    }
    out
}

struct World {
    config: Config,
    store: MemoryStore,
    clock: ManualClock,
}

impl World {
    fn new(extra: &str) -> World {
        let w = World {
            config: config(extra),
            store: MemoryStore::default(),
            clock: ManualClock::at(60_000 * 1000 + 10),
        };
        let b = w.budgets();
        b.ensure_record("a", true);
        ensure_records(&w.config, &w.store);
        w
    }
    fn budgets(&self) -> SharedBudgets<'_> {
        SharedBudgets {
            store: &self.store,
            clock: &self.clock,
        }
    }
    fn left(&self) -> u64 {
        let budget = self.config.providers[0].budget.unwrap();
        self.budgets().left("a", &budget).tokens
    }
    fn spend(&self, tokens: u64) {
        let budget = self.config.providers[0].budget.unwrap();
        self.budgets().spend("a", &budget, tokens);
    }
    fn start(&self) -> Sync {
        start(&self.config, &self.store, &self.clock).unwrap()
    }
    fn finish(&self, sync: Sync, answer: Option<&[u8]>) -> Outcome {
        finish(&self.config, &self.store, &self.clock, sync, answer)
    }
}

/// The (key, value, hits) of each descriptor a sync's request carries.
fn reported(sync: &Sync) -> Vec<u64> {
    let mut hits: Vec<u64> = sync.budgets.iter().map(|(_, t)| t.tokens).collect();
    hits.extend(sync.failures.iter().map(|(_, n)| *n));
    hits
}

#[test]
fn a_replica_subtracts_its_unreported_spend_from_the_fleets_last_figure() {
    let w = World::new("");
    // No figure yet: this Envoy's own count.
    w.spend(30);
    assert_eq!(w.left(), 70);
    let sync = w.start();
    assert_eq!(reported(&sync), vec![30, 0, 0]);
    // Spent while the sync is out: not reported by it, still subtracted.
    w.spend(5);
    // The fleet (others spent 40) answers 100 - 30 - 40 = 30 left.
    let o = w.finish(
        sync,
        Some(&answer(&[(Some(100), 30), (Some(5), 5), (Some(5), 5)])),
    );
    assert_eq!(o.result, StoreState::Ok);
    assert_eq!(o.changed_from, Some(StoreState::Unknown));
    assert_eq!(w.left(), 25);
    // The next sync reports only the 5.
    let sync = w.start();
    assert_eq!(reported(&sync)[0], 5);
    let o = w.finish(
        sync,
        Some(&answer(&[(Some(100), 0), (Some(5), 5), (Some(5), 5)])),
    );
    assert_eq!(o.changed_from, None);
    assert_eq!(w.left(), 0);
    // The next window starts from the budget.
    w.clock.advance(60_000);
    assert_eq!(w.left(), 100);
}

#[test]
fn spend_held_while_the_store_fails_is_reported_once_it_answers() {
    let w = World::new("");
    w.spend(10);
    let o = w.finish(
        w.start(),
        Some(&answer(&[(Some(100), 80), (Some(5), 5), (Some(5), 5)])),
    );
    assert_eq!(o.result, StoreState::Ok);
    assert_eq!(w.left(), 80);
    // Down: the fleet's last figure minus what this Envoy spent since.
    w.spend(7);
    let o = w.finish(w.start(), None);
    assert_eq!(
        (o.result, o.changed_from),
        (StoreState::Unavailable, Some(StoreState::Ok))
    );
    w.spend(3);
    assert_eq!(w.left(), 70);
    let o = w.finish(w.start(), Some(b"\xff\xff"));
    assert_eq!((o.result, o.changed_from), (StoreState::Unavailable, None));
    // Back: all 10 held tokens go in one report.
    let sync = w.start();
    assert_eq!(reported(&sync)[0], 10);
    let o = w.finish(
        sync,
        Some(&answer(&[(Some(100), 60), (Some(5), 5), (Some(5), 5)])),
    );
    assert_eq!(
        (o.result, o.changed_from),
        (StoreState::Ok, Some(StoreState::Unavailable))
    );
    assert_eq!(o.held_reported, 10);
    assert_eq!(w.left(), 60);
    let budget = w.config.providers[0].budget.unwrap();
    assert_eq!(w.budgets().left_and_unreported("a", &budget).1, 0);
    // Held spend of a window that ended is not reported into the next.
    w.spend(4);
    w.finish(w.start(), None);
    w.clock.advance(60_000);
    assert_eq!(reported(&w.start())[0], 0);
}

#[test]
fn closed_counts_budgets_as_spent_while_the_store_fails() {
    let w = World::new(r#","on_unavailable":"closed""#);
    w.finish(w.start(), None);
    assert_eq!(w.left(), 0);
    w.finish(
        w.start(),
        Some(&answer(&[(Some(100), 90), (Some(5), 5), (Some(5), 5)])),
    );
    assert_eq!(w.left(), 90);
}

#[test]
fn a_store_that_does_not_know_the_domain_is_refused_and_counts_nothing() {
    let w = World::new("");
    w.spend(10);
    let o = w.finish(w.start(), Some(&answer(&[(None, 0), (None, 0), (None, 0)])));
    assert_eq!(
        (o.result, o.changed_from),
        (StoreState::Refused, Some(StoreState::Unknown))
    );
    assert_eq!(w.left(), 90);
    assert_eq!(reported(&w.start())[0], 10);
    assert!(change_line(
        w.config.fleet.as_ref().unwrap(),
        StoreState::Unknown,
        o.result,
        0
    )
    .contains("add `domain: llm-failover`"));
}

#[test]
fn the_fleets_failures_open_a_provider_once_per_window() {
    let w = World::new("");
    for _ in 0..2 {
        count_failure(&w.store, &w.clock, "b");
    }
    let sync = w.start();
    assert_eq!(reported(&sync), vec![0, 0, 2]);
    // Others failed too: the fleet's count reached 5.
    let o = w.finish(
        sync,
        Some(&answer(&[(Some(100), 100), (Some(5), 5), (Some(5), 0)])),
    );
    assert_eq!(o.opened, vec!["b".to_string()]);
    let health = Health::new(&w.store, &w.clock, &w.config.breaker, &w.config.dead_marks);
    assert_eq!(
        health.snapshot("b").state,
        crate::health::BreakerState::Open
    );
    // After the cooldown (per replica) the count, still at the threshold, opens nothing again.
    w.clock.advance(5_000);
    let o = w.finish(
        w.start(),
        Some(&answer(&[(Some(100), 100), (Some(5), 5), (Some(5), 0)])),
    );
    assert!(o.opened.is_empty());
    // Failures not reported (store down) are counted again.
    count_failure(&w.store, &w.clock, "a");
    w.finish(w.start(), None);
    assert_eq!(reported(&w.start()), vec![0, 1, 0]);
}

#[test]
fn one_worker_claims_each_interval() {
    let w = World::new("");
    let fleet = w.config.fleet.as_ref().unwrap();
    assert!(claim(fleet, &w.store, &w.clock));
    assert!(!claim(fleet, &w.store, &w.clock));
    w.clock.advance(700);
    assert!(!claim(fleet, &w.store, &w.clock));
    w.clock.advance(100);
    assert!(claim(fleet, &w.store, &w.clock));
}

#[test]
fn a_sync_handed_back_is_reported_by_the_next() {
    let w = World::new("");
    w.spend(10);
    count_failure(&w.store, &w.clock, "b");
    let sync = w.start();
    assert_eq!(reported(&sync), vec![10, 0, 1]);
    hand_back(&w.config, &w.store, &w.clock, sync);
    assert_eq!(reported(&w.start()), vec![10, 0, 1]);
    assert_eq!(SyncRecord::read(&w.store).state, StoreState::Unknown);
}
