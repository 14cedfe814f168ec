//! Groups of equal entries (docs/behaviour.md 2.10) through both roles: the split by weight,
//! failover inside the group then down the chain, breakers per member, `least_busy` counting
//! requests in flight in shared data, and the status endpoint's view of the group.

use super::*;

const GROUP: &str = r#"{
    "providers": [
        {"name": "east", "cluster": "ce"},
        {"name": "west", "cluster": "cw"},
        {"name": "backup", "cluster": "cx"}
    ],
    "chains": [{"name": "main", "models": ["*"], "max_attempts": 3,
        "providers": [{"group": ["east", "west"], "weights": [3, 1]}, "backup"]}],
    "breaker": {"failures": 2, "window": "30s", "cooldown": "60s"},
    "status_path": "/llm-failover/status"
}"#;

fn root(gw: &Gateway) -> Recording {
    Recording {
        world: Rc::clone(&gw.world),
        stream: Rc::default(),
    }
}

#[test]
fn a_group_splits_by_weight_and_a_failure_moves_to_the_other_member_then_down_the_chain() {
    crate::roles::seed_draws(42);
    let gw = Gateway::new(GROUP);
    let mut first = std::collections::HashMap::new();
    for _ in 0..400 {
        let r = gw.chat("m", &[ok()]);
        *first.entry(r.clusters()[0].to_string()).or_insert(0) += 1;
    }
    let east = first.get("ce").copied().unwrap_or(0);
    assert!((270..=330).contains(&east), "{first:?}");
    assert_eq!(first.get("cx"), None, "backup only after the group");
    // The member tried first fails: the other member, then backup.
    let r = gw.chat("m", &[status(500), ok()]);
    let c = r.clusters();
    assert_eq!(c.len(), 2);
    assert!(c.contains(&"ce") && c.contains(&"cw"), "{c:?}");
    assert_eq!(r.header(wire::FALLBACK_COUNT_HEADER), Some("1"));
    let r = gw.chat("m", &[status(500), status(500), ok()]);
    assert_eq!(r.clusters()[2], "cx");
}

#[test]
fn an_open_member_is_left_out_and_its_share_goes_to_the_other() {
    crate::roles::seed_draws(7);
    let gw = Gateway::new(GROUP);
    // east fails twice: its breaker opens (failures: 2), per member.
    let mut east_failures = 0;
    while east_failures < 2 {
        let r = gw.chat("m", &[status(500), ok()]);
        east_failures += usize::from(r.clusters()[0] == "ce");
    }
    for _ in 0..40 {
        let r = gw.chat("m", &[ok()]);
        assert_eq!((r.status, r.clusters()), (200, vec!["cw"]));
        assert_eq!(
            r.header(wire::FALLBACK_REASON_HEADER),
            None,
            "the group served"
        );
    }
    assert!(gw.metric(&names::skipped("east", "breaker_open")) >= 40);
    assert!(gw.metric(&attempts_metric("west", Class::Ok)) >= 40);
}

#[test]
fn least_busy_sends_new_requests_away_from_the_member_holding_requests() {
    crate::roles::seed_draws(3);
    let json = GROUP.replace(r#""weights": [3, 1]"#, r#""policy": "least_busy""#);
    let gw = Gateway::new(&json);
    let store = root(&gw);
    // Two requests still streaming from east (counted by other workers' attempts).
    crate::busy::count(&store, "east", true);
    crate::busy::count(&store, "east", true);
    for _ in 0..20 {
        assert_eq!(gw.chat("m", &[ok()]).clusters(), ["cw"]);
    }
    // Every attempt that ended lowered the count it raised: west is back at 0, even after a
    // failover and a reset.
    assert_eq!(crate::busy::in_flight(&store, "west"), 0);
    let r = gw.chat("m", &[status(500), ok()]);
    assert_eq!(r.clusters(), ["cw", "ce"]);
    let r = gw.chat("m", &[Provider::Refused, ok()]);
    assert_eq!(r.status, 200);
    assert_eq!(crate::busy::in_flight(&store, "west"), 0);
    assert_eq!(crate::busy::in_flight(&store, "east"), 2);
    // The status endpoint shows the group, its members and what each holds.
    let status = gw.request(
        &[(":method", "GET"), (":path", "/llm-failover/status")],
        "",
        &[],
    );
    let g = &status.body_json()["groups"][0];
    assert_eq!(g["chain"], "main");
    assert_eq!(g["position"], 0);
    assert_eq!(g["policy"], "least_busy");
    assert_eq!(g["members"][0]["provider"], "east");
    assert_eq!(g["members"][0]["in_flight"], 2);
    assert_eq!(g["members"][1]["share_percent"], 50.0);
}

#[test]
fn a_weighted_group_counts_nothing_in_flight() {
    let gw = Gateway::new(GROUP);
    gw.chat("m", &[ok()]);
    let store = root(&gw);
    assert_eq!(store.get("llm_failover.busy.east"), None);
    let status = gw.request(
        &[(":method", "GET"), (":path", "/llm-failover/status")],
        "",
        &[],
    );
    let g = &status.body_json()["groups"][0];
    assert_eq!(g["members"][0]["share_percent"], 75.0);
    assert_eq!(g["members"][0]["weight"], 3);
    assert_eq!(g["members"][0]["in_flight"], serde_json::Value::Null);
}
