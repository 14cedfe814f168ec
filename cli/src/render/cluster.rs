//! Clusters: one per provider (endpoint, TLS, protocol, the upstream filter), and grouping
//! mode's aggregate clusters.

use super::basics::socket_address;
use super::{duration, seq, typed, wasm_filter, HTTP_PROTOCOL_OPTIONS, UPSTREAM_PLUGIN_NAME};
use crate::input::{Gateway, Host, Upstream};
use crate::version::Mode;
use serde_yaml_ng::{Mapping, Value};

/// Circuit-breaker thresholds on provider clusters: high enough that failovers never overflow
/// (Envoy's default of 3 concurrent retries per cluster turns most failovers into errors).
pub const CLUSTER_LIMIT: u64 = 100_000;

pub(crate) const UPSTREAM_CODEC: &str =
    "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec";

const UPSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";

const AGGREGATE_CLUSTER: &str =
    "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig";

const COMPOSITE_CLUSTER: &str =
    "type.googleapis.com/envoy.extensions.clusters.composite.v3.ClusterConfig";

/// Distinct provider clusters, in provider order.
pub fn clusters(gw: &Gateway) -> Vec<&Upstream> {
    let mut out: Vec<&Upstream> = Vec::new();
    for u in &gw.upstreams {
        if !out.iter().any(|o| o.cluster == u.cluster) {
            out.push(u);
        }
    }
    out
}

/// A provider's cluster, its upstream filter `upstream` (the wasm filter, or a reference to
/// its discovered configuration).
fn cluster(gw: &Gateway, u: &Upstream, upstream: &Value) -> Value {
    let mut c = Mapping::new();
    let address = u.endpoint.host.address();
    c.insert("name".into(), u.cluster.as_str().into());
    match &u.endpoint.host {
        Host::Name(_) => {
            // LOGICAL_DNS: provider APIs sit behind CDNs that answer with changing address
            // sets; Envoy keeps one logical host instead of churning its pool on each lookup.
            c.insert("type".into(), "LOGICAL_DNS".into());
            c.insert("dns_lookup_family".into(), "V4_PREFERRED".into());
        }
        Host::Ip(_) => {
            c.insert("type".into(), "STATIC".into());
        }
    }
    c.insert(
        "connect_timeout".into(),
        duration(u.connect_timeout_ms).into(),
    );
    c.insert(
        "per_connection_buffer_limit_bytes".into(),
        gw.max_request_body.into(),
    );
    c.insert("circuit_breakers".into(), circuit_breakers());
    let mut endpoint = Mapping::new();
    endpoint.insert("address".into(), socket_address(&address, u.endpoint.port));
    if let Host::Name(name) = &u.endpoint.host {
        endpoint.insert("hostname".into(), name.as_str().into());
    }
    let mut lb_endpoint = map! { "endpoint" => Value::Mapping(endpoint) };
    if gw.envoy_version.mode() == Mode::Grouping || !hedge_pairs(gw).is_empty() {
        // The upstream filter on a grouping cluster, or a hedging pair's composite cluster,
        // sees that cluster's name, not the provider's: it confirms the attempt's provider
        // from the chosen host's metadata.
        if let Value::Mapping(m) = &mut lb_endpoint {
            m.insert(
                "metadata".into(),
                map! { "filter_metadata" => map! {
                    llm_failover::destination::HOST_METADATA_NAMESPACE => map! { llm_failover::destination::HOST_METADATA_PROVIDER_KEY => u.provider.as_str() },
                } },
            );
        }
    }
    c.insert(
        "load_assignment".into(),
        map! {
            "cluster_name" => u.cluster.as_str(),
            "endpoints" => seq(vec![map! { "lb_endpoints" => seq(vec![lb_endpoint]) }]),
        },
    );
    if u.tls {
        let mut validation = Mapping::new();
        validation.insert(
            "trusted_ca".into(),
            map! { "filename" => gw.ca_file.as_str() },
        );
        if let Some(sni) = &u.sni {
            validation.insert(
                "match_typed_subject_alt_names".into(),
                seq(vec![
                    map! { "san_type" => "DNS", "matcher" => map! { "exact" => sni.as_str() } },
                ]),
            );
        }
        let mut tls = Mapping::new();
        if let Some(sni) = &u.sni {
            tls.insert("sni".into(), sni.as_str().into());
        }
        tls.insert(
            "common_tls_context".into(),
            map! {
                "alpn_protocols" => seq(vec!["h2".into(), "http/1.1".into()]),
                "validation_context" => Value::Mapping(validation),
            },
        );
        c.insert(
            "transport_socket".into(),
            map! { "name" => "envoy.transport_sockets.tls", "typed_config" => typed(UPSTREAM_TLS, Value::Mapping(tls)) },
        );
    }
    c.insert(
        "typed_extension_protocol_options".into(),
        upstream_options(
            http_protocol(u),
            upstream,
            u.aws_signing.as_ref(),
            injector(gw, u),
        ),
    );
    Value::Mapping(c)
}

/// The credential injector of a provider with `credential.file` (`super::credential`).
fn injector(gw: &Gateway, u: &Upstream) -> Option<Value> {
    let token = u.token_file.as_ref()?;
    Some(super::credential::injector(
        &u.cluster,
        token,
        gw.secret_dir.as_deref().unwrap_or("."),
    ))
}

/// The cluster's protocol choice, as the `HttpProtocolOptions` member to set. TLS providers
/// negotiate h2 by ALPN where they offer it; plain ones speak h2c only when asked. A failed
/// HTTP/1.1 answer that Envoy retries costs the connection (its body is never read); HTTP/2
/// resets just the stream.
pub(crate) fn http_protocol(u: &Upstream) -> (&'static str, Value) {
    if u.tls {
        (
            "auto_config",
            map! { "http_protocol_options" => map! {}, "http2_protocol_options" => map! {} },
        )
    } else if u.http2 {
        (
            "explicit_http_config",
            map! { "http2_protocol_options" => map! {} },
        )
    } else {
        (
            "explicit_http_config",
            map! { "http_protocol_options" => map! {} },
        )
    }
}

/// Thresholds high enough that failovers never overflow (retries count on the cluster the
/// route picked: the provider's, or in grouping mode the group's).
fn circuit_breakers() -> Value {
    map! { "thresholds" => seq(vec![map! {
        "priority" => "DEFAULT",
        "max_connections" => CLUSTER_LIMIT,
        "max_pending_requests" => CLUSTER_LIMIT,
        "max_requests" => CLUSTER_LIMIT,
        "max_retries" => CLUSTER_LIMIT,
    }]) }
}

/// The cluster's HTTP protocol options, carrying the upstream filter (also the Istio target's
/// cluster patch, `crate::istio`).
pub(crate) fn upstream_options(
    protocol: (&str, Value),
    upstream: &Value,
    aws_signing: Option<&crate::input::AwsSigning>,
    injector: Option<Value>,
) -> Value {
    let mut options = Mapping::new();
    options.insert(
        "@type".into(),
        format!("type.googleapis.com/{HTTP_PROTOCOL_OPTIONS}").into(),
    );
    options.insert(protocol.0.into(), protocol.1);
    let mut filters = vec![upstream.clone()];
    // After this filter, which clears the header on every attempt: only this cluster's get it.
    filters.extend(injector);
    if let Some(signing) = aws_signing {
        // After this filter: the signature covers the body and headers actually sent.
        filters.extend(super::signing::aws_filters(signing));
    }
    filters.push(map! { "name" => "envoy.filters.http.upstream_codec", "typed_config" => typed(UPSTREAM_CODEC, map! {}) });
    options.insert("http_filters".into(), seq(filters));
    map! { HTTP_PROTOCOL_OPTIONS => Value::Mapping(options) }
}

/// A grouping cluster: an aggregate of provider clusters in attempt order. Only its own
/// upstream filter runs on its attempts (not the sub-clusters'), and its retries count here.
fn group_cluster(gw: &Gateway, group: &llm_failover::group::Group, upstream: &Value) -> Value {
    let subs: Vec<Value> = group
        .clusters
        .iter()
        .map(|c| Value::from(c.as_str()))
        .collect();
    map! {
        "name" => group.name.as_str(),
        "connect_timeout" => "5s",
        "lb_policy" => "CLUSTER_PROVIDED",
        // Envoy buffers the request for retries up to the route's cluster's limit.
        "per_connection_buffer_limit_bytes" => gw.max_request_body,
        "cluster_type" => map! {
            "name" => "envoy.clusters.aggregate",
            "typed_config" => typed(AGGREGATE_CLUSTER, map! { "clusters" => seq(subs) }),
        },
        "circuit_breakers" => circuit_breakers(),
        "typed_extension_protocol_options" => upstream_options((
            "explicit_http_config",
            map! { "http_protocol_options" => map! {} },
        ), upstream, None, None),
    }
}

/// The composite clusters hedging chains need (docs/internals.md, hedging): one per ordered
/// pair of distinct clusters among a hedging chain's providers (skips and picks may put any
/// two first), as (name, first cluster, second cluster), in chain and entry order.
pub fn hedge_pairs(gw: &Gateway) -> Vec<(String, &str, &str)> {
    let config = &gw.config;
    let mut out: Vec<(String, &str, &str)> = Vec::new();
    for chain in config.chains.iter().filter(|c| c.hedge_after_ms.is_some()) {
        let cluster_of = |e: &llm_failover::config::ChainEntry| {
            let p = config.provider(e.provider)?;
            gw.upstreams
                .iter()
                .find(|u| u.provider == p.name)
                .map(|u| u.cluster.as_str())
        };
        let names: Vec<&str> = chain.main_entries().iter().filter_map(cluster_of).collect();
        for &first in &names {
            for &second in &names {
                let Some(name) = llm_failover::wire::hedge_cluster(first, second) else {
                    continue;
                };
                if !out.iter().any(|(n, _, _)| *n == name) {
                    out.push((name, first, second));
                }
            }
        }
    }
    out
}

/// A hedging pair's composite cluster: attempt 1 to `first`'s cluster, attempt 2 to
/// `second`'s. Like a grouping cluster, only its own upstream filter runs on its attempts;
/// each host keeps its own cluster's transport socket (TLS) and protocol.
fn hedge_cluster(gw: &Gateway, name: &str, first: &str, second: &str, upstream: &Value) -> Value {
    map! {
        "name" => name,
        "connect_timeout" => "5s",
        "lb_policy" => "CLUSTER_PROVIDED",
        "per_connection_buffer_limit_bytes" => gw.max_request_body,
        "cluster_type" => map! {
            "name" => "envoy.clusters.composite",
            "typed_config" => typed(COMPOSITE_CLUSTER, map! { "clusters" => seq(vec![
                map! { "name" => first },
                map! { "name" => second },
            ]) }),
        },
        "circuit_breakers" => circuit_breakers(),
        "typed_extension_protocol_options" => upstream_options((
            "explicit_http_config",
            map! { "http_protocol_options" => map! {} },
        ), upstream, None, None),
    }
}

/// Every cluster the gateway needs (the providers', then grouping mode's or the hedging
/// pairs'), each carrying the upstream filter `upstream`.
pub(crate) fn cluster_values(gw: &Gateway, upstream: &Value) -> Vec<Value> {
    let pairs = hedge_pairs(gw);
    clusters(gw)
        .into_iter()
        .map(|u| cluster(gw, u, upstream))
        .chain(gw.groups.iter().map(|g| group_cluster(gw, g, upstream)))
        .chain(
            pairs
                .iter()
                .map(|(name, first, second)| hedge_cluster(gw, name, first, second, upstream)),
        )
        .chain(super::otel::cluster(gw))
        .chain(super::otel::fleet_cluster(gw))
        .collect()
}

pub fn cluster_list(gw: &Gateway) -> Value {
    seq(cluster_values(
        gw,
        &wasm_filter(gw, UPSTREAM_PLUGIN_NAME, &gw.upstream_json),
    ))
}
