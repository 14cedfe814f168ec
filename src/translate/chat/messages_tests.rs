//! The edges of a Chat caller on a Messages provider (Chat's reader, the Messages writer; the
//! Messages answer reader, Chat's answer writer): each tool choice, what Messages cannot carry,
//! stop reasons, errors of other shapes, a round trip. The reference payloads are fixtures
//! (src/translate/fixtures/chat-to-messages/, run by translate/fixtures.rs).

use serde_json::{json, Value};

use crate::translate::{Api, RequestContext, Untranslatable};

fn request(body: &[u8], cx: &RequestContext<'_>) -> core::result::Result<Vec<u8>, Untranslatable> {
    crate::translate::request(Api::OpenAiChat, Api::AnthropicMessages, body, cx)
}

fn check(body: &[u8]) -> core::result::Result<(), Untranslatable> {
    crate::translate::check(Api::OpenAiChat, Api::AnthropicMessages, body)
}

/// What the caller gets for the provider's answer: `Err` when a 2xx body is no answer.
fn translated(status: u16, body: &[u8], created: u64) -> core::result::Result<Vec<u8>, Vec<u8>> {
    let out = crate::translate::response(
        Api::AnthropicMessages,
        Api::OpenAiChat,
        status,
        body,
        created,
    );
    if out.unreadable {
        Err(out.body)
    } else {
        Ok(out.body)
    }
}

/// The body the caller gets, an answer or not (whether it is one: [`translated`]).
fn response(status: u16, body: &[u8], created: u64) -> Vec<u8> {
    translated(status, body, created).unwrap_or_else(|error| error)
}

fn openai_error(kind: &str, code: &str, message: &str) -> Vec<u8> {
    crate::translate::error_body(Api::OpenAiChat, 503, kind, code, message)
}

const CX: RequestContext<'static> = RequestContext {
    model: "claude-sonnet-4-5",
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
    serde_json::from_slice(&response(
        status,
        body.to_string().as_bytes(),
        1_764_565_200,
    ))
    .unwrap()
}

#[test]
fn a_temperature_above_one_a_lone_stop_and_numbers_as_written() {
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
fn each_tool_choice() {
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
fn errors_not_in_anthropics_shape_and_2xx_bodies_that_are_no_answer() {
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
        let error = translated(200, not_an_answer, 0).expect_err("not an answer");
        let out: Value = serde_json::from_slice(&error).unwrap();
        assert_eq!(out["error"]["type"], "api_error");
    }
    // Errors are translated, never unreadable.
    assert!(translated(503, b"<html></html>", 0).is_ok());
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
            let back = crate::translate::request(Api::AnthropicMessages, Api::OpenAiChat, &messages, &CX).unwrap();
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
    let out: Value = serde_json::from_slice(&translated(200, b"", 7).expect_err("empty")).unwrap();
    assert_eq!(out["error"]["type"], "api_error");
    // Escapes are kept as written where a string is copied, and joined texts escaped anew.
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"a \"q\"\n"},{"type":"text","text":"\u00e9\/"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2,"cache_read_input_tokens":null}}"#;
    let out: Value = serde_json::from_slice(&response(200, body, 7)).unwrap();
    assert_eq!(out["choices"][0]["message"]["content"], "a \"q\"\né/");
    assert_eq!(out["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}
