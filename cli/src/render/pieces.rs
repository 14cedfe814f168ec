//! `render --pieces DIR`: the pieces for merging into an existing Envoy configuration.

use super::{
    cluster_list, downstream_filter, local_reply_config, route, seq, stats_config_for,
    status_listener, to_yaml,
};
use crate::input::{Gateway, StatusListen};
use serde_yaml_ng::{Mapping, Value};

/// The pieces for merging into an existing Envoy configuration: (file name, text).
pub fn pieces(gw: &Gateway, source: &str) -> Vec<(&'static str, String)> {
    let origin = format!("# Rendered by `llm-failover render {source} --pieces DIR`; change {source} and render again.\n");
    let filters = format!(
        "{origin}# Goes in your HttpConnectionManager's http_filters, right before envoy.filters.http.router.\n\
         # Also set per_connection_buffer_limit_bytes: {} on that listener, so request bodies can be\n\
         # buffered and replayed to fallbacks. Optionally set suppress_envoy_headers: true on the router\n\
         # so Envoy's timing headers reach neither providers nor callers.\n{}",
        gw.max_request_body,
        to_yaml(&seq(vec![downstream_filter(gw)]))
    );
    let route = format!(
        "{origin}# Goes in a virtual host's routes (before any catch-all route that would match first).\n\
         # That virtual host must set:\n\
         #   include_request_attempt_count: true\n\
         # Change match: to serve only part of the host; keep the name if chains use routes:.\n{}",
        to_yaml(&seq(vec![route(gw)]))
    );
    let clusters = format!(
        "{origin}# Goes in static_resources.clusters (or your CDS). Each carries the upstream llm_failover\n\
         # filter; the names must match the providers' clusters and must not clash with yours.\n{}",
        to_yaml(&cluster_list(gw))
    );
    let stats = format!(
        "{origin}# Goes in the bootstrap's stats_config (merge stats_tags with yours; each tag_name may appear\n\
         # once): labels for the llm_failover_* metrics in /stats/prometheus.\n{}",
        to_yaml(&map! { "stats_config" => stats_config_for(gw) })
    );
    let local_replies = format!(
        "{origin}# Goes in your HttpConnectionManager as local_reply_config (merge mappers with yours):\n\
         # Envoy's own error answers (body over the limit, last attempt without a response) in the\n\
         # filter's JSON error shape with x-should-retry, so SDKs can show and act on them.\n{}",
        to_yaml(&map! { "local_reply_config" => local_reply_config(gw) })
    );
    let mut out = vec![
        ("http_filters.yaml", filters),
        ("route.yaml", route),
        ("clusters.yaml", clusters),
        ("stats_config.yaml", stats),
        ("local_reply_config.yaml", local_replies),
    ];
    if let Some(StatusListen::Own { addr, path, json }) = &gw.status {
        out.push((
            "status_listener.yaml",
            format!(
                "{origin}# Goes in static_resources.listeners (or your LDS): the status endpoint's own listener.
                 # Keep it on loopback or an internal address: it has no authentication of its own.
{}",
                to_yaml(&seq(vec![status_listener(gw, addr, json, path)]))
            ),
        ));
    }
    if let Some(log) = super::otel::access_log(gw) {
        out.push((
            "access_log.yaml",
            format!(
                "{origin}# Goes in your HttpConnectionManager's access_log (beside yours): each request's record\n\
                 # to the OpenTelemetry collector, whose cluster ({}) is in clusters.yaml.\n{}",
                super::OTEL_CLUSTER,
                to_yaml(&seq(vec![log]))
            ),
        ));
    }
    out
}
