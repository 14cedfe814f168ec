//! The upstream role (on every provider cluster, once per attempt): applies what `attempt`
//! decides for the request (its headers, its body's one edit), what `attempt::passage` makes of
//! the answer, and what `attempt::settle` decides for its outcome (marker header, metrics,
//! breaker report, attempt log, outcome record).

use super::counting::Counting;
use super::registry;
use super::{send_reply, text_property, u64_property, Flow, Host, Map, Metrics};
use crate::attempt::passage::{AnswerHead, Passage, Step, Write};
use crate::attempt::timers::{Ends, Timers};
use crate::attempt::{self, BodyEdit, Marker};
use crate::classify::Class;
use crate::config::Config;
use crate::destination::{self, Refusal};
use crate::handoff::{self, Outcomes, PlanText};
use crate::ids::ProviderId;
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
    /// It is a hedge: the second attempt of a hedged request, started while the first ran
    /// (behaviour.md 5, hedging).
    hedge: bool,
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
    /// The provider whose requests in flight this attempt raised (`least_busy`): lowered
    /// when the stream ends.
    busy: Option<ProviderId>,
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
            busy: None,
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
        let dialect = Counting::keep(&mut self.counting, counting);
        self.passage.count_usage(dialect);
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
        if let Some(provider) = self.busy.take() {
            self.io.count_in_flight(provider, false);
        }
        if let Some(counting) = self.counting.take() {
            counting.abandon(&self.io.host); // its answer did not end: no tokens
        }
        let Some(current) = self.current.as_ref().filter(|_| !self.settled) else {
            return;
        };
        if self.io.lost_race(current) {
            self.settled = true;
            return;
        }
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

    /// Whether the request's end is this attempt's end too when it is still open then: its
    /// answer was going to the caller (cut before its end) or it ran in a hedged race. A host
    /// that would end such an attempt only after the request's access log (the native build,
    /// docs/internals.md) runs [`Upstream::on_done`] as the request ends instead.
    pub fn ends_with_request(&self) -> bool {
        self.counting.is_some()
            || (self.current.as_ref())
                .and_then(|c| c.attempt(&self.io.config))
                .is_some_and(|a| a.hedged())
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
            None if wake.ends == Some(Ends::TotalTimeWaiting) => self.end_at_total_time(),
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
    fn end_at_total_time(&mut self) {
        self.settle(Class::Timeout, None, false);
        let Some(a) = (self.current.as_ref()).and_then(|c| c.attempt(&self.io.config)) else {
            return;
        };
        let ended = attempt::total_time_ended(&self.io.config, &a);
        self.io.answer_total_time(&ended, Api::of_path(a.plan.path));
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
        if let Some(refusal) = attempt::past_total_time(&config, &a, start_ms, last_class) {
            self.settled = true;
            log::debug!("attempt not started: the time budget is spent");
            self.io.answer_total_time(&refusal, caller());
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
        let hedge = a.hedged() && self.io.starts_hedge(number);
        if config.counts_in_flight(a.provider_id) {
            self.io.count_in_flight(a.provider_id, true);
            self.busy = Some(a.provider_id);
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
            hedge,
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
        if head.rate_limits {
            self.io.note_announcement(&map, a.provider);
        }
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
            (marker, Counting::keep(counting, c))
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

mod io;
