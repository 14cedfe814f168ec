//! Listeners: the API's (access log, local replies, the filter before the router) and the
//! status endpoint's own.

use super::basics::{access_log_format, socket_address};
use super::filter::{downstream_filter, router_filter, wasm_filter};
use super::route::virtual_host;
use super::{seq, typed, HCM, NAME};
use crate::input::{Addr, Gateway, StatusListen};
use llm_failover::wire;
use serde_yaml_ng::{Mapping, Value};

const STDOUT_LOG: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog";

/// Envoy's own error answers in the filter's JSON error shape (behaviour.md 6), with `x-should-retry`:
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
                    "access_log" => seq(std::iter::once(map! {
                        "name" => "envoy.access_loggers.stdout",
                        "typed_config" => typed(STDOUT_LOG, map! {
                            "log_format" => map! { "text_format_source" => map! { "inline_string" => access_log_format() } },
                        }),
                    }).chain(super::otel::access_log(gw)).collect()),
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
pub(super) fn listeners(gw: &Gateway) -> Value {
    let mut out = vec![listener(gw)];
    if let Some(StatusListen::Own { addr, path, json }) = &gw.status {
        out.push(status_listener(gw, addr, json, path));
    }
    seq(out)
}
