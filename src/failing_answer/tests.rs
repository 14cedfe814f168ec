//! Each rule against a realistic body of its dialect, and near misses that must not match.

use super::*;
use crate::classify::Class::*;
use crate::translate::Api;

fn is(status: u16, body: &str) -> Class {
    refine(status, body.as_bytes())
}

#[test]
fn openai_bodies() {
    let context = r#"{
  "error": {
    "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 8215 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded"
  }
}"#;
    assert_eq!(is(400, context), ContextWindowExceeded);
    let responses = r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#;
    assert_eq!(is(400, responses), ContextWindowExceeded);
    let quota = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
    assert_eq!(is(429, quota), QuotaExhausted);
    let safety = r#"{"error":{"message":"Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system.","type":"invalid_request_error","param":null,"code":"content_policy_violation"}}"#;
    assert_eq!(is(400, safety), ContentFiltered);
    let flagged = r#"{"error":{"message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy. Please try again with a different prompt: https://platform.openai.com/docs/guides/reasoning#advice-on-prompting","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}"#;
    assert_eq!(is(400, flagged), ContentFiltered);
}

#[test]
fn openai_near_misses_keep_their_status_class() {
    // An ordinary rate limit is not a spent quota.
    let rate = r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
    assert_eq!(is(429, rate), RateLimited);
    // A bad parameter whose text talks about context and quota, in no rule's words.
    let param = r#"{"error":{"message":"Invalid value for 'max_tokens': the context of this request is fine but 'quota' is not a parameter.","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}}"#;
    assert_eq!(is(400, param), InvalidRequest);
    // The code word quoted inside the message is not the code member.
    let quoted = r#"{"error":{"message":"unknown parameter \"code\": \"context_length_exceeded\"","type":"invalid_request_error","code":"unknown_parameter"}}"#;
    assert_eq!(is(400, quoted), InvalidRequest);
    // A code that only starts like a rule's.
    let longer = r#"{"error":{"message":"x","code":"context_length_exceeded_soon"}}"#;
    assert_eq!(is(400, longer), InvalidRequest);
    // A context-length body under a status the rule is not for stays that status's class.
    let context = r#"{"error":{"message":"m","code":"context_length_exceeded"}}"#;
    assert_eq!(is(500, context), ServerError);
    assert_eq!(is(422, context), InvalidRequest);
}

#[test]
fn azure_content_filter_with_a_typographic_apostrophe() {
    // As Azure sends it (openai/openai-python#331): "Azure OpenAI’s", U+2019.
    let raw = "{\"error\":{\"message\":\"The response was filtered due to the prompt triggering Azure OpenAI\u{2019}s content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766\",\"type\":null,\"param\":\"prompt\",\"code\":\"content_filter\",\"status\":400}}";
    assert_eq!(is(400, raw), ContentFiltered);
    // Re-wrapped by a gateway without the code, apostrophe escaped as \u2019.
    let wrapped = r#"{"error":{"message":"AzureException - The response was filtered due to the prompt triggering Azure OpenAI\u2019s content management policy.","type":null,"param":null,"code":"400"}}"#;
    assert_eq!(is(400, wrapped), ContentFiltered);
    let plain = r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"code":"400"}}"#;
    assert_eq!(is(400, plain), ContentFiltered);
    let inner = r#"{"error":{"message":"filtered","code":"400","innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":true,"severity":"high"}}}}}"#;
    assert_eq!(is(400, inner), ContentFiltered);
    let context = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded","status":400}}"#;
    assert_eq!(is(400, context), ContextWindowExceeded);
}

#[test]
fn azure_near_misses() {
    // A per-minute token limit is a rate limit.
    let tpm = r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}}"#;
    assert_eq!(is(429, tpm), RateLimited);
    // A successful answer's filter annotations are not an error (and 200 is never refined).
    let annotations = r#"{"choices":[{"content_filter_results":{"hate":{"filtered":false}}}],"prompt_filter_results":[]}"#;
    assert_eq!(is(200, annotations), Ok);
    // "content_filter" as a parameter name, not the code.
    let param = r#"{"error":{"message":"Unrecognized request argument supplied: content_filter","type":"invalid_request_error","param":"content_filter","code":null}}"#;
    assert_eq!(is(400, param), InvalidRequest);
}

#[test]
fn anthropic_bodies() {
    let long = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#;
    assert_eq!(is(400, long), ContextWindowExceeded);
    let limit = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}"#;
    assert_eq!(is(400, limit), ContextWindowExceeded);
    let credit = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}"#;
    assert_eq!(is(400, credit), QuotaExhausted);
    let billing = r#"{"type":"error","error":{"type":"billing_error","message":"Your account has a billing issue."}}"#;
    assert_eq!(is(402, billing), QuotaExhausted);
    let usage = r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC."}}"#;
    assert_eq!(is(400, usage), QuotaExhausted);
    let blocked = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Output blocked by content filtering policy"}}"#;
    assert_eq!(is(400, blocked), ContentFiltered);
}

#[test]
fn anthropic_near_misses() {
    // 413 is about bytes, not tokens.
    let bytes = r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#;
    assert_eq!(is(413, bytes), InvalidRequest);
    let rate = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    assert_eq!(is(429, rate), RateLimited);
    let perm = r#"{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}"#;
    assert_eq!(is(403, perm), SetupFault);
    // A prompt that talks about being too long, in a field no rule reads.
    let other = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content: Field required","detail":"prompt is too long"}}"#;
    assert_eq!(is(400, other), InvalidRequest);
}

#[test]
fn vllm_and_sglang_bodies() {
    let vllm = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
    assert_eq!(is(400, vllm), ContextWindowExceeded);
    let vllm_new = r#"{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context length is 4096 tokens and your request has 100 input tokens (5000 > 4096 - 100).","type":"BadRequestError","param":null,"code":400}}"#;
    assert_eq!(is(400, vllm_new), ContextWindowExceeded);
    let decoder = r#"{"object":"error","message":"The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}"#;
    assert_eq!(is(400, decoder), ContextWindowExceeded);
    let sglang = r#"{"object":"error","message":"The input (5000 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}"#;
    assert_eq!(is(400, sglang), ContextWindowExceeded);
    let sglang2 = r#"{"object":"error","message":"Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 5000 tokens: 4000 tokens from the input messages and 1000 tokens for the completion.","type":"BadRequestError","param":null,"code":400}"#;
    assert_eq!(is(400, sglang2), ContextWindowExceeded);
}

#[test]
fn vllm_near_misses() {
    let bad = r#"{"object":"error","message":"[{'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required'}]","type":"BadRequestError","param":null,"code":400}"#;
    assert_eq!(is(400, bad), InvalidRequest);
    let model = r#"{"object":"error","message":"The model `llama-3` does not exist.","type":"NotFoundError","param":null,"code":404}"#;
    assert_eq!(is(404, model), ModelNotFound);
}

#[test]
fn gemini_bodies_and_near_misses() {
    let long = r#"[{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]"#;
    assert_eq!(is(400, long), ContextWindowExceeded);
    let daily = r#"[{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}]"#;
    assert_eq!(is(429, daily), QuotaExhausted);
    // The same words for a per-minute limit: a rate limit, not a spent quota.
    let minute = r#"[{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"36s"}]}}]"#;
    assert_eq!(is(429, minute), RateLimited);
}

#[test]
fn a_wrong_google_key_is_a_setup_fault_not_the_callers_400() {
    // What Gemini's native API and its OpenAI endpoint answer a wrong key (the native one
    // as an object, the OpenAI one as a one-element list).
    let native = r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}},{"@type":"type.googleapis.com/google.rpc.LocalizedMessage","locale":"en-US","message":"API key not valid. Please pass a valid API key."}]}}"#;
    assert_eq!(is(400, native), SetupFault);
    assert_eq!(is(400, &format!("[{native}]")), SetupFault);
    let expired = r#"{"error":{"code":400,"message":"API key expired. Please renew the API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}"#;
    assert_eq!(is(400, expired), SetupFault);
    let rewrapped =
        r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key."}}"#;
    assert_eq!(is(400, rewrapped), SetupFault);
    // Near misses: the caller's own invalid arguments stay its problem.
    let bad = r#"{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"foo\": Cannot find field.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"description":"Invalid JSON payload received. Unknown name \"foo\""}]}]}}"#;
    assert_eq!(is(400, bad), InvalidRequest);
    let budget = r#"{"error":{"code":400,"message":"The thinking budget 40000 is invalid. Please choose a value between 128 and 32768.","status":"INVALID_ARGUMENT"}}"#;
    assert_eq!(is(400, budget), InvalidRequest);
    // A 401 or 403 (a Vertex token, a key without the API enabled) says it by its status.
    let denied = r#"{"error":{"code":403,"message":"Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.","status":"PERMISSION_DENIED"}}"#;
    assert_eq!(is(403, denied), SetupFault);
}

#[test]
fn other_vendors_credential_errors_are_setup_faults() {
    // Their statuses say it (401 or 403): OpenAI, Azure OpenAI, Anthropic.
    let openai = r#"{"error":{"message":"Incorrect API key provided: sk-wrong. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    assert_eq!(is(401, openai), SetupFault);
    let azure = r#"{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}"#;
    assert_eq!(is(401, azure), SetupFault);
    let azure_denied = r#"{"error":{"code":"PermissionDenied","message":"The principal lacks the required data action."}}"#;
    assert_eq!(is(403, azure_denied), SetupFault);
    let anthropic =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    assert_eq!(is(401, anthropic), SetupFault);
    let permission = r#"{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}"#;
    assert_eq!(is(403, permission), SetupFault);
    // AWS names its type in a header, whatever the status it comes with.
    for kind in [
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "MissingAuthenticationToken",
        "InvalidClientTokenId",
        "ExpiredTokenException",
        "AccessDeniedException",
    ] {
        let value = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
        assert_eq!(header_class(value.as_bytes()), Some(SetupFault), "{kind}");
    }
    // Bedrock's other types keep their own classes (or their statuses').
    for kind in [
        "ValidationException",
        "ModelStreamErrorException",
        "ConflictException",
    ] {
        assert_eq!(header_class(kind.as_bytes()), None, "{kind}");
    }
}

#[test]
fn bodies_that_are_not_json_or_cut_short() {
    assert_eq!(is(400, ""), InvalidRequest);
    assert_eq!(
        is(400, "<html><body>400 Bad Request</body></html>"),
        InvalidRequest
    );
    assert_eq!(is(429, "\u{0}\u{ff}garbage\"code\":"), RateLimited);
    // A body cut inside the message still matches what was read.
    let cut = r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your mess"#;
    assert_eq!(is(400, cut), ContextWindowExceeded);
    // Only the first BODY_PREFIX_LIMIT bytes count.
    let late = format!(
        r#"{{"error":{{"message":"{}","code":"context_length_exceeded"}}}}"#,
        "x".repeat(BODY_PREFIX_LIMIT)
    );
    assert_eq!(is(400, &late), InvalidRequest);
}

#[test]
fn bedrock_errors_by_their_type_header_and_their_message() {
    let aws = |kind: &str| {
        let value = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
        header_class(value.as_bytes())
    };
    assert_eq!(aws("ServiceQuotaExceededException"), Some(QuotaExhausted));
    assert_eq!(aws("ModelNotReadyException"), Some(Overloaded));
    assert_eq!(aws("ModelTimeoutException"), Some(Timeout));
    assert_eq!(aws("ModelErrorException"), Some(ServerError));
    assert_eq!(aws("ModelStreamErrorException"), None);
    // Their statuses tell these (429 rate_limited, 503 overloaded).
    assert_eq!(aws("ThrottlingException"), None);
    assert_eq!(aws("ServiceUnavailableException"), None);
    let access = r#"{"message":"You don't have access to the model with the specified model ID."}"#;
    assert_eq!(is(403, access), SetupFault);
    let throttled = r#"{"message":"Too many tokens per day, please wait before trying again."}"#;
    assert_eq!(is(429, throttled), RateLimited);
    // The body decides these, and the status the rest.
    assert_eq!(aws("ValidationException"), None);
    assert_eq!(aws("ResourceNotFoundException"), None);
    assert_eq!(aws("InternalServerException"), None);
    assert_eq!(header_class(b""), None);
    let long = r#"{"message":"Input is too long for requested model."}"#;
    assert_eq!(is(400, long), ContextWindowExceeded);
    // Through Converse-style wrapping, and Claude's own words on Bedrock.
    let wrapped = r#"{"message":"The model returned the following errors: Input is too long for requested model."}"#;
    assert_eq!(is(400, wrapped), ContextWindowExceeded);
    let claude = r#"{"message":"prompt is too long: 208310 tokens > 200000 maximum"}"#;
    assert_eq!(is(400, claude), ContextWindowExceeded);
    let filtered = r#"{"message":"This request has been blocked by our content filters."}"#;
    assert_eq!(is(400, filtered), ContentFiltered);
    // Near misses: other validation errors are the caller's.
    let bad = r#"{"message":"Malformed input request: #: extraneous key [foo] is not permitted, please reformat your input and try again."}"#;
    assert_eq!(is(400, bad), InvalidRequest);
    let max = r#"{"message":"max_tokens: range: 1..=64000"}"#;
    assert_eq!(is(400, max), InvalidRequest);
}

#[test]
fn refinable_statuses_are_those_some_rule_is_for() {
    for s in [400, 402, 403, 413, 429] {
        assert!(refinable(s), "{s}");
    }
    for s in [200, 401, 404, 422, 500, 503, 529] {
        assert!(!refinable(s), "{s}");
    }
}

#[test]
fn every_rule_is_held_by_a_test_body() {
    // Guard against a table entry no test exercises: each rule must match at least one of the
    // bodies above (collected here by the text each rule looks for).
    for (dialect, rules) in TABLES {
        for r in *rules {
            let text = match r.test {
                Test::Is(t) | Test::Has(t) => t,
            };
            if r.key == ERROR_TYPE_HEADER {
                assert_eq!(header_class(text.as_bytes()), Some(r.class), "{r:?}");
                continue;
            }
            let body = format!(r#"{{"{}":"{}"}}"#, r.key, text);
            assert_eq!(
                match_rules(r.statuses.first().copied(), body.as_bytes()),
                Some(r.class),
                "{} rule {:?}",
                dialect.as_str(),
                r
            );
        }
    }
}

// ---- streams

const OPENAI_CHUNK: &str = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";

#[test]
fn healthy_first_events_are_released_at_once() {
    assert_eq!(
        first_event(OPENAI_CHUNK.as_bytes(), false),
        StreamStart::Healthy
    );
    let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n";
    assert_eq!(
        first_event(anthropic.as_bytes(), false),
        StreamStart::Healthy
    );
    // A keep-alive comment first.
    assert_eq!(
        first_event(b": OPENROUTER PROCESSING\n\n", false),
        StreamStart::Healthy
    );
    // CRLF line endings.
    assert_eq!(
        first_event(b"data: {\"id\":\"1\"}\r\n\r\n", false),
        StreamStart::Healthy
    );
    // Content that quotes the word error is still content.
    let quoted =
        "data: {\"choices\":[{\"delta\":{\"content\":\"an \\\"error\\\" happened\"}}]}\n\n";
    assert_eq!(first_event(quoted.as_bytes(), false), StreamStart::Healthy);
    let member =
        "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"error\":0}}\n\n";
    assert_eq!(first_event(member.as_bytes(), false), StreamStart::Healthy);
}

#[test]
fn an_incomplete_first_event_waits_but_never_past_the_limit() {
    let half = &OPENAI_CHUNK.as_bytes()[..40];
    assert_eq!(first_event(half, false), StreamStart::NeedMore);
    assert_eq!(first_event(half, true), StreamStart::Healthy);
    let long = vec![b'x'; BODY_PREFIX_LIMIT];
    assert_eq!(first_event(&long, false), StreamStart::Healthy);
    assert_eq!(first_event(b"", false), StreamStart::NeedMore);
    assert_eq!(first_event(b"", true), StreamStart::Healthy);
}

#[test]
fn error_first_events_fail_over() {
    let anthropic = "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
    assert_eq!(
        first_event(anthropic.as_bytes(), false),
        StreamStart::Error(Overloaded)
    );
    let openai = "data: {\"error\": {\"message\": \"The server had an error while processing your request.\", \"type\": \"server_error\", \"code\": null}}\n\n";
    assert_eq!(
        first_event(openai.as_bytes(), false),
        StreamStart::Error(Overloaded)
    );
    let vllm = "data: {\"object\":\"error\",\"message\":\"CUDA out of memory\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}\n\n";
    assert_eq!(
        first_event(vllm.as_bytes(), false),
        StreamStart::Error(Overloaded)
    );
    // An error event the rules recognise takes their class.
    let context = "data: {\"error\":{\"message\":\"This model's maximum context length is 4096 tokens.\",\"type\":\"BadRequestError\",\"code\":400}}\n\n";
    assert_eq!(
        first_event(context.as_bytes(), false),
        StreamStart::Error(ContextWindowExceeded)
    );
    // Only the first event counts: an error after healthy content is not looked at.
    let later = format!("{OPENAI_CHUNK}event: error\ndata: {{\"type\":\"error\"}}\n\n");
    assert_eq!(first_event(later.as_bytes(), false), StreamStart::Healthy);
    // An error event cut by the end of the stream.
    assert_eq!(
        first_event(b"event: error\ndata: {\"type\":\"err", true),
        StreamStart::Error(Overloaded)
    );
}

#[test]
fn error_payloads_are_judged_as_a_parsed_json_value_would_judge_them() {
    // The reading `data_is_error` replaced: a whole `serde_json::Value`.
    fn by_value(data: &[u8]) -> bool {
        let Result::Ok(serde_json::Value::Object(object)) = serde_json::from_slice(data) else {
            return false;
        };
        let is_error = |key| {
            matches!(
                object.get(key).and_then(|v| v.as_str()),
                Some("error" | "response.failed")
            )
        };
        object.contains_key("error") || is_error("object") || is_error("type")
    }
    let deep = format!("{{\"error\":{}1{}}}", "[".repeat(130), "]".repeat(130));
    let shallow = format!("{{\"error\":{}1{}}}", "[".repeat(100), "]".repeat(100));
    let at_limit = format!("{{\"error\":{}1{}}}", "[".repeat(127), "]".repeat(127));
    let below_limit = format!("{{\"error\":{}{}}}", "{\"a\":".repeat(126), "}".repeat(126));
    let cases: Vec<&str> = vec![
        r#"{"error":{"message":"overloaded","type":"overloaded_error"}}"#,
        r#"{"error":null}"#,
        r#"{"type":"error","error":{"type":"api_error"}}"#,
        r#"{"object":"error","message":"x"}"#,
        r#"{"object":"chat.completion.chunk","choices":[{"delta":{"content":"\"error\""}}]}"#,
        r#"{"type":"error","type":"message"}"#,
        r#"{"type":"message","type":"error"}"#,
        r#"{"type":["error"]}"#,
        r#"{"obj\u0065ct":"\u0065rror"}"#,
        r#"{"type":"error"} trailing"#,
        r#"{"type":"error","n":1e400}"#,
        r#"{"type":"error","n":-1.5e10,"m":18446744073709551616,"t":true,"u":null}"#,
        r#"{"type":"error","s":"\ud800"}"#,
        r#"{"type":"error","s":"bad \q escape"}"#,
        r#"["error"]"#,
        r#""error""#,
        r#"{"type":"error","#,
        r#"{"a":{"error":1},"b":[{"type":"error"}]}"#,
        "",
        &deep,
        &shallow,
        &at_limit,
        &below_limit,
        r#"{"type":"error","s":"\udc00"}"#,
        r#"{"type":"error","s":"\ud800\u0041"}"#,
        r#"{"type":"error","s":"\ud83d\ude00 \u00e9"}"#,
        r#"{"type":"error","s":"\ud800","t":"\udc00"}"#,
        r#"{"type":"e\u0072ror"}"#,
        r#"{"\u0074ype":"response.failed"}"#,
        r#"{"type":"error","s":"a \"[[[[\\"}"#,
    ];
    // Numbers at the edge of serde_json's range, each alone in an error object.
    let numbers = [
        "1e308",
        "1e309",
        "-1e309",
        "1.7976931348623157e308",
        "1.7976931348623158e308",
        "1.7976931348623159e308",
        "17976931348623157e292",
        "17976931348623159e292",
        "179769313486231570000e288",
        "0.00000000000000000000001e331",
        "1e-400",
        "0e400",
        "0.0e99999999999",
        "1e99999999999",
        "1e-99999999999",
        "123456789012345678901234567890",
        "18446744073709551615e289",
        "18446744073709551616e289",
        "18446744073709551615.9e288",
        "1844674407370955161.5e290",
        "1844674407370955161.59e289",
        "99999999999999999999e288",
        "9.9999999999999999999e307",
        "-0.0",
        "-18446744073709551616",
        "1E+308",
        "1e+2147483647",
        "1e2147483648",
        "0e2147483648",
        "1e-2147483648",
        "2e308",
        "1.8e308",
    ];
    let numbers: Vec<String> = numbers
        .iter()
        .flat_map(|n| {
            [
                format!(r#"{{"type":"error","n":{n}}}"#),
                format!(r#"{{"error":[{n},"x"]}}"#),
            ]
        })
        .collect();
    for data in cases.into_iter().chain(numbers.iter().map(String::as_str)) {
        assert_eq!(
            data_is_error(data.as_bytes()),
            by_value(data.as_bytes()),
            "{data}"
        );
    }
}

/// Host only: proptest is not built for wasm32.
#[cfg(not(target_arch = "wasm32"))]
mod numbers {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Numbers near `f64`'s largest, of any length: out of range exactly when serde_json
        /// finds them so.
        #[test]
        fn error_payloads_with_numbers_near_the_range_end_are_judged_as_serde_json_judges_them(
            int in "-?(0|[1-9][0-9]{0,24})",
            frac in "(\\.[0-9]{1,24})?",
            exp in 250i32..330,
            sign in prop::sample::select(vec!["e", "E", "e+", "e-"]),
        ) {
            let data = format!(r#"{{"type":"error","n":{int}{frac}{sign}{exp}}}"#);
            let by_value = matches!(
                serde_json::from_str::<serde_json::Value>(&data),
                Result::Ok(serde_json::Value::Object(_))
            );
            prop_assert_eq!(data_is_error(data.as_bytes()), by_value, "{}", data);
        }
    }
}

#[test]
fn event_streams_are_told_by_their_content_type_in_any_case() {
    assert!(is_event_stream(b"text/event-stream"));
    assert!(is_event_stream(b"Text/Event-Stream; charset=utf-8"));
    assert!(!is_event_stream(b"application/json"));
    assert!(!is_event_stream(b"text/event"));
    assert!(!is_event_stream(b""));
}

#[test]
fn first_output_waits_past_the_role_chunk_and_message_start() {
    let role = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\": \"assistant\", \"content\": \"\"},\"finish_reason\":null}]}\n\n";
    let token = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";
    assert_eq!(first_output(role.as_bytes(), false), StreamStart::NeedMore);
    let both = format!("{role}{token}");
    assert_eq!(first_output(both.as_bytes(), false), StreamStart::Healthy);
    // A tool call, reasoning, a refusal, or the answer's end count as output.
    for chunk in [
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"refusal\":\"no\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    ] {
        let s = format!("{role}{chunk}");
        assert_eq!(
            first_output(s.as_bytes(), false),
            StreamStart::Healthy,
            "{chunk}"
        );
    }
    // Anthropic: message_start and ping come before output; a content block is output.
    let start =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\n";
    let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
    let delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
    let waiting = format!("{start}{ping}");
    assert_eq!(
        first_output(waiting.as_bytes(), false),
        StreamStart::NeedMore
    );
    let s = format!("{start}{ping}{delta}");
    assert_eq!(first_output(s.as_bytes(), false), StreamStart::Healthy);
    // An error before any output still falls over.
    let error = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let s = format!("{start}{error}");
    assert_eq!(
        first_output(s.as_bytes(), false),
        StreamStart::Error(Overloaded)
    );
    // The end of the stream, or the prefix limit, releases what is held.
    assert_eq!(first_output(role.as_bytes(), true), StreamStart::Healthy);
    let pings = ping.repeat(BODY_PREFIX_LIMIT / ping.len() + 1);
    assert_eq!(first_output(pings.as_bytes(), false), StreamStart::Healthy);
}

#[test]
fn a_streams_end_is_complete_with_its_final_event_only() {
    let token = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";
    assert!(!stream_complete(token.as_bytes()));
    assert!(stream_complete(b"data: [DONE]\n\n"));
    let last = "data: {\"choices\":[{\"delta\":{},\"finish_reason\": \"stop\"}]}\n\n";
    assert!(
        stream_complete(format!("{token}{last}").as_bytes()),
        "no [DONE] is complete"
    );
    assert!(stream_complete(
        b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    ));
    assert!(!stream_complete(
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"x\"}}\n\n"
    ));
    assert!(stream_complete(b"event: response.completed\ndata: {}\n\n"));
    // Gemini's stream ends after the chunk with its finishReason (no end marker).
    let gemini =
        r#"data: {"candidates":[{"content":{"parts":[{"text":"x"}],"role":"model"},"index":0}]}"#;
    assert!(!stream_complete(format!("{gemini}\r\n\r\n").as_bytes()));
    let last = gemini.replace(r#""index":0"#, r#""index":0,"finishReason": "STOP""#);
    assert!(stream_complete(
        format!("{gemini}\r\n\r\n{last}\r\n\r\n").as_bytes()
    ));
    // The error events this filter writes end a stream in each caller's dialect.
    for caller in [Api::AnthropicMessages, Api::OpenAiChat, Api::Gemini] {
        let event = cut_stream_event(caller);
        assert!(stream_complete(event));
        assert_eq!(first_event(event, false), StreamStart::Error(Overloaded));
    }
}

#[test]
fn readable_content_types() {
    for t in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/problem+json",
        "text/event-stream",
        "application/vnd.amazon.eventstream",
        "application/x-ndjson",
    ] {
        assert!(is_readable(t.as_bytes()), "{t}");
    }
    for t in [
        "text/html",
        "text/html; charset=utf-8",
        "text/plain",
        "application/octet-stream",
    ] {
        assert!(!is_readable(t.as_bytes()), "{t}");
    }
}

#[test]
fn a_translated_streams_first_event_must_be_of_its_api() {
    use crate::translate::Api::{AnthropicMessages as Messages, OpenAiChat as Chat};
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n";
    let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
    let text = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
    let junk = "data: {\"hello\":\"world\"}\n\n";
    let of = |api, held: &str, eos| {
        let of_api = |n: &[u8], d: &[u8]| crate::translate::is_stream_event(api, n, d);
        first_event_of(of_api, held.as_bytes(), eos, false)
    };
    // Each API's own first events pass; the other API's, or anything else, do not.
    assert_eq!(of(Messages, start, false), StreamStart::Healthy);
    assert_eq!(of(Messages, ping, false), StreamStart::Healthy);
    assert_eq!(of(Chat, OPENAI_CHUNK, false), StreamStart::Healthy);
    assert_eq!(of(Chat, "data: [DONE]\n\n", false), StreamStart::Healthy);
    let azure = "data: {\"choices\":[],\"id\":\"\",\"prompt_filter_results\":[]}\n\n";
    assert_eq!(of(Chat, azure, false), StreamStart::Healthy);
    assert_eq!(of(Messages, OPENAI_CHUNK, false), StreamStart::Unreadable);
    assert_eq!(of(Chat, start, false), StreamStart::Unreadable);
    assert_eq!(of(Messages, junk, false), StreamStart::Unreadable);
    assert_eq!(of(Chat, junk, false), StreamStart::Unreadable);
    assert_eq!(
        of(Chat, "data: not json\n\n", false),
        StreamStart::Unreadable
    );
    // Comments are skipped; an error is still an error.
    let comment = ": OPENROUTER PROCESSING\n\n";
    assert_eq!(of(Chat, comment, false), StreamStart::NeedMore);
    assert_eq!(
        of(Chat, &format!("{comment}{junk}"), false),
        StreamStart::Unreadable
    );
    let error = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    assert_eq!(of(Messages, error, false), StreamStart::Error(Overloaded));
    // Not complete yet: wait; ended with nothing of the API (or nothing at all): unreadable;
    // ended on an event without its blank line: judged as it is.
    assert_eq!(of(Messages, &start[..20], false), StreamStart::NeedMore);
    assert_eq!(of(Messages, "", true), StreamStart::Unreadable);
    assert_eq!(of(Messages, comment, true), StreamStart::Unreadable);
    assert_eq!(of(Messages, start.trim_end(), true), StreamStart::Healthy);
    assert_eq!(of(Messages, junk.trim_end(), true), StreamStart::Unreadable);
    // A first event longer than the bound is released as it is.
    let long = format!(
        "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}",
        "x".repeat(5000)
    );
    assert_eq!(of(Chat, &long, false), StreamStart::Healthy);
    // Under a first-token timeout every event before the output must be of the API too.
    let until = |api, held: &str, eos| {
        let of_api = |n: &[u8], d: &[u8]| crate::translate::is_stream_event(api, n, d);
        first_event_of(of_api, held.as_bytes(), eos, true)
    };
    assert_eq!(
        until(Messages, &format!("{start}{ping}"), false),
        StreamStart::NeedMore
    );
    assert_eq!(
        until(Messages, &format!("{start}{text}"), false),
        StreamStart::Healthy
    );
    assert_eq!(
        until(Messages, &format!("{start}{junk}"), false),
        StreamStart::Unreadable
    );
    assert_eq!(
        until(Messages, start, true),
        StreamStart::Healthy,
        "the translator ends it"
    );
}

#[test]
fn a_responses_stream_opening_with_response_failed_is_an_error() {
    let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The model failed to generate a response.\"}}}\n\n";
    assert_eq!(
        first_event(failed.as_bytes(), false),
        StreamStart::Error(Overloaded)
    );
    // Without its event line, by its type.
    let data_only = failed.split_once('\n').unwrap().1;
    assert_eq!(
        first_event(data_only.as_bytes(), false),
        StreamStart::Error(Overloaded)
    );
    // Its error read by the rules: a prompt over the context window.
    let context = failed.replace(
        "The model failed to generate a response.",
        "Your input exceeds the context window of this model.",
    );
    assert_eq!(
        first_event(context.as_bytes(), false),
        StreamStart::Error(ContextWindowExceeded)
    );
    // A healthy start, and a text that only names the event, are released.
    let created = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"error\":null,\"output\":[]}}\n\n";
    assert_eq!(first_event(created.as_bytes(), false), StreamStart::Healthy);
    let named = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"response.failed\"}\n\n";
    assert_eq!(first_event(named.as_bytes(), false), StreamStart::Healthy);
}

/// The stream tests' substring searches agree with a plain search of every window, wherever
/// the needle is (first, last, cut by the end, absent, twice) and for every needle length.
#[test]
fn the_byte_searches_agree_with_a_plain_search() {
    let hay = b"data: {\"choices\":[]}\n\n\r\n\r\nevent: message_stop\ndata: [DONE]\n\n[DONE";
    let plain = |h: &[u8], n: &[u8]| h.windows(n.len()).position(|w| w == n);
    for start in 0..hay.len() {
        for len in 0..=12.min(hay.len() - start) {
            let needle = &hay[start..start + len];
            for h in [&hay[..], &hay[start..], &hay[..start]] {
                let want = if needle.is_empty() {
                    Some(0)
                } else {
                    plain(h, needle)
                };
                assert_eq!(find(h, needle), want, "{needle:?}");
                assert_eq!(in_tail(h, needle), want.is_some(), "{needle:?}");
            }
        }
    }
    for absent in [&b"[DONE]]"[..], b"message_stop\"", b"\r\n\r\n\r", b"zz"] {
        assert_eq!(find(hay, absent), None);
        assert!(!in_tail(hay, absent));
    }
}

#[test]
fn events_end_at_a_blank_line_whatever_the_line_ends() {
    // `\n`, `\r\n`, a lone `\r` and mixes of them: the same events as `translate::sse` reads.
    let error = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\ndata: {\"choices\":[]}\n\n";
    for (from, to) in [("\n", "\n"), ("\n", "\r\n"), ("\n", "\r")] {
        let s = error.replace(from, to);
        assert_eq!(
            first_event(s.as_bytes(), false),
            StreamStart::Error(Overloaded),
            "{s:?}"
        );
        assert_eq!(
            first_output(s.as_bytes(), false),
            StreamStart::Error(Overloaded)
        );
    }
    // Mixed: a `\r\n` line end then a lone `\r` is a blank line too; a `\r` alone is not.
    assert_eq!(event_end(b"data: x\r\n\rdata: y"), Some((7, 3)));
    assert_eq!(event_end(b"data: x\rdata: y\r"), None);
    assert_eq!(event_end(b"data: x\n\r\ndata: y"), Some((7, 3)));
    assert_eq!(event_end(b"data: x\n\ndata: y"), Some((7, 2)));
    assert_eq!(
        next_event(b"data: a\r\rdata: b\r\r"),
        Some((&b"data: a"[..], &b"data: b\r\r"[..]))
    );
    // A healthy first event with lone `\r` line ends is released at its blank line, not held
    // until 4 KiB.
    let healthy = "data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\r";
    assert_eq!(first_event(healthy.as_bytes(), false), StreamStart::Healthy);
    assert_eq!(
        first_output(healthy.as_bytes(), false),
        StreamStart::Healthy
    );
    assert_eq!(
        first_output(b"data: {\"id\":\"1\"}\r", false),
        StreamStart::NeedMore
    );
}
