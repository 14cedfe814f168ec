//! `render --otel-collector HOST:PORT`: each request's record goes to an OpenTelemetry
//! collector (OTLP logs over gRPC) through Envoy's own OpenTelemetry access logger, with the
//! GenAI semantic conventions' attribute names (docs/observability.md, "OpenTelemetry"). Every
//! value is an Envoy formatter command read when the request ends: the filter's filter state
//! (the attempt log, the models it writes with `log_models`) and the response's headers.

use super::basics::{access_log_format, socket_address};
use super::{seq, typed};
use crate::input::{Endpoint, Gateway, Host};
use crate::version::EnvoyVersion;
use llm_failover::wire;
use serde_yaml_ng::{Mapping, Value};

/// The collector's cluster.
pub const OTEL_CLUSTER: &str = "llm_failover_otel";

const OTEL_LOG: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig";

/// `grpc_service` beside the attributes replaced `common_config` (deprecated) in Envoy 1.37.
const GRPC_SERVICE_FIELD: EnvoyVersion = EnvoyVersion {
    major: 1,
    minor: 37,
};

fn filter_state(property: &str) -> String {
    format!(
        "%FILTER_STATE({}{property}:PLAIN)%",
        wire::ENVOY_WASM_STATE_PREFIX
    )
}

/// Each log record's attributes: (name, Envoy format). `-` when a value is missing (no provider
/// answered, a request refused before planning).
pub fn attributes() -> Vec<(&'static str, String)> {
    vec![
        (
            "gen_ai.provider.name",
            format!("%RESP({})%", wire::PROVIDER_HEADER),
        ),
        (
            "gen_ai.request.model",
            filter_state(wire::REQUEST_MODEL_PROPERTY),
        ),
        (
            "gen_ai.response.model",
            filter_state(wire::RESPONSE_MODEL_PROPERTY),
        ),
        (
            "gen_ai.usage.input_tokens",
            filter_state(wire::INPUT_TOKENS_PROPERTY),
        ),
        (
            "gen_ai.usage.output_tokens",
            filter_state(wire::OUTPUT_TOKENS_PROPERTY),
        ),
        (
            "llm_failover.attempts",
            filter_state(wire::ATTEMPTS_PROPERTY),
        ),
        ("llm_failover.chain", filter_state(wire::CHAIN_PROPERTY)),
        ("llm_failover.caller", filter_state(wire::CALLER_PROPERTY)),
        ("http.response.status_code", "%RESPONSE_CODE%".to_string()),
        ("url.path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%".to_string()),
    ]
}

fn string_value(text: &str) -> Value {
    map! { "string_value" => text }
}

fn key_values(pairs: &[(&str, String)]) -> Value {
    map! { "values" => seq(pairs.iter().map(|(k, v)| map! { "key" => *k, "value" => string_value(v) }).collect()) }
}

/// The HCM's OpenTelemetry access log, when the gateway has a collector.
pub fn access_log(gw: &Gateway) -> Option<Value> {
    gw.otel.as_ref()?;
    let service = map! {
        "envoy_grpc" => map! { "cluster_name" => OTEL_CLUSTER },
        "timeout" => "5s",
    };
    let mut config = Mapping::new();
    if gw.envoy_version >= GRPC_SERVICE_FIELD {
        config.insert("log_name".into(), super::NAME.into());
        config.insert("grpc_service".into(), service);
    } else {
        config.insert(
            "common_config".into(),
            map! {
                "log_name" => super::NAME,
                "grpc_service" => service,
                "transport_api_version" => "V3",
            },
        );
    }
    config.insert(
        "resource_attributes".into(),
        key_values(&[("service.name", "llm-failover".to_string())]),
    );
    let line = access_log_format();
    config.insert("body".into(), string_value(line.trim_end()));
    config.insert("attributes".into(), key_values(&attributes()));
    Some(map! {
        "name" => "envoy.access_loggers.open_telemetry",
        "typed_config" => typed(OTEL_LOG, Value::Mapping(config)),
    })
}

/// The collector's cluster (HTTP/2, plain: a collector beside Envoy), when there is one.
pub fn cluster(gw: &Gateway) -> Option<Value> {
    Some(grpc_cluster(OTEL_CLUSTER, gw.otel.as_ref()?))
}

/// The fleet's store's cluster (`fleet.address`: Envoy's rate-limit service, gRPC over plain
/// HTTP/2 beside Envoy), named `fleet.cluster`.
pub fn fleet_cluster(gw: &Gateway) -> Option<Value> {
    let fleet = gw.config.fleet.as_ref()?;
    let endpoint = crate::input::parse_endpoint(fleet.address.as_deref()?).ok()?;
    Some(grpc_cluster(&fleet.cluster, &endpoint))
}

/// A plain HTTP/2 cluster of one endpoint, for a gRPC service beside Envoy.
fn grpc_cluster(name: &str, endpoint: &Endpoint) -> Value {
    let Endpoint { host, port } = endpoint;
    let kind = match host {
        Host::Ip(_) => "STATIC",
        Host::Name(_) => "STRICT_DNS",
    };
    map! {
        "name" => name,
        "type" => kind,
        "connect_timeout" => "5s",
        "typed_extension_protocol_options" => map! {
            super::HTTP_PROTOCOL_OPTIONS => typed(
                &format!("type.googleapis.com/{}", super::HTTP_PROTOCOL_OPTIONS),
                map! { "explicit_http_config" => map! { "http2_protocol_options" => map! {} } },
            ),
        },
        "load_assignment" => map! {
            "cluster_name" => name,
            "endpoints" => seq(vec![map! { "lb_endpoints" => seq(vec![map! {
                "endpoint" => map! { "address" => socket_address(&host.address(), *port) },
            }]) }]),
        },
    }
}
