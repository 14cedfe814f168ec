//! Hedging through the core: the file's `hedge_after`, the plan it makes, what the downstream
//! role publishes for the route, and the answer's public headers.

use crate::answer::{self, AnswerFacts, AnswerReads};
use crate::classify::Class;
use crate::config::Config;
use crate::handoff::Refused;
use crate::health::Admission;
use crate::ids::ProviderId;
use crate::intake;
use crate::plan::{self, Gatekeeper, Plan, RequestFacts};

struct Open;

impl Gatekeeper for Open {
    fn gate(&self, _provider: ProviderId, _model: &str) -> Admission {
        Admission::Available {
            pristine: true,
            probe: false,
        }
    }
}

fn config(chain: &str) -> Result<Config, Vec<String>> {
    let json = format!(
        r#"{{"providers":[{{"name":"a"}},{{"name":"b"}},{{"name":"c"}}],"chains":[{chain}]}}"#
    );
    Config::from_json(json.as_bytes(), &|_| None).map_err(|e| {
        e.into_iter()
            .map(|e| format!("{}: {}", e.field, e.problem))
            .collect()
    })
}

fn plan_of(c: &Config) -> Plan {
    let facts = RequestFacts {
        model: "m",
        ..Default::default()
    };
    plan::plan(c, &facts, &Open).expect("planned")
}

#[test]
fn hedge_after_is_read_and_refused_where_a_race_cannot_be() {
    let c = config(r#"{"name":"x","hedge_after":"500ms","providers":["a","b"]}"#).unwrap();
    assert_eq!(c.chains[0].hedge_after_ms, Some(500));
    assert_eq!(
        config(r#"{"name":"x","providers":["a"]}"#).unwrap().chains[0].hedge_after_ms,
        None
    );
    for (chain, needle) in [
        (
            r#"{"name":"x","hedge_after":0,"providers":["a","b"]}"#,
            "more than 0",
        ),
        (
            r#"{"name":"x","hedge_after":"1s","retry_in_place":{},"providers":["a","b"]}"#,
            "retry_in_place",
        ),
        (
            r#"{"name":"x","hedge_after":"1s","context_window":["c"],"providers":["a","b"]}"#,
            "context_window",
        ),
        (
            r#"{"name":"x","hedge_after":"1s","max_attempts":1,"providers":["a","b"]}"#,
            "max_attempts",
        ),
    ] {
        let errors = config(chain).unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("chains[0].hedge_after:") && e.contains(needle)),
            "{chain}: {errors:?}"
        );
    }
}

#[test]
fn a_hedged_plan_is_its_first_two_entries_and_attempt_one_goes_to_their_pair() {
    let c = config(r#"{"name":"x","hedge_after":"500ms","providers":["a","b","c"]}"#).unwrap();
    let p = plan_of(&c);
    assert_eq!(
        p.slots.len(),
        2,
        "a hedged request is its two racing attempts"
    );
    assert_eq!(intake::hedge_after(&c, &p), Some(500));
    let mut set = Vec::new();
    intake::route_properties(&c, &p, |property, cluster| {
        set.push((property, cluster.to_string()))
    });
    assert_eq!(
        set,
        [
            ("llm_failover.try1", "a+b".to_string()),
            ("llm_failover.try2", "b".to_string())
        ]
    );
    // Without hedging the walk is the chain's, each attempt on its provider's cluster.
    let plain = config(r#"{"name":"x","providers":["a","b","c"]}"#).unwrap();
    let p = plan_of(&plain);
    assert_eq!((p.slots.len(), intake::hedge_after(&plain, &p)), (3, None));
    assert_eq!(intake::hedge_pair(&plain, &p), None);
}

#[test]
fn a_pair_on_one_cluster_needs_no_composite_and_a_lone_slot_no_hedge() {
    let c =
        config(r#"{"name":"x","hedge_after":"1s","providers":["a",{"provider":"a","model":"n"}]}"#)
            .unwrap();
    let p = plan_of(&c);
    assert_eq!(intake::hedge_after(&c, &p), Some(1000));
    assert_eq!(intake::hedge_pair(&c, &p), None);
    let lone = config(r#"{"name":"x","hedge_after":"1s","providers":["a"]}"#).unwrap();
    let p = plan_of(&lone);
    assert_eq!(intake::hedge_after(&lone, &p), None);
}

struct Reads(Option<usize>);

impl AnswerReads for Reads {
    fn code_details(&self) -> Option<String> {
        None
    }
    fn outcome(&self, _attempt: usize) -> Option<Class> {
        None
    }
    fn refused(&self) -> Option<Refused> {
        None
    }
    fn now_ms(&self) -> u64 {
        0
    }
    fn answered(&self) -> Option<usize> {
        self.0
    }
}

#[test]
fn the_answer_names_the_races_winner_whichever_attempt_envoy_started_last() {
    let c = config(r#"{"name":"x","hedge_after":"500ms","providers":["a","b"]}"#).unwrap();
    let p = plan_of(&c);
    let facts = AnswerFacts {
        attempt_count: 2,
        marker: false,
        status: 200,
        start_ms: 0,
    };
    let first = answer::answer(&c, &p, facts, &Reads(Some(1)));
    assert_eq!(
        (first.provider, first.attempts_header),
        (Some("a"), Some(2))
    );
    assert_eq!((first.served, first.fallback_count), (1, None));
    let hedge = answer::answer(&c, &p, facts, &Reads(Some(2)));
    assert_eq!(hedge.provider, Some("b"));
    assert_eq!(
        (hedge.fallback_count, hedge.fallback_reason),
        (Some(1), Some("hedge"))
    );
}

#[test]
fn grouping_mode_refuses_hedge_after() {
    let json = r#"{"routing":"groups","providers":[{"name":"a"},{"name":"b"}],
        "chains":[{"name":"x","hedge_after":"500ms","providers":["a","b"]}]}"#;
    let c = Config::from_json(json.as_bytes(), &|_| None).unwrap();
    let errors = crate::group::groups(&c).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.field == "chains[0].hedge_after" && e.problem.contains("1.39")),
        "{errors:?}"
    );
}
