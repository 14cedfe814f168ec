//! The upstream role (on every provider cluster, once per attempt): applies what `attempt`
//! decides for the request, classifies the outcome, and applies what `attempt::settle` decides
//! for it (marker header, metrics, breaker report, attempt log, outcome record).

use super::counting::Counting;
use super::registry;
use super::{
    health, send_reply, status_code, text_property, u64_property, Flow, Host, Map, Metrics,
};
use crate::attempt::{
    self, AnswerTranslation, BodyEdit, DelaySource, Hold, Marker, Outcome, Translation,
};
use crate::classify::{classify_status, Class};
use crate::config::Config;
use crate::destination::{self, Refusal};
use crate::dialects;
use crate::envelope::eventstream::Unframer;
use crate::handoff::{self, Outcomes, PlanText, Refused};
use crate::header_pairs::HeaderPairs;
use crate::host::FixedClock;
use crate::plan::SkipReason;
use crate::retry_after;
use crate::translate::{self, Api, StreamContext, StreamTranslator};
use crate::wire;
use std::rc::Rc;

/// Envoy's `DC` response flag: the downstream connection went away.
const DOWNSTREAM_CONNECTION_TERMINATION: u64 = 0x4000;

/// This attempt as read at its request headers.
struct Current {
    number: usize,
    plan: PlanText,
    start_ms: u64,
    /// What resolving it found: later callbacks find it again by index ([`Current::attempt`]).
    known: attempt::Known,
}

impl Current {
    /// This attempt under `config` (the one it was resolved in).
    fn attempt<'c>(&self, config: &'c Config) -> Option<attempt::Attempt<'c, '_>> {
        attempt::again(config, self.plan.view(), self.known)
    }
}

pub struct Upstream<H: Host> {
    host: H,
    config: Rc<Config>,
    metrics: Rc<Metrics>,
    current: Option<Current>,
    /// The request body's one edit, while waiting for the whole body.
    body: Option<attempt::WholeEdit>,
    /// The attempt is translated for its provider (behaviour.md 13): its answer is translated back.
    translation: Option<Translation>,
    /// An OpenAI caller asked for usage in its stream (read from its body when translated).
    include_usage: bool,
    /// How the answer is translated for the caller, once it is known to go to the caller.
    answer: Option<Answering>,
    /// Response headers arrived (or the outcome was otherwise settled).
    settled: bool,
    /// The response is held until the start of its body is read (behaviour.md 3).
    hold: Option<Hold>,
    /// The request did not ask for a stream: this `200` stream is gathered into one JSON
    /// answer (docs/behaviour.md section 5).
    gather: Option<Gathering>,
    /// Bytes of the held body received so far.
    held: usize,
    /// The provider's answer carried a header named like the retry marker.
    provider_marker: bool,
    /// Response headers came (the attempt is no longer waiting for its answer to start).
    answered: bool,
    /// What this attempt must do by itself, and when (behaviour.md 5; see [`Upstream::deadline`]).
    deadlines: attempt::Deadlines,
    /// An in-place retry waits until then before it is sent.
    send_at: Option<u64>,
    /// The stream's last bytes, while its end is watched for the final event (behaviour.md 5).
    watch: Option<Vec<u8>>,
    /// The caller speaks Anthropic Messages (for the error event of a stream cut short).
    messages_caller: bool,
    /// A Bedrock event stream being unwrapped into Anthropic SSE (behaviour.md 13).
    unframe: Option<Unframing>,
    /// The provider's answer was replaced by a whole one ([`Upstream::give_whole`]): the rest
    /// of its body never reaches the caller.
    replaced: bool,
    /// The answer is an event stream (its `content-type`, once the headers came).
    event_stream: bool,
    /// The usage of an answer that goes to the caller, read as it passes (docs/behaviour.md
    /// section 15), with the attempt log it joins.
    counting: Option<Counting>,
}

/// An AWS event stream turned into SSE as it passes. While the answer is held (its first event
/// read, behaviour.md 3) Envoy keeps the body: the first `done` bytes of it are SSE already.
#[derive(Default)]
struct Unframing {
    unframer: Unframer,
    done: usize,
}

/// A gathered stream: its dialect, the caller's API and the bytes so far.
#[derive(Debug)]
struct Gathering {
    provider: Api,
    caller: Api,
    bytes: Vec<u8>,
}

/// A translated attempt's answer on its way to the caller.
enum Answering {
    /// Buffered whole, then replaced (`translate::response`).
    Whole { status: u16 },
    /// Translated chunk by chunk. While its end marker is owed, the caller's bytes stay in
    /// the buffer (`kept` of them, translated already), where whichever callback ends the
    /// stream (the last body chunk or trailers) can still add the end to them.
    Stream {
        stream: StreamTranslator,
        kept: usize,
    },
}

impl<H: Host> Upstream<H> {
    pub fn new(host: H, config: Rc<Config>, metrics: Rc<Metrics>) -> Self {
        Upstream {
            host,
            config,
            metrics,
            current: None,
            body: None,
            gather: None,
            translation: None,
            include_usage: false,
            answer: None,
            settled: false,
            hold: None,
            held: 0,
            provider_marker: false,
            answered: false,
            deadlines: attempt::Deadlines::default(),
            send_at: None,
            watch: None,
            messages_caller: false,
            unframe: None,
            replaced: false,
            event_stream: false,
            counting: None,
        }
    }

    /// Reads this attempt's number and the plan; `None` when the request was not planned by
    /// our downstream role (then this role leaves the attempt alone). The plan is `None` inside
    /// when it is there but unreadable.
    fn read_current(&self) -> Option<(usize, Option<PlanText>)> {
        let number = self
            .host
            .header(Map::Request, wire::ATTEMPT_COUNT_HEADER)
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<usize>().ok())
            .unwrap_or(1);
        let text = text_property(&self.host, handoff::PLAN.as_bytes())?;
        Some((number, PlanText::decode(text)))
    }

    /// Settles the attempt: applies what `attempt::settle` decides. Returns what it did with
    /// the retry marker.
    fn settle(&mut self, class: Class, status: Option<u16>, retry_after_ms: Option<u64>) -> Marker {
        if self.settled {
            return Marker::Untouched;
        }
        self.settled = true;
        let Some(current) = &self.current else {
            return Marker::Untouched;
        };
        let config = &*self.config;
        let Some(a) = current.attempt(config) else {
            return Marker::Untouched;
        };
        let host = &self.host;
        let metrics = &self.metrics;
        let now = host.now_ms();
        // An in-place retry's first try: the request counts once toward the breaker.
        let first_try = attempt::is_retry_in_place(&a)
            .then(|| host.property(handoff::OUTCOMES.as_bytes()))
            .flatten()
            .and_then(|bytes| Outcomes::new(&bytes).of(current.number - 1));
        let outcome = Outcome {
            class,
            status,
            retry_after_ms,
            first_try,
        };
        let clock = FixedClock(now);
        let health = health(config, host, &clock);
        let mut gate = attempt::health_gate(config, &a, &health);
        let settled = attempt::settle(config, &a, outcome, now, current.start_ms, &mut gate);
        metrics.attempt(host, config, settled.provider, class);
        if let Some(walk) = &settled.reroute {
            // Published before the router retries: the matcher reads the next clusters from
            // the slot properties, the next upstream role its slot from the plan.
            for (property, cluster) in attempt::rerouted_slots(config, &a, walk) {
                host.set_property(property, cluster.as_bytes());
            }
            let record = attempt::rerouted_plan(&a, walk);
            host.set_property(handoff::PLAN, record.as_bytes());
        }
        if let Some(wait) = settled.retry_in_place_after_ms {
            let at = now.saturating_add(wait).to_string();
            host.set_property(handoff::RETRY_AT, at.as_bytes());
        }
        let remove_nothing = settled.marker == Marker::Remove && !self.provider_marker;
        if settled.marker != Marker::Untouched && !remove_nothing {
            // The route's retry policy retries answers marked "1"; a provider's own copy goes.
            host.set_header(
                Map::Response,
                wire::RETRY_MARKER_HEADER,
                settled.marker.value(),
            );
        }
        if let Some((from, to)) = settled.fallback {
            metrics.fallback(host, config, from, to);
            // Debug, not info: during an outage this would be a log line per request,
            // exactly when the gateway is busiest; metrics and access logs carry it.
            log::debug!(
                "{} answered {}; falling over to {}",
                a.provider.name,
                class.as_str(),
                config.provider(to).map_or("", |p| p.name.as_str())
            );
        }
        if let Some((model, report)) = &settled.report {
            // The answers this worker holds for the provider ride along in the same write.
            let held = metrics.take_answers(settled.provider);
            let effect = health.report_with(&a.provider.name, model, report, &held);
            metrics.breaker_state(host, settled.provider, effect.state);
            log::debug!("{} {} -> {:?}", a.provider.name, class.as_str(), effect);
        } else if let Some(earlier) = metrics.hold_answer(settled.provider, now) {
            // A success that changes nothing but the tally: held, written once a minute at most
            // from here (the tick writes the rest).
            health.add_answers(&a.provider.name, &earlier);
        }
        for &skipped in &settled.budget_skips {
            metrics.skipped(host, config, skipped, SkipReason::Budget);
        }
        if settled.records_outcome() {
            let previous = if current.number > 1 {
                host.property(handoff::OUTCOMES.as_bytes())
            } else {
                None
            };
            let record =
                Outcomes::new(previous.as_deref().unwrap_or_default()).with(current.number, class);
            host.set_property(handoff::OUTCOMES, &record);
        }
        let mut log = if a.log_started() {
            text_property(host, wire::ATTEMPTS_PROPERTY.as_bytes()).unwrap_or_default()
        } else {
            // Room for the entry and, when it serves, its tokens (`Counting::finish`).
            String::with_capacity(64)
        };
        settled.write_log(config, &mut log);
        let dialect = a.usage_dialect().filter(|_| class == Class::Ok);
        if let (Some(dialect), false) = (dialect, settled.marker == Marker::Set) {
            // The answer goes to the caller: what it cost is read as it passes, and the log
            // is written with it.
            let slot = metrics.token_slot(host, config, settled.provider, a.usage_model());
            self.counting = Some(Counting::new(dialect, self.event_stream, log, slot));
        } else {
            host.set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
        }
        settled.marker
    }

    /// The answer's last byte passed: counts what it cost (docs/behaviour.md section 15).
    fn count_usage(&mut self) {
        if let Some(counting) = self.counting.take() {
            counting.finish(&self.host, &self.metrics);
        }
    }

    /// Answers an attempt refused for the time budget with the last attempt's failure; its
    /// provider and the later ones are skips for budget.
    fn refuse_past_budget(&mut self, refusal: &attempt::PastBudget, caller: Option<Api>) {
        self.settled = true;
        let (host, config) = (&self.host, &*self.config);
        for &skipped in &refusal.skipped {
            self.metrics
                .skipped(host, config, skipped, SkipReason::Budget);
        }
        let mut log = text_property(host, wire::ATTEMPTS_PROPERTY.as_bytes()).unwrap_or_default();
        refusal.write_log(config, &mut log);
        host.set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
        log::debug!("attempt not started: the time budget is spent");
        host.set_property(handoff::REFUSED, &Refused::Budget.encode());
        send_reply(host, &refusal.reply, caller);
    }

    /// Refuses the attempt before anything is attached to it (docs/behaviour.md section 7, fail closed):
    /// the caller gets the gateway's own `502`, the attempt is not sent, counts toward no
    /// provider's health, and the downstream role learns it from filter state.
    fn refuse(&mut self, refusal: &Refusal, caller: Option<Api>) {
        self.settled = true;
        let reply = refusal.reply();
        let report = refusal.report();
        log::log!(report.level, "{}{}", report.lead, reply.message);
        self.host
            .set_property(handoff::REFUSED, &report.record.encode());
        send_reply(&self.host, &reply, caller);
    }

    /// The delay a failing answer asked for, read only where `attempt::delay_source` says.
    fn requested_delay(&self, class: Class) -> Option<u64> {
        match attempt::delay_source(class) {
            DelaySource::Nothing => None,
            DelaySource::RateLimitHeaders => {
                // A provider's header values may hold any bytes: skip what is not text.
                let map = self.host.header_map(Map::Response);
                let headers = HeaderPairs::new(&map).into_iter().filter_map(|(k, v)| {
                    Some((std::str::from_utf8(k).ok()?, std::str::from_utf8(v).ok()?))
                });
                retry_after::rate_limit_delay(headers, self.host.now_ms())
            }
            DelaySource::RetryAfter => {
                self.host
                    .header(Map::Response, "retry-after")
                    .and_then(|v| {
                        retry_after::parse_retry_after(
                            std::str::from_utf8(&v).ok()?,
                            self.host.now_ms(),
                        )
                    })
            }
        }
    }

    /// The stream is over. Without response headers the connection failed, the attempt timed
    /// out, or the caller went away (docs/internals.md "How attempts are carried": these reach upstream filters only here).
    pub fn on_done(&mut self) {
        if let Some(counting) = self.counting.take() {
            counting.abandon(&self.host); // its answer did not end: no tokens
        }
        let Some(current) = self.current.as_ref().filter(|_| !self.settled) else {
            return;
        };
        let transport_failure = self
            .host
            .property(b"upstream\0transport_failure_reason")
            .is_some_and(|v| !v.is_empty());
        let client_gone =
            u64_property(&self.host, b"response\0flags") & DOWNSTREAM_CONNECTION_TERMINATION != 0;
        let elapsed = self.host.now_ms().saturating_sub(current.start_ms);
        let stream = current.plan.view().stream;
        let class = attempt::no_response_class(
            &self.config,
            stream,
            transport_failure,
            client_gone,
            elapsed,
        );
        self.settle(class, None, None);
    }

    /// The next time this attempt must act by itself ([`Upstream::on_timer`]), if any: the glue
    /// asks after every callback and wakes it then.
    pub fn deadline(&self) -> Option<u64> {
        let d = &self.deadlines;
        let waiting = !self.settled || self.hold.is_some();
        let first_token = d
            .first_token_at
            .filter(|_| self.hold == Some(Hold::FirstOutput));
        let budget = d
            .budget_at
            .filter(|_| waiting && (!self.answered || self.hold.is_some()));
        [self.send_at, first_token, budget]
            .into_iter()
            .flatten()
            .min()
    }

    /// A deadline passed ([`Upstream::deadline`]): send a retry whose wait is over, fail over a
    /// stream that produced no output in time, or end a wait the budget no longer covers.
    #[inline(never)]
    pub fn on_timer(&mut self) {
        let now = self.host.now_ms();
        let due = |at: Option<u64>| at.is_some_and(|at| at <= now);
        if due(self.send_at) {
            self.send_at = None;
            // A body still being rewritten or translated continues the request itself.
            if self.body.is_none() {
                self.host.resume(Map::Request);
            }
        }
        if due(self.deadlines.first_token_at) && self.hold == Some(Hold::FirstOutput) {
            // No output in time: a timeout, marked for the next provider like any other.
            self.hold = None;
            self.watch = None;
            let marker = self.settle(Class::Timeout, Some(200), None);
            self.release_held(200, marker);
            return;
        }
        if !due(self.deadlines.budget_at) {
            return;
        }
        self.deadlines.budget_at = None;
        if let Some(hold) = self.hold.take() {
            // The budget is spent: the answer goes to the caller as its status says.
            let status = match hold {
                Hold::Body(status) | Hold::Answer(status) => status,
                Hold::Stream | Hold::FirstOutput => 200,
            };
            let marker = self.settle_status(status, classify_status(status));
            self.release_held(status, marker);
        } else if !self.answered && !self.settled {
            self.end_at_budget();
        }
    }

    /// Releases an answer held until a deadline decided it (first token, budget). Nothing of a
    /// translated attempt reaches the caller untranslated (behaviour.md 13): a stream's held events
    /// are translated now, in the buffer Envoy holds; a whole answer stays held until its end
    /// and is translated then. An answer marked for the next provider never reaches the caller.
    #[inline(never)]
    fn release_held(&mut self, status: u16, marker: Marker) {
        self.start_answer(status, marker);
        if matches!(self.answer, Some(Answering::Whole { .. })) {
            return; // its last body chunk releases it
        }
        if self.held > 0 {
            // (Nothing happens unless the answer is translated.)
            self.translate_answer(self.held, false);
            if self.answer.is_none() {
                if let Some(counting) = &mut self.counting {
                    counting.read_buffer(&self.host, self.held);
                }
            }
        }
        // Resumed, Envoy sends the buffer on: nothing is kept for the end any more.
        if let Some(Answering::Stream { kept, .. }) = &mut self.answer {
            *kept = 0;
        }
        self.host.resume(Map::Response);
    }

    /// The budget ended while this attempt waited for its answer: a timeout, and the caller
    /// gets the budget's answer at once (behaviour.md 5).
    fn end_at_budget(&mut self) {
        self.settle(Class::Timeout, None, None);
        let Some(current) = &self.current else {
            return;
        };
        let config = Rc::clone(&self.config);
        let Some(a) = current.attempt(&config) else {
            return;
        };
        let ended = attempt::budget_ended(&config, &a);
        let host = &self.host;
        for &skipped in &ended.skipped {
            self.metrics
                .skipped(host, &config, skipped, SkipReason::Budget);
        }
        let mut log = text_property(host, wire::ATTEMPTS_PROPERTY.as_bytes()).unwrap_or_default();
        ended.write_log(&config, &mut log);
        host.set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
        host.set_property(handoff::REFUSED, &Refused::Budget.encode());
        send_reply(host, &ended.reply, Api::of_path(a.plan.path));
    }

    pub fn on_request_headers(&mut self, end_of_stream: bool) -> Flow {
        let Some((number, plan)) = self.read_current() else {
            return Flow::Continue;
        };
        // Planned under another configuration still alive in this VM (a change under traffic):
        // this attempt is resolved under that one, keys, models and chain alike.
        if let Some(planned) = plan.as_ref().map(|p| p.view().config) {
            if planned != self.config.fingerprint {
                if let Some((config, metrics)) = registry::lookup(planned) {
                    self.config = config;
                    self.metrics = metrics;
                }
            }
        }
        let config = Rc::clone(&self.config);
        let start_ms = self.host.now_ms();
        // Refusals only: the gateway's own replies come in the caller's API's shape.
        let caller = || plan.as_ref().and_then(|p| Api::of_path(p.view().path));
        let a = match attempt::admit(&config, plan.as_ref(), number) {
            Ok(a) => a,
            Err(refusal) => {
                self.refuse(&refusal, caller());
                return Flow::Pause;
            }
        };
        let last_class = || {
            let bytes = self.host.property(handoff::OUTCOMES.as_bytes())?;
            Outcomes::new(&bytes).of(number - 1)
        };
        if let Some(refusal) = attempt::past_budget(&config, &a, start_ms, last_class) {
            self.refuse_past_budget(&refusal, caller());
            return Flow::Pause;
        }
        // Nothing of the provider's is attached before Envoy confirms where the attempt goes.
        let cluster = self
            .host
            .property(wire::CLUSTER_NAME_PROPERTY)
            .unwrap_or_default();
        let host_provider = || self.host.property(wire::HOST_PROVIDER_PROPERTY);
        if let Err(refusal) = destination::confirm(a.provider, number, &cluster, host_provider) {
            self.refuse(&refusal, caller());
            return Flow::Pause;
        }
        let edits = attempt::request_edits(&config, &a, end_of_stream);
        let host = &self.host;
        for header in edits.clear {
            host.set_header(Map::Request, header, None);
        }
        let kept = edits
            .forwarded
            .then(|| host.property(handoff::FORWARD.as_bytes()))
            .flatten();
        if let Some(kept) = &kept {
            for edit in config
                .forwarding
                .attempt_edits(&config.providers, a.provider_id, kept)
            {
                match (edit.value, edit.append) {
                    (Some(value), true) => host.add_header_bytes(Map::Request, edit.name, value),
                    (value, _) => host.set_header_bytes(Map::Request, edit.name, value),
                }
            }
        }
        for (name, value) in edits.set {
            host.set_header(Map::Request, name, Some(value));
        }
        if let Some(authority) = edits.authority {
            host.set_header(Map::Request, ":authority", Some(authority));
        }
        if let Some(path) = &edits.path {
            host.set_header(Map::Request, ":path", Some(path));
        }
        if edits.drop_max_retries {
            host.set_header(Map::Request, wire::MAX_RETRIES_HEADER, None);
        }
        self.body = match edits.body.with_kept(kept.as_deref()) {
            BodyEdit::Whole(edit) => Some(edit),
            BodyEdit::RestoreLength(len) => {
                host.set_header(Map::Request, "content-length", Some(&len.to_string()));
                None
            }
            BodyEdit::Keep => None,
        };
        self.translation = a.translation;
        self.deadlines = attempt::deadlines(&config, &a, start_ms);
        // A retry in place waits out its back-off before it is sent (behaviour.md 5).
        if attempt::is_retry_in_place(&a) {
            self.send_at = host
                .property(handoff::RETRY_AT.as_bytes())
                .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok())
                .filter(|&at| at > start_ms);
        }
        let known = a.known();
        self.current = plan.map(|plan| Current {
            number,
            plan,
            start_ms,
            known,
        });
        if self.body.is_some() || self.send_at.is_some() {
            // Hold the headers until the body is rewritten and its length known, and until
            // the back-off is over.
            return Flow::Pause;
        }
        Flow::Continue
    }

    /// Applies the body's one edit once the whole body is here; a request the provider's API
    /// cannot carry is answered `400` here, never sent (behaviour.md 13). A retry in place keeps
    /// its body with its headers until the back-off is over.
    pub fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        if self.body.is_some() && !end_of_stream {
            return Flow::Pause;
        }
        if let Some(edit) = self.body.take() {
            let body = self.host.body(Map::Request, body_size).unwrap_or_default();
            match edit.apply(&self.config, &body) {
                Ok(edited) => {
                    if let Some(new_body) = edited.body {
                        self.host.set_body(Map::Request, body_size, &new_body);
                    }
                    let len = edited.len.to_string();
                    self.host
                        .set_header(Map::Request, "content-length", Some(&len));
                    self.include_usage = edited.include_usage;
                }
                Err(reply) => {
                    // Not sent: no provider's health is touched.
                    self.settled = true;
                    log::debug!("{}", reply.message);
                    send_reply(&self.host, &reply, self.translation.map(|t| t.caller));
                    return Flow::Pause;
                }
            }
        }
        if self.send_at.is_some() {
            Flow::Pause
        } else {
            Flow::Continue
        }
    }

    pub fn on_response_headers(&mut self, end_of_stream: bool) -> Flow {
        let Some(current) = &self.current else {
            return Flow::Continue;
        };
        let Some(a) = current.attempt(&self.config) else {
            return Flow::Continue;
        };
        if a.plan.stream && a.provider.envelope.is_some_and(|e| e.event_stream()) {
            let status = status_code(&self.host, Map::Response);
            let content_type = || self.host.header(Map::Response, "content-type");
            if attempt::unframes(&a, status, content_type) {
                // Bedrock's binary stream becomes the Anthropic event stream it carries.
                self.host
                    .set_header(Map::Response, "content-type", Some("text/event-stream"));
                self.host.set_header(Map::Response, "content-length", None);
                self.unframe = Some(Unframing::default());
            }
        }
        let map = self.host.header_map(Map::Response);
        let head = attempt::ResponseHead::read(&map, end_of_stream);
        self.provider_marker = head.marker;
        self.answered = true;
        self.event_stream = head.content_type.is_some_and(dialects::is_event_stream);
        self.gather = attempt::gathers(&a, &head).map(|(provider, caller)| Gathering {
            provider,
            caller,
            bytes: Vec::new(),
        });
        // A translated stream's end is its translator's, a gathered one's its gathering (not
        // watched here).
        let watched = (a.translation.is_none() && self.gather.is_none())
            .then(|| attempt::watch_end(&a, &head));
        if let Some(messages_caller) = watched.flatten() {
            self.messages_caller = messages_caller;
            self.watch = Some(Vec::new());
        }
        if let Some(hold) = attempt::hold(&self.config, &a, &head, end_of_stream) {
            self.hold = Some(hold);
            return Flow::Pause;
        }
        let class = head.class(&a);
        let marker = self.settle_status(head.status, class);
        if !end_of_stream {
            self.start_answer(head.status, marker);
        }
        Flow::Continue
    }

    pub fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        if self.replaced {
            self.host.set_body(Map::Response, body_size, b"");
            return Flow::Continue;
        }
        let body_size = self.unframe_body(body_size, end_of_stream);
        self.held = body_size;
        let gathering = self.gather.is_some();
        let flow = if self.hold.is_some() {
            self.decide_held(end_of_stream)
        } else if self.gather.is_some() {
            self.gather_body(end_of_stream)
        } else {
            self.translate_answer(body_size, end_of_stream)
        };
        // An untranslated answer passes as it came: what goes on now is read for its usage
        // (a translated or gathered one where it is read anyway).
        let plain = flow == Flow::Continue && self.answer.is_none() && !self.replaced;
        let read = match &mut self.counting {
            Some(counting) if plain && !gathering => counting.read_buffer(&self.host, body_size),
            _ => None,
        };
        if flow == Flow::Continue && self.watch.is_some() {
            self.watch_end(body_size, end_of_stream, read.as_deref());
        }
        if let Some(u) = &mut self.unframe {
            // Paused, Envoy keeps what is in the buffer now (a translated stream's kept bytes,
            // or the held answer); continued, it sends it on.
            u.done = match (flow, &self.answer) {
                (Flow::Continue, _) => 0,
                (Flow::Pause, Some(Answering::Stream { kept, .. })) if *kept > 0 => *kept,
                (Flow::Pause, _) => body_size,
            };
        }
        if end_of_stream && flow == Flow::Continue {
            self.count_usage();
        }
        flow
    }

    /// A translated attempt's answer that goes to the caller (not marked for a retry: a
    /// retried answer never reaches the caller) is translated back (behaviour.md 13): the headers say
    /// what comes instead of the provider's body.
    fn start_answer(&mut self, status: u16, marker: Marker) {
        let Some(t) = self.translation.filter(|_| marker != Marker::Set) else {
            return;
        };
        let host = &self.host;
        let event_stream = || {
            host.header(Map::Response, "content-type")
                .is_some_and(|v| crate::dialects::is_event_stream(&v))
        };
        host.set_header(Map::Response, "content-length", None);
        self.answer = Some(match attempt::answer_translation(status, event_stream) {
            AnswerTranslation::Whole { status } => {
                host.set_header(Map::Response, "content-type", Some("application/json"));
                Answering::Whole { status }
            }
            AnswerTranslation::Stream => {
                let cx = StreamContext {
                    created: self.started_s(),
                    include_usage: self.include_usage,
                };
                match StreamTranslator::new(t.provider, t.caller, cx) {
                    Some(stream) => Answering::Stream { stream, kept: 0 },
                    None => return,
                }
            }
        });
    }

    /// Replaces the held provider's answer (what is buffered of it, and what comes after) by a
    /// whole translated answer.
    fn give_whole(&mut self, answer: &attempt::WholeAnswer) {
        let host = &self.host;
        if answer.status != status_code(host, Map::Response) {
            host.set_header(Map::Response, ":status", Some(&answer.status.to_string()));
        }
        host.set_header(Map::Response, "content-length", None);
        host.set_header(Map::Response, "content-type", Some("application/json"));
        host.set_body(Map::Response, self.held, &answer.body);
        self.replaced = true;
    }

    /// A gathered stream (its first output came in time): kept here to its end, nothing of it
    /// sent, then replaced by the caller's one JSON answer. A stream that ended before its
    /// answer's end gets the caller's error body (its `200` went with the headers).
    fn gather_body(&mut self, end_of_stream: bool) -> Flow {
        let Some(g) = self.gather.as_mut() else {
            return Flow::Continue;
        };
        let chunk = self.host.body(Map::Response, self.held).unwrap_or_default();
        g.bytes.extend_from_slice(&chunk);
        if let Some(counting) = &mut self.counting {
            counting.push(&chunk);
        }
        if !end_of_stream {
            self.host.set_body(Map::Response, self.held, b"");
            return Flow::Continue;
        }
        let created = self.started_s();
        let Some(g) = self.gather.take() else {
            return Flow::Continue;
        };
        let answer = attempt::gathered(g.provider, g.caller, &g.bytes, created);
        self.host.set_body(Map::Response, self.held, &answer.body);
        Flow::Continue
    }

    /// When the attempt started, in Unix seconds (OpenAI answers' `created`).
    fn started_s(&self) -> u64 {
        self.current.as_ref().map_or(0, |c| c.start_ms / 1000)
    }

    /// Translates what of the answer is buffered (`body_size` bytes) for the caller.
    fn translate_answer(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        let created = self.started_s();
        let (Some(t), Some(answer)) = (self.translation, self.answer.as_mut()) else {
            return Flow::Continue;
        };
        if !end_of_stream && matches!(answer, Answering::Whole { .. }) {
            // Until the whole answer is here: the router buffers it.
            return Flow::Pause;
        }
        let body = self.host.body(Map::Response, body_size).unwrap_or_default();
        if let Some(counting) = &mut self.counting {
            // The provider's own bytes (a stream's first `kept` are the caller's already).
            let done = match answer {
                Answering::Stream { kept, .. } => (*kept).min(body.len()),
                Answering::Whole { .. } => 0,
            };
            counting.push(body.get(done..).unwrap_or_default());
        }
        let (out, flow) = match answer {
            Answering::Whole { status } => {
                // Not held (an error, or holding is off): an unreadable answer's error goes as
                // it is, its status gone already.
                let out = translate::response(t.provider, t.caller, *status, &body, created);
                (out.body, Flow::Continue)
            }
            Answering::Stream { stream, kept } => {
                // The first `kept` bytes are the caller's already (held for the end).
                let (done, chunk) = body.split_at((*kept).min(body.len()));
                let mut out = Vec::with_capacity(body.len() + chunk.len() / 2);
                out.extend_from_slice(done);
                let hold = stream.push(chunk, end_of_stream, &mut out) && !end_of_stream;
                *kept = if hold { out.len() } else { 0 };
                (out, if hold { Flow::Pause } else { Flow::Continue })
            }
        };
        self.host.set_body(Map::Response, body_size, &out);
        flow
    }

    /// The stream ends with trailers (HTTP/2, chunked trailers): the end a body chunk with
    /// `end_of_stream` would bring. Envoy lets a filter write only into a body it holds, so a
    /// translated answer's end is written after the bytes kept for it.
    pub fn on_response_trailers(&mut self) -> Flow {
        let flow = self.trailers();
        if flow == Flow::Continue {
            self.count_usage();
        }
        flow
    }

    fn trailers(&mut self) -> Flow {
        if self.hold.is_some() {
            let flow = self.decide_held(true);
            if flow == Flow::Continue && self.answer.is_none() && !self.replaced {
                // An untranslated answer held to its end goes on now, all of it.
                if let Some(counting) = &mut self.counting {
                    counting.read_buffer(&self.host, self.held);
                }
            }
            return flow;
        }
        if self.gather.is_some() {
            return self.gather_body(true);
        }
        // A whole answer is held whole; nothing kept of a stream: its end was written (or
        // cannot be: docs/behaviour.md). Without a translated answer nothing is read.
        let size = match &self.answer {
            Some(Answering::Stream { kept, .. }) => *kept,
            _ => self.held,
        };
        if size == 0 {
            return Flow::Continue;
        }
        self.translate_answer(size, true)
    }

    /// Replaces the event-stream bytes in the body buffer by the SSE events they carry;
    /// returns the buffer's new size.
    fn unframe_body(&mut self, body_size: usize, end_of_stream: bool) -> usize {
        let Some(u) = &mut self.unframe else {
            return body_size;
        };
        let buffer = self.host.body(Map::Response, body_size).unwrap_or_default();
        let done = u.done.min(buffer.len());
        let (sse, raw) = buffer.split_at(done);
        let mut out = Vec::with_capacity(done + raw.len() + raw.len() / 2);
        out.extend_from_slice(sse);
        u.unframer.push(raw, &mut out);
        if end_of_stream {
            u.unframer.finish(&mut out);
        }
        self.host.set_body(Map::Response, body_size, &out);
        out.len()
    }

    /// Keeps the stream's last bytes; at its end, a stream without its final event gets an
    /// error event in the caller's dialect, so the caller's client raises (behaviour.md 5).
    /// `read`: the whole chunk, when it was read already (for its usage).
    fn watch_end(&mut self, body_size: usize, end_of_stream: bool, read: Option<&[u8]>) {
        let Some(tail) = &mut self.watch else {
            return;
        };
        let len = body_size.min(dialects::STREAM_TAIL);
        if len > 0 {
            match read.and_then(|r| r.get(r.len().saturating_sub(len)..)) {
                Some(bytes) => tail.extend_from_slice(bytes),
                None => {
                    let bytes = self.host.body_range(Map::Response, body_size - len, len);
                    tail.extend_from_slice(&bytes.unwrap_or_default());
                }
            }
            let excess = tail.len().saturating_sub(dialects::STREAM_TAIL);
            tail.drain(..excess);
        }
        if end_of_stream {
            if !dialects::stream_complete(tail) {
                log::debug!("a stream ended before its final event: ending it with an error");
                let event = dialects::cut_stream_event(self.messages_caller);
                self.host.append_body(Map::Response, body_size, event);
            }
            self.watch = None;
        }
    }

    /// Settles an answer with this status as `class`, reading the delay it asked for.
    fn settle_status(&mut self, status: u16, class: Class) -> Marker {
        let delay = self.requested_delay(class);
        self.settle(class, Some(status), delay)
    }

    /// A held answer: decides once enough of its body is here, then releases it, with the
    /// retry marker when it falls over.
    fn decide_held(&mut self, end_of_stream: bool) -> Flow {
        let Some(hold) = self.hold else {
            return Flow::Continue;
        };
        let Some(len) = hold.read_now(self.held, end_of_stream) else {
            return Flow::Pause;
        };
        let body = self.host.body(Map::Response, len).unwrap_or_default();
        let Some(decided) = hold.decide(&body, end_of_stream, self.translation, self.started_s())
        else {
            return Flow::Pause;
        };
        if decided.class != Class::Ok {
            // It falls over or goes back as an error: no stream of it reaches the caller.
            self.watch = None;
        }
        let marker = if decided.read_delay {
            self.settle_status(decided.status, decided.class)
        } else {
            self.settle(decided.class, Some(decided.status), None)
        };
        self.hold = None;
        if let Some(answer) = decided.answer {
            // A whole translated answer, translated already; a retried one never reaches the
            // caller.
            if marker != Marker::Set {
                if let Some(counting) = &mut self.counting {
                    counting.push(&body); // the provider's own answer, whole
                }
                self.give_whole(&answer);
            }
            return Flow::Continue;
        }
        if decided.class != Class::Ok || marker == Marker::Set {
            self.gather = None;
        } else if self.gather.is_some() {
            // Its headers go now (Envoy's per-try timer would end a held answer), saying what
            // comes at the end instead of the stream.
            self.host.set_header(Map::Response, "content-length", None);
            self.host
                .set_header(Map::Response, "content-type", Some("application/json"));
            return self.gather_body(end_of_stream);
        }
        // Decided on the provider's own bytes; then translated for the caller, all of what
        // is held so far.
        self.start_answer(decided.status, marker);
        self.translate_answer(self.held, end_of_stream)
    }
}
