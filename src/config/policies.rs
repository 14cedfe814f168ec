//! Validating the request-independent settings: `breaker`, `dead_marks`, `timeouts`, and the
//! top-level header names and status path.

use super::problems::{is_header_name, Problems};
use super::raw::{RawBreaker, RawConfig, RawDeadMarks, RawFleet, RawTimeouts};
use super::{
    BreakerPolicy, DeadMarkPolicy, Fleet, Timeouts, WindowUnit, FLEET_CLUSTER, FLEET_WINDOWS,
    MAX_BREAKER_FAILURES,
};

#[inline]
pub fn breaker(b: &RawBreaker, problems: &mut Problems) -> BreakerPolicy {
    let mut at = problems.at("breaker");
    if b.failures < 1 || b.failures > MAX_BREAKER_FAILURES {
        at.field(
            "failures",
            format!("must be between 1 and {MAX_BREAKER_FAILURES}"),
        );
    }
    for (field, v) in [("window", b.window), ("cooldown", b.cooldown)] {
        if v == 0 {
            at.field(field, "must be longer than 0s");
        }
    }
    if b.max_cooldown < b.cooldown {
        at.field("max_cooldown", "must be at least breaker.cooldown");
    }
    if b.fleet_failures > 0 && WindowUnit::of(b.fleet_window).is_none() {
        at.field("fleet_window", fleet_window_problem(b.fleet_window));
    }
    BreakerPolicy {
        failures: b.failures,
        window_ms: b.window,
        cooldown_ms: b.cooldown,
        max_cooldown_ms: b.max_cooldown,
        fleet_failures: b.fleet_failures,
        fleet_window_ms: b.fleet_window,
    }
}

/// What is wrong with a window of `ms` for the fleet's store (it is none of its units).
#[inline]
pub fn fleet_window_problem(ms: u64) -> String {
    format!(
        "{} is not a window the fleet's store counts in: with `fleet` on, use {FLEET_WINDOWS}",
        crate::duration::display_ms(ms)
    )
}

/// The `fleet` section, and what it asks of the rest: budget windows (providers' and callers')
/// in the service's units,
/// limits that fit its 32-bit `requests_per_unit`, `breaker.fleet_failures` only with it.
#[inline]
pub fn fleet(raw: &RawConfig, problems: &mut Problems) -> Option<Fleet> {
    let Some(f) = &raw.fleet else {
        if raw.breaker.fleet_failures > 0 {
            problems.field(
                "breaker.fleet_failures",
                "counts the fleet's failures through its store: configure `fleet` too, or remove it",
            );
        }
        return None;
    };
    fleet_section(f, problems.at("fleet"));
    let providers = (raw.providers.iter().enumerate())
        .map(|(i, p)| (format!("providers[{i}].budget"), p.budget.as_ref()));
    let callers = (raw.callers.iter().enumerate())
        .map(|(i, c)| (format!("callers[{i}].budget"), c.budget.as_ref()));
    for (path, budget) in providers.chain(callers) {
        let Some(b) = budget else { continue };
        let mut at = problems.at(path);
        if b.window > 0 && WindowUnit::of(b.window).is_none() {
            at.field("window", fleet_window_problem(b.window));
        }
        if b.tokens > u64::from(u32::MAX) {
            at.field(
                "tokens",
                format!(
                    "must be at most {} with `fleet` on (the store's limit is 32-bit)",
                    u32::MAX
                ),
            );
        }
    }
    let cluster = f
        .cluster
        .clone()
        .unwrap_or_else(|| FLEET_CLUSTER.to_string());
    Some(Fleet {
        cluster,
        address: f.address.clone(),
        domain: f.domain.clone(),
        sync_ms: f.sync,
        timeout_ms: f.timeout,
        closed: f.on_unavailable == "closed",
    })
}

#[inline]
fn fleet_section(f: &RawFleet, mut at: super::problems::At<'_>) {
    if f.address.is_none() && f.cluster.is_none() {
        at.field(
            "address",
            "name the rate-limit service: address: 127.0.0.1:8081 (or cluster: the Envoy cluster that reaches it)",
        );
    }
    if let Some(a) = &f.address {
        let port = a
            .rsplit_once(':')
            .and_then(|(h, p)| (!h.is_empty()).then_some(p));
        if !port.is_some_and(|p| p.parse::<u16>().is_ok_and(|p| p > 0)) {
            at.field(
                "address",
                format!("{a:?} is not host:port, e.g. 127.0.0.1:8081"),
            );
        }
    }
    if let Some(c) = &f.cluster {
        if c.is_empty() {
            at.field("cluster", "must not be empty");
        }
    }
    if f.domain.is_empty() || !super::problems::is_token(&f.domain) {
        at.field(
            "domain",
            format!(
                "{:?}: use letters, digits, '-', '_' or '.', e.g. llm-failover",
                f.domain
            ),
        );
    }
    if f.sync < 100 {
        at.field("sync", "must be at least 100ms (e.g. 1s)");
    }
    if f.timeout == 0 || f.timeout >= f.sync {
        at.field(
            "timeout",
            "must be above 0 and shorter than fleet.sync (one sync at a time)",
        );
    }
    if f.on_unavailable != "open" && f.on_unavailable != "closed" {
        at.field(
            "on_unavailable",
            format!("{:?}: use open (each replica goes on from its own counts) or closed (budgets count as spent)", f.on_unavailable),
        );
    }
}

#[inline]
pub fn dead_marks(d: &RawDeadMarks) -> DeadMarkPolicy {
    DeadMarkPolicy {
        model_not_found_ms: d.model_not_found,
        setup_fault_ms: d.setup_fault,
        quota_exhausted_ms: d.quota_exhausted,
        rate_limited_ahead_ms: d.rate_limited_ahead,
    }
}

#[inline]
pub fn timeouts(t: &RawTimeouts, problems: &mut Problems) -> Timeouts {
    let mut at = problems.at("timeouts");
    if t.attempt == 0 {
        at.field("attempt", "must be longer than 0s");
    }
    if t.budget != 0 && t.budget < t.min_remaining {
        at.field(
            "budget",
            "must be at least timeouts.min_remaining (or 0 for no budget)",
        );
    }
    Timeouts {
        attempt_ms: t.attempt,
        stall_ms: t.stall,
        total_time_ms: t.budget,
        min_remaining_ms: t.min_remaining,
        first_token_ms: t.first_token,
    }
}

/// `opt_out_header`, `caller_header`, `status_path`, `liveness_path` and `models_path`.
#[inline]
pub fn request_settings(raw: &RawConfig, problems: &mut Problems) {
    if !is_header_name(&raw.opt_out_header.to_ascii_lowercase()) {
        problems.field(
            "opt_out_header",
            format!("{:?} is not a valid header name: use lowercase letters, digits, '-' or '_', e.g. x-api-key", raw.opt_out_header),
        );
    }
    if let Some(h) = &raw.caller_header {
        if !is_header_name(&h.to_ascii_lowercase()) {
            problems.field("caller_header", format!("{h:?} is not a valid header name: use lowercase letters, digits, '-' or '_', e.g. x-api-key"));
        }
    }
    if let Some(p) = &raw.status_path {
        if !p.starts_with('/') {
            problems.field(
                "status_path",
                format!("{p:?} must start with '/', e.g. \"/llm-failover/status\""),
            );
        }
    }
    let p = &raw.liveness_path;
    if !p.is_empty() && !p.starts_with('/') {
        problems.field(
            "liveness_path",
            format!("{p:?} must start with '/' (\"\" turns it off)"),
        );
    }
    let p = &raw.models_path;
    if !p.is_empty() && (!p.starts_with('/') || p.ends_with('/')) {
        problems.field(
            "models_path",
            format!("{p:?} must start with '/' and not end with one (\"\" turns it off)"),
        );
    }
}
