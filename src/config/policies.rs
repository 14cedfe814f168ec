//! Validating the request-independent settings: `breaker`, `dead_marks`, `timeouts`, and the
//! top-level header names and status path.

use super::problems::{is_header_name, Problems};
use super::raw::{RawBreaker, RawConfig, RawDeadMarks, RawTimeouts};
use super::{BreakerPolicy, DeadMarkPolicy, Timeouts, MAX_BREAKER_FAILURES};

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
    BreakerPolicy {
        failures: b.failures,
        window_ms: b.window,
        cooldown_ms: b.cooldown,
        max_cooldown_ms: b.max_cooldown,
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
