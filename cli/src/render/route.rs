//! The route: its matcher cluster specifier (which attempt goes to which cluster) and the retry
//! policy that walks the chain.

use super::{clusters, duration, seq, typed, NAME};
use crate::input::Gateway;
use crate::version::Mode;
use llm_failover::wire;
use serde_yaml_ng::{Mapping, Value};

pub const RETRY_ON: &str = "retriable-headers,connect-failure,reset,refused-stream";

const MATCHER_SPECIFIER: &str = "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.MatcherClusterSpecifier";

const CLUSTER_ACTION: &str =
    "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.ClusterAction";

const HEADER_INPUT: &str = "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput";

const FILTER_STATE_INPUT: &str =
    "type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.FilterStateInput";

const PREVIOUS_PRIORITIES: &str =
    "type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig";

/// Attempt slots the route must offer: the longest plan any chain can make.
pub fn slot_count(gw: &Gateway) -> usize {
    gw.config
        .chains
        .iter()
        .map(|c| {
            // In-place retry may try each entry twice (behaviour.md 5).
            let tries = if c.retry_in_place.is_some() { 2 } else { 1 };
            c.max_attempts.min(c.entries.len() * tries)
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

/// Filter-state key the route reads for attempt slot `k` (from 1).
pub fn slot_key(k: usize) -> String {
    format!(
        "{}{}{k}",
        wire::ENVOY_WASM_STATE_PREFIX,
        wire::SLOT_PROPERTY_PREFIX
    )
}

fn slot_matcher(k: usize, cluster_names: &[&str]) -> Value {
    let mut actions = Mapping::new();
    for c in cluster_names {
        actions.insert(
            (*c).into(),
            map! { "action" => map! { "name" => "cluster", "typed_config" => typed(CLUSTER_ACTION, map! { "cluster" => *c }) } },
        );
    }
    map! {
        "matcher_tree" => map! {
            "input" => map! { "name" => format!("slot{k}"), "typed_config" => typed(FILTER_STATE_INPUT, map! { "key" => slot_key(k) }) },
            "exact_match_map" => map! { "map" => Value::Mapping(actions) },
        },
    }
}

/// Grouping mode's matcher: the cluster the downstream filter named in filter state, among the
/// provider clusters (one-attempt plans) and the grouping clusters.
fn group_matcher(gw: &Gateway) -> Value {
    let mut actions = Mapping::new();
    let names = clusters(gw)
        .into_iter()
        .map(|u| u.cluster.as_str())
        .chain(gw.groups.iter().map(|g| g.name.as_str()));
    for c in names {
        actions.insert(
            c.into(),
            map! { "action" => map! { "name" => "cluster", "typed_config" => typed(CLUSTER_ACTION, map! { "cluster" => c }) } },
        );
    }
    let key = format!("{}{}", wire::ENVOY_WASM_STATE_PREFIX, wire::GROUP_PROPERTY);
    map! {
        "matcher_tree" => map! {
            "input" => map! { "name" => "group", "typed_config" => typed(FILTER_STATE_INPUT, map! { "key" => key }) },
            "exact_match_map" => map! { "map" => Value::Mapping(actions) },
        },
    }
}

/// The matcher tree: no attempt-count header (first attempt) -> slot 1; on retry the header
/// holds the previous attempt's number n -> slot n+1. In grouping mode, the group's cluster.
pub fn cluster_matcher(gw: &Gateway) -> Value {
    if gw.envoy_version.mode() == Mode::Grouping {
        return group_matcher(gw);
    }
    let names: Vec<&str> = clusters(gw).iter().map(|u| u.cluster.as_str()).collect();
    // Attempt 1 of a hedged request goes to its pair's composite cluster.
    let pairs = super::cluster::hedge_pairs(gw);
    let mut first: Vec<&str> = names.clone();
    first.extend(pairs.iter().map(|(name, _, _)| name.as_str()));
    let slots = slot_count(gw);
    if slots == 1 {
        return slot_matcher(1, &first);
    }
    let mut by_attempt = Mapping::new();
    for k in 2..=slots {
        by_attempt.insert(
            (k - 1).to_string().into(),
            map! { "matcher" => slot_matcher(k, &names) },
        );
    }
    map! {
        "matcher_tree" => map! {
            "input" => map! { "name" => "attempt", "typed_config" => typed(HEADER_INPUT, map! { "header_name" => wire::ATTEMPT_COUNT_HEADER }) },
            "exact_match_map" => map! { "map" => Value::Mapping(by_attempt) },
        },
        "on_no_match" => map! { "matcher" => slot_matcher(1, &first) },
    }
}

pub fn route(gw: &Gateway) -> Value {
    let t = &gw.config.timeouts;
    let mut retry = Mapping::new();
    retry.insert("retry_on".into(), RETRY_ON.into());
    retry.insert("num_retries".into(), ((slot_count(gw) - 1) as u64).into());
    retry.insert("per_try_timeout".into(), duration(t.attempt_ms).into());
    if t.stall_ms > 0 {
        retry.insert("per_try_idle_timeout".into(), duration(t.stall_ms).into());
    }
    retry.insert(
        "retriable_headers".into(),
        seq(vec![
            map! { "name" => wire::RETRY_MARKER_HEADER, "string_match" => map! { "exact" => wire::RETRY_MARKER_RETRY } },
        ]),
    );
    match gw.envoy_version.mode() {
        Mode::Router => {
            retry.insert("refresh_cluster_on_retry".into(), true.into());
        }
        Mode::Grouping => {
            // Attempt k goes to the grouping cluster's k-th sub-cluster (each is one priority).
            retry.insert(
                "retry_priority".into(),
                map! {
                    "name" => "envoy.retry_priorities.previous_priorities",
                    "typed_config" => typed(PREVIOUS_PRIORITIES, map! { "update_frequency" => 1u64 }),
                },
            );
        }
    }
    retry.insert(
        "retry_back_off".into(),
        map! { "base_interval" => "0.001s", "max_interval" => "0.002s" },
    );
    let mut route = map! {
        "name" => NAME,
        "match" => map! { "prefix" => "/" },
        "route" => map! {
            "inline_cluster_specifier_plugin" => map! {
                "extension" => map! {
                    "name" => "envoy.router.cluster_specifier_plugin.matcher",
                    "typed_config" => typed(MATCHER_SPECIFIER, map! { "cluster_matcher" => cluster_matcher(gw) }),
                },
            },
            "timeout" => "0s",
            "retry_policy" => Value::Mapping(retry),
        },
    };
    let (field, bytes) = route_body_limit(gw);
    if let Value::Mapping(m) = &mut route {
        m.insert(field.into(), bytes.into());
    }
    route
}

/// The route's body buffer limit: (field, bytes). Envoy before 1.39 counts a body that a filter
/// before the router held whole twice against `request_body_buffer_limit` and abandons the
/// retry of a body over half of it; there the route sets the retry buffer alone
/// (`per_request_buffer_limit_bytes`, twice `max_request_body`) and the listener's
/// `per_connection_buffer_limit_bytes` keeps answering 413 above `max_request_body`.
fn route_body_limit(gw: &Gateway) -> (&'static str, u64) {
    match gw.envoy_version.mode() {
        Mode::Router => ("request_body_buffer_limit", gw.max_request_body),
        Mode::Grouping => (
            "per_request_buffer_limit_bytes",
            gw.max_request_body
                .saturating_mul(2)
                .min(u64::from(u32::MAX)),
        ),
    }
}

pub(super) fn virtual_host(gw: &Gateway) -> Value {
    map! {
        "name" => NAME,
        "domains" => seq(vec!["*".into()]),
        "include_request_attempt_count" => true,
        "routes" => seq(vec![route(gw)]),
    }
}
