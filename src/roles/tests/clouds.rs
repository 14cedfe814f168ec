//! The clouds' envelopes through both roles: what a Bedrock, Vertex or Azure
//! attempt sends, and a Bedrock event stream unwrapped on its way to the caller.

use super::*;
use crate::envelope::eventstream::crc32;

const CLOUDS: &str = r#"{
    "providers": [
        {"name": "anthropic", "cluster": "c-anthropic", "api": "anthropic",
         "credential": {"header": "x-api-key", "value": "sk-ant"}},
        {"name": "bedrock", "cluster": "c-bedrock", "api": "bedrock"},
        {"name": "vertex", "cluster": "c-vertex", "api": "vertex", "path_prefix": "/v1/projects/p1/locations/us-east5",
         "credential": {"header": "authorization", "prefix": "Bearer ", "value": "ya29.token"}},
        {"name": "azure", "cluster": "c-azure", "api": "azure_openai", "path_prefix": "/openai?api-version=2024-10-21",
         "credential": {"header": "api-key", "value": "az-key"}}
    ],
    "chains": [
        {"name": "claude", "models": ["claude-*"], "providers": [
            "anthropic",
            {"provider": "bedrock", "model": "anthropic.claude-sonnet-4-5-v1:0"},
            {"provider": "vertex", "model": "claude-sonnet-4-5@20250929"}]},
        {"name": "bedrock-first", "models": ["br-*"], "providers": [
            {"provider": "bedrock", "model": "anthropic.claude-x-v1:0"}, "anthropic"]},
        {"name": "gpt", "models": ["gpt-*"], "providers": [{"provider": "azure", "model": "gpt-4o-prod"}]}
    ]
}"#;

const MESSAGES: (&str, &str) = (":path", "/v1/messages");

fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    let mut m = ((16 + h.len() + payload.len()) as u32)
        .to_be_bytes()
        .to_vec();
    m.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let crc = crc32(&m);
    m.extend_from_slice(&crc.to_be_bytes());
    m.extend_from_slice(&h);
    m.extend_from_slice(payload);
    let crc = crc32(&m);
    m.extend_from_slice(&crc.to_be_bytes());
    m
}

/// A `chunk` message carrying one Anthropic event (`b64`: its JSON, base64-encoded).
pub(super) fn chunk(b64: &str) -> Vec<u8> {
    let payload = format!(r#"{{"bytes":"{b64}"}}"#);
    frame(
        &[(":event-type", "chunk"), (":message-type", "event")],
        payload.as_bytes(),
    )
}

pub(super) fn event_stream(body: Vec<u8>) -> Provider {
    Provider::Bytes(
        200,
        vec![("content-type", "application/vnd.amazon.eventstream")],
        body,
    )
}

#[test]
fn a_bedrock_fallback_gets_the_model_in_its_path_and_its_version_in_the_body() {
    let gw = Gateway::new(CLOUDS);
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[]}"#;
    let r = gw.request(
        &[MESSAGES, ("anthropic-beta", "a-2025, b-2025")],
        body,
        &[status(503), ok()],
    );
    assert_eq!(
        (r.status, r.clusters()),
        (200, vec!["c-anthropic", "c-bedrock"])
    );
    let bedrock = &r.sent[1];
    assert_eq!(
        bedrock.header(":path"),
        Some("/model/anthropic.claude-sonnet-4-5-v1%3A0/invoke")
    );
    let sent: serde_json::Value = serde_json::from_slice(&bedrock.body).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"max_tokens": 10, "messages": [],
            "anthropic_version": "bedrock-2023-05-31", "anthropic_beta": ["a-2025", "b-2025"]})
    );
    assert_eq!(
        bedrock.header("content-length"),
        Some(bedrock.body.len().to_string().as_str())
    );
    assert_eq!(
        bedrock.header("x-api-key"),
        None,
        "anthropic's key stays with anthropic"
    );
    assert_eq!(
        bedrock.header("anthropic-beta"),
        None,
        "Bedrock gets the flags in its body only"
    );
    assert_eq!(bedrock.header("anthropic-version"), None);
    assert_eq!(r.sent[0].header("anthropic-beta"), Some("a-2025, b-2025"));
    // The first attempt went out untouched, with its own key.
    assert_eq!(r.sent[0].header(":path"), Some("/v1/messages"));
    assert_eq!(r.sent[0].header("x-api-key"), Some("sk-ant"));
    assert_eq!(r.sent[0].body, body.as_bytes());
}

#[test]
fn the_signers_headers_are_cleared_for_every_attempt() {
    let config = Config::from_json(CLOUDS.as_bytes(), &|_| None).unwrap();
    for header in crate::envelope::SIGNING_HEADERS {
        assert!(
            config.cleared_headers.iter().any(|h| h == header),
            "{header}"
        );
    }
}

#[test]
fn vertex_and_azure_attempts_take_their_paths_and_credentials() {
    let gw = Gateway::new(CLOUDS);
    let body = r#"{"model":"claude-sonnet-4-5","stream":true,"max_tokens":10,"messages":[]}"#;
    let sse = Provider::Answer(
        200,
        vec![("content-type", "text/event-stream")],
        "event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
    );
    let r = gw.request(&[MESSAGES], body, &[status(500), status(500), sse]);
    assert_eq!(r.status, 200);
    let vertex = &r.sent[2];
    assert_eq!(
        vertex.header(":path"),
        Some("/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict")
    );
    assert_eq!(vertex.header("authorization"), Some("Bearer ya29.token"));
    let sent: serde_json::Value = serde_json::from_slice(&vertex.body).unwrap();
    assert_eq!(sent["anthropic_version"], "vertex-2023-10-16");
    assert_eq!(sent["stream"], true);
    assert!(sent.get("model").is_none());
    assert_eq!(
        r.sent[1].header(":path"),
        Some("/model/anthropic.claude-sonnet-4-5-v1%3A0/invoke-with-response-stream")
    );

    let r = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(
        r.sent[0].header(":path"),
        Some("/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21")
    );
    assert_eq!(r.sent[0].header("api-key"), Some("az-key"));
    assert_eq!(r.sent[0].header("authorization"), None);
}

#[test]
fn a_bedrock_stream_reaches_the_caller_as_anthropic_events() {
    let gw = Gateway::new(CLOUDS);
    // {"type":"message_start"} and {"type":"message_stop"}, base64.
    let mut frames = chunk("eyJ0eXBlIjoibWVzc2FnZV9zdGFydCJ9");
    frames.extend(chunk("eyJ0eXBlIjoibWVzc2FnZV9zdG9wIn0="));
    let body = r#"{"model":"br-1","stream":true,"max_tokens":10,"messages":[]}"#;
    let r = gw.request(&[MESSAGES], body, &[event_stream(frames)]);
    assert_eq!((r.status, r.clusters()), (200, vec!["c-bedrock"]));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        std::str::from_utf8(&r.body).unwrap(),
        "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    );
}

#[test]
fn a_bedrock_stream_that_starts_with_an_exception_falls_over() {
    let gw = Gateway::new(CLOUDS);
    let exception = frame(
        &[
            (":exception-type", "serviceUnavailableException"),
            (":message-type", "exception"),
        ],
        br#"{"message":"Bedrock is unable to process your request."}"#,
    );
    let body = r#"{"model":"br-1","stream":true,"max_tokens":10,"messages":[]}"#;
    let r = gw.request(&[MESSAGES], body, &[event_stream(exception), ok()]);
    assert_eq!(r.clusters(), ["c-bedrock", "c-anthropic"]);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("overloaded"));
    assert_eq!(r.sent[1].header(":path"), Some("/v1/messages"));
    let sent: serde_json::Value = serde_json::from_slice(&r.sent[1].body).unwrap();
    assert_eq!(
        sent["model"], "br-1",
        "the next attempt starts from the caller's body"
    );
}

#[test]
fn envelope_fields_are_checked_where_they_are_written() {
    let bad = [
        (
            r#"{"name": "v", "api": "vertex"}"#,
            "providers[0].path_prefix",
        ),
        (
            r#"{"name": "b", "api": "bedrock", "path_prefix": "/x?y=1"}"#,
            "providers[0].path_prefix",
        ),
        (r#"{"name": "o", "api": "gcp"}"#, "providers[0].api"),
    ];
    for (provider, field) in bad {
        let json = format!(
            r#"{{"providers": [{provider}], "chains": [{{"name": "c", "providers": ["{}"]}}]}}"#,
            &provider[10..11]
        );
        let errors = Config::from_json(json.as_bytes(), &|_| None)
            .err()
            .unwrap_or_default();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&field), "{provider}: {fields:?}");
    }
}

/// An `api: anthropic` provider (its default `anthropic-version`) and one that declares no API
/// (it takes what the caller sends), in both orders.
const MIXED: &str = r#"{
    "providers": [
        {"name": "declared", "cluster": "c-declared", "api": "anthropic",
         "credential": {"header": "x-api-key", "value": "sk-ant"}},
        {"name": "plain", "cluster": "c-plain"},
        {"name": "bedrock", "cluster": "c-bedrock", "api": "bedrock"}
    ],
    "chains": [
        {"name": "a", "models": ["claude-a"], "providers": ["declared", "plain", {"provider": "declared", "model": "claude-x"}]},
        {"name": "b", "models": ["claude-b"], "providers": ["plain", "declared"]},
        {"name": "c", "models": ["claude-c"], "providers": [{"provider": "bedrock", "model": "m:0"}, "plain"]}
    ]
}"#;

#[test]
fn each_attempt_gets_the_callers_anthropic_version_or_its_providers_own() {
    let gw = Gateway::new(MIXED);
    let caller = [
        MESSAGES,
        ("anthropic-version", "2024-10-22"),
        ("anthropic-beta", "flag-1"),
    ];
    let version = |r: &Response, i: usize| r.sent[i].header("anthropic-version").map(String::from);
    let body = r#"{"model":"claude-a","max_tokens":10,"messages":[]}"#;
    let r = gw.request(&caller, body, &[status(503), status(503), ok()]);
    assert_eq!(r.clusters(), ["c-declared", "c-plain", "c-declared"]);
    assert_eq!(version(&r, 0).as_deref(), Some("2023-06-01"), "its default");
    assert_eq!(
        version(&r, 1).as_deref(),
        Some("2024-10-22"),
        "the caller's"
    );
    assert_eq!(version(&r, 2).as_deref(), Some("2023-06-01"));
    for sent in &r.sent {
        assert_eq!(sent.header("anthropic-beta"), Some("flag-1"));
    }
    assert_eq!(r.sent[1].header("x-api-key"), None);
    let body = r#"{"model":"claude-b","max_tokens":10,"messages":[]}"#;
    let r = gw.request(&caller, body, &[status(503), ok()]);
    assert_eq!(r.clusters(), ["c-plain", "c-declared"]);
    assert_eq!(version(&r, 0).as_deref(), Some("2024-10-22"));
    assert_eq!(version(&r, 1).as_deref(), Some("2023-06-01"));
    // Bedrock first: neither header reaches it, the next provider gets both of the caller's.
    let body = r#"{"model":"claude-c","max_tokens":10,"messages":[]}"#;
    let r = gw.request(&caller, body, &[status(503), ok()]);
    assert_eq!(r.clusters(), ["c-bedrock", "c-plain"]);
    assert_eq!(version(&r, 0), None);
    assert_eq!(r.sent[0].header("anthropic-beta"), None);
    let sent: serde_json::Value = serde_json::from_slice(&r.sent[0].body).unwrap();
    assert_eq!(sent["anthropic_beta"], serde_json::json!(["flag-1"]));
    assert_eq!(version(&r, 1).as_deref(), Some("2024-10-22"));
    assert_eq!(r.sent[1].header("anthropic-beta"), Some("flag-1"));
}

const BEDROCK_FIRST: &str = r#"{
    "providers": [
        {"name": "bedrock", "cluster": "c-bedrock", "api": "bedrock"},
        {"name": "anthropic", "cluster": "c-anthropic", "api": "anthropic"}
    ],
    "chains": [
        {"name": "c", "models": ["claude-*"], "fallback_on": ["timeout", "rate_limited",
            "overloaded", "server_error", "quota_exhausted", "context_window_exceeded"],
         "providers": [{"provider": "bedrock", "model": "m:0"}, "anthropic"]}
    ]
}"#;

/// Bedrock's answer to a failing request, as InvokeModel sends it.
fn aws_error(status: u16, kind: &str, message: &'static str) -> Provider {
    let kind: &'static str = Box::leak(
        format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/").into_boxed_str(),
    );
    let body: &'static str = Box::leak(format!(r#"{{"message":"{message}"}}"#).into_boxed_str());
    Provider::Answer(
        status,
        vec![
            ("content-type", "application/json"),
            ("x-amzn-errortype", kind),
        ],
        body,
    )
}

#[test]
fn bedrocks_errors_are_classified_by_their_type_and_message() {
    let body = r#"{"model":"claude-x","max_tokens":10,"messages":[]}"#;
    for (status, kind, message, class) in [
        (
            400,
            "ValidationException",
            "Input is too long for requested model.",
            "context_window_exceeded",
        ),
        (
            429,
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
            "rate_limited",
        ),
        (
            400,
            "ServiceQuotaExceededException",
            "Too many tokens per day, please wait before trying again.",
            "quota_exhausted",
        ),
        (
            429,
            "ModelNotReadyException",
            "Model is not ready to serve inference requests.",
            "overloaded",
        ),
        (
            408,
            "ModelTimeoutException",
            "Model has timed out in processing the request.",
            "timeout",
        ),
        (
            503,
            "ServiceUnavailableException",
            "Service unavailable.",
            "overloaded",
        ),
        (
            424,
            "ModelErrorException",
            "The model returned an error.",
            "server_error",
        ),
    ] {
        // A fresh gateway each: some classes take Bedrock out of later walks.
        let gw = Gateway::new(BEDROCK_FIRST);
        let r = gw.request(&[MESSAGES], body, &[aws_error(status, kind, message), ok()]);
        assert_eq!(r.clusters(), ["c-bedrock", "c-anthropic"], "{kind}");
        assert_eq!(
            r.header(wire::FALLBACK_REASON_HEADER),
            Some(class),
            "{kind}"
        );
    }
    // Not the provider's trouble: the caller gets Bedrock's answer.
    for (status, kind, message) in [
        (
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
        ),
        (
            400,
            "ValidationException",
            "Malformed input request, please reformat your input and try again.",
        ),
    ] {
        let gw = Gateway::new(BEDROCK_FIRST);
        let r = gw.request(&[MESSAGES], body, &[aws_error(status, kind, message), ok()]);
        assert_eq!(
            (r.clusters(), r.status),
            (vec!["c-bedrock"], status),
            "{kind}"
        );
    }
}
