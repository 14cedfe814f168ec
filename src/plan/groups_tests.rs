//! Planning a chain with groups of equal entries (behaviour.md 2.10).

use super::*;
use std::cell::Cell;
use std::collections::HashMap;

/// Health double: fixed gates, a draw sequence as a worker's, in-flight counts.
#[derive(Default)]
struct Fake {
    gates: HashMap<usize, Admission>,
    state: Cell<u64>,
    busy: HashMap<usize, u32>,
}

impl Gatekeeper for Fake {
    fn gate(&self, provider: ProviderId, _model: &str) -> Admission {
        (self.gates.get(&provider.index()).copied()).unwrap_or(Admission::Available {
            pristine: true,
            probe: false,
        })
    }
    fn draw(&self) -> u64 {
        let mut s = self.state.get();
        let r = crate::pick::next(&mut s);
        self.state.set(s);
        r
    }
    fn in_flight(&self, provider: ProviderId) -> u32 {
        self.busy.get(&provider.index()).copied().unwrap_or(0)
    }
}

fn config(json: &str) -> Config {
    Config::from_json(json.as_bytes(), &|_| None).expect("test config is valid")
}

/// Providers a..e; chain: a, then the group {b: 2, c: 1, d: 1}, then e.
const GROUP: &str = r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"c"},{"name":"d"},{"name":"e"}],
    "chains":[{"name":"main","max_attempts":5,"providers":["a",
        {"group":["b","c","d"],"weights":[2,1,1]},"e"]}]}"#;

fn facts(model: &str) -> RequestFacts<'_> {
    RequestFacts {
        model,
        ..Default::default()
    }
}

fn entries(plan: &Plan) -> Vec<usize> {
    plan.slots.iter().map(|s| s.entry.index()).collect()
}

#[test]
fn a_group_is_one_position_its_members_each_once_then_the_chain_goes_on() {
    let c = config(GROUP);
    let health = Fake::default();
    for _ in 0..200 {
        let p = plan(&c, &facts("m"), &health).unwrap();
        let e = entries(&p);
        assert_eq!(e.len(), 5);
        assert_eq!((e[0], e[4]), (0, 4), "{e:?}");
        let mut members = e[1..4].to_vec();
        members.sort_unstable();
        assert_eq!(members, vec![1, 2, 3]);
    }
}

#[test]
fn the_group_splits_by_weight_and_an_open_member_s_share_goes_to_the_others() {
    let c = config(GROUP);
    let mut health = Fake::default();
    // The chain's first entry open: requests start in the group.
    health.gates.insert(0, Admission::BreakerOpen);
    let mut firsts = [0usize; 5];
    for _ in 0..10_000 {
        let p = plan(&c, &facts("m"), &health).unwrap();
        firsts[p.slots[0].entry.index()] += 1;
        assert_eq!(p.skip_before_start(&c.chains[0]), Some("breaker_open"));
    }
    let share = |n: usize| n as f64 / 100.0;
    assert!((share(firsts[1]) - 50.0).abs() <= 2.0, "{firsts:?}");
    assert!((share(firsts[2]) - 25.0).abs() <= 2.0, "{firsts:?}");
    // b open too: c and d take half each, and b is left out, not tried.
    health.gates.insert(1, Admission::BreakerOpen);
    let mut firsts = [0usize; 5];
    for _ in 0..10_000 {
        let p = plan(&c, &facts("m"), &health).unwrap();
        firsts[p.slots[0].entry.index()] += 1;
        assert!(!entries(&p).contains(&1));
    }
    assert!((share(firsts[2]) - 50.0).abs() <= 2.0, "{firsts:?}");
}

#[test]
fn a_member_left_out_while_its_group_serves_is_no_fallback_reason() {
    let c = config(
        r#"{"providers":[{"name":"b"},{"name":"c"}],
        "chains":[{"name":"main","providers":[{"group":["b","c"]}]}]}"#,
    );
    let mut health = Fake::default();
    health.gates.insert(0, Admission::Dead);
    for _ in 0..20 {
        let p = plan(&c, &facts("m"), &health).unwrap();
        assert_eq!(entries(&p), vec![1]);
        assert_eq!(p.skip_before_start(&c.chains[0]), None);
    }
}

#[test]
fn max_attempts_caps_the_walk_inside_a_group() {
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"c"},{"name":"d"}],
        "chains":[{"name":"main","max_attempts":2,"providers":[{"group":["a","b","c"]},"d"]}]}"#,
    );
    let health = Fake::default();
    for _ in 0..50 {
        let e = entries(&plan(&c, &facts("m"), &health).unwrap());
        assert_eq!(e.len(), 2);
        assert!(e.iter().all(|&i| i < 3) && e[0] != e[1], "{e:?}");
    }
}

#[test]
fn least_busy_starts_with_the_member_with_fewest_in_flight() {
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"c"}],
        "chains":[{"name":"main","providers":[{"group":["a","b","c"],"policy":"least_busy"}]}]}"#,
    );
    let mut health = Fake::default();
    health.busy.insert(0, 5);
    health.busy.insert(1, 1);
    health.busy.insert(2, 3);
    for _ in 0..20 {
        assert_eq!(
            entries(&plan(&c, &facts("m"), &health).unwrap()),
            vec![1, 2, 0]
        );
    }
    // The least busy open: the next least busy serves.
    health.gates.insert(1, Admission::BreakerOpen);
    assert_eq!(
        entries(&plan(&c, &facts("m"), &health).unwrap()),
        vec![2, 0]
    );
}

#[test]
fn a_chain_without_groups_draws_nothing() {
    struct NoDraw;
    impl Gatekeeper for NoDraw {
        fn gate(&self, _: ProviderId, _: &str) -> Admission {
            Admission::Available {
                pristine: true,
                probe: false,
            }
        }
        fn draw(&self) -> u64 {
            panic!("drew for a chain without groups")
        }
    }
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"b"}],"chains":[{"name":"main","providers":["a","b"]}]}"#,
    );
    assert_eq!(
        entries(&plan(&c, &facts("m"), &NoDraw).unwrap()),
        vec![0, 1]
    );
}
