//! Names the rendered Envoy configuration gives its pieces, shared by rendering and the checks
//! (kept apart so that `checks` needs nothing from `render`, which reads `input`, which runs the
//! checks).

/// Name shared by the listener, route config, route, stat prefix, filter, root id and VM id.
pub const NAME: &str = "llm_failover";
/// Plugin name of the cluster-side filter (shows in Envoy's wasm log lines).
pub const UPSTREAM_PLUGIN_NAME: &str = "llm_failover_upstream";
