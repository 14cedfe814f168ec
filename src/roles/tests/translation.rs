//! Cross-vendor attempts (behaviour.md 13) through both roles: a translated attempt's path, headers,
//! body and answer; a same-API attempt unchanged; the gateway's replies in the caller's shape.

use super::*;

const XV: &str = r#"{
    "providers": [
        {"name": "oai", "cluster": "co", "api": "openai",
         "credential": {"header": "authorization", "value": "sk-o", "prefix": "Bearer "}},
        {"name": "ant", "cluster": "ca", "api": "anthropic", "path_prefix": "/anthropic",
         "max_tokens": 512, "credential": {"header": "x-api-key", "value": "sk-a"}},
        {"name": "oai2", "cluster": "co2", "api": "openai"}
    ],
    "chains": [
        {"name": "gpt", "models": ["gpt-*"],
         "providers": ["oai", {"provider": "ant", "model": "claude-sonnet-4-5"}, "oai2"]},
        {"name": "claude", "models": ["claude-*"],
         "providers": ["ant", {"provider": "oai", "model": "gpt-4o"}]},
        {"name": "same", "models": ["same-*"], "providers": ["oai", "oai2"]}
    ]
}"#;

const ANTHROPIC_ANSWER: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello from claude"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}"#;

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).expect("JSON")
}

const CHAT: &str = r#"{"model":"gpt-4o","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}"#;

#[test]
fn an_openai_caller_falls_over_to_an_anthropic_provider_translated_both_ways() {
    let gw = Gateway::new(XV);
    let anthropic = Provider::Answer(
        200,
        vec![
            ("content-type", "application/json"),
            ("content-length", "220"),
        ],
        ANTHROPIC_ANSWER,
    );
    let r = gw.request(&[("anthropic-beta", "x")], CHAT, &[status(503), anthropic]);
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["co", "ca"]);
    // The first attempt went out as the caller sent it.
    let first = &r.sent[0];
    assert_eq!(first.header(":path"), Some("/v1/chat/completions"));
    assert_eq!(first.body, CHAT.as_bytes());
    assert_eq!(first.header("anthropic-version"), None);
    assert_eq!(
        first.header("anthropic-beta"),
        None,
        "not for an OpenAI provider"
    );
    // The fallback: Messages, with its version and key, none of the OpenAI provider's.
    let sent = &r.sent[1];
    assert_eq!(sent.header(":path"), Some("/anthropic/v1/messages"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("x"),
        "the caller's own goes on"
    );
    assert_eq!(sent.header("x-api-key"), Some("sk-a"));
    assert_eq!(sent.header("authorization"), None);
    let body = json(&sent.body);
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["max_tokens"], 512, "the provider's default");
    assert_eq!(body["system"][0]["text"], "be brief");
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(
        sent.header("content-length"),
        Some(sent.body.len().to_string().as_str())
    );
    // The answer, back in the caller's API.
    let answer = r.body_json();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Hello from claude"
    );
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["model"], "claude-sonnet-4-5");
    assert_eq!(r.header("content-length"), None, "the length changed");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("ant"));
}

#[test]
fn an_attempt_after_a_translated_one_gets_the_callers_request_back() {
    let gw = Gateway::new(XV);
    let r = gw.request(&[], CHAT, &[status(503), status(529), ok()]);
    assert_eq!(r.clusters(), ["co", "ca", "co2"]);
    let third = &r.sent[2];
    assert_eq!(third.header(":path"), Some("/v1/chat/completions"));
    assert_eq!(third.body, CHAT.as_bytes());
    assert_eq!(
        third.header("content-length"),
        Some(CHAT.len().to_string().as_str())
    );
    assert_eq!(third.header("anthropic-version"), None, "cleared");
    assert_eq!(third.header("x-api-key"), None);
    assert_eq!(
        r.body, br#"{"ok":true}"#,
        "a same-API answer passes unchanged"
    );
}

#[test]
fn a_translated_stream_is_held_for_its_first_event_then_translated() {
    let gw = Gateway::new(XV);
    let stream = Provider::Answer(
        200,
        vec![("content-type", "text/event-stream")],
        concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi there\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        ),
    );
    let body = r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.request(&[], body, &[status(503), stream]);
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["co", "ca"]);
    assert_eq!(json(&r.sent[1].body)["stream"], true);
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(text.starts_with("data: {"), "{text}");
    assert!(text.contains("chat.completion.chunk"), "{text}");
    assert!(text.contains("Hi there"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(!text.contains("message_start"), "{text}");
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("overloaded"));
}

#[test]
fn a_providers_error_that_goes_back_comes_in_the_callers_shape() {
    let gw = Gateway::new(XV);
    let refusal = Provider::Answer(
        400,
        vec![("content-type", "application/json")],
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}"#,
    );
    let r = gw.request(&[], CHAT, &[status(503), refusal]);
    assert_eq!(r.status, 400);
    assert_eq!(r.clusters(), ["co", "ca"]);
    let error = r.body_json();
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_tokens: too large")),
        "{error}"
    );
}

#[test]
fn the_gateways_own_replies_to_an_anthropic_caller_are_anthropic_errors() {
    let gw = Gateway::new(XV);
    let r = gw.request(
        &[(":path", "/v1/messages")],
        r#"{"model":"llama-3","max_tokens":5,"messages":[]}"#,
        &[],
    );
    assert!(r.local);
    assert_eq!(r.status, 400);
    let error = r.body_json();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(
        error["error"]["code"], "model_not_recognized",
        "the gateway's code too"
    );
    assert_eq!(r.header(wire::SHOULD_RETRY_HEADER), Some("false"));
    // An OpenAI caller keeps OpenAI's shape.
    let r = gw.chat("llama-3", &[]);
    assert_eq!(r.body_json()["error"]["code"], "model_not_recognized");
}

#[test]
fn a_first_entry_that_cannot_carry_the_request_is_answered_400_unsent() {
    let gw = Gateway::new(XV);
    // n > 1 has no Messages equivalent; the chain's first entry speaks Messages.
    let body = r#"{"model":"claude-sonnet-4-5","n":2,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.request(&[], body, &[ok()]);
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert!(r.sent.is_empty(), "nothing reached a provider");
    assert!(r.local, "refused when planned, before the router");
    assert_eq!(r.body_json()["error"]["code"], "untranslatable_request");
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("0"));
    assert_eq!(r.header(wire::PROVIDER_HEADER), None);
    assert_eq!(gw.metric(&names::attempts("ant", Class::InvalidRequest)), 0);
}

#[test]
fn a_responses_request_with_state_for_a_chain_led_by_messages_is_refused_unsent() {
    let gw = Gateway::new(XV);
    let responses = [(":path", "/v1/responses")];
    for body in [
        r#"{"model":"claude-sonnet-4-5","input":"hi","previous_response_id":"resp_1"}"#,
        r#"{"model":"claude-sonnet-4-5","input":"hi","background":true}"#,
    ] {
        let r = gw.request(&responses, body, &[ok(), ok()]);
        assert_eq!(r.status, 400, "{:?}", r.body);
        assert!(r.local && r.sent.is_empty(), "refused before any attempt");
        assert_eq!(r.body_json()["error"]["code"], "untranslatable_request");
        assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("0"));
        assert_eq!(r.header(wire::PROVIDER_HEADER), None);
    }
}

#[test]
fn a_fallback_that_cannot_carry_the_request_is_skipped_before_the_first_attempt() {
    let gw = Gateway::new(XV);
    let body = r#"{"model":"gpt-4o","n":2,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.request(&[], body, &[status(503), ok()]);
    assert_eq!(r.clusters(), ["co", "co2"], "ant was skipped");
    assert_eq!(gw.metric(&names::skipped("ant", "content_incompatible")), 1);
    assert!(
        r.log
            .as_deref()
            .is_some_and(|l| l.contains("content_incompatible")),
        "{:?}",
        r.log
    );
}

#[test]
fn a_same_api_chain_is_sent_byte_for_byte_and_its_plan_names_no_api() {
    let gw = Gateway::new(XV);
    let body = r#"{"model":"same-1","messages":[]}"#;
    let r = gw.request(&[], body, &[status(500), ok()]);
    assert_eq!(r.clusters(), ["co", "co2"]);
    for sent in &r.sent {
        assert_eq!(sent.body, body.as_bytes());
        assert_eq!(sent.header(":path"), Some("/v1/chat/completions"));
    }
    assert_eq!(r.body, br#"{"ok":true}"#);
}

#[test]
fn an_anthropic_callers_stream_from_an_openai_provider_is_translated() {
    let gw = Gateway::new(XV);
    let stream = Provider::Answer(
        200,
        vec![("content-type", "text/event-stream")],
        concat!(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi there\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n"
        ),
    );
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.request(
        &[
            (":path", "/v1/messages"),
            ("anthropic-version", "2023-06-01"),
        ],
        body,
        &[status(529), stream],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["ca", "co"]);
    let sent = &r.sent[1];
    assert_eq!(sent.header(":path"), Some("/v1/chat/completions"));
    assert_eq!(sent.header("anthropic-version"), None, "not for OpenAI");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-o"));
    let sent_body = json(&sent.body);
    assert_eq!(sent_body["model"], "gpt-4o");
    assert_eq!(sent_body["stream"], true);
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(text.starts_with("event: message_start\n"), "{text}");
    assert!(text.contains("Hi there"), "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
}

#[test]
fn an_openai_providers_error_reaches_an_anthropic_caller_as_an_anthropic_error() {
    let gw = Gateway::new(XV);
    let refusal = Provider::Answer(
        400,
        vec![("content-type", "application/json")],
        r#"{"error":{"message":"bad temperature","type":"invalid_request_error","param":null,"code":null}}"#,
    );
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.request(&[(":path", "/v1/messages")], body, &[status(529), refusal]);
    assert_eq!(r.status, 400);
    assert_eq!(r.clusters(), ["ca", "co"]);
    let error = r.body_json();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("bad temperature")),
        "{error}"
    );
}

// ---------------------------------------------------------------------------------------------
// How a translated stream ends (behaviour.md 5 and 13): whichever callback ends it, honestly, and
// never untranslated.

const SSE: (&str, &str) = ("content-type", "text/event-stream");
const CLAUDE_START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n";
const CLAUDE_TEXT: &str = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi there\"}}\n\n";
const CLAUDE_STOP_REASON: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n";
/// The last event without its blank line: only the stream's end completes it.
const CLAUDE_STOP_UNENDED: &str = "event: message_stop\ndata: {\"type\":\"message_stop\"}";
const STREAM_CHAT: &str =
    r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
const CUT_OPENAI: &str = "data: {\"error\":{\"message\":\"the provider's stream ended before its final event\",\"type\":\"server_error\",\"code\":\"stream_cut_short\"}}\n\n";

fn text(r: &Response) -> String {
    String::from_utf8(r.body.clone()).unwrap()
}

#[test]
fn a_translated_stream_ended_by_trailers_gets_its_end_marker() {
    for chunks in [
        // The stop reason, then the last event alone and without its blank line.
        vec![
            CLAUDE_START,
            CLAUDE_TEXT,
            CLAUDE_STOP_REASON,
            CLAUDE_STOP_UNENDED,
        ],
        // The stop reason came, then no `message_stop` at all (complete: behaviour.md 5).
        vec![CLAUDE_START, CLAUDE_TEXT, CLAUDE_STOP_REASON],
    ] {
        let gw = Gateway::new(XV);
        let stream = Provider::Chunks(vec![SSE], chunks, Ending::Trailers);
        let r = gw.request(&[], STREAM_CHAT, &[status(503), stream]);
        assert_eq!(r.clusters(), ["co", "ca"]);
        let text = text(&r);
        assert!(text.contains("Hi there"), "{text}");
        assert!(text.contains(r#""finish_reason":"stop""#), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(!text.contains("message_"), "nothing untranslated: {text}");
    }
}

#[test]
fn a_translated_stream_ended_by_trailers_after_its_end_marker_is_unchanged() {
    let gw = Gateway::new(XV);
    let whole = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let chunks = vec![CLAUDE_START, CLAUDE_TEXT, CLAUDE_STOP_REASON, whole];
    let by_trailers = Provider::Chunks(vec![SSE], chunks.clone(), Ending::Trailers);
    let r = gw.request(&[], STREAM_CHAT, &[status(503), by_trailers]);
    let by_body = Provider::Chunks(vec![SSE], chunks, Ending::Body);
    let gw = Gateway::new(XV);
    let want = gw.request(&[], STREAM_CHAT, &[status(503), by_body]);
    assert_eq!(text(&r), text(&want));
    assert!(text(&r).ends_with("data: [DONE]\n\n"));
}

#[test]
fn a_translated_stream_cut_short_ends_with_an_error_event_in_the_callers_dialect() {
    // An Anthropic stream to an OpenAI caller, ended cleanly before its stop reason.
    let gw = Gateway::new(XV);
    let stream = Provider::Chunks(vec![SSE], vec![CLAUDE_START, CLAUDE_TEXT], Ending::Body);
    let r = gw.request(&[], STREAM_CHAT, &[status(503), stream]);
    let text = text(&r);
    assert!(text.contains("Hi there"), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert!(text.ends_with(CUT_OPENAI), "{text}");
    assert_eq!(text.matches("stream_cut_short").count(), 1, "{text}");
    // An OpenAI stream to an Anthropic caller, cut the same way.
    let gw = Gateway::new(XV);
    let chunk = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi there\"},\"finish_reason\":null}]}\n\n";
    let stream = Provider::Chunks(vec![SSE], vec![chunk, chunk], Ending::Body);
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.request(&[(":path", "/v1/messages")], body, &[status(529), stream]);
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(text.contains("Hi there"), "{text}");
    assert!(!text.contains("message_stop"), "{text}");
    assert!(
        text.ends_with(
            std::str::from_utf8(crate::failing_answer::cut_stream_event(
                crate::translate::Api::AnthropicMessages
            ))
            .unwrap()
        ),
        "{text}"
    );
}

#[test]
fn a_held_translated_stream_released_by_the_first_token_timeout_is_translated() {
    // The OpenAI fallback of an Anthropic caller's chain is its last entry: a stream without
    // output in time is a timeout with no provider left, so what it held goes to the caller.
    let gw = Gateway::new(&XV.replace(
        r#""chains": ["#,
        r#""timeouts": {"first_token": "5s"}, "chains": ["#,
    ));
    let role = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";
    let stream = Provider::Chunks(vec![SSE], vec![role], Ending::Timer);
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.request(&[(":path", "/v1/messages")], body, &[status(529), stream]);
    assert_eq!(r.clusters(), ["ca", "co"]);
    assert_eq!(gw.metric(&attempts_metric("oai", Class::Timeout)), 1);
    let text = text(&r);
    assert!(text.starts_with("event: message_start\n"), "{text}");
    assert!(
        !text.contains("chat.completion"),
        "nothing untranslated: {text}"
    );
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
}

// ---------------------------------------------------------------------------------------------
// An answer that cannot be read is a failure (behaviour.md 16): never a success holding an error.

const NOT_AN_ANSWER: &str = r#"{"hello": "world"}"#;

fn not_an_answer() -> Provider {
    Provider::Answer(
        200,
        vec![("content-type", "application/json")],
        NOT_AN_ANSWER,
    )
}

#[test]
fn a_translated_answer_that_is_no_answer_of_its_api_falls_over_as_a_server_error() {
    let gw = Gateway::new(XV);
    // OpenAI caller: the Anthropic fallback's 200 is no Messages answer; the next entry answers.
    let r = gw.request(&[], CHAT, &[status(503), not_an_answer(), ok()]);
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["co", "ca", "co2"]);
    assert_eq!(r.body, br#"{"ok":true}"#);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("server_error"));
    assert_eq!(gw.metric(&names::attempts("ant", Class::ServerError)), 1);
    // It is the last entry: the caller gets a 502 in its own API, not a 200.
    let claude =
        r#"{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.request(
        &[(":path", "/v1/messages")],
        claude,
        &[status(529), not_an_answer()],
    );
    assert_eq!(r.clusters(), ["ca", "co"]);
    assert_eq!(r.status, 502, "{:?}", String::from_utf8_lossy(&r.body));
    let error = r.body_json();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "api_error");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-should-retry"), Some("true"));
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("oai"));
    assert_eq!(gw.metric(&names::attempts("oai", Class::ServerError)), 1);
    // A real answer still goes through, translated.
    let anthropic = Provider::Answer(
        200,
        vec![("content-type", "application/json")],
        ANTHROPIC_ANSWER,
    );
    let r = gw.request(&[], CHAT, &[status(503), anthropic]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body_json()["choices"][0]["message"]["content"],
        "Hello from claude"
    );
}

#[test]
fn a_translated_stream_whose_first_event_is_not_of_its_api_falls_over() {
    let gw = Gateway::new(XV);
    let junk = Provider::Answer(
        200,
        vec![SSE],
        ": keep-alive\n\ndata: {\"hello\":\"world\"}\n\ndata: [DONE]\n\n",
    );
    let r = gw.request(&[], STREAM_CHAT, &[status(503), junk, ok()]);
    assert_eq!(r.clusters(), ["co", "ca", "co2"]);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("server_error"));
    assert_eq!(r.body, br#"{"ok":true}"#);
    // An OpenAI provider's stream to an Anthropic caller, shaped as Messages events: no chunk.
    let claude = r#"{"model":"claude-x","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let wrong = Provider::Answer(200, vec![SSE], CLAUDE_START);
    let r = gw.request(&[(":path", "/v1/messages")], claude, &[status(529), wrong]);
    assert_eq!(r.clusters(), ["ca", "co"]);
    // The last entry: nothing of it reached the caller, who gets a 502 in its own API.
    assert_eq!(r.status, 502);
    let error = r.body_json();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "api_error");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(gw.metric(&names::attempts("oai", Class::ServerError)), 1);
    // A healthy Azure-style first chunk (no choices' content yet) is an OpenAI chunk.
    let azure = Provider::Answer(
        200,
        vec![SSE],
        concat!(
            "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n"
        ),
    );
    let r = gw.request(&[(":path", "/v1/messages")], claude, &[status(529), azure]);
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).contains("Hi"));
}

// ---------------------------------------------------------------------------------------------
// What each answer cost (docs/behaviour.md section 15), read from the provider's own bytes.

#[test]
fn a_translated_answers_usage_counts_for_the_provider_that_served_it() {
    // JSON: the Anthropic answer's usage, read in Anthropic's names.
    let gw = Gateway::new(XV);
    let anthropic = Provider::Answer(
        200,
        vec![("content-type", "application/json")],
        ANTHROPIC_ANSWER,
    );
    let r = gw.request(&[], CHAT, &[status(503), anthropic]);
    assert_eq!(r.clusters(), ["co", "ca"]);
    assert_eq!(gw.tokens("ant", "claude-sonnet-4-5"), [3, 4, 0]);
    assert_eq!(gw.tokens("oai", "gpt-4o"), [0, 0, 0], "the failed one");
    assert!(
        r.log
            .as_deref()
            .unwrap()
            .ends_with(",ant:ok:0ms:in=3/out=4/cached=0"),
        "{:?}",
        r.log
    );
    // A stream, the caller without usage asked: message_start's input, message_delta's output.
    let gw = Gateway::new(XV);
    let stream = Provider::Chunks(
        vec![SSE],
        vec![CLAUDE_START, CLAUDE_TEXT, CLAUDE_STOP_REASON],
        Ending::Trailers,
    );
    let r = gw.request(&[], STREAM_CHAT, &[status(503), stream]);
    assert!(!text(&r).contains("usage"), "{}", text(&r));
    assert_eq!(gw.tokens("ant", "claude-sonnet-4-5"), [5, 3, 0]);
}

/// docs/behaviour.md section 15: a Gemini answer's `usageMetadata` counts for the Gemini
/// provider that served it (thoughts as output, cached content inside the input).
#[test]
fn a_gemini_answers_usage_metadata_counts() {
    let config = r#"{
        "providers": [
            {"name": "oai", "cluster": "co", "api": "openai"},
            {"name": "gem", "cluster": "cg", "api": "gemini_native"}
        ],
        "chains": [{"name": "gpt", "models": ["gpt-*"],
            "providers": ["oai", {"provider": "gem", "model": "gemini-2.5-flash"}]}]
    }"#;
    let answer = r#"{"candidates": [{"content": {"parts": [{"text": "hi"}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 20, "cachedContentTokenCount": 256, "thoughtsTokenCount": 9, "totalTokenCount": 329}, "modelVersion": "gemini-2.5-flash", "responseId": "r"}"#;
    let gw = Gateway::new(config);
    let gemini = Provider::Answer(200, vec![("content-type", "application/json")], answer);
    let r = gw.request(&[], CHAT, &[status(503), gemini]);
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(gw.tokens("gem", "gemini-2.5-flash"), [300, 29, 256]);
    let chunk = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"hi\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 300,\"candidatesTokenCount\": 3},\"modelVersion\": \"g\"}\r\n\r\n";
    let last = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 300,\"candidatesTokenCount\": 20,\"thoughtsTokenCount\": 9},\"modelVersion\": \"g\"}\r\n\r\n";
    let gw = Gateway::new(config);
    let stream = Provider::Chunks(vec![SSE], vec![chunk, last], Ending::Body);
    let r = gw.request(&[], STREAM_CHAT, &[status(503), stream]);
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(gw.tokens("gem", "gemini-2.5-flash"), [300, 29, 0]);
}
