//! Tag extraction that labels the filter's metrics.

use super::seq;
use crate::input::Gateway;
use crate::version::Mode;
use serde_yaml_ng::{Mapping, Value};

/// Tag extraction that gives the filter's metrics their labels in `/stats/prometheus`
/// (`llm_failover_attempts_total{provider="a",outcome="ok"}`; see `llm_failover::metrics`).
pub fn stats_config() -> Value {
    tags_value(llm_failover::metrics::stats_tags())
}

/// [`stats_config`] for the gateway's Envoy: on 1.36-1.38 the metrics carry their VM's cluster
/// scope (`cluster.<name>.wasmcustom.*`) and need the cluster-scoped rules. The native module
/// (Envoy 1.40+) counts both roles' metrics in the root scope, as router mode does.
pub fn stats_config_for(gw: &Gateway) -> Value {
    match gw.envoy_version.mode() {
        Mode::Router => stats_config(),
        _ => tags_value(llm_failover::metrics::cluster_scoped_stats_tags()),
    }
}

fn tags_value(rules: Vec<llm_failover::metrics::TagRule>) -> Value {
    let tags = rules
        .into_iter()
        .map(|t| map! { "tag_name" => t.tag, "regex" => t.regex })
        .collect();
    map! { "stats_tags" => seq(tags) }
}
