//! What `render` writes for a chain with `hedge_after` (docs/internals.md, hedging): a composite
//! cluster per ordered pair, the first attempt's matcher naming them, hosts naming their
//! provider; and what it refuses.

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use llm_failover_cli::{load, load_for, render};
use serde_yaml_ng::Value;

const HEDGED: &str = r#"
providers:
  - {name: a, endpoint: "127.0.0.1:1001"}
  - {name: b, endpoint: "127.0.0.1:1002"}
  - {name: c, endpoint: "127.0.0.1:1003"}
chains:
  - {name: fast, models: ["x-*"], hedge_after: 500ms, providers: [a, b]}
  - {name: plain, providers: [a, b, c]}
"#;

fn bootstrap(yaml: &str) -> Value {
    let gw = load(yaml, &|_| None, None).unwrap_or_else(|e| panic!("{e:?}"));
    let text = render::bootstrap_text(&gw, "test.failover.yaml");
    serde_yaml_ng::from_str(&text).expect("the rendered text is YAML")
}

fn cluster<'a>(b: &'a Value, name: &str) -> Option<&'a Value> {
    (b["static_resources"]["clusters"].as_sequence().unwrap())
        .iter()
        .find(|c| c["name"].as_str() == Some(name))
}

#[test]
fn a_hedging_chain_gets_a_composite_per_ordered_pair_reached_by_attempt_one() {
    let b = bootstrap(HEDGED);
    for (name, first, second) in [("a+b", "a", "b"), ("b+a", "b", "a")] {
        let c = cluster(&b, name).unwrap_or_else(|| panic!("no cluster {name}"));
        assert_eq!(c["cluster_type"]["name"], "envoy.clusters.composite");
        let subs = &c["cluster_type"]["typed_config"]["clusters"];
        assert_eq!(
            (subs[0]["name"].as_str(), subs[1]["name"].as_str()),
            (Some(first), Some(second))
        );
        assert_eq!(c["lb_policy"], "CLUSTER_PROVIDED");
        let filters = &c["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"];
        assert_eq!(
            filters[0]["name"], "llm_failover",
            "the upstream role runs on the composite"
        );
    }
    // Only the hedging chain's providers pair up.
    assert!(cluster(&b, "a+c").is_none() && cluster(&b, "c+a").is_none());
    let endpoint = &cluster(&b, "b").unwrap()["load_assignment"]["endpoints"][0]["lb_endpoints"][0];
    assert_eq!(
        endpoint["metadata"]["filter_metadata"]["llm_failover"]["provider"],
        "b"
    );
    let text = serde_yaml_ng::to_string(
        &b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
            ["route_config"],
    )
    .unwrap();
    // Attempt 1's map names the pairs; no route-wide hedge (the filter asks per request).
    assert!(
        text.contains("cluster: a+b") && text.contains("cluster: b+a"),
        "{text}"
    );
    assert!(!text.contains("hedge_policy"), "{text}");
}

#[test]
fn without_hedge_after_nothing_changes() {
    let b = bootstrap(&HEDGED.replace(" hedge_after: 500ms,", ""));
    assert!(cluster(&b, "a+b").is_none());
    let endpoint = &cluster(&b, "a").unwrap()["load_assignment"]["endpoints"][0]["lb_endpoints"][0];
    assert!(endpoint.get("metadata").is_none());
}

#[test]
fn grouping_mode_and_filters_on_a_providers_cluster_refuse_hedge_after() {
    let Err(old) = load_for(HEDGED, &|_| None, None, Some("1.38")) else {
        panic!("accepted on 1.38")
    };
    assert!(
        old.iter()
            .any(|d| format!("{d:?}").contains("chains[0].hedge_after")),
        "{old:?}"
    );
    let filed = HEDGED.replace(
        r#"{name: b, endpoint: "127.0.0.1:1002"}"#,
        r#"{name: b, endpoint: "127.0.0.1:1002", credential: {header: authorization, prefix: "Bearer ", file: /var/run/token}}"#,
    );
    let Err(errors) = load(&filed, &|_| None, None) else {
        panic!("accepted")
    };
    let text = format!("{errors:?}");
    assert!(
        text.contains("chains[0].hedge_after") && text.contains("from a file"),
        "{text}"
    );
}
