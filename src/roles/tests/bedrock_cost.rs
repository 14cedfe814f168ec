//! Not a test: what a translated Bedrock request costs through both roles (ignored; run by
//! hand): an OpenAI Chat caller served by Bedrock (Anthropic Messages in Bedrock's envelope),
//! its request (about 1 KB) translated and put in the envelope, its answer translated back, as
//! JSON and as an event stream. `LLM_FAILOVER_BENCH_N` requests of each (default 200); under
//! valgrind, the instructions of N requests less those of none, divided by N, are the CPU of one:
//!   cargo test --release -p llm-failover --lib translated_bedrock_cost -- --ignored

use super::clouds::{chunk, event_stream};
use super::*;

const BEDROCK: &str = r#"{
    "providers": [{"name": "bedrock", "cluster": "c-bedrock", "api": "bedrock"}],
    "chains": [{"name": "gpt", "models": ["gpt-*"],
        "providers": [{"provider": "bedrock", "model": "anthropic.claude-x-v1:0"}]}]
}"#;

const ANSWER: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"Hello from claude"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}"#;

/// The stream's Anthropic events, base64 (Bedrock's `chunk` messages carry them so).
const EVENTS: [&str; 13] = [
    "eyJ0eXBlIjoibWVzc2FnZV9zdGFydCIsIm1lc3NhZ2UiOnsiaWQiOiJtc2dfMSIsInR5cGUiOiJtZXNzYWdlIiwicm9sZSI6ImFzc2lzdGFudCIsIm1vZGVsIjoiY2xhdWRlIiwiY29udGVudCI6W10sInN0b3BfcmVhc29uIjpudWxsLCJ1c2FnZSI6eyJpbnB1dF90b2tlbnMiOjMsIm91dHB1dF90b2tlbnMiOjF9fX0=",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19zdGFydCIsImluZGV4IjowLCJjb250ZW50X2Jsb2NrIjp7InR5cGUiOiJ0ZXh0IiwidGV4dCI6IiJ9fQ==",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIsImluZGV4IjowLCJkZWx0YSI6eyJ0eXBlIjoidGV4dF9kZWx0YSIsInRleHQiOiJIZWxsbyB0aGVyZSwgIn19",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIsImluZGV4IjowLCJkZWx0YSI6eyJ0eXBlIjoidGV4dF9kZWx0YSIsInRleHQiOiJIZWxsbyB0aGVyZSwgIn19",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIsImluZGV4IjowLCJkZWx0YSI6eyJ0eXBlIjoidGV4dF9kZWx0YSIsInRleHQiOiJIZWxsbyB0aGVyZSwgIn19",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIsImluZGV4IjowLCJkZWx0YSI6eyJ0eXBlIjoidGV4dF9kZWx0YSIsInRleHQiOiJIZWxsbyB0aGVyZSwgIn19",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIsImluZGV4IjowLCJkZWx0YSI6eyJ0eXBlIjoidGV4dF9kZWx0YSIsInRleHQiOiJIZWxsbyB0aGVyZSwgIn19",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIsImluZGV4IjowLCJkZWx0YSI6eyJ0eXBlIjoidGV4dF9kZWx0YSIsInRleHQiOiJIZWxsbyB0aGVyZSwgIn19",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIsImluZGV4IjowLCJkZWx0YSI6eyJ0eXBlIjoidGV4dF9kZWx0YSIsInRleHQiOiJIZWxsbyB0aGVyZSwgIn19",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19kZWx0YSIsImluZGV4IjowLCJkZWx0YSI6eyJ0eXBlIjoidGV4dF9kZWx0YSIsInRleHQiOiJIZWxsbyB0aGVyZSwgIn19",
    "eyJ0eXBlIjoiY29udGVudF9ibG9ja19zdG9wIiwiaW5kZXgiOjB9",
    "eyJ0eXBlIjoibWVzc2FnZV9kZWx0YSIsImRlbHRhIjp7InN0b3BfcmVhc29uIjoiZW5kX3R1cm4iLCJzdG9wX3NlcXVlbmNlIjpudWxsfSwidXNhZ2UiOnsib3V0cHV0X3Rva2VucyI6OX19",
    "eyJ0eXBlIjoibWVzc2FnZV9zdG9wIn0=",
];

#[test]
#[ignore]
fn translated_bedrock_cost() {
    let n: usize = std::env::var("LLM_FAILOVER_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let gw = Gateway::new(BEDROCK);
    let text = "word ".repeat(180);
    let messages = format!(
        r#""messages":[{{"role":"system","content":"be brief"}},{{"role":"user","content":"{text}"}}]"#
    );
    let json_body = format!(r#"{{"model":"gpt-4o","max_tokens":64,{messages}}}"#);
    let stream_body = format!(r#"{{"model":"gpt-4o","stream":true,"max_tokens":64,{messages}}}"#);
    let frames: Vec<u8> = EVENTS.iter().flat_map(|e| chunk(e)).collect();
    let json = || Provider::Answer(200, vec![("content-type", "application/json")], ANSWER);
    for _ in 0..n {
        let r = gw.request(&[], &json_body, &[json()]);
        assert_eq!(r.status, 200);
        let r = gw.request(&[], &stream_body, &[event_stream(frames.clone())]);
        assert!(std::str::from_utf8(&r.body)
            .unwrap()
            .ends_with("data: [DONE]\n\n"));
    }
}

const CHAT_PROVIDER: &str = r#"{
    "providers": [{"name": "oai", "cluster": "co", "api": "openai"}],
    "chains": [{"name": "claude", "models": ["claude-*"],
        "providers": [{"provider": "oai", "model": "gpt-4o"}]}]
}"#;

const CHAT_ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from gpt"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;

/// Not a test: what an Anthropic Messages caller served by an OpenAI Chat provider costs
/// through both roles (ignored; run by hand, as [`translated_bedrock_cost`]): its request
/// (about 1 KB) translated to Chat, the answer back to Messages, as JSON and as a stream
/// (`LLM_FAILOVER_BENCH_KIND=json` or `stream`: only that one).
///   cargo test --release -p llm-failover --lib translated_messages_on_chat_cost -- --ignored
#[test]
#[ignore]
fn translated_messages_on_chat_cost() {
    let n: usize = std::env::var("LLM_FAILOVER_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let gw = Gateway::new(CHAT_PROVIDER);
    let text = "word ".repeat(180);
    let messages =
        format!(r#""system":"be brief","messages":[{{"role":"user","content":"{text}"}}]"#);
    let json_body = format!(r#"{{"model":"claude-x","max_tokens":64,{messages}}}"#);
    let stream_body = format!(r#"{{"model":"claude-x","stream":true,"max_tokens":64,{messages}}}"#);
    let chunk = |delta: &str, finish: &str| {
        format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n")
    };
    let mut stream = chunk(r#"{"role":"assistant","content":""}"#, "null");
    for _ in 0..8 {
        stream += &chunk(r#"{"content":"Hello there, "}"#, "null");
    }
    stream += &chunk("{}", r#""stop""#);
    stream += "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":9,\"total_tokens\":12}}\n\ndata: [DONE]\n\n";
    let stream: &'static str = Box::leak(stream.into_boxed_str());
    let path = [
        (":path", "/v1/messages"),
        ("anthropic-version", "2023-06-01"),
    ];
    let json = || Provider::Answer(200, vec![("content-type", "application/json")], CHAT_ANSWER);
    let sse = || Provider::Answer(200, vec![("content-type", "text/event-stream")], stream);
    let kind = std::env::var("LLM_FAILOVER_BENCH_KIND").unwrap_or_default();
    for _ in 0..n {
        if kind != "stream" {
            let r = gw.request(&path, &json_body, &[json()]);
            assert_eq!(r.status, 200);
        }
        if kind != "json" {
            let r = gw.request(&path, &stream_body, &[sse()]);
            assert!(std::str::from_utf8(&r.body)
                .unwrap()
                .ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        }
    }
}

const MESSAGES_PROVIDER: &str = r#"{
    "providers": [{"name": "claude", "cluster": "ca", "api": "anthropic"}],
    "chains": [{"name": "gpt", "models": ["gpt-*"],
        "providers": [{"provider": "claude", "model": "claude-x"}]}]
}"#;

/// Not a test: what an OpenAI Chat caller served by an Anthropic Messages provider costs
/// through both roles (ignored; run by hand, as [`translated_bedrock_cost`]): its request
/// (about 1 KB) translated to Messages, the answer back to Chat, as JSON and as a stream of 13
/// events (`LLM_FAILOVER_BENCH_KIND=json` or `stream`: only that one).
///   cargo test --release -p llm-failover --lib translated_chat_on_messages_cost -- --ignored
#[test]
#[ignore]
fn translated_chat_on_messages_cost() {
    let n: usize = std::env::var("LLM_FAILOVER_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let gw = Gateway::new(MESSAGES_PROVIDER);
    let text = "word ".repeat(180);
    let messages = format!(
        r#""messages":[{{"role":"system","content":"be brief"}},{{"role":"user","content":"{text}"}}]"#
    );
    let json_body = format!(r#"{{"model":"gpt-4o","max_tokens":64,{messages}}}"#);
    let stream_body = format!(
        r#"{{"model":"gpt-4o","stream":true,"stream_options":{{"include_usage":true}},"max_tokens":64,{messages}}}"#
    );
    let ev = |name: &str, data: &str| format!("event: {name}\ndata: {data}\n\n");
    let mut stream = ev(
        "message_start",
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}"#,
    );
    stream += &ev(
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    for _ in 0..8 {
        stream += &ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello there, "}}"#,
        );
    }
    stream += &ev(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    stream += &ev(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}"#,
    );
    stream += &ev("message_stop", r#"{"type":"message_stop"}"#);
    let stream: &'static str = Box::leak(stream.into_boxed_str());
    let json = || Provider::Answer(200, vec![("content-type", "application/json")], ANSWER);
    let sse = || Provider::Answer(200, vec![("content-type", "text/event-stream")], stream);
    let kind = std::env::var("LLM_FAILOVER_BENCH_KIND").unwrap_or_default();
    for _ in 0..n {
        if kind != "stream" {
            let r = gw.request(&[], &json_body, &[json()]);
            assert_eq!(r.status, 200);
            assert!(std::str::from_utf8(&r.body)
                .unwrap()
                .contains("chat.completion"));
        }
        if kind != "json" {
            let r = gw.request(&[], &stream_body, &[sse()]);
            assert!(std::str::from_utf8(&r.body)
                .unwrap()
                .ends_with("data: [DONE]\n\n"));
        }
    }
}

/// The bench's answer (bench/module_bench.mjs): a Chat completion with its usage.
const BENCH_ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}"#;

/// The bench's stream: three chunks, the last with the usage the request asked for.
const BENCH_STREAM: [&str; 3] = [
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"total_tokens\":11}}\n\ndata: [DONE]\n\n",
];

/// Not a test: the same-API success path through both roles (ignored; run by hand, as
/// [`translated_bedrock_cost`], under callgrind to see where the module's instructions go): an
/// OpenAI Chat caller on an OpenAI provider, module_bench's answers, JSON and stream
/// (`LLM_FAILOVER_BENCH_KIND=json` or `stream`: only that one).
///   cargo test --release -p llm-failover --lib same_api_cost -- --ignored
#[test]
#[ignore]
fn same_api_cost() {
    let n: usize = std::env::var("LLM_FAILOVER_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let gw = Gateway::new(
        r#"{"providers": [{"name": "primary", "cluster": "c1"}, {"name": "secondary", "cluster": "c2"}],
            "chains": [{"name": "default", "providers": ["primary", "secondary"]}]}"#,
    );
    let text = "x".repeat(900);
    let json_body = format!(
        r#"{{"model":"gpt-4o-mini","temperature":0.2,"messages":[{{"role":"user","content":"{text}"}}]}}"#
    );
    let stream_body = format!(
        r#"{{"model":"gpt-4o-mini","stream":true,"stream_options":{{"include_usage":true}},"messages":[{{"role":"user","content":"{text}"}}]}}"#
    );
    let json = || {
        Provider::Answer(
            200,
            vec![("content-type", "application/json")],
            BENCH_ANSWER,
        )
    };
    let sse = || {
        Provider::Chunks(
            vec![("content-type", "text/event-stream")],
            BENCH_STREAM.to_vec(),
            Ending::Body,
        )
    };
    let kind = std::env::var("LLM_FAILOVER_BENCH_KIND").unwrap_or_default();
    for _ in 0..n {
        if kind != "stream" {
            let r = gw.request(&[], &json_body, &[json()]);
            assert_eq!(r.status, 200);
        }
        if kind != "json" {
            let r = gw.request(&[], &stream_body, &[sse()]);
            assert_eq!(r.status, 200);
        }
    }
}
