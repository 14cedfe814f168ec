//! Names the rendered Envoy configuration gives its pieces, shared by rendering and the checks
//! (kept apart so that `checks` needs nothing from `render`, which reads `input`, which runs the
//! checks).

/// Name shared by the listener, route config, route, stat prefix, filter, root id and VM id.
pub const NAME: &str = "llm_failover";
/// Plugin name of the cluster-side filter (shows in Envoy's wasm log lines).
pub const UPSTREAM_PLUGIN_NAME: &str = "llm_failover_upstream";

#[cfg(test)]
mod tests {
    /// The filter answers its liveness path only on the gateway's own routes: the names it
    /// knows must be the ones rendered.
    #[test]
    fn the_filter_knows_the_rendered_route_names() {
        for name in [super::NAME, crate::istio::ROUTE_NAME] {
            assert!(
                llm_failover::wire::GATEWAY_ROUTE_NAMES.contains(&name),
                "{name}"
            );
        }
    }
}
