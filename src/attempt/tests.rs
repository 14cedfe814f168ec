//! Unit tests of the attempt decisions (they also run compiled to wasm).

use super::*;
use crate::config::Config;
use crate::handoff::{PlanRecord, PlanText};
use crate::ids::ChainId;

fn config() -> Config {
    let json = r#"{"role":"upstream",
        "providers":[{"name":"a","credential":{"header":"x-api-key","value":"k"},"path_prefix":"/a"},
                     {"name":"b","authority":"b.example"}],
        "chains":[{"name":"main","providers":["a",{"provider":"b","model":"m-b"}]}],
        "timeouts":{"budget":"100s","min_remaining":"10s"}}"#;
    Config::from_json(json.as_bytes(), &|_| None).expect("valid config")
}

fn plan(slots: &[Slot]) -> PlanText {
    let record = PlanRecord {
        config: 0,
        chain: ChainId::FIRST,
        start_ms: 1_000,
        body_len: 20,
        log_started: false,
        stream: false,
        slots,
        limit: 0,
        context_window: &[],
        content_policy: &[],
        path: "/v1/chat",
        authority: "gw",
        model: "m",
    };
    PlanText::decode(record.encode()).expect("decodes")
}

/// No chain here has alternative lists: settling never asks for health.
fn no_lists(_: EntryId) -> Option<Slot> {
    unreachable!("no alternative list to admit from")
}

fn pair(fallback: Option<(ProviderId, ProviderId)>) -> Option<(usize, usize)> {
    fallback.map(|(from, to)| (from.index(), to.index()))
}

fn indices(providers: &[ProviderId]) -> Vec<usize> {
    providers.iter().map(|p| p.index()).collect()
}

const SLOTS: [Slot; 2] = [
    Slot {
        entry: EntryId::of(0),
        pristine: true,
        probe: false,
    },
    Slot {
        entry: EntryId::of(1),
        pristine: false,
        probe: false,
    },
];

#[test]
fn each_attempt_gets_its_providers_changes_and_restores_the_callers() {
    let c = config();
    let p = plan(&SLOTS);
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    let edits = request_edits(&c, &first, false);
    assert_eq!(edits.path.as_deref(), Some("/a/v1/chat"));
    assert_eq!(edits.authority, None);
    assert!(edits.drop_max_retries);
    assert_eq!(edits.body, BodyEdit::Keep);
    assert_eq!(edits.set, &[("x-api-key".to_string(), "k".to_string())]);
    let second = resolve(&c, p.view(), 2).expect("attempt 2");
    let edits = request_edits(&c, &second, false);
    assert_eq!(edits.path.as_deref(), Some("/v1/chat"));
    assert_eq!(edits.authority, Some("b.example"));
    assert_eq!(edits.body, BodyEdit::RewriteModel("m-b"));
    assert!(edits.clear.iter().any(|h| h == "x-api-key"));
    // No body: nothing to rewrite, the planned length is restored instead.
    assert_eq!(
        request_edits(&c, &second, true).body,
        BodyEdit::RestoreLength(20)
    );
    assert!(resolve(&c, p.view(), 3).is_none());
}

#[test]
fn a_failure_marks_the_retry_and_counts_the_fallback() {
    let c = config();
    let p = plan(&SLOTS);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    let outcome = Outcome {
        class: Class::ServerError,
        status: Some(500),
        retry_after_ms: Some(5),
    };
    let s = settle(&c, &a, outcome, 2_000, 1_500, &mut no_lists);
    assert_eq!(s.marker, Marker::Set);
    assert_eq!(pair(s.fallback), Some((0, 1)));
    assert_eq!(s.duration_ms, 500);
    assert_eq!(
        s.report.map(|(m, r)| (m, r.falls_over, r.retry_after_ms)),
        Some(("m", true, Some(5)))
    );
    assert!(s.budget_skips.is_empty());
    assert!(s.records_outcome());
    let mut log = String::new();
    s.write_log(&c, &mut log);
    assert_eq!(log, "a:server_error:500ms");
}

#[test]
fn a_pristine_success_reports_nothing_and_removes_a_forged_marker() {
    let c = config();
    let p = plan(&SLOTS);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    let ok = Outcome {
        class: Class::Ok,
        status: Some(200),
        retry_after_ms: None,
    };
    let s = settle(&c, &a, ok, 1_000, 1_000, &mut no_lists);
    assert_eq!(
        (s.marker, s.fallback, s.report),
        (Marker::Remove, None, None)
    );
    assert!(!s.records_outcome());
}

#[test]
fn past_the_budget_nothing_falls_over_and_later_providers_are_skipped() {
    let c = config();
    let p = plan(&SLOTS);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    let outcome = Outcome {
        class: Class::Overloaded,
        status: Some(503),
        retry_after_ms: None,
    };
    // Started at 1 s; at 92 s only 9 s of the 100 s budget are left.
    let s = settle(&c, &a, outcome, 92_000, 1_000, &mut no_lists);
    assert_eq!(
        (s.falls_over, s.marker, s.fallback),
        (false, Marker::Remove, None)
    );
    assert_eq!(indices(&s.budget_skips), vec![1]);
    // Without response headers Envoy retries by itself, but that attempt is refused as it
    // starts (`past_budget`): no fallback is counted, and no skip here.
    let refused = Outcome {
        class: Class::ConnectionError,
        status: None,
        retry_after_ms: None,
    };
    let s = settle(&c, &a, refused, 92_000, 1_000, &mut no_lists);
    assert_eq!((s.marker, s.fallback), (Marker::Untouched, None));
    let s = settle(&c, &a, refused, 50_000, 1_000, &mut no_lists);
    assert_eq!(
        pair(s.fallback),
        Some((0, 1)),
        "with room, Envoy's own retry is a fallback"
    );
    assert!(s.budget_skips.is_empty());
}

#[test]
fn the_body_gets_the_providers_model() {
    let (body, len) = rewrite_body(br#"{"model":"m","x":1}"#, "m-b");
    assert_eq!(body.as_deref(), Some(&br#"{"model":"m-b","x":1}"#[..]));
    assert_eq!(len, 21);
    assert_eq!(rewrite_body(b"not json", "m-b"), (None, 8));
}

#[test]
fn an_attempt_envoy_starts_past_the_budget_is_refused_with_the_last_failure() {
    let c = config();
    let p = plan(&SLOTS);
    let second = resolve(&c, p.view(), 2).expect("attempt 2");
    assert_eq!(past_budget(&c, &second, 50_000, || None), None);
    let refused =
        past_budget(&c, &second, 95_000, || Some(Class::ConnectionError)).expect("past the budget");
    assert_eq!(indices(&refused.skipped), vec![1]);
    assert_eq!(
        (refused.reply.status, refused.reply.code),
        (503, "connection_error")
    );
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    assert_eq!(
        past_budget(&c, &first, 95_000, || None),
        None,
        "the first always starts"
    );
}
