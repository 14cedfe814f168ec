//! Unit tests of the attempt decisions (they also run compiled to wasm).

use super::*;
use crate::config::Config;
use crate::handoff::{PlanRecord, PlanText};
use crate::ids::{ChainId, EntryId};

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
        team: Default::default(),
        start_ms: 1_000,
        body_len: 20,
        log_started: false,
        stream: false,
        caller_api: None,
        gather: false,
        ask_usage: false,
        stream_options: false,
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
struct NoLists;

impl plan::Gatekeeper for NoLists {
    fn gate(&self, _: ProviderId, _: &str) -> crate::health::Admission {
        unreachable!("no alternative list to admit from")
    }
}

fn pair(fallback: Option<(ProviderId, ProviderId)>) -> Option<(usize, usize)> {
    fallback.map(|(from, to)| (from.index(), to.index()))
}

fn indices(providers: &[ProviderId]) -> Vec<usize> {
    providers.iter().map(|p| p.index()).collect()
}

/// The plan record of a request on `chain` from a caller of `caller_api` on `path`, over
/// [`SLOTS`] (the same-API mend tests).
fn same_api_record(
    chain: ChainId,
    caller_api: Option<Api>,
    path: &'static str,
) -> PlanRecord<'static> {
    PlanRecord {
        config: 0,
        chain,
        team: Default::default(),
        start_ms: 1_000,
        body_len: 20,
        log_started: false,
        stream: false,
        caller_api,
        stream_options: false,
        gather: false,
        ask_usage: false,
        slots: &SLOTS,
        limit: 0,
        context_window: &[],
        content_policy: &[],
        path,
        authority: "gw",
        model: "m",
    }
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
    assert_eq!(
        edits.body,
        BodyEdit::Whole(WholeEdit {
            model: Some("m-b".to_string()),
            ..WholeEdit::default()
        })
    );
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
        first_try: None,
    };
    let s = settle(&c, &a, outcome, 2_000, 1_500, &NoLists);
    assert_eq!(s.marker, Marker::Set);
    assert_eq!(pair(s.fallback), Some((0, 1)));
    assert_eq!(s.duration_ms, 500);
    assert_eq!(
        s.report.map(|(m, r)| (m, r.falls_over, r.retry_after_ms)),
        Some(("m", true, Some(5)))
    );
    assert!(s.time_skips.is_empty());
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
        first_try: None,
    };
    let s = settle(&c, &a, ok, 1_000, 1_000, &NoLists);
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
        first_try: None,
    };
    // Started at 1 s; at 92 s only 9 s of the 100 s budget are left.
    let s = settle(&c, &a, outcome, 92_000, 1_000, &NoLists);
    assert_eq!(
        (s.falls_over, s.marker, s.fallback),
        (false, Marker::Remove, None)
    );
    assert_eq!(indices(&s.time_skips), vec![1]);
    // Without response headers Envoy retries by itself, but that attempt is refused as it
    // starts (`past_total_time`): no fallback is counted, and no skip here.
    let refused = Outcome {
        class: Class::ConnectionError,
        status: None,
        retry_after_ms: None,
        first_try: None,
    };
    let s = settle(&c, &a, refused, 92_000, 1_000, &NoLists);
    assert_eq!((s.marker, s.fallback), (Marker::Untouched, None));
    let s = settle(&c, &a, refused, 50_000, 1_000, &NoLists);
    assert_eq!(
        pair(s.fallback),
        Some((0, 1)),
        "with room, Envoy's own retry is a fallback"
    );
    assert!(s.time_skips.is_empty());
}

#[test]
fn the_body_gets_the_providers_model() {
    let c = config();
    let edit = WholeEdit {
        model: Some("m-b".to_string()),
        ..WholeEdit::default()
    };
    let edited = edit
        .apply(&c, br#"{"model":"m","x":1}"#)
        .expect("no translation");
    assert_eq!(
        edited.body.as_deref(),
        Some(&br#"{"model":"m-b","x":1}"#[..])
    );
    assert_eq!(edited.len, 21);
    let edited = edit.apply(&c, b"not json").expect("no translation");
    assert_eq!((edited.body, edited.len), (None, 8));
}

#[test]
fn an_attempt_envoy_starts_past_the_budget_is_refused_with_the_last_failure() {
    let c = config();
    let p = plan(&SLOTS);
    let second = resolve(&c, p.view(), 2).expect("attempt 2");
    assert_eq!(past_total_time(&c, &second, 50_000, || None), None);
    let refused = past_total_time(&c, &second, 95_000, || Some(Class::ConnectionError))
        .expect("past the budget");
    assert_eq!(indices(&refused.skipped), vec![1]);
    assert_eq!(
        (refused.reply.status, refused.reply.code),
        (503, "connection_error")
    );
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    assert_eq!(
        past_total_time(&c, &first, 95_000, || None),
        None,
        "the first always starts"
    );
}

/// A serialized header map (`header_pairs` layout), as Envoy hands it over.
fn map(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = (pairs.len() as u32).to_le_bytes().to_vec();
    for (k, v) in pairs {
        out.extend((k.len() as u32).to_le_bytes());
        out.extend((v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend(k.as_bytes());
        out.push(0);
        out.extend(v.as_bytes());
        out.push(0);
    }
    out
}

fn streamed_plan() -> PlanText {
    let record = PlanRecord {
        config: 0,
        chain: ChainId::FIRST,
        team: Default::default(),
        start_ms: 1_000,
        body_len: 20,
        log_started: false,
        stream: true,
        caller_api: None,
        gather: false,
        ask_usage: false,
        stream_options: false,
        slots: &SLOTS,
        limit: 0,
        context_window: &[],
        content_policy: &[],
        path: "/v1/chat",
        authority: "gw",
        model: "m",
    };
    PlanText::decode(record.encode()).expect("decodes")
}

#[test]
fn answers_are_held_where_a_body_may_refine_them_and_the_configuration_allows() {
    let c = config();
    let p = plan(&SLOTS);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    let head = |status: &str, content_type: &str| {
        let m = map(&[(":status", status), ("content-type", content_type)]);
        let h = ResponseHead::read(&m, false);
        (h.status, h.content_type.map(<[u8]>::to_vec))
    };
    let held = |c: &Config, a: &Attempt<'_, '_>, status: &str, ct: &str, eos: bool| {
        let m = map(&[(":status", status), ("content-type", ct)]);
        hold(c, a, &ResponseHead::read(&m, eos), eos)
    };
    assert_eq!(head("429", "x"), (429, Some(b"x".to_vec())));
    // A 200 of a request that asked for no stream: released.
    assert_eq!(held(&c, &a, "200", "text/event-stream", false), None);
    // A failing answer a body rule may refine is held, unless it is already complete.
    assert_eq!(held(&c, &a, "400", "", false), Some(Hold::Body(400)));
    assert_eq!(held(&c, &a, "400", "", true), None);
    // One whose class AWS's error type names is not: its headers decided.
    let aws = |status: &str, kind: &str| {
        let m = map(&[(":status", status), ("x-amzn-errortype", kind)]);
        let h = ResponseHead::read(&m, false);
        (hold(&c, &a, &h, false), h.class(&a))
    };
    assert_eq!(
        aws("400", "ServiceQuotaExceededException:http://x/"),
        (None, Class::QuotaExhausted)
    );
    assert_eq!(aws("408", "ModelTimeoutException:"), (None, Class::Timeout));
    assert_eq!(
        aws("400", "ValidationException:http://x/"),
        (Some(Hold::Body(400)), Class::InvalidRequest),
        "its body decides"
    );
    assert_eq!(aws("200", "ThrottlingException"), (None, Class::Ok));
    // Holding turned off (Envoy 1.36): nothing is held.
    let mut off = config();
    off.hold_answers = false;
    assert_eq!(held(&off, &a, "400", "", false), None);
    // A streamed request's 200: held only when it is an event stream.
    let streamed = streamed_plan();
    let a = resolve(&c, streamed.view(), 1).expect("attempt 1");
    let sse = "Text/Event-Stream; charset=utf-8";
    assert_eq!(held(&c, &a, "200", sse, false), Some(Hold::Stream));
    assert_eq!(held(&c, &a, "200", "application/json", false), None);
    let bare = map(&[(":status", "200")]);
    assert_eq!(hold(&c, &a, &ResponseHead::read(&bare, false), false), None);
    assert_eq!(held(&off, &a, "200", sse, false), None);
}

#[test]
fn an_empty_or_unreadable_200_is_a_server_error() {
    let c = config();
    let p = plan(&SLOTS);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    let class = |pairs: &[(&str, &str)], eos: bool| ResponseHead::read(&map(pairs), eos).class(&a);
    let json = ("content-type", "application/json; charset=utf-8");
    assert_eq!(class(&[(":status", "200"), json], false), Class::Ok);
    assert_eq!(
        class(
            &[(":status", "200"), ("content-type", "text/event-stream")],
            false
        ),
        Class::Ok
    );
    assert_eq!(
        class(
            &[
                (":status", "200"),
                ("content-type", "application/vnd.amazon.eventstream")
            ],
            false
        ),
        Class::Ok
    );
    // No content type at all: given the benefit of the doubt.
    assert_eq!(class(&[(":status", "200")], false), Class::Ok);
    // An HTML page from a proxy in front of the provider, or a body that is not there.
    assert_eq!(
        class(
            &[
                (":status", "200"),
                ("content-type", "text/html; charset=utf-8")
            ],
            false
        ),
        Class::ServerError
    );
    assert_eq!(
        class(&[(":status", "200"), json, ("content-length", "0")], false),
        Class::ServerError
    );
    assert_eq!(class(&[(":status", "200"), json], true), Class::ServerError);
    // Other statuses keep their class; a 204 is no model answer's status but not "empty 200".
    assert_eq!(
        class(&[(":status", "503"), ("content-type", "text/html")], false),
        Class::Overloaded
    );
    // A request without a model (another GET) may get any content.
    let record = PlanRecord {
        config: 0,
        chain: ChainId::FIRST,
        team: Default::default(),
        start_ms: 1_000,
        body_len: 0,
        log_started: false,
        stream: false,
        caller_api: None,
        gather: false,
        ask_usage: false,
        stream_options: false,
        slots: &SLOTS,
        limit: 0,
        context_window: &[],
        content_policy: &[],
        path: "/v1/files/f/content",
        authority: "gw",
        model: "",
    };
    let get = PlanText::decode(record.encode()).expect("decodes");
    let a = resolve(&c, get.view(), 1).expect("attempt 1");
    let m = map(&[
        (":status", "200"),
        ("content-type", "application/octet-stream"),
    ]);
    assert_eq!(ResponseHead::read(&m, false).class(&a), Class::Ok);
    // The provider's own retry marker is seen (and removed by the glue).
    let m = map(&[(":status", "200"), (crate::wire::RETRY_MARKER_HEADER, "1")]);
    assert!(ResponseHead::read(&m, false).marker);
    assert!(!ResponseHead::read(&map(&[(":status", "200")]), false).marker);
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
        first_try: None,
    };
    let s = settle(&c, &a, ok, 1_000, 1_000, &NoLists);
    assert_eq!(s.report.map(|(_, r)| r.class), Some(Class::Ok));
    // A caller that went away ends the request: Envoy retries nothing, nothing falls over.
    let gone = Outcome {
        class: Class::ClientDisconnect,
        status: None,
        retry_after_ms: None,
        first_try: None,
    };
    let s = settle(&c, &a, gone, 2_000, 1_000, &NoLists);
    assert_eq!((s.marker, s.fallback), (Marker::Untouched, None));
}

/// The test configuration with in-place retry on its chain (and a first-token timeout).
fn retrying() -> Config {
    let json = r#"{"role":"upstream",
        "providers":[{"name":"a"},{"name":"b"}],
        "chains":[{"name":"main","providers":["a","b"],"max_attempts":3,
                   "retry_in_place":{"back_off":"400ms","max_retry_after":"2s"}}],
        "timeouts":{"attempt":"20s","budget":"100s","min_remaining":"10s","first_token":"5s"}}"#;
    Config::from_json(json.as_bytes(), &|_| None).expect("valid config")
}

fn limited_plan(slots: &[Slot], limit: u8) -> PlanText {
    let record = PlanRecord {
        config: 0,
        chain: ChainId::FIRST,
        team: Default::default(),
        start_ms: 1_000,
        body_len: 20,
        log_started: false,
        stream: true,
        caller_api: None,
        gather: false,
        ask_usage: false,
        stream_options: false,
        slots,
        limit,
        context_window: &[],
        content_policy: &[],
        path: "/v1/messages",
        authority: "gw",
        model: "m",
    };
    PlanText::decode(record.encode()).expect("decodes")
}

fn failed(class: Class, status: Option<u16>, retry_after_ms: Option<u64>) -> Outcome {
    Outcome {
        class,
        status,
        retry_after_ms,
        first_try: None,
    }
}

/// [`settle`] 2 s into the request, 1.5 s into the attempt, with no alternative list.
fn settle_now<'a>(c: &Config, a: &Attempt<'a, 'a>, outcome: Outcome) -> Settlement<'a> {
    settle(c, a, outcome, 2_000, 1_500, &NoLists)
}

#[test]
fn a_retryable_failure_is_retried_once_in_place_within_the_attempt_limit() {
    let c = retrying();
    let p = limited_plan(&SLOTS, 3);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    let entries = |walk: &Option<Vec<Slot>>| {
        walk.as_ref()
            .map(|w| w.iter().map(|s| s.entry.index()).collect::<Vec<_>>())
    };
    for (class, status) in [
        (Class::ServerError, Some(500)),
        (Class::Overloaded, Some(503)),
        (Class::ConnectionError, None),
    ] {
        let s = settle_now(&c, &a, failed(class, status, None));
        assert_eq!(s.retry_in_place_after_ms, Some(400), "{class:?}");
        assert_eq!(entries(&s.reroute), Some(vec![0, 0, 1]), "{class:?}");
        assert_eq!(s.fallback, None, "a retry in place is no fallback");
        assert!(s.report.is_some(), "it still counts toward the breaker");
    }
    // The retried slot reports its success (it failed just now) and probes nothing.
    let s = settle_now(&c, &a, failed(Class::ServerError, Some(500), None));
    let again = s.reroute.expect("rerouted")[1];
    assert!(!again.pristine && !again.probe);
    // A 429 only when Retry-After asks for no more than max_retry_after, after that wait.
    let s = settle_now(&c, &a, failed(Class::RateLimited, Some(429), Some(1_000)));
    assert_eq!(s.retry_in_place_after_ms, Some(1_000));
    for retry_after in [Some(2_001), None] {
        let s = settle_now(&c, &a, failed(Class::RateLimited, Some(429), retry_after));
        assert_eq!((s.retry_in_place_after_ms, &s.reroute), (None, &None));
        assert_eq!(pair(s.fallback), Some((0, 1)));
    }
    // Never for timeouts, setup faults or classes read from the body.
    for class in [Class::Timeout, Class::QuotaExhausted, Class::ModelNotFound] {
        let s = settle_now(&c, &a, failed(class, Some(500), Some(10)));
        assert_eq!(s.retry_in_place_after_ms, None, "{class:?}");
    }
    // Once: the retry itself moves on.
    let walk = [SLOTS[0], SLOTS[0], SLOTS[1]];
    let p2 = limited_plan(&walk, 3);
    let retry = resolve(&c, p2.view(), 2).expect("attempt 2");
    assert!(is_retry_in_place(&retry));
    let s = settle_now(&c, &retry, failed(Class::ServerError, Some(500), None));
    assert_eq!((s.retry_in_place_after_ms, s.marker), (None, Marker::Set));
    // Not past the attempt limit: the last attempt fails as it is.
    let p3 = limited_plan(&SLOTS, 2);
    let last = resolve(&c, p3.view(), 2).expect("attempt 2");
    let s = settle_now(&c, &last, failed(Class::ServerError, Some(500), None));
    assert_eq!(s.retry_in_place_after_ms, None);
    // A wait that would leave the retry less than half its time for an answer moves on: here
    // the streamed attempt's wait for headers is the first-token timeout (5 s).
    let s = settle_now(&c, &a, failed(Class::RateLimited, Some(429), Some(2_000)));
    assert_eq!(s.retry_in_place_after_ms, Some(2_000));
    let mut short = retrying();
    short.timeouts.first_token_ms = 4_000;
    let s = settle_now(
        &short,
        &a,
        failed(Class::RateLimited, Some(429), Some(2_000)),
    );
    assert_eq!(s.retry_in_place_after_ms, None);
    // Chains without it never retry in place.
    let plain = config();
    let a = resolve(&plain, p.view(), 1).expect("attempt 1");
    let s = settle_now(&plain, &a, failed(Class::ServerError, Some(500), None));
    assert_eq!(s.retry_in_place_after_ms, None);
}

#[test]
fn deadlines_follow_the_first_token_timeout_and_the_budget() {
    let c = retrying();
    let p = limited_plan(&SLOTS, 3);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    // Streamed: first token 5 s after the attempt's start; the budget (ends at 101 s) is
    // beyond Envoy's own wait for headers (5 s).
    assert_eq!(
        deadlines(&c, &a, 2_000),
        Deadlines {
            first_token_at: Some(7_000),
            total_time_at: None
        }
    );
    // Late in the budget: the attempt waits only until the budget's end.
    assert_eq!(deadlines(&c, &a, 97_000).total_time_at, Some(101_000));
    // A request that asked for no stream has no first-token deadline; its wait is the attempt's.
    let q = plan(&SLOTS);
    let b = resolve(&c, q.view(), 1).expect("attempt 1");
    assert_eq!(deadlines(&c, &b, 2_000), Deadlines::default());
    assert_eq!(deadlines(&c, &b, 85_000).total_time_at, Some(101_000));
    assert_eq!(c.timeouts.headers_wait_ms(true), 5_000);
    assert_eq!(c.timeouts.headers_wait_ms(false), 20_000);
    // The budget's answer names this provider's timeout and skips the rest.
    let ended = total_time_ended(&c, &a);
    assert_eq!(
        (ended.reply.status, indices(&ended.skipped)),
        (504, vec![1])
    );
}

#[test]
fn the_end_of_a_streamed_answer_is_watched_in_the_callers_dialect() {
    let c = retrying();
    let p = limited_plan(&SLOTS, 3);
    let a = resolve(&c, p.view(), 1).expect("attempt 1");
    let sse = map(&[(":status", "200"), ("content-type", "text/event-stream")]);
    assert_eq!(
        watch_end(&a, &ResponseHead::read(&sse, false)),
        Some(Api::AnthropicMessages)
    );
    let json = map(&[(":status", "200"), ("content-type", "application/json")]);
    assert_eq!(watch_end(&a, &ResponseHead::read(&json, false)), None);
    let q = plan(&SLOTS);
    let b = resolve(&c, q.view(), 1).expect("attempt 1");
    assert_eq!(
        watch_end(&b, &ResponseHead::read(&sse, false)),
        None,
        "not streamed"
    );
    // Under a first-token timeout a streamed 200 is held until its first output.
    assert_eq!(
        hold(&c, &a, &ResponseHead::read(&sse, false), false),
        Some(Hold::FirstOutput)
    );
}

#[test]
fn an_entrys_settings_are_written_in_the_dialect_its_provider_gets() {
    let json = r#"{"role":"upstream","providers":[{"name":"a"},{"name":"c","api":"anthropic"}],
        "chains":[{"name":"main","providers":[{"provider":"a","effort":"low"},
          {"provider":"c","model":"claude","effort":"high","max_tokens":30000}]}]}"#;
    let c = Config::from_json(json.as_bytes(), &|_| None).expect("valid config");
    let mut record = PlanRecord {
        config: 0,
        chain: ChainId::FIRST,
        team: Default::default(),
        start_ms: 1_000,
        body_len: 20,
        log_started: false,
        stream: false,
        caller_api: Some(Api::OpenAiChat),
        gather: false,
        ask_usage: false,
        stream_options: false,
        slots: &SLOTS,
        limit: 0,
        context_window: &[],
        content_policy: &[],
        path: "/v1/chat/completions",
        authority: "gw",
        model: "m",
    };
    let p = PlanText::decode(record.encode()).expect("decodes");
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    let low = crate::translate::entry_settings::EntrySettings {
        effort: Some(crate::translate::entry_settings::Effort::Low),
        max_tokens: None,
        stream: false,
        usage: false,
        stream_options: false,
    };
    // No model to rewrite: the settings alone hold the body.
    let edit = WholeEdit {
        settings: Some((Api::OpenAiChat, low)),
        ..WholeEdit::default()
    };
    assert_eq!(
        request_edits(&c, &first, false).body,
        BodyEdit::Whole(edit.clone())
    );
    let edited = edit
        .apply(&c, br#"{"model":"m","messages":[]}"#)
        .expect("no translation");
    let body = edited.body.expect("edited");
    assert_eq!(
        body,
        br#"{"model":"m","messages":[],"reasoning_effort":"low"}"#
    );
    assert_eq!(edited.len, body.len());
    // Translated for Messages: the thinking budget, in the translated body.
    let second = resolve(&c, p.view(), 2).expect("attempt 2");
    assert!(second.translation.is_some(), "translated");
    let BodyEdit::Whole(edit) = request_edits(&c, &second, false).body else {
        panic!("the translated body is edited whole")
    };
    let body = edit
        .apply(
            &c,
            br#"{"model":"m","temperature":0.5,"messages":[{"role":"user","content":"hi"}]}"#,
        )
        .expect("translates")
        .body
        .expect("translated");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["model"], "claude");
    assert_eq!(v["max_tokens"], 30000);
    assert_eq!(
        v["thinking"],
        serde_json::json!({"type": "enabled", "budget_tokens": 20000})
    );
    assert!(v.get("temperature").is_none(), "{v}");
    // An entry without settings keeps the byte-exact model rewrite; embeddings take none.
    record.path = "/v1/embeddings";
    let p = PlanText::decode(record.encode()).expect("decodes");
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    assert_eq!(settings_edit(&first), None);
    assert_eq!(request_edits(&c, &first, false).body, BodyEdit::Keep);
}

#[test]
fn a_deadline_acts_once_as_the_answer_stands() {
    use super::timers::{Ends, Timers, Wake};
    let mut t = Timers {
        deadlines: Deadlines {
            first_token_at: Some(10),
            total_time_at: Some(20),
        },
        send_at: Some(5),
    };
    assert_eq!(t.next(None, false, false), Some(5));
    let first = t.due(5, None, false, false);
    assert_eq!(
        first,
        Wake {
            send: true,
            ends: None
        }
    );
    // The first-token deadline counts only while the stream is held for its first output.
    assert_eq!(t.next(Some(Hold::Stream), false, true), Some(20));
    assert_eq!(t.next(Some(Hold::FirstOutput), false, true), Some(10));
    let held = Some(Hold::FirstOutput);
    assert_eq!(t.due(10, held, false, true).ends, Some(Ends::FirstToken));
    assert_eq!(
        Ends::FirstToken.held_outcome(),
        Some((Class::Timeout, 200, false))
    );
    assert_eq!(t.next(None, true, true), None, "settled and answered");
    let body = Some(Hold::Body(503));
    assert_eq!(
        t.due(20, body, true, true).ends,
        Some(Ends::TotalTimeHeld(503))
    );
    assert_eq!(t.due(30, None, false, false).ends, None, "once");
    let mut waiting = Timers {
        deadlines: Deadlines {
            first_token_at: None,
            total_time_at: Some(20),
        },
        send_at: None,
    };
    assert_eq!(
        waiting.due(20, None, false, false).ends,
        Some(Ends::TotalTimeWaiting)
    );
}

#[test]
fn a_same_api_attempt_in_a_chain_with_gemini_sends_its_tool_call_ids_unsigned() {
    let json = r#"{"role":"upstream",
        "providers":[{"name":"o","api":"openai"},{"name":"g","api":"gemini_native"},
                     {"name":"c","api":"anthropic"}],
        "chains":[{"name":"gpt","providers":["o",{"provider":"g","model":"gemini-3-pro"}]},
                  {"name":"plain","providers":["o",{"provider":"c","model":"claude"}]}]}"#;
    let c = Config::from_json(json.as_bytes(), &|_| None).expect("valid config");
    assert_eq!(
        c.chains.iter().map(|c| c.signs_calls).collect::<Vec<_>>(),
        [true, false],
        "decided once, when the configuration loads"
    );
    let record = same_api_record;
    let body = br#"{"model":"m","messages":[{"role":"user","content":"a__thought__b"},
        {"role":"assistant","tool_calls":[{"id":"call_1__thought__Ci4B_0e-Kb6","type":"function",
         "function":{"name":"f","arguments":"{}"}}]},
        {"role":"tool","tool_call_id" : "call_1__thought__Ci4B_0e-Kb6","content":"3"}]}"#;
    let unsigned = br#"{"model":"m","messages":[{"role":"user","content":"a__thought__b"},
        {"role":"assistant","tool_calls":[{"id":"call_1","type":"function",
         "function":{"name":"f","arguments":"{}"}}]},
        {"role":"tool","tool_call_id" : "call_1","content":"3"}]}"#;
    let chat = Some(Api::OpenAiChat);
    let p = PlanText::decode(record(ChainId::FIRST, chat, "/v1/chat/completions").encode())
        .expect("decodes");
    // Same API to OpenAI: held whole, the ids sent unsigned (the text left alone).
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    assert!(first.translation.is_none() && request::mend(&first).is_some_and(|m| m.unsign));
    let edit = WholeEdit {
        mend: request::Mend {
            unsign: true,
            unwrap: None,
        },
        ..WholeEdit::default()
    };
    assert_eq!(
        request_edits(&c, &first, false).body,
        BodyEdit::Whole(edit.clone())
    );
    let edited = edit.apply(&c, body).expect("no translation");
    assert_eq!(edited.body.as_deref(), Some(&unsigned[..]));
    assert_eq!(edited.len, unsigned.len());
    // A body without signed ids goes as it is.
    let plain = edit.apply(&c, unsigned).expect("no translation");
    assert_eq!((plain.body, plain.len), (None, unsigned.len()));
    // To Gemini (translated): the signature goes back on its call.
    let second = resolve(&c, p.view(), 2).expect("attempt 2");
    assert!(second.translation.is_some() && request::mend(&second).is_none());
    let BodyEdit::Whole(edit) = request_edits(&c, &second, false).body else {
        panic!("translated whole")
    };
    assert_eq!(edit.mend, request::Mend::default());
    let sent = edit
        .apply(&c, body)
        .expect("translates")
        .body
        .expect("body");
    let sent = String::from_utf8(sent).expect("utf-8");
    assert!(
        sent.contains(r#""thoughtSignature":"Ci4B_0e-Kb6""#),
        "{sent}"
    );
    // A Responses caller's same-API attempt too; a chain without a Gemini entry never looks.
    let responses = Some(Api::OpenAiResponses);
    let p = PlanText::decode(record(ChainId::FIRST, responses, "/v1/responses").encode())
        .expect("decodes");
    assert!(request::mend(&resolve(&c, p.view(), 1).expect("attempt 1")).is_some_and(|m| m.unsign));
    let p = PlanText::decode(record(ChainId::of(1), chat, "/v1/chat/completions").encode())
        .expect("decodes");
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    assert!(request::mend(&first).is_none());
    assert_eq!(request_edits(&c, &first, false).body, BodyEdit::Keep);
    // No body: nothing to edit.
    let p = PlanText::decode(record(ChainId::FIRST, chat, "/v1/chat/completions").encode())
        .expect("decodes");
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    assert_eq!(request_edits(&c, &first, true).body, BodyEdit::Keep);
}

#[test]
fn a_same_api_attempt_in_a_chain_of_messages_and_responses_takes_our_wrapped_reasoning_out() {
    let json = r#"{"role":"upstream",
        "providers":[{"name":"c","api":"anthropic"},{"name":"r","api":"openai_responses"},
                     {"name":"o","api":"openai"}],
        "chains":[{"name":"claude","providers":["c",{"provider":"r","model":"gpt-5"}]},
                  {"name":"plain","providers":["c",{"provider":"o","model":"gpt-4o"}]}]}"#;
    let c = Config::from_json(json.as_bytes(), &|_| None).expect("valid config");
    assert_eq!(
        c.chains
            .iter()
            .map(|c| (c.wraps_thinking, c.wraps_reasoning))
            .collect::<Vec<_>>(),
        [(true, true), (false, true)],
        "decided once, when the configuration loads"
    );
    let record = same_api_record;
    let messages = Some(Api::AnthropicMessages);
    let p = PlanText::decode(record(ChainId::FIRST, messages, "/v1/messages").encode())
        .expect("decodes");
    // Same API to Anthropic: held whole, our thinking block taken out.
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    let mend = request::Mend {
        unsign: false,
        unwrap: messages,
    };
    assert_eq!(request::mend(&first), Some(mend));
    let BodyEdit::Whole(edit) = request_edits(&c, &first, false).body else {
        panic!("held whole")
    };
    assert_eq!(edit.mend, mend);
    let body = br#"{"model":"m","messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"llm-failover:openai:rs_1:gA"},{"type":"text","text":"x"}]}]}"#;
    let edited = edit.apply(&c, body).expect("no translation");
    let sent = br#"{"model":"m","messages":[{"role":"assistant","content":[{"type":"text","text":"x"}]}]}"#;
    assert_eq!(edited.body.as_deref(), Some(&sent[..]));
    assert_eq!(edited.len, sent.len());
    // A body without ours goes as it is.
    let plain = edit.apply(&c, sent).expect("no translation");
    assert_eq!((plain.body, plain.len), (None, sent.len()));
    // Translated to Responses: the translation unwraps it, no mend.
    let second = resolve(&c, p.view(), 2).expect("attempt 2");
    assert!(second.translation.is_some() && request::mend(&second).is_none());
    // A Responses caller's same-API attempt to the Responses provider (attempt 2) mends its
    // reasoning items; a Chat caller has none.
    let p = PlanText::decode(
        record(ChainId::FIRST, Some(Api::OpenAiResponses), "/v1/responses").encode(),
    )
    .expect("decodes");
    let second = resolve(&c, p.view(), 2).expect("attempt 2");
    assert_eq!(
        request::mend(&second).and_then(|m| m.unwrap),
        Some(Api::OpenAiResponses)
    );
    let p = PlanText::decode(
        record(
            ChainId::FIRST,
            Some(Api::OpenAiChat),
            "/v1/chat/completions",
        )
        .encode(),
    )
    .expect("decodes");
    assert!(request::mend(&resolve(&c, p.view(), 1).expect("attempt 1")).is_none());
    // A chain without a Responses entry gives a Messages caller no thinking of ours: its
    // same-API attempt keeps its body; a Responses caller's same-API attempt to `api: openai`
    // (OpenAI's Responses API as it is) takes Claude's reasoning items of ours out.
    let p = PlanText::decode(record(ChainId::of(1), messages, "/v1/messages").encode())
        .expect("decodes");
    let first = resolve(&c, p.view(), 1).expect("attempt 1");
    assert!(request::mend(&first).is_none());
    assert_eq!(request_edits(&c, &first, false).body, BodyEdit::Keep);
    let p = PlanText::decode(
        record(ChainId::of(1), Some(Api::OpenAiResponses), "/v1/responses").encode(),
    )
    .expect("decodes");
    let second = resolve(&c, p.view(), 2).expect("attempt 2");
    assert!(second.translation.is_none());
    assert_eq!(
        request::mend(&second).and_then(|m| m.unwrap),
        Some(Api::OpenAiResponses)
    );
}
