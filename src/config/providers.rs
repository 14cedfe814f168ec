//! Validating `providers` (and the gateway credential headers, which join the providers'
//! headers in the list every attempt clears).

use super::envelope;
use super::forward::Forward;
use super::problems::{is_header_name, is_token, At, Problems};
use super::raw::{RawCredential, RawForward, RawProvider};
use super::{ModelPattern, Provider, MAX_PROVIDERS};
use crate::envelope::{Envelope, SIGNING_HEADERS};
use crate::residency::Residency;
use crate::translate::Api;
use std::collections::BTreeMap;

/// The validated providers, their places in the list by name (a chain entry makes its
/// `ProviderId` from one), and the headers every attempt clears.
pub struct Providers<'r> {
    pub list: Vec<Provider>,
    pub ids: BTreeMap<&'r str, usize>,
    /// Every header any provider sets (credentials and extra headers) and the caller's gateway
    /// credential, lowercase, each once.
    pub cleared_headers: Vec<String>,
}

/// Checks the list itself (before any chain is looked at, so problems keep their order).
#[inline]
pub fn check_list(raw: &[RawProvider], problems: &mut Problems) {
    if raw.is_empty() {
        problems.field("providers", "no provider is defined: add at least one");
    }
    if raw.len() > MAX_PROVIDERS {
        problems.field(
            "providers",
            format!("at most {MAX_PROVIDERS} providers are supported"),
        );
    }
}

#[inline]
pub fn validate<'r>(
    raw: &'r [RawProvider],
    gateway_credential_headers: &[String],
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Problems,
) -> Providers<'r> {
    let mut out = Providers {
        list: Vec::with_capacity(raw.len()),
        ids: BTreeMap::new(),
        cleared_headers: Vec::new(),
    };
    for (i, p) in raw.iter().enumerate() {
        let mut at = problems.at(format!("providers[{i}]"));
        if !is_token(&p.name) {
            at.field(
                "name",
                format!(
                    "{:?} is not a valid name: use letters, digits, '-', '_' or '.'",
                    p.name
                ),
            );
        }
        if out.ids.insert(p.name.as_str(), i).is_some() {
            at.field(
                "name",
                format!(
                    "provider {:?} is defined twice: names must be unique",
                    p.name
                ),
            );
        }
        let provider = validate_one(p, env, &mut at, &mut out.cleared_headers);
        out.list.push(provider);
    }
    for h in gateway_credential_headers {
        clear(&mut out.cleared_headers, h.to_ascii_lowercase());
    }
    out
}

#[inline]
fn clear(cleared: &mut Vec<String>, header: String) {
    if !cleared.contains(&header) {
        cleared.push(header);
    }
}

#[inline]
fn validate_one(
    p: &RawProvider,
    env: &dyn Fn(&str) -> Option<String>,
    at: &mut At,
    cleared: &mut Vec<String>,
) -> Provider {
    let cluster = p.cluster.clone().unwrap_or_else(|| p.name.clone());
    if cluster.is_empty() {
        at.field("cluster", "cluster must not be empty");
    }
    if p.models.is_empty() {
        at.field(
            "models",
            "empty list: omit it to serve every model, or list the models",
        );
    }
    let mut set_headers = Vec::new();
    if let Some(c) = &p.credential {
        credential(c, env, at, cleared, &mut set_headers);
    }
    for (name, value) in &p.headers {
        let lower = name.to_ascii_lowercase();
        if !is_header_name(&lower) || lower.starts_with(':') {
            at.field(
                &format!("headers.{name}"),
                "not a valid header name (pseudo-headers are set with authority/path_prefix)",
            );
        }
        // Envoy shares one header map across attempts: whatever one provider gets set
        // must be cleared before the next attempt, like a credential.
        clear(cleared, lower.clone());
        set_headers.push((lower, value.clone()));
    }
    if let Some(prefix) = &p.path_prefix {
        if !prefix.starts_with('/') || prefix.ends_with('/') {
            at.field(
                "path_prefix",
                format!("{prefix:?} must start with '/' and not end with one, e.g. \"/openai\""),
            );
        }
    }
    if let Some(authority) = &p.authority {
        if authority.is_empty() || authority.contains(['/', ' ']) {
            at.field("authority", format!("{authority:?} is not a host[:port]"));
        }
    }
    let envelope = envelope::of_provider(p, at);
    let api = match (p.api.as_deref(), &envelope) {
        (_, Some(envelope)) => Some(envelope.api()),
        (None, None) => None,
        (Some(name), None) => {
            let api = Api::parse(name);
            if api.is_none() && !Envelope::NAMES.contains(&name) {
                at.field(
                    "api",
                    format!("{name:?} is not an API this filter speaks: use openai, openai_responses, anthropic, azure_openai, bedrock, bedrock_converse, vertex, gemini or gemini_native"),
                );
            }
            api
        }
    };
    if envelope.is_some_and(Envelope::aws_signed) {
        // Envoy's signer adds these after this filter: no later attempt may carry them.
        for header in SIGNING_HEADERS {
            clear(cleared, header.to_string());
        }
    }
    if api == Some(Api::AnthropicMessages)
        && envelope.is_none()
        && !set_headers.iter().any(|(n, _)| n == ANTHROPIC_VERSION)
    {
        // Messages requires it; the provider's own `headers` win.
        clear(cleared, ANTHROPIC_VERSION.to_string());
        set_headers.push((
            ANTHROPIC_VERSION.to_string(),
            DEFAULT_ANTHROPIC_VERSION.to_string(),
        ));
    }
    if p.max_tokens == Some(0) {
        at.field(
            "max_tokens",
            "must be above 0 (omit it for the default, 4096)",
        );
    }
    let forward = forward_rule(p.forward_headers.as_ref(), api, at);
    let residency = residency(p, envelope, at);
    let budget = super::callers::budget(p.budget.as_ref(), at);
    Provider {
        name: p.name.clone(),
        cluster,
        models: p.models.iter().map(|m| ModelPattern::parse(m)).collect(),
        set_headers,
        credential: p.credential.is_some(),
        authority: p.authority.clone(),
        path_prefix: p.path_prefix.clone(),
        callers: p.callers.clone(),
        labels: p.labels.clone(),
        forward,
        api,
        max_tokens: p.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        envelope,
        residency,
        budget,
        reserve_tokens: p.reserve_tokens,
    }
}

/// Its residency: declared, else a cloud's region (`Residency::of_cloud`). A declared one that
/// its region contradicts is refused.
#[inline]
fn residency(p: &RawProvider, envelope: Option<Envelope>, at: &mut At) -> Option<Residency> {
    let cloud = Residency::of_cloud(envelope, p.path_prefix.as_deref(), p.authority.as_deref());
    let Some(word) = p.residency.as_deref() else {
        return cloud;
    };
    let Some(declared) = Residency::parse(word) else {
        at.field(
            "residency",
            format!(
                "{word:?} is not a residency: use {}",
                Residency::NAMES.join(", ")
            ),
        );
        return None;
    };
    if let Some(cloud) = cloud.filter(|&c| c != declared) {
        at.field(
            "residency",
            format!(
                "{word:?}, but its region is in {:?}: remove residency (a cloud provider's follows its region) or fix the region",
                cloud.as_str()
            ),
        );
    }
    Some(declared)
}

/// The header Anthropic Messages requires, and the version set when a provider sets none.
pub const ANTHROPIC_VERSION: &str = "anthropic-version";
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` of a translated Messages request that sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// `forward_headers`: extra header names or `prefix*` patterns, or `all`. A provider that
/// declares `api: openai` does not take the caller's `anthropic-*` headers by default (an
/// Anthropic caller translated for it).
#[inline]
fn forward_rule(raw: Option<&RawForward>, api: Option<Api>, at: &mut At) -> Forward {
    match raw {
        None => Forward::for_api(api),
        Some(RawForward::Word(w)) if w == "all" => Forward::All,
        Some(RawForward::Word(w)) => {
            at.field(
                "forward_headers",
                format!("{w:?}: give a list of header names (or \"prefix*\"), or the word all"),
            );
            Forward::default()
        }
        Some(RawForward::Names(names)) => {
            for (j, name) in names.iter().enumerate() {
                let lower = name.to_ascii_lowercase();
                let bare = lower.strip_suffix('*').unwrap_or(&lower);
                if !is_header_name(bare) || bare.starts_with(':') {
                    at.field(
                        &format!("forward_headers[{j}]"),
                        format!("{name:?} is not a header name or \"prefix*\" pattern"),
                    );
                }
            }
            Forward::for_api_with_extra(api, names.iter().map(String::as_str))
        }
    }
}

/// The credential header and its value (from the config or the VM's environment).
#[inline]
fn credential(
    c: &RawCredential,
    env: &dyn Fn(&str) -> Option<String>,
    at: &mut At,
    cleared: &mut Vec<String>,
    set_headers: &mut Vec<(String, String)>,
) {
    let header = c.header.to_ascii_lowercase();
    if !is_header_name(&header) {
        at.field(
            "credential.header",
            format!("{:?} is not a valid header name: use lowercase letters, digits, '-' or '_', e.g. x-api-key", c.header),
        );
    }
    let key = match (&c.value, &c.env) {
        (Some(v), None) => Some(v.clone()),
        (None, Some(var)) => match env(var) {
            Some(v) if !v.is_empty() => Some(v),
            _ => {
                at.field("credential.env", format!("environment variable {var} is not set in Envoy's environment: export it before starting Envoy (a configuration not made by llm-failover render must also list it in vm_config.environment_variables.host_env_keys)"));
                None
            }
        },
        _ => {
            at.field("credential", "give exactly one of `value` or `env`");
            None
        }
    };
    if let Some(key) = key {
        set_headers.push((header.clone(), format!("{}{}", c.prefix, key)));
    }
    clear(cleared, header);
}
