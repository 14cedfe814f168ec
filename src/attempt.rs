//! One attempt's decisions in the upstream role (docs/behaviour.md section 3, 4, 5 and 7), as pure functions
//! over facts: what to change on the request for attempt k, and, given its outcome, what to
//! report, whether to mark the answer for a retry, which fallback and budget skips to count, and
//! what to log. The glue reads the facts from Envoy and applies the results.
//!
//! Envoy shares one request header map across attempts, so every attempt overwrites whatever an
//! earlier attempt set (credentials, authority, path, content-length) instead of assuming it sees
//! the caller's original headers.

use crate::attempt_log;
use crate::classify::Class;
use crate::config::{Chain, ChainEntry, Config, Provider};
use crate::destination::{self, Refusal};
use crate::handoff::{PlanRecord, PlanText, PlanView};
use crate::health::{InPlace, Report};
use crate::ids::ProviderId;
use crate::pattern::ModelPattern;
use crate::plan::{self, Gatekeeper, Walk};
use crate::plan::{SkipReason, Slot};
use crate::reply::Reply;
use crate::translate::Api;

/// What this attempt is: its number, the plan it belongs to, and the chain entry it serves.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'c, 'p> {
    /// 1-based, as Envoy counts (`x-envoy-attempt-count`).
    pub number: usize,
    pub plan: PlanView<'p>,
    pub slot: Slot,
    pub chain: &'c Chain,
    pub entry: &'c ChainEntry,
    pub provider_id: ProviderId,
    pub provider: &'c Provider,
    /// The attempt is sent in another API than the caller's (behaviour.md 13).
    pub translation: Option<Translation>,
}

/// An attempt translated for its provider: the request from the caller's API to the
/// provider's, the answer back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    pub caller: Api,
    pub provider: Api,
}

impl Attempt<'_, '_> {
    /// It belongs to a hedged request (docs/behaviour.md 5, hedging): its chain hedges and its
    /// plan has the two slots a race needs (`plan::Plan::hedge_after`).
    pub fn hedged(&self) -> bool {
        self.chain.hedge_after_ms.is_some() && self.plan.len() == 2
    }
}

/// Attempt `number` of the plan read from filter state (`None`: it was there but unreadable),
/// or why it must be refused before anything is attached to it (docs/behaviour.md section 7, fail closed):
/// a plan from another configuration, an attempt the plan has no slot for (Envoy retrying past
/// the plan: the header map still holds the last provider's key), or entries this
/// configuration does not have.
pub fn admit<'c, 'p>(
    config: &'c Config,
    plan: Option<&'p PlanText>,
    number: usize,
) -> Result<Attempt<'c, 'p>, Refusal> {
    let running = config.fingerprint;
    let Some(plan) = plan.map(PlanText::view) else {
        return Err(Refusal::ConfigMismatch {
            planned: None,
            running,
        });
    };
    destination::check_config(Some(plan.config), running)?;
    if plan.slot(number).is_none() {
        // Past a walk that had room for an alternative list it did not take: the walk is over.
        let chain = config.chain(plan.chain);
        return Err(match chain {
            Some(c) if number > plan.len() && number <= plan.limit() => Refusal::WalkEnded {
                attempt: number,
                chain: c.name.clone(),
            },
            _ => Refusal::Unplanned { attempt: number },
        });
    }
    resolve(config, plan, number).ok_or(Refusal::ConfigMismatch {
        planned: Some(plan.config),
        running,
    })
}

/// Attempt `number` of `plan` under `config`; `None` when the plan has no such attempt or names
/// entries this configuration does not have. Inlined where the upstream role asks (each of its
/// callbacks does): out of line, as it was once it grew, a same-API request ran more
/// instructions (BENCHMARKS-journal.md "Module size: room for the fourth wave").
#[inline]
pub fn resolve<'c, 'p>(
    config: &'c Config,
    plan: PlanView<'p>,
    number: usize,
) -> Option<Attempt<'c, 'p>> {
    let slot = plan.slot(number)?;
    let chain = config.chain(plan.chain)?;
    if !plan.slots().all(|s| chain.entry(s.entry).is_some()) {
        return None;
    }
    let entry = chain.entry(slot.entry)?;
    let provider = config.provider(entry.provider)?;
    // The plan names the caller's API only when its chain crosses APIs: same-API attempts
    // stop at this comparison.
    let translation = plan.caller_api.and_then(|caller| {
        let to = provider.translates(Some(caller), "")?;
        Some(Translation {
            caller,
            provider: to,
        })
    });
    Some(Attempt {
        number,
        plan,
        slot,
        chain,
        entry,
        provider_id: entry.provider,
        provider,
        translation,
    })
}

/// What resolving attempt `a` found, kept by the upstream role from the attempt's request
/// headers: its later callbacks find the attempt again by index ([`again`]) instead of
/// resolving (checking and deciding) it anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub number: usize,
    pub slot: Slot,
    pub translation: Option<Translation>,
}

/// The attempt `known` says, in `plan` under `config` (the ones it was resolved in).
pub fn again<'c, 'p>(
    config: &'c Config,
    plan: PlanView<'p>,
    known: Known,
) -> Option<Attempt<'c, 'p>> {
    let chain = config.chain(plan.chain)?;
    let entry = chain.entry(known.slot.entry)?;
    Some(Attempt {
        number: known.number,
        plan,
        slot: known.slot,
        chain,
        entry,
        provider_id: entry.provider,
        provider: config.provider(entry.provider)?,
        translation: known.translation,
    })
}

impl<'c, 'p> Attempt<'c, 'p> {
    /// What resolving it found ([`again`]).
    pub fn known(&self) -> Known {
        Known {
            number: self.number,
            slot: self.slot,
            translation: self.translation,
        }
    }

    /// The model this provider is sent (the chain entry's, else the one the caller asked for).
    pub fn model(&self) -> &'p str
    where
        'c: 'p,
    {
        self.entry.model.as_deref().unwrap_or(self.plan.model)
    }

    /// The attempt log already has entries (skips, or earlier attempts) to append to.
    pub fn log_started(&self) -> bool {
        self.plan.log_started || self.number > 1
    }

    /// The `model` label of the tokens this attempt's answer cost (docs/behaviour.md section
    /// 15): the model sent to the provider when configuration names it (the chain entry's
    /// `model`, or a model the chain or the provider lists by its name), else `other`, so that
    /// callers cannot grow the metric's label set by naming models a pattern lets through.
    pub fn usage_model(&self) -> &'p str
    where
        'c: 'p,
    {
        let model = self.model();
        let named = |patterns: &[ModelPattern]| {
            patterns
                .iter()
                .any(|p| matches!(p, ModelPattern::Exact(m) if m == model))
        };
        if self.entry.model.is_some() || named(&self.chain.models) || named(&self.provider.models) {
            model
        } else {
            OTHER_MODEL
        }
    }

    /// How the provider reports this attempt's usage: in its own dialect (a translated
    /// attempt's), else in the caller's, by the path called.
    pub fn usage_dialect(&self) -> crate::usage::Dialect {
        match self.translation {
            Some(t) => crate::usage::Dialect::of_api(t.provider),
            None => crate::usage::Dialect::of_path(self.plan.path),
        }
    }
}

/// The `model` label of tokens from a model no configuration names (see
/// [`Attempt::usage_model`]).
pub const OTHER_MODEL: &str = "other";

pub mod passage;
mod request;
mod response;
pub mod timers;
pub use request::*;
pub use response::*;

/// An attempt Envoy started by itself (after a refused connection, a reset or a per-try
/// timeout) with less than `min_remaining` of the budget left: it never reaches its provider
/// (docs/behaviour.md section 5). Nothing is attached and no health is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastTotalTime {
    /// The answer instead: the last attempt's failure.
    pub reply: Reply,
    /// This attempt's provider and every later planned one: skips for budget.
    pub skipped: Vec<ProviderId>,
}

/// Whether attempt `a`, starting at `now_ms`, must be refused for the time budget.
/// `last_class` reads the previous attempt's recorded class (`handoff::Outcomes`); it is called
/// only for a refusal.
pub fn past_total_time(
    config: &Config,
    a: &Attempt<'_, '_>,
    now_ms: u64,
    last_class: impl FnOnce() -> Option<Class>,
) -> Option<PastTotalTime> {
    let spent = now_ms.saturating_sub(a.plan.start_ms);
    if a.number <= 1 || config.timeouts.room_for_attempt(spent) {
        return None;
    }
    let previous = a.number - 1;
    let last_provider = a
        .plan
        .slot(previous)
        .and_then(|s| a.chain.entry(s.entry))
        .and_then(|e| config.provider(e.provider))
        .map_or("", |p| p.name.as_str());
    let skipped = a
        .plan
        .slots()
        .skip(previous)
        .filter_map(|s| a.chain.entry(s.entry))
        .map(|e| e.provider)
        .collect();
    let reply = Reply::total_time_spent(
        last_provider,
        last_class().unwrap_or(Class::Timeout),
        config.timeouts.total_time_ms,
    );
    Some(PastTotalTime { reply, skipped })
}

/// When the upstream role must act on an attempt by itself (behaviour.md 5): Envoy's own timers are
/// set once per request, these depend on the attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deadlines {
    /// A streamed attempt with no output by then falls over as a `timeout`.
    pub first_token_at: Option<u64>,
    /// The budget ends before Envoy would stop waiting for this attempt's answer: the caller
    /// gets the budget's answer then.
    pub total_time_at: Option<u64>,
}

/// The deadlines of attempt `a`, started at `start_ms`.
pub fn deadlines(config: &Config, a: &Attempt<'_, '_>, start_ms: u64) -> Deadlines {
    let t = &config.timeouts;
    let stream = a.plan.stream;
    let total_time_end = a.plan.start_ms.saturating_add(t.total_time_ms);
    let envoy_gives_up = start_ms.saturating_add(t.headers_wait_ms(stream));
    Deadlines {
        first_token_at: t.first_token(stream).map(|ms| start_ms.saturating_add(ms)),
        total_time_at: (t.total_time_ms > 0 && total_time_end < envoy_gives_up)
            .then_some(total_time_end),
    }
}

/// Attempt `a` is still waiting for its answer when the budget ends: the caller gets the
/// budget's answer naming this provider's timeout, and the later planned providers are skips
/// for budget.
pub fn total_time_ended(config: &Config, a: &Attempt<'_, '_>) -> PastTotalTime {
    let skipped = a
        .plan
        .slots()
        .skip(a.number)
        .filter_map(|s| a.chain.entry(s.entry))
        .map(|e| e.provider)
        .collect();
    PastTotalTime {
        reply: Reply::total_time_spent(
            &a.provider.name,
            Class::Timeout,
            config.timeouts.total_time_ms,
        ),
        skipped,
    }
}

impl PastTotalTime {
    /// Appends the budget skips to the access log's attempt record.
    pub fn write_log(&self, config: &Config, log: &mut String) {
        for &skipped in &self.skipped {
            if let Some(p) = config.provider(skipped) {
                attempt_log::push_skip(log, &p.name, SkipReason::TotalTime.as_str());
            }
        }
    }
}

/// Everything an attempt's outcome leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement<'a> {
    pub provider: ProviderId,
    pub class: Class,
    /// The class falls over in this chain and the time budget allows another attempt.
    pub falls_over: bool,
    pub marker: Marker,
    /// `llm_failover_fallbacks_total{from, to}` to count, when the request moves on.
    pub fallback: Option<(ProviderId, ProviderId)>,
    /// The health report to make (for this model), or `None` when it would change nothing
    /// (a success from a provider with nothing recorded: the hot path writes nothing).
    pub report: Option<(&'a str, Report)>,
    /// Planned providers that will not be tried because the budget is spent (`budget` skips).
    pub time_skips: Vec<ProviderId>,
    pub duration_ms: u64,
    /// The walk moved to an alternative list (behaviour.md 3), or takes this provider again (in-place
    /// retry, behaviour.md 5): publish it before the router retries ([`rerouted_slots`],
    /// [`rerouted_plan`]).
    pub reroute: Option<Vec<Slot>>,
    /// An in-place retry: how long the next attempt waits before it is sent
    /// (`wire::RETRY_AT_PROPERTY` holds when it may go).
    pub retry_in_place_after_ms: Option<u64>,
}

/// Settles attempt `a` given its outcome, the time now and when the attempt started. `health`
/// admits an alternative list's entry as planning admits the chain's (its budget, then its
/// health: read only when the walk moves to a list; `plan::reroute`).
pub fn settle<'a>(
    config: &Config,
    a: &Attempt<'a, 'a>,
    outcome: Outcome,
    now_ms: u64,
    attempt_start_ms: u64,
    health: &dyn Gatekeeper,
) -> Settlement<'a> {
    let Outcome {
        class,
        status,
        retry_after_ms,
        first_try,
    } = outcome;
    let mut falls_over = a.chain.fallback_on.falls_over(class, status);
    let mut time_skips = Vec::new();
    let room = config
        .timeouts
        .room_for_attempt(now_ms.saturating_sub(a.plan.start_ms));
    // A class with an alternative list continues the walk there (behaviour.md 3).
    let reroute = if falls_over && room && a.chain.has_lists() {
        let (context_window, content_policy) = a.plan.lists();
        let walk = Walk {
            slots: a.plan.slot_list(),
            limit: a.plan.limit(),
            context_window: &context_window,
            content_policy: &content_policy,
            model: a.plan.model,
        };
        plan::reroute(config, a.chain, &walk, a.number, class, health)
    } else {
        None
    };
    // Otherwise the same provider once more, after a short wait (behaviour.md 5).
    let in_place = match &reroute {
        None if falls_over && room => retry_in_place(config, a, class, retry_after_ms),
        _ => None,
    };
    let reroute = match in_place {
        Some(_) => Some(in_place_walk(a)),
        None => reroute,
    };
    // Providers of the attempts after this one, along the (possibly rerouted) walk.
    let walk = reroute.as_deref().unwrap_or(a.plan.slot_list());
    let later = || {
        walk.get(a.number..)
            .unwrap_or_default()
            .iter()
            .filter_map(|s| a.chain.entry(s.entry))
            .map(|e| e.provider)
    };
    if falls_over && !room {
        falls_over = false;
        if status.is_some() {
            // Without the marker no later slot is tried: each is skipped for budget.
            time_skips = later().collect();
        }
    }
    // A hedged request's failing answer is marked for a retry even with no attempt left, so
    // Envoy drops it while the other attempt runs (behaviour.md 5, hedging); alone, the
    // downstream role reads it as the chain's end all the same.
    let next = (a.number < a.plan.limit() && later().next().is_some()) || a.hedged();
    let marker = match (status, falls_over) {
        (None, _) => Marker::Untouched,
        (Some(_), true) if next => Marker::Set,
        (Some(_), true) => Marker::Exhausted,
        (Some(_), false) => Marker::Remove,
    };
    // Without response headers Envoy retries by itself (connect-failure, reset, per-try
    // timeout: see docs/features.md, "Known limits"), so count what happens, not what the chain says.
    // (When the budget is spent Envoy's own retry is refused as it starts: [`past_total_time`].)
    let moves_on = falls_over || (status.is_none() && class != Class::ClientDisconnect && room);
    // A retry in place is no fallback: the request stays with this provider.
    let fallback = if moves_on && plan::is_fallback(walk, a.number + 1) {
        later().next().map(|next| (a.provider_id, next))
    } else {
        None
    };
    let unchanged = class == Class::Ok && a.slot.pristine && !a.slot.probe;
    // A request counts once toward the breaker however often it was tried in place (behaviour.md 16):
    // a try retried next waits for its retry, which counts for both.
    let in_place_report = match (in_place, first_try) {
        (Some(_), _) => InPlace::Retried,
        (None, Some(first)) if is_retry_in_place(a) => InPlace::After(first),
        _ => InPlace::No,
    };
    let report = (!unchanged).then(|| {
        (
            a.model(),
            Report {
                class,
                falls_over,
                retry_after_ms,
                in_place: in_place_report,
            },
        )
    });
    Settlement {
        provider: a.provider_id,
        class,
        falls_over,
        marker,
        fallback,
        report,
        time_skips,
        duration_ms: now_ms.saturating_sub(attempt_start_ms),
        reroute,
        retry_in_place_after_ms: in_place,
    }
}

/// Whether attempt `a`, failed with `class`, is retried on the same provider, and after how
/// long (behaviour.md 5): only where its chain asks, once per provider, within the attempt limit; for
/// connection errors, server errors and overload after the chain's back-off; for a 429 only
/// when its `Retry-After` asks for no more than the chain allows, after that wait. Timeouts,
/// setup faults and classes read from the body move on at once.
pub fn retry_in_place(
    config: &Config,
    a: &Attempt<'_, '_>,
    class: Class,
    retry_after_ms: Option<u64>,
) -> Option<u64> {
    let policy = a.chain.retry_in_place?;
    if config.routing != crate::config::Routing::Slots
        || is_retry_in_place(a)
        || a.number >= a.plan.limit()
    {
        return None;
    }
    let wait = match class {
        Class::ConnectionError | Class::ServerError | Class::Overloaded => Some(policy.back_off_ms),
        Class::RateLimited => retry_after_ms.filter(|&ms| ms <= policy.max_retry_after_ms),
        _ => None,
    };
    // Envoy's per-try timer runs while the retry waits: a wait that leaves the retry less than
    // half its time for an answer is not worth taking (move on instead).
    let answer_wait = config.timeouts.headers_wait_ms(a.plan.stream);
    wait.filter(|&ms| ms.saturating_mul(2) < answer_wait)
}

/// Attempt `a` is itself a retry in place: the attempt before it went to the same entry.
pub fn is_retry_in_place(a: &Attempt<'_, '_>) -> bool {
    a.number > 1 && !plan::is_fallback(a.plan.slot_list(), a.number)
}

/// The walk with attempt `a`'s slot inserted again right after it, within the attempt limit
/// (a later provider may drop off the end: the retry counts toward `max_attempts`).
fn in_place_walk(a: &Attempt<'_, '_>) -> Vec<Slot> {
    let slots = a.plan.slot_list();
    let mut walk = Vec::with_capacity(slots.len() + 1);
    walk.extend(slots.iter().take(a.number).copied());
    walk.push(Slot {
        entry: a.slot.entry,
        // It failed just now: its success must be reported (and it probes nothing).
        pristine: false,
        probe: false,
    });
    walk.extend(slots.iter().skip(a.number).copied());
    walk.truncate(a.plan.limit());
    walk
}

/// The slot properties to rewrite for a rerouted walk, from attempt `a` on: the route's matcher
/// reads the next attempts' clusters there. Slots past the new walk are emptied, so no stale
/// cluster is reached.
pub fn rerouted_slots<'c, 'w>(
    config: &'c Config,
    a: &Attempt<'c, '_>,
    walk: &'w [Slot],
) -> impl Iterator<Item = (&'static str, &'c str)> + 'w
where
    'c: 'w,
{
    let (first, end) = (a.number, a.plan.limit());
    let chain = a.chain;
    crate::wire::SLOT_PROPERTIES
        .iter()
        .enumerate()
        .take(end)
        .skip(first)
        .map(move |(k, property)| {
            let cluster = walk
                .get(k)
                .and_then(|s| chain.entry(s.entry))
                .and_then(|e| config.provider(e.provider))
                .map_or("", |p| p.cluster.as_str());
            (*property, cluster)
        })
}

/// The plan record with the rerouted walk, for the next attempts (and the downstream role).
pub fn rerouted_plan(a: &Attempt<'_, '_>, walk: &[Slot]) -> String {
    let (context_window, content_policy) = a.plan.lists();
    let p = a.plan;
    PlanRecord {
        config: p.config,
        chain: p.chain,
        team: p.team,
        start_ms: p.start_ms,
        body_len: p.body_len,
        log_started: p.log_started,
        stream: p.stream,
        caller_api: p.caller_api,
        gather: p.gather,
        ask_usage: p.ask_usage,
        stream_options: p.stream_options,
        slots: walk,
        limit: u8::try_from(p.limit()).unwrap_or(u8::MAX),
        context_window: &context_window,
        content_policy: &content_policy,
        path: p.path,
        authority: p.authority,
        model: p.model,
    }
    .encode()
}

impl Settlement<'_> {
    /// Appends this attempt, then its budget skips, to the access log's attempt record.
    pub fn write_log(&self, config: &Config, log: &mut String) {
        let name = |id: ProviderId| config.provider(id).map_or("", |p| p.name.as_str());
        attempt_log::push_attempt(
            log,
            name(self.provider),
            self.class.as_str(),
            self.duration_ms,
        );
        for &skipped in &self.time_skips {
            attempt_log::push_skip(log, name(skipped), SkipReason::TotalTime.as_str());
        }
    }

    /// The retry marker header to write (`Some(None)`: remove it); `None` to leave the headers
    /// alone (`provider_marker`: the provider's answer carried a header named like it).
    pub fn marker_header(&self, provider_marker: bool) -> Option<Option<&'static str>> {
        match self.marker {
            Marker::Untouched => None,
            Marker::Remove if !provider_marker => None,
            marker => Some(marker.value()),
        }
    }

    /// Whether the downstream role may need this attempt's class back (only failures are
    /// recorded in `handoff::OUTCOMES`: a fallback reason, or an exhausted chain's last class).
    pub fn records_outcome(&self) -> bool {
        self.class != Class::Ok
    }
}

#[cfg(test)]
mod tests;
