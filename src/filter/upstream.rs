//! The upstream role (on every provider cluster, once per attempt): rewrites the attempt for
//! its provider, classifies the outcome, marks answers that must fall over, and feeds the
//! shared breaker and the attempt log.
//!
//! Envoy shares one request header map across attempts, so every attempt overwrites whatever
//! an earlier attempt set (credentials, authority, path, content-length) instead of assuming
//! it sees the caller's original headers.

use super::envoy_host;
use super::metrics::Metrics;
use crate::attempt_log;
use crate::classify::{classify_no_response, classify_status, Class, NoResponse};
use crate::config::{Chain, ChainEntry, Config, Provider, ProviderId};
use crate::destination::{self, Refusal};
use crate::dialects::{self, StreamStart, BODY_PREFIX_LIMIT};
use crate::header_pairs::HeaderPairs;
use crate::health::Admission;
use crate::health::Report;
use crate::host::FixedClock;
use crate::plan::{self, PlanRecord, SkipReason, Slot};
use crate::reply::Reply;
use crate::retry_after;
use crate::rewrite;
use crate::wire;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, MapType};
use std::ops::Range;
use std::rc::Rc;

/// What this attempt is, resolved from the plan in filter state.
struct Attempt {
    number: usize,
    chain: usize,
    slot: Slot,
    /// Every slot of the plan, in order (attempt n uses `slots[n - 1]`): tells whether another
    /// attempt follows and to which provider.
    slots: Vec<Slot>,
    /// Attempts Envoy may make for this request (`PlanRecord::limit`).
    limit: usize,
    /// The caller asked for a stream: a `200` may be SSE to hold until its first event.
    stream: bool,
    start_ms: u64,
    request_start_ms: u64,
    /// The attempt log already has entries (skips, or earlier attempts) to append to.
    log_started: bool,
    body_len: u64,
    /// The plan record as read from filter state; the text fields below are spans of it, so
    /// resolving an attempt copies none of them.
    record: String,
    path: Range<usize>,
    authority: Range<usize>,
    model: Range<usize>,
}

impl Attempt {
    fn text(&self, span: &Range<usize>) -> &str {
        self.record.get(span.clone()).unwrap_or_default()
    }

    /// The caller's `:path`, as planned.
    fn path(&self) -> &str {
        self.text(&self.path)
    }

    /// The caller's `:authority`, as planned.
    fn authority(&self) -> &str {
        self.text(&self.authority)
    }

    /// The model the caller asked for.
    fn model(&self) -> &str {
        self.text(&self.model)
    }
}

pub struct Upstream {
    config: Rc<Config>,
    metrics: Rc<Metrics>,
    attempt: Option<Attempt>,
    /// Model name to write into the body for this provider, while waiting for the body.
    rewrite_to: Option<String>,
    /// Response headers arrived (or the outcome was otherwise settled).
    settled: bool,
    /// The response is held until the start of its body is read (SPEC 3a).
    hold: Option<Hold>,
    /// Bytes of the held body received so far.
    held: usize,
}

/// Why a response is held.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// A failing answer with this status whose body may refine its class.
    Body(u16),
    /// A `200` event stream, until its first complete event.
    Stream,
}

impl Upstream {
    pub fn new(config: Rc<Config>, metrics: Rc<Metrics>) -> Self {
        Upstream {
            config,
            metrics,
            attempt: None,
            rewrite_to: None,
            settled: false,
            hold: None,
            held: 0,
        }
    }

    fn entry(&self, attempt: &Attempt) -> (&Chain, &ChainEntry, &Provider) {
        let chain = &self.config.chains[attempt.chain];
        let entry = &chain.entries[usize::from(attempt.slot.entry)];
        (chain, entry, &self.config.providers[entry.provider])
    }

    /// Reads the plan and this attempt's number. `Ok(None)` when the request was not planned by
    /// our downstream filter (then this filter leaves the attempt alone); a refusal when the
    /// plan was made under another configuration than ours (SPEC section 7).
    fn resolve(&self) -> Result<Option<Attempt>, Refusal> {
        let number = envoy_host::header(MapType::HttpRequestHeaders, wire::ATTEMPT_COUNT_HEADER)
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<usize>().ok())
            .unwrap_or(1);
        let Some(text) = envoy_host::text_property(wire::PLAN_PROPERTY.as_bytes()) else {
            return Ok(None);
        };
        let running = self.config.fingerprint;
        let Some(mut record) = PlanRecord::decode(&text) else {
            return Err(Refusal::ConfigMismatch {
                planned: None,
                running,
            });
        };
        destination::check_config(Some(record.config), running)?;
        // Envoy retrying past the plan: the header map still holds the last provider's key.
        let Some(slot) = record.slot_for(number).copied() else {
            return Err(Refusal::Unplanned { attempt: number });
        };
        let chain = usize::from(record.chain);
        let valid = self.config.chains.get(chain).is_some_and(|c| {
            record
                .slots
                .iter()
                .all(|s| usize::from(s.entry) < c.entries.len())
        });
        if !valid {
            return Err(Refusal::ConfigMismatch {
                planned: Some(record.config),
                running,
            });
        }
        // Where each text field sits in `text` (decode hands out subslices of it).
        let span = |field: &str| {
            let start = field.as_ptr() as usize - text.as_ptr() as usize;
            start..start + field.len()
        };
        let (path, authority, model) = (
            span(record.path),
            span(record.authority),
            span(record.model),
        );
        let limit = record.limit();
        let slots = std::mem::take(&mut record.slots).into_owned();
        let (request_start_ms, log_started, body_len, stream) = (
            record.start_ms,
            record.log_started || number > 1,
            record.body_len,
            record.stream,
        );
        Ok(Some(Attempt {
            number,
            chain,
            slot,
            slots,
            limit,
            stream,
            start_ms: envoy_host::now_ms(),
            request_start_ms,
            log_started,
            body_len,
            record: text,
            path,
            authority,
            model,
        }))
    }

    /// Refuses the attempt before anything is attached to it (SPEC section 7, fail closed):
    /// the caller gets the gateway's own `502`, the attempt is not sent, counts toward no
    /// provider's health, and the downstream role learns it from filter state.
    fn refuse(&mut self, refusal: &Refusal) {
        self.settled = true;
        let reply = refusal.reply();
        log::error!("llm_failover: attempt refused: {}", reply.message);
        envoy_host::set_property(wire::REFUSED_PROPERTY, reply.code.as_bytes());
        envoy_host::send_reply(&reply);
    }

    /// Settles the attempt: classification, marker header, breaker report, attempt log.
    fn settle(&mut self, class: Class, status: Option<u16>, retry_after_ms: Option<u64>) {
        if self.settled {
            return;
        }
        self.settled = true;
        let Some(attempt) = &self.attempt else {
            return;
        };
        let (chain, entry, provider) = self.entry(attempt);
        let config = &self.config;
        let metrics = &self.metrics;
        let now = envoy_host::now_ms();
        metrics.attempt(config, entry.provider, class);
        let mut falls_over = chain.fallback_on.falls_over(class, status);
        let timeouts = &config.timeouts;
        let room = timeouts.room_for_attempt(now.saturating_sub(attempt.request_start_ms));
        // A class with an alternative list continues the walk there (SPEC 3a).
        let rerouted = if falls_over && room && chain.has_lists() {
            reroute(config, chain, attempt, class, now)
        } else {
            None
        };
        let slots = rerouted.as_deref().unwrap_or(&attempt.slots);
        // Providers of the slots after this one, in order.
        let later = slots
            .get(attempt.number..)
            .unwrap_or_default()
            .iter()
            .filter_map(|s| chain.entries.get(usize::from(s.entry)))
            .map(|e| e.provider);
        let mut budget_skips: Vec<ProviderId> = Vec::new();
        if falls_over && !room {
            log::debug!(
                "{}: {} but the time budget is spent; not falling over",
                provider.name,
                class.as_str()
            );
            falls_over = false;
            if status.is_some() {
                // Without the marker no later slot is tried: each is skipped for budget.
                budget_skips = later.clone().collect();
            }
        }
        if status.is_some() {
            // The route's retry policy retries answers carrying this header; the downstream
            // filter removes it when no attempt is left. Only we set it: a provider's copy
            // goes (a remove is one cheap hostcall, no read).
            // "1" retries; "0" marks an answer that falls over with no attempt left (the
            // route retries only on "1"; the downstream filter reads either as exhausted).
            let next = attempt.number < attempt.limit && later.clone().next().is_some();
            let marker = falls_over.then_some(if next { wire::RETRY_MARKER_RETRY } else { "0" });
            self.set_http_response_header(wire::RETRY_MARKER_HEADER, marker);
        }
        // Without response headers Envoy retries by itself (connect-failure, reset, per-try
        // timeout: see README "Known limits"), so count what happens, not what the chain says.
        // (When the budget is spent Envoy's own retry is refused as it starts.)
        let moves_on = falls_over || (status.is_none() && class != Class::ClientDisconnect && room);
        if moves_on {
            if let Some(next) = later.clone().next() {
                metrics.fallback(config, entry.provider, next);
                // Debug, not info: during an outage this would be a log line per request,
                // exactly when the gateway is busiest; metrics and access logs carry it.
                log::debug!(
                    "{} answered {}; falling over to {}",
                    provider.name,
                    class.as_str(),
                    config.providers[next].name
                );
            }
        }

        let model = entry.model.as_deref().unwrap_or(attempt.model());
        // Hot path: a success from a provider with nothing recorded changes nothing.
        if !(class == Class::Ok && attempt.slot.pristine && !attempt.slot.probe) {
            let report = Report {
                class,
                falls_over,
                retry_after_ms,
            };
            let effect = envoy_host::health_at(config, &FixedClock(now)).report(
                &provider.name,
                model,
                &report,
            );
            metrics.breaker_state(entry.provider, effect.state);
            log::debug!("{} {} -> {:?}", provider.name, class.as_str(), effect);
        }

        let mut log = if attempt.log_started {
            envoy_host::text_property(wire::ATTEMPTS_PROPERTY.as_bytes()).unwrap_or_default()
        } else {
            String::new()
        };
        attempt_log::push_attempt(
            &mut log,
            &provider.name,
            class.as_str(),
            now.saturating_sub(attempt.start_ms),
        );
        for skipped in budget_skips {
            metrics.skipped(config, skipped, SkipReason::Budget);
            attempt_log::push_skip(
                &mut log,
                &config.providers[skipped].name,
                SkipReason::Budget.as_str(),
            );
        }
        envoy_host::set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
    }

    /// Envoy started this attempt (after a refused connection, a reset or a per-try timeout)
    /// with less than `min_remaining` of the budget left: it never reaches its provider. The
    /// caller gets the last attempt's failure; this slot and the later ones are skips for
    /// budget; nothing is attached and no health is reported (SPEC section 5).
    fn refuse_past_budget(&mut self, attempt: &Attempt) {
        self.settled = true;
        let config = &self.config;
        let chain = &config.chains[attempt.chain];
        let mut log =
            envoy_host::text_property(wire::ATTEMPTS_PROPERTY.as_bytes()).unwrap_or_default();
        let previous = attempt.number - 1;
        let last_class = attempt_log::outcome_of_attempt(&log, previous)
            .and_then(Class::parse)
            .unwrap_or(Class::Timeout);
        let last_provider = attempt
            .slots
            .get(previous - 1)
            .and_then(|s| chain.entries.get(usize::from(s.entry)))
            .map_or("", |e| config.providers[e.provider].name.as_str());
        for slot in attempt.slots.get(previous..).unwrap_or_default() {
            if let Some(e) = chain.entries.get(usize::from(slot.entry)) {
                self.metrics.skipped(config, e.provider, SkipReason::Budget);
                attempt_log::push_skip(
                    &mut log,
                    &config.providers[e.provider].name,
                    SkipReason::Budget.as_str(),
                );
            }
        }
        envoy_host::set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
        log::debug!(
            "attempt {} not started: the time budget is spent",
            attempt.number
        );
        let reply = Reply::budget_spent(last_provider, last_class, config.timeouts.budget_ms);
        envoy_host::set_property(wire::REFUSED_PROPERTY, wire::REFUSED_FOR_BUDGET.as_bytes());
        envoy_host::send_reply(&reply);
    }

    /// Settles an answer with this status as `class`, reading the delay it asked for.
    fn settle_status(&mut self, status: u16, class: Class) {
        let delay = if class == Class::Ok {
            None
        } else {
            self.requested_delay(class)
        };
        self.settle(class, Some(status), delay);
    }

    fn is_event_stream(&self) -> bool {
        envoy_host::header(MapType::HttpResponseHeaders, "content-type").is_some_and(|v| {
            v.get(..17)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"text/event-stream"))
        })
    }

    /// A held answer: decides once enough of its body is here (the start of a failing body,
    /// bounded by [`BODY_PREFIX_LIMIT`]; a stream's first complete event), then releases it,
    /// with the retry marker when it falls over. Until then the router buffers it; Envoy's
    /// per-try timers still run, so a body that never comes ends as a timeout.
    fn decide_held(&mut self, end_of_stream: bool) -> Action {
        let Some(hold) = self.hold else {
            return Action::Continue;
        };
        let enough = end_of_stream || self.held >= BODY_PREFIX_LIMIT;
        if matches!(hold, Hold::Body(_)) && !enough {
            return Action::Pause;
        }
        let len = self.held.min(BODY_PREFIX_LIMIT);
        let body = self.get_http_response_body(0, len).unwrap_or_default();
        match hold {
            Hold::Body(status) => self.settle_status(status, dialects::refine(status, &body)),
            Hold::Stream => match dialects::first_event(&body, end_of_stream) {
                StreamStart::NeedMore => return Action::Pause,
                StreamStart::Healthy => self.settle(Class::Ok, Some(200), None),
                StreamStart::Error(class) => self.settle(class, Some(200), None),
            },
        }
        self.hold = None;
        Action::Continue
    }

    /// The delay a failing answer asked for, read only on failures.
    fn requested_delay(&self, class: Class) -> Option<u64> {
        match class {
            Class::RateLimited | Class::QuotaExhausted => {
                // A provider's header values may hold any bytes: skip what is not text.
                let map = envoy_host::header_map(MapType::HttpResponseHeaders);
                let headers = HeaderPairs::new(&map).into_iter().filter_map(|(k, v)| {
                    Some((std::str::from_utf8(k).ok()?, std::str::from_utf8(v).ok()?))
                });
                retry_after::rate_limit_delay(headers, envoy_host::now_ms())
            }
            Class::Overloaded | Class::ServerError => {
                envoy_host::header(MapType::HttpResponseHeaders, "retry-after").and_then(|v| {
                    retry_after::parse_retry_after(
                        std::str::from_utf8(&v).ok()?,
                        envoy_host::now_ms(),
                    )
                })
            }
            _ => None,
        }
    }
}

/// Moves the walk to the chain's alternative list for `class` (SPEC 3a): computes the new
/// walk in the core, then publishes it before the router retries: the route's matcher reads
/// the next attempts' clusters from the slot properties (filter state is the request's, shared
/// by the downstream and upstream filters), the next upstream filter its slot from the plan.
/// Slots past the new walk are emptied, so no stale cluster is reached. Health is read only
/// here, on the failure path.
fn reroute(
    config: &Config,
    chain: &Chain,
    attempt: &Attempt,
    class: Class,
    now: u64,
) -> Option<Vec<Slot>> {
    let mut record = PlanRecord::decode(&attempt.record)?;
    let clock = FixedClock(now);
    let health = envoy_host::health_at(config, &clock);
    let mut gate = |e: u8| {
        let entry = chain.entries.get(usize::from(e))?;
        let model = entry.model.as_deref().unwrap_or(attempt.model());
        let name = &config.providers[entry.provider].name;
        match health.admit(name, model, config.timeouts.attempt_ms) {
            Admission::Available { pristine, probe } => Some(Slot {
                entry: e,
                pristine,
                probe,
            }),
            Admission::BreakerOpen | Admission::Dead => None,
        }
    };
    let walk = plan::reroute(chain, &record, attempt.number, class, &mut gate)?;
    for k in attempt.number..attempt.limit.min(wire::SLOT_PROPERTIES.len()) {
        let cluster = walk
            .get(k)
            .and_then(|s| chain.entries.get(usize::from(s.entry)))
            .map_or("", |e| config.providers[e.provider].cluster.as_str());
        envoy_host::set_property(wire::SLOT_PROPERTIES[k], cluster.as_bytes());
    }
    record.slots = std::borrow::Cow::Borrowed(&walk);
    envoy_host::set_property(wire::PLAN_PROPERTY, record.encode().as_bytes());
    Some(walk)
}

impl Context for Upstream {
    fn on_done(&mut self) -> bool {
        if !self.settled && self.attempt.is_some() {
            // No response headers: the connection failed, the attempt timed out, or the
            // caller went away (DESIGN section 1: these reach upstream filters only here).
            let outcome = NoResponse {
                transport_failure: envoy_host::property(b"upstream\0transport_failure_reason")
                    .is_some_and(|v| !v.is_empty()),
                client_gone: envoy_host::response_flags()
                    & envoy_host::DOWNSTREAM_CONNECTION_TERMINATION
                    != 0,
                elapsed_ms: self
                    .attempt
                    .as_ref()
                    .map_or(0, |a| envoy_host::now_ms().saturating_sub(a.start_ms)),
                attempt_timeout_ms: self.config.timeouts.attempt_ms,
                stall_timeout_ms: self.config.timeouts.stall_ms,
            };
            self.settle(classify_no_response(&outcome), None, None);
        }
        true
    }
}

impl HttpContext for Upstream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let attempt = match self.resolve() {
            Ok(Some(attempt)) => attempt,
            Ok(None) => return Action::Continue,
            Err(refusal) => {
                self.refuse(&refusal);
                return Action::Pause;
            }
        };
        let spent = attempt.start_ms.saturating_sub(attempt.request_start_ms);
        if attempt.number > 1 && !self.config.timeouts.room_for_attempt(spent) {
            self.refuse_past_budget(&attempt);
            return Action::Pause;
        }
        let (_, entry, provider) = self.entry(&attempt);
        // Nothing of the provider's is attached before Envoy confirms where the attempt goes.
        let cluster = envoy_host::property(wire::CLUSTER_NAME_PROPERTY).unwrap_or_default();
        if let Err(refusal) = destination::confirm(provider, attempt.number, &cluster, || {
            envoy_host::property(wire::HOST_PROVIDER_PROPERTY)
        }) {
            self.refuse(&refusal);
            return Action::Pause;
        }
        // Credentials: drop every provider's and the caller's, then set this provider's own.
        for header in &self.config.cleared_headers {
            self.set_http_request_header(header, None);
        }
        if !self.config.forwarding.uniform() {
            // Caller headers only some providers take: exactly this provider's share.
            if let Some(kept) = envoy_host::property(wire::FORWARD_PROPERTY.as_bytes()) {
                for edit in self.config.forwarding.attempt_edits(entry.provider, &kept) {
                    let map = MapType::HttpRequestHeaders;
                    let _ = match (edit.value, edit.append) {
                        (Some(v), true) => hostcalls::add_map_value_bytes(map, edit.name, v),
                        (value, _) => hostcalls::set_map_value_bytes(map, edit.name, value),
                    };
                }
            }
        }
        for (name, value) in &provider.set_headers {
            self.set_http_request_header(name, Some(value));
        }
        match &provider.authority {
            Some(a) => self.set_http_request_header(":authority", Some(a)),
            None if attempt.number > 1 => {
                self.set_http_request_header(":authority", Some(attempt.authority()))
            }
            None => {}
        }
        match &provider.path_prefix {
            Some(prefix) => {
                let path = format!("{prefix}{}", attempt.path());
                self.set_http_request_header(":path", Some(&path))
            }
            None if attempt.number > 1 => {
                self.set_http_request_header(":path", Some(attempt.path()))
            }
            None => {}
        }
        if attempt.number == 1 {
            // Consumed by the router already; providers need not see it.
            self.set_http_request_header(wire::MAX_RETRIES_HEADER, None);
        }
        let rewrite_to = entry
            .model
            .as_ref()
            .filter(|m| m.as_str() != attempt.model() && attempt.body_len > 0 && !end_of_stream)
            .cloned();
        if rewrite_to.is_none() && attempt.number > 1 {
            // An earlier attempt may have rewritten the body and its length.
            let length = attempt.body_len.to_string();
            self.set_http_request_header("content-length", Some(&length));
        }
        self.attempt = Some(attempt);
        if rewrite_to.is_some() {
            self.rewrite_to = rewrite_to;
            // Hold the headers until the body is rewritten and its length known.
            return Action::Pause;
        }
        Action::Continue
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Some(model) = &self.rewrite_to else {
            return Action::Continue;
        };
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.get_http_request_body(0, body_size).unwrap_or_default();
        let new_body = rewrite::scan_top_level(&body)
            .ok()
            .and_then(|scan| rewrite::rewrite(&body, &scan, Some(model), false));
        if let Some(new_body) = new_body {
            self.set_http_request_body(0, body_size, &new_body);
            self.set_http_request_header("content-length", Some(&new_body.len().to_string()));
        } else {
            self.set_http_request_header("content-length", Some(&body.len().to_string()));
        }
        self.rewrite_to = None;
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(attempt) = &self.attempt else {
            return Action::Continue;
        };
        let status = envoy_host::status_code(MapType::HttpResponseHeaders);
        // SPEC 3a: hold what the body may refine. The healthy non-streaming path reads nothing
        // more; a streamed request's 200 reads its content type.
        if !end_of_stream {
            let hold = if status == 200 {
                (attempt.stream && self.is_event_stream()).then_some(Hold::Stream)
            } else {
                dialects::refinable(status).then_some(Hold::Body(status))
            };
            if hold.is_some() {
                self.hold = hold;
                return Action::Pause;
            }
        }
        self.settle_status(status, classify_status(status));
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.held = body_size;
        self.decide_held(end_of_stream)
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        self.decide_held(true)
    }
}
