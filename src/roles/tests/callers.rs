//! Callers the file names (docs/behaviour.md section 15) through both roles: each one's own
//! token budget, spent by the answers it got whichever provider served them, refuses its
//! requests once spent (`429 budget_exhausted`, no attempt) while other callers go on; the
//! token metric's `caller` label, and the access log's.

use super::*;

const TEAMS: &str = r#"{
    "caller_header": "x-team",
    "providers": [
        {"name": "a", "cluster": "ca"},
        {"name": "b", "cluster": "cb", "budget": {"tokens": 1000, "window": "24h"}}
    ],
    "chains": [{"name": "main", "models": ["*"], "providers": ["a", "b"]}],
    "callers": [
        {"name": "team-a", "budget": {"tokens": 20, "window": "10s"}},
        {"name": "team-b"}
    ],
    "status_path": "/llm-failover/status"
}"#;

/// An answer that cost 12 tokens (8 in, 4 out).
fn costs_12() -> Provider {
    Provider::Answer(
        200,
        vec![],
        r#"{"usage":{"prompt_tokens":8,"completion_tokens":4}}"#,
    )
}

fn as_team<'a>(team: &'a str, path: &'a str) -> [(&'a str, &'a str); 2] {
    [("x-team", team), (":path", path)]
}

const CHAT: &str = r#"{"model":"m","messages":[]}"#;

#[test]
fn a_team_whose_budget_is_spent_is_refused_without_an_attempt_while_others_go_on() {
    let gw = Gateway::new(TEAMS);
    gw.world.advance(2_500);
    let chat = "/v1/chat/completions";
    // 12 of team-a's 20, then 12 more from the fallback (its answer counts whoever served it).
    assert_eq!(
        gw.request(&as_team("team-a", chat), CHAT, &[costs_12()])
            .status,
        200
    );
    let r = gw.request(&as_team("team-a", chat), CHAT, &[status(503), costs_12()]);
    assert_eq!((r.status, r.clusters()), (200, vec!["ca", "cb"]));
    // Spent: refused in the caller's API, no provider contacted, back when the window rolls.
    for (path, anthropic) in [(chat, false), ("/v1/messages", true)] {
        let r = gw.request(&as_team("team-a", path), CHAT, &[ok()]);
        assert!(r.local && r.sent.is_empty(), "no attempt");
        assert_eq!(r.status, 429);
        let body = r.body_json();
        assert_eq!(body["error"]["code"], "budget_exhausted", "{body}");
        assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
        assert_eq!(body["type"] == "error", anthropic, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("\"team-a\""),
            "{body}"
        );
        assert_eq!(r.header("retry-after"), Some("8"), "7.5 s left, rounded up");
        assert_eq!(r.header(wire::SHOULD_RETRY_HEADER), Some("true"));
        assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("0"));
        assert_eq!(r.header(wire::PROVIDER_HEADER), None);
        assert_eq!(r.log, None, "no provider was looked at");
    }
    // team-b (no budget), a caller the file does not name and no caller are answered.
    for extra in [
        &as_team("team-b", chat)[..],
        &as_team("team-z", chat)[..],
        &[][..],
    ] {
        let r = gw.request(extra, CHAT, &[costs_12()]);
        assert_eq!((r.status, r.clusters()), (200, vec!["ca"]), "{extra:?}");
    }
    // b's own budget counted team-a's fallback answer too.
    let status = gw.request(
        &[(":method", "GET"), (":path", "/llm-failover/status")],
        "",
        &[],
    );
    let s = status.body_json();
    assert_eq!(s["providers"][1]["budget"]["spent"], 12);
    assert_eq!(
        (
            &s["callers"][0]["name"],
            &s["callers"][0]["budget"]["spent"]
        ),
        (&"team-a".into(), &24.into())
    );
    assert_eq!(s["callers"][0]["budget"]["exhausted"], true);
    assert_eq!(s["callers"][1]["budget"], serde_json::Value::Null);
    // The window rolls over: team-a is answered again.
    gw.world.now.set(T0 + 10_000);
    let r = gw.request(&as_team("team-a", chat), CHAT, &[costs_12()]);
    assert_eq!((r.status, r.clusters()), (200, vec!["ca"]));
}

#[test]
fn the_token_metric_tells_named_callers_others_and_none_apart() {
    let gw = Gateway::new(TEAMS);
    let chat = "/v1/chat/completions";
    for team in ["team-a", "team-b", "team-z", "team-y"] {
        gw.request(&as_team(team, chat), CHAT, &[costs_12()]);
    }
    gw.request(&[], CHAT, &[costs_12()]);
    gw.tick();
    let input = |caller| {
        gw.metric(&names::tokens(
            "a",
            "other",
            crate::usage::Kind::Input,
            caller,
        ))
    };
    assert_eq!(
        [Some("team-a"), Some("team-b"), Some("other"), None].map(input),
        [8, 8, 16, 8]
    );
    // A file that names no callers keeps the metric as it was: no caller label.
    let callers = TEAMS.find(r#""callers""#).unwrap()..TEAMS.find(r#""status_path""#).unwrap();
    let plain = Gateway::new(&TEAMS.replace(&TEAMS[callers], ""));
    plain.request(&as_team("team-a", chat), CHAT, &[costs_12()]);
    assert_eq!(plain.tokens("a", "other"), [8, 4, 0]);
}

#[test]
fn the_access_log_names_the_caller_as_the_metric_does_never_its_raw_value() {
    let gw = Gateway::new(TEAMS);
    let chat = "/v1/chat/completions";
    let caller =
        |extra: &[(&str, &str)], answers: &[Provider]| gw.request(extra, CHAT, answers).caller;
    let some = |name: &str| Some(name.to_string());
    assert_eq!(
        caller(&as_team("team-a", chat), &[costs_12()]),
        some("team-a")
    );
    assert_eq!(
        caller(&as_team("team-b", chat), &[status(503), ok()]),
        some("team-b")
    );
    // Any other value (it may be a key) is `other`; no header, nothing.
    assert_eq!(caller(&as_team("sk-secret", chat), &[ok()]), some("other"));
    assert_eq!(caller(&[(":path", chat)], &[ok()]), None);
    // A refusal names it too: team-a's budget spent (24 of 20), no attempt.
    caller(&as_team("team-a", chat), &[costs_12()]);
    let r = gw.request(&as_team("team-a", chat), CHAT, &[ok()]);
    assert_eq!((r.status, r.caller), (429, some("team-a")));
    // A file without caller_header (or without callers) writes nothing.
    let callers = TEAMS.find(r#""callers""#).unwrap()..TEAMS.find(r#""status_path""#).unwrap();
    let no_callers = TEAMS.replace(&TEAMS[callers], "");
    let without = |file: &str| {
        let r = Gateway::new(file).request(&as_team("team-a", chat), CHAT, &[ok()]);
        (r.status, r.caller)
    };
    let no_header = no_callers.replace(r#""caller_header": "x-team","#, "");
    assert_eq!(without(&no_header), (200, None));
    assert_eq!(without(&no_callers), (200, None));
}
