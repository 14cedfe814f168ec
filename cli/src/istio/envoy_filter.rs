//! The one `EnvoyFilter`: both roles as extension configs, and the listener, HTTP filter,
//! virtual host, route and cluster patches.

use super::{
    grouping, metadata, resource, selector, Options, DOWNSTREAM_EXTENSION, NAME, ROUTE_NAME,
    UPSTREAM_EXTENSION,
};
use crate::input::{Gateway, Upstream};
use crate::render::{self, seq, typed};
use serde_yaml_ng::{Mapping, Value};

const HCM_NAME: &str = "envoy.filters.network.http_connection_manager";
const ROUTER_NAME: &str = "envoy.filters.http.router";

/// The wasm filter's typed config for ECDS: the standalone filter with the module fetched by
/// istio-agent from `opts.module` and failures closed.
fn extension_config(gw: &Gateway, opts: &Options, name: &str, json: &str) -> Value {
    let filter = render::wasm_filter(gw, name, json);
    let mut typed_config = filter.get("typed_config").cloned().unwrap_or(Value::Null);
    if let Some(Value::Mapping(config)) = typed_config.get_mut("config") {
        if let Some(Value::Mapping(vm)) = config.get_mut("vm_config") {
            let mut remote = Mapping::new();
            // istio-agent fetches the module and hands Envoy a local file; the cluster is a
            // placeholder Envoy never uses (as in the configs istiod makes for WasmPlugin).
            remote.insert(
                "http_uri".into(),
                map! { "uri" => opts.module.as_str(), "cluster" => "_", "timeout" => "30s" },
            );
            if let Some(sha) = &opts.module_sha256 {
                remote.insert("sha256".into(), sha.as_str().into());
            }
            vm.insert("code".into(), map! { "remote" => Value::Mapping(remote) });
        }
        config.insert("failure_policy".into(), "FAIL_CLOSED".into());
    }
    map! { "name" => name, "typed_config" => typed_config }
}

/// A filter that takes its configuration from istiod over ECDS (ADS): the Wasm type only, no
/// default; like istiod's own ECDS references, it holds its listener until the config arrives.
pub fn discovered_filter(name: &str) -> Value {
    render::discovered_from(
        name,
        map! { "ads" => map! {}, "resource_api_version" => "V3", "initial_fetch_timeout" => "0s" },
    )
}

fn patch(apply_to: &str, matcher: Value, operation: &str, value: Value) -> Value {
    let mut m = Mapping::new();
    m.insert("context".into(), "GATEWAY".into());
    if let Value::Mapping(extra) = matcher {
        m.extend(extra);
    }
    map! {
        "applyTo" => apply_to,
        "match" => Value::Mapping(m),
        "patch" => map! { "operation" => operation, "value" => value },
    }
}

fn listener_name(opts: &Options) -> String {
    format!("0.0.0.0_{}", opts.target_port)
}

/// Istio makes one virtual host per served host, named `<host>:<server port>`.
fn route_config_match(opts: &Options, host: &str, route: Option<&str>) -> Value {
    let vhost_name = format!("{host}:{}", opts.port);
    let mut vhost = Mapping::new();
    vhost.insert("name".into(), vhost_name.into());
    if let Some(route) = route {
        vhost.insert("route".into(), map! { "name" => route });
    }
    map! { "routeConfiguration" => map! { "name" => format!("http.{}", opts.target_port), "vhost" => Value::Mapping(vhost) } }
}

/// The route patch: the standalone route's action and body limit, merged into Istio's route.
fn route_patch_value(gw: &Gateway) -> Value {
    let mut route = match render::route(gw) {
        Value::Mapping(m) => m,
        _ => Mapping::new(),
    };
    // Istio's route keeps its own name and match.
    route.shift_remove("name");
    route.shift_remove("match");
    Value::Mapping(route)
}

/// The cluster patch: the upstream role and the protocol choice. A MERGE replaces Istio's whole
/// `HttpProtocolOptions` entry, so this is the complete entry.
fn cluster_patch_value(gw: &Gateway, u: &Upstream) -> Value {
    // Istio alone would speak HTTP/1.1, where every failed-over answer costs its connection.
    map! {
        "per_connection_buffer_limit_bytes" => gw.max_request_body,
        "typed_extension_protocol_options" => render::upstream_options(
            render::http_protocol(u),
            &discovered_filter(UPSTREAM_EXTENSION),
            u.aws_signing.as_ref(),
            None,
        ),
    }
}

/// The one `EnvoyFilter` carrying both roles, the listener, virtual host, route and cluster
/// patches.
pub fn envoy_filter(gw: &Gateway, opts: &Options) -> Value {
    let listener_match = |filter: Option<Value>| {
        let mut l = Mapping::new();
        l.insert("name".into(), listener_name(opts).into());
        if let Some(f) = filter {
            l.insert("filterChain".into(), map! { "filter" => f });
        }
        map! { "listener" => Value::Mapping(l) }
    };
    let mut patches = vec![
        patch(
            "EXTENSION_CONFIG",
            map! {},
            "ADD",
            extension_config(gw, opts, DOWNSTREAM_EXTENSION, &gw.downstream_json),
        ),
        patch(
            "EXTENSION_CONFIG",
            map! {},
            "ADD",
            extension_config(gw, opts, UPSTREAM_EXTENSION, &gw.upstream_json),
        ),
        patch(
            "HTTP_FILTER",
            listener_match(Some(
                map! { "name" => HCM_NAME, "subFilter" => map! { "name" => ROUTER_NAME } },
            )),
            "INSERT_BEFORE",
            discovered_filter(DOWNSTREAM_EXTENSION),
        ),
        patch(
            "LISTENER",
            listener_match(None),
            "MERGE",
            map! { "per_connection_buffer_limit_bytes" => gw.max_request_body },
        ),
        // Envoy's own error answers in the filter's JSON shape (as standalone). istiod merges
        // the typed config into its HTTP connection manager's, which sets no local_reply_config.
        patch(
            "NETWORK_FILTER",
            listener_match(Some(map! { "name" => HCM_NAME })),
            "MERGE",
            map! {
                "name" => HCM_NAME,
                "typed_config" => typed(render::HCM, map! { "local_reply_config" => render::local_reply_config(gw) }),
            },
        ),
    ];
    for host in &opts.hosts {
        patches.push(patch(
            "VIRTUAL_HOST",
            route_config_match(opts, host, None),
            "MERGE",
            map! { "include_request_attempt_count" => true },
        ));
        // The route Istio makes of the VirtualService's direct response has no route action,
        // so no retry policy of Istio's (route.go: only a route with destinations gets one).
        // Lists replaced all the same where the release can (1.31+), so nothing Istio may add
        // there is appended to the failover route's; 1.30 has MERGE only.
        let operation = if grouping(gw) {
            "MERGE"
        } else {
            "MERGE_AND_REPLACE_LIST"
        };
        patches.push(patch(
            "HTTP_ROUTE",
            route_config_match(opts, host, Some(ROUTE_NAME)),
            operation,
            route_patch_value(gw),
        ));
    }
    if grouping(gw) {
        // The standalone renderer's clusters whole: hosts naming their provider, TLS
        // origination, circuit breakers, the grouping clusters over them.
        for mut cluster in render::cluster_values(gw, &discovered_filter(UPSTREAM_EXTENSION)) {
            // Stats named as Istio names its own clusters' (`<name>;`, DelimitedStatsPrefix):
            // its `cluster_name` tag (`^cluster(\.(.+);)`) then takes the name out of the
            // upstream role's metric names, as Envoy's default tag does standalone.
            if let Value::Mapping(c) = &mut cluster {
                let stat_name = c
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| format!("{n};"));
                if let Some(stat_name) = stat_name {
                    c.insert("alt_stat_name".into(), stat_name.into());
                }
            }
            patches.push(patch("CLUSTER", map! {}, "ADD", cluster));
        }
    } else {
        for u in render::clusters(gw) {
            patches.push(patch(
                "CLUSTER",
                map! { "cluster" => map! { "name" => u.cluster.as_str() } },
                "MERGE",
                cluster_patch_value(gw, u),
            ));
        }
    }
    resource(
        "networking.istio.io/v1alpha3",
        "EnvoyFilter",
        metadata(opts, NAME),
        map! {
            "workloadSelector" => map! { "labels" => selector(opts) },
            "configPatches" => seq(patches),
        },
    )
}
