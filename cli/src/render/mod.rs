//! Envoy configuration. Router mode (Envoy >= 1.39, docs/internals.md "How attempts are carried"): a downstream wasm filter
//! before the router, a route whose matcher cluster specifier reads the filter's per-attempt
//! slots, and one cluster per provider with the upstream wasm filter. Grouping mode (Envoy
//! 1.36-1.38, docs/older-envoys.md, `llm_failover::group`): the matcher reads the one cluster the
//! downstream filter names (a provider's, or an aggregate cluster per provider order) and the
//! retry priority `previous_priorities` moves each retry to the aggregate's next sub-cluster.
//!
//! One module per Envoy piece: `filter` (the wasm filter and the router), `route` (the route,
//! its cluster matcher and retry policy), `listener` (the API listener, the status listener,
//! access log and local replies), `cluster` (provider and grouping clusters), `stats` (metric
//! tags), `otel` (the OpenTelemetry access log and its collector's cluster); `reloadable` (`render --reloadable`) and `pieces` (`render --pieces`) assemble them.

use crate::input::{Addr, Gateway};
use crate::version::Mode;
use basics::socket_address;
use listener::listeners;
use serde_yaml_ng::{Mapping, Value};

/// An ordered YAML mapping: `map! { "key" => value, ... }` (also used by `crate::istio`).
macro_rules! map {
    ($($k:expr => $v:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut m = Mapping::new();
        $( m.insert(Value::from($k), Value::from($v)); )*
        Value::Mapping(m)
    }};
}

mod basics;
mod cluster;
mod credential;
mod filter;
mod listener;
mod otel;
mod pieces;
mod reloadable;
mod route;
mod signing;
pub use signing::sending;
mod stats;

pub use crate::names::{NAME, UPSTREAM_PLUGIN_NAME};
pub use basics::access_log_format;
pub use cluster::{cluster_list, clusters, CLUSTER_LIMIT};
pub(crate) use cluster::{cluster_values, http_protocol, upstream_options};
pub use credential::secret_files;
pub use filter::downstream_filter;
pub(crate) use filter::wasm_filter;
pub use listener::{local_reply_config, status_listener, STATUS_NAME};
pub use otel::{attributes as otel_attributes, OTEL_CLUSTER};
pub use pieces::pieces;
pub(crate) use reloadable::discovered_from;
pub use reloadable::{
    extension_files, reloadable_bootstrap, reloadable_bootstrap_text, DOWNSTREAM_RESOURCE,
    UPSTREAM_RESOURCE,
};
pub use route::{cluster_matcher, route, slot_count, slot_key, RETRY_ON};
pub use stats::{stats_config, stats_config_for};

pub(crate) const WASM: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";

pub(crate) const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

pub(crate) const HTTP_PROTOCOL_OPTIONS: &str =
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

pub(crate) fn seq(items: Vec<Value>) -> Value {
    Value::Sequence(items)
}

pub(crate) fn typed(type_url: &str, fields: Value) -> Value {
    let mut m = Mapping::new();
    m.insert("@type".into(), type_url.into());
    if let Value::Mapping(f) = fields {
        m.extend(f);
    }
    Value::Mapping(m)
}

/// Envoy duration text: "5s", "0.250s".
pub fn duration(ms: u64) -> String {
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    }
}

/// The complete bootstrap as a YAML value.
pub fn bootstrap(gw: &Gateway) -> Value {
    let mut b = Mapping::new();
    b.insert("node".into(), map! { "id" => NAME, "cluster" => NAME });
    b.insert("stats_config".into(), stats_config_for(gw));
    if let Some(Addr { address, port }) = &gw.admin {
        b.insert(
            "admin".into(),
            map! { "address" => socket_address(address, *port) },
        );
    }
    b.insert(
        "static_resources".into(),
        map! { "listeners" => listeners(gw), "clusters" => cluster_list(gw) },
    );
    Value::Mapping(b)
}

pub(crate) fn to_yaml(v: &Value) -> String {
    // Serializing a Value built from strings, numbers, booleans and mappings cannot fail.
    serde_yaml_ng::to_string(v).unwrap_or_default()
}

/// The bootstrap file's text. `source` is the failover file's name, for the header comment.
pub fn bootstrap_text(gw: &Gateway, source: &str) -> String {
    format!(
        "# Envoy bootstrap for the llm-failover gateway, rendered by `llm-failover render {source}`.\n\
         # Do not edit: change {source} and render again (`llm-failover validate {source}` checks it).\n\
         # For Envoy {} ({}); run from the directory the module path is relative to: envoy -c <this file>\n{}",
        gw.envoy_version,
        mode_text(gw),
        to_yaml(&bootstrap(gw))
    )
}

fn mode_text(gw: &Gateway) -> String {
    match gw.envoy_version.mode() {
        Mode::Router => "router mode".to_string(),
        Mode::Grouping => format!(
            "grouping mode: {} grouping cluster{}",
            gw.groups.len(),
            if gw.groups.len() == 1 { "" } else { "s" }
        ),
    }
}
