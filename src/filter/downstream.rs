//! The downstream role (before the router): strips what callers could steer with, plans the
//! chain once the body's `model` is known, publishes the plan in filter state for the route's
//! matcher and the upstream filters, and writes the public response headers.

use super::envoy_host::{self, SharedGatekeeper};
use super::metrics::Metrics;
use crate::attempt_log;
use crate::classify::Class;
use crate::config::{Chain, Config};
use crate::forward::{self, Verdict};
use crate::header_pairs::HeaderPairs;
use crate::host::FixedClock;
use crate::plan::{self, Plan, PlanRecord, RequestFacts, SkipReason};
use crate::reply::Reply;
use crate::rewrite;
use crate::status;
use crate::wire;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, MapType};
use std::cell::Cell;
use std::rc::Rc;

thread_local! {
    /// A missing `clear_route_cache` is a deployment problem: say so once per VM, not per request.
    static WARNED_ROUTE_CACHE: Cell<bool> = const { Cell::new(false) };
}

pub struct Downstream {
    config: Rc<Config>,
    metrics: Rc<Metrics>,
    no_fallback: bool,
    caller: Option<String>,
    /// The caller's `:path` and `:authority`, for attempts that must restore them.
    path: String,
    authority: String,
    plan: Option<Plan>,
    /// Provider calls made, from the final answer's attempt count.
    attempts: usize,
    /// Replacement body when an exhausted chain answers `503 fallbacks_exhausted`.
    exhausted_body: Option<String>,
    /// The filter answered this request itself (status endpoint, unreadable request).
    answered: bool,
}

impl Downstream {
    pub fn new(config: Rc<Config>, metrics: Rc<Metrics>) -> Self {
        Downstream {
            config,
            metrics,
            no_fallback: false,
            caller: None,
            path: String::new(),
            authority: String::new(),
            plan: None,
            attempts: 0,
            exhausted_body: None,
            answered: false,
        }
    }

    fn send_reply(&self, reply: &Reply) {
        envoy_host::send_reply(reply);
    }

    /// Answers a request for the status endpoint (SPEC section 10) when `status_path` is set and
    /// the path (without its query) is it. Returns whether it answered.
    fn answer_status(&self, method: &str) -> bool {
        let Some(status_path) = &self.config.status_path else {
            return false;
        };
        let path = self
            .path
            .split_once('?')
            .map_or(self.path.as_str(), |(p, _)| p);
        if path != status_path {
            return false;
        }
        if method != "GET" && method != "HEAD" {
            self.send_http_response(
                405,
                vec![("allow", "GET, HEAD"), ("content-type", "text/plain")],
                Some(b"the llm-failover status endpoint answers GET and HEAD only\n"),
            );
            return true;
        }
        let body = status::render(
            &self.config,
            &envoy_host::health(&self.config),
            envoy_host::now_ms(),
        );
        self.send_http_response(
            200,
            vec![
                ("content-type", "application/json"),
                ("cache-control", "no-store"),
            ],
            (method == "GET").then_some(body.as_bytes()),
        );
        true
    }

    /// Answers `GET /v1/models` (and `/{id}`) from the list built with the configuration.
    /// Returns whether it answered.
    fn answer_models(&self, method: &str) -> bool {
        if method != "GET" && method != "HEAD" {
            return false;
        }
        let anthropic =
            || envoy_host::header(MapType::HttpRequestHeaders, "anthropic-version").is_some();
        let Some(answer) = self.config.model_list.answer(&self.path, anthropic) else {
            return false;
        };
        let mut headers = vec![("content-type", "application/json")];
        if let Some(retry) = answer.should_retry {
            headers.push((
                wire::SHOULD_RETRY_HEADER,
                if retry { "true" } else { "false" },
            ));
        }
        self.send_http_response(
            u32::from(answer.status),
            headers,
            (method == "GET").then_some(answer.body.as_bytes()),
        );
        true
    }

    /// True when the answer is Envoy's own after the last planned attempt got no response
    /// (refused, reset, timed out) and that class falls over in `chain`: such attempts leave no
    /// marker header, yet the chain is exhausted just the same. Reads a property only for 5xx
    /// answers, so the healthy path pays nothing.
    fn ended_without_response(&self, chain: &Chain, attempts: usize) -> bool {
        if envoy_host::status_code(MapType::HttpResponseHeaders) < 500 {
            return false;
        }
        let details = envoy_host::text_property(b"response\0code_details").unwrap_or_default();
        if details.is_empty() || details == "via_upstream" {
            return false;
        }
        // The last attempt's own record when its upstream filter has settled it already,
        // else what Envoy says happened.
        let log = envoy_host::text_property(wire::ATTEMPTS_PROPERTY.as_bytes()).unwrap_or_default();
        let class = attempt_log::outcome_of_attempt(&log, attempts)
            .and_then(Class::parse)
            .unwrap_or(if details.contains("timeout") {
                Class::Timeout
            } else {
                Class::ConnectionError
            });
        chain.fallback_on.falls_over(class, None)
    }

    /// Starts the request's attempt log (filter state, printed by access logs) with the entries
    /// planning left out; the upstream filters append each attempt.
    fn log_skips(&self, chain: usize, skipped: &[(u8, SkipReason)]) {
        if skipped.is_empty() {
            return;
        }
        let chain = &self.config.chains[chain];
        let mut log = String::new();
        for (entry, reason) in skipped {
            if let Some(e) = chain.entries.get(usize::from(*entry)) {
                let name = &self.config.providers[e.provider].name;
                attempt_log::push_skip(&mut log, name, reason.as_str());
            }
        }
        envoy_host::set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
    }

    /// Names the chain in filter state for access logs, when there is more than one.
    fn log_chain(&self, chain: usize) {
        if self.config.chains.len() > 1 {
            let name = &self.config.chains[chain].name;
            envoy_host::set_property(wire::CHAIN_PROPERTY, name.as_bytes());
        }
    }

    /// Counts the entries planning left out (`llm_failover_skipped_total`). With `try_last` an
    /// open or dead provider moved to the end of the walk is not skipped: it is still planned.
    fn count_skips(&self, chain: usize, skipped: &[(u8, SkipReason)], plan: Option<&Plan>) {
        let chain = &self.config.chains[chain];
        for (entry, reason) in skipped {
            if plan.is_some_and(|p| p.slots.iter().any(|s| s.entry == *entry)) {
                continue;
            }
            if let Some(e) = chain.entries.get(usize::from(*entry)) {
                self.metrics.skipped(&self.config, e.provider, *reason);
            }
        }
    }

    /// Plans the request (body complete, or no body) and publishes the plan. Returns whether
    /// the request goes on to the router.
    fn plan_request(&mut self, body: &[u8]) -> bool {
        let (model, scan) = if body.is_empty() {
            (std::borrow::Cow::Borrowed(""), None)
        } else {
            let scan = match rewrite::scan_top_level(body) {
                Ok(scan) => scan,
                Err(e) => {
                    self.send_reply(&Reply::invalid_body(&e.to_string()));
                    return false;
                }
            };
            match rewrite::model_value(body, &scan) {
                Ok(Some(model)) => (model, Some(scan)),
                Ok(None) => {
                    self.send_reply(&Reply::invalid_body("it has no \"model\" field"));
                    return false;
                }
                Err(e) => {
                    self.send_reply(&Reply::invalid_body(&e.to_string()));
                    return false;
                }
            }
        };
        if model.chars().any(char::is_control) {
            self.send_reply(&Reply::invalid_body(
                "the model name contains control characters",
            ));
            return false;
        }
        let route = if self.config.chains.iter().any(|c| !c.routes.is_empty()) {
            envoy_host::text_property(b"xds\0route_name")
        } else {
            None
        };
        let facts = RequestFacts {
            model: &model,
            route: route.as_deref(),
            path: Some(&self.path),
            caller: self.caller.as_deref(),
            no_fallback: self.no_fallback,
        };
        let config = Rc::clone(&self.config);
        let now = FixedClock(envoy_host::now_ms());
        let gatekeeper = SharedGatekeeper {
            config: &config,
            health: envoy_host::health_at(&config, &now),
            metrics: &self.metrics,
        };
        let plan = match plan::plan_or_refuse(&config, &facts, &gatekeeper) {
            Ok(plan) => plan,
            Err(refusal) => {
                log::debug!("refused model {:?}: {}", facts.model, refusal.reply.code);
                // Every provider open or dead: those skips are what operators need to see.
                // (A caller asking for a model no provider serves is not a skip worth counting.)
                if let (Some(chain), "circuit_open") = (refusal.chain, refusal.reply.code) {
                    self.count_skips(usize::from(chain), &refusal.skipped, None);
                    self.log_skips(usize::from(chain), &refusal.skipped);
                    self.log_chain(usize::from(chain));
                }
                self.send_reply(&refusal.reply);
                return false;
            }
        };
        let chain = &config.chains[usize::from(plan.chain)];
        self.count_skips(usize::from(plan.chain), &plan.skipped, Some(&plan));

        // A client-sent `fallbacks` field must not steer anything downstream of us.
        let mut body_len = body.len();
        if let Some(scan) = &scan {
            if let Some(clean) = rewrite::rewrite(body, scan, None, true) {
                body_len = clean.len();
                self.set_http_request_body(0, body.len(), &clean);
                self.set_http_request_header("content-length", Some(&body_len.to_string()));
            }
        }

        for (k, slot) in plan.slots.iter().enumerate() {
            let provider = chain.entries[usize::from(slot.entry)].provider;
            envoy_host::set_property(
                wire::SLOT_PROPERTIES[k],
                config.providers[provider].cluster.as_bytes(),
            );
        }
        let limit = plan.attempt_limit(chain);
        let record = PlanRecord {
            config: config.fingerprint,
            chain: plan.chain,
            start_ms: now.0,
            body_len: body_len as u64,
            log_started: !plan.skipped.is_empty(),
            stream: scan.as_ref().is_some_and(|s| s.stream),
            slots: std::borrow::Cow::Borrowed(&plan.slots),
            limit: if chain.has_lists() { limit as u8 } else { 0 },
            context_window: std::borrow::Cow::Borrowed(&plan.context_window),
            content_policy: std::borrow::Cow::Borrowed(&plan.content_policy),
            path: &self.path,
            authority: &self.authority,
            model: &model,
        };
        envoy_host::set_property(wire::PLAN_PROPERTY, record.encode().as_bytes());
        self.log_chain(usize::from(plan.chain));
        self.log_skips(usize::from(plan.chain), &plan.skipped);
        let retries = limit.saturating_sub(1);
        self.set_http_request_header(wire::MAX_RETRIES_HEADER, Some(&retries.to_string()));
        // The route's matcher must see the slot properties we just wrote.
        if hostcalls::call_foreign_function("clear_route_cache", Some(&[])).is_err()
            && !WARNED_ROUTE_CACHE.with(|w| w.replace(true))
        {
            log::warn!("clear_route_cache is not available in this Envoy; the route may pick a stale cluster");
        }
        self.plan = Some(plan);
        true
    }
}

impl Context for Downstream {
    fn on_done(&mut self) -> bool {
        // A half-open probe this request held but never used goes back to the pool.
        if let Some(plan) = &self.plan {
            let chain = &self.config.chains[usize::from(plan.chain)];
            let health = envoy_host::health(&self.config);
            for (i, slot) in plan.slots.iter().enumerate() {
                if slot.probe && i >= self.attempts {
                    let provider = chain.entries[usize::from(slot.entry)].provider;
                    health.release_probe(&self.config.providers[provider].name);
                }
            }
        }
        true
    }
}

impl HttpContext for Downstream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        // One hostcall for the whole map instead of one per header we might need or remove,
        // read in place: values are bytes (HTTP allows non-UTF-8 ones) until we need one.
        let map = envoy_host::header_map(MapType::HttpRequestHeaders);
        let mut method = "";
        let mut readable = true;
        // Caller headers only some providers take, for their attempts to put back.
        let mut kept: Vec<(&[u8], &[u8])> = Vec::new();
        for (name, value) in HeaderPairs::new(&map) {
            // Only the values we use are decoded; names are compared as bytes.
            let text = || std::str::from_utf8(value);
            match name {
                b":path" | b":authority" => match text() {
                    Ok(v) if name == b":path" => self.path = v.to_string(),
                    Ok(v) => self.authority = v.to_string(),
                    Err(_) => readable = false,
                },
                b":method" => method = text().unwrap_or(""),
                // Envoy honours these from "internal" callers (loopback included): never
                // from ours.
                _ => {
                    let config = &self.config;
                    if let Some(h) = wire::ENVOY_STEERING_HEADERS
                        .iter()
                        .find(|h| h.as_bytes() == name)
                    {
                        self.set_http_request_header(h, None);
                        continue;
                    } else if name == config.opt_out_header.as_bytes() {
                        self.no_fallback = value.eq_ignore_ascii_case(b"off");
                        self.set_http_request_header(&config.opt_out_header, None);
                        continue;
                    } else if config.caller_header.as_deref().map(str::as_bytes) == Some(name) {
                        // An undecodable identity is no identity: restricted providers are out.
                        self.caller = text().ok().map(str::to_string);
                    }
                    // The caller's gateway key never travels past the gateway, even where no
                    // upstream role runs on the provider's cluster (SPEC section 7).
                    if let Some(h) = config
                        .gateway_credential_headers
                        .iter()
                        .find(|h| h.as_bytes() == name)
                    {
                        self.set_http_request_header(h, None);
                        continue;
                    }
                    // Providers are third parties: only the headers they take go on.
                    let verdict = config.forwarding.verdict(name);
                    if verdict != Verdict::Keep {
                        if let Ok(n) = std::str::from_utf8(name) {
                            self.set_http_request_header(n, None);
                        }
                    }
                    if verdict == Verdict::PerProvider {
                        kept.push((name, value));
                    }
                }
            }
        }
        if !kept.is_empty() {
            envoy_host::set_property(wire::FORWARD_PROPERTY, &forward::encode_kept(&kept));
        }
        if !readable {
            self.send_reply(&Reply::invalid_request(
                "the request's :path or :authority is not valid UTF-8",
            ));
            self.answered = true;
            return Action::Pause;
        }
        if self.answer_status(method) || self.answer_models(method) {
            self.answered = true;
            return Action::Pause;
        }
        if end_of_stream {
            return if self.plan_request(&[]) {
                Action::Continue
            } else {
                Action::Pause
            };
        }
        // Wait for the whole body: the model decides the chain.
        Action::Pause
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if self.answered {
            return Action::Pause;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.get_http_request_body(0, body_size).unwrap_or_default();
        if self.plan_request(&body) {
            Action::Continue
        } else {
            Action::Pause
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let attempts = usize::try_from(envoy_host::attempt_count()).unwrap_or(1);
        let config = Rc::clone(&self.config);
        if let Some(plan) = &mut self.plan {
            if attempts > 1 && config.chains[usize::from(plan.chain)].has_lists() {
                // An upstream filter may have moved the walk to an alternative list (SPEC 3a).
                let text = envoy_host::text_property(wire::PLAN_PROPERTY.as_bytes());
                if let Some(record) = text.as_deref().and_then(PlanRecord::decode) {
                    plan.slots = record.slots.into_owned();
                }
            }
        }
        let Some(plan) = &self.plan else {
            return Action::Continue;
        };
        let mut attempts = attempts.clamp(1, plan.slots.len());
        // An attempt the upstream role refused (time budget spent, or fail closed) reached no
        // provider: it is not counted, and the answer is the gateway's own.
        let refused = envoy_host::property(wire::REFUSED_PROPERTY.as_bytes());
        if refused.is_some() {
            attempts -= 1;
        }
        let budget_refused = refused.as_deref() == Some(wire::REFUSED_FOR_BUDGET.as_bytes());
        if refused.is_some() && !budget_refused {
            // Fail closed (SPEC section 7): say which provider was tried last, if any.
            self.attempts = attempts;
            self.set_http_response_header(wire::ATTEMPTS_HEADER, Some(&attempts.to_string()));
            if let Some(slot) = plan.slot(attempts) {
                let chain = &self.config.chains[usize::from(plan.chain)];
                let provider =
                    &self.config.providers[chain.entries[usize::from(slot.entry)].provider];
                self.set_http_response_header(wire::PROVIDER_HEADER, Some(&provider.name));
            }
            return Action::Continue;
        }
        self.attempts = attempts;
        let mut exhausted = budget_refused
            || envoy_host::header(MapType::HttpResponseHeaders, wire::RETRY_MARKER_HEADER)
                .is_some();
        if exhausted {
            self.set_http_response_header(wire::RETRY_MARKER_HEADER, None);
        }
        let chain = &self.config.chains[usize::from(plan.chain)];
        if !exhausted && attempts == plan.slots.len() {
            exhausted = self.ended_without_response(chain, attempts);
        }
        let Some(slot) = plan.slot(attempts) else {
            return Action::Continue;
        };
        let provider = &self.config.providers[chain.entries[usize::from(slot.entry)].provider];
        self.set_http_response_header(wire::PROVIDER_HEADER, Some(&provider.name));
        self.set_http_response_header(wire::ATTEMPTS_HEADER, Some(&attempts.to_string()));
        if attempts > 1 {
            self.set_http_response_header(
                wire::FALLBACK_COUNT_HEADER,
                Some(&(attempts - 1).to_string()),
            );
            let log =
                envoy_host::text_property(wire::ATTEMPTS_PROPERTY.as_bytes()).unwrap_or_default();
            if let Some(reason) = attempt_log::outcome_of_attempt(&log, attempts - 1) {
                self.set_http_response_header(wire::FALLBACK_REASON_HEADER, Some(reason));
            }
        } else if plan.starts_after_skip() {
            self.set_http_response_header(wire::FALLBACK_REASON_HEADER, Some("breaker_open"));
        }
        if exhausted {
            self.metrics
                .exhausted(&self.config, usize::from(plan.chain));
            log::debug!("chain {} exhausted after {attempts} attempts", chain.name);
            if chain.fallbacks_exhausted {
                let reply = Reply::fallbacks_exhausted(&chain.name, attempts);
                self.set_http_response_header(":status", Some("503"));
                self.set_http_response_header("content-type", Some("application/json"));
                self.set_http_response_header("content-length", None);
                self.set_http_response_header(wire::SHOULD_RETRY_HEADER, Some("true"));
                self.exhausted_body = Some(reply.body());
            } else {
                // The caller gets the last provider's answer: tell its SDK whether trying
                // again can help (providers' own advice is about one provider, not the chain).
                let status = envoy_host::status_code(MapType::HttpResponseHeaders);
                let retry = if Reply::status_is_retriable(status) {
                    "true"
                } else {
                    "false"
                };
                self.set_http_response_header(wire::SHOULD_RETRY_HEADER, Some(retry));
            }
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Some(body) = &self.exhausted_body else {
            return Action::Continue;
        };
        if !end_of_stream {
            return Action::Pause;
        }
        self.set_http_response_body(0, body_size, body.as_bytes());
        Action::Continue
    }
}
