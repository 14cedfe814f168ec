//! The walk a request would take, in words (`llm-failover explain`): which chain serves it and
//! why, the providers in order with what each attempt changes, and what is left out and why.
//! It runs the filter's own planner ([`plan::plan_or_refuse`]) with every breaker closed, so it
//! says what a healthy gateway does; at run time open breakers and dead marks are skipped too.

use crate::classify::Class;
use crate::config::{
    Chain, ChainEntry, Config, GroupPolicy, ModelPattern, Provider, ProviderId, RetryInPlace,
};
use crate::duration::display_ms;
use crate::envelope::Envelope;
use crate::health::Admission;
use crate::plan::{self, Gatekeeper, Plan, Refusal, RequestFacts, SkipReason};
use crate::translate::Api;
use std::fmt::Write;

/// Every provider healthy: explain describes configuration, not live health.
struct AllHealthy;

impl Gatekeeper for AllHealthy {
    fn gate(&self, _provider: ProviderId, _model: &str) -> Admission {
        Admission::Available {
            pristine: true,
            probe: false,
        }
    }
}

/// What one attempt changes in the request on its way to its provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptChanges<'a> {
    /// The body's `model` when the chain entry rewrites it (`None`: sent as asked).
    pub model: Option<&'a str>,
    /// The `:path` the provider sees ([`crate::attempt::provider_path`], as the upstream role
    /// sends it).
    pub path: String,
    /// The `:path` of a streamed request, when it differs (Bedrock's and Vertex's).
    pub stream_path: Option<String>,
    /// The `:authority` the provider sees, when the provider sets one.
    pub authority: Option<&'a str>,
    /// Header names set for this provider (its credential first); values are not shown.
    pub headers: Vec<&'a str>,
    /// Header names removed because they belong to another provider or to the caller.
    pub removed: Vec<&'a str>,
    /// The API the request is translated to (behaviour.md 13), when the provider speaks another.
    pub translated_to: Option<Api>,
}

/// The changes an attempt to `entry` makes to a request for `model` on `path`, from a caller
/// speaking `api`.
pub fn attempt_changes<'a>(
    config: &'a Config,
    entry: &'a ChainEntry,
    model: &str,
    path: &str,
    api: Option<Api>,
) -> AttemptChanges<'a> {
    let provider = config.provider(entry.provider);
    let translated_to = provider.and_then(|p| p.translates(api, path));
    let sent = entry.model.as_deref().unwrap_or(model);
    let sent_on = |stream| {
        provider
            .and_then(|p| crate::attempt::provider_path(p, translated_to, path, sent, stream))
            .map_or_else(|| path.to_string(), std::borrow::Cow::into_owned)
    };
    let (path, stream_path) = (sent_on(false), sent_on(true));
    let headers: Vec<&str> = provider
        .into_iter()
        .flat_map(|p| &p.set_headers)
        .map(|(n, _)| n.as_str())
        .collect();
    AttemptChanges {
        model: entry.model.as_deref().filter(|m| *m != model),
        stream_path: Some(stream_path).filter(|s| *s != path),
        path,
        authority: provider.and_then(|p| p.authority.as_deref()),
        removed: config
            .cleared_headers
            .iter()
            .map(String::as_str)
            .filter(|h| !headers.contains(h))
            .collect(),
        headers,
        translated_to,
    }
}

fn patterns(list: &[ModelPattern]) -> String {
    let names: Vec<String> = list
        .iter()
        .map(|p| match p {
            ModelPattern::Any => "*".to_string(),
            ModelPattern::Prefix(p) => format!("{p}*"),
            ModelPattern::Exact(e) => e.clone(),
        })
        .collect();
    names.join(", ")
}

/// What a cloud's envelope does to an attempt, in words.
fn envelope_words(envelope: Envelope, provider: &Provider) -> &'static str {
    let deployments = provider
        .path_prefix
        .as_deref()
        .is_some_and(|p| p.contains('?'));
    match envelope {
        Envelope::AzureOpenAi if deployments => {
            "azure_openai, deployments API (the deployment in the path, api-version in the query)"
        }
        Envelope::AzureOpenAi => "azure_openai, v1 API (the body's model names the deployment)",
        Envelope::Bedrock => {
            "bedrock, InvokeModel (the model id in the path; the body without model and stream, with anthropic_version bedrock-2023-05-31; a stream comes back as an AWS event stream, unwrapped)"
        }
        Envelope::BedrockConverse => {
            "bedrock_converse, Converse (the model id in the path, /model/{id}/converse; the body in Converse's terms, translated from the caller's; a stream is /converse-stream, an AWS event stream, unwrapped)"
        }
        Envelope::Vertex => {
            "vertex, rawPredict (the model in the path; the body without model, with anthropic_version vertex-2023-10-16)"
        }
        Envelope::Gemini => "gemini, its OpenAI-compatible endpoint",
        Envelope::GeminiNative => {
            "gemini_native, generateContent (the model in the path; a stream is :streamGenerateContent?alt=sse)"
        }
    }
}

/// The walk for `facts`, as text; `Err` holds the same text when the gateway would refuse the
/// request (it then names the status and code the caller gets).
pub fn explain(config: &Config, facts: &RequestFacts) -> Result<String, String> {
    explain_with(config, facts, &|_| None)
}

/// [`explain`], with a line about how each provider's attempts are signed or get their
/// credential beyond the filter's own headers (`sending`: what Envoy does after the filter,
/// which the renderer knows: AWS Signature V4, a credential injected from a file).
pub fn explain_with(
    config: &Config,
    facts: &RequestFacts,
    sending: &dyn Fn(ProviderId) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::new();
    let path = facts.path.unwrap_or("/v1/chat/completions");
    let _ = writeln!(
        out,
        "request: model {:?}, path {path}, caller {}{}",
        facts.model,
        facts
            .caller
            .map_or("(none)".to_string(), |c| format!("{c:?}")),
        if facts.no_fallback {
            ", fallback off"
        } else {
            ""
        }
    );
    let facts = RequestFacts {
        path: Some(path),
        ..*facts
    };
    let plan = match plan::plan_or_refuse(config, &facts, &AllHealthy) {
        Ok(plan) => plan,
        Err(refusal) => {
            refused_lines(&mut out, config, &facts, &refusal);
            return Err(out);
        }
    };
    let Some(chain) = config.chain(plan.chain) else {
        return Err(out);
    };
    chain_line(&mut out, chain, &plan);
    let walk = walk_line(&mut out, config, chain, &plan);
    group_lines(&mut out, config, chain);
    for (k, slot) in plan.slots.iter().enumerate() {
        let Some(entry) = chain.entry(slot.entry) else {
            continue;
        };
        let Some(provider) = config.provider(entry.provider) else {
            continue;
        };
        attempt_lines(&mut out, config, &facts, k + 1, entry, provider, sending);
        if let Some(after) = plan.hedge_after(chain).filter(|_| k == 0) {
            // Where a hedge starts (behaviour.md 5, hedging).
            let _ = writeln!(
                out,
                "  hedge: when {} has produced no output {} after it started, attempt 2 starts beside it without cancelling it; the first to produce output answers, the other is cancelled",
                provider.name,
                display_ms(after),
            );
        }
        // Its in-place retry (behaviour.md 5) is an attempt slot of its own, when one can be left: it
        // comes right after this attempt and pushes the later providers back by one.
        if let Some(policy) = walk.in_place.filter(|_| k + 1 < walk.limit) {
            let _ = writeln!(
                out,
                "  {}'. {} again (retry in place): once, when it fails with connection_error, server_error or overloaded, after {}, or rate_limited with a Retry-After of at most {}{}",
                k + 1,
                provider.name,
                display_ms(policy.back_off_ms),
                display_ms(policy.max_retry_after_ms),
                if k + 1 < walk.planned {
                    "; the providers after it then move back one"
                } else {
                    ""
                }
            );
        }
    }
    left_out_lines(&mut out, config, &facts, chain, &plan);
    let _ = writeln!(
        out,
        "health: every breaker assumed closed; at run time an open breaker or a dead mark {}",
        if chain.try_last {
            "moves that provider to the end (try_last)"
        } else {
            "skips that provider without spending an attempt"
        }
    );
    budget_lines(&mut out, config, chain, &plan);
    caller_budget_line(&mut out, config, facts.caller);
    Ok(out)
}

/// The caller's own budget, when the file gives the caller one (docs/behaviour.md section 15).
fn caller_budget_line(out: &mut String, config: &Config, caller: Option<&str>) {
    let Some(c) = config.caller(config.team(caller)) else {
        return;
    };
    if let Some(b) = c.budget {
        let _ = writeln!(
            out,
            "caller budget: {} {} tokens per {}, whichever provider answers; at run time a caller whose budget is spent gets 429 budget_exhausted without an attempt until its window rolls over",
            c.name,
            b.tokens,
            display_ms(b.window_ms)
        );
    }
}

/// Budgets are read at run time too: which providers of this walk have one.
fn budget_lines(out: &mut String, config: &Config, chain: &Chain, plan: &Plan) {
    let budgets: Vec<String> = (plan.slots.iter())
        .filter_map(|s| config.provider(chain.entry(s.entry)?.provider))
        .filter_map(|p| {
            let b = p.budget?;
            Some(format!(
                "{} {} tokens per {}",
                p.name,
                b.tokens,
                display_ms(b.window_ms)
            ))
        })
        .collect();
    if !budgets.is_empty() {
        let scope = match &config.fleet {
            Some(f) => format!(
                "fleet-wide: every replica's answers count, synced through the rate-limit service (cluster {}) every {}",
                f.cluster,
                display_ms(f.sync_ms)
            ),
            None => "per Envoy".to_string(),
        };
        let _ = writeln!(
            out,
            "budgets: {} ({scope}); at run time a provider whose budget is spent is skipped (budget_exhausted) until its window rolls over",
            budgets.join(", ")
        );
    }
    if config.dead_marks.rate_limited_ahead_ms > 0 {
        let _ = writeln!(
            out,
            "rate limits: at run time a provider whose last answer announced none left (x-ratelimit-*, anthropic-ratelimit-*) is skipped (rate_limited_ahead) until its reset, at most {}",
            display_ms(config.dead_marks.rate_limited_ahead_ms)
        );
    }
}

/// Why the request is refused: the chain that matched (and the entries it skipped), the reply.
fn refused_lines(out: &mut String, config: &Config, facts: &RequestFacts, refusal: &Refusal) {
    if let Some(chain) = refusal.chain.and_then(|c| config.chain(c)) {
        let _ = writeln!(out, "chain: {}", chain.name);
        for (entry, reason) in &refusal.skipped {
            if let Some(entry) = chain.entry(*entry) {
                skip_line(out, config, facts, entry, *reason, None);
            }
        }
    }
    let r = &refusal.reply;
    let _ = writeln!(
        out,
        "refused: {} {} (x-should-retry: {})\n  {}",
        r.status, r.code, r.should_retry, r.message
    );
}

/// The chain that serves the request, and what it matches on.
fn chain_line(out: &mut String, chain: &Chain, plan: &Plan) {
    let mut why = vec![format!("models {}", patterns(&chain.models))];
    if !chain.paths.is_empty() {
        why.push(format!("paths {}", patterns(&chain.paths)));
    }
    if !chain.routes.is_empty() {
        why.push(format!("routes {}", chain.routes.join(", ")));
    }
    if !chain.callers.is_empty() {
        why.push(format!(
            "callers {} (a caller's own chain wins over generic ones)",
            chain.callers.join(", ")
        ));
    }
    let _ = writeln!(
        out,
        "chain: {} (chains[{}]: {})",
        chain.name,
        plan.chain,
        why.join("; ")
    );
}

/// How many attempts the walk may make, with what room besides the planned ones.
struct Walk {
    limit: usize,
    /// The planned providers.
    planned: usize,
    /// The chain's in-place retry, when the routing makes one.
    in_place: Option<RetryInPlace>,
}

/// The walk's size and what it falls over on.
fn walk_line(out: &mut String, config: &Config, chain: &Chain, plan: &Plan) -> Walk {
    let falls: Vec<&str> = Class::ALL
        .into_iter()
        .filter(|c| chain.fallback_on.has_class(*c))
        .map(Class::as_str)
        .collect();
    // Every attempt Envoy may make, in-place retries and alternative lists included.
    let limit = plan.attempt_limit(chain);
    let in_place = chain
        .retry_in_place
        .filter(|_| config.routing == crate::config::Routing::Slots);
    let planned = plan.slots.len();
    let mut room = Vec::new();
    if in_place.is_some() && limit > 1 {
        room.push(format!(
            "each provider may be retried once in place while attempts are left, within max_attempts {}",
            chain.max_attempts
        ));
    }
    if limit > planned && (!plan.context_window.is_empty() || !plan.content_policy.is_empty()) {
        room.push("the walk may move to an alternative list".to_string());
    }
    let room = if room.is_empty() {
        String::new()
    } else {
        format!(" ({})", room.join("; "))
    };
    let _ = writeln!(
        out,
        "walk: up to {limit} attempt{}{room}; falls over on {}{}",
        if limit == 1 { "" } else { "s" },
        if falls.is_empty() {
            "nothing".to_string()
        } else {
            falls.join(", ")
        },
        if chain.fallbacks_exhausted {
            "; when every attempt fails: 503 fallbacks_exhausted"
        } else {
            "; when every attempt fails: the last provider's answer"
        }
    );
    Walk {
        limit,
        planned,
        in_place,
    }
}

/// Each group of the chain: its members' shares and how a request walks it (the attempts
/// below show one such pick).
fn group_lines(out: &mut String, config: &Config, chain: &Chain) {
    for g in &chain.groups {
        let members: Vec<String> = (chain.entries.get(g.members()).unwrap_or_default())
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let name = config.provider(e.provider).map_or("", |p| p.name.as_str());
                match g.policy {
                    GroupPolicy::Weighted => {
                        format!("{name} {}%", crate::config::percent(g.share_tenths(i)))
                    }
                    GroupPolicy::LeastBusy => name.to_string(),
                }
            })
            .collect();
        let how = match g.policy {
            GroupPolicy::Weighted => "picked at random by weight",
            GroupPolicy::LeastBusy => "the one with the fewest requests in flight across workers",
        };
        let _ = writeln!(
            out,
            "group at providers[{}] ({}): {}; each request starts with one member, {how}, among those that may take it (open, dead, spent, rate-limited ahead or unfit ones left out), then the others, each once, before the chain goes on (below: one such pick)",
            chain.written_position(g.first),
            g.policy.as_str(),
            members.join(", ")
        );
    }
}

/// One attempt: its provider, what it rewrites and sends, how it is signed.
fn attempt_lines(
    out: &mut String,
    config: &Config,
    facts: &RequestFacts,
    number: usize,
    entry: &ChainEntry,
    provider: &Provider,
    sending: &dyn Fn(ProviderId) -> Option<String>,
) {
    let path = facts.path.unwrap_or_default();
    let changes = attempt_changes(config, entry, facts.model, path, facts.api);
    let _ = writeln!(
        out,
        "  {}. {} (cluster {})",
        number, provider.name, provider.cluster
    );
    let _ = writeln!(
        out,
        "       model: {}",
        changes
            .model
            .map_or(format!("{:?} as asked", facts.model), |m| format!(
                "{:?} (rewritten from {:?})",
                m, facts.model
            ))
    );
    let _ = writeln!(
        out,
        "       path: {}{}{}",
        changes.path,
        changes
            .stream_path
            .as_ref()
            .map_or(String::new(), |s| format!(" (streamed: {s})")),
        changes
            .authority
            .map_or(String::new(), |a| format!(", authority: {a}"))
    );
    match (changes.translated_to, provider.api) {
        (Some(to), _) => {
            let from = facts.api.map_or("another API", Api::as_str);
            let _ = writeln!(
                out,
                "       api: {} (translated from {from}, answers back to {from})",
                to.as_str()
            );
        }
        (None, Some(api)) => {
            let _ = writeln!(out, "       api: {}", api.as_str());
        }
        (None, None) => {}
    }
    if let Some(envelope) = provider.envelope {
        let _ = writeln!(
            out,
            "       envelope: {}",
            envelope_words(envelope, provider)
        );
    }
    let settings = entry.settings;
    if !settings.is_empty() {
        let mut sent = Vec::with_capacity(2);
        if let Some(effort) = settings.effort {
            sent.push(format!("effort {}", effort.as_str()));
        }
        if let Some(max) = settings.max_tokens {
            sent.push(format!("max_tokens {max}"));
        }
        let _ = writeln!(
            out,
            "       sent with: {} (in the provider's dialect)",
            sent.join(", ")
        );
    }
    if !changes.headers.is_empty() {
        let _ = writeln!(out, "       sets: {}", changes.headers.join(", "));
    }
    if let Some(line) = sending(entry.provider) {
        let _ = writeln!(out, "       {line}");
    }
    if !changes.removed.is_empty() {
        let _ = writeln!(out, "       removes: {}", changes.removed.join(", "));
    }
}

/// The chain's entries the walk leaves out, and why.
fn left_out_lines(
    out: &mut String,
    config: &Config,
    facts: &RequestFacts,
    chain: &Chain,
    plan: &Plan,
) {
    // Every breaker closed: the first slot is the request's first entry.
    let first = (plan.slots.first())
        .and_then(|s| chain.entry(s.entry))
        .and_then(|e| config.provider(e.provider));
    let mut left_out = false;
    for (index, entry) in chain.entry_ids() {
        if plan.slots.iter().any(|s| s.entry == index) {
            continue;
        }
        if !left_out {
            let _ = writeln!(out, "left out:");
            left_out = true;
        }
        match plan.skipped.iter().find(|(e, _)| *e == index) {
            Some((_, reason)) => skip_line(out, config, facts, entry, *reason, first),
            None => {
                let _ = writeln!(
                    out,
                    "  {}: not reached ({})",
                    config
                        .provider(entry.provider)
                        .map_or("", |p| p.name.as_str()),
                    if facts.no_fallback {
                        "fallback is off for this request".to_string()
                    } else if facts.model.is_empty() {
                        "a request without a model goes to one provider".to_string()
                    } else {
                        format!("max_attempts {}", chain.max_attempts)
                    }
                );
            }
        }
    }
}

fn skip_line(
    out: &mut String,
    config: &Config,
    facts: &RequestFacts,
    entry: &ChainEntry,
    reason: SkipReason,
    first: Option<&Provider>,
) {
    let Some(provider) = config.provider(entry.provider) else {
        return;
    };
    let why = match reason {
        // The planner's one reason, told apart here: the model, or the caller.
        SkipReason::Model => {
            let sent = entry.model.as_deref().unwrap_or(facts.model);
            if !crate::config::any_matches(&provider.models, sent) {
                format!(
                    "does not serve {sent} (models {})",
                    patterns(&provider.models)
                )
            } else {
                format!(
                    "{} may not use it (callers {})",
                    facts.caller.map_or_else(
                        || "a request without a caller".to_string(),
                        |c| format!("caller {c}")
                    ),
                    provider.callers.join(", ")
                )
            }
        }
        SkipReason::CapabilityVision => {
            "capability_vision (the request has images; this entry's model has vision: false)"
                .to_string()
        }
        SkipReason::CapabilityTools => {
            "capability_tools (the request has tools; this entry's model has tools: false)"
                .to_string()
        }
        SkipReason::CapabilityContext => format!(
            "capability_context (the prompt, about {} tokens, is above 95% of context_window {})",
            facts.content.prompt_tokens(),
            entry.capabilities.context_window.unwrap_or_default()
        ),
        // Planning's order: state one provider keeps, then what the entry's API cannot carry.
        SkipReason::ContentIncompatible if facts.content.provider_state => format!(
            "content_incompatible (the request names state one provider keeps: previous_response_id, conversation, a stored file or cache; it goes to the request's first entry's provider{} only)",
            first.map_or(String::new(), |f| format!(", {},", f.name))
        ),
        SkipReason::ContentIncompatible => format!(
            "content_incompatible ({} cannot carry this request: no translation for this endpoint or a field it cannot express)",
            provider.api.map_or("its API", Api::as_str),
        ),
        SkipReason::Residency => format!(
            "residency ({}; the request's first entry is in {}; same_residency)",
            provider.residency.map_or("unknown", |r| r.as_str()),
            first
                .and_then(|f| f.residency)
                .map_or("unknown", |r| r.as_str())
        ),
        other => other.as_str().to_string(),
    };
    let _ = writeln!(out, "  {}: skipped: {why}", provider.name);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> Config {
        Config::from_json(json.as_bytes(), &|_| None).expect("test config is valid")
    }

    const GW: &str = r#"{"caller_header":"x-team",
        "providers":[
          {"name":"openai","models":["gpt-*"],"credential":{"header":"authorization","prefix":"Bearer ","value":"sk-o"}},
          {"name":"azure","models":["gpt-*"],"path_prefix":"/openai","credential":{"header":"api-key","value":"sk-a"}},
          {"name":"anthropic","models":["claude-*"],"credential":{"header":"x-api-key","value":"sk-c"}},
          {"name":"spare"}],
        "chains":[
          {"name":"gpt","models":["gpt-*"],"max_attempts":3,
           "providers":["openai","anthropic","azure",{"provider":"anthropic","model":"claude-sonnet"},"spare"]},
          {"name":"vip","callers":["team-a"],"providers":["azure"]}]}"#;

    #[test]
    fn a_walk_names_its_providers_budgets() {
        let c = config(
            r#"{"providers":[{"name":"a","budget":{"tokens":2000000,"window":"24h"}},
              {"name":"b","budget":{"tokens":500,"window":"900s"}},{"name":"c"}],
            "chains":[{"name":"c","providers":["a","b","c"]}]}"#,
        );
        let facts = RequestFacts {
            model: "m",
            ..Default::default()
        };
        let text = explain(&c, &facts).unwrap();
        assert!(
            text.contains("budgets: a 2000000 tokens per 24h, b 500 tokens per 15m (per Envoy); at run time a provider whose budget is spent is skipped (budget_exhausted) until its window rolls over\n"),
            "{text}"
        );
        let fleet = config(
            r#"{"providers":[{"name":"a","budget":{"tokens":2000000,"window":"24h"}}],
            "chains":[{"name":"c","providers":["a"]}],"fleet":{"address":"127.0.0.1:8081"}}"#,
        );
        let text = explain(&fleet, &facts).unwrap();
        assert!(
            text.contains("budgets: a 2000000 tokens per 24h (fleet-wide: every replica's answers count, synced through the rate-limit service (cluster llm_failover_fleet) every 1s); at run"),
            "{text}"
        );
        let text = explain(&config(THREE_NO_BUDGET), &facts).unwrap();
        assert!(!text.contains("budgets:"), "{text}");
    }

    #[test]
    fn a_callers_own_budget_is_named_for_that_caller_only() {
        let c = config(
            r#"{"caller_header":"x-team","providers":[{"name":"a"}],
            "chains":[{"name":"c","providers":["a"]}],
            "callers":[{"name":"team-a","budget":{"tokens":100000,"window":"24h"}},{"name":"team-b"}]}"#,
        );
        let as_caller = |caller| RequestFacts {
            model: "m",
            caller,
            ..Default::default()
        };
        let text = explain(&c, &as_caller(Some("team-a"))).unwrap();
        assert!(
            text.ends_with("caller budget: team-a 100000 tokens per 24h, whichever provider answers; at run time a caller whose budget is spent gets 429 budget_exhausted without an attempt until its window rolls over\n"),
            "{text}"
        );
        for caller in [Some("team-b"), Some("team-c"), None] {
            let text = explain(&c, &as_caller(caller)).unwrap();
            assert!(!text.contains("caller budget"), "{text}");
        }
    }

    const THREE_NO_BUDGET: &str =
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}]}"#;

    #[test]
    fn a_skip_says_whether_the_model_or_the_caller_left_the_provider_out() {
        let c = config(
            r#"{"caller_header":"x-team",
            "providers":[{"name":"private","models":["gpt-*"],"callers":["team-a"]},
                         {"name":"claude","models":["claude-*"]},{"name":"open"}],
            "chains":[{"name":"c","providers":["private","claude","open"]}]}"#,
        );
        let facts = RequestFacts {
            model: "gpt-4o",
            caller: Some("team-b"),
            ..Default::default()
        };
        let text = explain(&c, &facts).unwrap();
        assert!(
            text.contains("  private: skipped: caller team-b may not use it (callers team-a)\n"),
            "{text}"
        );
        assert!(
            text.contains("  claude: skipped: does not serve gpt-4o (models claude-*)\n"),
            "{text}"
        );
        let anonymous = explain(
            &c,
            &RequestFacts {
                caller: None,
                ..facts
            },
        )
        .unwrap();
        assert!(
            anonymous.contains("  private: skipped: a request without a caller may not use it"),
            "{anonymous}"
        );
    }

    #[test]
    fn names_the_chain_the_attempts_and_what_each_changes() {
        let c = config(GW);
        let text = explain(
            &c,
            &RequestFacts {
                model: "gpt-4o",
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            text.contains("chain: gpt (chains[0]: models gpt-*)"),
            "{text}"
        );
        assert!(text.contains("  1. openai (cluster openai)"), "{text}");
        assert!(text.contains("  2. azure"), "{text}");
        assert!(text.contains("path: /openai/v1/chat/completions"), "{text}");
        assert!(
            text.contains("\"claude-sonnet\" (rewritten from \"gpt-4o\")"),
            "{text}"
        );
        assert!(text.contains("sets: authorization"), "{text}");
        assert!(
            text.contains("anthropic: skipped: does not serve"),
            "{text}"
        );
        assert!(
            text.contains("spare: not reached (max_attempts 3)"),
            "{text}"
        );
        assert!(
            !text.contains("sk-o"),
            "credential values are never printed"
        );
    }

    #[test]
    fn a_callers_chain_and_a_refusal_are_explained() {
        let c = config(GW);
        let text = explain(
            &c,
            &RequestFacts {
                model: "gpt-4o",
                caller: Some("team-a"),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(text.contains("chain: vip"), "{text}");
        assert!(text.contains("callers team-a"), "{text}");
        let err = explain(
            &c,
            &RequestFacts {
                model: "llama-3",
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.contains("refused: 400 model_not_recognized"), "{err}");
    }

    #[test]
    fn each_entrys_api_and_the_entries_the_request_cannot_use_are_shown() {
        let c = config(
            r#"{"providers":[{"name":"openai","api":"openai"},
              {"name":"anthropic","api":"anthropic","path_prefix":"/x"},{"name":"spare"}],
            "chains":[{"name":"gpt","providers":["openai",
              {"provider":"anthropic","model":"claude-sonnet-4-5","capabilities":{"vision":true}},
              {"provider":"spare","capabilities":{"vision":false}}]}]}"#,
        );
        let facts = RequestFacts {
            model: "gpt-4o",
            api: Some(Api::OpenAiChat),
            content: crate::rewrite::Content {
                images: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let text = explain(&c, &facts).unwrap();
        assert!(text.contains("       api: openai\n"), "{text}");
        assert!(
            text.contains("api: anthropic (translated from openai, answers back to openai)"),
            "{text}"
        );
        assert!(text.contains("path: /x/v1/messages"), "{text}");
        assert!(text.contains("sets: anthropic-version"), "{text}");
        assert!(
            text.contains("spare: skipped: capability_vision (the request has images"),
            "{text}"
        );
    }

    /// The path is the one the upstream role sends (`attempt::provider_path`), for each cloud.
    #[test]
    fn each_clouds_path_and_envelope_are_the_ones_sent() {
        let c = config(
            r#"{"providers":[{"name":"br","api":"bedrock"},
              {"name":"vx","api":"vertex","path_prefix":"/v1/projects/p/locations/r"},
              {"name":"az","api":"azure_openai","path_prefix":"/openai?api-version=2024-10-21"},
              {"name":"g","api":"gemini"}],
            "chains":[{"name":"c","max_attempts":4,"providers":[{"provider":"br","model":"m:0"},
              {"provider":"vx","model":"m@1"},{"provider":"az","model":"dep"},
              {"provider":"g","model":"gem"}]}]}"#,
        );
        let facts = RequestFacts {
            model: "claude-x",
            path: Some("/v1/messages"),
            api: Some(Api::AnthropicMessages),
            ..Default::default()
        };
        let text = explain(&c, &facts).unwrap();
        for line in [
            "path: /model/m%3A0/invoke (streamed: /model/m%3A0/invoke-with-response-stream)",
            "envelope: bedrock, InvokeModel",
            "path: /v1/projects/p/locations/r/publishers/anthropic/models/m@1:rawPredict (streamed: /v1/projects/p/locations/r/publishers/anthropic/models/m@1:streamRawPredict)",
            "path: /openai/deployments/dep/chat/completions?api-version=2024-10-21\n",
            "envelope: azure_openai, deployments API",
            "path: /v1beta/openai/chat/completions\n",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
