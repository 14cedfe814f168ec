//! Validating `chains`: names, entries (known providers, no duplicates), limits and the
//! `fallback_on` triggers.

use super::any_matches;
use super::problems::{is_token, At, Problems};
use super::raw::{RawChain, RawChainEntry, RawTrigger};
use super::{
    Capabilities, Chain, ChainEntry, EntryGroup, EntryId, GroupPolicy, ModelPattern, Provider,
    ProviderId, RetryInPlace, MAX_CHAINS, MAX_CHAIN_LEN,
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
    let mut groups = Vec::new();
    resolve(
        "providers",
        &c.providers,
        names,
        providers,
        at,
        &mut entries,
        Some(&mut groups),
    );
    let main_len = entries.len();
    // Said once: a chain already too long before its groups' members were counted was named above.
    if main_len > MAX_CHAIN_LEN && c.providers.len() <= MAX_CHAIN_LEN {
        at.field(
            "providers",
            format!("at most {MAX_CHAIN_LEN} providers per chain, group members counted"),
        );
    }
    let context_window = resolve(
        "context_window",
        &c.context_window,
        names,
        providers,
        at,
        &mut entries,
        None,
    );
    let content_policy = resolve(
        "content_policy",
        &c.content_policy,
        names,
        providers,
        at,
        &mut entries,
        None,
    );
    for (field, list) in [
        ("context_window", &c.context_window),
        ("content_policy", &c.content_policy),
    ] {
        if list.len() > MAX_CHAIN_LEN {
            at.field(field, format!("at most {MAX_CHAIN_LEN} entries per list"));
        }
    }
    check_hedge(c, at);
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
        groups,
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
        hedge_after_ms: c.hedge_after,
        signs_calls,
        wraps_thinking,
        wraps_reasoning,
    }
}

/// `hedge_after` (docs/behaviour.md 5, hedging): a hedged request makes its two attempts
/// race, so it cannot also retry in place or reroute to an alternative list, and it needs a
/// second attempt.
fn check_hedge(c: &RawChain, at: &mut At) {
    let Some(ms) = c.hedge_after else {
        return;
    };
    let problem = if ms == 0 {
        "must be more than 0 (omit it to turn hedging off)"
    } else if c.retry_in_place.is_some() {
        "cannot be used with retry_in_place: a hedge already retries, on the next entry"
    } else if !c.context_window.is_empty() || !c.content_policy.is_empty() {
        "cannot be used with context_window or content_policy lists: a hedged request makes \
         only its two racing attempts"
    } else if c.max_attempts < 2 {
        "needs max_attempts of at least 2 (the hedge is the second attempt)"
    } else {
        return;
    };
    at.field("hedge_after", problem);
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
    // A group first: which member is first is decided per request.
    let grouped = chain.groups.first().is_some_and(|g| g.first == 0);
    let always_first = !grouped
        && first_provider.is_some_and(|p| {
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
    let main = chain
        .main_ids()
        .map(|(id, _)| (chain.entry_field(id.index()), id));
    let places = main.chain(lists.into_iter().flat_map(|(name, ids)| {
        (ids.iter().enumerate()).map(move |(j, &id)| (format!("{name}[{j}]"), id))
    }));
    for (field, id) in places {
        let Some(p) = chain.entry(id).and_then(provider) else {
            continue;
        };
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
/// `entries` and returns their indices there (a group's, its members'). A duplicate is refused
/// within its own list only (a group member too). `groups`: where the chain's own providers'
/// groups go; `None` for a list, which takes none.
#[inline]
fn resolve(
    list: &str,
    raw: &[RawChainEntry],
    names: &BTreeMap<&str, usize>,
    providers: &[Provider],
    at: &mut At,
    entries: &mut Vec<ChainEntry>,
    mut groups: Option<&mut Vec<EntryGroup>>,
) -> Vec<EntryId> {
    let first = entries.len();
    let mut indices = Vec::with_capacity(raw.len());
    for (j, e) in raw.iter().enumerate() {
        let field = format!("{list}[{j}]");
        if e.group.is_empty() {
            if e.weights.is_some() || e.policy.is_some() {
                at.field(
                    &field,
                    "weights and policy are a group's: write {group: [a, b], weights: [2, 1]}, or remove them",
                );
            }
            let place = if list == "providers" {
                "this chain"
            } else {
                "this list"
            };
            indices.extend(one(e, &field, place, names, providers, at, entries, first));
            continue;
        }
        let Some(groups) = groups.as_deref_mut() else {
            at.field(
                &format!("{field}.group"),
                "a group stands among the chain's providers only: list its members here one by one",
            );
            continue;
        };
        let members_at = entries.len();
        let group = group(e, &field, at);
        let mut kept = Vec::with_capacity(e.group.len());
        for (k, (m, w)) in e.group.iter().zip(&group.weights).enumerate() {
            let field = format!("{field}.group[{k}]");
            if !m.group.is_empty() {
                at.field(
                    &field,
                    "groups do not nest: list the inner group's members in this one",
                );
                continue;
            }
            if m.weights.is_some() || m.policy.is_some() {
                at.field(
                    &field,
                    "weights and policy are the group's, not a member's: write them beside group",
                );
            }
            if let Some(id) = one(
                m,
                &field,
                "this chain",
                names,
                providers,
                at,
                entries,
                first,
            ) {
                indices.push(id);
                kept.push(*w);
            }
        }
        // Members refused above leave the group; what remains still stands together.
        if kept.len() >= 2 {
            groups.push(EntryGroup {
                first: members_at,
                weights: kept,
                policy: group.policy,
            });
        }
    }
    indices
}

/// A group's own fields checked (`provider` and the entry's settings belong on the members,
/// at least two members, one weight above 0 per member, a known policy); its weights, one per
/// member as written (1 when none are).
#[inline]
fn group(e: &RawChainEntry, field: &str, at: &mut At) -> EntryGroup {
    if !e.provider.is_empty()
        || e.model.is_some()
        || e.capabilities.is_some()
        || e.effort.is_some()
        || e.max_tokens.is_some()
    {
        at.field(
            field,
            "a group takes no provider, model, capabilities, effort or max_tokens of its own: write them on its members ({group: [{provider: a, model: m}, b]})",
        );
    }
    let n = e.group.len();
    if n == 1 {
        at.field(
            &format!("{field}.group"),
            "a group of one member: write the member itself in the chain, or add the deployments it shares the load with",
        );
    }
    let policy = match e.policy.as_deref() {
        None => GroupPolicy::Weighted,
        Some(word) => GroupPolicy::parse(word).unwrap_or_else(|| {
            at.field(
                &format!("{field}.policy"),
                format!(
                    "{word:?} is not a policy: use {}",
                    GroupPolicy::NAMES.join(" or ")
                ),
            );
            GroupPolicy::Weighted
        }),
    };
    let mut weights = vec![1u32; n];
    if let Some(written) = &e.weights {
        if policy == GroupPolicy::LeastBusy {
            at.field(
                &format!("{field}.weights"),
                "least_busy picks by requests in flight, not by weight: remove weights, or use policy: weighted",
            );
        } else if written.len() != n {
            at.field(
                &format!("{field}.weights"),
                format!(
                    "{} weights for {n} members: give one weight per member, in the members' order",
                    written.len()
                ),
            );
        } else {
            for (k, &w) in written.iter().enumerate() {
                if w == 0 {
                    at.field(
                        &format!("{field}.weights[{k}]"),
                        "a weight of 0 never picks the member (it would only be tried after the others): give it 1 or more, or remove the member",
                    );
                }
            }
            weights.clone_from(written);
        }
    }
    EntryGroup {
        first: 0,
        weights,
        policy,
    }
}

/// One entry checked and appended to `entries` (its id), unless refused; `first`: where its
/// list starts in `entries` (a duplicate within the list is refused, `place` naming the list).
#[inline]
#[allow(clippy::too_many_arguments)]
fn one(
    e: &RawChainEntry,
    field: &str,
    place: &str,
    names: &BTreeMap<&str, usize>,
    providers: &[Provider],
    at: &mut At,
    entries: &mut Vec<ChainEntry>,
    first: usize,
) -> Option<EntryId> {
    let name = &e.provider;
    let model = e.model.clone();
    let capabilities = e.capabilities.unwrap_or_default();
    if capabilities.context_window == Some(0) {
        at.field(
            &format!("{field}.capabilities.context_window"),
            "must be a number of tokens above 0 (omit it when unknown)",
        );
    }
    if name.is_empty() {
        at.field(field, "missing field `provider`");
        return None;
    }
    let Some(&index) = names.get(name.as_str()) else {
        at.field(
            field,
            format!("unknown provider {name:?}: define it under providers or fix the name"),
        );
        return None;
    };
    // Past one byte's ids the providers are refused anyway (`MAX_PROVIDERS`).
    let provider = ProviderId::new(index)?;
    if model.is_none() {
        if let Some(problem) = providers.get(index).and_then(model_required) {
            at.field(field, problem);
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
        settings: settings(e, field, at),
    };
    let others = entries.get(first..).unwrap_or_default();
    if others.iter().any(|e| e.same_destination(&entry)) {
        at.field(field, format!("provider {name:?} with the same model appears twice in {place} (group members included): remove the duplicate"));
        return None;
    }
    // Within one byte: a chain holds at most 3 * MAX_CHAIN_LEN entries.
    let id = EntryId::new(entries.len())?;
    entries.push(entry);
    Some(id)
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
