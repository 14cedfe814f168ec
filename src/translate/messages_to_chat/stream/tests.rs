//! OpenAI Chat streams (from the Chat Completions streaming and function calling references)
//! translated for an Anthropic caller, compared byte for byte with the events Anthropic sends.

use super::*;

/// A text answer with usage asked for (`stream_options.include_usage`): every chunk carries
/// `"usage": null`, and a last one `choices: []` with the usage.
const TEXT: &str = r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"!\n\"Hi\" \u00e9"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

"#;

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

fn tool_start(index: u64, id: &str, name: &str) -> String {
    ev(
        "content_block_start",
        &format!(
            r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"tool_use","id":"{id}","name":"{name}","input":{{}}}}}}"#
        ),
    )
}

fn json(index: u64, raw: &str) -> String {
    ev(
        "content_block_delta",
        &format!(
            r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"input_json_delta","partial_json":{raw}}}}}"#
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
    let mut t = Translator::default();
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        t.push(chunk, i + 1 == chunks.len(), &mut out);
    }
    (String::from_utf8(out).unwrap(), t.finished())
}

fn whole(stream: &str) -> (String, bool) {
    translate(&[stream.as_bytes()])
}

/// Usage with cached tokens: Anthropic's `input_tokens` leaves out the 1,920 read from the
/// cache, which are `cache_read_input_tokens`.
#[test]
fn a_text_stream_with_usage_and_cached_tokens() {
    let want = [
        start("chatcmpl-123", "gpt-4o-mini-2024-07-18"),
        text_start(0),
        text(0, r#""Hello""#),
        text(0, r#""!\n\"Hi\" \u00e9""#),
        stop(0),
        end("end_turn", 86, 300, 1920),
    ]
    .concat();
    assert_eq!(whole(TEXT), (want, true));
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
    let mut t = Translator::default();
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
    let mut t = Translator::default();
    let mut out = Vec::new();
    t.push(no_done.as_bytes(), false, &mut out);
    assert!(t.owes_end() && !t.finished());
    t.push(b"", true, &mut out);
    assert!(t.finished() && !t.owes_end());
    // No finish, no [DONE]: cut short, not finished, no message_stop, and an error event so
    // the caller's client raises (behaviour.md 5).
    let cut = &no_done[..no_done.find(r#""finish_reason":"stop""#).unwrap()];
    let cut = &cut[..cut.rfind("data: ").unwrap()];
    let cut_short = std::str::from_utf8(crate::dialects::cut_stream_event(true)).unwrap();
    let before = body[..body.find("event: content_block_stop").unwrap()].to_string();
    assert_eq!(whole(cut), (before.clone(), false));
    let mut t = crate::translate::StreamTranslator::new(
        crate::translate::Api::OpenAiChat,
        crate::translate::Api::AnthropicMessages,
        crate::translate::StreamContext::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    t.push(cut.as_bytes(), true, &mut out);
    assert!(!t.finished());
    assert_eq!(String::from_utf8(out).unwrap(), before + cut_short);
}

/// The function calling reference's stream: one call, its arguments over several deltas.
const TOOL: &str = r#"data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1723000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1723000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1723000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"location"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1723000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1723000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"Paris, France\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1723000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1723000000,"model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":82,"completion_tokens":17,"total_tokens":99,"prompt_tokens_details":{"cached_tokens":0}}}

data: [DONE]

"#;

#[test]
fn a_tool_call_with_arguments_over_several_deltas() {
    let want = [
        start("chatcmpl-A1", "gpt-4o-2024-08-06"),
        tool_start(0, "call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather"),
        json(0, r#""{\"""#),
        json(0, r#""location""#),
        json(0, r#""\":\"""#),
        json(0, r#""Paris, France\"}""#),
        stop(0),
        end("tool_use", 82, 17, 0),
    ]
    .concat();
    assert_eq!(whole(TOOL), (want, true));
}

/// Text, then two parallel calls (the second's id not valid for Anthropic), then a reasoning
/// delta some OpenAI-compatible servers send (dropped).
const PARALLEL: &str = r#"data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"role":"assistant","content":"Checking."},"finish_reason":null}]}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"reasoning_content":"both cities"},"finish_reason":null}]}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"functions.get_time:1","type":"function","function":{"name":"get_time","arguments":"{\"city\":"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"Rome\"}"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":30,"total_tokens":80}}

data: [DONE]

"#;

#[test]
fn text_then_two_parallel_tool_calls_each_in_its_own_block() {
    let want = [
        start("chatcmpl-B2", "gpt-4.1"),
        text_start(0),
        text(0, r#""Checking.""#),
        stop(0),
        tool_start(1, "call_a", "get_weather"),
        json(1, r#""{\"city\":\"Paris\"}""#),
        stop(1),
        tool_start(2, "functions_get_time_1", "get_time"),
        json(2, r#""{\"city\":""#),
        json(2, r#""\"Rome\"}""#),
        stop(2),
        end("tool_use", 50, 30, 0),
    ]
    .concat();
    let (out, finished) = whole(PARALLEL);
    assert_eq!(out, want);
    assert!(finished);
    assert!(!out.contains("both cities"));
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
fn crlf_line_ends_comments_and_multi_line_data_change_nothing() {
    let crlf = TEXT.replace('\n', "\r\n");
    assert_eq!(whole(&crlf), whole(TEXT));
    let commented = format!(": OPENROUTER PROCESSING\n\n{TEXT}");
    assert_eq!(whole(&commented), whole(TEXT));
    let multi = TEXT.replace(
        r#""delta":{"content":"Hello"},"#,
        "\"delta\":\ndata: {\"content\":\"Hello\"},",
    );
    assert_ne!(multi, TEXT);
    assert_eq!(whole(&multi), whole(TEXT));
}

#[test]
fn byte_by_byte_is_the_same_as_whole() {
    for stream in [TEXT, TOOL, PARALLEL] {
        let bytes: Vec<&[u8]> = stream.as_bytes().chunks(1).collect();
        assert_eq!(translate(&bytes), whole(stream));
    }
}

/// Host only: proptest is not built for wasm32.
#[cfg(not(target_arch = "wasm32"))]
mod chunking {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any chunking of a stream (cut anywhere, `\n` or `\r\n` line ends) gives the same
        /// translation as the stream fed whole.
        #[test]
        fn any_chunking_gives_the_same_translation(
            which in 0usize..3,
            crlf in any::<bool>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let stream = [TEXT, TOOL, PARALLEL][which];
            let stream = if crlf { stream.replace('\n', "\r\n") } else { stream.to_string() };
            let bytes = stream.as_bytes();
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            at.push(0);
            at.push(bytes.len());
            at.sort_unstable();
            let chunks: Vec<&[u8]> = at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
            prop_assert_eq!(translate(&chunks), translate(&[bytes]));
        }
    }
}
