//! May this chain entry take this request (behaviour.md 2.4)? One answer, [`skip_reason`], used by
//! planning for the chain's own entries and its alternative lists, and so by `explain`.
//!
//! The request's side comes from the one scan intake makes of the body ([`Content`], filled in
//! by `rewrite::scan_top_level`) and from the path it called (its API, `translate::Api`).
//! Capability and content checks never skip the first entry: a request no fallback can take
//! runs on the first entry alone, as it would without fallbacks.

use crate::config::{any_matches, Chain, ChainEntry, Config, Provider};
use crate::ids::ProviderId;
use crate::reply::Reply;
use crate::rewrite::Content;
use crate::translate::{self, Api, Untranslatable};
use core::cell::Cell;

/// Why a chain entry was left out of a plan (the `reason` label of `llm_failover_skipped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    BreakerOpen,
    Dead,
    /// The provider does not serve the model, or the caller may not use it.
    Model,
    /// The request's total time (`timeouts.budget`) was spent before this provider's turn
    /// (the upstream filter finds this out after an attempt; the planner never produces it).
    /// Its **fixed** reason string stays `budget`.
    TotalTime,
    /// The request has images; the entry's model declares `vision: false`.
    CapabilityVision,
    /// The request has tools; the entry's model declares `tools: false`.
    CapabilityTools,
    /// The estimated prompt is above 95% of the entry's `context_window`.
    CapabilityContext,
    /// The entry's API cannot carry the request, or the request depends on state another
    /// provider keeps (behaviour.md 2.4).
    ContentIncompatible,
    /// The chain has `same_residency` and the entry's provider is not in the residency of the
    /// request's first entry (or either is unknown).
    Residency,
    /// The provider's token budget for the current window is spent (docs/behaviour.md
    /// section 15).
    BudgetExhausted,
    /// The provider's last answer announced a spent rate limit (requests, or tokens under its
    /// reserve): skipped until the announced reset (docs/behaviour.md section 4).
    RateLimitedAhead,
}

impl SkipReason {
    /// Every reason, in the order metrics index them.
    pub const ALL: [SkipReason; 11] = [
        SkipReason::BreakerOpen,
        SkipReason::Dead,
        SkipReason::Model,
        SkipReason::TotalTime,
        SkipReason::CapabilityVision,
        SkipReason::CapabilityTools,
        SkipReason::CapabilityContext,
        SkipReason::ContentIncompatible,
        SkipReason::Residency,
        SkipReason::BudgetExhausted,
        SkipReason::RateLimitedAhead,
    ];

    /// The fixed name (docs/behaviour.md section 8 and 2.4).
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::BreakerOpen => "breaker_open",
            SkipReason::Dead => "dead",
            SkipReason::Model => "model",
            SkipReason::TotalTime => "budget",
            SkipReason::CapabilityVision => "capability_vision",
            SkipReason::CapabilityTools => "capability_tools",
            SkipReason::CapabilityContext => "capability_context",
            SkipReason::ContentIncompatible => "content_incompatible",
            SkipReason::Residency => "residency",
            SkipReason::BudgetExhausted => "budget_exhausted",
            SkipReason::RateLimitedAhead => "rate_limited_ahead",
        }
    }

    /// Its place in [`SkipReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Left out for what the request carries (behaviour.md 2.4), not for health or model.
    pub fn is_content(self) -> bool {
        (SkipReason::CapabilityVision.index()..=SkipReason::ContentIncompatible.index())
            .contains(&self.index())
    }
}

/// What a request needs from the caller's side to be planned.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFacts<'a> {
    pub model: &'a str,
    /// Envoy route name, when the filter can see it.
    pub route: Option<&'a str>,
    /// The request's `:path` (a query is ignored), for chains limited to some paths.
    pub path: Option<&'a str>,
    /// Caller identity from `caller_header`.
    pub caller: Option<&'a str>,
    /// The caller asked for no fallback (`x-llm-fallback: off`).
    pub no_fallback: bool,
    /// The API the caller speaks, from its path (`translate::Api::of_path`).
    pub api: Option<Api>,
    /// What the body carries (`rewrite::scan_top_level`).
    pub content: Content,
    /// The body, for `translate::check` on entries of another API (empty: not checked).
    pub body: &'a [u8],
}

/// Share of an entry's context window a prompt may take (behaviour.md 2.4: above 95% skips it).
const CONTEXT_PERCENT: u64 = 95;

/// Whether `provider` serves the model `entry` sends and the request's caller may use it.
pub fn serves(provider: &Provider, entry: &ChainEntry, facts: &RequestFacts) -> bool {
    let sent_model = entry.model.as_deref().unwrap_or(facts.model);
    let caller_allowed = provider.callers.is_empty()
        || facts
            .caller
            .is_some_and(|c| provider.callers.iter().any(|a| a == c));
    caller_allowed && any_matches(&provider.models, sent_model)
}

/// Why `entry` cannot take the request, if it cannot. `first` is the provider of the request's
/// first entry (the first one that serves the model), `None` while that is being decided:
/// only the model and caller are checked for it.
pub fn skip_reason(
    config: &Config,
    chain: &Chain,
    entry: &ChainEntry,
    facts: &RequestFacts,
    first: Option<ProviderId>,
    checked: &Checked,
) -> Option<SkipReason> {
    let Some(provider) = config.provider(entry.provider) else {
        return Some(SkipReason::Model);
    };
    if !serves(provider, entry, facts) {
        return Some(SkipReason::Model);
    }
    let first = first?;
    if chain.same_residency && entry.provider != first {
        let residency = config.provider(first).and_then(|f| f.residency);
        if residency.is_none() || residency != provider.residency {
            return Some(SkipReason::Residency);
        }
    }
    let caps = entry.capabilities;
    let content = &facts.content;
    if content.images && caps.vision == Some(false) {
        return Some(SkipReason::CapabilityVision);
    }
    if content.tools && caps.tools == Some(false) {
        return Some(SkipReason::CapabilityTools);
    }
    if let Some(window) = caps.context_window {
        if content.prompt_tokens().saturating_mul(100) > window.saturating_mul(CONTEXT_PERCENT) {
            return Some(SkipReason::CapabilityContext);
        }
    }
    if content.provider_state && entry.provider != first {
        return Some(SkipReason::ContentIncompatible);
    }
    if carries(provider, facts, checked).is_err() {
        return Some(SkipReason::ContentIncompatible);
    }
    None
}

/// Whether `provider` can be sent the request: always when it speaks the caller's API, else
/// when a translation serves the endpoint and the body has nothing its API cannot carry
/// (`Err` with the provider's API and, for a field, what it cannot carry). The check reads
/// the body, and only cross-API entries pay for it.
fn carries(
    provider: &Provider,
    facts: &RequestFacts,
    checked: &Checked,
) -> Result<(), (Api, Option<Untranslatable>)> {
    let Some(to) = provider.translates(facts.api, facts.path.unwrap_or_default()) else {
        return Ok(());
    };
    // Only endpoints with a translation cross APIs.
    let Some(from) = facts.api.filter(|_| facts.path.is_some()) else {
        return Err((to, None));
    };
    if facts.body.is_empty() {
        return Ok(());
    }
    checked
        .check(from, to, facts.body)
        .map_err(|why| (to, Some(why)))
}

/// How many APIs there are ([`Api::Converse`] is the last).
const API_COUNT: usize = Api::Converse as usize + 1;

/// What [`translate::check`] answered for one request's body, per provider API. Planning asks
/// per entry (and again for the alternative lists), so a chain with several entries of one
/// foreign API (Bedrock and Vertex both speaking Messages, say) reads the body once.
#[derive(Default)]
pub struct Checked([Cell<Option<Result<(), Untranslatable>>>; API_COUNT]);

impl Checked {
    /// `translate::check(from, to, body)`, asked once per `to` (`from` is the request's own).
    fn check(&self, from: Api, to: Api, body: &[u8]) -> Result<(), Untranslatable> {
        let Some(known) = self.0.get(to as usize) else {
            return translate::check(from, to, body);
        };
        if let Some(answer) = known.get() {
            return answer;
        }
        let answer = translate::check(from, to, body);
        known.set(Some(answer));
        answer
    }
}

/// The refusal of a request its first entry (the first that serves the model) cannot carry:
/// that entry is never skipped for what the request carries (behaviour.md 2.4), so the
/// request is answered `400 untranslatable_request` before any attempt, by the filter and by
/// `explain` alike (planning asks this, [`crate::plan::plan_or_refuse`]).
pub fn first_entry_refusal(
    provider: &Provider,
    facts: &RequestFacts,
    checked: &Checked,
) -> Option<Reply> {
    match carries(provider, facts, checked) {
        Err((api, Some(why))) => Some(Reply::untranslatable(
            &provider.name,
            api.as_str(),
            why.what(),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::Api;

    fn config(json: &str) -> Config {
        Config::from_json(json.as_bytes(), &|_| None).expect("test config is valid")
    }

    const CAPS: &str = r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"c","api":"anthropic"}],
        "chains":[{"name":"main","providers":[
          {"provider":"a","capabilities":{"vision":false,"tools":false,"context_window":1000}},
          {"provider":"b","capabilities":{"vision":false,"tools":false,"context_window":1000}},
          {"provider":"b","model":"big","capabilities":{"vision":true,"tools":true}},
          "c"]}]}"#;

    fn reason(c: &Config, entry: usize, facts: &RequestFacts, first: bool) -> Option<SkipReason> {
        let entry = &c.chains[0].entries[entry];
        let checked = Checked::default();
        skip_reason(
            c,
            &c.chains[0],
            entry,
            facts,
            (!first).then(|| 0u8.into()),
            &checked,
        )
    }

    fn facts(content: Content) -> RequestFacts<'static> {
        RequestFacts {
            model: "m",
            path: Some("/v1/chat/completions"),
            api: Some(Api::OpenAiChat),
            content,
            ..Default::default()
        }
    }

    #[test]
    fn each_capability_skips_an_entry_that_declares_it_missing() {
        let c = config(CAPS);
        let images = facts(Content {
            images: true,
            ..Default::default()
        });
        assert_eq!(
            reason(&c, 1, &images, false),
            Some(SkipReason::CapabilityVision)
        );
        assert_eq!(reason(&c, 2, &images, false), None, "vision: true takes it");
        let tools = facts(Content {
            tools: true,
            ..Default::default()
        });
        assert_eq!(
            reason(&c, 1, &tools, false),
            Some(SkipReason::CapabilityTools)
        );
        assert_eq!(reason(&c, 2, &tools, false), None);
        // 95% of 1000 tokens is 950 tokens, about 3800 bytes.
        let long = |bytes| {
            facts(Content {
                text_bytes: bytes,
                ..Default::default()
            })
        };
        assert_eq!(reason(&c, 1, &long(3800), false), None);
        assert_eq!(
            reason(&c, 1, &long(3804), false),
            Some(SkipReason::CapabilityContext)
        );
        assert_eq!(
            reason(&c, 2, &long(1 << 30), false),
            None,
            "unknown window = capable"
        );
        // A plain request: every entry takes it.
        assert_eq!(reason(&c, 1, &facts(Content::default()), false), None);
    }

    #[test]
    fn the_first_entry_is_never_skipped_for_what_the_request_carries() {
        let c = config(CAPS);
        let everything = facts(Content {
            images: true,
            tools: true,
            provider_state: true,
            text_bytes: 1 << 30,
        });
        assert_eq!(reason(&c, 0, &everything, true), None);
        assert_eq!(
            reason(&c, 0, &everything, false),
            Some(SkipReason::CapabilityVision)
        );
    }

    #[test]
    fn state_kept_by_a_provider_skips_other_providers_only() {
        let c = config(CAPS);
        let state = facts(Content {
            provider_state: true,
            ..Default::default()
        });
        // Entry 0 is provider a, the first provider: the same provider again is fine.
        assert_eq!(reason(&c, 0, &state, false), None);
        assert_eq!(
            reason(&c, 2, &state, false),
            Some(SkipReason::ContentIncompatible)
        );
    }

    #[test]
    fn another_api_is_content_incompatible_where_no_translation_exists() {
        let c = config(CAPS);
        let embeddings = RequestFacts {
            path: Some("/v1/embeddings"),
            api: None,
            ..facts(Content::default())
        };
        assert_eq!(
            reason(&c, 3, &embeddings, false),
            Some(SkipReason::ContentIncompatible)
        );
        assert_eq!(
            reason(&c, 1, &embeddings, false),
            None,
            "undeclared API: passthrough"
        );
        // A Messages caller to a Messages provider: same API, nothing checked.
        let messages = RequestFacts {
            path: Some("/v1/messages"),
            api: Some(Api::AnthropicMessages),
            body: b"not even json",
            ..facts(Content::default())
        };
        assert_eq!(reason(&c, 3, &messages, false), None);
        // An OpenAI caller whose body cannot be translated for Messages.
        let untranslatable = RequestFacts {
            body: b"[1]",
            ..facts(Content::default())
        };
        assert_eq!(
            reason(&c, 3, &untranslatable, false),
            Some(SkipReason::ContentIncompatible)
        );
    }

    #[test]
    fn openai_endpoints_without_translation_go_as_they_are_to_openai_providers() {
        // A Responses, embeddings or completions request to a provider declaring `api: openai`
        // is the same dialect (it was skipped as content_incompatible).
        let c = config(
            r#"{"providers":[{"name":"p","api":"openai"},{"name":"o","api":"openai"},
            {"name":"a","api":"anthropic"},
            {"name":"az","api":"azure_openai"},
            {"name":"azd","api":"azure_openai","path_prefix":"/openai?api-version=2024-10-21"},
            {"name":"g","api":"gemini"},{"name":"b","api":"bedrock"}],
            "chains":[{"name":"main","providers":["p","o","a",{"provider":"az","model":"m"},
              {"provider":"azd","model":"m"},"g",{"provider":"b","model":"m"}]}]}"#,
        );
        let on = |path| RequestFacts {
            path: Some(path),
            api: Api::of_path(path),
            body: br#"{"model":"m","input":"hi"}"#,
            ..facts(Content::default())
        };
        let skips = |path| {
            (1..7)
                .map(|e| reason(&c, e, &on(path), false).is_some())
                .collect::<Vec<_>>()
        };
        // Entries o, a, az, azd, g, b. Responses is translated for the other dialects: for
        // Anthropic's (a, and b on Bedrock) and for Chat (Gemini's OpenAI endpoint, Azure's
        // deployments API).
        assert_eq!(
            skips("/v1/responses"),
            [false, false, false, false, false, false]
        );
        assert_eq!(
            skips("/v1/embeddings"),
            [false, true, false, false, false, true]
        );
        assert_eq!(
            skips("/v1/completions"),
            [false, true, false, false, true, true]
        );
        let refused = RequestFacts {
            body: br#"{"model":"m","input":"hi","tools":[{"type":"web_search"}]}"#,
            ..on("/v1/responses")
        };
        assert_eq!(
            reason(&c, 5, &refused, false),
            Some(SkipReason::ContentIncompatible),
            "what the entry's dialect cannot carry"
        );
        assert_eq!(
            reason(&c, 1, &refused, false),
            None,
            "the same API carries it"
        );
        // State kept by the first provider still keeps a Responses request on it.
        let state = RequestFacts {
            content: Content {
                provider_state: true,
                ..Default::default()
            },
            ..on("/v1/responses")
        };
        assert_eq!(
            reason(&c, 1, &state, false),
            Some(SkipReason::ContentIncompatible)
        );
    }

    #[test]
    fn model_and_caller_come_first_for_every_entry() {
        let c = config(
            r#"{"providers":[{"name":"a","models":["gpt-*"]}],
            "chains":[{"name":"main","providers":["a"]}]}"#,
        );
        let f = RequestFacts {
            model: "claude",
            ..Default::default()
        };
        assert_eq!(reason(&c, 0, &f, true), Some(SkipReason::Model));
    }

    #[test]
    fn a_body_is_checked_once_per_provider_api() {
        let checked = Checked::default();
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let to_messages =
            |body: &[u8]| checked.check(Api::OpenAiChat, Api::AnthropicMessages, body);
        assert_eq!(to_messages(chat), Ok(()));
        // The second entry speaking Messages gets the first one's answer, the body not read
        // again (this body, read, is refused).
        assert_eq!(to_messages(b"not json"), Ok(()));
        assert_eq!(
            checked.check(Api::OpenAiChat, Api::Gemini, b"not json"),
            Err(Untranslatable::NotJson)
        );
        assert_eq!(
            checked.check(Api::OpenAiChat, Api::Converse, chat),
            translate::check(Api::OpenAiChat, Api::Converse, chat)
        );
    }
}
