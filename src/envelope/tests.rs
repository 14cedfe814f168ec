use super::*;

const VERTEX_BASE: Option<&str> = Some("/v1/projects/my-proj/locations/us-east5");

fn vertex() -> Envelope {
    Envelope::Vertex
}

#[test]
fn azure_deployments_take_the_entry_s_model_and_the_api_version() {
    let e = Envelope::AzureOpenAi;
    let q = Some("/openai?api-version=2024-10-21");
    assert_eq!(
        e.path(q, "/v1/chat/completions", "gpt-4o-prod", false),
        "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(
        e.path(q, "/v1/embeddings?x=1", "emb", false),
        "/openai/deployments/emb/embeddings?api-version=2024-10-21"
    );
    assert_eq!(e.api(), Api::OpenAiChat);
    assert_eq!(e.body(br#"{"model":"x"}"#, None), None);
}

#[test]
fn azure_without_an_api_version_uses_the_v1_api() {
    let e = Envelope::AzureOpenAi;
    assert_eq!(
        e.path(None, "/v1/chat/completions", "gpt-4o", true),
        "/openai/v1/chat/completions"
    );
}

#[test]
fn bedrock_puts_the_model_id_in_the_path_encoded_as_aws_sdks_do() {
    let e = Envelope::Bedrock;
    assert_eq!(
        e.path(
            None,
            "/v1/messages",
            "anthropic.claude-3-5-sonnet-20241022-v2:0",
            false
        ),
        "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/invoke"
    );
    assert_eq!(
        e.path(
            None,
            "/v1/messages",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            true
        ),
        "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
    );
    assert_eq!(
        e.path(
            None,
            "/v1/messages",
            "arn:aws:bedrock:us-east-1:1:inference-profile/x",
            false
        ),
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/invoke"
    );
    assert_eq!(e.api(), Api::AnthropicMessages);
}

#[test]
fn a_model_name_cannot_climb_out_of_its_path_segment() {
    let e = Envelope::AzureOpenAi;
    let q = Some("/openai?api-version=v");
    assert_eq!(
        e.path(q, "/v1/chat/completions", "../../admin?x=", false),
        "/openai/deployments/..%2F..%2Fadmin%3Fx%3D/chat/completions?api-version=v"
    );
    assert_eq!(
        e.path(q, "/v1/chat/completions", "..", false),
        "/openai/deployments/%2E%2E/chat/completions?api-version=v"
    );
    assert_eq!(
        Envelope::Bedrock.path(None, "/v1/messages", "a b#c", false),
        "/model/a%20b%23c/invoke"
    );
}

#[test]
fn vertex_paths_name_project_region_and_model() {
    assert_eq!(
        vertex().path(VERTEX_BASE, "/v1/messages", "claude-sonnet-4-5@20250929", false),
        "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
    );
    assert_eq!(
        vertex().path(VERTEX_BASE, "/v1/messages", "claude-sonnet-4-5@20250929", true),
        "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    );
}

#[test]
fn gemini_replaces_v1_with_its_openai_base() {
    let google = Envelope::Gemini;
    assert_eq!(
        google.path(None, "/v1/chat/completions", "gemini-2.5-flash", true),
        "/v1beta/openai/chat/completions"
    );
    let on_vertex = Some("/v1/projects/p/locations/global/endpoints/openapi");
    assert_eq!(
        google.path(
            on_vertex,
            "/v1/chat/completions",
            "google/gemini-2.5-flash",
            false
        ),
        "/v1/projects/p/locations/global/endpoints/openapi/chat/completions"
    );
}

#[test]
fn bedrock_body_drops_model_and_stream_and_adds_its_version() {
    let body = br#"{"model": "claude-x", "max_tokens": 10, "stream": true, "messages": [{"role":"user","content":"hi \"model\""}]}"#;
    let out = Envelope::Bedrock.body(body, None).unwrap();
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"max_tokens": 10,"messages": [{"role":"user","content":"hi \"model\""}],"anthropic_version":"bedrock-2023-05-31"}"#
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(v.get("model").is_none() && v.get("stream").is_none());
}

#[test]
fn bedrock_body_carries_anthropic_beta_flags_and_replaces_a_caller_s_version() {
    let body = br#"{"anthropic_version":"x","messages":[]}"#;
    let out = Envelope::Bedrock
        .body(
            body,
            Some("prompt-caching-2024-07-31, token-efficient-tools-2025-02-19"),
        )
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["anthropic_version"], "bedrock-2023-05-31");
    assert_eq!(
        v["anthropic_beta"],
        serde_json::json!([
            "prompt-caching-2024-07-31",
            "token-efficient-tools-2025-02-19"
        ])
    );
    assert_eq!(v.as_object().unwrap().len(), 3);
}

#[test]
fn vertex_body_keeps_stream_and_drops_model() {
    let body = br#"{"stream":true,"mod\u0065l":"claude","max_tokens":5}"#;
    let out = vertex().body(body, Some("ignored-beta")).unwrap();
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"stream":true,"max_tokens":5,"anthropic_version":"vertex-2023-10-16"}"#
    );
}

#[test]
fn edits_keep_valid_json_whatever_is_dropped() {
    for body in [
        &br#"{}"#[..],
        br#"{"model":"m"}"#,
        br#" { "model" : "m" , "stream" : false } "#,
        br#"{"a":{"model":1},"model":"m","b":[1,{"stream":true}]}"#,
    ] {
        let out = Envelope::Bedrock.body(body, None).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
        assert_eq!(v["anthropic_version"], "bedrock-2023-05-31");
        assert!(v.get("model").is_none());
    }
}

#[test]
fn a_body_that_is_not_a_json_object_is_left_alone() {
    for body in [&b"[1]"[..], b"", b"{\"a\":1", b"{\"a\":1} x", b"nope"] {
        assert_eq!(Envelope::Bedrock.body(body, None), None, "{body:?}");
    }
}

#[test]
fn gemini_native_puts_the_model_and_the_stream_in_the_path() {
    let e = Envelope::GeminiNative;
    assert_eq!(e.api(), Api::Gemini);
    // Google AI (the caller's path and query are not the provider's: `?key=` never leaves).
    let caller = "/v1beta/models/gemini-pro:generateContent?key=gw-key";
    assert_eq!(
        e.path(None, caller, "gemini-2.5-flash", false),
        "/v1beta/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(
        e.path(
            None,
            "/v1/chat/completions",
            "models/gemini-2.5-flash",
            true
        ),
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    // Vertex AI: its publisher path under the project and location.
    assert_eq!(
        e.path(VERTEX_BASE, "/v1/chat/completions", "gemini-2.5-pro", true),
        "/v1/projects/my-proj/locations/us-east5/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
    assert_eq!(e.body(br#"{"contents":[]}"#, None), None);
    assert!(e.own_headers().is_empty() && !e.edits_body() && !e.event_stream());
    assert_eq!(Envelope::parse("gemini_native"), Some(e));
}

#[test]
fn bedrock_converse_puts_the_model_id_in_the_path_and_signs_as_bedrock() {
    let e = Envelope::BedrockConverse;
    assert_eq!(Envelope::parse("bedrock_converse"), Some(e));
    assert_eq!(
        e.path(None, "/model", "meta.llama3-3-70b-instruct-v1:0", false),
        "/model/meta.llama3-3-70b-instruct-v1%3A0/converse"
    );
    assert_eq!(
        e.path(None, "/model", "us.amazon.nova-pro-v1:0", true),
        "/model/us.amazon.nova-pro-v1%3A0/converse-stream"
    );
    assert_eq!(e.api(), Api::Converse);
    assert!(e.aws_signed() && e.event_stream() && !e.edits_body());
    assert_eq!(e.body(b"{}", Some("beta")), None);
    assert_eq!(
        e.aws_region("bedrock-runtime.eu-west-3.amazonaws.com"),
        Some("eu-west-3")
    );
    assert_eq!(
        Envelope::Vertex.aws_region("bedrock-runtime.eu-west-3.amazonaws.com"),
        None
    );
}
