//! Edge cases of the Gemini provider dialect (its reference exchanges are fixtures:
//! src/translate/fixtures/chat-to-gemini/ and responses-to-gemini/, run by translate::fixtures).

use crate::translate::{self, Api, StreamContext, StreamTranslator};

const STREAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/translate/fixtures/chat-to-gemini/tool-call-stream/stream.sse"
);

fn fixture_stream() -> String {
    std::fs::read_to_string(STREAM).unwrap()
}

#[test]
fn a_messages_caller_is_translated_to_gemini() {
    let body = br#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(
        translate::check(Api::AnthropicMessages, Api::Gemini, body),
        Ok(())
    );
    let cx = translate::RequestContext {
        model: "gemini-2.5-flash",
        default_max_tokens: 4096,
        stream: false,
    };
    let out = translate::request(Api::AnthropicMessages, Api::Gemini, body, &cx).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":5}}"#
    );
}

#[test]
fn stops_usage_and_blocked_prompts() {
    let chat = |body: &str| {
        let out = translate::response(Api::Gemini, Api::OpenAiChat, 200, body.as_bytes(), 0);
        serde_json::from_slice::<serde_json::Value>(&out.body).unwrap()
    };
    let v = chat(
        r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":2}}"#,
    );
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["message"]["content"], "Hi");
    assert_eq!(v["usage"]["prompt_tokens"], 7);
    assert_eq!(v["usage"]["completion_tokens"], 2);
    let v = chat(r#"{"candidates":[{"finishReason":"SAFETY","index":0}]}"#);
    assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
    // The prompt itself was blocked: no candidates at all.
    let v = chat(
        r#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":9}}"#,
    );
    assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        serde_json::Value::Null
    );
}

#[test]
fn a_2xx_that_is_no_gemini_answer_is_unreadable() {
    for body in [
        &b"<html>ok</html>"[..],
        br#"{"choices":[]}"#,
        br#"{"error":{"code":500}}"#,
    ] {
        let out = translate::response(Api::Gemini, Api::OpenAiChat, 200, body, 0);
        assert!(out.unreadable, "{}", String::from_utf8_lossy(body));
        let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(v["error"]["type"], "api_error");
    }
}

#[test]
fn googles_error_is_the_callers_error() {
    let body = br#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
    let out = translate::response(Api::Gemini, Api::OpenAiChat, 429, body, 0);
    assert!(!out.unreadable);
    let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(
        v["error"]["message"],
        "Resource has been exhausted (e.g. check quota)."
    );
}

fn stream_to(caller: Api, chunks: &[&[u8]]) -> Vec<u8> {
    let cx = StreamContext {
        created: 1741476542,
        include_usage: true,
    };
    let mut t = StreamTranslator::new(Api::Gemini, caller, cx).unwrap();
    let mut out = Vec::new();
    for (k, chunk) in chunks.iter().enumerate() {
        t.push(chunk, k + 1 == chunks.len(), &mut out);
    }
    out
}

#[test]
fn a_stream_cut_short_or_failing_ends_with_an_error_chunk() {
    let stream = fixture_stream();
    let cut = stream.split("\r\n\r\n").next().unwrap();
    let out = String::from_utf8(stream_to(Api::OpenAiChat, &[cut.as_bytes()])).unwrap();
    assert!(!out.contains("[DONE]"), "{out}");
    assert!(
        out.trim_end().ends_with("}}") && out.contains(r#"{"error":"#),
        "{out}"
    );
    let failing = format!(
        "{cut}\r\n\r\ndata: {}\r\n\r\n",
        r#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#
    );
    let out = String::from_utf8(stream_to(Api::OpenAiChat, &[failing.as_bytes()])).unwrap();
    assert!(out.contains("The model is overloaded."), "{out}");
    assert!(!out.contains("[DONE]"));
    let out = String::from_utf8(stream_to(Api::OpenAiResponses, &[failing.as_bytes()])).unwrap();
    assert!(out.contains("event: error"), "{out}");
}

#[test]
fn a_stream_error_has_the_type_its_google_status_names() {
    // Gemini may open a 200 stream with its error (`RESOURCE_EXHAUSTED` and the others): the
    // caller's error event has the type of that status, not `api_error`.
    for (status, code, kind) in [
        ("RESOURCE_EXHAUSTED", 429, "rate_limit_error"),
        ("UNAVAILABLE", 503, "overloaded_error"),
        ("INVALID_ARGUMENT", 400, "invalid_request_error"),
        ("INTERNAL", 500, "api_error"),
    ] {
        let error = format!(
            r#"data: {{"error":{{"code":{code},"message":"Gemini says no.","status":"{status}"}}}}"#
        );
        let error = format!("{error}\r\n\r\n");
        let chat = String::from_utf8(stream_to(Api::OpenAiChat, &[error.as_bytes()])).unwrap();
        let data = chat.trim().strip_prefix("data: ").unwrap();
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["error"]["type"], kind, "{chat}");
        assert_eq!(v["error"]["message"], "Gemini says no.");
        let messages = String::from_utf8(stream_to(Api::AnthropicMessages, &[error.as_bytes()]));
        let messages = messages.unwrap();
        let want = format!(r#""error":{{"type":"{kind}","message":"Gemini says no."}}"#);
        assert!(messages.contains(&want), "{messages}");
        let responses = stream_to(Api::OpenAiResponses, &[error.as_bytes()]);
        let responses = String::from_utf8(responses).unwrap();
        assert!(
            responses.contains(&format!(r#""code":"{kind}""#)),
            "{responses}"
        );
    }
    let e = crate::translate::common::provider_error(
        br#"{"error":{"code":429,"message":"m","status":"RESOURCE_EXHAUSTED"}}"#,
    );
    assert_eq!(e.unwrap().kind.as_deref(), Some("rate_limit_error"));
    // Not Google's shape (no `status`, or no `code`): no type.
    for body in [
        &br#"{"error":{"message":"m","status":"X"}}"#[..],
        br#"{"error":{"message":"m","code":429}}"#,
    ] {
        assert_eq!(
            crate::translate::common::provider_error(body).unwrap().kind,
            None
        );
    }
}

#[test]
fn its_chunks_are_events_of_its_stream() {
    let stream = fixture_stream();
    let first = stream.split("\r\n\r\n").next().unwrap();
    let data = first.strip_prefix("data: ").unwrap().as_bytes();
    assert!(translate::is_stream_event(Api::Gemini, b"", data));
    assert!(translate::is_stream_event(
        Api::Gemini,
        b"",
        br#"{"error":{"code":429}}"#
    ));
    assert!(!translate::is_stream_event(
        Api::Gemini,
        b"",
        br#"{"choices":[]}"#
    ));
    assert!(!translate::is_stream_event(Api::Gemini, b"", b"[DONE]"));
}

#[test]
fn a_gemini_stream_gathers_into_one_answer() {
    // A request that did not ask for a stream, under a first-token timeout.
    let stream = fixture_stream();
    let whole = translate::assemble::stream_to_answer(
        Api::Gemini,
        Api::OpenAiChat,
        &[stream.as_bytes()],
        0,
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&whole).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Let me check the weather in \"Paris\"."
    );
    let arguments = &v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"];
    let arguments: serde_json::Value = serde_json::from_str(arguments.as_str().unwrap()).unwrap();
    assert_eq!(arguments["location"], "Paris, France");
    assert_eq!(v["usage"]["completion_tokens"], 40);
}

#[test]
fn the_path_names_the_model_and_the_stream() {
    use crate::translate::gemini::path_model;
    let p = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    assert_eq!(path_model(p), Some(("gemini-2.5-flash", true)));
    assert_eq!(
        path_model("/v1/models/gemini-2.5-pro:generateContent"),
        Some(("gemini-2.5-pro", false))
    );
    for not in [
        "/v1beta/models/gemini-2.5-flash:countTokens",
        "/v1beta/models:generateContent",
        "/v1/chat/completions",
        "/v1beta/models/a/b:generateContent",
    ] {
        assert_eq!(path_model(not), None, "{not}");
    }
    assert_eq!(Api::of_path(p), Some(Api::Gemini));
}

#[test]
fn a_gemini_caller_gets_googles_error_shape() {
    let v = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
    let e = v(&translate::error_body(
        Api::Gemini,
        503,
        "x",
        "all_providers_open",
        "busy",
    ));
    assert_eq!(e["error"]["code"], 503);
    assert_eq!(e["error"]["status"], "UNAVAILABLE");
    assert_eq!(e["error"]["message"], "busy");
    assert_eq!(e["error"]["details"][0]["reason"], "all_providers_open");
    let body = br#"{"error":{"message":"Rate limited","type":"requests"}}"#;
    let out = translate::response(Api::OpenAiChat, Api::Gemini, 429, body, 0);
    let e = v(&out.body);
    assert_eq!(
        (e["error"]["code"].as_u64(), e["error"]["status"].as_str()),
        (Some(429), Some("RESOURCE_EXHAUSTED"))
    );
    assert!(translate::response(Api::OpenAiChat, Api::Gemini, 200, b"<html>", 0).unreadable);
}

#[test]
fn what_another_vendor_cannot_carry_is_refused() {
    let turn = r#""contents":[{"role":"user","parts":[{"text":"hi"}]}]"#;
    for (extra, why) in [
        (r#","cachedContent":"cachedContents/1""#, "cachedContent"),
        (
            r#","generationConfig":{"candidateCount":2}"#,
            "generationConfig.candidateCount",
        ),
        (
            r#","generationConfig":{"responseMimeType":"application/json"}"#,
            "generationConfig.responseMimeType",
        ),
        (r#","tools":[{"googleSearch":{}}]"#, "tools"),
    ] {
        let body = format!("{{{turn}{extra}}}");
        assert_eq!(
            translate::check(Api::Gemini, Api::OpenAiChat, body.as_bytes()),
            Err(translate::Untranslatable::Field(why)),
            "{body}"
        );
    }
    // A last model turn would be continued, not answered.
    let prefill = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"Hel"}]}]}"#;
    assert!(translate::check(Api::Gemini, Api::AnthropicMessages, prefill).is_err());
    let ok =
        format!(r#"{{{turn},"safetySettings":[],"generationConfig":{{"thinkingConfig":{{}}}}}}"#);
    assert_eq!(
        translate::check(Api::Gemini, Api::OpenAiChat, ok.as_bytes()),
        Ok(())
    );
}

#[test]
fn a_stream_cut_short_ends_with_googles_error_chunk() {
    let chat = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let mut t =
        StreamTranslator::new(Api::OpenAiChat, Api::Gemini, StreamContext::default()).unwrap();
    let mut out = Vec::new();
    t.push(chat.as_bytes(), true, &mut out);
    let out = String::from_utf8(out).unwrap();
    let last = out.trim_end().rsplit("\r\n\r\n").next().unwrap();
    assert!(last.starts_with(r#"data: {"error":{"code":502"#), "{out}");
    assert!(!t.finished());
}

#[test]
fn a_google_genai_callers_snake_case_media_members_are_read() {
    // google-genai writes `mime_type` and `file_uri` inside `inlineData` and `fileData`.
    let body = br#"{"contents":[{"role":"user","parts":[{"text":"what is this"},
        {"inlineData":{"data":"iVBORw==","mime_type":"image/png"}},
        {"fileData":{"file_uri":"https://x/y.png","mime_type":"image/png"}}]}]}"#;
    let cx = translate::RequestContext {
        model: "gpt-4o",
        default_max_tokens: 4096,
        stream: false,
    };
    let out = translate::request(Api::Gemini, Api::OpenAiChat, body, &cx).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains(r#""url":"data:image/png;base64,iVBORw==""#),
        "{out}"
    );
    assert!(out.contains(r#""url":"https://x/y.png""#), "{out}");
}

/// A Chat request translated to Gemini, as JSON.
fn chat_to_gemini(chat: &serde_json::Value) -> serde_json::Value {
    let cx = translate::RequestContext {
        model: "gemini-3-pro",
        default_max_tokens: 4096,
        stream: false,
    };
    let body = translate::request(
        Api::OpenAiChat,
        Api::Gemini,
        chat.to_string().as_bytes(),
        &cx,
    );
    serde_json::from_slice(&body.unwrap()).unwrap()
}

#[test]
fn a_calls_thought_signature_travels_in_its_id_and_goes_back_on_it() {
    // Gemini 3 signs its calls and wants the signature back on them: the caller's id carries it
    // (base64url, unpadded), and the call sent back to Gemini has it as its thoughtSignature.
    let answer = br#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"Ci4B/0e+Kb6="}]},"finishReason":"STOP"}],"responseId":"r1"}"#;
    let out = translate::response(Api::Gemini, Api::OpenAiChat, 200, answer, 1).body;
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let id = v["choices"][0]["message"]["tool_calls"][0]["id"]
        .as_str()
        .unwrap();
    assert_eq!(id, "call_r1_0__thought__Ci4B_0e-Kb6");
    let chat = serde_json::json!({"model": "m", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": id, "content": "ok"}]});
    let v = chat_to_gemini(&chat);
    assert_eq!(
        v["contents"][1]["parts"][0]["thoughtSignature"],
        "Ci4B_0e-Kb6"
    );
    assert_eq!(
        v["contents"][2]["parts"][0]["functionResponse"]["name"],
        "f"
    );
}

#[test]
fn a_steps_first_call_without_a_signature_gets_googles_placeholder() {
    // Gemini 3 refuses a step of the current turn whose first functionCall part has no
    // signature: another vendor's calls get the placeholder Google documents, on each step's
    // first call only; a signed call keeps its own signature.
    let chat = serde_json::json!({"model": "m", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "1"},
        {"role": "tool", "tool_call_id": "call_b", "content": "2"},
        {"role": "assistant", "tool_calls": [{"id": "c__thought__Ci4B", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c__thought__Ci4B", "content": "3"}]});
    let v = chat_to_gemini(&chat);
    let signatures = |turn: usize| -> Vec<serde_json::Value> {
        let parts = v["contents"][turn]["parts"].as_array().unwrap();
        parts
            .iter()
            .map(|p| p["thoughtSignature"].clone())
            .collect()
    };
    let placeholder = serde_json::json!("skip_thought_signature_validator");
    assert_eq!(
        signatures(1),
        [placeholder.clone(), serde_json::Value::Null]
    );
    assert_eq!(signatures(3), [serde_json::json!("Ci4B")]);
    // A google-genai app's answer from another vendor: its first call has the placeholder, so
    // the app's history can go back to Gemini 3 as it is.
    let answer = br#"{"id":"c1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    let out = translate::response(Api::OpenAiChat, Api::Gemini, 200, answer, 1).body;
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let parts = v["candidates"][0]["content"]["parts"].as_array().unwrap();
    assert_eq!(parts[0]["thoughtSignature"], placeholder);
    assert_eq!(parts[1].get("thoughtSignature"), None);
}

#[test]
fn a_signed_call_id_reaches_other_vendors_without_its_signature() {
    // OpenAI takes at most 40 characters in a call id (64 in Responses), Anthropic 64: the
    // signature a Gemini call's id carries is left out, the same on the call and its result.
    let chat = serde_json::json!({"model": "m", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "call_r1_0__thought__Ci4B_0e-Kb6",
            "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_r1_0__thought__Ci4B_0e-Kb6", "content": "ok"}]});
    let messages = serde_json::json!({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use",
            "id": "call_r1_0__thought__Ci4B_0e-Kb6", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": "call_r1_0__thought__Ci4B_0e-Kb6", "content": "ok"}]}]});
    let cx = translate::RequestContext {
        model: "m",
        default_max_tokens: 4096,
        stream: false,
    };
    let pairs = [
        (Api::OpenAiChat, &chat, Api::AnthropicMessages, 2),
        (Api::OpenAiChat, &chat, Api::OpenAiResponses, 2),
        (Api::AnthropicMessages, &messages, Api::OpenAiChat, 2),
    ];
    for (caller, body, provider, ids) in pairs {
        let out = translate::request(caller, provider, body.to_string().as_bytes(), &cx).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            !out.contains("__thought__"),
            "{caller:?} to {provider:?}: {out}"
        );
        assert_eq!(out.matches(r#""call_r1_0""#).count(), ids, "{out}");
    }
}

#[test]
fn a_gemini_callers_errors_have_every_status_googles_body_carries() {
    // One table for a Gemini caller's errors: an error answer's status names its Google
    // status, and a provider's stream error (another dialect's error type) gets the status and
    // name of that type, the same as the answer would.
    let v = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
    for (code, status, kind) in [
        (400, "INVALID_ARGUMENT", "invalid_request_error"),
        (401, "UNAUTHENTICATED", "authentication_error"),
        (403, "PERMISSION_DENIED", "permission_error"),
        (404, "NOT_FOUND", "not_found_error"),
        (429, "RESOURCE_EXHAUSTED", "rate_limit_error"),
        (500, "INTERNAL", "api_error"),
        (503, "UNAVAILABLE", "overloaded_error"),
        (504, "DEADLINE_EXCEEDED", "timeout_error"),
    ] {
        let body = format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"no"}}}}"#);
        let e = v(&translate::response(
            Api::AnthropicMessages,
            Api::Gemini,
            code,
            body.as_bytes(),
            0,
        )
        .body);
        assert_eq!(
            (e["error"]["code"].as_u64(), e["error"]["status"].as_str()),
            (Some(code.into()), Some(status))
        );
        let event = format!("event: error\ndata: {body}\n\n");
        let mut t = StreamTranslator::new(
            Api::AnthropicMessages,
            Api::Gemini,
            StreamContext::default(),
        )
        .unwrap();
        let mut out = Vec::new();
        t.push(event.as_bytes(), true, &mut out);
        let out = String::from_utf8(out).unwrap();
        let e = v(out.trim().strip_prefix("data: ").unwrap().as_bytes());
        assert_eq!(
            (e["error"]["code"].as_u64(), e["error"]["status"].as_str()),
            (Some(code.into()), Some(status)),
            "{kind}: {out}"
        );
        assert_eq!(e["error"]["message"], "no");
    }
    // The table's error types are the ones the other dialects give each status.
    for (status, _, kind) in &super::STATUSES {
        assert_eq!(crate::translate::common::error_type(*status), *kind);
    }
    // OpenAI's words for a rate limit, and an error type no table names.
    for (kind, code) in [
        ("rate_limit_exceeded", 429),
        ("server_error", 500),
        ("odd", 500),
    ] {
        let chunk = format!(r#"data: {{"error":{{"message":"no","type":"{kind}"}}}}"#);
        let mut t =
            StreamTranslator::new(Api::OpenAiChat, Api::Gemini, StreamContext::default()).unwrap();
        let mut out = Vec::new();
        t.push(format!("{chunk}\n\n").as_bytes(), true, &mut out);
        let out = String::from_utf8(out).unwrap();
        let e = v(out.trim().strip_prefix("data: ").unwrap().as_bytes());
        assert_eq!(e["error"]["code"], code, "{kind}: {out}");
    }
}

#[test]
fn a_same_api_body_loses_its_call_ids_signatures_and_nothing_else() {
    use crate::translate::gemini::unsign_ids;
    let unsign = |body: &str| unsign_ids(body.as_bytes()).map(|b| String::from_utf8(b).unwrap());
    // Messages: the tool_use block's id and its result's; a text and a name that carry the
    // marker stay as they are, and so does an "id" inside a string.
    assert_eq!(
        unsign(concat!(
            r#"{"messages":[{"role":"assistant","content":[{"type":"text","text":"x__thought__y"},"#,
            r#"{"type":"tool_use","id":"call_1__thought__Ci4B","name":"n__thought__","input":{"q":"s\"id\":\"q__thought__"}}]},"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1__thought__Ci4B","content":"ok"}]}]}"#
        ))
        .as_deref(),
        Some(concat!(
            r#"{"messages":[{"role":"assistant","content":[{"type":"text","text":"x__thought__y"},"#,
            r#"{"type":"tool_use","id":"call_1","name":"n__thought__","input":{"q":"s\"id\":\"q__thought__"}}]},"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"ok"}]}]}"#
        ))
    );
    // Responses: the function_call's call_id and its output's; an id that is not a string and
    // an id without the marker are kept.
    assert_eq!(
        unsign(concat!(
            r#"{"input":[{"type":"function_call","id":"fc_1","call_id":"c__thought__AB-_","name":"f","arguments":"{}"},"#,
            r#"{"type":"function_call_output","call_id":"c__thought__AB-_","output":"3","x":{"id":7}}]}"#
        ))
        .as_deref(),
        Some(concat!(
            r#"{"input":[{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}"},"#,
            r#"{"type":"function_call_output","call_id":"c","output":"3","x":{"id":7}}]}"#
        ))
    );
    // Nothing signed: no copy.
    assert_eq!(
        unsign(r#"{"messages":[{"content":"a__thought__b"}]}"#),
        None
    );
    assert_eq!(unsign(r#"{"messages":[]}"#), None);
}

#[test]
fn the_placeholder_goes_only_on_the_current_turns_steps_of_a_model_that_checks() {
    use crate::translate::gemini::checks_signatures;
    // Gemini 3 and later check (Google's page names Gemini 4 too); 1.x and 2.x never did;
    // an alias or a name of neither counts as checked.
    for model in [
        "gemini-3-pro-preview",
        "gemini-3-flash",
        "gemini-4-pro",
        "gemini-flash-latest",
    ] {
        assert!(checks_signatures(model), "{model}");
    }
    for model in ["gemini-2.5-flash", "gemini-2.0-flash", "gemini-1.5-pro"] {
        assert!(!checks_signatures(model), "{model}");
    }
    // A Messages app: its first turn's call (another vendor's) is answered with the user's
    // next text in the same message, which starts the current turn; then one step.
    let messages = serde_json::json!({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
            "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
            "content": "1"}, {"type": "text", "text": "and now?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "sure"},
            {"type": "tool_use", "id": "t2", "name": "f", "input": {}},
            {"type": "tool_use", "id": "t3", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
            "content": "2"}, {"type": "tool_result", "tool_use_id": "t3", "content": "3"}]}]});
    let sent = |model| {
        let cx = translate::RequestContext {
            model,
            default_max_tokens: 4096,
            stream: false,
        };
        let body = messages.to_string();
        let out = translate::request(Api::AnthropicMessages, Api::Gemini, body.as_bytes(), &cx);
        let v: serde_json::Value = serde_json::from_slice(&out.unwrap()).unwrap();
        let turns = v["contents"].as_array().unwrap().clone();
        turns
            .iter()
            .map(|t| {
                let parts = t["parts"].as_array().unwrap();
                parts
                    .iter()
                    .map(|p| p["thoughtSignature"].clone())
                    .collect()
            })
            .collect::<Vec<Vec<serde_json::Value>>>()
    };
    let (none, placeholder) = (
        serde_json::Value::Null,
        serde_json::json!("skip_thought_signature_validator"),
    );
    assert_eq!(
        sent("gemini-3-pro-preview"),
        [
            vec![none.clone()],
            vec![none.clone()],
            vec![none.clone(), none.clone()],
            vec![none.clone(), placeholder, none.clone()],
            vec![none.clone(), none.clone()],
        ]
    );
    // Gemini 2.5 checks nothing: no placeholder anywhere.
    assert!(sent("gemini-2.5-flash")
        .iter()
        .flatten()
        .all(|s| s.is_null()));
}
