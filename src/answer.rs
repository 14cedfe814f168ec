//! The downstream role's response-side decisions (docs/behaviour.md section 5 and 6), as pure functions over
//! facts: the public headers from the attempts made, whether the chain was exhausted (and with
//! `fallbacks_exhausted`, the `503` that replaces the last answer), and the probes to give back.

use crate::classify::Class;
use crate::config::{Chain, Config, ProviderId};
use crate::handoff::Refused;
use crate::plan::Plan;
use crate::reply::Reply;
use crate::translate::Api;
use crate::wire;

/// `x-llm-fallback-reason` of a hedged request its hedge served (its first attempt had not
/// failed: it was slow).
pub const HEDGE_REASON: &str = "hedge";

/// What the downstream role knows about the final answer without extra reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerFacts {
    /// Envoy's `upstream.request_attempt_count` (0 when absent).
    pub attempt_count: u64,
    /// The answer carries the retry marker: its attempt fell over, and no attempt was left.
    pub marker: bool,
    /// The answer's `:status` (0 when unreadable).
    pub status: u16,
    /// When the request was planned (ms): its time budget runs from here.
    pub start_ms: u64,
}

/// What the downstream role reads only when a decision needs it (each is a hostcall).
pub trait AnswerReads {
    /// Envoy's `response.code_details` (`via_upstream` for a provider's own answer).
    fn code_details(&self) -> Option<String>;
    /// The recorded class of failed attempt `attempt` (1-based), see [`crate::handoff::Outcomes`].
    fn outcome(&self, attempt: usize) -> Option<Class>;
    /// The upstream role refused to start the last attempt ([`crate::handoff::REFUSED`]).
    fn refused(&self) -> Option<Refused>;
    /// The time now (ms), read only for an error answer (is the time budget spent?).
    fn now_ms(&self) -> u64;
    /// A hedged request: the attempt whose answer this is ([`crate::handoff::ANSWERED`]),
    /// read only for such a request (the other attempt may have been started last).
    fn answered(&self) -> Option<usize> {
        None
    }
}

/// The caller's view of the request's attempts, to write on the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<'a> {
    /// Provider calls made.
    pub attempts: usize,
    /// The attempt whose answer this is: the last one, except when a hedged request's first
    /// attempt won its race (behaviour.md 5, hedging).
    pub served: usize,
    /// `x-llm-attempts`, when the answer shows it.
    pub attempts_header: Option<usize>,
    /// The provider that answered, or was tried last (`x-llm-provider`); `None` when the attempt
    /// count names no planned slot (the public headers are then left off).
    pub provider: Option<&'a str>,
    /// `x-llm-fallback-count`, present only when at least 1.
    pub fallback_count: Option<usize>,
    /// `x-llm-fallback-reason`.
    pub fallback_reason: Option<&'static str>,
    /// Every planned attempt failed: count `llm_failover_exhausted_total{chain}` (this names
    /// the chain).
    pub exhausted: Option<&'a str>,
    /// With `fallbacks_exhausted`, the answer to send instead of the last provider's.
    pub replace: Option<Reply>,
    /// `x-should-retry` on every error answer (status 400 and up), a provider's passed through
    /// included: whether trying again can help ([`should_retry`]; a provider's own advice is
    /// about one provider, not the chain). `None` on successes: nothing is written.
    pub should_retry: Option<bool>,
}

/// Whether an upstream role may have moved the walk to an alternative list (behaviour.md 3) or
/// retried a provider in place (behaviour.md 5), so the plan must be read back before answering (only
/// after a fallback, only for chains with lists or in-place retry).
pub fn may_have_rerouted(config: &Config, plan: &Plan, attempt_count: u64) -> bool {
    attempt_count > 1
        && config
            .chain(plan.chain)
            .is_some_and(|c| c.has_lists() || c.retry_in_place.is_some())
}

/// Whether an attempt of `plan` may have sent the request on another `:path` than the caller's
/// `path` (a provider's `path_prefix`, envelope, or a translation for a caller of `api`):
/// attempts share the request's headers with Envoy's access log, which would then name the
/// last attempt's path, so the downstream role puts the caller's back once the answer comes.
/// Plain same-API chains answer `false` and pay nothing.
pub fn path_to_restore(config: &Config, plan: &Plan, path: &str, api: Option<Api>) -> bool {
    let Some(chain) = config.chain(plan.chain) else {
        return false;
    };
    chain.entries.iter().any(|e| {
        config.provider(e.provider).is_some_and(|p| {
            p.path_prefix.is_some() || p.envelope.is_some() || p.translates(api, path).is_some()
        })
    })
}

/// The public view of a planned request's final answer.
pub fn answer<'a>(
    config: &'a Config,
    plan: &Plan,
    facts: AnswerFacts,
    reads: &dyn AnswerReads,
) -> Answer<'a> {
    // An attempt the upstream role refused (time budget spent, walk ended, or fail closed)
    // reached no provider: it is not counted, and the answer is the gateway's own. Refusals
    // answer 5xx, so a success pays no extra read.
    let refused = if facts.status >= 500 {
        reads.refused()
    } else {
        None
    };
    // (Counted before capping at the plan: a walk-ended refusal comes past the plan's end.)
    let attempts = usize::try_from(facts.attempt_count)
        .unwrap_or(1)
        .max(1)
        .saturating_sub(usize::from(refused.is_some()))
        .min(plan.slots.len().max(1));
    // A spent budget, or a walk that ended before Envoy's own retries did: exhausted.
    let time_refused = matches!(refused, Some(Refused::TotalTime | Refused::WalkEnded));
    let Some(chain) = config.chain(plan.chain) else {
        return Answer::none(attempts);
    };
    // A hedged request's answer is the race's winner, whichever attempt Envoy started last.
    let served = match plan.hedge_after(chain) {
        Some(_) => (reads.answered())
            .filter(|&n| (1..=attempts).contains(&n))
            .unwrap_or(attempts),
        None => attempts,
    };
    let provider_of = |attempt: usize| {
        plan.slot(attempt)
            .and_then(|slot| chain.entry(slot.entry))
            .and_then(|entry| config.provider(entry.provider))
            .map(|p| p.name.as_str())
    };
    if refused == Some(Refused::FailClosed) {
        // Fail closed (docs/behaviour.md section 7): say how many providers were called and which was last.
        return Answer {
            attempts_header: Some(attempts),
            provider: provider_of(attempts),
            ..Answer::none(attempts)
        };
    }
    let exhausted = time_refused
        || facts.marker
        || (attempts == plan.slots.len() && ended_without_response(chain, facts, attempts, reads));
    let Some(provider) = provider_of(served) else {
        return Answer::none(attempts);
    };
    // Fallbacks are the attempts that moved to another entry, not in-place retries (behaviour.md 5, 6;
    // as `llm_failover_fallbacks_total` counts them); the reason is the failure that made the
    // last of them (a hedge that won: `hedge`, its first attempt was still running).
    let (fallbacks, last_fallback) = crate::plan::fallbacks(&plan.slots, served);
    let (fallback_count, fallback_reason) = if fallbacks > 0 {
        let reason = reads.outcome(last_fallback - 1).map(Class::as_str);
        (
            Some(fallbacks),
            reason.or_else(|| plan.hedge_after(chain).map(|_| HEDGE_REASON)),
        )
    } else if let Some(reason) = plan.skip_before_start(chain) {
        (None, Some(reason))
    } else {
        (None, None)
    };
    let replace = (exhausted && chain.fallbacks_exhausted)
        .then(|| Reply::fallbacks_exhausted(&chain.name, attempts));
    let status = replace.as_ref().map_or(facts.status, |r| r.status);
    let should_retry = should_retry(config, status, time_refused, facts.start_ms, reads);
    Answer {
        attempts,
        served,
        attempts_header: Some(attempts),
        provider: Some(provider),
        fallback_count,
        fallback_reason,
        exhausted: exhausted.then_some(chain.name.as_str()),
        replace,
        should_retry,
    }
}

/// The model the answer's attempt (the `attempts`-th, as [`Answer::attempts`] counts) was
/// sent when its entry names one (`None`: the request's own), for the access log's
/// `gen_ai.response.model`.
pub fn entry_model<'a>(config: &'a Config, plan: &Plan, attempts: usize) -> Option<&'a str> {
    let chain = config.chain(plan.chain)?;
    chain.entry(plan.slot(attempts)?.entry)?.model.as_deref()
}

/// `x-should-retry` for an answer with `status` (behaviour.md 6): `None` below 400 (nothing to
/// write); `false` when the request's time budget is spent (the gateway already used the time
/// a retry would need; `time_refused`, or no room for another attempt now), else whether the
/// status is retriable (`Reply::status_is_retriable`: 5xx, 408, 429).
pub fn should_retry(
    config: &Config,
    status: u16,
    time_refused: bool,
    start_ms: u64,
    reads: &dyn AnswerReads,
) -> Option<bool> {
    if status < 400 {
        return None;
    }
    if !Reply::status_is_retriable(status) {
        return Some(false);
    }
    let spent = time_refused
        || !config
            .timeouts
            .room_for_attempt(reads.now_ms().saturating_sub(start_ms));
    Some(!spent)
}

impl Answer<'_> {
    fn none(attempts: usize) -> Self {
        Answer {
            attempts,
            served: attempts,
            attempts_header: None,
            provider: None,
            fallback_count: None,
            fallback_reason: None,
            exhausted: None,
            replace: None,
            should_retry: None,
        }
    }
}

/// True when the answer is Envoy's own after the last planned attempt got no response
/// (refused, reset, timed out) and that class falls over in `chain`: such attempts leave no
/// marker header, yet the chain is exhausted just the same. Reads only for 5xx answers, so the
/// healthy path pays nothing.
fn ended_without_response(
    chain: &Chain,
    facts: AnswerFacts,
    attempts: usize,
    reads: &dyn AnswerReads,
) -> bool {
    if facts.status < 500 {
        return false;
    }
    let details = reads.code_details().unwrap_or_default();
    if details.is_empty() || details == "via_upstream" {
        return false;
    }
    // The last attempt's own record when its upstream filter has settled it already, else what
    // Envoy says happened.
    let class = reads
        .outcome(attempts)
        .unwrap_or(if details.contains("timeout") {
            Class::Timeout
        } else {
            Class::ConnectionError
        });
    chain.fallback_on.falls_over(class, None)
}

/// Providers whose half-open probe this request claimed but never used (it made `attempts`
/// calls): give each probe back so the next request can probe.
pub fn unused_probes<'a>(
    config: &'a Config,
    plan: &'a Plan,
    attempts: usize,
) -> impl Iterator<Item = ProviderId> + 'a {
    let chain = config.chain(plan.chain);
    plan.slots
        .iter()
        .enumerate()
        .filter(move |(i, slot)| slot.probe && *i >= attempts)
        .filter_map(move |(_, slot)| Some(chain?.entry(slot.entry)?.provider))
}

/// The gateway's response headers a browser may read (behaviour.md 6, 16).
pub const EXPOSED: [&str; 4] = [
    wire::PROVIDER_HEADER,
    wire::ATTEMPTS_HEADER,
    wire::FALLBACK_COUNT_HEADER,
    wire::FALLBACK_REASON_HEADER,
];

/// `access-control-expose-headers` for the answer to a request that carried `Origin`: the
/// value already there (a provider's, or a filter's that ran before this one on the response)
/// with the gateway's headers ([`EXPOSED`]) it lacks added; `None` when it lists them all.
pub fn expose_headers(existing: Option<&[u8]>) -> Option<String> {
    let existing = existing
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let listed = |name: &str| {
        existing.is_some_and(|v| v.split(',').any(|n| n.trim().eq_ignore_ascii_case(name)))
    };
    let existing = existing.unwrap_or_default();
    let mut value = String::from(existing);
    for name in EXPOSED.into_iter().filter(|n| !listed(n)) {
        if !value.is_empty() {
            value.push_str(", ");
        }
        value.push_str(name);
    }
    (value.len() > existing.len()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_path_is_restored_only_where_an_attempt_may_have_changed_it() {
        let config = |providers: &str| {
            Config::from_json(
                format!(r#"{{"providers":[{providers}],"chains":[{{"name":"c","providers":["a","b"]}}]}}"#)
                    .as_bytes(),
                &|_| None,
            )
            .expect("valid")
        };
        let plan = Plan {
            chain: crate::ids::ChainId::new(0).expect("id"),
            slots: Vec::new(),
            skipped: Vec::new(),
            context_window: Vec::new(),
            content_policy: Vec::new(),
            team: Default::default(),
        };
        let chat = "/v1/chat/completions";
        let openai = Some(Api::OpenAiChat);
        // Same API, same path: nothing to do on the hot path.
        let plain = config(r#"{"name":"a"},{"name":"b","api":"openai"}"#);
        assert!(!path_to_restore(&plain, &plan, chat, openai));
        for other in [
            r#"{"name":"b","api":"anthropic"}"#,
            r#"{"name":"b","path_prefix":"/x"}"#,
            r#"{"name":"b","api":"gemini"}"#,
        ] {
            let c = config(&format!(r#"{{"name":"a"}},{other}"#));
            assert!(path_to_restore(&c, &plan, chat, openai), "{other}");
        }
    }

    #[test]
    fn the_gateways_headers_join_what_is_exposed_already() {
        let all = "x-llm-provider, x-llm-attempts, x-llm-fallback-count, x-llm-fallback-reason";
        assert_eq!(expose_headers(None).as_deref(), Some(all));
        assert_eq!(expose_headers(Some(b"  ")).as_deref(), Some(all));
        assert_eq!(
            expose_headers(Some(b"x-request-id")).as_deref(),
            Some(format!("x-request-id, {all}").as_str())
        );
        // Listed already (any case, any spacing): only the others are added, or nothing.
        assert_eq!(
            expose_headers(Some(b"X-LLM-Provider,x-request-id")).as_deref(),
            Some(
                "X-LLM-Provider,x-request-id, x-llm-attempts, x-llm-fallback-count, x-llm-fallback-reason"
            )
        );
        assert_eq!(expose_headers(Some(all.as_bytes())), None);
        // A value that is not text is replaced.
        assert_eq!(expose_headers(Some(b"\xff")).as_deref(), Some(all));
    }
}
