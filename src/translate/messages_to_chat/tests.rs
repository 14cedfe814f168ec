//! Payloads from the Anthropic Messages and OpenAI Chat Completions references, translated and
//! compared whole.

use serde_json::{json, Value};

use super::*;

/// The body the caller gets, an answer or not (whether it is one: [`super::response`]).
fn response(status: u16, body: &[u8]) -> Vec<u8> {
    super::response(status, body).unwrap_or_else(|error| error)
}

const CX: RequestContext<'static> = RequestContext {
    model: "gpt-4o",
    default_max_tokens: 4096,
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

#[test]
fn a_text_request_byte_for_byte() {
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Hello, world"}]}"#;
    assert_eq!(
        String::from_utf8(request(body, &CX).unwrap()).unwrap(),
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"Hello, world"}],"max_completion_tokens":1024}"#
    );
}

#[test]
fn system_sampling_stop_sequences_user_and_stream() {
    let out = translate(json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [
            {"type": "text", "text": "You are an AI assistant tasked with analyzing literary works."},
            {"type": "text", "text": "<the entire contents of Pride and Prejudice>",
             "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Analyze the major themes."}]}],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["\n\nHuman:", "END"],
        "metadata": {"user_id": "13803d75-b4b5-4c3e-b2a2-6f21399b021b"},
        "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "service_tier": "auto"
    }));
    assert_eq!(
        out,
        json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are an AI assistant tasked with analyzing literary works."},
                {"role": "system", "content": "<the entire contents of Pride and Prejudice>"},
                {"role": "user", "content": "Analyze the major themes."}
            ],
            "max_completion_tokens": 1024,
            "temperature": 0.5,
            "top_p": 0.9,
            "stop": ["\n\nHuman:", "END"],
            "user": "13803d75-b4b5-4c3e-b2a2-6f21399b021b",
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
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

#[test]
fn images_as_base64_and_url_sources() {
    let out = translate(json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}},
            {"type": "image", "source": {"type": "url", "url": "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg"}},
            {"type": "text", "text": "Describe these images."}
        ]}]
    }));
    assert_eq!(
        out["messages"],
        json!([{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQSkZJRg=="}},
            {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg"}},
            {"type": "text", "text": "Describe these images."}
        ]}])
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
fn tools_and_each_tool_choice() {
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
        out["tools"],
        json!([
            {"type": "function", "function": {
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
                    "required": ["location"]
                }
            }},
            {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
        ])
    );
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

/// Anthropic's tool use example, carried on: the assistant's text and call, the user's result
/// (text and blocks, an error among them) with more text, thinking along the way.
#[test]
fn a_full_tool_round_trip() {
    let out = translate(json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "tools": [weather_tool()],
        "messages": [
            {"role": "user", "content": "What's the weather like in San Francisco and Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Two cities: two calls.", "signature": "EqQBCgIYAhIM"},
                {"type": "text", "text": "I'll check both."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                 "input": {"location": "San Francisco, CA", "unit": "celsius"}},
                {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {"location": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"},
                {"type": "tool_result", "tool_use_id": "toolu_02", "is_error": true,
                 "content": [{"type": "text", "text": "Paris: "}, {"type": "text", "text": "station offline"}]},
                {"type": "text", "text": "Also, should I bring an umbrella?"}
            ]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_03", "name": "get_weather", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_03"}]}
        ]
    }));
    assert_eq!(
        out["messages"],
        json!([
            {"role": "user", "content": "What's the weather like in San Francisco and Paris?"},
            {"role": "assistant", "content": "I'll check both.", "tool_calls": [
                {"id": "toolu_01A09q90qw90lq917835lq9", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"location\":\"San Francisco, CA\",\"unit\":\"celsius\"}"}},
                {"id": "toolu_02", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"},
            {"role": "tool", "tool_call_id": "toolu_02", "content": [
                {"type": "text", "text": "Paris: "}, {"type": "text", "text": "station offline"}]},
            {"role": "user", "content": "Also, should I bring an umbrella?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "toolu_03", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "toolu_03", "content": ""}
        ])
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
fn a_text_answer_byte_for_byte() {
    let body = br#"{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I assist you today?","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default"}"#;
    assert_eq!(
        String::from_utf8(response(200, body)).unwrap(),
        r#"{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","type":"message","role":"assistant","model":"gpt-4.1-2025-04-14","content":[{"type":"text","text":"Hello! How can I assist you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":19,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":10}}"#
    );
}

#[test]
fn a_tool_calls_answer_with_cached_tokens() {
    let out = answer(
        200,
        json!({
            "id": "chatcmpl-abc123",
            "object": "chat.completion",
            "created": 1699896916,
            "model": "gpt-4o-mini",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [
                        {"id": "call_abc123", "type": "function",
                         "function": {"name": "get_current_weather", "arguments": "{\n\"location\": \"Boston, MA\"\n}"}},
                        {"id": "functions.now:1", "type": "function", "function": {"name": "now", "arguments": ""}},
                        {"id": "call_cut", "type": "function", "function": {"name": "now", "arguments": "{\"a\": "}}
                    ]
                },
                "logprobs": null,
                "finish_reason": "tool_calls"
            }],
            "usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                      "prompt_tokens_details": {"cached_tokens": 1920}}
        }),
    );
    assert_eq!(
        out,
        json!({
            "id": "chatcmpl-abc123",
            "type": "message",
            "role": "assistant",
            "model": "gpt-4o-mini",
            "content": [
                {"type": "tool_use", "id": "call_abc123", "name": "get_current_weather", "input": {"location": "Boston, MA"}},
                {"type": "tool_use", "id": "functions_now_1", "name": "now", "input": {}},
                {"type": "tool_use", "id": "call_cut", "name": "now", "input": {}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {"input_tokens": 86, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 1920, "output_tokens": 300}
        })
    );
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
fn errors_of_each_status_in_anthropics_shape() {
    for (status, kind) in [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "overloaded_error"),
    ] {
        let message = format!("Error {status} from OpenAI");
        let out = answer(
            status,
            json!({"error": {"message": message, "type": "requests", "param": null, "code": "x"}}),
        );
        assert_eq!(
            out,
            json!({"type": "error", "error": {"type": kind, "message": message}}),
            "{status}"
        );
    }
    let out: Value = serde_json::from_slice(&response(502, b"upstream connect error")).unwrap();
    assert_eq!(
        out,
        json!({"type": "error", "error": {"type": "api_error",
               "message": "The provider answered 502: upstream connect error"}})
    );
    // A 2xx body that is no Chat completion: unreadable, the error to give instead.
    for not_an_answer in [&b"[]"[..], br#"{"hello": "world"}"#, b"", b"<html></html>"] {
        let error = super::response(200, not_an_answer).expect_err("not an answer");
        let out: Value = serde_json::from_slice(&error).unwrap();
        assert_eq!(out["error"]["type"], "api_error");
    }
    assert!(super::response(502, b"upstream connect error").is_ok());
}

#[test]
fn the_gateways_own_errors_in_anthropics_shape() {
    let out: Value = serde_json::from_slice(&anthropic_error(503, "Retry later.")).unwrap();
    assert_eq!(
        out,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Retry later."}})
    );
}

/// What OpenAI-compatible servers send besides OpenAI's own answers (the upstream role passes
/// every 2xx body here once the attempt goes to the caller).
#[test]
fn answers_of_openai_compatible_servers() {
    // No choice at all (a filtered prompt), an empty tool_calls list, vLLM's reasoning text
    // and content parts.
    let out = answer(
        200,
        json!({"id": "cmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": []}),
    );
    assert_eq!(
        (out["content"].clone(), out["stop_reason"].clone()),
        (json!([]), json!("end_turn"))
    );
    let out = answer(
        200,
        json!({"id": "cmpl-2", "object": "chat.completion", "created": 1, "model": "qwen3",
               "choices": [{"index": 0, "finish_reason": "stop", "message": {
                   "role": "assistant", "content": "42", "reasoning_content": "think", "tool_calls": []}}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                         "prompt_tokens_details": null}}),
    );
    assert_eq!(out["content"], json!([{"type": "text", "text": "42"}]));
    assert_eq!(out["usage"]["input_tokens"], 5);
    let out = answer(
        200,
        json!({"id": "x", "model": "m", "choices": [{"finish_reason": "stop", "message": {
            "role": "assistant", "content": [{"type": "text", "text": "a\n"}, {"type": "text", "text": "b"}]}}]}),
    );
    assert_eq!(out["content"], json!([{"type": "text", "text": "a\nb"}]));
    // An empty 200 (the provider closed without a body) is an error in the caller's shape.
    let out: Value = serde_json::from_slice(&response(200, b"")).unwrap();
    assert_eq!(out["type"], "error");
}
