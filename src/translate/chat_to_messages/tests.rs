//! Payloads from the OpenAI Chat Completions and Anthropic Messages references, translated and
//! compared whole.

use serde_json::{json, Value};

use super::*;

/// The body the caller gets, an answer or not (whether it is one: [`super::response`]).
fn response(status: u16, body: &[u8], created: u64) -> Vec<u8> {
    super::response(status, body, created).unwrap_or_else(|error| error)
}

const CX: RequestContext<'static> = RequestContext {
    model: "claude-sonnet-4-5",
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
    serde_json::from_slice(&response(
        status,
        body.to_string().as_bytes(),
        1_764_565_200,
    ))
    .unwrap()
}

#[test]
fn a_developer_message_is_hoisted_into_system_byte_for_byte() {
    let body = br#"{"model":"gpt-4.1","messages":[{"role":"developer","content":"You are a helpful assistant."},{"role":"user","content":"Hello!"}]}"#;
    assert_eq!(
        String::from_utf8(request(body, &CX).unwrap()).unwrap(),
        r#"{"model":"claude-sonnet-4-5","max_tokens":4096,"system":[{"type":"text","text":"You are a helpful assistant."}],"messages":[{"role":"user","content":[{"type":"text","text":"Hello!"}]}]}"#
    );
}

#[test]
fn system_messages_anywhere_are_hoisted_in_order() {
    let out = translate(json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "system", "content": [{"type": "text", "text": "Now answer in French."}]},
            {"role": "user", "content": "Who are you?", "name": "ann"}
        ]
    }));
    assert_eq!(
        out,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 4096,
            "system": [
                {"type": "text", "text": "Be brief."},
                {"type": "text", "text": "Now answer in French."}
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
                {"role": "user", "content": [{"type": "text", "text": "Who are you?"}]}
            ]
        })
    );
}

#[test]
fn sampling_stop_sequences_limits_user_and_stream() {
    let out = translate(json!({
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "Count"}],
        "temperature": 0.7,
        "top_p": 0.95,
        "max_tokens": 100,
        "max_completion_tokens": 200,
        "stop": ["END", "", "\n\nHuman:"],
        "user": "user-1234",
        "stream": true,
        "stream_options": {"include_usage": true},
        "n": 1,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.1,
        "seed": 42,
        "logit_bias": {},
        "response_format": {"type": "text"},
        "store": false,
        "metadata": {"team": "a"},
        "service_tier": "auto",
        "reasoning_effort": "low"
    }));
    assert_eq!(
        out,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 200,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Count"}]}],
            "stop_sequences": ["END", "\n\nHuman:"],
            "temperature": 0.7,
            "top_p": 0.95,
            "metadata": {"user_id": "user-1234"},
            "stream": true
        })
    );
    // OpenAI's range is 0-2, Anthropic's 0-1: above 1 is sent as 1. A lone stop string.
    let out = translate(json!({
        "model": "gpt-4o", "messages": [{"role": "user", "content": "x"}],
        "temperature": 1.5, "max_tokens": 10, "stop": "END"
    }));
    assert_eq!(out["temperature"], json!(1));
    assert_eq!(out["max_tokens"], json!(10));
    assert_eq!(out["stop_sequences"], json!(["END"]));
    // Numbers pass through as written.
    let out = request(
        br#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1e-1,"top_p":1}"#,
        &CX,
    )
    .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains(r#""temperature":1e-1,"top_p":1"#), "{out}");
}

#[test]
fn multi_part_content_with_images_in_both_forms() {
    let out = translate(json!({
        "model": "gpt-4o",
        "messages": [{
            "role": "user",
            "content": [
                {"type": "text", "text": "What's in these images?"},
                {"type": "image_url", "image_url": {
                    "url": "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/Gfp-wisconsin-madison-the-nature-boardwalk.jpg/2560px-Gfp-wisconsin-madison-the-nature-boardwalk.jpg",
                    "detail": "high"
                }},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="}}
            ]
        }]
    }));
    assert_eq!(
        out["messages"],
        json!([{
            "role": "user",
            "content": [
                {"type": "text", "text": "What's in these images?"},
                {"type": "image", "source": {
                    "type": "url",
                    "url": "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/Gfp-wisconsin-madison-the-nature-boardwalk.jpg/2560px-Gfp-wisconsin-madison-the-nature-boardwalk.jpg"
                }},
                {"type": "image", "source": {
                    "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUg=="
                }}
            ]
        }])
    );
}

fn weather_tool() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                },
                "required": ["location"]
            },
            "strict": true
        }
    })
}

#[test]
fn tools_and_each_tool_choice() {
    let with = |choice: Value, parallel: Value| {
        let mut body = json!({
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "What's the weather like in Boston today?"}],
            "tools": [weather_tool(), {"type": "function", "function": {"name": "now"}}]
        });
        if !choice.is_null() {
            body["tool_choice"] = choice;
        }
        if !parallel.is_null() {
            body["parallel_tool_calls"] = parallel;
        }
        translate(body)
    };
    let out = with(json!("auto"), Value::Null);
    assert_eq!(
        out["tools"],
        json!([
            {
                "name": "get_current_weather",
                "description": "Get the current weather in a given location",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                    },
                    "required": ["location"]
                }
            },
            {"name": "now", "input_schema": {"type": "object", "properties": {}}}
        ])
    );
    assert_eq!(out["tool_choice"], json!({"type": "auto"}));
    assert_eq!(with(Value::Null, Value::Null).get("tool_choice"), None);
    assert_eq!(
        with(json!("none"), Value::Null)["tool_choice"],
        json!({"type": "none"})
    );
    assert_eq!(
        with(json!("required"), Value::Null)["tool_choice"],
        json!({"type": "any"})
    );
    assert_eq!(
        with(
            json!({"type": "function", "function": {"name": "now"}}),
            json!(false)
        )["tool_choice"],
        json!({"type": "tool", "name": "now", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        with(Value::Null, json!(false))["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        with(json!("none"), json!(false))["tool_choice"],
        json!({"type": "none"})
    );
    assert_eq!(
        with(json!("auto"), json!(true))["tool_choice"],
        json!({"type": "auto"})
    );
    // No tools, no tool_choice (Messages refuses one without the other).
    let out = translate(json!({
        "model": "gpt-4o", "messages": [{"role": "user", "content": "x"}],
        "tool_choice": "none", "parallel_tool_calls": false, "tools": []
    }));
    assert_eq!((out.get("tools"), out.get("tool_choice")), (None, None));
}

/// OpenAI's parallel function calling example: the assistant's calls, the tools' answers (one
/// `role: tool` message each) and the next user turn.
#[test]
fn a_full_tool_round_trip() {
    let out = translate(json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "What's the weather like in San Francisco, Tokyo, and Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_ujD1NwPxzeOSCbgw2NOabOin", "type": "function",
                 "function": {"name": "get_current_weather", "arguments": "{\"location\": \"San Francisco, CA\", \"unit\": \"celsius\"}"}},
                {"id": "call.tokyo:1", "type": "function",
                 "function": {"name": "get_current_weather", "arguments": "{\"location\":\"Tokyo\"}"}},
                {"id": "call_now", "type": "function", "function": {"name": "now", "arguments": ""}}
            ]},
            {"role": "tool", "tool_call_id": "call_ujD1NwPxzeOSCbgw2NOabOin", "content": "{\"temperature\": \"72\", \"unit\": \"fahrenheit\"}"},
            {"role": "tool", "tool_call_id": "call.tokyo:1", "content": [{"type": "text", "text": "10 celsius"}]},
            {"role": "tool", "tool_call_id": "call_now", "content": ""},
            {"role": "user", "content": "And in Paris?"}
        ],
        "tools": [weather_tool()]
    }));
    assert_eq!(
        out["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "What's the weather like in San Francisco, Tokyo, and Paris?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_ujD1NwPxzeOSCbgw2NOabOin", "name": "get_current_weather",
                 "input": {"location": "San Francisco, CA", "unit": "celsius"}},
                {"type": "tool_use", "id": "call_tokyo_1", "name": "get_current_weather", "input": {"location": "Tokyo"}},
                {"type": "tool_use", "id": "call_now", "name": "now", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_ujD1NwPxzeOSCbgw2NOabOin",
                 "content": "{\"temperature\": \"72\", \"unit\": \"fahrenheit\"}"},
                {"type": "tool_result", "tool_use_id": "call_tokyo_1", "content": [{"type": "text", "text": "10 celsius"}]},
                {"type": "tool_result", "tool_use_id": "call_now"},
                {"type": "text", "text": "And in Paris?"}
            ]}
        ])
    );
}

#[test]
fn an_assistant_turn_with_text_a_refusal_or_nothing() {
    let out = translate(json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
            {"role": "assistant", "content": null, "refusal": "I can't help with that."},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}, {"type": "text", "text": ""}]},
            {"role": "user", "content": "c"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "d"}
        ]
    }));
    assert_eq!(
        out["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_1", "name": "now", "input": {}}
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "noon"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "I can't help with that."}]},
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "No."}]},
            // The empty assistant turn is not sent: the users' turns around it become one.
            {"role": "user", "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]}
        ])
    );
}

#[test]
fn what_messages_cannot_carry_skips_the_entry() {
    let base = || json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]});
    let with = |key: &str, value: Value| {
        let mut body = base();
        body[key] = value;
        refused(body)
    };
    let f = Untranslatable::Field;
    assert_eq!(with("n", json!(2)), f("n"));
    assert_eq!(with("logprobs", json!(true)), f("logprobs"));
    assert_eq!(
        with("response_format", json!({"type": "json_object"})),
        f("response_format")
    );
    assert_eq!(
        with(
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {}}})
        ),
        f("response_format")
    );
    assert_eq!(
        with("audio", json!({"voice": "alloy", "format": "wav"})),
        f("audio")
    );
    assert_eq!(with("modalities", json!(["text", "audio"])), f("audio"));
    assert_eq!(with("logit_bias", json!({"50256": -100})), f("logit_bias"));
    assert_eq!(with("functions", json!([{"name": "a"}])), f("functions"));
    assert_eq!(
        with("web_search_options", json!({})),
        f("web_search_options")
    );
    assert_eq!(with("stop", json!("\n")), f("stop"));
    assert_eq!(with("stop", json!(["END", " \t"])), f("stop"));
    assert_eq!(
        with(
            "tools",
            json!([{"type": "custom", "custom": {"name": "grammar"}}])
        ),
        f("tools")
    );
    assert_eq!(
        with(
            "tool_choice",
            json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}})
        ),
        f("tool_choice")
    );
    assert_eq!(with("tool_choice", json!("sometimes")), f("tool_choice"));
    let message = |m: Value| {
        let mut body = base();
        body["messages"] = json!([m, {"role": "user", "content": "ok"}]);
        refused(body)
    };
    let part = |p: Value| message(json!({"role": "user", "content": [p]}));
    assert_eq!(
        part(json!({"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}})),
        f("input_audio")
    );
    assert_eq!(
        part(json!({"type": "file", "file": {"file_id": "file-abc"}})),
        f("file")
    );
    assert_eq!(
        part(json!({"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}})),
        f("image_url")
    );
    assert_eq!(
        part(json!({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}})),
        f("image_url")
    );
    assert_eq!(
        message(
            json!({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://a/b.png"}}]})
        ),
        f("messages.content")
    );
    assert_eq!(
        message(json!({"role": "function", "name": "f", "content": "1"})),
        f("messages.role")
    );
    assert_eq!(
        message(json!({"role": "tool", "content": "1"})),
        f("tool_call_id")
    );
    let call = |arguments: &str| {
        message(json!({"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]}))
    };
    assert_eq!(call("{\"a\": "), f("tool_calls.function.arguments"));
    assert_eq!(call("[1, 2]"), f("tool_calls.function.arguments"));
    assert_eq!(
        message(json!({"role": "assistant", "tool_calls": [
            {"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}]})),
        f("tool_calls")
    );
    // A last assistant turn: a prefill that Messages would continue.
    let mut prefill = base();
    prefill["messages"] =
        json!([{"role": "user", "content": "x"}, {"role": "assistant", "content": "{"}]);
    assert_eq!(refused(prefill), f("messages"));
    // System messages only: Messages needs a turn.
    let mut system_only = base();
    system_only["messages"] = json!([{"role": "system", "content": "Say hi."}]);
    assert_eq!(refused(system_only), f("messages"));
    assert_eq!(refused(json!([1, 2])), Untranslatable::NotJson);
    assert_eq!(request(b"{\"model\": ", &CX), Err(Untranslatable::NotJson));
    assert_eq!(check(b"not json"), Err(Untranslatable::NotJson));
}

#[test]
fn a_text_answer_byte_for_byte() {
    let body = br#"{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"output_tokens":503}}"#;
    assert_eq!(
        String::from_utf8(response(200, body, 1_764_565_200)).unwrap(),
        r#"{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","object":"chat.completion","created":1764565200,"model":"claude-sonnet-4-5-20250929","choices":[{"index":0,"message":{"role":"assistant","content":"Hi! My name is Claude."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":2095,"completion_tokens":503,"total_tokens":2598,"prompt_tokens_details":{"cached_tokens":0}}}"#
    );
}

#[test]
fn a_tool_use_answer_with_thinking_and_cache_tokens() {
    let out = answer(
        200,
        json!({
            "id": "msg_01Aq9w938a90dw8q",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [
                {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQBCgIYAhIM"},
                {"type": "text", "text": "I'll check the weather"},
                {"type": "text", "text": " in San Francisco."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                 "input": {"location": "San Francisco, CA", "unit": "celsius"}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {"input_tokens": 50, "cache_creation_input_tokens": 1000,
                      "cache_read_input_tokens": 2000, "output_tokens": 80,
                      "service_tier": "standard"}
        }),
    );
    assert_eq!(
        out,
        json!({
            "id": "msg_01Aq9w938a90dw8q",
            "object": "chat.completion",
            "created": 1_764_565_200,
            "model": "claude-sonnet-4-5-20250929",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "I'll check the weather in San Francisco.",
                    "tool_calls": [{
                        "id": "toolu_01A09q90qw90lq917835lq9",
                        "type": "function",
                        "function": {"name": "get_weather",
                                     "arguments": "{\"location\":\"San Francisco, CA\",\"unit\":\"celsius\"}"}
                    }]
                },
                "logprobs": null,
                "finish_reason": "tool_calls"
            }],
            "usage": {
                "prompt_tokens": 3050,
                "completion_tokens": 80,
                "total_tokens": 3130,
                "prompt_tokens_details": {"cached_tokens": 2000, "cache_creation_input_tokens": 1000}
            }
        })
    );
}

#[test]
fn stop_reasons_and_refusals_in_the_answer() {
    let with = |content: Value, stop_reason: &str| {
        answer(
            200,
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                   "content": content, "stop_reason": stop_reason, "stop_sequence": null,
                   "usage": {"input_tokens": 1, "output_tokens": 1}}),
        )["choices"][0]
            .clone()
    };
    let text = json!([{"type": "text", "text": "One, two"}]);
    assert_eq!(with(text.clone(), "max_tokens")["finish_reason"], "length");
    assert_eq!(with(text.clone(), "stop_sequence")["finish_reason"], "stop");
    let refusal = with(text, "refusal");
    assert_eq!(
        refusal,
        json!({"index": 0, "message": {"role": "assistant", "content": null, "refusal": "One, two"},
               "logprobs": null, "finish_reason": "content_filter"})
    );
    // An answer with nothing in it still has a string content.
    assert_eq!(
        with(json!([]), "end_turn")["message"],
        json!({"role": "assistant", "content": ""})
    );
}

#[test]
fn errors_of_each_status_in_openais_shape() {
    for (status, kind, message) in [
        (
            400,
            "invalid_request_error",
            "messages: text content blocks must be non-empty",
        ),
        (401, "authentication_error", "invalid x-api-key"),
        (
            403,
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
        ),
        (404, "not_found_error", "model: claude-nope"),
        (
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
        ),
        (
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        ),
        (500, "api_error", "Internal server error"),
        (529, "overloaded_error", "Overloaded"),
    ] {
        let out = answer(
            status,
            json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}),
        );
        assert_eq!(
            out,
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}}),
            "{status}"
        );
    }
    // Not JSON (a proxy's page), JSON of another shape, nothing: the type follows the status.
    let out: Value =
        serde_json::from_slice(&response(502, b"<html>Bad Gateway</html>", 0)).unwrap();
    assert_eq!(
        out,
        json!({"error": {"message": "The provider answered 502: <html>Bad Gateway</html>",
                         "type": "api_error", "param": null, "code": null}})
    );
    let out: Value = serde_json::from_slice(&response(429, br#"{"message":"slow"}"#, 0)).unwrap();
    assert_eq!(out["error"]["type"], "rate_limit_error");
    let out: Value = serde_json::from_slice(&response(503, b"", 0)).unwrap();
    assert_eq!(
        out["error"]["message"],
        "The provider answered 503 with no error message."
    );
    assert_eq!(out["error"]["type"], "overloaded_error");
    // A 2xx body that is no Messages answer: unreadable, the error to give instead.
    for not_an_answer in [
        &b"{}"[..],
        br#"{"hello": "world"}"#,
        b"[1]",
        b"<html></html>",
    ] {
        let error = super::response(200, not_an_answer, 0).expect_err("not an answer");
        let out: Value = serde_json::from_slice(&error).unwrap();
        assert_eq!(out["error"]["type"], "api_error");
    }
    // Errors are translated, never unreadable.
    assert!(super::response(503, b"<html></html>", 0).is_ok());
}

#[test]
fn the_gateways_own_errors_in_openais_shape() {
    let out: Value = serde_json::from_slice(&openai_error(
        "service_unavailable",
        "circuit_open",
        "Retry later.",
    ))
    .unwrap();
    assert_eq!(
        out,
        json!({"error": {"message": "Retry later.", "type": "service_unavailable", "param": null, "code": "circuit_open"}})
    );
}

/// Chat -> Messages -> Chat keeps the conversation: the same messages (system messages first,
/// as Messages hoists them), tools, tool choice and parameters.
#[cfg(not(target_arch = "wasm32"))]
mod round_trip {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9 .,!?\"\\\\\n\u{e9}\u{1F600}]{0,16}[a-zA-Z\u{e9}]"
    }

    fn arguments() -> impl Strategy<Value = String> {
        proptest::collection::btree_map("[a-z]{1,6}", any::<i32>(), 0..3).prop_map(|m| {
            if m.is_empty() {
                "{}".to_owned()
            } else {
                serde_json::to_string(&m).unwrap()
            }
        })
    }

    /// One exchange: the user's text, the assistant's text and/or tool calls, the tools'
    /// results.
    fn exchange() -> impl Strategy<Value = Vec<Value>> {
        (
            text(),
            proptest::option::of(text()),
            proptest::collection::vec(("[a-zA-Z0-9_-]{1,10}", arguments(), text()), 0..3),
        )
            .prop_filter(
                "an assistant turn says or calls something",
                |(_, said, calls)| said.is_some() || !calls.is_empty(),
            )
            .prop_map(|(user, said, calls)| {
                let mut out = vec![json!({"role": "user", "content": user})];
                let mut assistant = json!({"role": "assistant", "content": said});
                if !calls.is_empty() {
                    assistant["tool_calls"] = calls
                        .iter()
                        .map(|(id, args, _)| {
                            json!({"id": id, "type": "function",
                                   "function": {"name": "lookup", "arguments": args}})
                        })
                        .collect();
                }
                out.push(assistant);
                for (id, _, result) in &calls {
                    out.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
                }
                out
            })
    }

    fn conversation() -> impl Strategy<Value = Vec<Value>> {
        (
            proptest::collection::vec(text(), 0..3),
            proptest::collection::vec(exchange(), 1..4),
            proptest::option::of(text()),
        )
            .prop_map(|(system, exchanges, last)| {
                let mut out: Vec<Value> = system
                    .into_iter()
                    .map(|s| json!({"role": "system", "content": s}))
                    .collect();
                out.extend(exchanges.into_iter().flatten());
                // A conversation ends with the user or the tools (a last assistant turn is a
                // prefill to Messages: refused).
                let assistant_last = out.last().is_some_and(|m| m["role"] == "assistant");
                if let Some(last) = last.filter(|_| assistant_last) {
                    out.push(json!({"role": "user", "content": last}));
                } else if assistant_last {
                    out.push(json!({"role": "user", "content": "go on"}));
                }
                out
            })
    }

    fn choice() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            Just(json!("auto")),
            Just(json!("none")),
            Just(json!("required")),
            Just(json!({"type": "function", "function": {"name": "lookup"}})),
        ]
    }

    proptest! {
        #[test]
        fn chat_to_messages_to_chat_keeps_the_conversation(
            messages in conversation(),
            choice in choice(),
            serial in any::<bool>(),
            stream in any::<bool>(),
            stop in proptest::collection::vec("[a-zA-Z]{1,5}", 0..4),
            temperature in 0u8..=10,
        ) {
            let mut chat = json!({
                "model": "claude-sonnet-4-5",
                "messages": messages,
                "max_completion_tokens": 300,
                "temperature": f64::from(temperature) / 10.0,
                "top_p": 0.5,
                "user": "u-1",
                "stream": stream,
                "tools": [{"type": "function", "function": {
                    "name": "lookup", "description": "Looks up.",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
            });
            if !choice.is_null() {
                chat["tool_choice"] = choice.clone();
            }
            if serial {
                chat["parallel_tool_calls"] = json!(false);
            }
            if !stop.is_empty() {
                chat["stop"] = json!(stop);
            }
            if stream {
                chat["stream_options"] = json!({"include_usage": true});
            }
            let body = chat.to_string();
            let messages = request(body.as_bytes(), &CX).unwrap();
            let back = crate::translate::messages_to_chat::request(&messages, &CX).unwrap();
            let back: Value = serde_json::from_slice(&back).unwrap();
            // A parallel_tool_calls: false with tool_choice none says nothing; without a
            // tool_choice it comes back with the default one, auto.
            if serial && choice == json!("none") {
                chat.as_object_mut().unwrap().remove("parallel_tool_calls");
            }
            if serial && choice.is_null() {
                chat["tool_choice"] = json!("auto");
            }
            prop_assert_eq!(back, chat);
        }
    }
}

#[test]
fn an_empty_or_escaped_answer() {
    let out: Value =
        serde_json::from_slice(&super::response(200, b"", 7).expect_err("empty")).unwrap();
    assert_eq!(out["error"]["type"], "api_error");
    // Escapes are kept as written where a string is copied, and joined texts escaped anew.
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"a \"q\"\n"},{"type":"text","text":"\u00e9\/"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2,"cache_read_input_tokens":null}}"#;
    let out: Value = serde_json::from_slice(&response(200, body, 7)).unwrap();
    assert_eq!(out["choices"][0]["message"]["content"], "a \"q\"\né/");
    assert_eq!(out["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}
