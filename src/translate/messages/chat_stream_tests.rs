//! OpenAI Chat streams translated for an Anthropic caller (Chat's decoder, the Messages
//! encoder): the edges (usage late or missing, Azure's filter chunk, stop reasons, errors,
//! streams cut short). The reference streams are fixtures
//! (src/translate/fixtures/messages-to-chat/*-stream/, run by translate/fixtures.rs, which also
//! feeds them in every chunking).

use crate::translate::{Api, StreamContext, StreamTranslator};

fn translator() -> StreamTranslator {
    StreamTranslator::new(
        Api::OpenAiChat,
        Api::AnthropicMessages,
        StreamContext::default(),
    )
    .unwrap()
}

/// A text answer with usage asked for (`stream_options.include_usage`): every chunk carries
/// `"usage": null`, and a last one `choices: []` with the usage.
const TEXT: &str = include_str!("../fixtures/messages-to-chat/text-stream-usage-cached/stream.sse");

fn ev(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn start(id: &str, model: &str) -> String {
    ev(
        "message_start",
        &format!(
            r#"{{"type":"message_start","message":{{"id":"{id}","type":"message","role":"assistant","model":"{model}","content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":0,"output_tokens":0}}}}}}"#
        ),
    )
}

fn text_start(index: u64) -> String {
    ev(
        "content_block_start",
        &format!(
            r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"text","text":""}}}}"#
        ),
    )
}

fn text(index: u64, raw: &str) -> String {
    ev(
        "content_block_delta",
        &format!(
            r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"text_delta","text":{raw}}}}}"#
        ),
    )
}

fn stop(index: u64) -> String {
    ev(
        "content_block_stop",
        &format!(r#"{{"type":"content_block_stop","index":{index}}}"#),
    )
}

fn end(reason: &str, input: u64, output: u64, cache_read: u64) -> String {
    end_written(reason, input, output, cache_read, 0)
}

fn end_written(reason: &str, input: u64, output: u64, cache_read: u64, written: u64) -> String {
    [
        ev(
            "message_delta",
            &format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{reason}","stop_sequence":null}},"usage":{{"input_tokens":{input},"output_tokens":{output},"cache_read_input_tokens":{cache_read},"cache_creation_input_tokens":{written}}}}}"#),
        ),
        ev("message_stop", r#"{"type":"message_stop"}"#),
    ]
    .concat()
}

fn translate(chunks: &[&[u8]]) -> (String, bool) {
    let mut t = translator();
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        t.push(chunk, i + 1 == chunks.len(), &mut out);
    }
    (String::from_utf8(out).unwrap(), t.finished())
}

fn whole(stream: &str) -> (String, bool) {
    translate(&[stream.as_bytes()])
}

/// Cache writes a gateway reports (under either name) are Anthropic's cache creation tokens,
/// out of `input_tokens` like the cache reads.
#[test]
fn cache_writes_reported_by_a_gateway_are_kept() {
    for name in ["cache_creation_input_tokens", "cache_write_tokens"] {
        let stream = TEXT.replace(
            r#""cached_tokens":1920,"#,
            &format!(r#""cached_tokens":1920,"{name}":6,"#),
        );
        assert!(whole(&stream)
            .0
            .ends_with(&end_written("end_turn", 80, 300, 1920, 6)));
    }
}

#[test]
fn message_delta_waits_for_the_usage_chunk() {
    let finish_at = TEXT.find(r#""finish_reason":"stop""#).unwrap();
    let usage_at = finish_at + TEXT[finish_at..].find("\n\n").unwrap() + 2;
    let mut t = translator();
    let mut out = Vec::new();
    t.push(&TEXT.as_bytes()[..usage_at], false, &mut out);
    let so_far = String::from_utf8(out.clone()).unwrap();
    assert!(so_far.ends_with(&stop(0)), "{so_far}");
    assert!(!t.finished());
    t.push(&TEXT.as_bytes()[usage_at..], true, &mut out);
    assert!(t.finished());
    assert_eq!(String::from_utf8(out).unwrap(), whole(TEXT).0);
}

#[test]
fn without_usage_the_message_ends_at_done_or_at_the_streams_end() {
    // No usage asked for: the finish, then [DONE].
    let no_usage: String = TEXT
        .split("\n\n")
        .filter(|e| !e.contains(r#""choices":[]"#))
        .map(|e| format!("{e}\n\n"))
        .collect::<String>()
        .trim_end_matches('\n')
        .to_string()
        + "\n\n";
    let body = [
        start("chatcmpl-123", "gpt-4o-mini-2024-07-18"),
        text_start(0),
        text(0, r#""Hello""#),
        text(0, r#""!\n\"Hi\" \u00e9""#),
        stop(0),
    ]
    .concat();
    assert_eq!(
        whole(&no_usage),
        (body.clone() + &end("end_turn", 0, 0, 0), true)
    );
    // The finish came but not [DONE]: the stream is complete (behaviour.md 5).
    let no_done = no_usage.replace("data: [DONE]\n\n", "");
    assert_eq!(
        whole(&no_done),
        (body.clone() + &end("end_turn", 0, 0, 0), true)
    );
    // Chunk by chunk, the end is owed from the finish on and written at the end.
    let mut t = translator();
    let mut out = Vec::new();
    assert!(t.push(no_done.as_bytes(), false, &mut out) && !t.finished());
    assert!(!t.push(b"", true, &mut out) && t.finished());
    // No finish, no [DONE]: cut short, not finished, no message_stop, and an error event so
    // the caller's client raises (behaviour.md 5).
    let cut = &no_done[..no_done.find(r#""finish_reason":"stop""#).unwrap()];
    let cut = &cut[..cut.rfind("data: ").unwrap()];
    let cut_short = std::str::from_utf8(crate::failing_answer::cut_stream_event(
        crate::translate::Api::AnthropicMessages,
    ))
    .unwrap();
    let before = body[..body.find("event: content_block_stop").unwrap()].to_string();
    assert_eq!(whole(cut), (before + cut_short, false));
}

/// Azure OpenAI starts with a chunk of prompt filter results, no choices, an empty id and model
/// (and ends choices with content filter results): the message starts at the next chunk.
#[test]
fn azure_openais_prompt_filter_chunk_is_skipped() {
    let azure = format!(
        "{}\n\n{TEXT}",
        r#"data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}"#
    );
    assert_eq!(whole(&azure), whole(TEXT));
}

#[test]
fn stop_reasons() {
    for (finish, reason) in [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "refusal"),
    ] {
        let stream = TEXT.replace(
            r#""finish_reason":"stop""#,
            &format!(r#""finish_reason":"{finish}""#),
        );
        let (out, _) = whole(&stream);
        assert!(
            out.contains(&format!(
                r#"{{"stop_reason":"{reason}","stop_sequence":null}}"#
            )),
            "{finish}: {out}"
        );
    }
}

#[test]
fn an_error_frame_becomes_an_error_event_and_ends_the_translation() {
    let at = TEXT.find("data: ").unwrap()
        + TEXT[TEXT.find("data: ").unwrap()..].find("\n\n").unwrap()
        + 2;
    let stream = [
        &TEXT[..at],
        "data: {\"error\":{\"message\":\"The server had an error while processing your request. Sorry about that!\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
        &TEXT[at..],
    ]
    .concat();
    let (out, finished) = whole(&stream);
    assert!(!finished);
    assert_eq!(
        out,
        start("chatcmpl-123", "gpt-4o-mini-2024-07-18")
            + &ev(
                "error",
                r#"{"type":"error","error":{"type":"api_error","message":"The server had an error while processing your request. Sorry about that!"}}"#
            )
    );
    // vLLM's shape, and a rate limit keeping its meaning.
    let (out, _) = whole("data: {\"object\":\"error\",\"message\":\"bad\",\"type\":\"BadRequestError\",\"code\":400}\n\n");
    assert_eq!(
        out,
        ev(
            "error",
            r#"{"type":"error","error":{"type":"api_error","message":"bad"}}"#
        )
    );
    let (out, _) = whole("data: not json\n\nevent: error\ndata: gone\n\n");
    assert_eq!(
        out,
        ev(
            "error",
            r#"{"type":"error","error":{"type":"api_error","message":"The provider's stream reported an error."}}"#
        )
    );
    let (out, _) = whole("data: {\"error\":{\"message\":\"Slow down\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n");
    assert_eq!(
        out,
        ev(
            "error",
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}"#
        )
    );
}

#[test]
fn comments_and_multi_line_data_change_nothing() {
    let commented = format!(": OPENROUTER PROCESSING\n\n{TEXT}");
    assert_eq!(whole(&commented), whole(TEXT));
    let multi = TEXT.replace(
        r#""delta":{"content":"Hello"},"#,
        "\"delta\":\ndata: {\"content\":\"Hello\"},",
    );
    assert_ne!(multi, TEXT);
    assert_eq!(whole(&multi), whole(TEXT));
}
