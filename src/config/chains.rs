//! Validating `chains`: names, entries (known providers, no duplicates), limits and the
//! `fallback_on` triggers.

use super::any_matches;
use super::problems::{is_token, At, Problems};
use super::raw::{RawChain, RawChainEntry, RawTrigger};
use super::{
    Capabilities, Chain, ChainEntry, EntryId, ModelPattern, Provider, ProviderId, RetryInPlace,
    MAX_CHAINS, MAX_CHAIN_LEN,
};
use crate::classify::{Class, FailoverSet};
use crate::envelope::Envelope;
use crate::pattern::covers;
use crate::residency::Residency;
use crate::translate::entry_settings::{Effort, EntrySettings};
use crate::translate::Api;
use std::collections::BTreeMap;

/// Checks the list itself (reported before any provider's problems, as it always was).
#[inline]
pub fn check_list(raw: &[RawChain], problems: &mut Problems) {
    if raw.is_empty() {
        problems.field("chains", "no chain is defined: add at least one");
    }
    if raw.len() > MAX_CHAINS {
        problems.field(
            "chains",
            format!("at most {MAX_CHAINS} chains are supported"),
        );
    }
}

#[inline]
pub fn validate(
    raw: &[RawChain],
    ids: &BTreeMap<&str, usize>,
    providers: &[Provider],
    problems: &mut Problems,
) -> Vec<Chain> {
    let mut chains = Vec::with_capacity(raw.len());
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in raw.iter().enumerate() {
        let mut at = problems.at(format!("chains[{i}]"));
        if names.insert(c.name.as_str(), i).is_some() {
            at.field(
                "name",
                format!("chain {:?} is defined twice: names must be unique", c.name),
            );
        }
        let chain = validate_one(c, ids, providers, &mut at);
        if chain.same_residency {
            residency(&chain, providers, &mut at);
        }
        chains.push(chain);
    }
    chains
}

#[inline]
fn validate_one(
    c: &RawChain,
    names: &BTreeMap<&str, usize>,
    providers: &[Provider],
    at: &mut At,
) -> Chain {
    if !is_token(&c.name) {
        at.field(
            "name",
            format!(
                "{:?} is not a valid name: use letters, digits, '-', '_' or '.'",
                c.name
            ),
        );
    }
    if c.providers.is_empty() {
        at.field("providers", "empty chain: list at least one provider");
    }
    if c.providers.len() > MAX_CHAIN_LEN {
        at.field(
            "providers",
            format!("at most {MAX_CHAIN_LEN} providers per chain"),
        );
    }
    if c.models.is_empty() {
        at.field("models", "empty list: omit it to match every model");
    }
    if c.max_attempts < 1 {
        at.field("max_attempts", "must be at least 1 (1 means no fallback)");
    }
    for (j, p) in c.paths.iter().enumerate() {
        if !p.starts_with('/') && p != "*" {
            at.field(
                &format!("paths[{j}]"),
                format!("{p:?} must start with '/', e.g. \"/v1/chat/completions\" or \"/v1/*\""),
            );
        }
    }
    let mut entries = Vec::with_capacity(c.providers.len());
    resolve(
        "providers",
        &c.providers,
        names,
        providers,
        at,
        &mut entries,
    );
    let main_len = entries.len();
    let context_window = resolve(
        "context_window",
        &c.context_window,
        names,
        providers,
        at,
        &mut entries,
    );
    let content_policy = resolve(
        "content_policy",
        &c.content_policy,
        names,
        providers,
        at,
        &mut entries,
    );
    for (field, list) in [
        ("context_window", &c.context_window),
        ("content_policy", &c.content_policy),
    ] {
        if list.len() > MAX_CHAIN_LEN {
            at.field(field, format!("at most {MAX_CHAIN_LEN} entries per list"));
        }
    }
    let mut fallback_on = match &c.fallback_on {
        None => FailoverSet::default(),
        Some(triggers) => {
            let mut set = FailoverSet::empty();
            for (j, t) in triggers.iter().enumerate() {
                if let Err(problem) = add_trigger(&mut set, t) {
                    at.field(&format!("fallback_on[{j}]"), problem);
                }
            }
            set
        }
    };
    // A list is there to be used: its class falls over (behaviour.md 3).
    if !context_window.is_empty() {
        fallback_on.add_class(Class::ContextWindowExceeded);
    }
    if !content_policy.is_empty() {
        fallback_on.add_class(Class::ContentFiltered);
    }
    let has = |api| {
        entries.iter().any(|e| {
            providers
                .get(e.provider.index())
                .is_some_and(|p| p.api == Some(api))
        })
    };
    let signs_calls = has(Api::Gemini);
    let (wraps_thinking, wraps_reasoning) =
        (has(Api::OpenAiResponses), has(Api::AnthropicMessages));
    Chain {
        name: c.name.clone(),
        models: c.models.iter().map(|m| ModelPattern::parse(m)).collect(),
        routes: c.routes.clone(),
        paths: c.paths.iter().map(|p| ModelPattern::parse(p)).collect(),
        callers: c.callers.clone(),
        entries,
        main_len,
        context_window,
        content_policy,
        max_attempts: (c.max_attempts as usize).clamp(1, MAX_CHAIN_LEN),
        fallback_on,
        retry_in_place: c.retry_in_place.as_ref().map(|s| RetryInPlace {
            back_off_ms: s.back_off,
            max_retry_after_ms: s.max_retry_after,
        }),
        try_last: c.try_last,
        fallbacks_exhausted: c.fallbacks_exhausted,
        same_residency: c.same_residency,
        signs_calls,
        wraps_thinking,
        wraps_reasoning,
    }
}

/// `same_residency` (docs/behaviour.md 2.4): what the file already decides. An entry whose
/// provider has no residency never matches, and when the chain's first entry takes every
/// request the chain does (no `callers`, every model), it is every request's first entry: an
/// entry of another residency would never be used. Otherwise the request's first entry is
/// known at run time only, where planning skips the others as `residency`.
#[inline]
fn residency(chain: &Chain, providers: &[Provider], at: &mut At) {
    let provider = |e: &ChainEntry| providers.get(e.provider.index());
    let Some(first) = chain.entries.first() else {
        return;
    };
    let first_provider = provider(first);
    let always_first = first_provider.is_some_and(|p| {
        p.callers.is_empty()
            && match &first.model {
                Some(model) => any_matches(&p.models, model),
                None => (chain.models.iter()).all(|m| p.models.iter().any(|pm| covers(pm, m))),
            }
    });
    let lists = [
        ("context_window", &chain.context_window),
        ("content_policy", &chain.content_policy),
    ];
    let main = chain.main_ids().map(|(id, _)| id).enumerate();
    let places = main.map(|(j, id)| ("providers", j, id)).chain(
        lists
            .into_iter()
            .flat_map(|(name, ids)| ids.iter().enumerate().map(move |(j, &id)| (name, j, id))),
    );
    for (list, j, id) in places {
        let Some(p) = chain.entry(id).and_then(provider) else {
            continue;
        };
        let field = format!("{list}[{j}]");
        let Some(residency) = p.residency else {
            at.field(
                &field,
                format!(
                    "provider {:?} has no residency, which never matches (same_residency): declare residency: {} on it, or remove same_residency",
                    p.name,
                    Residency::NAMES.join(" | ")
                ),
            );
            continue;
        };
        let first_residency = first_provider.and_then(|f| f.residency);
        if always_first && first_residency.is_some_and(|r| r != residency) {
            at.field(
                &field,
                format!(
                    "provider {:?} is in {:?}, the chain's first entry (which takes every request) in {:?}: with same_residency this entry is never used — remove it or turn same_residency off",
                    p.name,
                    residency.as_str(),
                    first_residency.map_or("", Residency::as_str)
                ),
            );
        }
    }
}

/// Appends the entries of one list (`providers`, `context_window` or `content_policy`) to
/// `entries` and returns their indices there. A duplicate is refused within its own list only.
#[inline]
fn resolve(
    list: &str,
    raw: &[RawChainEntry],
    names: &BTreeMap<&str, usize>,
    providers: &[Provider],
    at: &mut At,
    entries: &mut Vec<ChainEntry>,
) -> Vec<EntryId> {
    let first = entries.len();
    let mut indices = Vec::with_capacity(raw.len());
    for (j, e) in raw.iter().enumerate() {
        let field = format!("{list}[{j}]");
        let name = &e.provider;
        let model = e.model.clone();
        let capabilities = e.capabilities.unwrap_or_default();
        if capabilities.context_window == Some(0) {
            at.field(
                &format!("{field}.capabilities.context_window"),
                "must be a number of tokens above 0 (omit it when unknown)",
            );
        }
        let Some(&index) = names.get(name.as_str()) else {
            at.field(
                &field,
                format!("unknown provider {name:?}: define it under providers or fix the name"),
            );
            continue;
        };
        // Past one byte's ids the providers are refused anyway (`MAX_PROVIDERS`).
        let Some(provider) = ProviderId::new(index) else {
            continue;
        };
        if model.is_none() {
            if let Some(problem) = providers.get(index).and_then(model_required) {
                at.field(&field, problem);
            }
        }
        let converse = providers
            .get(index)
            .is_some_and(|p| p.envelope == Some(Envelope::BedrockConverse));
        if converse && e.effort.is_some() {
            at.field(
                &format!("{field}.effort"),
                "not for api: bedrock_converse: Bedrock takes a model's reasoning settings in additionalModelRequestFields, in that model's own terms, which this filter does not write yet — remove it (max_tokens is written as inferenceConfig.maxTokens)",
            );
        }
        let entry = ChainEntry {
            provider,
            model,
            capabilities: Capabilities {
                vision: capabilities.vision,
                tools: capabilities.tools,
                context_window: capabilities.context_window,
            },
            settings: settings(e, &field, at),
        };
        let others = entries.get(first..).unwrap_or_default();
        if others.iter().any(|e| e.same_destination(&entry)) {
            let place = if list == "providers" {
                "this chain"
            } else {
                "this list"
            };
            at.field(&field, format!("provider {name:?} with the same model appears twice in {place}: remove the duplicate"));
            continue;
        }
        // Within one byte: a chain holds at most 3 * MAX_CHAIN_LEN entries.
        if let Some(id) = EntryId::new(entries.len()) {
            indices.push(id);
            entries.push(entry);
        }
    }
    indices
}

/// Why an entry naming no model cannot go to `provider`: a cloud whose model names are its own
/// (an Azure deployment, a Bedrock model id, a Vertex model version) would get the caller's
/// model in their place. Unless the provider lists in `models` the names callers may ask for
/// (then a caller naming one asked for it), the entry must name the model.
#[inline]
fn model_required(provider: &Provider) -> Option<String> {
    if !provider.models.contains(&ModelPattern::Any) {
        return None;
    }
    let name = &provider.name;
    let (what, example, list) = match provider.envelope? {
        Envelope::AzureOpenAi => (
            "Azure OpenAI: name the deployment",
            "DEPLOYMENT",
            "deployments",
        ),
        Envelope::Bedrock | Envelope::BedrockConverse => (
            "Bedrock: name the model id",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "model ids",
        ),
        Envelope::Vertex => (
            "Vertex AI: name the model",
            "claude-sonnet-4-5@20250929",
            "models",
        ),
        Envelope::Gemini | Envelope::GeminiNative => return None,
    };
    Some(format!(
        "provider {name:?} is {what}, or the caller's model is sent in its place — write {{provider: {name}, model: {example}}}, or list the {list} callers may ask for in that provider's models"
    ))
}

/// An entry's `effort` and `max_tokens`.
#[inline]
fn settings(e: &RawChainEntry, field: &str, at: &mut At) -> EntrySettings {
    let effort = e.effort.as_deref().and_then(|word| {
        let effort = Effort::parse(word);
        if effort.is_none() {
            at.field(
                &format!("{field}.effort"),
                format!(
                    "{word:?} is not an effort: use {}",
                    Effort::NAMES.join(", ")
                ),
            );
        }
        effort
    });
    if e.max_tokens == Some(0) {
        at.field(
            &format!("{field}.max_tokens"),
            "must be above 0 (omit it to send the caller's)",
        );
    }
    EntrySettings {
        effort,
        max_tokens: e.max_tokens.filter(|&m| m > 0),
        stream: false,
        usage: false,
        stream_options: false,
    }
}

#[inline]
fn add_trigger(set: &mut FailoverSet, trigger: &RawTrigger) -> Result<(), String> {
    match trigger {
        RawTrigger::Status(code) => {
            let code = u16::try_from(*code).map_err(|_| {
                format!("status {code} is outside 100-599: write a status such as 503, or \"5xx\"")
            })?;
            set.add_status(code)
        }
        RawTrigger::Name(name) => {
            if let Some(hundreds) = name.strip_suffix("xx").and_then(|d| d.parse::<u16>().ok()) {
                if hundreds == 4 || hundreds == 5 {
                    set.add_status_range(hundreds);
                    return Ok(());
                }
                return Err(format!(
                    "{name:?}: only \"4xx\" and \"5xx\" ranges can fall over"
                ));
            }
            if let Ok(code) = name.parse::<u16>() {
                return set.add_status(code);
            }
            match Class::parse(name) {
                Some(class) if class.may_fall_over() => {
                    set.add_class(class);
                    Ok(())
                }
                Some(class) => Err(format!(
                    "{:?} can never fall over: remove it from fallback_on",
                    class.as_str()
                )),
                None => Err(format!(
                    "unknown failure class {name:?}: use one of {}, a status code, or \"4xx\"/\"5xx\"",
                    Class::names_that_may_fall_over()
                )),
            }
        }
    }
}
