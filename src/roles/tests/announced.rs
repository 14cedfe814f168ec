//! Rate limits announced on answers (docs/behaviour.md section 4) through both roles: an
//! answer that says nothing remains moves the next requests past its provider without an
//! attempt until the announced reset.

use super::*;

const TWO: &str = r#"{
    "providers": [
        {"name": "a", "cluster": "ca"},
        {"name": "b", "cluster": "cb", "reserve_tokens": 1000}
    ],
    "chains": [{"name": "main", "models": ["*"], "providers": ["a", "b"]}],
    "status_path": "/llm-failover/status"
}"#;

fn answer(headers: Vec<(&'static str, &'static str)>) -> Provider {
    Provider::Answer(200, headers, r#"{"ok":true}"#)
}

#[test]
fn an_answer_announcing_no_requests_left_skips_its_provider_until_the_reset() {
    let gw = Gateway::new(TWO);
    gw.world.now.set(T0);
    // Room left: nothing changes.
    let room = vec![
        ("x-ratelimit-remaining-requests", "3"),
        ("x-ratelimit-reset-requests", "20s"),
    ];
    assert_eq!(gw.chat("m", &[answer(room)]).clusters(), ["ca"]);
    assert_eq!(gw.chat("m", &[ok()]).clusters(), ["ca"]);
    // The last request: it is served, and the next ones go to b with no attempt to a.
    let spent = vec![
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "20s"),
        ("x-ratelimit-remaining-tokens", "5000"),
    ];
    let r = gw.chat("m", &[answer(spent)]);
    assert_eq!((r.status, r.clusters()), (200, vec!["ca"]));
    let r = gw.chat("m", &[ok()]);
    assert_eq!(r.clusters(), ["cb"]);
    assert_eq!(
        r.header(wire::FALLBACK_REASON_HEADER),
        Some("rate_limited_ahead")
    );
    assert_eq!(gw.metric(&names::skipped("a", "rate_limited_ahead")), 1);
    assert!(
        (r.log.as_deref().unwrap_or_default()).starts_with("a:skipped:rate_limited_ahead,b:ok:"),
        "{:?}",
        r.log
    );
    // The status endpoint says what a announced and until when it is skipped.
    let status = gw.request(
        &[(":method", "GET"), (":path", "/llm-failover/status")],
        "",
        &[],
    );
    let ahead = &status.body_json()["providers"][0]["rate_limited_ahead"];
    assert_eq!(ahead["skipped_until_ms"], T0 + 20_000, "{ahead}");
    assert_eq!(ahead["spent"], "requests");
    assert_eq!(
        (&ahead["requests_remaining"], &ahead["tokens_remaining"]),
        (&0.into(), &5000.into())
    );
    assert_eq!(
        status.body_json()["providers"][1]["rate_limited_ahead"],
        serde_json::Value::Null
    );
    // Back at its reset.
    gw.world.now.set(T0 + 20_000);
    assert_eq!(gw.chat("m", &[ok()]).clusters(), ["ca"]);
}

#[test]
fn anthropic_times_and_a_reserve_skip_and_every_provider_out_is_a_429() {
    let gw = Gateway::new(TWO);
    gw.world.now.set(T0);
    // a: Anthropic's names, its input tokens spent until an RFC 3339 time 9 s on.
    let reset = "2023-11-14T22:13:29Z"; // T0 + 9 s
    let a_spent = Provider::Answer(
        429,
        vec![
            ("anthropic-ratelimit-input-tokens-remaining", "0"),
            ("anthropic-ratelimit-input-tokens-reset", reset),
        ],
        r#"{"error":{}}"#,
    );
    // b: 800 tokens left, under its 1000-token reserve, for 30 s.
    let b_reserve = answer(vec![
        ("x-ratelimit-remaining-tokens", "800"),
        ("x-ratelimit-reset-tokens", "30s"),
    ]);
    let r = gw.chat("m", &[a_spent, b_reserve]);
    assert_eq!((r.status, r.clusters()), (200, vec!["ca", "cb"]));
    // Both out: a 429 naming the skip, Retry-After the earliest reset (a's).
    let r = gw.chat("m", &[]);
    assert!(r.local && r.sent.is_empty());
    assert_eq!(r.status, 429);
    assert_eq!(r.body_json()["error"]["code"], "rate_limited_ahead");
    assert_eq!(r.header("retry-after"), Some("9"));
    assert_eq!(
        r.log.as_deref(),
        Some("a:skipped:rate_limited_ahead,b:skipped:rate_limited_ahead")
    );
    gw.world.now.set(T0 + 9_000);
    assert_eq!(gw.chat("m", &[ok()]).clusters(), ["ca"]);
}

#[test]
fn a_cap_of_zero_turns_the_skip_off() {
    let gw = Gateway::new(&TWO.replace(
        r#""status_path""#,
        r#""dead_marks": {"rate_limited_ahead": 0}, "status_path""#,
    ));
    gw.world.now.set(T0);
    let spent = vec![
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "20s"),
    ];
    assert_eq!(gw.chat("m", &[answer(spent)]).clusters(), ["ca"]);
    assert_eq!(gw.chat("m", &[ok()]).clusters(), ["ca"]);
}
