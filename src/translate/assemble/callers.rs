//! A stream gathered for a Responses or a Gemini caller (docs/behaviour.md section 5), from each
//! provider dialect's stream: the one JSON answer holds what the caller's own stream of the
//! same answer holds (its translated stream, `stream.out.sse`, or for the caller's own dialect
//! the provider's stream), whatever the chunk boundaries.

use super::stream_to_answer;
use crate::translate::Api;
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/translate/fixtures/");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}{name}")).unwrap()
}

/// The JSON of every `data:` line of a stream.
fn events(stream: &str) -> Vec<Value> {
    (stream.lines())
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// `stream` (in `provider`'s dialect) gathered for `caller`, in one piece and cut in two at
/// every byte: the same answer each time.
fn gathered(provider: Api, caller: Api, stream: &str) -> Value {
    let whole = stream_to_answer(provider, caller, &[stream.as_bytes()], 1).expect("complete");
    for cut in 0..=stream.len() {
        let (a, b) = stream.as_bytes().split_at(cut);
        let cut_answer = stream_to_answer(provider, caller, &[a, b], 1);
        assert_eq!(
            cut_answer.as_deref(),
            Some(&whole[..]),
            "{provider:?} cut at {cut}"
        );
    }
    serde_json::from_slice(&whole).unwrap()
}

/// A Responses stream's final response (`response.completed`'s).
fn completed(stream: &str) -> Value {
    let last = events(stream)
        .into_iter()
        .rfind(|e| e["type"] == "response.completed");
    last.expect("response.completed")["response"].clone()
}

#[test]
fn a_stream_gathered_for_a_responses_caller_is_its_streams_completed_response() {
    for (provider, dir) in [
        (Api::OpenAiChat, "responses-to-chat/tool-call-stream"),
        (
            Api::AnthropicMessages,
            "responses-to-messages/tool-call-stream",
        ),
        (
            Api::AnthropicMessages,
            "responses-to-messages/thinking-stream",
        ),
        (Api::Gemini, "responses-to-gemini/tool-call-stream"),
    ] {
        let answer = gathered(
            provider,
            Api::OpenAiResponses,
            &fixture(&format!("{dir}/stream.sse")),
        );
        let streamed = completed(&fixture(&format!("{dir}/stream.out.sse")));
        assert_eq!(answer["object"], "response", "{dir}: {answer}");
        for member in ["status", "model", "output", "usage"] {
            assert_eq!(answer[member], streamed[member], "{dir}: {member}");
        }
        let types: Vec<_> = answer["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["type"])
            .collect();
        assert!(types.contains(&&json!("function_call")), "{dir}: {types:?}");
        assert!(
            answer["usage"]["input_tokens_details"]["cached_tokens"].is_u64(),
            "{dir}"
        );
    }
}

#[test]
fn a_responses_stream_gathered_for_a_responses_caller_keeps_its_output_status_and_usage() {
    for dir in [
        "chat-to-responses/text-stream",
        "chat-to-responses/tool-call-stream",
    ] {
        let stream = fixture(&format!("{dir}/stream.sse"));
        let answer = gathered(Api::OpenAiResponses, Api::OpenAiResponses, &stream);
        let own = completed(&stream);
        // The provider's response id, so a later `previous_response_id` names what it stored.
        for member in ["id", "status", "model"] {
            assert_eq!(answer[member], own[member], "{dir}: {member}");
        }
        // The model's usage has no reasoning tokens: `output_tokens_details` says 0.
        for count in [
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "input_tokens_details",
        ] {
            assert_eq!(
                answer["usage"][count], own["usage"][count],
                "{dir}: {count}"
            );
        }
        // Each item's text, or its call, as its `output_item.done` event had it (item ids are
        // the gateway's, from the answer's id; a reasoning item that carries nothing, no
        // summary and no encrypted content, is not kept).
        let item = |i: &Value| {
            json!([
                i["type"],
                i["content"][0]["text"],
                i["call_id"],
                i["name"],
                i["arguments"]
            ])
        };
        let done: Vec<Value> = (events(&stream).iter())
            .filter(|e| e["type"] == "response.output_item.done")
            .filter(|e| {
                let i = &e["item"];
                i["type"] != "reasoning"
                    || i["summary"] != json!([])
                    || !i["encrypted_content"].is_null()
            })
            .map(|e| item(&e["item"]))
            .collect();
        let got: Vec<Value> = answer["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(item)
            .collect();
        assert_eq!(got, done, "{dir}: {answer}");
    }
}

/// What a Gemini caller's chunks add up to: the text (thoughts apart), the function calls, the
/// last finish reason and usage.
fn merged(chunks: &[Value]) -> Value {
    let (mut text, mut thought, mut calls) = (String::new(), String::new(), Vec::new());
    let (mut finish, mut usage) = (Value::Null, Value::Null);
    for c in chunks {
        let candidate = &c["candidates"][0];
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if part.get("functionCall").is_some() {
                calls.push(part.clone());
            } else if part["thought"] == true {
                thought.push_str(part["text"].as_str().unwrap_or_default());
            } else {
                text.push_str(part["text"].as_str().unwrap_or_default());
            }
        }
        if candidate.get("finishReason").is_some() {
            finish = candidate["finishReason"].clone();
        }
        if c.get("usageMetadata").is_some() {
            usage = c["usageMetadata"].clone();
        }
    }
    json!({"text": text, "thought": thought, "calls": calls, "finish": finish, "usage": usage})
}

#[test]
fn a_stream_gathered_for_a_gemini_caller_is_what_its_translated_stream_adds_up_to() {
    for (provider, dir) in [
        (Api::OpenAiChat, "gemini-to-chat/text-stream"),
        (Api::AnthropicMessages, "gemini-to-messages/tool-use-stream"),
        (Api::OpenAiResponses, "gemini-to-responses/text-stream"),
    ] {
        let answer = gathered(
            provider,
            Api::Gemini,
            &fixture(&format!("{dir}/stream.sse")),
        );
        assert_eq!(
            answer["candidates"][0]["content"]["role"], "model",
            "{dir}: {answer}"
        );
        let streamed = merged(&events(&fixture(&format!("{dir}/stream.out.sse"))));
        assert_eq!(
            merged(std::slice::from_ref(&answer)),
            streamed,
            "{dir}: {answer}"
        );
        assert!(
            answer["usageMetadata"]["promptTokenCount"].is_u64(),
            "{dir}"
        );
    }
}

#[test]
fn a_gemini_stream_gathered_for_a_gemini_caller_has_its_text_calls_finish_and_usage() {
    // Through the model, as every gathered answer: thought parts are not kept, the thought
    // signature rides in the call's id (as for a translated caller), and the thoughts' tokens
    // are counted in `candidatesTokenCount`.
    let stream = fixture("responses-to-gemini/tool-call-stream/stream.sse");
    let answer = gathered(Api::Gemini, Api::Gemini, &stream);
    let (own, got) = (
        merged(&events(&stream)),
        merged(std::slice::from_ref(&answer)),
    );
    assert_eq!(got["text"], own["text"], "{answer}");
    assert_eq!(got["finish"], own["finish"]);
    let call = &got["calls"][0]["functionCall"];
    assert_eq!(call["name"], own["calls"][0]["functionCall"]["name"]);
    assert_eq!(call["args"], own["calls"][0]["functionCall"]["args"]);
    let usage = &answer["usageMetadata"];
    // Gemini's own counts, the thoughts (22) apart from the answer's 18.
    for count in [
        "promptTokenCount",
        "totalTokenCount",
        "cachedContentTokenCount",
        "candidatesTokenCount",
        "thoughtsTokenCount",
    ] {
        assert_eq!(usage[count], own["usage"][count], "{count}");
    }
    assert_eq!(usage["thoughtsTokenCount"], 22);
}
