//! Converse's edge cases beside the fixtures (`fixtures/*-to-converse/`).

use crate::translate::{check, request, Api, RequestContext, StreamContext, StreamTranslator};
use crate::translate::{field, Untranslatable};

fn cx() -> RequestContext<'static> {
    RequestContext {
        model: "meta.llama3-3-70b-instruct-v1:0",
        default_max_tokens: 4096,
        stream: false,
    }
}

#[test]
fn what_converse_cannot_carry_is_refused_when_planning() {
    // An image by URL (Converse takes bytes only), an image type it does not take.
    let by_url = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}"#;
    let bmp = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/bmp;base64,Qk0="}}]}]}"#;
    for body in [&by_url[..], bmp] {
        assert_eq!(
            check(Api::OpenAiChat, Api::Converse, body),
            Err(field("image_url"))
        );
        assert_eq!(
            request(Api::OpenAiChat, Api::Converse, body, &cx()),
            Err(field("image_url"))
        );
    }
    let ok = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/"}}]}]}"#;
    let sent = request(Api::OpenAiChat, Api::Converse, ok, &cx()).unwrap();
    assert_eq!(
        String::from_utf8(sent).unwrap(),
        r#"{"messages":[{"role":"user","content":[{"image":{"format":"jpeg","source":{"bytes":"/9j/"}}}]}]}"#
    );
    assert_eq!(
        check(Api::OpenAiChat, Api::Converse, b"[1]"),
        Err(Untranslatable::NotJson)
    );
}

#[test]
fn tool_use_ids_are_ones_converse_takes() {
    // A Gemini-signed id loses its signature; a long id is cut at 64; the call and its result
    // get the same id.
    let long = "call_".to_string() + &"x".repeat(80);
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}},{{"role":"assistant","tool_calls":[{{"id":"call_1__thought__AbC","type":"function","function":{{"name":"f","arguments":"{{}}"}}}},{{"id":"{long}","type":"function","function":{{"name":"f","arguments":""}}}}]}},{{"role":"tool","tool_call_id":"call_1__thought__AbC","content":"a"}},{{"role":"tool","tool_call_id":"{long}","content":""}}],"tools":[{{"type":"function","function":{{"name":"f"}}}}]}}"#
    );
    let sent = request(Api::OpenAiChat, Api::Converse, body.as_bytes(), &cx()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&sent).unwrap();
    let m = &v["messages"];
    assert_eq!(m[1]["content"][0]["toolUse"]["toolUseId"], "call_1");
    let cut = &long[..64];
    assert_eq!(m[1]["content"][1]["toolUse"]["toolUseId"], cut);
    assert_eq!(
        m[1]["content"][1]["toolUse"]["input"],
        serde_json::json!({})
    );
    assert_eq!(m[2]["content"][0]["toolResult"]["toolUseId"], "call_1");
    assert_eq!(m[2]["content"][1]["toolResult"]["toolUseId"], cut);
    // An empty result has no blank text block (Converse refuses one).
    assert_eq!(
        m[2]["content"][1]["toolResult"]["content"],
        serde_json::json!([])
    );
    assert_eq!(
        v["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"]["type"],
        "object"
    );
}

#[test]
fn a_stream_whose_metadata_never_came_still_ends_with_its_stop() {
    let stream = concat!(
        "event: messageStart\ndata: {\"role\":\"assistant\"}\n\n",
        "event: contentBlockDelta\ndata: {\"contentBlockIndex\":0,\"delta\":{\"text\":\"Hi\"}}\n\n",
        "event: contentBlockStop\ndata: {\"contentBlockIndex\":0}\n\n",
        "event: messageStop\ndata: {\"stopReason\":\"max_tokens\"}\n\n",
    );
    let mut t =
        StreamTranslator::new(Api::Converse, Api::OpenAiChat, StreamContext::default()).unwrap();
    let mut out = Vec::new();
    assert!(
        t.push(stream.as_bytes(), false, &mut out),
        "the end is owed"
    );
    t.push(b"", true, &mut out);
    let out = String::from_utf8(out).unwrap();
    assert!(t.finished(), "{out}");
    assert!(out.contains(r#""finish_reason":"length""#), "{out}");
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
}

#[test]
fn no_caller_speaks_converse() {
    assert!(!Api::Converse.is_caller());
    assert!(
        StreamTranslator::new(Api::OpenAiChat, Api::Converse, StreamContext::default()).is_none()
    );
    assert_eq!(
        request(Api::Converse, Api::OpenAiChat, b"{}", &cx()),
        Err(field("converse"))
    );
}
