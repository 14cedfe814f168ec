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
        caller_api: None,
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

#[test]
fn answers_are_held_where_a_body_may_refine_them_and_the_configuration_allows() {
    let c = config();
    let p = plan(&SLOTS);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    // A 200 of a request that asked for no stream: released, its content type not even read.
    assert_eq!(
        hold(&c, &a, 200, false, || panic!("content type read")),
        None
    );
    // A failing answer a body rule may refine is held, unless it is already complete.
    assert_eq!(hold(&c, &a, 400, false, || None), Some(Hold::Body(400)));
    assert_eq!(hold(&c, &a, 400, true, || None), None);
    // Holding turned off (Envoy 1.36): nothing is held.
    let mut off = config();
    off.hold_answers = false;
    assert_eq!(hold(&off, &a, 400, false, || None), None);
    // A streamed request's 200: held only when it is an event stream.
    let record = PlanRecord {
        stream: true,
        ..PlanRecord {
            config: 0,
            chain: ChainId::FIRST,
            start_ms: 1_000,
            body_len: 20,
            log_started: false,
            stream: false,
            caller_api: None,
            slots: &SLOTS,
            limit: 0,
            context_window: &[],
            content_policy: &[],
            path: "/v1/chat",
            authority: "gw",
            model: "m",
        }
    };
    let streamed = PlanText::decode(record.encode()).expect("decodes");
    let a = resolve(&c, streamed.view(), 1).expect("attempt 1");
    let sse = || Some(b"Text/Event-Stream; charset=utf-8".to_vec());
    assert_eq!(hold(&c, &a, 200, false, sse), Some(Hold::Stream));
    assert_eq!(
        hold(&c, &a, 200, false, || Some(b"application/json".to_vec())),
        None
    );
    assert_eq!(hold(&c, &a, 200, false, || None), None);
    assert_eq!(hold(&off, &a, 200, false, sse), None);
}

#[test]
fn a_probes_success_is_always_reported_and_a_departed_caller_is_no_fallback() {
    let c = config();
    let p = plan(&SLOTS);
    let mut a = resolve(&c, p.view(), 1).expect("attempt 1");
    // The report is what closes a half-open breaker, whatever the slot's other flag says.
    a.slot.probe = true;
    let ok = Outcome {
        class: Class::Ok,
        status: Some(200),
        retry_after_ms: None,
    };
    let s = settle(&c, &a, ok, 1_000, 1_000, &mut no_lists);
    assert_eq!(s.report.map(|(_, r)| r.class), Some(Class::Ok));
    // A caller that went away ends the request: Envoy retries nothing, nothing falls over.
    let gone = Outcome {
        class: Class::ClientDisconnect,
        status: None,
        retry_after_ms: None,
    };
    let s = settle(&c, &a, gone, 2_000, 1_000, &mut no_lists);
    assert_eq!((s.marker, s.fallback), (Marker::Untouched, None));
}
