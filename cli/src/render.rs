//! Envoy configuration. Router mode (Envoy >= 1.39, DESIGN section 1): a downstream wasm filter
//! before the router, a route whose matcher cluster specifier reads the filter's per-attempt
//! slots, and one cluster per provider with the upstream wasm filter. Grouping mode (Envoy
//! 1.36-1.38, DESIGN section 7, `llm_failover::group`): the matcher reads the one cluster the
//! downstream filter names (a provider's, or an aggregate cluster per provider order) and the
//! retry priority `previous_priorities` moves each retry to the aggregate's next sub-cluster.

use crate::input::{Addr, Gateway, Host, StatusListen, Upstream};
use crate::version::Mode;
use llm_failover::wire;
use serde_yaml_ng::{Mapping, Value};

pub use crate::names::{NAME, UPSTREAM_PLUGIN_NAME};
/// Circuit-breaker thresholds on provider clusters: high enough that failovers never overflow
/// (Envoy's default of 3 concurrent retries per cluster turns most failovers into errors).
pub const CLUSTER_LIMIT: u64 = 100_000;
pub const RETRY_ON: &str = "retriable-headers,connect-failure,reset,refused-stream";

pub(crate) const WASM: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
const STRING_VALUE: &str = "type.googleapis.com/google.protobuf.StringValue";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
pub(crate) const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const STDOUT_LOG: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog";
const MATCHER_SPECIFIER: &str = "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.MatcherClusterSpecifier";
const CLUSTER_ACTION: &str =
    "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.ClusterAction";
const HEADER_INPUT: &str = "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput";
const FILTER_STATE_INPUT: &str =
    "type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.FilterStateInput";
pub(crate) const HTTP_PROTOCOL_OPTIONS: &str =
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
pub(crate) const UPSTREAM_CODEC: &str =
    "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec";
const UPSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const AGGREGATE_CLUSTER: &str =
    "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig";
const PREVIOUS_PRIORITIES: &str =
    "type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig";

/// An ordered YAML mapping: `map! { "key" => value, ... }` (also used by `crate::istio`).
macro_rules! map {
    ($($k:expr => $v:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut m = Mapping::new();
        $( m.insert(Value::from($k), Value::from($v)); )*
        Value::Mapping(m)
    }};
}

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

/// Attempt slots the route must offer: the longest plan any chain can make.
pub fn slot_count(gw: &Gateway) -> usize {
    gw.config
        .chains
        .iter()
        .map(|c| c.max_attempts.min(c.entries.len()))
        .max()
        .unwrap_or(1)
        .max(1)
}

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

/// Filter-state key the route reads for attempt slot `k` (from 1).
pub fn slot_key(k: usize) -> String {
    format!(
        "{}{}{k}",
        wire::ENVOY_WASM_STATE_PREFIX,
        wire::SLOT_PROPERTY_PREFIX
    )
}

fn vm_config(gw: &Gateway) -> Value {
    let mut vm = map! {
        "vm_id" => NAME,
        "runtime" => "envoy.wasm.runtime.v8",
        "code" => map! { "local" => map! { "filename" => gw.module.as_str() } },
    };
    if !gw.env_keys.is_empty() {
        if let Value::Mapping(m) = &mut vm {
            let keys: Vec<Value> = gw
                .env_keys
                .iter()
                .map(|k| Value::from(k.as_str()))
                .collect();
            m.insert(
                "environment_variables".into(),
                map! { "host_env_keys" => seq(keys) },
            );
        }
    }
    vm
}

pub(crate) fn wasm_filter(gw: &Gateway, plugin_name: &str, configuration: &str) -> Value {
    map! {
        "name" => NAME,
        "typed_config" => typed(WASM, map! {
            "config" => map! {
                "name" => plugin_name,
                "root_id" => NAME,
                "vm_config" => vm_config(gw),
                "allow_on_headers_stop_iteration" => true,
                "configuration" => typed(STRING_VALUE, map! { "value" => configuration }),
            },
        }),
    }
}

/// The downstream filter (goes before the router).
pub fn downstream_filter(gw: &Gateway) -> Value {
    wasm_filter(gw, NAME, &gw.downstream_json)
}

/// The router. `suppress_envoy_headers` keeps Envoy's own timing headers
/// (`x-envoy-expected-rq-timeout-ms` to providers, `x-envoy-upstream-service-time` to callers)
/// out of the traffic; attempt counting still works without them.
fn router_filter() -> Value {
    map! {
        "name" => "envoy.filters.http.router",
        "typed_config" => typed(ROUTER, map! { "suppress_envoy_headers" => true }),
    }
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
    let slots = slot_count(gw);
    if slots == 1 {
        return slot_matcher(1, &names);
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
        "on_no_match" => map! { "matcher" => slot_matcher(1, &names) },
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

fn virtual_host(gw: &Gateway) -> Value {
    map! {
        "name" => NAME,
        "domains" => seq(vec!["*".into()]),
        "include_request_attempt_count" => true,
        "routes" => seq(vec![route(gw)]),
    }
}

/// One line per request: what the route did and the filter's per-attempt record.
pub fn access_log_format() -> String {
    format!(
        "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% \
         %BYTES_RECEIVED% %BYTES_SENT% %DURATION%ms attempts=%UPSTREAM_REQUEST_ATTEMPT_COUNT% cluster=%UPSTREAM_CLUSTER% \
         chain=%FILTER_STATE({p}{}:PLAIN)% llm_failover=%FILTER_STATE({p}{}:PLAIN)% request_id=%REQ(X-REQUEST-ID)%\n",
        wire::CHAIN_PROPERTY,
        wire::ATTEMPTS_PROPERTY,
        p = wire::ENVOY_WASM_STATE_PREFIX,
    )
}

/// Envoy's own error answers in the filter's JSON error shape (SPEC 6), with `x-should-retry`:
/// a request body over the limit (Envoy's plain-text 413), and a walk whose last attempt got
/// no response (Envoy's 503 `upstream connect error...` / 504 `upstream request timeout`).
/// Mappers apply to local replies only, never to a provider's answer; the filter's own
/// replies carry no status or flag these match.
pub fn local_reply_config(gw: &Gateway) -> Value {
    use llm_failover::reply::Reply;
    let mapper = |filter: Value, reply: &Reply| {
        map! {
            "filter" => filter,
            "headers_to_add" => seq(vec![map! {
                "header" => map! { "key" => wire::SHOULD_RETRY_HEADER, "value" => reply.should_retry_header() },
                "append_action" => "OVERWRITE_IF_EXISTS_OR_ADD",
            }]),
            "body_format_override" => map! {
                "json_format" => serde_yaml_ng::to_value(reply.body_value()).unwrap_or_default(),
            },
        }
    };
    let status = |code: u64| {
        map! { "status_code_filter" => map! { "comparison" => map! {
            "op" => "EQ",
            "value" => map! { "default_value" => code, "runtime_key" => format!("{NAME}.local_reply_status_{code}") },
        } } }
    };
    let flags = |list: &[&str]| {
        map! { "response_flag_filter" => map! {
            "flags" => seq(list.iter().map(|f| Value::from(*f)).collect()),
        } }
    };
    let limit = usize::try_from(gw.max_request_body).unwrap_or(usize::MAX);
    map! {
        "mappers" => seq(vec![
            mapper(status(413), &Reply::body_too_large(limit)),
            mapper(flags(&["UT"]), &Reply::upstream_timeout()),
            mapper(flags(&["UF", "UH", "UC", "UR", "URX", "UO", "LR"]), &Reply::upstream_unreachable()),
        ]),
    }
}

fn socket_address(address: &str, port: u16) -> Value {
    map! { "socket_address" => map! { "address" => address, "port_value" => u64::from(port) } }
}

fn listener(gw: &Gateway) -> Value {
    let Addr { address, port } = &gw.listen;
    map! {
        "name" => NAME,
        "address" => socket_address(address, *port),
        "per_connection_buffer_limit_bytes" => gw.max_request_body,
        "filter_chains" => seq(vec![map! {
            "filters" => seq(vec![map! {
                "name" => "envoy.filters.network.http_connection_manager",
                "typed_config" => typed(HCM, map! {
                    "stat_prefix" => NAME,
                    "codec_type" => "AUTO",
                    "access_log" => seq(vec![map! {
                        "name" => "envoy.access_loggers.stdout",
                        "typed_config" => typed(STDOUT_LOG, map! {
                            "log_format" => map! { "text_format_source" => map! { "inline_string" => access_log_format() } },
                        }),
                    }]),
                    "route_config" => map! { "name" => NAME, "virtual_hosts" => seq(vec![virtual_host(gw)]) },
                    "local_reply_config" => local_reply_config(gw),
                    "http_filters" => seq(vec![downstream_filter(gw), router_filter()]),
                }),
            }]),
        }]),
    }
}

/// Name of the status endpoint's own listener, its route config and stat prefix.
pub const STATUS_NAME: &str = "llm_failover_status";
const FILTER_CONFIG: &str = "type.googleapis.com/envoy.config.route.v3.FilterConfig";

/// The status endpoint's own listener (`status_listen`, default 127.0.0.1:9902): its copy of
/// the downstream filter answers `GET`/`HEAD` on the status path before any routing; every
/// other path gets a plain 404 with the filter switched off for it, so nothing here is ever
/// planned or sent to a provider.
pub fn status_listener(gw: &Gateway, addr: &Addr, json: &str, path: &str) -> Value {
    let not_found = |m: Value| {
        map! {
            "match" => m,
            "direct_response" => map! { "status" => 404u64, "body" => map! { "inline_string" => "not found\n" } },
        }
    };
    let mut other = not_found(map! { "prefix" => "/" });
    if let Value::Mapping(m) = &mut other {
        m.insert(
            "typed_per_filter_config".into(),
            map! { NAME => typed(FILTER_CONFIG, map! { "disabled" => true }) },
        );
    }
    map! {
        "name" => STATUS_NAME,
        "address" => socket_address(&addr.address, addr.port),
        "filter_chains" => seq(vec![map! {
            "filters" => seq(vec![map! {
                "name" => "envoy.filters.network.http_connection_manager",
                "typed_config" => typed(HCM, map! {
                    "stat_prefix" => STATUS_NAME,
                    "codec_type" => "AUTO",
                    "route_config" => map! { "name" => STATUS_NAME, "virtual_hosts" => seq(vec![map! {
                        "name" => STATUS_NAME,
                        "domains" => seq(vec!["*".into()]),
                        "routes" => seq(vec![not_found(map! { "path" => path }), other]),
                    }]) },
                    "http_filters" => seq(vec![wasm_filter(gw, STATUS_NAME, json), router_filter()]),
                }),
            }]),
        }]),
    }
}

/// The listeners: the API's, and the status endpoint's own when it has one.
fn listeners(gw: &Gateway) -> Value {
    let mut out = vec![listener(gw)];
    if let Some(StatusListen::Own { addr, path, json }) = &gw.status {
        out.push(status_listener(gw, addr, json, path));
    }
    seq(out)
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
    if gw.envoy_version.mode() == Mode::Grouping {
        // The upstream filter on a grouping cluster sees the group's name, not the provider's:
        // it confirms the attempt's provider from the chosen host's metadata.
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
        upstream_options(http_protocol(u), upstream),
    );
    Value::Mapping(c)
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
pub(crate) fn upstream_options(protocol: (&str, Value), upstream: &Value) -> Value {
    let mut options = Mapping::new();
    options.insert(
        "@type".into(),
        format!("type.googleapis.com/{HTTP_PROTOCOL_OPTIONS}").into(),
    );
    options.insert(protocol.0.into(), protocol.1);
    options.insert(
        "http_filters".into(),
        seq(vec![
            upstream.clone(),
            map! { "name" => "envoy.filters.http.upstream_codec", "typed_config" => typed(UPSTREAM_CODEC, map! {}) },
        ]),
    );
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
        ), upstream),
    }
}

/// Every cluster the gateway needs (the providers', then grouping mode's), each carrying the
/// upstream filter `upstream`.
pub(crate) fn cluster_values(gw: &Gateway, upstream: &Value) -> Vec<Value> {
    clusters(gw)
        .into_iter()
        .map(|u| cluster(gw, u, upstream))
        .chain(gw.groups.iter().map(|g| group_cluster(gw, g, upstream)))
        .collect()
}

pub fn cluster_list(gw: &Gateway) -> Value {
    seq(cluster_values(
        gw,
        &wasm_filter(gw, UPSTREAM_PLUGIN_NAME, &gw.upstream_json),
    ))
}

/// Tag extraction that gives the filter's metrics their labels in `/stats/prometheus`
/// (`llm_failover_attempts_total{provider="a",outcome="ok"}`; see `llm_failover::metrics`).
pub fn stats_config() -> Value {
    tags_value(llm_failover::metrics::stats_tags())
}

/// [`stats_config`] for the gateway's Envoy: on 1.36-1.38 the metrics carry their VM's cluster
/// scope (`cluster.<name>.wasmcustom.*`) and need the cluster-scoped rules.
pub fn stats_config_for(gw: &Gateway) -> Value {
    match gw.envoy_version.mode() {
        Mode::Router => stats_config(),
        Mode::Grouping => tags_value(llm_failover::metrics::cluster_scoped_stats_tags()),
    }
}

fn tags_value(rules: Vec<llm_failover::metrics::TagRule>) -> Value {
    let tags = rules
        .into_iter()
        .map(|t| map! { "tag_name" => t.tag, "regex" => t.regex })
        .collect();
    map! { "stats_tags" => seq(tags) }
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

/// ECDS resource names of the two roles' plugin configurations (`--reloadable`).
pub const DOWNSTREAM_RESOURCE: &str = NAME;
pub const UPSTREAM_RESOURCE: &str = UPSTREAM_PLUGIN_NAME;

/// The files `render --reloadable DIR` writes: each role's filter configuration as an
/// extension config discovery response Envoy reads from a watched file.
pub fn extension_files(gw: &Gateway) -> Vec<(String, String)> {
    let file = |resource: &str, plugin: &str, json: &str| {
        let filter = wasm_filter(gw, plugin, json);
        let typed_config = filter.get("typed_config").cloned().unwrap_or(Value::Null);
        let body = map! {
            "resources" => seq(vec![typed(
                "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
                map! { "name" => resource, "typed_config" => typed_config },
            )]),
        };
        (
            format!("{resource}.yaml"),
            format!(
                "# The llm-failover plugin configuration, rendered by `llm-failover render --reloadable`;\n\
                 # Envoy watches this file: render again to change it under traffic.\n{}",
                to_yaml(&body)
            ),
        )
    };
    vec![
        file(DOWNSTREAM_RESOURCE, NAME, &gw.downstream_json),
        file(UPSTREAM_RESOURCE, UPSTREAM_PLUGIN_NAME, &gw.upstream_json),
    ]
}

/// A filter whose configuration comes from `dir/<resource>.yaml` (extension config discovery
/// from a watched file), Wasm only: a missing or refused configuration fails closed.
fn discovered(resource: &str, dir: &str) -> Value {
    discovered_from(
        resource,
        map! {
            "path_config_source" => map! {
                "path" => format!("{dir}/{resource}.yaml"),
                "watched_directory" => map! { "path" => dir },
            },
            "resource_api_version" => "V3",
        },
    )
}

/// A filter named `resource` whose configuration comes by extension config discovery from
/// `config_source`, accepting the Wasm type only and with no default configuration (also the
/// Istio target's references, `crate::istio`).
pub(crate) fn discovered_from(resource: &str, config_source: Value) -> Value {
    map! {
        "name" => resource,
        "config_discovery" => map! {
            "config_source" => config_source,
            "type_urls" => seq(vec![WASM.into()]),
        },
    }
}

/// The bootstrap of `render --reloadable DIR`: the same as [`bootstrap`], with the listener's
/// and every cluster's llm-failover filter taking its configuration from DIR.
pub fn reloadable_bootstrap(gw: &Gateway, dir: &str) -> Value {
    let mut b = bootstrap(gw);
    let replace = |filters: &mut Value, resource: &str| {
        if let Value::Sequence(list) = filters {
            for f in list.iter_mut() {
                if f.get("name").and_then(Value::as_str) == Some(NAME) {
                    *f = discovered(resource, dir);
                }
            }
        }
    };
    if let Some(res) = b.get_mut("static_resources") {
        if let Some(Value::Sequence(listeners)) = res.get_mut("listeners") {
            for l in listeners.iter_mut() {
                if l.get("name").and_then(Value::as_str) != Some(NAME) {
                    continue;
                }
                if let Some(Value::Sequence(chains)) = l.get_mut("filter_chains") {
                    for c in chains.iter_mut() {
                        if let Some(Value::Sequence(fs)) = c.get_mut("filters") {
                            for f in fs.iter_mut() {
                                if let Some(hf) = f
                                    .get_mut("typed_config")
                                    .and_then(|t| t.get_mut("http_filters"))
                                {
                                    replace(hf, DOWNSTREAM_RESOURCE);
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(Value::Sequence(clusters)) = res.get_mut("clusters") {
            for c in clusters.iter_mut() {
                if let Some(hf) = c
                    .get_mut("typed_extension_protocol_options")
                    .and_then(|o| o.get_mut(HTTP_PROTOCOL_OPTIONS))
                    .and_then(|o| o.get_mut("http_filters"))
                {
                    replace(hf, UPSTREAM_RESOURCE);
                }
            }
        }
    }
    b
}

pub fn reloadable_bootstrap_text(gw: &Gateway, source: &str, dir: &str) -> String {
    format!(
        "# Envoy bootstrap for the llm-failover gateway, rendered by `llm-failover render {source} --reloadable {dir}`.\n\
         # The filters' configuration lives in {dir} and is reloaded when it changes: render again with the\n\
         # same --reloadable DIR. Changes to listen, admin, providers' endpoints, the set of providers or the\n\
         # longest chain need this bootstrap rendered again and Envoy restarted.\n{}",
        to_yaml(&reloadable_bootstrap(gw, dir))
    )
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
    out
}
