use super::*;
use proptest::prelude::*;

/// A Bedrock chunk message written by Python's `zlib.crc32` and checked with botocore's own
/// `EventStreamBuffer` (an encoder independent of this module's CRC): a `content_block_delta`
/// with the text "Hi".
const FIXTURE_HEX: &str = "000000e50000004b64180fde0b3a6576656e742d747970650700056368756e6b0d3a636f6e74656e742d747970650700106170706c69636174696f6e2f6a736f6e0d3a6d6573736167652d747970650700056576656e747b226279746573223a202265794a306558426c496a6f695932397564475675644639696247396a6131396b5a57783059534973496d6c755a475634496a6f774c434a6b5a5778305953493665794a306558426c496a6f69644756346446396b5a57783059534973496e526c654851694f694a4961534a3966513d3d222c202270223a202261626364227ddcfedbdc";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let word = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A message with string headers (and one of each other type, which the decoder skips).
fn message(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    // Headers of the other types come first: the decoder must skip each by its size.
    for (kind, size) in [
        (0u8, 0usize),
        (2, 1),
        (3, 2),
        (4, 4),
        (5, 8),
        (8, 8),
        (9, 16),
    ] {
        h.push(3);
        h.extend_from_slice(b"x-n");
        h.push(kind);
        h.extend(std::iter::repeat(0xAB).take(size));
    }
    h.push(3);
    h.extend_from_slice(b"x-b");
    h.push(6);
    h.extend_from_slice(&2u16.to_be_bytes());
    h.extend_from_slice(b"\x00\x01");
    for (name, value) in headers {
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    let total = (16 + h.len() + payload.len()) as u32;
    let mut m = Vec::new();
    m.extend_from_slice(&total.to_be_bytes());
    m.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let prelude_crc = crc32(&m);
    m.extend_from_slice(&prelude_crc.to_be_bytes());
    m.extend_from_slice(&h);
    m.extend_from_slice(payload);
    let crc = crc32(&m);
    m.extend_from_slice(&crc.to_be_bytes());
    m
}

fn chunk(event: &str) -> Vec<u8> {
    let payload = format!(
        r#"{{"bytes":"{}","p":"abcdefgh"}}"#,
        encode_base64(event.as_bytes())
    );
    message(
        &[
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.as_bytes(),
    )
}

fn exception(kind: &str, message_text: &str) -> Vec<u8> {
    let payload = format!(r#"{{"message":"{message_text}"}}"#);
    message(
        &[(":exception-type", kind), (":message-type", "exception")],
        payload.as_bytes(),
    )
}

fn unframe_all(chunks: &[&[u8]]) -> String {
    let mut u = Unframer::default();
    let mut out = Vec::new();
    for c in chunks {
        u.push(c, &mut out);
    }
    u.finish(&mut out);
    String::from_utf8(out).unwrap()
}

/// A whole Anthropic stream as Bedrock sends it.
fn stream() -> Vec<u8> {
    let events = [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":5}}"#,
    ];
    events.iter().flat_map(|e| chunk(e)).collect()
}

#[test]
fn crc32_matches_the_standard_check_value() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn base64_round_trips_every_length() {
    let data: Vec<u8> = (0..=255u8).collect();
    for len in 0..40 {
        let text = encode_base64(&data[..len]);
        assert_eq!(
            decode_base64(text.as_bytes()).unwrap(),
            &data[..len],
            "{text}"
        );
    }
    assert_eq!(decode_base64(b"aGk=").unwrap(), b"hi");
    assert!(decode_base64(b"a").is_none());
    assert!(decode_base64(b"aGk*").is_none());
}

#[test]
fn a_fixture_written_by_botocore_s_encoding_decodes() {
    let out = unframe_all(&[&unhex(FIXTURE_HEX)]);
    assert_eq!(
        out,
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
    );
}

#[test]
fn a_whole_stream_becomes_anthropic_events_in_order() {
    let out = unframe_all(&[&stream()]);
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(out.contains("data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"));
    assert_eq!(out.matches("\n\n").count(), 6);
}

proptest! {
    /// Cutting the stream at any two byte boundaries gives the same events as reading it whole.
    #[test]
    fn any_chunking_gives_the_same_events(a in 0usize..2000, b in 0usize..2000) {
        let s = stream();
        let whole = unframe_all(&[&s]);
        let (a, b) = (a.min(s.len()), b.min(s.len()));
        let (a, b) = (a.min(b), a.max(b));
        prop_assert_eq!(unframe_all(&[&s[..a], &s[a..b], &s[b..]]), whole);
    }
}

#[test]
fn every_single_cut_and_byte_by_byte_give_the_same_events() {
    let s = stream();
    let whole = unframe_all(&[&s]);
    for cut in 0..=s.len() {
        assert_eq!(unframe_all(&[&s[..cut], &s[cut..]]), whole, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = s.chunks(1).collect();
    assert_eq!(unframe_all(&bytes), whole);
}

#[test]
fn an_exception_becomes_an_error_event_the_classifier_reads() {
    let out = unframe_all(&[&exception("throttlingException", "Too many requests")]);
    assert_eq!(
        out,
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Too many requests\"}}\n\n"
    );
    assert!(matches!(
        crate::failing_answer::first_event(out.as_bytes(), false),
        crate::failing_answer::StreamStart::Error(_)
    ));
    let out = unframe_all(&[&exception("serviceUnavailableException", "busy")]);
    assert!(out.contains("\"overloaded_error\""), "{out}");
    let out = unframe_all(&[&exception("modelStreamErrorException", "x")]);
    assert!(out.contains("\"api_error\""), "{out}");
}

#[test]
fn an_error_message_uses_its_headers() {
    let m = message(
        &[
            (":message-type", "error"),
            (":error-code", "InternalFailure"),
            (":error-message", "boom"),
        ],
        b"",
    );
    let out = unframe_all(&[&m]);
    assert!(out.starts_with("event: error\n"), "{out}");
    assert!(out.contains("\"message\":\"boom\""), "{out}");
}

#[test]
fn a_damaged_message_ends_the_stream_with_an_error_and_nothing_after() {
    let good = chunk(r#"{"type":"ping"}"#);
    for at in [2usize, 9, 20, good.len() - 6, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        let out = unframe_all(&[&good, &bad, &good]);
        assert!(out.starts_with("event: ping\n"), "{at}: {out}");
        assert_eq!(out.matches("event: ").count(), 2, "{at}: {out}");
        assert!(
            out.ends_with("\n\n") && out.contains("event: error\n"),
            "{at}: {out}"
        );
    }
}

#[test]
fn a_stream_cut_inside_a_message_ends_with_an_error() {
    let s = stream();
    let out = unframe_all(&[&s[..s.len() - 3]]);
    assert_eq!(out.matches("event: ").count(), 6);
    assert!(out.ends_with("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the event stream ended inside a message\"}}\n\n"));
}

#[test]
fn a_chunk_that_is_not_base64_json_is_an_error() {
    let m = message(
        &[(":event-type", "chunk"), (":message-type", "event")],
        br#"{"bytes":"!!!"}"#,
    );
    let out = unframe_all(&[&m]);
    assert!(out.contains("not base64"), "{out}");
    let m = message(
        &[(":event-type", "chunk"), (":message-type", "event")],
        format!(r#"{{"bytes":"{}"}}"#, encode_base64(b"[1]")).as_bytes(),
    );
    assert!(unframe_all(&[&m]).contains("event: error"));
}

#[test]
fn a_line_break_inside_the_event_json_stays_on_one_data_line() {
    let out = unframe_all(&[&chunk("{\"type\":\"ping\",\n\"x\":1}")]);
    assert_eq!(out, "event: ping\ndata: {\"type\":\"ping\", \"x\":1}\n\n");
}

#[test]
fn impossible_lengths_are_refused_before_waiting_for_them() {
    let mut m = Vec::new();
    m.extend_from_slice(&(64u32 * 1024 * 1024).to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    let crc = crc32(&m);
    m.extend_from_slice(&crc.to_be_bytes());
    assert!(split_message(&m).is_err());
    assert_eq!(split_message(&m[..11]), Ok(None));
}

/// A Converse stream as Bedrock frames it: each event's payload is its JSON, its type in
/// `:event-type`.
fn converse_stream() -> Vec<u8> {
    let events = [
        ("messageStart", r#"{"p":"abc","role":"assistant"}"#),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Bon"},"p":"a"}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"jour"},"p":"ab"}"#,
        ),
        ("contentBlockStop", r#"{"contentBlockIndex":0,"p":"abcd"}"#),
        ("messageStop", r#"{"p":"ab","stopReason":"end_turn"}"#),
        (
            "metadata",
            r#"{"metrics":{"latencyMs":3},"p":"a","usage":{"inputTokens":7,"outputTokens":2,"totalTokens":9}}"#,
        ),
    ];
    events
        .iter()
        .flat_map(|(kind, payload)| {
            message(
                &[
                    (":event-type", kind),
                    (":content-type", "application/json"),
                    (":message-type", "event"),
                ],
                payload.as_bytes(),
            )
        })
        .collect()
}

#[test]
fn converse_events_become_sse_events_under_their_type_cut_anywhere() {
    let s = converse_stream();
    let whole = unframe_all(&[&s]);
    assert!(
        whole.starts_with("event: messageStart\ndata: {\"p\":\"abc\",\"role\":\"assistant\"}\n\nevent: contentBlockDelta\n"),
        "{whole}"
    );
    assert!(whole.ends_with("\"totalTokens\":9}}\n\n"), "{whole}");
    for cut in 0..=s.len() {
        assert_eq!(unframe_all(&[&s[..cut], &s[cut..]]), whole, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = s.chunks(1).collect();
    assert_eq!(unframe_all(&bytes), whole);
    // The unwrapped stream is what the Converse decoder reads: a Chat caller gets its text,
    // its stop and its usage, whatever the chunking of the AWS framing.
    let translate = |chunks: &[&[u8]]| {
        let mut u = Unframer::default();
        let mut t = crate::translate::StreamTranslator::new(
            crate::translate::Api::Converse,
            crate::translate::Api::OpenAiChat,
            crate::translate::StreamContext {
                created: 1,
                include_usage: true,
            },
        )
        .unwrap();
        let mut out = Vec::new();
        for (k, c) in chunks.iter().enumerate() {
            let mut sse = Vec::new();
            u.push(c, &mut sse);
            t.push(&sse, k + 1 == chunks.len(), &mut out);
        }
        assert!(t.finished());
        String::from_utf8(out).unwrap()
    };
    let chat = translate(&[&s]);
    assert!(chat.contains(r#""content":"Bon""#), "{chat}");
    assert!(chat.contains(r#""finish_reason":"stop""#), "{chat}");
    assert!(
        chat.contains(r#""prompt_tokens":7,"completion_tokens":2"#),
        "{chat}"
    );
    assert_eq!(translate(&bytes), chat);
}

#[test]
fn a_converse_exception_becomes_an_error_event_the_classifier_reads() {
    let mut s = message(
        &[(":event-type", "messageStart"), (":message-type", "event")],
        br#"{"role":"assistant"}"#,
    );
    s.extend(exception("throttlingException", "Too many tokens"));
    let out = unframe_all(&[&s]);
    assert!(
        out.contains(
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\""
        ),
        "{out}"
    );
    // Held for its first output, the stream fails over on the error (messageStart is no
    // output).
    assert!(matches!(
        crate::failing_answer::first_output(out.as_bytes(), true),
        crate::failing_answer::StreamStart::Error(_)
    ));
}
