//! The downstream role (before the router): strips what callers could steer with, plans the
//! chain once the body's `model` is known, publishes the plan in filter state for the route's
//! matcher and the upstream roles, and writes the public response headers.

use super::{
    health, send_refusal, send_reply, status_code, text_property, u64_property, Flow, Host,
    LocalAnswers, Map, Metrics, SharedGatekeeper,
};
use crate::answer::{self, AnswerFacts, AnswerReads};
use crate::budget::SharedBudgets;
use crate::classify::Class;
use crate::config::forward::{self, Verdict};
use crate::config::{Config, Team};
use crate::handoff::{self, Outcomes, PlanText, Refused};
use crate::header_pairs::HeaderPairs;
use crate::host::FixedClock;
use crate::ids::{ChainId, EntryId};
use crate::intake::{self, Published, RequestHeader, StatusRequest};
use crate::plan::{self, Plan, RequestFacts, SkipReason};
use crate::translate::Api;
use crate::wire;
use std::cell::Cell;
use std::rc::Rc;

/// The CORS response header naming the headers a browser's script may read.
const EXPOSE_HEADERS: &str = "access-control-expose-headers";

thread_local! {
    /// A missing `clear_route_cache` is a deployment problem: say so once per VM, not per request.
    static WARNED_ROUTE_CACHE: Cell<bool> = const { Cell::new(false) };
}

pub struct Downstream<H: Host> {
    host: H,
    config: Rc<Config>,
    metrics: Rc<Metrics>,
    no_fallback: bool,
    caller: Option<String>,
    /// The caller's `:path` and `:authority`, for attempts that must restore them.
    path: String,
    authority: String,
    plan: Option<Plan>,
    /// When the request was planned (ms), as published in the plan record.
    start_ms: u64,
    /// Provider calls made, from the final answer's attempt count.
    attempts: usize,
    /// Replacement body when an exhausted chain answers `503 fallbacks_exhausted`.
    exhausted_body: Option<Vec<u8>>,
    /// The filter answered this request itself (status endpoint, unreadable request).
    answered: bool,
    /// The request carried `Origin` (a browser's): its answer exposes the gateway's headers.
    cors: bool,
    /// The caller's API, from its path when the request was planned (read once).
    api: Option<Api>,
    /// The models list and the status page, compiled elsewhere (cold).
    answers: LocalAnswers,
}

/// The answer-side reads, made only when a decision asks for them.
struct Reads<'a, H: Host>(&'a H);

impl<H: Host> AnswerReads for Reads<'_, H> {
    fn code_details(&self) -> Option<String> {
        text_property(self.0, b"response\0code_details")
    }

    fn outcome(&self, attempt: usize) -> Option<Class> {
        let bytes = self.0.property(handoff::OUTCOMES.as_bytes())?;
        Outcomes::new(&bytes).of(attempt)
    }

    fn refused(&self) -> Option<Refused> {
        let bytes = self.0.property(handoff::REFUSED.as_bytes())?;
        Some(Refused::decode(&bytes))
    }

    fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }

    fn answered(&self) -> Option<usize> {
        let bytes = self.0.property(handoff::ANSWERED.as_bytes())?;
        crate::hedge::parse_answered(&bytes)
    }
}

impl<H: Host> Downstream<H> {
    pub fn new(host: H, config: Rc<Config>, metrics: Rc<Metrics>, answers: LocalAnswers) -> Self {
        Downstream {
            host,
            config,
            metrics,
            no_fallback: false,
            caller: None,
            path: String::new(),
            authority: String::new(),
            plan: None,
            start_ms: 0,
            attempts: 0,
            exhausted_body: None,
            answered: false,
            cors: false,
            api: None,
            answers,
        }
    }

    /// Providers are third parties: only the caller headers they take go on; those only some
    /// take are kept for their attempts.
    fn forward<'m>(&self, name: &'m [u8], value: &'m [u8], kept: &mut Vec<(&'m [u8], &'m [u8])>) {
        let verdict = self.config.forwarding.verdict(&self.config.providers, name);
        if verdict != Verdict::Keep {
            self.remove_request_header(name);
        }
        if verdict == Verdict::PerProvider {
            kept.push((name, value));
        }
    }

    fn remove_request_header(&self, name: &[u8]) {
        if let Ok(name) = std::str::from_utf8(name) {
            self.host.set_header(Map::Request, name, None);
        }
    }

    /// Answers a request for the status endpoint (docs/behaviour.md section 10). Returns whether it answered.
    fn answer_status(&self, method: &str) -> bool {
        match intake::status_request(&self.config, &self.path, method) {
            StatusRequest::No => false,
            StatusRequest::MethodNotAllowed => {
                self.host.send_response(
                    405,
                    &[("allow", "GET, HEAD"), ("content-type", "text/plain")],
                    Some(b"the llm-failover status endpoint answers GET and HEAD only\n"),
                );
                true
            }
            StatusRequest::Report { with_body } => {
                let now = self.host.now_ms();
                let clock = FixedClock(now);
                let budgets = SharedBudgets {
                    store: &self.host,
                    clock: &clock,
                };
                let tokens = crate::tokens::SharedTokens {
                    store: &self.host,
                    clock: &clock,
                };
                let health = health(&self.config, &self.host, &clock);
                let body = (self.answers.status)(&self.config, &health, &budgets, &tokens, now);
                self.host.send_response(
                    200,
                    &[
                        ("content-type", "application/json"),
                        ("cache-control", "no-store"),
                    ],
                    with_body.then_some(body.as_bytes()),
                );
                true
            }
        }
    }

    /// Answers `GET /v1/models` (and `/{id}`) from the list built with the configuration.
    /// Returns whether it answered.
    fn answer_models(&self, method: &str) -> bool {
        let Some(with_body) = intake::models_request(&self.config, &self.path, method) else {
            return false;
        };
        let anthropic = (self.host)
            .header(Map::Request, "anthropic-version")
            .is_some();
        let Some(answer) = (self.answers.models)(&self.config, &self.path, anthropic) else {
            return false;
        };
        let retry = answer
            .should_retry
            .map(|r| if r { "true" } else { "false" });
        let mut headers = vec![("content-type", "application/json")];
        if let Some(retry) = retry {
            headers.push((wire::SHOULD_RETRY_HEADER, retry));
        }
        self.host.send_response(
            answer.status,
            &headers,
            with_body.then_some(answer.body.as_bytes()),
        );
        true
    }

    /// Answers the liveness path (docs/behaviour.md section 10) when the request is for it. Returns whether
    /// it answered.
    fn answer_liveness(&self, method: &str) -> bool {
        let route = || text_property(&self.host, b"xds\0route_name");
        let Some(with_body) = intake::liveness_request(&self.config, &self.path, method, route)
        else {
            return false;
        };
        self.host.send_response(
            200,
            &[
                ("content-type", "text/plain"),
                ("cache-control", "no-store"),
            ],
            with_body.then_some(intake::LIVENESS_BODY),
        );
        true
    }

    /// Names the chain in filter state for access logs.
    fn log_chain(&self, chain: ChainId) {
        if let Some(name) = intake::chain_log(&self.config, chain) {
            self.host
                .set_property(wire::CHAIN_PROPERTY, name.as_bytes());
        }
    }

    /// Names the caller in filter state for access logs as the `caller` metric label does
    /// ([`Config::team_label`]); no write for a file without callers or a request without the
    /// header (Envoy prints `-`).
    fn log_caller(&self, team: Team) {
        if let Some(name) = self.config.team_label(team) {
            self.host
                .set_property(wire::CALLER_PROPERTY, name.as_bytes());
        }
    }

    /// The request's and the answer's model for the OpenTelemetry access log (`log_models`):
    /// at planning both are the request's, and the answer's changes when the answering entry
    /// names its own. Out of line, and called from two places so that wasm-opt keeps it there:
    /// off, the request path carries none of it.
    #[cold]
    #[inline(never)]
    fn log_models(&self, request: Option<&str>, answer: Option<&str>) {
        for (property, model) in [
            (wire::REQUEST_MODEL_PROPERTY, request),
            (wire::RESPONSE_MODEL_PROPERTY, answer),
        ] {
            if let Some(model) = model {
                self.host.set_property(property, model.as_bytes());
            }
        }
    }

    fn count_skips(&self, chain: ChainId, skipped: &[(EntryId, SkipReason)], plan: Option<&Plan>) {
        for (provider, reason) in intake::counted_skips(&self.config, chain, skipped, plan) {
            self.metrics
                .skipped(&self.host, &self.config, provider, reason);
        }
    }

    fn log_skips(&self, chain: ChainId, skipped: &[(EntryId, SkipReason)]) {
        if let Some(log) = intake::skip_log(&self.config, chain, skipped) {
            self.host
                .set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
        }
    }

    /// Plans the request (body complete, or no body) and publishes the plan. Returns whether
    /// the request goes on to the router.
    fn plan_request(&mut self, body: &[u8]) -> bool {
        let request = match intake::read_request(&self.path, body) {
            Ok(request) => request,
            Err(reply) => {
                send_reply(&self.host, &reply, Api::of_path(&self.path));
                return false;
            }
        };
        let route = if intake::needs_route(&self.config) {
            text_property(&self.host, b"xds\0route_name")
        } else {
            None
        };
        if self.config.log_models {
            self.log_models(Some(&request.model), Some(&request.model));
        }
        let facts = RequestFacts {
            model: &request.model,
            route: route.as_deref(),
            path: Some(&self.path),
            caller: self.caller.as_deref(),
            no_fallback: self.no_fallback,
            api: Api::of_path(&self.path),
            content: request.content(),
            body,
        };
        let config = Rc::clone(&self.config);
        let now = FixedClock(self.host.now_ms());
        let gatekeeper = SharedGatekeeper::new(&self.host, &config, &self.metrics, &now);
        let plan = match plan::plan_or_refuse(&config, &facts, &gatekeeper) {
            Ok(plan) => plan,
            Err(refusal) => {
                log::debug!("refused model {:?}: {}", facts.model, refusal.reply.code);
                if let Some((chain, skipped)) = intake::refusal_skips(&refusal) {
                    self.count_skips(chain, skipped, None);
                    self.log_skips(chain, skipped);
                    self.log_chain(chain);
                }
                self.log_caller(config.team(facts.caller));
                // Whole seconds, rounded up, until the earliest spent budget rolls over.
                let after =
                    (refusal.retry_at_ms).map(|at| at.saturating_sub(now.0).div_ceil(1000).max(1));
                let caller = Api::of_path(&self.path);
                send_refusal(&self.host, &refusal.reply, caller, after);
                return false;
            }
        };
        self.count_skips(plan.chain, &plan.skipped, Some(&plan));

        let mut body_len = body.len();
        if let Some(clean) = request.without_fallbacks(body) {
            body_len = clean.len();
            self.host.set_body(Map::Request, body.len(), &clean);
            self.host
                .set_header(Map::Request, "content-length", Some(&body_len.to_string()));
        }
        intake::route_properties(&config, &plan, |property, cluster| {
            self.host.set_property(property, cluster.as_bytes());
        });
        let gather = intake::gathers(&config, facts.api, request.stream(), body);
        let published = Published {
            plan: &plan,
            stream: request.stream(),
            gather,
            ask_usage: intake::asks_usage(&config, facts.api, &request),
            stream_options: request.has_stream_options(),
            start_ms: now.0,
            body_len,
            path: &self.path,
            authority: &self.authority,
            model: &request.model,
            api: facts.api,
            team: plan.team,
        };
        let record = published.record(&config).encode();
        self.host.set_property(handoff::PLAN, record.as_bytes());
        self.log_chain(plan.chain);
        self.log_caller(plan.team);
        self.log_skips(plan.chain, &plan.skipped);
        let retries = published.max_retries(&config).to_string();
        self.host
            .set_header(Map::Request, wire::MAX_RETRIES_HEADER, Some(&retries));
        if let Some(after) = intake::hedge_after(&config, &plan) {
            // Envoy's per-try timer becomes the hedge's trigger for this request
            // (docs/internals.md, hedging): the second attempt starts beside the first.
            self.host
                .set_header(Map::Request, wire::HEDGE_HEADER, Some("true"));
            self.host.set_header(
                Map::Request,
                wire::PER_TRY_TIMEOUT_HEADER,
                Some(&after.to_string()),
            );
        } else if config
            .timeouts
            .first_token(request.stream() || gather)
            .is_some()
        {
            // A stream whose headers do not come within the first-token timeout has produced
            // no output either: Envoy's per-try timer ends it (read once per request).
            let wait = config.timeouts.headers_wait_ms(true).to_string();
            self.host
                .set_header(Map::Request, wire::PER_TRY_TIMEOUT_HEADER, Some(&wait));
        }
        // The route's matcher must see the slot properties we just wrote.
        if !self.host.clear_route_cache() && !WARNED_ROUTE_CACHE.with(|w| w.replace(true)) {
            log::warn!("clear_route_cache is not available in this Envoy; the route may pick a stale cluster");
        }
        self.plan = Some(plan);
        self.start_ms = now.0;
        self.api = facts.api;
        true
    }

    /// The request is over: a half-open probe this request held but never used goes back.
    pub fn on_done(&mut self) {
        if let Some(plan) = &self.plan {
            let health = health(&self.config, &self.host, &self.host);
            for provider in answer::unused_probes(&self.config, plan, self.attempts) {
                if let Some(p) = self.config.provider(provider) {
                    health.release_probe(&p.name);
                }
            }
        }
    }

    pub fn on_request_headers(&mut self, end_of_stream: bool) -> Flow {
        // One hostcall for the whole map instead of one per header we might need or remove,
        // read in place: values are bytes (HTTP allows non-UTF-8 ones) until we need one.
        let map = self.host.header_map(Map::Request);
        let mut method = "";
        let mut readable = true;
        // Caller headers only some providers take, for their attempts to put back.
        let mut kept: Vec<(&[u8], &[u8])> = Vec::new();
        for (name, value) in HeaderPairs::new(&map) {
            // Only the values we use are decoded; names are compared as bytes.
            let text = || std::str::from_utf8(value);
            match intake::request_header(&self.config, name) {
                RequestHeader::Path | RequestHeader::Authority => match text() {
                    Ok(v) if name == b":path" => self.path = v.to_string(),
                    Ok(v) => self.authority = v.to_string(),
                    Err(_) => readable = false,
                },
                RequestHeader::Method => method = text().unwrap_or(""),
                RequestHeader::Steering => self.remove_request_header(name),
                RequestHeader::OptOut => {
                    self.no_fallback = intake::opts_out(value);
                    self.host
                        .set_header(Map::Request, &self.config.opt_out_header, None);
                }
                RequestHeader::Caller { remove } => {
                    self.caller = text().ok().map(str::to_string);
                    if remove {
                        self.remove_request_header(name);
                    } else {
                        self.forward(name, value, &mut kept);
                    }
                }
                RequestHeader::GatewayCredential => self.remove_request_header(name),
                RequestHeader::Origin => {
                    self.cors = true;
                    self.forward(name, value, &mut kept);
                }
                RequestHeader::Other => self.forward(name, value, &mut kept),
            }
        }
        if !kept.is_empty() {
            self.host
                .set_property(handoff::FORWARD, &forward::encode_kept(&kept));
        }
        if let Some(clean) = intake::without_key(&self.path) {
            self.host.set_header(Map::Request, ":path", Some(&clean));
            self.path = clean;
        }
        if !readable {
            send_reply(&self.host, &intake::unreadable_request(), None);
            self.answered = true;
            return Flow::Pause;
        }
        if self.answer_status(method) || self.answer_models(method) || self.answer_liveness(method)
        {
            self.answered = true;
            return Flow::Pause;
        }
        if end_of_stream {
            return if self.plan_request(&[]) {
                Flow::Continue
            } else {
                Flow::Pause
            };
        }
        // Wait for the whole body: the model decides the chain.
        Flow::Pause
    }

    pub fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        if self.answered || !end_of_stream {
            return Flow::Pause;
        }
        if let Some(reply) = intake::body_too_large(&self.config, body_size) {
            send_reply(&self.host, &reply, Api::of_path(&self.path));
            self.answered = true;
            return Flow::Pause;
        }
        let body = self.host.body(Map::Request, body_size).unwrap_or_default();
        if self.plan_request(&body) {
            Flow::Continue
        } else {
            Flow::Pause
        }
    }

    pub fn on_response_headers(&mut self) -> Flow {
        let attempt_count = u64_property(&self.host, b"upstream\0request_attempt_count");
        if let Some(plan) = &mut self.plan {
            if answer::may_have_rerouted(&self.config, plan, attempt_count) {
                let text = text_property(&self.host, handoff::PLAN.as_bytes());
                if let Some(read) = text.and_then(PlanText::decode) {
                    plan.slots = read.view().slots().collect();
                }
            }
        }
        let Some(plan) = &self.plan else {
            return Flow::Continue;
        };
        if answer::path_to_restore(&self.config, plan, &self.path, self.api) {
            // The access log names the caller's path, not the last attempt's.
            self.host
                .set_header(Map::Request, ":path", Some(&self.path));
        }
        let marker = self
            .host
            .header(Map::Response, wire::RETRY_MARKER_HEADER)
            .is_some();
        if marker {
            // Internal: never reaches the caller.
            self.host
                .set_header(Map::Response, wire::RETRY_MARKER_HEADER, None);
        }
        let facts = AnswerFacts {
            attempt_count,
            marker,
            status: status_code(&self.host, Map::Response),
            start_ms: self.start_ms,
        };
        let answer = answer::answer(&self.config, plan, facts, &Reads(&self.host));
        self.attempts = answer.attempts;
        let host = &self.host;
        if let Some(provider) = answer.provider {
            host.set_header(Map::Response, wire::PROVIDER_HEADER, Some(provider));
        }
        if self.config.log_models {
            self.log_models(None, answer::entry_model(&self.config, plan, answer.served));
        }
        if let Some(attempts) = answer.attempts_header {
            host.set_header(
                Map::Response,
                wire::ATTEMPTS_HEADER,
                Some(&attempts.to_string()),
            );
        }
        if let Some(count) = answer.fallback_count {
            host.set_header(
                Map::Response,
                wire::FALLBACK_COUNT_HEADER,
                Some(&count.to_string()),
            );
        }
        if let Some(reason) = answer.fallback_reason {
            host.set_header(Map::Response, wire::FALLBACK_REASON_HEADER, Some(reason));
        }
        if self.cors && answer.provider.is_some() {
            // Browsers read only the headers CORS exposes (read only for such a request).
            let existing = host.header(Map::Response, EXPOSE_HEADERS);
            if let Some(value) = answer::expose_headers(existing.as_deref()) {
                host.set_header(Map::Response, EXPOSE_HEADERS, Some(&value));
            }
        }
        if let Some(chain) = answer.exhausted {
            self.metrics.exhausted(host, &self.config, plan.chain);
            log::debug!(
                "chain {} exhausted after {} attempts",
                chain,
                answer.attempts
            );
        }
        if let Some(reply) = answer.replace {
            host.set_header(Map::Response, ":status", Some(&reply.status.to_string()));
            host.set_header(Map::Response, "content-type", Some("application/json"));
            host.set_header(Map::Response, "content-length", None);
            self.exhausted_body = Some(reply.body_for(self.api));
        }
        if let Some(retry) = answer.should_retry {
            host.set_header(
                Map::Response,
                wire::SHOULD_RETRY_HEADER,
                Some(if retry { "true" } else { "false" }),
            );
        }
        Flow::Continue
    }

    pub fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        let Some(body) = &self.exhausted_body else {
            return Flow::Continue;
        };
        if !end_of_stream {
            return Flow::Pause;
        }
        self.host.set_body(Map::Response, body_size, body);
        Flow::Continue
    }
}
