//! The `Gateway` server and the `VirtualService` whose route the route patch takes over.

use super::{metadata, resource, selector, Options, NAME, ROUTE_NAME};
use crate::render::seq;
use serde_yaml_ng::{Mapping, Value};

/// The `Gateway` server and a `VirtualService` whose one route answers 503 until the route
/// patch turns it into the failover route.
pub fn gateway_resources(opts: &Options) -> Vec<Value> {
    let hosts = || seq(opts.hosts.iter().map(|h| h.as_str().into()).collect());
    let gateway = resource(
        "networking.istio.io/v1",
        "Gateway",
        metadata(opts, NAME),
        map! {
            "selector" => selector(opts),
            "servers" => seq(vec![map! {
                "port" => map! { "number" => u64::from(opts.port), "name" => "http-llm-failover", "protocol" => "HTTP" },
                "hosts" => hosts(),
            }]),
        },
    );
    let not_patched = "{\"error\":{\"type\":\"server_error\",\"code\":\"gateway_not_configured\",\"message\":\"the llm-failover EnvoyFilter is not applied on this gateway\"}}";
    let virtual_service = resource(
        "networking.istio.io/v1",
        "VirtualService",
        metadata(opts, NAME),
        map! {
            "hosts" => hosts(),
            "gateways" => seq(vec![NAME.into()]),
            "exportTo" => seq(vec![".".into()]),
            "http" => seq(vec![map! {
                "name" => ROUTE_NAME,
                "directResponse" => map! { "status" => 503u64, "body" => map! { "string" => not_patched } },
            }]),
        },
    );
    vec![gateway, virtual_service]
}
