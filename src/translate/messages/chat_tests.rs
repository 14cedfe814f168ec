//! The edges of a Messages caller on a Chat provider (the Messages reader, Chat's writer; Chat's
//! answer reader, the Messages answer writer): each tool choice, what Chat cannot carry, stop
//! reasons and refusals, errors of other shapes. The reference payloads are fixtures
//! (src/translate/fixtures/messages-to-chat/, run by translate/fixtures.rs).

use serde_json::{json, Value};

use super::*;
use crate::translate::{Api, RequestContext, Untranslatable};

fn request(body: &[u8], cx: &RequestContext<'_>) -> Result<Vec<u8>, Untranslatable> {
    crate::translate::request(Api::AnthropicMessages, Api::OpenAiChat, body, cx)
}

fn check(body: &[u8]) -> Result<(), Untranslatable> {
    crate::translate::check(Api::AnthropicMessages, Api::OpenAiChat, body)
}

/// What the caller gets for the provider's answer: `Err` when a 2xx body is no answer.
fn translated(status: u16, body: &[u8]) -> Result<Vec<u8>, Vec<u8>> {
    let out = crate::translate::response(Api::OpenAiChat, Api::AnthropicMessages, status, body, 0);
    if out.unreadable {
        Err(out.body)
    } else {
        Ok(out.body)
    }
}

/// The body the caller gets, an answer or not (whether it is one: [`translated`]).
fn response(status: u16, body: &[u8]) -> Vec<u8> {
    translated(status, body).unwrap_or_else(|error| error)
}

const CX: RequestContext<'static> = RequestContext {
    model: "gpt-4o",
    default_max_tokens: 4096,
    stream: false,
};

/// The translated request (and `check` agrees that it translates).
fn translate(body: Value) -> Value {
    let body = body.to_string();
    assert_eq!(check(body.as_bytes()), Ok(()));
    let out = request(body.as_bytes(), &CX).unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// Why the request cannot be translated (`check` and `request` agree).
fn refused(body: Value) -> Untranslatable {
    let body = body.to_string();
    let why = request(body.as_bytes(), &CX).unwrap_err();
    assert_eq!(
        check(body.as_bytes()),
        Err(why),
        "check and request disagree"
    );
    why
}

fn answer(status: u16, body: Value) -> Value {
    serde_json::from_slice(&response(status, body.to_string().as_bytes())).unwrap()
}

/// Strings where Chat takes them (the Chat writer's compact form, as the pair module wrote
/// them): a user's lone text as its content, an assistant's texts joined, empty ones dropped.
#[test]
fn texts_are_strings_where_they_can_be() {
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "x\"y"}, {"type": "text", "text": ""},
                                          {"type": "text", "text": "z"}]},
        {"role": "assistant", "content": [{"type": "text", "text": ""}]},
        {"role": "user", "content": [{"type": "text", "text": "q"}]}
    ]});
    let out = request(body.to_string().as_bytes(), &CX).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains(concat!(
            r#""messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},"#,
            r#"{"role":"assistant","content":"x\"yz"},{"role":"user","content":"q"}]"#
        )),
        "{out}"
    );
}

#[test]
fn a_system_string_and_no_stream() {
    let out = translate(json!({
        "model": "claude-sonnet-4-5", "max_tokens": 10, "system": "Be brief.", "stream": false,
        "messages": [{"role": "user", "content": "Hi"}]
    }));
    assert_eq!(
        out["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(
        (out["stream"].clone(), out.get("stream_options")),
        (json!(false), None)
    );
}

fn weather_tool() -> Value {
    json!({
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "input_schema": {
            "type": "object",
            "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
            "required": ["location"]
        },
        "cache_control": {"type": "ephemeral"}
    })
}

#[test]
fn each_tool_choice() {
    let with = |choice: Value| {
        let mut body = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 1024,
            "messages": [{"role": "user", "content": "What's the weather like in San Francisco?"}],
            "tools": [weather_tool(), {"type": "custom", "name": "now", "input_schema": {"type": "object"}}]
        });
        if !choice.is_null() {
            body["tool_choice"] = choice;
        }
        translate(body)
    };
    let out = with(Value::Null);
    assert_eq!(
        (out.get("tool_choice"), out.get("parallel_tool_calls")),
        (None, None)
    );
    assert_eq!(with(json!({"type": "auto"}))["tool_choice"], "auto");
    assert_eq!(with(json!({"type": "any"}))["tool_choice"], "required");
    assert_eq!(with(json!({"type": "none"}))["tool_choice"], "none");
    let out =
        with(json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}));
    assert_eq!(
        (
            out["tool_choice"].clone(),
            out["parallel_tool_calls"].clone()
        ),
        (
            json!({"type": "function", "function": {"name": "get_weather"}}),
            json!(false)
        )
    );
    let out = with(json!({"type": "auto", "disable_parallel_tool_use": false}));
    assert_eq!(out.get("parallel_tool_calls"), None);
    // Without tools, neither (Chat refuses them alone).
    let out = translate(json!({
        "model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}
    }));
    assert_eq!(
        (out.get("tool_choice"), out.get("parallel_tool_calls")),
        (None, None)
    );
}

#[test]
fn what_chat_cannot_carry_skips_the_entry() {
    let base = || {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
               "messages": [{"role": "user", "content": "x"}]})
    };
    let with = |key: &str, value: Value| {
        let mut body = base();
        body[key] = value;
        refused(body)
    };
    let f = Untranslatable::Field;
    assert_eq!(
        with("stop_sequences", json!(["a", "b", "c", "d", "e"])),
        f("stop_sequences")
    );
    assert_eq!(
        with(
            "mcp_servers",
            json!([{"type": "url", "url": "https://example-server.modelcontextprotocol.io/sse", "name": "example"}])
        ),
        f("mcp_servers")
    );
    assert_eq!(
        with("container", json!("container_011CPR5CNjB747bTd36fQLFk")),
        f("container")
    );
    assert_eq!(
        with(
            "tools",
            json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}])
        ),
        f("tools")
    );
    assert_eq!(
        with("tool_choice", json!({"type": "tool"})),
        f("tool_choice")
    );
    assert_eq!(
        with(
            "system",
            json!([{"type": "image", "source": {"type": "url", "url": "https://a/b.png"}}])
        ),
        f("system")
    );
    let messages = |m: Value| with("messages", m);
    let user = |block: Value| messages(json!([{"role": "user", "content": [block]}]));
    assert_eq!(
        user(
            json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}})
        ),
        f("document")
    );
    assert_eq!(
        user(
            json!({"type": "image", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}})
        ),
        f("image")
    );
    assert_eq!(
        user(
            json!({"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://a/b.png"}}]})
        ),
        f("tool_result.content")
    );
    assert_eq!(
        user(json!({"type": "search_result", "source": "https://a", "title": "t", "content": []})),
        f("messages.content")
    );
    assert_eq!(
        messages(json!([
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}]},
            {"role": "user", "content": "y"}
        ])),
        f("messages.content")
    );
    // A prefill: Messages continues the assistant's words, Chat would not.
    assert_eq!(
        messages(
            json!([{"role": "user", "content": "JSON please"}, {"role": "assistant", "content": "{"}])
        ),
        f("messages")
    );
    assert_eq!(
        messages(json!([{"role": "system", "content": "x"}])),
        f("messages.role")
    );
    assert_eq!(refused(json!("text")), Untranslatable::NotJson);
    assert_eq!(check(b"{"), Err(Untranslatable::NotJson));
}

#[test]
fn stop_reasons_and_refusals_in_the_answer() {
    let with = |message: Value, finish: &str| {
        answer(
            200,
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
                   "choices": [{"index": 0, "message": message, "finish_reason": finish}]}),
        )
    };
    let text = json!({"role": "assistant", "content": "One, two"});
    assert_eq!(with(text.clone(), "length")["stop_reason"], "max_tokens");
    assert_eq!(
        with(text.clone(), "content_filter")["stop_reason"],
        "refusal"
    );
    let out = with(
        json!({"role": "assistant", "content": null, "refusal": "I'm sorry, I cannot assist with that request."}),
        "stop",
    );
    assert_eq!(
        (out["content"].clone(), out["stop_reason"].clone()),
        (
            json!([{"type": "text", "text": "I'm sorry, I cannot assist with that request."}]),
            json!("refusal")
        )
    );
    // No usage reported: zeros, as Anthropic's answers always carry usage.
    assert_eq!(
        with(text, "stop")["usage"],
        json!({"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0})
    );
}

#[test]
fn errors_not_in_openais_shape_and_2xx_bodies_that_are_no_answer() {
    let out: Value = serde_json::from_slice(&response(502, b"upstream connect error")).unwrap();
    assert_eq!(
        out,
        json!({"type": "error", "error": {"type": "api_error",
               "message": "The provider answered 502: upstream connect error"}})
    );
    // A 2xx body that is no Chat completion: unreadable, the error to give instead.
    for not_an_answer in [&b"[]"[..], br#"{"hello": "world"}"#, b"", b"<html></html>"] {
        let error = translated(200, not_an_answer).expect_err("not an answer");
        let out: Value = serde_json::from_slice(&error).unwrap();
        assert_eq!(out["error"]["type"], "api_error");
    }
    assert!(translated(502, b"upstream connect error").is_ok());
}

#[test]
fn the_gateways_own_errors_in_anthropics_shape() {
    let out: Value = serde_json::from_slice(&anthropic_error(503, "Retry later.")).unwrap();
    assert_eq!(
        out,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Retry later."}})
    );
}
