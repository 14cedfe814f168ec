//! Anthropic streams translated for an OpenAI caller (the Messages decoder, Chat's encoder):
//! the edges (usage asked or not, events cut across chunks, errors, streams cut short). The
//! reference streams are fixtures (src/translate/fixtures/chat-to-messages/*-stream/, run by
//! translate/fixtures.rs, which also feeds them in every chunking).

use super::*;
use crate::translate::{Api, StreamContext, StreamTranslator};

fn translator(cx: StreamContext) -> StreamTranslator {
    StreamTranslator::new(Api::AnthropicMessages, Api::OpenAiChat, cx).unwrap()
}

const CX: StreamContext = StreamContext {
    created: 1_700_000_000,
    include_usage: true,
};

/// The reference's basic text stream (with its `ping`).
const TEXT: &str = include_str!("../fixtures/chat-to-messages/text-stream/stream.sse");

const HEAD: &str = r#"data: {"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","object":"chat.completion.chunk","created":1700000000,"model":"claude-sonnet-4-5","#;

/// A chunk of OpenAI's stream after [`HEAD`].
fn chunk(head: &str, delta: &str) -> String {
    format!(
        "{head}\"choices\":[{{\"index\":0,\"delta\":{{{delta}}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
    )
}

fn finish(head: &str, reason: &str) -> String {
    format!("{head}\"choices\":[{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"{reason}\"}}]}}\n\n")
}

fn usage(head: &str, prompt: u64, completion: u64, cached: u64) -> String {
    usage_written(head, prompt, completion, cached, "")
}

/// The usage chunk; `written` is what follows `cached_tokens` (cache writes, when any).
fn usage_written(head: &str, prompt: u64, completion: u64, cached: u64, written: &str) -> String {
    format!(
        "{head}\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{},\"prompt_tokens_details\":{{\"cached_tokens\":{cached}{written}}}}}}}\n\n",
        prompt + completion
    )
}

const DONE: &str = "data: [DONE]\n\n";

fn translate(cx: StreamContext, chunks: &[&[u8]]) -> (String, bool) {
    let mut t = translator(cx);
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        t.push(chunk, i + 1 == chunks.len(), &mut out);
    }
    (String::from_utf8(out).unwrap(), t.finished())
}

fn whole(stream: &str) -> (String, bool) {
    translate(CX, &[stream.as_bytes()])
}

#[test]
fn the_text_arrives_unescaped_once() {
    let (want, finished) = whole(TEXT);
    assert!(finished);
    // Every chunk is JSON an OpenAI client reads: the text arrives unescaped once, as sent.
    let text: String = want
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(text, "Hello!\n\"Hi\" é");
}

#[test]
fn no_usage_chunk_unless_the_caller_asked() {
    let cx = StreamContext {
        include_usage: false,
        ..CX
    };
    let (out, finished) = translate(cx, &[TEXT.as_bytes()]);
    assert!(finished);
    assert!(!out.contains("usage"), "{out}");
    assert!(out.ends_with(&[finish(HEAD, "stop"), DONE.to_string()].concat()));
}

/// Prompt caching: input and cache tokens in `message_start`, updated with the output in
/// `message_delta` (as Anthropic does when a server tool ran).
const CACHED: &str = include_str!("../fixtures/chat-to-messages/cached-tokens-stream/stream.sse");

/// envoyproxy/ai-gateway#2290 and #2352: input and cache tokens dropped from a translated
/// stream. Here `prompt_tokens` counts every input token (30 + 188,086 read from the cache),
/// `cached_tokens` the cache reads, and the `message_delta` values replace `message_start`'s.
#[test]
fn input_and_cache_tokens_reach_the_usage_chunk_ai_gateway_2290_2352() {
    let head = r#"data: {"id":"msg_3","object":"chat.completion.chunk","created":1700000000,"model":"claude-sonnet-4-5","#;
    let (out, finished) = whole(CACHED);
    assert!(finished);
    assert!(out.ends_with(
        &[
            finish(head, "length"),
            usage(head, 30 + 188_086, 393, 188_086),
            DONE.to_string()
        ]
        .concat()
    ));
    // Only message_start's counts (no update in message_delta): input + cache writes + reads.
    let start_only = CACHED.replace(
        r#""usage":{"input_tokens":30,"cache_creation_input_tokens":0,"cache_read_input_tokens":188086,"output_tokens":393}"#,
        r#""usage":{"output_tokens":393}"#,
    );
    assert!(whole(&start_only).0.contains(&usage_written(
        head,
        21 + 188_086,
        393,
        0,
        r#","cache_creation_input_tokens":188086"#
    )));
}

/// envoyproxy/ai-gateway#2162: usage lost when an event spans body chunks. The
/// `message_delta` holding the output tokens is cut in the middle of its usage, and its blank
/// line comes alone in the last chunk.
#[test]
fn usage_survives_an_event_split_across_chunks_ai_gateway_2162() {
    let at = CACHED.find(r#""output_tokens":393"#).unwrap() + 10;
    let end = CACHED.len() - 1;
    let (a, b, c) = (&CACHED[..at], &CACHED[at..end], &CACHED[end..]);
    let (out, finished) = translate(CX, &[a.as_bytes(), b.as_bytes(), c.as_bytes()]);
    assert!(finished);
    assert!(
        out.contains(r#""usage":{"prompt_tokens":188116,"completion_tokens":393,"total_tokens":188509,"prompt_tokens_details":{"cached_tokens":188086}}"#),
        "{out}"
    );
    assert_eq!(out, whole(CACHED).0);
}

#[test]
fn an_error_event_becomes_an_openai_error_frame_and_ends_the_translation() {
    let stream = [
        &TEXT[..TEXT.find("event: content_block_stop").unwrap()],
        "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n",
        "event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n",
    ]
    .concat();
    let (out, finished) = whole(&stream);
    assert!(!finished, "an error is not the stream's end");
    assert!(
        out.ends_with(&[
            chunk(HEAD, r#""content":"!\n\"Hi\" \u00e9""#),
            r#"data: {"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}"#.to_string(),
            "\n\n".to_string()
        ]
        .concat()),
        "{out}"
    );
    assert!(!out.contains("[DONE]"));
    // An error before anything else, and one that is not JSON.
    let (out, _) = whole("event: error\ndata: upstream fell over\n\n");
    assert_eq!(
        out,
        "data: {\"error\":{\"message\":\"The provider's stream reported an error.\",\"type\":\"api_error\",\"param\":null,\"code\":null}}\n\n"
    );
}

#[test]
fn a_stream_that_ends_after_its_stop_reason_is_complete_one_cut_before_gets_an_error() {
    // The stop reason came (`message_delta`), then the stream ended: complete (behaviour.md 5).
    let no_stop = &TEXT[..TEXT.find("event: message_stop").unwrap()];
    let (out, finished) = whole(no_stop);
    assert!(finished);
    assert!(out.contains(&finish(HEAD, "stop")), "{out}");
    assert!(out.ends_with(DONE), "{out}");
    // Chunk by chunk the end is owed from the stop reason on, written at the end.
    let mut t = translator(CX);
    let mut out = Vec::new();
    assert!(t.push(no_stop.as_bytes(), false, &mut out) && !t.finished());
    assert!(!t.push(b"", true, &mut out) && t.finished());
    assert!(out.ends_with(DONE.as_bytes()));
    // Cut before it: not finished, and the caller's client must raise on an error frame.
    let cut = &TEXT[..TEXT.find("event: message_delta").unwrap()];
    let mut t = translator(CX);
    let mut out = Vec::new();
    assert!(
        !t.push(cut.as_bytes(), false, &mut out),
        "nothing completes it"
    );
    assert!(!t.push(b"", true, &mut out));
    let out = String::from_utf8(out).unwrap();
    assert!(!t.finished());
    assert!(!out.contains("[DONE]"));
    assert!(
        out.ends_with(
            std::str::from_utf8(crate::failing_answer::cut_stream_event(
                crate::translate::Api::OpenAiChat
            ))
            .unwrap()
        ),
        "{out}"
    );
    // The provider's own error event ended it: no second one.
    let (out, finished) = whole(&format!(
        "{cut}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n"
    ));
    assert!(!finished);
    assert_eq!(out.matches("\"error\"").count(), 1, "{out}");
}

#[test]
fn comments_change_nothing() {
    let commented = TEXT.replace("event: ping\n", ": keep-alive\nevent: ping\n");
    assert_eq!(whole(&commented), whole(TEXT));
}

#[test]
fn multi_line_data_is_one_event() {
    let split = TEXT.replace(
        r#"data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}"#,
        "data: {\"type\": \"content_block_delta\",\ndata:  \"index\": 0, \"delta\":\ndata: {\"type\": \"text_delta\", \"text\": \"Hello\"}}",
    );
    assert_ne!(split, TEXT);
    assert_eq!(whole(&split), whole(TEXT));
}

#[test]
fn include_usage_is_read_from_the_callers_stream_options() {
    assert!(wants_usage(
        br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#
    ));
    assert!(!wants_usage(
        br#"{"model":"m","stream":true,"stream_options":{"include_usage":false}}"#
    ));
    assert!(!wants_usage(br#"{"model":"m","stream":true}"#));
    assert!(!wants_usage(br#"{"model":"m","stream_options":null}"#));
    assert!(!wants_usage(b"not json"));
}
