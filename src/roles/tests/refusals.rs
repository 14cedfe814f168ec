//! `explain` and the filter refuse the same requests with the same status and code: both plan
//! through `plan::plan_or_refuse`, and this holds them together for every refusal a request's
//! configuration and body decide (breakers and budgets are run-time state `explain` assumes
//! healthy; their refusals are tested where they are made).

use super::*;
use crate::plan::RequestFacts;

const GW: &str = r#"{"caller_header": "x-team",
    "providers": [
        {"name": "oai", "cluster": "co", "api": "openai", "models": ["gpt-*"]},
        {"name": "ant", "cluster": "ca", "api": "anthropic", "max_tokens": 512},
        {"name": "private", "cluster": "cp", "api": "openai", "callers": ["team-a"]}
    ],
    "chains": [
        {"name": "claude", "models": ["claude-*"], "providers": ["ant", {"provider": "oai", "model": "gpt-4o"}]},
        {"name": "gpt", "models": ["gpt-*"], "providers": ["oai", "ant"]},
        {"name": "mine", "models": ["mine-*"], "providers": ["private"]}
    ]
}"#;

/// The refusal's status and code, `None` for a walk.
type Refused = Option<(u16, &'static str)>;

/// `(path, caller, body, refused)`.
const CASES: [(&str, Option<&str>, &str, Refused); 9] = [
    (
        "/v1/chat/completions",
        None,
        r#"{"model":"gpt-4o","messages":[]}"#,
        None,
    ),
    (
        "/v1/chat/completions",
        None,
        r#"{"model":"llama-3","messages":[]}"#,
        Some((400, "model_not_recognized")),
    ),
    (
        "/v1/chat/completions",
        None,
        r#"{"messages":[]}"#,
        Some((404, "route_not_found")),
    ),
    (
        "/v1/chat/completions",
        Some("team-b"),
        r#"{"model":"mine-1","messages":[]}"#,
        Some((400, "model_not_allowed")),
    ),
    (
        "/v1/chat/completions",
        None,
        r#"{"model":"claude-sonnet-4-5","n":2,"messages":[{"role":"user","content":"hi"}]}"#,
        Some((400, "untranslatable_request")),
    ),
    (
        "/v1/responses",
        None,
        r#"{"model":"claude-sonnet-4-5","input":"hi","previous_response_id":"resp_1"}"#,
        Some((400, "untranslatable_request")),
    ),
    (
        "/v1/responses",
        None,
        r#"{"model":"claude-sonnet-4-5","input":"hi","background":true}"#,
        Some((400, "untranslatable_request")),
    ),
    // The same fields on a chain led by a provider of the caller's API: a walk.
    (
        "/v1/responses",
        None,
        r#"{"model":"gpt-4o","input":"hi","previous_response_id":"resp_1"}"#,
        None,
    ),
    (
        "/v1/responses",
        None,
        r#"{"model":"gpt-4o","input":"hi","background":true}"#,
        None,
    ),
];

#[test]
fn explain_and_the_filter_refuse_the_same_requests_the_same_way() {
    let gw = Gateway::new(GW);
    for (path, caller, body, refused) in CASES {
        let read = crate::intake::read_request(path, body.as_bytes()).expect("a readable body");
        let facts = RequestFacts {
            model: &read.model,
            path: Some(path),
            caller,
            api: Api::of_path(path),
            content: read.content(),
            body: body.as_bytes(),
            ..Default::default()
        };
        let explained = crate::explain::explain(&gw.config, &facts);
        let mut headers = vec![(":path", path)];
        headers.extend(caller.map(|c| ("x-team", c)));
        let r = gw.request(&headers, body, &[ok(), ok()]);
        match refused {
            Some((status, code)) => {
                let text = explained.expect_err(body);
                assert!(
                    text.contains(&format!("refused: {status} {code} ")),
                    "{body}: {text}"
                );
                assert_eq!((r.status, r.local), (status, true), "{body}");
                assert_eq!(r.body_json()["error"]["code"], code, "{body}");
                assert!(r.sent.is_empty(), "{body}: no provider called");
                assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("0"), "{body}");
                assert_eq!(r.header(wire::PROVIDER_HEADER), None, "{body}");
            }
            None => {
                let text = explained.expect(body);
                assert_eq!((r.status, r.local), (200, false), "{body}: {text}");
                assert!(!r.sent.is_empty(), "{body}");
            }
        }
    }
}

#[test]
fn explain_names_the_provider_state_goes_to() {
    let c = Config::from_json(
        br#"{"providers":[{"name":"oai","api":"openai"},{"name":"azure","api":"openai","path_prefix":"/openai"}],
            "chains":[{"name":"gpt","providers":["oai","azure"]}]}"#,
        &|_| None,
    )
    .expect("valid");
    let body = br#"{"model":"gpt-4o","input":"hi","previous_response_id":"resp_1"}"#;
    let read = crate::intake::read_request("/v1/responses", body).expect("readable");
    let facts = RequestFacts {
        model: &read.model,
        path: Some("/v1/responses"),
        api: Some(Api::OpenAiResponses),
        content: read.content(),
        body,
        ..Default::default()
    };
    let text = crate::explain::explain(&c, &facts).expect("a walk");
    assert!(
        text.contains("  azure: skipped: content_incompatible (the request names state one provider keeps: previous_response_id, conversation, a stored file or cache; it goes to the request's first entry's provider, oai, only)\n"),
        "{text}"
    );
}
