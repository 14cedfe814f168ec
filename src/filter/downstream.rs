//! The downstream role (before the router): strips what callers could steer with, plans the
//! chain once the body's `model` is known, publishes the plan in filter state for the route's
//! matcher and the upstream filters, and writes the public response headers.

use super::envoy_host::{self, SharedGatekeeper};
use crate::attempt_log;
use crate::config::Config;
use crate::plan::{self, Plan, PlanRecord, RequestFacts};
use crate::reply::Reply;
use crate::rewrite;
use crate::wire;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;

pub struct Downstream {
    config: Rc<Config>,
    no_fallback: bool,
    caller: Option<String>,
    plan: Option<Plan>,
    /// Provider calls made, from the final answer's attempt count.
    attempts: usize,
    /// Replacement body when an exhausted chain answers `503 fallbacks_exhausted`.
    exhausted_body: Option<String>,
}

impl Downstream {
    pub fn new(config: Rc<Config>) -> Self {
        Downstream {
            config,
            no_fallback: false,
            caller: None,
            plan: None,
            attempts: 0,
            exhausted_body: None,
        }
    }

    fn send_reply(&self, reply: &Reply) {
        let body = reply.body();
        let should_retry = if reply.should_retry { "true" } else { "false" };
        self.send_http_response(
            u32::from(reply.status),
            vec![
                ("content-type", "application/json"),
                (wire::SHOULD_RETRY_HEADER, should_retry),
            ],
            Some(body.as_bytes()),
        );
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
            self.get_property(vec!["xds", "route_name"])
                .and_then(|b| String::from_utf8(b).ok())
        } else {
            None
        };
        let facts = RequestFacts {
            model: &model,
            route: route.as_deref(),
            caller: self.caller.as_deref(),
            no_fallback: self.no_fallback,
        };
        let config = Rc::clone(&self.config);
        let gatekeeper = SharedGatekeeper {
            config: &config,
            health: envoy_host::health(&config),
        };
        let plan = match plan::plan(&config, &facts, &gatekeeper) {
            Ok(plan) => plan,
            Err(reply) => {
                log::debug!(
                    "llm_failover: refused model {:?}: {}",
                    facts.model,
                    reply.code
                );
                self.send_reply(&reply);
                return false;
            }
        };
        let chain = &config.chains[usize::from(plan.chain)];

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
            self.set_property(
                vec![wire::SLOT_PROPERTIES[k]],
                Some(config.providers[provider].cluster.as_bytes()),
            );
        }
        let record = PlanRecord {
            chain: plan.chain,
            start_ms: envoy_host::now_ms(),
            body_len: body_len as u64,
            slots: plan.slots.clone(),
            path: &self.get_http_request_header(":path").unwrap_or_default(),
            authority: &self
                .get_http_request_header(":authority")
                .unwrap_or_default(),
            model: &model,
        };
        self.set_property(vec![wire::PLAN_PROPERTY], Some(record.encode().as_bytes()));
        if !plan.skipped.is_empty() {
            let mut log = String::new();
            for (entry, reason) in &plan.skipped {
                let provider = chain.entries[usize::from(*entry)].provider;
                attempt_log::push_skip(&mut log, &config.providers[provider].name, reason.as_str());
            }
            self.set_property(vec![wire::ATTEMPTS_PROPERTY], Some(log.as_bytes()));
        }
        let retries = plan.slots.len().saturating_sub(1);
        self.set_http_request_header(wire::MAX_RETRIES_HEADER, Some(&retries.to_string()));
        // The route's matcher must see the slot properties we just wrote.
        if hostcalls::call_foreign_function("clear_route_cache", Some(&[])).is_err() {
            log::warn!("llm_failover: clear_route_cache is not available in this Envoy; the route may pick a stale cluster");
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
        // Envoy honours these from "internal" callers (loopback included): never from ours.
        for name in wire::ENVOY_STEERING_HEADERS {
            self.set_http_request_header(name, None);
        }
        let opt_out = self.config.opt_out_header.as_str();
        if let Some(value) = self.get_http_request_header(opt_out) {
            self.no_fallback = value.eq_ignore_ascii_case("off");
            self.set_http_request_header(opt_out, None);
        }
        if let Some(header) = &self.config.caller_header {
            self.caller = self.get_http_request_header(header);
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
        let Some(plan) = &self.plan else {
            return Action::Continue;
        };
        let attempts = self
            .get_http_response_header(wire::ATTEMPT_COUNT_HEADER)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(1)
            .clamp(1, plan.slots.len());
        self.attempts = attempts;
        self.set_http_response_header(wire::ATTEMPT_COUNT_HEADER, None);
        let exhausted = self
            .get_http_response_header(wire::RETRY_MARKER_HEADER)
            .is_some();
        if exhausted {
            self.set_http_response_header(wire::RETRY_MARKER_HEADER, None);
        }
        let chain = &self.config.chains[usize::from(plan.chain)];
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
            let log = self
                .get_property(vec![wire::ATTEMPTS_PROPERTY])
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_default();
            if let Some(reason) = attempt_log::outcome_of_attempt(&log, attempts - 1) {
                self.set_http_response_header(wire::FALLBACK_REASON_HEADER, Some(reason));
            }
        } else if plan.starts_after_skip() {
            self.set_http_response_header(wire::FALLBACK_REASON_HEADER, Some("breaker_open"));
        }
        if exhausted {
            log::info!(
                "llm_failover: chain {} exhausted after {attempts} attempts",
                chain.name
            );
            if chain.fallbacks_exhausted {
                let reply = Reply::fallbacks_exhausted(&chain.name, attempts);
                self.set_http_response_header(":status", Some("503"));
                self.set_http_response_header("content-type", Some("application/json"));
                self.set_http_response_header("content-length", None);
                self.set_http_response_header(wire::SHOULD_RETRY_HEADER, Some("true"));
                self.exhausted_body = Some(reply.body());
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
