//! The breaker state machine and the dead marks: what one report does to a record (pure: no
//! store, no clock; [`super::Health::report`] runs it inside the update loop).

use super::record::{ModelMark, Record, MAX_FAILURES, MAX_MODEL_MARKS, MAX_MODEL_NAME};
use super::{BreakerChange, BreakerState, DeadMarkSet, DeadScope, InPlace, Report, ReportEffect};
use crate::classify::Class;
use crate::config::{BreakerPolicy, DeadMarkPolicy};

/// Longest dead mark a rate-limit reset can set (a garbage or hostile header cannot take a
/// provider away for longer than a day).
pub const MAX_RATE_LIMIT_MARK_MS: u64 = 24 * 3_600_000;

impl BreakerState {
    /// The state an `open_until` means at `now` (0: closed; in the future: open; else half-open).
    pub(super) fn of(open_until: u64, now: u64) -> BreakerState {
        if open_until == 0 {
            BreakerState::Closed
        } else if now < open_until {
            BreakerState::Open
        } else {
            BreakerState::HalfOpen
        }
    }
}

impl Record {
    /// Drops what has expired: failures outside the window, dead marks and probe claims past
    /// their end. Never changes what the record means.
    pub(super) fn prune(&mut self, now: u64, window_ms: u64) {
        let window_start = now.saturating_sub(window_ms);
        let outside = self.failures.partition_point(|&t| t <= window_start);
        self.failures.drain(..outside);
        self.models.retain(|m| m.until > now);
        if self.provider_dead_until <= now {
            self.provider_dead_until = 0;
        }
        if self.probe_until <= now {
            self.probe_until = 0;
        }
        if self.ahead_until <= now {
            self.ahead_until = 0;
        }
    }

    /// Applies one report to a pruned record. `written` in the result says whether the record
    /// changed (and so must be stored).
    pub(super) fn apply(
        &mut self,
        now: u64,
        model: &str,
        report: &Report,
        breaker: &BreakerPolicy,
        dead: &DeadMarkPolicy,
    ) -> ReportEffect {
        let state = BreakerState::of(self.open_until, now);
        let mut effect = ReportEffect::nothing(state);
        let class = report.class;
        let says_nothing = matches!(class, Class::InvalidRequest | Class::ClientDisconnect);
        // The class the breaker counts: this attempt's, or, for an in-place retry whose own
        // class counts nothing, the first try's (behaviour.md 16: a request counts once).
        let counted = match report.in_place {
            InPlace::Retried => {
                // The retry's report decides; only the last failure is kept now.
                if class != Class::Ok && !says_nothing {
                    self.last_failure = Some((class, now));
                    effect.written = true;
                }
                return effect;
            }
            InPlace::After(first) if class != Class::Ok && !class.counts_toward_breaker() => {
                first.counts_toward_breaker().then_some(first)
            }
            _ => class.counts_toward_breaker().then_some(class),
        };
        match class {
            Class::Ok => {
                let before = self.models.len();
                self.models.retain(|m| m.model != model);
                if self.models.len() != before || self.provider_dead_until != 0 {
                    self.provider_dead_until = 0;
                    effect.cleared_dead_mark = true;
                    effect.written = true;
                }
                if state == BreakerState::HalfOpen {
                    self.open_until = 0;
                    self.probe_until = 0;
                    self.failures.clear();
                    effect.breaker = BreakerChange::Closed;
                    effect.state = BreakerState::Closed;
                    effect.written = true;
                }
                return effect;
            }
            Class::InvalidRequest | Class::ClientDisconnect if counted.is_none() => {
                self.release_probe_claim(now, &mut effect);
                return effect;
            }
            _ => {}
        }

        if !says_nothing {
            self.last_failure = Some((class, now));
        }
        effect.written = true;
        if counted.is_some() {
            match state {
                BreakerState::Closed => {
                    let at = self.failures.partition_point(|&t| t <= now);
                    self.failures.insert(at, now);
                    let cap = usize::try_from(breaker.failures)
                        .unwrap_or(MAX_FAILURES)
                        .clamp(1, MAX_FAILURES);
                    let excess = self.failures.len().saturating_sub(cap);
                    self.failures.drain(..excess);
                    effect.counted = true;
                    // After pruning every timestamp kept lies inside the window.
                    if self.failures.len() >= cap {
                        let until = self.open(now, report.retry_after_ms, breaker);
                        effect.breaker = BreakerChange::Opened { until_ms: until };
                        effect.state = BreakerState::Open;
                    }
                }
                // An attempt that was in flight when the breaker opened: already accounted for.
                BreakerState::Open => {}
                BreakerState::HalfOpen => {
                    let until = self.open(now, report.retry_after_ms, breaker);
                    self.failures.clear();
                    effect.breaker = BreakerChange::Reopened { until_ms: until };
                    effect.state = BreakerState::Open;
                }
            }
            if class.counts_toward_breaker() || says_nothing {
                return effect;
            }
        } else {
            // Not counted: rate_limited, model_not_found, setup_fault, and the body classes.
            self.release_probe_claim(now, &mut effect);
        }
        if !report.falls_over {
            return effect;
        }
        match class {
            Class::ModelNotFound if dead.model_not_found_ms > 0 => {
                let until = now.saturating_add(dead.model_not_found_ms);
                effect.dead_mark = self.mark_model(model, until, class);
            }
            Class::RateLimited => {
                if let Some(delay) = report.retry_after_ms.filter(|&d| d > breaker.cooldown_ms) {
                    let until = now.saturating_add(delay.min(MAX_RATE_LIMIT_MARK_MS));
                    effect.dead_mark = self.mark_model(model, until, class);
                }
            }
            Class::SetupFault if dead.setup_fault_ms > 0 => {
                effect.dead_mark = Some(self.mark_provider(now, dead.setup_fault_ms, class));
            }
            // A spent quota: the provider is dead until its reset when the answer named one,
            // else for `dead_marks.quota_exhausted`; never longer than a day.
            Class::QuotaExhausted => {
                let period = report
                    .retry_after_ms
                    .unwrap_or(dead.quota_exhausted_ms)
                    .min(MAX_RATE_LIMIT_MARK_MS);
                if period > 0 {
                    effect.dead_mark = Some(self.mark_provider(now, period, class));
                }
            }
            _ => {}
        }
        effect
    }

    /// Marks the whole provider dead for `period` ms from now (keeping a later existing end).
    fn mark_provider(&mut self, now: u64, period: u64, class: Class) -> DeadMarkSet {
        let until = now.saturating_add(period).max(self.provider_dead_until);
        self.provider_dead_until = until;
        DeadMarkSet {
            scope: DeadScope::Provider,
            until_ms: until,
            class,
        }
    }

    /// Opens the breaker from `now`; returns `open_until`.
    pub(super) fn open(
        &mut self,
        now: u64,
        retry_after_ms: Option<u64>,
        breaker: &BreakerPolicy,
    ) -> u64 {
        let period = match retry_after_ms {
            Some(delay) => delay.min(breaker.max_cooldown_ms),
            None => breaker.cooldown_ms,
        };
        // Never 0: 0 means closed.
        self.open_until = now.saturating_add(period).max(1);
        self.probe_until = 0;
        self.open_until
    }

    /// A half-open breaker's probe claim goes when an outcome says nothing about the provider's
    /// health (neither a success nor a counted failure): the next request probes at once instead
    /// of waiting for the claim to expire. While half-open, the probe is normally the only
    /// attempt in flight, so the claim released is the reporter's own.
    pub(super) fn release_probe_claim(&mut self, now: u64, effect: &mut ReportEffect) {
        if BreakerState::of(self.open_until, now) == BreakerState::HalfOpen && self.probe_until != 0
        {
            self.probe_until = 0;
            effect.probe_released = true;
            effect.written = true;
        }
    }

    /// Marks `model` dead until `until` (keeping a later existing end). When the record is full
    /// the mark expiring first is dropped, which may be this one.
    pub(super) fn mark_model(
        &mut self,
        model: &str,
        until: u64,
        class: Class,
    ) -> Option<DeadMarkSet> {
        if model.is_empty() || model.len() > MAX_MODEL_NAME {
            return None;
        }
        let (until, class) = match self.models.iter_mut().find(|m| m.model == model) {
            Some(m) => {
                if until > m.until {
                    m.until = until;
                    m.class = class;
                }
                (m.until, m.class)
            }
            None => {
                self.models.push(ModelMark {
                    model: model.to_string(),
                    until,
                    class,
                });
                while self.models.len() > MAX_MODEL_MARKS {
                    let first = self
                        .models
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, m)| m.until)
                        .map(|(i, _)| i);
                    if let Some(i) = first {
                        self.models.remove(i);
                    }
                }
                if !self.models.iter().any(|m| m.model == model) {
                    return None;
                }
                (until, class)
            }
        };
        Some(DeadMarkSet {
            scope: DeadScope::Model,
            until_ms: until,
            class,
        })
    }
}
