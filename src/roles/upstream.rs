//! The upstream role (on every provider cluster, once per attempt): applies what `attempt`
//! decides for the request (its headers, its body's one edit), what `attempt::passage` makes of
//! the answer, and what `attempt::settle` decides for its outcome (marker header, metrics,
//! breaker report, attempt log, outcome record).

use super::counting::Counting;
use super::registry;
use super::{health, send_reply, text_property, u64_property, Flow, Host, Map, Metrics};
use crate::attempt::passage::{AnswerHead, Passage, Step, Write};
use crate::attempt::timers::{Ends, Timers};
use crate::attempt::{self, BodyEdit, DelaySource, Marker, Outcome};
use crate::classify::Class;
use crate::config::Config;
use crate::destination::{self, Refusal};
use crate::handoff::{self, Outcomes, PlanText, Refused};
use crate::host::FixedClock;
use crate::ids::ProviderId;
use crate::plan::SkipReason;
use crate::translate::Api;
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
    /// When it must act by itself (behaviour.md 5; see [`Upstream::deadline`]).
    timers: Timers,
}

impl Current {
    /// This attempt under `config` (the one it was resolved in).
    fn attempt<'c>(&self, config: &'c Config) -> Option<attempt::Attempt<'c, '_>> {
        attempt::again(config, self.plan.view(), self.known)
    }
}

pub struct Upstream<H: Host> {
    io: Io<H>,
    current: Option<Current>,
    /// The request body's one edit, while waiting for the whole body.
    body: Option<attempt::WholeEdit>,
    /// The answer's passage (held, gathered, translated, watched).
    passage: Passage,
    /// The outcome is settled (response headers came, or it was settled otherwise).
    settled: bool,
    /// What the answer that goes to the caller cost, counted when it ends.
    counting: Option<Counting>,
}

/// What the role talks to: Envoy, and the configuration and metrics the attempt runs under.
struct Io<H: Host> {
    host: H,
    config: Rc<Config>,
    metrics: Rc<Metrics>,
}

impl<H: Host> Upstream<H> {
    pub fn new(host: H, config: Rc<Config>, metrics: Rc<Metrics>) -> Self {
        Upstream {
            io: Io {
                host,
                config,
                metrics,
            },
            current: None,
            body: None,
            passage: Passage::default(),
            settled: false,
            counting: None,
        }
    }

    /// Reads this attempt's number and the plan; `None` when the request was not planned by
    /// our downstream role (then this role leaves the attempt alone). The plan is `None` inside
    /// when it is there but unreadable.
    fn read_current(&self) -> Option<(usize, Option<PlanText>)> {
        let host = &self.io.host;
        let number = host
            .header(Map::Request, wire::ATTEMPT_COUNT_HEADER)
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<usize>().ok())
            .unwrap_or(1);
        let text = text_property(host, handoff::PLAN.as_bytes())?;
        Some((number, PlanText::decode(text)))
    }

    /// Settles the attempt, once ([`Io::settle`]); `delay`: read the delay the answer asked for.
    fn settle(&mut self, class: Class, status: Option<u16>, delay: bool) -> Marker {
        let current = self.current.as_ref();
        let marker = self.passage.provider_marker;
        let (marker, counting) =
            (self.io).settle(&mut self.settled, current, marker, class, status, delay);
        self.passage
            .count_usage(counting.as_ref().map(|c| c.dialect));
        self.counting = counting.or(self.counting.take());
        marker
    }

    /// The answer's last byte passed: what it cost is counted (docs/behaviour.md section 15).
    fn count_usage(&mut self) {
        if let Some(counting) = self.counting.take() {
            let io = &self.io;
            let usage = self.passage.finish_usage();
            counting.finish(&io.host, &io.config, &io.metrics, usage);
        }
    }

    /// Refuses the attempt before anything is attached to it (docs/behaviour.md section 7, fail
    /// closed): the caller gets the gateway's own `502`, the attempt is not sent, counts toward
    /// no provider's health, and the downstream role learns it from filter state.
    fn refuse(&mut self, refusal: &Refusal, caller: Option<Api>) -> Flow {
        self.settled = true;
        let reply = refusal.reply();
        let report = refusal.report();
        log::log!(report.level, "{}{}", report.lead, reply.message);
        let host = &self.io.host;
        host.set_property(handoff::REFUSED, &report.record.encode());
        send_reply(host, &reply, caller);
        Flow::Pause
    }

    /// The stream is over. Without response headers the connection failed, the attempt timed
    /// out, or the caller went away (docs/internals.md "How attempts are carried": these reach
    /// upstream filters only here).
    pub fn on_done(&mut self) {
        if let Some(counting) = self.counting.take() {
            counting.abandon(&self.io.host); // its answer did not end: no tokens
        }
        let Some(current) = self.current.as_ref().filter(|_| !self.settled) else {
            return;
        };
        let host = &self.io.host;
        let transport_failure = host
            .property(b"upstream\0transport_failure_reason")
            .is_some_and(|v| !v.is_empty());
        let client_gone =
            u64_property(host, b"response\0flags") & DOWNSTREAM_CONNECTION_TERMINATION != 0;
        let elapsed = host.now_ms().saturating_sub(current.start_ms);
        let stream = current.plan.view().stream;
        let config = &self.io.config;
        let class =
            attempt::no_response_class(config, stream, transport_failure, client_gone, elapsed);
        self.settle(class, None, false);
    }

    /// The next time this attempt must act by itself ([`Upstream::on_timer`]), if any: the glue
    /// asks after every callback and wakes it then.
    pub fn deadline(&self) -> Option<u64> {
        let p = &self.passage;
        (self.current.as_ref()).and_then(|c| c.timers.next(p.hold, self.settled, p.answered))
    }

    /// A deadline passed ([`Upstream::deadline`]): what [`Timers::due`] says.
    #[inline(never)]
    pub fn on_timer(&mut self) {
        let now = self.io.host.now_ms();
        let (p, settled) = (&self.passage, self.settled);
        let Some(wake) =
            (self.current.as_mut()).map(|c| c.timers.due(now, p.hold, settled, p.answered))
        else {
            return;
        };
        // A body still being edited continues the request itself.
        if wake.send && self.body.is_none() {
            self.io.host.resume(Map::Request);
        }
        if wake.ends == Some(Ends::FirstToken) {
            self.passage.drop_watch();
        }
        match wake.ends.and_then(Ends::held_outcome) {
            Some((class, status, delay)) => self.release_held(class, status, delay),
            None if wake.ends == Some(Ends::BudgetWaiting) => self.end_at_budget(),
            None => {}
        }
    }

    /// Settles a held answer a deadline decided (first token, budget) and releases it
    /// ([`Passage::release`]).
    #[inline(never)]
    fn release_held(&mut self, class: Class, status: u16, delay: bool) {
        self.passage.hold = None;
        let marker = self.settle(class, Some(status), delay);
        let created = self.started_s();
        let io = &self.io;
        let step = (self.passage).release(status, marker, created, &mut |at, len| io.read(at, len));
        if self.apply(step) == Flow::Continue {
            io.host.resume(Map::Response);
        }
    }

    /// The budget ended while this attempt waited for its answer: a timeout, and the caller
    /// gets the budget's answer at once (behaviour.md 5).
    fn end_at_budget(&mut self) {
        self.settle(Class::Timeout, None, false);
        let Some(a) = (self.current.as_ref()).and_then(|c| c.attempt(&self.io.config)) else {
            return;
        };
        let ended = attempt::budget_ended(&self.io.config, &a);
        self.io.answer_budget(&ended, Api::of_path(a.plan.path));
    }

    pub fn on_request_headers(&mut self, end_of_stream: bool) -> Flow {
        let Some((number, plan)) = self.read_current() else {
            return Flow::Continue;
        };
        // Planned under another configuration still alive in this VM (a change under traffic):
        // this attempt is resolved under that one, keys, models and chain alike.
        if let Some(planned) = plan.as_ref().map(|p| p.view().config) {
            if planned != self.io.config.fingerprint {
                if let Some((config, metrics)) = registry::lookup(planned) {
                    (self.io.config, self.io.metrics) = (config, metrics);
                }
            }
        }
        let config = Rc::clone(&self.io.config);
        let host = &self.io.host;
        let start_ms = host.now_ms();
        // Refusals only: the gateway's own replies come in the caller's API's shape.
        let caller = || plan.as_ref().and_then(|p| Api::of_path(p.view().path));
        let a = match attempt::admit(&config, plan.as_ref(), number) {
            Ok(a) => a,
            Err(refusal) => return self.refuse(&refusal, caller()),
        };
        let last_class = || {
            let bytes = host.property(handoff::OUTCOMES.as_bytes())?;
            Outcomes::new(&bytes).of(number - 1)
        };
        if let Some(refusal) = attempt::past_budget(&config, &a, start_ms, last_class) {
            self.settled = true;
            log::debug!("attempt not started: the time budget is spent");
            self.io.answer_budget(&refusal, caller());
            return Flow::Pause;
        }
        // Nothing of the provider's is attached before Envoy confirms where the attempt goes.
        let cluster = host
            .property(wire::CLUSTER_NAME_PROPERTY)
            .unwrap_or_default();
        let host_provider = || host.property(wire::HOST_PROVIDER_PROPERTY);
        if let Err(refusal) = destination::confirm(a.provider, number, &cluster, host_provider) {
            return self.refuse(&refusal, caller());
        }
        let edits = attempt::request_edits(&config, &a, end_of_stream);
        let kept = self.io.edit_headers(&edits, a.provider_id);
        self.body = match edits.body.with_kept(kept.as_deref()) {
            BodyEdit::Whole(edit) => Some(edit),
            BodyEdit::RestoreLength(len) => {
                host.set_header(Map::Request, "content-length", Some(&len.to_string()));
                None
            }
            BodyEdit::Keep => None,
        };
        self.passage.translation = a.translation;
        // A retry in place waits out its back-off before it is sent (behaviour.md 5).
        let send_at = attempt::is_retry_in_place(&a)
            .then(|| host.property(handoff::RETRY_AT.as_bytes()))
            .flatten()
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok())
            .filter(|&at| at > start_ms);
        let timers = Timers {
            deadlines: attempt::deadlines(&config, &a, start_ms),
            send_at,
        };
        let known = a.known();
        self.current = plan.map(|plan| Current {
            number,
            plan,
            start_ms,
            known,
            timers,
        });
        // Hold the headers until the body is edited and its length known, and until the
        // back-off is over.
        Flow::pause_if(self.body.is_some() || send_at.is_some())
    }

    /// Applies the body's one edit once the whole body is here; a request the provider's API
    /// cannot carry is answered `400` here, never sent (behaviour.md 13). A retry in place keeps
    /// its body with its headers until the back-off is over.
    pub fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        if self.body.is_some() && !end_of_stream {
            return Flow::Pause;
        }
        let host = &self.io.host;
        if let Some(edit) = self.body.take() {
            let body = host.body(Map::Request, body_size).unwrap_or_default();
            match edit.apply(&self.io.config, &body) {
                Ok(edited) => {
                    if let Some(new_body) = edited.body {
                        host.set_body(Map::Request, body_size, &new_body);
                    }
                    let len = edited.len.to_string();
                    host.set_header(Map::Request, "content-length", Some(&len));
                    self.passage.include_usage = edited.include_usage;
                }
                Err(reply) => {
                    // Not sent: no provider's health is touched.
                    self.settled = true;
                    log::debug!("{}", reply.message);
                    send_reply(host, &reply, self.passage.translation.map(|t| t.caller));
                    return Flow::Pause;
                }
            }
        }
        let waits = (self.current.as_ref()).is_some_and(|c| c.timers.send_at.is_some());
        Flow::pause_if(waits)
    }

    pub fn on_response_headers(&mut self, end_of_stream: bool) -> Flow {
        let config = Rc::clone(&self.io.config);
        let Some(a) = (self.current.as_ref()).and_then(|c| c.attempt(&config)) else {
            return Flow::Continue;
        };
        let host = &self.io.host;
        let map = host.header_map(Map::Response);
        let mut head = attempt::ResponseHead::read(&map, end_of_stream);
        if self.passage.headers(&config, &a, &mut head, end_of_stream) {
            // Bedrock's binary stream becomes the Anthropic event stream it carries.
            host.set_header(Map::Response, "content-type", Some("text/event-stream"));
            host.set_header(Map::Response, "content-length", None);
        }
        if self.passage.hold.is_some() {
            return Flow::Pause;
        }
        let marker = self.settle(head.class(&a), Some(head.status), true);
        if !end_of_stream {
            let head = (self.passage).start_answer(head.status, marker, self.started_s());
            self.set_head(head);
        }
        Flow::Continue
    }

    pub fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        self.pass(Some((body_size, end_of_stream)))
    }

    /// The stream ends with trailers (HTTP/2, chunked trailers): [`Passage::trailers`].
    pub fn on_response_trailers(&mut self) -> Flow {
        self.pass(None)
    }

    /// Runs a body callback's (`None`: trailers') step of the passage, with the one read of the
    /// buffer and the settling it may ask for, and applies it.
    fn pass(&mut self, body: Option<(usize, bool)>) -> Flow {
        let created = self.started_s();
        let (io, current, settled) = (&self.io, self.current.as_ref(), &mut self.settled);
        let counting = &mut self.counting;
        let marker = self.passage.provider_marker;
        let read = &mut |at, len| io.read(at, len);
        let settle = &mut |class, status, delay| {
            let (marker, c) = io.settle(settled, current, marker, class, Some(status), delay);
            let dialect = c.as_ref().map(|c| c.dialect);
            if c.is_some() {
                *counting = c;
            }
            (marker, dialect)
        };
        let step = match body {
            Some((size, end)) => self.passage.body(size, end, created, read, settle),
            None => self.passage.trailers(created, read, settle),
        };
        let flow = self.apply(step);
        // Its end passed (a body chunk with `end_of_stream`, or trailers).
        if flow == Flow::Continue && body.map_or(true, |(_, end)| end) {
            self.count_usage();
        }
        flow
    }

    /// When the attempt started, in Unix seconds (OpenAI answers' `created`).
    fn started_s(&self) -> u64 {
        self.current.as_ref().map_or(0, |c| c.start_ms / 1000)
    }

    /// Applies a response callback's step: its headers, its one write.
    fn apply(&self, step: Step) -> Flow {
        self.set_head(step.head);
        let host = &self.io.host;
        match step.write {
            Write::Keep => {}
            Write::Replace { size, bytes } => host.set_body(Map::Response, size, &bytes),
            Write::Append { size, bytes } => host.append_body(Map::Response, size, bytes),
        }
        Flow::pause_if(step.pause)
    }

    /// What the answer's headers become ([`AnswerHead`]).
    fn set_head(&self, head: Option<AnswerHead>) {
        let (Some(head), host) = (head, &self.io.host) else {
            return;
        };
        if let Some(status) = head.status {
            host.set_header(Map::Response, ":status", Some(&status.to_string()));
        }
        host.set_header(Map::Response, "content-length", None);
        if head.json {
            host.set_header(Map::Response, "content-type", Some("application/json"));
        }
    }
}

impl<H: Host> Io<H> {
    /// `len` bytes of the response body from `at`.
    fn read(&self, at: usize, len: usize) -> Vec<u8> {
        (self.host)
            .body_range(Map::Response, at, len)
            .unwrap_or_default()
    }

    /// Applies attempt `provider`'s header edits; returns the caller's headers the downstream
    /// role kept aside for some providers (`handoff::FORWARD`), when read.
    fn edit_headers(
        &self,
        edits: &attempt::RequestEdits<'_>,
        provider: ProviderId,
    ) -> Option<Vec<u8>> {
        let (host, config) = (&self.host, &*self.config);
        for header in edits.clear {
            host.set_header(Map::Request, header, None);
        }
        let kept = (edits.forwarded)
            .then(|| host.property(handoff::FORWARD.as_bytes()))
            .flatten();
        for edit in (kept.iter()).flat_map(|k| {
            config
                .forwarding
                .attempt_edits(&config.providers, provider, k)
        }) {
            match (edit.value, edit.append) {
                (Some(value), true) => host.add_header_bytes(Map::Request, edit.name, value),
                (value, _) => host.set_header_bytes(Map::Request, edit.name, value),
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
        kept
    }

    /// Answers an attempt the time budget does not cover with the budget's answer: its
    /// provider (or the later ones) are skips for budget.
    fn answer_budget(&self, ended: &attempt::PastBudget, caller: Option<Api>) {
        let (host, config) = (&self.host, &*self.config);
        for &skipped in &ended.skipped {
            self.metrics
                .skipped(host, config, skipped, SkipReason::Budget);
        }
        self.log(true, |log| ended.write_log(config, log));
        host.set_property(handoff::REFUSED, &Refused::Budget.encode());
        send_reply(host, &ended.reply, caller);
    }

    /// Adds to the access log's attempt record (`started`: it has entries already).
    fn log(&self, started: bool, write: impl FnOnce(&mut String)) {
        let mut log = self.log_so_far(started);
        write(&mut log);
        self.host
            .set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
    }

    /// The access log's attempt record so far (`started`: it has entries already).
    fn log_so_far(&self, started: bool) -> String {
        match started {
            true => text_property(&self.host, wire::ATTEMPTS_PROPERTY.as_bytes()),
            // Room for the entry and, when it serves, its tokens (`Counting::finish`).
            false => None,
        }
        .unwrap_or_else(|| String::with_capacity(64))
    }

    /// Settles attempt `current` the first time only (`settled`): applies what
    /// `attempt::settle` decides (`provider_marker`: the provider's answer carried a header
    /// named like the retry marker; `delay`: read the delay it asked for). Returns what it did
    /// with the retry marker and, when the answer goes to the caller, its [`Counting`] (the
    /// attempt log is then written when the answer ends, with its tokens).
    #[inline(never)]
    fn settle(
        &self,
        settled: &mut bool,
        current: Option<&Current>,
        provider_marker: bool,
        class: Class,
        status: Option<u16>,
        delay: bool,
    ) -> (Marker, Option<Counting>) {
        let (host, config, metrics) = (&self.host, &*self.config, &*self.metrics);
        let first = !std::mem::replace(settled, true);
        let Some((current, a)) =
            (current.filter(|_| first)).and_then(|c| Some((c, c.attempt(config)?)))
        else {
            return (Marker::Untouched, None);
        };
        let source = attempt::delay_source(class);
        let map = || host.header_map(Map::Response);
        let retry_after = || host.header(Map::Response, "retry-after");
        let retry_after_ms = (delay && source != DelaySource::Nothing)
            .then(|| attempt::requested_delay(source, host.now_ms(), map, retry_after))
            .flatten();
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
        if let Some(value) = settled.marker_header(provider_marker) {
            // The route's retry policy retries answers marked "1"; a provider's own copy goes.
            host.set_header(Map::Response, wire::RETRY_MARKER_HEADER, value);
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
            let previous =
                (current.number > 1).then(|| host.property(handoff::OUTCOMES.as_bytes()));
            let record =
                Outcomes::new(&previous.flatten().unwrap_or_default()).with(current.number, class);
            host.set_property(handoff::OUTCOMES, &record);
        }
        let mut log = self.log_so_far(a.log_started());
        settled.write_log(config, &mut log);
        let dialect = a.usage_dialect().filter(|_| class == Class::Ok);
        match (dialect, settled.marker) {
            // Its answer goes to the caller: what it cost is read as it passes.
            (Some(dialect), marker) if marker != Marker::Set => {
                let slot = metrics.token_slot(host, config, settled.provider, a.usage_model());
                let counting = Counting::new(dialect, log, slot, settled.provider);
                (marker, Some(counting))
            }
            (_, marker) => {
                host.set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
                (marker, None)
            }
        }
    }
}
