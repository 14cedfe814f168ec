//! The Responses translations' edges: what cannot be carried, stop reasons, errors, streams cut
//! short, and what the reference streams' events mean. The reference payloads themselves are
//! fixtures (src/translate/fixtures/responses-to-*/, held byte for byte and fed in every
//! chunking by translate/fixtures.rs).

use super::*;
use crate::translate::{self, messages, Api, RequestContext, StreamTranslator};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/translate/fixtures/");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}{name}")).unwrap()
}

fn compact(json: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::from_str::<serde_json::Value>(json).unwrap()).unwrap()
}

#[test]
fn what_another_vendor_cannot_carry_is_refused() {
    let refused = |body: &str| {
        translate::check(
            Api::OpenAiResponses,
            Api::AnthropicMessages,
            body.as_bytes(),
        )
        .err()
    };
    let f = |name| Some(Untranslatable::Field(name));
    assert_eq!(
        refused(r#"{"input":"hi","previous_response_id":"resp_1"}"#),
        f("previous_response_id")
    );
    assert_eq!(
        refused(r#"{"input":"hi","conversation":"conv_1"}"#),
        f("conversation")
    );
    assert_eq!(
        refused(r#"{"input":"hi","background":true}"#),
        f("background")
    );
    assert_eq!(
        refused(r#"{"input":"hi","tools":[{"type":"web_search"}]}"#),
        f("tools")
    );
    assert_eq!(
        refused(
            r#"{"input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{}}}}"#
        ),
        f("text.format")
    );
    assert_eq!(
        refused(r#"{"input":[{"type":"item_reference","id":"msg_1"}]}"#),
        f("input.item_reference")
    );
    assert_eq!(
        refused(
            r#"{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}"#
        ),
        f("input_file")
    );
    assert_eq!(
        refused(
            r#"{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}"#
        ),
        f("file_id")
    );
    // A last assistant turn would be continued by Messages, answered after by Responses.
    assert_eq!(
        refused(r#"{"input":[{"role":"assistant","content":"Hi"}]}"#),
        f("input")
    );
    assert_eq!(refused(r#"{"input":""}"#), f("input"));
    assert_eq!(refused("[1]"), Some(Untranslatable::NotJson));
    // Harmless members are dropped, not refused.
    assert_eq!(
        refused(
            r#"{"input":"hi","store":true,"previous_response_id":null,"text":{"format":{"type":"text"}},"include":["reasoning.encrypted_content"]}"#
        ),
        None
    );
}

#[test]
fn a_2xx_that_is_no_messages_answer_is_unreadable() {
    let out = translate::response(
        Api::AnthropicMessages,
        Api::OpenAiResponses,
        200,
        br#"{"choices":[]}"#,
        1,
    );
    assert!(out.unreadable);
    assert!(std::str::from_utf8(&out.body)
        .unwrap()
        .contains("not an Anthropic Messages answer"));
}

#[test]
fn stop_reasons_are_statuses() {
    let answer = |reason: &str| {
        let body = format!(
            r#"{{"id":"msg_1","model":"c","content":[{{"type":"text","text":"Hi"}}],"stop_reason":"{reason}","usage":{{"input_tokens":1,"output_tokens":2}}}}"#
        );
        let out = translate::response(
            Api::AnthropicMessages,
            Api::OpenAiResponses,
            200,
            body.as_bytes(),
            1,
        )
        .body;
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        (
            v["status"].as_str().unwrap().to_owned(),
            v["incomplete_details"]["reason"]
                .as_str()
                .map(str::to_owned),
        )
    };
    assert_eq!(answer("end_turn"), ("completed".into(), None));
    assert_eq!(
        answer("max_tokens"),
        ("incomplete".into(), Some("max_output_tokens".into()))
    );
    assert_eq!(
        answer("refusal"),
        ("incomplete".into(), Some("content_filter".into()))
    );
}

#[test]
fn a_messages_error_is_an_openai_error() {
    let out = translate::response(
        Api::AnthropicMessages,
        Api::OpenAiResponses,
        400,
        br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        1,
    )
    .body;
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum","type":"invalid_request_error","param":null,"code":null}}"#
    );
    assert_eq!(
        translate::error_body(
            Api::OpenAiResponses,
            503,
            "server_error",
            "fallbacks_exhausted",
            "every provider failed"
        ),
        translate::error_body(
            Api::OpenAiChat,
            503,
            "server_error",
            "fallbacks_exhausted",
            "every provider failed"
        ),
    );
}

fn translate_from(provider: Api, chunks: &[&[u8]]) -> Vec<u8> {
    let cx = translate::StreamContext {
        created: 1741476542,
        include_usage: false,
    };
    let mut t = StreamTranslator::new(provider, Api::OpenAiResponses, cx).unwrap();
    let mut out = Vec::new();
    for (k, chunk) in chunks.iter().enumerate() {
        t.push(chunk, k + 1 == chunks.len(), &mut out);
    }
    out
}

fn translate_stream(chunks: &[&[u8]]) -> Vec<u8> {
    translate_from(Api::AnthropicMessages, chunks)
}

fn translate_chat_stream(chunks: &[&[u8]]) -> Vec<u8> {
    translate_from(Api::OpenAiChat, chunks)
}

/// Each event's data is JSON whose `type` is its `event:` name and whose sequence numbers
/// count from 0.
fn events(stream: &[u8]) -> Vec<serde_json::Value> {
    let text = std::str::from_utf8(stream).unwrap();
    let mut all = Vec::new();
    for (k, frame) in text.split_terminator("\n\n").enumerate() {
        let (name, data) = frame.split_once('\n').unwrap();
        let data: serde_json::Value =
            serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(name.strip_prefix("event: "), data["type"].as_str());
        assert_eq!(data["sequence_number"], k as u64);
        all.push(data);
    }
    all
}

#[test]
fn a_messages_stream_with_a_tool_call_is_responses_typed_events() {
    let out =
        translate_stream(
            &[fixture("responses-to-messages/tool-call-stream/stream.sse").as_bytes()],
        );
    let all = events(&out);
    let kinds: Vec<_> = all.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let done = &all[14]["response"];
    assert_eq!(
        done["output"][0]["content"][0]["text"],
        "Okay, let's check the \"weather\"."
    );
    assert_eq!(
        done["output"][1]["arguments"],
        r#"{"location": "San Francisco, CA"}"#
    );
    assert_eq!(
        done["output"][1]["call_id"],
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
    );
    assert_eq!(done["usage"]["input_tokens"], 502);
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], 30);
    assert_eq!(done["usage"]["output_tokens"], 89);
}

#[test]
fn a_stream_cut_short_or_failing_ends_with_an_error_event() {
    let stream = fixture("responses-to-messages/tool-call-stream/stream.sse");
    let cut = stream.split("event: content_block_stop").next().unwrap();
    let out = translate_stream(&[cut.as_bytes()]);
    let all = events(&out);
    let last = all.last().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["code"], "server_error");
    assert!(last["error"]["message"]
        .as_str()
        .unwrap()
        .contains("ended before"));
    let failing = format!(
        "{cut}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n"
    );
    let out = translate_stream(&[failing.as_bytes(), b"more"]);
    let all = events(&out);
    assert_eq!(all.last().unwrap()["code"], "overloaded_error");
    assert_eq!(all.iter().filter(|e| e["type"] == "error").count(), 1);
    // A stream whose stop reason came is complete without message_stop.
    let no_stop = stream.replace(
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        "",
    );
    let out = translate_stream(&[no_stop.as_bytes()]);
    assert_eq!(events(&out).last().unwrap()["type"], "response.completed");
}

// ----------------------------------------------------------------- a Chat Completions provider

#[test]
fn a_chat_answer_with_a_tool_call_is_a_response_with_a_function_call_item() {
    let body = compact(&fixture("responses-to-chat/tool-call-answer/answer.json"));
    let out = translate::response(
        Api::OpenAiChat,
        Api::OpenAiResponses,
        200,
        &body,
        1699896916,
    );
    assert!(!out.unreadable);
    let v: serde_json::Value = serde_json::from_slice(&out.body).expect("valid JSON");
    assert_eq!(v["output"][0]["type"], "function_call");
    assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 64);
    let odd = translate::response(Api::OpenAiChat, Api::OpenAiResponses, 200, b"{}", 1);
    assert!(odd.unreadable);
    assert!(std::str::from_utf8(&odd.body)
        .unwrap()
        .contains("Chat Completions answer"));
}

/// Chat's answer reader: content parts (some OpenAI-compatible servers send them) and a refusal
/// beside the content are text (they were dropped before Chat's reader served every caller).
#[test]
fn a_chat_answers_content_parts_and_refusal_are_its_text() {
    let texts = |body: &str| {
        let out = translate::response(
            Api::OpenAiChat,
            Api::OpenAiResponses,
            200,
            body.as_bytes(),
            1,
        );
        assert!(!out.unreadable);
        let v: serde_json::Value = serde_json::from_slice(&out.body).expect("valid JSON");
        let items = v["output"].as_array().unwrap().clone();
        let texts: Vec<String> = items
            .iter()
            .map(|i| i["content"][0]["text"].as_str().unwrap().to_owned())
            .collect();
        (texts, v["incomplete_details"]["reason"].clone())
    };
    let parts = r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"a\n"},{"type":"text","text":"b"}]},"finish_reason":"stop"}]}"#;
    assert_eq!(
        texts(parts),
        (
            vec!["a\n".to_owned(), "b".to_owned()],
            serde_json::Value::Null
        )
    );
    let refusal = r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Well.","refusal":"I can't."},"finish_reason":"stop"}]}"#;
    assert_eq!(
        texts(refusal),
        (
            vec!["Well.".to_owned(), "I can't.".to_owned()],
            serde_json::json!("content_filter")
        )
    );
}

#[test]
fn a_chat_stream_with_a_tool_call_is_responses_typed_events() {
    let out = translate_chat_stream(&[
        fixture("responses-to-chat/tool-call-stream/stream.sse").as_bytes()
    ]);
    let all = events(&out);
    let kinds: Vec<_> = all.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    let done = &all.last().unwrap()["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], "Let me \"check\".");
    assert_eq!(
        done["output"][1]["arguments"],
        r#"{"location":"Paris, France"}"#
    );
    assert_eq!(
        done["output"][1]["call_id"],
        "call_DdmO9pD3xa9XTPNJ32zg2hcA"
    );
    assert_eq!(done["usage"]["input_tokens"], 82);
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], 64);
    assert_eq!(done["usage"]["output_tokens"], 17);
    // Cut short before the finish reason: an error event ends it.
    let stream = fixture("responses-to-chat/tool-call-stream/stream.sse");
    let cut = stream.split("data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_44709d6fcb\",\"choices\":[{\"index\":0,\"delta\":{},").next().unwrap();
    assert_eq!(
        events(&translate_chat_stream(&[cut.as_bytes()]))
            .last()
            .unwrap()["type"],
        "error"
    );
}

// ---------------------------------------------------------------------------------------------
// Responses as a provider dialect (`api: openai_responses`): the edges the fixtures
// (chat-to-responses/, gemini-to-responses/) do not hold.

#[test]
fn what_a_responses_provider_cannot_carry_is_refused() {
    let chat =
        |body: &str| translate::check(Api::OpenAiChat, Api::OpenAiResponses, body.as_bytes());
    let f = |name| Err(Untranslatable::Field(name));
    let hi = r#""messages":[{"role":"user","content":"hi"}]"#;
    assert_eq!(chat(&format!(r#"{{"model":"m",{hi}}}"#)), Ok(()));
    // Responses has no stop sequences.
    assert_eq!(
        chat(&format!(r#"{{"model":"m",{hi},"stop":["END"]}}"#)),
        f("stop")
    );
    // The Chat reader's own rules still hold.
    assert_eq!(chat(&format!(r#"{{"model":"m",{hi},"n":2}}"#)), f("n"));
    // An Anthropic Messages caller: its stop sequences cannot be carried either.
    let messages = r#""model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]"#;
    let messages = |rest: &str| {
        let body = format!("{{{messages}{rest}}}");
        translate::check(
            Api::AnthropicMessages,
            Api::OpenAiResponses,
            body.as_bytes(),
        )
    };
    assert_eq!(messages(""), Ok(()));
    assert_eq!(messages(r#","stop_sequences":["END"]"#), f("stop"));
}

/// A Responses provider's stream as a Chat caller's, whole.
fn to_chat(stream: &str) -> (String, bool) {
    let cx = translate::StreamContext {
        created: 1,
        include_usage: false,
    };
    let mut t = StreamTranslator::new(Api::OpenAiResponses, Api::OpenAiChat, cx).unwrap();
    let mut out = Vec::new();
    t.push(stream.as_bytes(), true, &mut out);
    (String::from_utf8(out).unwrap(), t.finished())
}

#[test]
fn a_responses_stream_incomplete_or_failing_ends_the_chat_stream_as_it_should() {
    let created = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-5\",\"output\":[]}}\n\n";
    let text = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_1\",\"role\":\"assistant\",\"content\":[]}}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"}\n\n";
    let incomplete = "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"id\":\"resp_1\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"input_tokens\":3,\"output_tokens\":16}}}\n\n";
    let (out, finished) = to_chat(&format!("{created}{text}{incomplete}"));
    assert!(finished, "{out}");
    assert!(out.contains(r#""finish_reason":"length""#), "{out}");
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
    // An error event mid-stream is OpenAI's error frame, nothing after it.
    let error = "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Slow down\",\"param\":null,\"sequence_number\":3}\n\n";
    let (out, finished) = to_chat(&format!("{created}{text}{error}{incomplete}"));
    assert!(!finished, "{out}");
    assert!(
        out.ends_with("data: {\"error\":{\"message\":\"Slow down\",\"type\":\"rate_limit_exceeded\",\"param\":null,\"code\":null}}\n\n"),
        "{out}"
    );
    assert!(!out.contains("[DONE]"), "{out}");
    // A refusal part is the caller's content_filter stop.
    let refusal = br#"{"id":"resp_2","object":"response","status":"completed","model":"m","output":[{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"No."}]}],"usage":{"input_tokens":1,"output_tokens":1}}"#;
    let out = translate::response(Api::OpenAiResponses, Api::OpenAiChat, 200, refusal, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "content_filter", "{v}");
}

#[test]
fn only_a_reasoning_item_of_ours_is_a_thinking_block_again() {
    fn item(json: &str) -> Option<Thinking<'_>> {
        caller::ours(&json::Obj::parse(json).unwrap())
    }
    let signed = item(
        r#"{"type":"reasoning","summary":[{"type":"summary_text","text":"Think \"twice\"."}],"encrypted_content":"llm-failover:anthropic:EqQB+/x="}"#,
    )
    .unwrap();
    assert_eq!(
        (signed.text, signed.signature, signed.redacted),
        (r#""Think \"twice\".""#, "EqQB+/x=", false)
    );
    let redacted = item(
        r#"{"type":"reasoning","summary":[],"encrypted_content":"llm-failover:anthropic-redacted:EmwK"}"#,
    )
    .unwrap();
    assert_eq!(
        (redacted.text, redacted.signature, redacted.redacted),
        ("\"\"", "EmwK", true)
    );
    // OpenAI's own reasoning (or none of its content) is no thinking block.
    for other in [
        r#"{"type":"reasoning","summary":[],"encrypted_content":"gAAAAABo"}"#,
        r#"{"type":"reasoning","summary":[{"type":"summary_text","text":"x"}]}"#,
        r#"{"type":"reasoning","summary":[],"encrypted_content":null}"#,
    ] {
        assert_eq!(item(other), None, "{other}");
    }
}

#[test]
fn thinking_reaches_messages_before_the_calls_and_no_other_dialect() {
    let body = br#"{"model":"m","input":[{"role":"user","content":"hi"},{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}],"encrypted_content":"llm-failover:anthropic:S"},{"type":"reasoning","summary":[],"encrypted_content":"gAAA"},{"type":"function_call","call_id":"toolu_1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"toolu_1","output":"1"}]}"#;
    let cx = RequestContext {
        model: "claude",
        default_max_tokens: 64,
        stream: false,
    };
    let sent = translate::request(Api::OpenAiResponses, Api::AnthropicMessages, body, &cx).unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(
        sent["messages"][1]["content"],
        serde_json::json!([
            {"type": "thinking", "thinking": "t", "signature": "S"},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
        ])
    );
    for to in [Api::OpenAiChat, Api::Gemini] {
        let other = translate::request(Api::OpenAiResponses, to, body, &cx).unwrap_or_default();
        let other = String::from_utf8(other).unwrap();
        assert!(
            !other.contains("thinking") && !other.contains("\"S\""),
            "{to:?}: {other}"
        );
        assert!(!other.contains("gAAA"), "{to:?}: {other}");
    }
}

#[test]
fn a_gathered_thinking_stream_is_the_answer_with_its_reasoning_items() {
    // A stream gathered for a caller that asked for JSON gives what the JSON answer gives.
    let stream = fixture("responses-to-messages/thinking-stream/stream.sse");
    let whole = translate::assemble::stream_to_answer(
        Api::AnthropicMessages,
        Api::OpenAiResponses,
        &[stream.as_bytes()],
        1,
    )
    .unwrap();
    let whole: serde_json::Value = serde_json::from_slice(&whole).unwrap();
    let streamed = fixture("responses-to-messages/thinking-stream/stream.out.sse");
    let last = streamed.lines().rfind(|l| l.starts_with("data: ")).unwrap();
    let last: serde_json::Value = serde_json::from_str(&last[6..]).unwrap();
    assert_eq!(whole["output"], last["response"]["output"]);
    assert_eq!(whole["output"][0]["type"], "reasoning");
}

#[test]
fn openai_reasoning_gathered_is_the_answers_thinking_and_keeps_its_id() {
    // A Responses provider's stream gathered for a Messages caller gives the thinking block
    // its JSON answer gives; for a Responses caller, OpenAI's own item (its id, its encrypted
    // content without a prefix of ours).
    let stream = fixture("messages-to-responses/thinking-stream/stream.sse");
    let gather = |caller| {
        let body = translate::assemble::stream_to_answer(
            Api::OpenAiResponses,
            caller,
            &[stream.as_bytes()],
            1,
        )
        .unwrap();
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()
    };
    let answer = fixture("messages-to-responses/thinking-answer/answer.out.json");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let thinking = &gather(Api::AnthropicMessages)["content"][0];
    assert_eq!(thinking, &answer["content"][0]);
    let rs = "rs_68af4030baa48193b0b43b4c2a176a1a05438e46b5f69a3b";
    assert_eq!(
        gather(Api::OpenAiResponses)["output"][0],
        serde_json::json!({"id": rs, "type": "reasoning", "summary": [{"type": "summary_text",
            "text": "**Finding the weather**\n\nThe user asks about \"Paris\"."}],
            "encrypted_content": "gAAAAABor0Aw1YF2+kM9xvQ=="})
    );
    // The rule in one place: each provider dialect writes only its own vendor's reasoning.
    let thinking = |item| crate::translate::model::Thinking {
        text: "\"t\"",
        signature: "S",
        redacted: false,
        item,
    };
    assert_eq!(thinking("").goes_to(), Api::AnthropicMessages);
    assert_eq!(thinking("rs_1").goes_to(), Api::OpenAiResponses);
    let mut claude = messages::Conversation::with_capacity(64);
    claude.push(Role::Assistant, &Part::Thinking(thinking("rs_1")));
    let cx = RequestContext {
        model: "m",
        default_max_tokens: 1,
        stream: false,
    };
    let claude = messages::request(claude, &Request::default(), &cx);
    assert!(!String::from_utf8(claude).unwrap().contains("thinking"));
    let mut openai = Conversation::with_capacity(64);
    openai.push(Role::Assistant, &Part::Thinking(thinking("")));
    let openai = request(openai, &Request::default(), &cx).unwrap();
    assert!(!String::from_utf8(openai).unwrap().contains("reasoning"));
}
