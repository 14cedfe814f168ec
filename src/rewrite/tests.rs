//! Unit tests of `rewrite` (they also run compiled to wasm).

use super::scanner::find_string_special;
use super::*;

fn model_of(body: &str) -> Result<Option<String>, BodyError> {
    let scan = scan_top_level(body.as_bytes())?;
    Ok(model_value(body.as_bytes(), &scan)?.map(Cow::into_owned))
}

fn rewritten(body: &str, new_model: Option<&str>, drop: bool) -> Option<String> {
    let scan = scan_top_level(body.as_bytes()).unwrap();
    let out = rewrite(body.as_bytes(), &scan, new_model, drop)?;
    assert_eq!(out.capacity(), out.len(), "exact capacity");
    Some(String::from_utf8(out).unwrap())
}

fn err(body: &[u8]) -> BodyError {
    scan_top_level(body).unwrap_err()
}

#[test]
fn finds_model_anywhere_at_top_level() {
    assert_eq!(
        model_of(r#"{"model":"gpt-4o"}"#).unwrap().as_deref(),
        Some("gpt-4o")
    );
    let sdk = r#"{"messages":[{"role":"user","content":"hi"}],"model":"gpt-4o","stream":true}"#;
    assert_eq!(model_of(sdk).unwrap().as_deref(), Some("gpt-4o"));
    let last = r#"{"temperature":0.5e-3,"n":-1,"x":null,"y":[true,false,{}],"model":"m"}"#;
    assert_eq!(model_of(last).unwrap().as_deref(), Some("m"));
    assert_eq!(model_of(r#"{"messages":[]}"#).unwrap(), None);
    assert_eq!(model_of("{}").unwrap(), None);
}

#[test]
fn whitespace_everywhere_json_allows_it() {
    let body =
        "\r\n\t {\n \"messages\" :\t[ 1 , { \"a\" : [ ] } ] ,\r\n \"model\"\n:\n\"m\" \t}\n ";
    assert_eq!(model_of(body).unwrap().as_deref(), Some("m"));
    let scan = scan_top_level(body.as_bytes()).unwrap();
    assert_eq!(
        &body[scan.model.unwrap().start..scan.model.unwrap().end],
        "\"m\""
    );
}

#[test]
fn nested_model_members_are_data() {
    let body = r#"{"messages":[{"model":"x","content":"\"model\":\"y\""}],"meta":{"model":"z","l":[{"model":"w"}]},"model":"real"}"#;
    assert_eq!(model_of(body).unwrap().as_deref(), Some("real"));
    assert_eq!(model_of(r#"{"a":{"model":"x"}}"#).unwrap(), None);
    // "model" as a value, not a name.
    assert_eq!(model_of(r#"{"x":"model","y":["model"]}"#).unwrap(), None);
}

#[test]
fn string_specials_are_found_in_every_position_of_a_word() {
    for len in 0..40 {
        for special in [b'"', b'\\', b'\n', 0x1f, 0x00] {
            for at in 0..len {
                let mut bytes = vec![b'a'; len];
                bytes[at] = special;
                assert_eq!(
                    find_string_special(&bytes),
                    Some(at),
                    "{len} {at} {special}"
                );
            }
        }
        let plain: Vec<u8> = (0..len)
            .map(|i| [b'x', 0x20, 0x7f, 0xc3, 0xff, b'!'][i % 6])
            .collect();
        assert_eq!(find_string_special(&plain), None, "{plain:?}");
    }
}

#[test]
fn strings_with_escapes_are_skipped() {
    let body = r#"{"a":"he said \"model\": \"x\\","b":"\\","c":"\u0022\ud83d\ude00\/\b\f\n\r\t","model":"m"}"#;
    assert_eq!(model_of(body).unwrap().as_deref(), Some("m"));
    let nested = r#"{"a":["\\\"",{"k\"ey":"v\\"}],"model":"m"}"#;
    assert_eq!(model_of(nested).unwrap().as_deref(), Some("m"));
}

#[test]
fn model_value_borrows_unless_escaped() {
    let body = br#"{"model":"gpt-4o"}"#;
    let scan = scan_top_level(body).unwrap();
    assert!(matches!(
        model_value(body, &scan),
        Ok(Some(Cow::Borrowed("gpt-4o")))
    ));
    let body = br#"{"model":"a\"b\\c\u00e9\ud83d\ude00\/\n"}"#;
    let scan = scan_top_level(body).unwrap();
    let m = model_value(body, &scan).unwrap().unwrap();
    assert!(matches!(m, Cow::Owned(_)));
    assert_eq!(m, "a\"b\\c\u{e9}\u{1F600}/\n");
    assert_eq!(
        model_of(r#"{"model":"héllo"}"#).unwrap().as_deref(),
        Some("héllo")
    );
}

#[test]
fn model_with_lone_surrogate_is_refused() {
    for body in [
        r#"{"model":"ab\ud800"}"#,
        r#"{"model":"ab\ud800x"}"#,
        r#"{"model":"ab\ud800\n"}"#,
        r#"{"model":"ab\ud800\u0041"}"#,
        r#"{"model":"ab\udc00"}"#,
    ] {
        assert_eq!(
            model_of(body),
            Err(BodyError::InvalidModelEscape { at: 12 }),
            "{body}"
        );
    }
    // Outside the model, lone surrogates are left alone.
    assert_eq!(
        model_of(r#"{"x":"\ud800","model":"m"}"#)
            .unwrap()
            .as_deref(),
        Some("m")
    );
}

#[test]
fn escaped_member_names_are_decoded() {
    assert_eq!(
        model_of(r#"{"mod\u0065l":"m"}"#).unwrap().as_deref(),
        Some("m")
    );
    assert_eq!(
        model_of(r#"{"\u006D\u006f\u0064\u0065\u006c":"m"}"#)
            .unwrap()
            .as_deref(),
        Some("m")
    );
    assert_eq!(model_of(r#"{"mod\u0065":"m"}"#).unwrap(), None);
    assert_eq!(model_of(r#"{"mod\u0065ls":"m"}"#).unwrap(), None);
    assert_eq!(model_of(r#"{"mo\"del":"m"}"#).unwrap(), None);
    let body = r#"{"fallback\u0073":["x"],"model":"m"}"#;
    let scan = scan_top_level(body.as_bytes()).unwrap();
    assert!(scan.fallbacks.is_some());
    assert_eq!(rewritten(body, None, true).unwrap(), r#"{"model":"m"}"#);
}

#[test]
fn duplicate_members_are_refused() {
    assert_eq!(
        err(br#"{"model":"a","model":"b"}"#),
        BodyError::DuplicateMember {
            name: "model",
            at: 13
        }
    );
    assert_eq!(
        err(br#"{"model":"a","mod\u0065l":"b"}"#),
        BodyError::DuplicateMember {
            name: "model",
            at: 13
        }
    );
    assert_eq!(
        err(br#"{"fallbacks":[],"model":"a","fallbacks":["b"]}"#),
        BodyError::DuplicateMember {
            name: "fallbacks",
            at: 28
        }
    );
    // Nested duplicates are data.
    assert!(scan_top_level(br#"{"a":{"model":1,"model":2},"model":"m"}"#).is_ok());
    let msg = err(br#"{"model":"a","model":"b"}"#).to_string();
    assert_eq!(
        msg,
        "request body has more than one top-level \"model\" member (the second one at byte \
         13); send it once"
    );
}

#[test]
fn model_must_be_a_string() {
    for (body, found) in [
        (r#"{"model":1}"#, "a number"),
        (r#"{"model":-0.5}"#, "a number"),
        (r#"{"model":null}"#, "null"),
        (r#"{"model":true}"#, "a boolean"),
        (r#"{"model":["a"]}"#, "an array"),
        (r#"{"model":{"name":"a"}}"#, "an object"),
    ] {
        assert_eq!(
            err(body.as_bytes()),
            BodyError::ModelNotString { found, at: 9 },
            "{body}"
        );
    }
    assert_eq!(
        err(br#"{"model":42}"#).to_string(),
        "request body's \"model\" must be a string naming the model, found a number at byte 9"
    );
    // Bad JSON in the model value is reported as bad JSON.
    assert!(matches!(err(br#"{"model":nul}"#), BodyError::Syntax { .. }));
}

#[test]
fn body_must_be_an_object() {
    for (body, found) in [
        ("[]", "an array"),
        (" [{\"model\":\"m\"}]", "an array"),
        ("\"model\"", "a string"),
        ("12", "a number"),
        ("-1", "a number"),
        ("null", "null"),
        ("true", "a boolean"),
    ] {
        assert_eq!(
            err(body.as_bytes()),
            BodyError::NotObject { found },
            "{body}"
        );
    }
    assert_eq!(err(b""), BodyError::Empty);
    assert_eq!(err(b" \r\n\t"), BodyError::Empty);
    assert_eq!(err(b"\xEF\xBB\xBF{}").to_string(),
        "request body is not valid JSON: expected '{' (the body must be a JSON object), found byte 0xef at byte 0");
    assert_eq!(
        err(b"[1]").to_string(),
        "request body must be a JSON object, found an array"
    );
}

#[test]
fn truncated_bodies_are_refused() {
    let body = r#" {"messages":[{"role":"user","content":"h\"i\u00e9"}],"n":-1.5e+3,"t":true,"model":"gpt-4o","fallbacks":[null,false]} "#;
    assert!(scan_top_level(body.as_bytes()).is_ok());
    let end = body.trim_end().len();
    for cut in 2..end {
        let e = scan_top_level(&body.as_bytes()[..cut]);
        assert!(
            matches!(e, Err(BodyError::Truncated { at, .. }) if at == cut),
            "prefix {cut}: {e:?}"
        );
    }
    assert_eq!(
        err(br#"{"model":"gp"#).to_string(),
        "request body is not valid JSON: the body ends at byte 12, expected the closing '\"' \
         of a string (truncated body?)"
    );
}

#[test]
fn malformed_json_is_refused_with_position() {
    for (body, at) in [
        (r#"{"a":1,}"#, 7),
        (r#"{"a" 1}"#, 5),
        (r#"{'a':1}"#, 1),
        (r#"{a:1}"#, 1),
        (r#"{"a":1} x"#, 8),
        (r#"{"a":1}{}"#, 7),
        (r#"{"a":01}"#, 6),
        (r#"{"a":1.}"#, 7),
        (r#"{"a":.5}"#, 5),
        (r#"{"a":-}"#, 6),
        (r#"{"a":1e}"#, 7),
        (r#"{"a":+1}"#, 5),
        (r#"{"a":tru}"#, 8),
        (r#"{"a":nulL}"#, 8),
        (r#"{"a":[1,]}"#, 8),
        (r#"{"a":[1}"#, 7),
        (r#"{"a":{"b":1]}"#, 11),
        (r#"{"a":{"b"}}"#, 9),
        (r#"{"a":"\x"}"#, 7),
        (r#"{"a":"\u12g4"}"#, 10),
        ("{\"a\":\"tab\there\"}", 9),
        ("{\"a\":\"\u{1f}\"}", 6),
        ("{\"a\":\"\n\"}", 6),
        (r#"{"a":1 2}"#, 7),
        (r#"{"a":[1 2]}"#, 8),
        (r#"{"a":/*c*/1}"#, 5),
        (r#"{"a":NaN}"#, 5),
    ] {
        match err(body.as_bytes()) {
            BodyError::Syntax { at: got, .. } => assert_eq!(got, at, "{body}"),
            other => panic!("{body}: {other:?}"),
        }
    }
    assert_eq!(
        err(br#"{"model" "m"}"#).to_string(),
        "request body is not valid JSON: expected ':' after the member name, found '\"' at byte 9"
    );
    assert_eq!(
        err(b"{\"a\":\"\x01\"}").to_string(),
        "request body is not valid JSON: expected a string character (control characters \
         must be escaped, e.g. \\n), found byte 0x01 at byte 6"
    );
}

#[test]
fn invalid_utf8_is_refused() {
    assert_eq!(
        err(b"{\"model\":\"g\xffp\"}"),
        BodyError::NotUtf8 { at: 11 }
    );
    assert_eq!(err(b"{\"a\":\"\xc3\"}"), BodyError::NotUtf8 { at: 6 });
}

#[test]
fn nesting_limit() {
    let nested = |n: usize| {
        format!(
            "{{\"a\":{}1{},\"model\":\"m\"}}",
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    assert_eq!(model_of(&nested(MAX_DEPTH)).unwrap().as_deref(), Some("m"));
    assert_eq!(
        err(nested(MAX_DEPTH + 1).as_bytes()),
        BodyError::TooDeep { at: 5 + MAX_DEPTH }
    );
    let objects = format!(
        "{{\"a\":{}1{}}}",
        "{\"b\":".repeat(MAX_DEPTH),
        "}".repeat(MAX_DEPTH)
    );
    assert!(scan_top_level(objects.as_bytes()).is_ok());
    // Mixed nesting must close with the matching bracket at every level.
    let mixed = format!("{{\"a\":{}1{}}}", "[{\"b\":".repeat(100), "}]".repeat(100));
    assert!(scan_top_level(mixed.as_bytes()).is_ok());
    let wrong = format!("{{\"a\":{}1{}}}", "[{\"b\":".repeat(100), "]}".repeat(100));
    assert!(matches!(
        scan_top_level(wrong.as_bytes()),
        Err(BodyError::Syntax { .. })
    ));
}

#[test]
fn large_body() {
    let content = "x\\\"y ".repeat(2 * 1024 * 1024); // 10 MiB string with escapes
    let body = format!(r#"{{"messages":[{{"role":"user","content":"{content}"}}],"model":"m"}}"#);
    let scan = scan_top_level(body.as_bytes()).unwrap();
    assert_eq!(
        model_value(body.as_bytes(), &scan).unwrap().as_deref(),
        Some("m")
    );
    let out = rewrite(body.as_bytes(), &scan, Some("provider-m"), true).unwrap();
    assert_eq!(out.len(), body.len() + 9);
    assert!(out.ends_with(br#""model":"provider-m"}"#));
}

#[test]
fn rewrite_returns_none_when_nothing_changes() {
    let body = r#"{"messages":[],"model":"gpt-4o"}"#;
    assert_eq!(rewritten(body, None, false), None);
    assert_eq!(rewritten(body, None, true), None); // no fallbacks to drop
    assert_eq!(rewritten(body, Some("gpt-4o"), true), None);
    // Same model written with escapes: unchanged, bytes kept as sent.
    assert_eq!(
        rewritten(r#"{"model":"gpt\u002d4o"}"#, Some("gpt-4o"), false),
        None
    );
    // No model member: none is inserted.
    assert_eq!(rewritten(r#"{"messages":[]}"#, Some("x"), false), None);
    // Fallbacks kept unless asked.
    assert_eq!(
        rewritten(r#"{"fallbacks":[],"model":"a"}"#, Some("a"), false),
        None
    );
}

#[test]
fn rewrite_replaces_only_the_model_token() {
    let body = "{\"messages\":[{\"model\":\"x\"}] , \"model\" : \"gpt-4o\" ,\"n\":1.0e3}";
    assert_eq!(
        rewritten(body, Some("openai/gpt-4o-2024-08-06"), false).unwrap(),
        "{\"messages\":[{\"model\":\"x\"}] , \"model\" : \"openai/gpt-4o-2024-08-06\" ,\"n\":1.0e3}"
    );
    assert_eq!(
        rewritten(r#"{"model":"a\"b"}"#, Some("c"), false).unwrap(),
        r#"{"model":"c"}"#
    );
    assert_eq!(
        rewritten(r#"{"model":""}"#, Some("c"), false).unwrap(),
        r#"{"model":"c"}"#
    );
    assert_eq!(
        rewritten(r#"{"model":"c"}"#, Some(""), false).unwrap(),
        r#"{"model":""}"#
    );
}

#[test]
fn rewrite_escapes_the_new_model() {
    let weird = "q\"b\\s/n\nr\rt\tb\u{8}f\u{c}z\u{0}u\u{1f}d\u{7f}é😀";
    let out = rewritten(r#"{"model":"a"}"#, Some(weird), false).unwrap();
    assert_eq!(
        out,
        format!(r#"{{"model":{}}}"#, serde_json::to_string(weird).unwrap())
    );
    assert_eq!(
        out,
        "{\"model\":\"q\\\"b\\\\s/n\\nr\\rt\\tb\\bf\\fz\\u0000u\\u001fd\u{7f}é😀\"}"
    );
    assert_eq!(model_of(&out).unwrap().as_deref(), Some(weird));
}

#[test]
fn rewrite_drops_fallbacks_in_every_position() {
    for (body, want) in [
        (r#"{"fallbacks":[1]}"#, "{}"),
        (r#"{ "fallbacks" : [1] }"#, "{  }"),
        (r#"{"fallbacks":["a","b"],"model":"m"}"#, r#"{"model":"m"}"#),
        (
            r#"{"fallbacks":{"x":[]} , "model":"m"}"#,
            r#"{ "model":"m"}"#,
        ),
        (r#"{"model":"m","fallbacks":null}"#, r#"{"model":"m"}"#),
        (r#"{"model":"m" , "fallbacks":null }"#, r#"{"model":"m"  }"#),
        (r#"{"a":1,"fallbacks":"x","b":2}"#, r#"{"a":1,"b":2}"#),
        (r#"{"a":1, "fallbacks":"x", "b":2}"#, r#"{"a":1, "b":2}"#),
        (
            r#"{"a":{"fallbacks":1},"fallbacks":2}"#,
            r#"{"a":{"fallbacks":1}}"#,
        ),
    ] {
        let out = rewritten(body, None, true).unwrap();
        assert_eq!(out, want, "{body}");
        assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
        assert_eq!(scan_top_level(out.as_bytes()).unwrap().fallbacks, None);
    }
    // Nested "fallbacks" is data.
    assert_eq!(rewritten(r#"{"a":{"fallbacks":1}}"#, None, true), None);
}

#[test]
fn rewrite_model_and_fallbacks_together() {
    for (body, want) in [
        (r#"{"fallbacks":["x"],"model":"a"}"#, r#"{"model":"b"}"#),
        (r#"{"model":"a","fallbacks":["x"]}"#, r#"{"model":"b"}"#),
        (
            r#"{"model":"a","fallbacks":["x"],"n":1}"#,
            r#"{"model":"b","n":1}"#,
        ),
        (
            r#"{"n":1,"fallbacks":["x"],"model":"a"}"#,
            r#"{"n":1,"model":"b"}"#,
        ),
        (
            r#"{"fallbacks":["x"],"n":1,"model":"a"}"#,
            r#"{"n":1,"model":"b"}"#,
        ),
    ] {
        assert_eq!(rewritten(body, Some("b"), true).unwrap(), want, "{body}");
    }
    // Same model, fallbacks dropped.
    assert_eq!(
        rewritten(r#"{"model":"a","fallbacks":[]}"#, Some("a"), true).unwrap(),
        r#"{"model":"a"}"#
    );
}

#[test]
fn rewrite_with_a_foreign_scan_never_panics() {
    let body = br#"{"model":"a"}"#;
    for scan in [
        BodyScan {
            model: Some(Span { start: 5, end: 500 }),
            ..Default::default()
        },
        BodyScan {
            model: Some(Span { start: 9, end: 3 }),
            fallbacks: Some(Span { start: 0, end: 13 }),
            ..Default::default()
        },
        BodyScan {
            model: None,
            fallbacks: Some(Span { start: 12, end: 2 }),
            ..Default::default()
        },
        BodyScan {
            model: Some(Span {
                start: usize::MAX,
                end: usize::MAX,
            }),
            fallbacks: Some(Span {
                start: usize::MAX - 1,
                end: usize::MAX,
            }),
            ..Default::default()
        },
    ] {
        let _ = rewrite(body, &scan, Some("x"), true);
        let _ = model_value(body, &scan);
    }
}

#[test]
fn notes_a_top_level_stream_true_only() {
    let stream = |body: &str| scan_top_level(body.as_bytes()).unwrap().stream;
    assert!(stream(r#"{"model":"m","stream":true}"#));
    assert!(stream(r#"{"stream" : true ,"model":"m"}"#));
    assert!(stream(r#"{"str\u0065am":true}"#));
    assert!(!stream(r#"{"model":"m","stream":false}"#));
    assert!(!stream(r#"{"model":"m","stream":"true"}"#));
    assert!(!stream(r#"{"model":"m","options":{"stream":true}}"#));
    assert!(!stream(r#"{"model":"m"}"#));
}

#[test]
fn the_scan_notes_images_tools_provider_state_and_inline_media() {
    let content = |body: &str| scan_top_level(body.as_bytes()).unwrap().content;
    let plain_body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let plain = content(plain_body);
    assert_eq!(
        (plain.images, plain.tools, plain.provider_state),
        (false, false, false)
    );
    assert_eq!(plain.text_bytes, plain_body.len());
    let chat_image = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},
        {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAAAAAAAAAAAAAAAAAA"}}]}]}"#;
    let c = content(chat_image);
    assert!(c.images && !c.tools);
    let uri_len = r#""data:image/png;base64,AAAAAAAAAAAAAAAAAAAA""#.len();
    assert_eq!(
        c.text_bytes,
        chat_image.len() - uri_len,
        "inline media left out"
    );
    let messages_image = r#"{"messages":[{"role":"user","content":[{"type":"image",
        "source":{"type":"base64","media_type":"image/png","data":"QUJD"}}]}],"model":"m"}"#;
    let c = content(messages_image);
    assert!(c.images);
    assert_eq!(c.text_bytes, messages_image.len() - 6);
    assert!(content(r#"{"input":[{"type":"input_image","image_url":"https://x/y.png"}]}"#).images);
    // A text that talks about images is text.
    assert!(!content(r#"{"messages":[{"role":"user","content":"type image_url"}]}"#).images);
    assert!(!content(r#"{"messages":[{"content":{"text":"image"}}]}"#).images);
    // Tools: a non-empty list only.
    assert!(content(r#"{"tools":[{"type":"function","function":{"name":"f"}}]}"#).tools);
    assert!(content(r#"{"functions":[{"name":"f"}]}"#).tools);
    assert!(!content(r#"{"tools":[ ]}"#).tools);
    assert!(
        !content(r#"{"messages":[{"tools":[1]}]}"#).tools,
        "top level only"
    );
    // State kept by a provider.
    assert!(content(r#"{"previous_response_id":"resp_1","input":"hi"}"#).provider_state);
    assert!(content(r#"{"conversation":{"id":"conv_1"}}"#).provider_state);
    assert!(!content(r#"{"previous_response_id":null}"#).provider_state);
    assert!(content(r#"{"input":[{"type":"item_reference","id":"msg_1"}]}"#).provider_state);
    assert!(
        !content(r#"{"input":[{"type":"message","role":"user","content":"item_reference"}]}"#)
            .provider_state
    );
    assert!(
        content(r#"{"messages":[{"content":[{"type":"file","file":{"file_id":"file-1"}}]}]}"#)
            .provider_state
    );
    // A type that is not a string value, or the member after it, is not mistaken for one.
    assert!(!content(r#"{"a":{"type":{"x":"image"}},"b":["image"]}"#).images);
}

#[test]
fn the_scan_notes_a_gemini_callers_images_tools_and_state_kept_by_google() {
    let content = |body: &str| scan_top_level(body.as_bytes()).unwrap().content;
    let inline = r#"{"contents":[{"role":"user","parts":[{"text":"what is this"},
        {"inlineData":{"mimeType":"image/png","data":"QUJD"}}]}]}"#;
    let c = content(inline);
    assert!(c.images && !c.tools && !c.provider_state);
    assert_eq!(c.text_bytes, inline.len() - 6, "inline data is media");
    // The proto's field names are Google's JSON too.
    assert!(
        content(
            r#"{"contents":[{"parts":[{"inline_data":{"mime_type":"image/jpeg","data":"QQ=="}}]}]}"#
        )
        .images
    );
    // A PDF or audio part is not an image; a text about images is text.
    assert!(!content(r#"{"contents":[{"parts":[{"inlineData":{"mimeType":"application/pdf","data":"QQ=="}}]}]}"#).images);
    assert!(!content(r#"{"contents":[{"parts":[{"text":"mimeType image/png"}]}]}"#).images);
    // Gemini's function declarations are its tools.
    assert!(content(r#"{"tools":[{"functionDeclarations":[{"name":"f"}]}],"contents":[]}"#).tools);
    // A context cache and a file in the Files API stay with the account that holds them; a
    // public URL does not.
    assert!(content(r#"{"cachedContent":"cachedContents/abc","contents":[]}"#).provider_state);
    let uploaded = r#"{"contents":[{"parts":[{"fileData":{"mimeType":"image/png",
        "fileUri":"https://generativelanguage.googleapis.com/v1beta/files/abc"}}]}]}"#;
    let c = content(uploaded);
    assert!(c.provider_state && c.images);
    let public = r#"{"contents":[{"parts":[{"fileData":{"mimeType":"image/png","fileUri":"https://example.com/cat.png"}}]}]}"#;
    assert!(!content(public).provider_state);
}
