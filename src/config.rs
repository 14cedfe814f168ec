//! Plugin configuration: the serde model users write (JSON in Envoy's plugin configuration,
//! YAML in the `llm-failover` CLI), and its validated, ready-to-use form.
//!
//! `Config::from_json` refuses anything half-valid: every problem is reported at once, each
//! naming the field path and what to do about it (SPEC section 9).

use crate::classify::{Class, FailoverSet};
use crate::duration::serde_duration;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Which half of the filter a plugin instance is (DESIGN section 1, router mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Before the router: plans each request's chain, writes the public response headers.
    #[default]
    Downstream,
    /// On every provider cluster: rewrites and classifies each attempt, feeds the breaker.
    Upstream,
}

// ---------------------------------------------------------------------------------------------
// What users write.

fn default_attempts() -> u32 {
    3
}
fn default_any_model() -> Vec<String> {
    vec!["*".to_string()]
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub role: Role,
    pub providers: Vec<RawProvider>,
    pub chains: Vec<RawChain>,
    #[serde(default)]
    pub breaker: RawBreaker,
    #[serde(default)]
    pub dead_marks: RawDeadMarks,
    #[serde(default)]
    pub timeouts: RawTimeouts,
    /// Request header that limits a request to its first provider when set to "off".
    #[serde(default = "RawConfig::default_opt_out_header")]
    pub opt_out_header: String,
    /// Request header naming the caller (set by an authentication filter that runs before
    /// this one), checked against each provider's `callers`.
    #[serde(default)]
    pub caller_header: Option<String>,
    /// The caller's own gateway credential headers: removed from every attempt.
    #[serde(default = "RawConfig::default_gateway_credential_headers")]
    pub gateway_credential_headers: Vec<String>,
    /// Path answered by the filter itself with the providers' health (off when absent).
    #[serde(default)]
    pub status_path: Option<String>,
}

impl RawConfig {
    fn default_opt_out_header() -> String {
        "x-llm-fallback".to_string()
    }
    fn default_gateway_credential_headers() -> Vec<String> {
        vec!["authorization".into(), "x-api-key".into(), "api-key".into()]
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    pub name: String,
    /// Envoy cluster that reaches this provider; defaults to `name`.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Models this provider serves (exact names, `prefix*`, or `*`).
    #[serde(default = "default_any_model")]
    pub models: Vec<String>,
    #[serde(default)]
    pub credential: Option<RawCredential>,
    /// Extra headers set on every attempt to this provider (e.g. `anthropic-version`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `:authority` for attempts to this provider.
    #[serde(default)]
    pub authority: Option<String>,
    /// Prepended to the request path for this provider (e.g. "/openai").
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// Callers allowed to use this provider; empty means everyone.
    #[serde(default)]
    pub callers: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCredential {
    /// Header that carries the key, e.g. `authorization`, `x-api-key`, `api-key`.
    pub header: String,
    /// The value itself (fine for tests; prefer `env` in production).
    #[serde(default)]
    pub value: Option<String>,
    /// Environment variable holding the key (pass it to the VM with
    /// `vm_config.environment_variables.host_env_keys`).
    #[serde(default)]
    pub env: Option<String>,
    /// Put before the key, e.g. "Bearer ".
    #[serde(default)]
    pub prefix: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChain {
    pub name: String,
    /// Requested models this chain serves (exact, `prefix*`, `*`).
    #[serde(default = "default_any_model")]
    pub models: Vec<String>,
    /// Envoy route names this chain is for; empty means every route.
    #[serde(default)]
    pub routes: Vec<String>,
    pub providers: Vec<RawChainEntry>,
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Classes (`"server_error"`) and statuses (`429`, `"5xx"`) that move to the next provider.
    #[serde(default)]
    pub fallback_on: Option<Vec<RawTrigger>>,
    /// Put providers with an open breaker or a dead mark last instead of dropping them.
    #[serde(default)]
    pub try_last: bool,
    /// When every attempt failed: answer `503 fallbacks_exhausted` instead of the last error.
    #[serde(default)]
    pub fallbacks_exhausted: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawChainEntry {
    Name(String),
    Entry {
        provider: String,
        #[serde(default)]
        model: Option<String>,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawTrigger {
    Status(i64),
    Name(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawBreaker {
    pub failures: u32,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub window: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub cooldown: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub max_cooldown: u64,
}

impl Default for RawBreaker {
    fn default() -> Self {
        RawBreaker {
            failures: 10,
            window: 30_000,
            cooldown: 60_000,
            max_cooldown: 300_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawDeadMarks {
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub model_not_found: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub setup_fault: u64,
}

impl Default for RawDeadMarks {
    fn default() -> Self {
        RawDeadMarks {
            model_not_found: 6 * 3_600_000,
            setup_fault: 3_600_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTimeouts {
    /// Time to response headers for one attempt (Envoy's `per_try_timeout`).
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub attempt: u64,
    /// No bytes for this long while waiting ends the attempt (`per_try_idle_timeout`); 0 = off.
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub stall: u64,
    /// Total time across attempts: no new attempt starts with less than `min_remaining` left.
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub budget: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub min_remaining: u64,
}

impl Default for RawTimeouts {
    fn default() -> Self {
        RawTimeouts {
            attempt: 120_000,
            stall: 0,
            budget: 300_000,
            min_remaining: 10_000,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The validated form the filter uses.

/// A model name pattern: `*`, `prefix*` or an exact name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelPattern {
    Any,
    Prefix(String),
    Exact(String),
}

impl ModelPattern {
    pub fn parse(text: &str) -> ModelPattern {
        if text == "*" {
            ModelPattern::Any
        } else if let Some(prefix) = text.strip_suffix('*') {
            ModelPattern::Prefix(prefix.to_string())
        } else {
            ModelPattern::Exact(text.to_string())
        }
    }

    pub fn matches(&self, model: &str) -> bool {
        match self {
            ModelPattern::Any => true,
            ModelPattern::Prefix(p) => model.starts_with(p.as_str()),
            ModelPattern::Exact(e) => e == model,
        }
    }
}

pub fn any_matches(patterns: &[ModelPattern], model: &str) -> bool {
    patterns.iter().any(|p| p.matches(model))
}

/// Index of a provider in `Config::providers`.
pub type ProviderId = usize;

#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub cluster: String,
    pub models: Vec<ModelPattern>,
    /// Headers this provider's attempts carry (its credential first, then extra headers).
    pub set_headers: Vec<(String, String)>,
    pub authority: Option<String>,
    pub path_prefix: Option<String>,
    pub callers: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainEntry {
    pub provider: ProviderId,
    /// Model name sent to this provider; `None` keeps the requested model.
    pub model: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Chain {
    pub name: String,
    pub models: Vec<ModelPattern>,
    pub routes: Vec<String>,
    pub entries: Vec<ChainEntry>,
    pub max_attempts: usize,
    pub fallback_on: FailoverSet,
    pub try_last: bool,
    pub fallbacks_exhausted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    pub failures: u32,
    pub window_ms: u64,
    pub cooldown_ms: u64,
    pub max_cooldown_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadMarkPolicy {
    pub model_not_found_ms: u64,
    pub setup_fault_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub attempt_ms: u64,
    pub stall_ms: u64,
    pub budget_ms: u64,
    pub min_remaining_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub role: Role,
    pub providers: Vec<Provider>,
    pub chains: Vec<Chain>,
    pub breaker: BreakerPolicy,
    pub dead_marks: DeadMarkPolicy,
    pub timeouts: Timeouts,
    pub opt_out_header: String,
    pub caller_header: Option<String>,
    /// Every header any provider sets (credentials and extra headers) and the caller's
    /// gateway credential: removed from each attempt before the provider's own are set, so
    /// nothing meant for one provider reaches another.
    pub cleared_headers: Vec<String>,
    pub status_path: Option<String>,
}

/// One configuration problem: where it is and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "{}: {}", self.field, self.problem)
        }
    }
}

/// Limits that keep per-request work and shared-data records small.
pub const MAX_PROVIDERS: usize = 64;
pub const MAX_CHAIN_LEN: usize = 16;
pub const MAX_BREAKER_FAILURES: u32 = 1000;

impl Config {
    /// Parses and validates plugin configuration JSON. Reads credential environment
    /// variables through `env` (the process environment inside the VM).
    pub fn from_json(
        json: &[u8],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Vec<ConfigError>> {
        let de = &mut serde_json::Deserializer::from_slice(json);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            vec![ConfigError {
                field: if field == "." { String::new() } else { field },
                problem: e.into_inner().to_string(),
            }]
        })?;
        Config::from_raw(raw, env)
    }

    /// Validates an already parsed configuration (the CLI parses YAML into `RawConfig`).
    pub fn from_raw(
        raw: RawConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut err = |field: String, problem: String| errors.push(ConfigError { field, problem });

        if raw.providers.is_empty() {
            err(
                "providers".into(),
                "no provider is defined: add at least one".into(),
            );
        }
        if raw.providers.len() > MAX_PROVIDERS {
            err(
                "providers".into(),
                format!("at most {MAX_PROVIDERS} providers are supported"),
            );
        }
        if raw.chains.is_empty() {
            err(
                "chains".into(),
                "no chain is defined: add at least one".into(),
            );
        }

        let mut ids: HashMap<&str, ProviderId> = HashMap::new();
        let mut providers = Vec::with_capacity(raw.providers.len());
        let mut cleared_headers: Vec<String> = Vec::new();
        for (i, p) in raw.providers.iter().enumerate() {
            let at = format!("providers[{i}]");
            if !is_token(&p.name) {
                err(
                    format!("{at}.name"),
                    format!(
                        "{:?} is not a valid name: use letters, digits, '-', '_' or '.'",
                        p.name
                    ),
                );
            }
            if ids.insert(p.name.as_str(), i).is_some() {
                err(
                    format!("{at}.name"),
                    format!(
                        "provider {:?} is defined twice: names must be unique",
                        p.name
                    ),
                );
            }
            let cluster = p.cluster.clone().unwrap_or_else(|| p.name.clone());
            if cluster.is_empty() {
                err(format!("{at}.cluster"), "cluster must not be empty".into());
            }
            if p.models.is_empty() {
                err(
                    format!("{at}.models"),
                    "empty list: omit it to serve every model, or list the models".into(),
                );
            }
            let mut set_headers = Vec::new();
            if let Some(c) = &p.credential {
                let header = c.header.to_ascii_lowercase();
                if !is_header_name(&header) {
                    err(
                        format!("{at}.credential.header"),
                        format!("{:?} is not a valid header name", c.header),
                    );
                }
                let key = match (&c.value, &c.env) {
                    (Some(v), None) => Some(v.clone()),
                    (None, Some(var)) => match env(var) {
                        Some(v) if !v.is_empty() => Some(v),
                        _ => {
                            err(format!("{at}.credential.env"), format!("environment variable {var} is not set in the wasm VM: export it and list it in vm_config.environment_variables.host_env_keys"));
                            None
                        }
                    },
                    _ => {
                        err(
                            format!("{at}.credential"),
                            "give exactly one of `value` or `env`".into(),
                        );
                        None
                    }
                };
                if let Some(key) = key {
                    set_headers.push((header.clone(), format!("{}{}", c.prefix, key)));
                }
                if !cleared_headers.contains(&header) {
                    cleared_headers.push(header);
                }
            }
            for (name, value) in &p.headers {
                let lower = name.to_ascii_lowercase();
                if !is_header_name(&lower) || lower.starts_with(':') {
                    err(format!("{at}.headers.{name}"), "not a valid header name (pseudo-headers are set with authority/path_prefix)".into());
                }
                // Envoy shares one header map across attempts: whatever one provider gets set
                // must be cleared before the next attempt, like a credential.
                if !cleared_headers.contains(&lower) {
                    cleared_headers.push(lower.clone());
                }
                set_headers.push((lower, value.clone()));
            }
            if let Some(prefix) = &p.path_prefix {
                if !prefix.starts_with('/') || prefix.ends_with('/') {
                    err(
                        format!("{at}.path_prefix"),
                        format!(
                            "{prefix:?} must start with '/' and not end with one, e.g. \"/openai\""
                        ),
                    );
                }
            }
            if let Some(authority) = &p.authority {
                if authority.is_empty() || authority.contains(['/', ' ']) {
                    err(
                        format!("{at}.authority"),
                        format!("{authority:?} is not a host[:port]"),
                    );
                }
            }
            providers.push(Provider {
                name: p.name.clone(),
                cluster,
                models: p.models.iter().map(|m| ModelPattern::parse(m)).collect(),
                set_headers,
                authority: p.authority.clone(),
                path_prefix: p.path_prefix.clone(),
                callers: p.callers.clone(),
                labels: p.labels.clone(),
            });
        }
        for h in &raw.gateway_credential_headers {
            let lower = h.to_ascii_lowercase();
            if !cleared_headers.contains(&lower) {
                cleared_headers.push(lower);
            }
        }

        let mut chains = Vec::with_capacity(raw.chains.len());
        let mut chain_names: HashMap<&str, usize> = HashMap::new();
        for (i, c) in raw.chains.iter().enumerate() {
            let at = format!("chains[{i}]");
            if chain_names.insert(c.name.as_str(), i).is_some() {
                err(
                    format!("{at}.name"),
                    format!("chain {:?} is defined twice: names must be unique", c.name),
                );
            }
            if !is_token(&c.name) {
                err(
                    format!("{at}.name"),
                    format!(
                        "{:?} is not a valid name: use letters, digits, '-', '_' or '.'",
                        c.name
                    ),
                );
            }
            if c.providers.is_empty() {
                err(
                    format!("{at}.providers"),
                    "empty chain: list at least one provider".into(),
                );
            }
            if c.providers.len() > MAX_CHAIN_LEN {
                err(
                    format!("{at}.providers"),
                    format!("at most {MAX_CHAIN_LEN} providers per chain"),
                );
            }
            if c.models.is_empty() {
                err(
                    format!("{at}.models"),
                    "empty list: omit it to match every model".into(),
                );
            }
            if c.max_attempts < 1 {
                err(
                    format!("{at}.max_attempts"),
                    "must be at least 1 (1 means no fallback)".into(),
                );
            }
            let mut entries: Vec<ChainEntry> = Vec::with_capacity(c.providers.len());
            for (j, e) in c.providers.iter().enumerate() {
                let (name, model) = match e {
                    RawChainEntry::Name(n) => (n, None),
                    RawChainEntry::Entry { provider, model } => (provider, model.clone()),
                };
                let Some(&provider) = ids.get(name.as_str()) else {
                    err(
                        format!("{at}.providers[{j}]"),
                        format!(
                            "unknown provider {name:?}: define it under providers or fix the name"
                        ),
                    );
                    continue;
                };
                let entry = ChainEntry { provider, model };
                if entries.contains(&entry) {
                    err(format!("{at}.providers[{j}]"), format!("provider {name:?} with the same model appears twice in this chain: remove the duplicate"));
                    continue;
                }
                entries.push(entry);
            }
            let fallback_on = match &c.fallback_on {
                None => FailoverSet::default(),
                Some(triggers) => {
                    let mut set = FailoverSet::empty();
                    for (j, t) in triggers.iter().enumerate() {
                        let field = format!("{at}.fallback_on[{j}]");
                        if let Err(problem) = add_trigger(&mut set, t) {
                            err(field, problem);
                        }
                    }
                    set
                }
            };
            chains.push(Chain {
                name: c.name.clone(),
                models: c.models.iter().map(|m| ModelPattern::parse(m)).collect(),
                routes: c.routes.clone(),
                entries,
                max_attempts: (c.max_attempts as usize).clamp(1, MAX_CHAIN_LEN),
                fallback_on,
                try_last: c.try_last,
                fallbacks_exhausted: c.fallbacks_exhausted,
            });
        }

        let b = &raw.breaker;
        if b.failures < 1 || b.failures > MAX_BREAKER_FAILURES {
            err(
                "breaker.failures".into(),
                format!("must be between 1 and {MAX_BREAKER_FAILURES}"),
            );
        }
        for (field, v) in [
            ("breaker.window", b.window),
            ("breaker.cooldown", b.cooldown),
        ] {
            if v == 0 {
                err(field.into(), "must be longer than 0s".into());
            }
        }
        if b.max_cooldown < b.cooldown {
            err(
                "breaker.max_cooldown".into(),
                "must be at least breaker.cooldown".into(),
            );
        }
        let t = &raw.timeouts;
        if t.attempt == 0 {
            err("timeouts.attempt".into(), "must be longer than 0s".into());
        }
        if t.budget != 0 && t.budget < t.min_remaining {
            err(
                "timeouts.budget".into(),
                "must be at least timeouts.min_remaining (or 0 for no budget)".into(),
            );
        }
        if !is_header_name(&raw.opt_out_header.to_ascii_lowercase()) {
            err(
                "opt_out_header".into(),
                format!("{:?} is not a valid header name", raw.opt_out_header),
            );
        }
        if let Some(h) = &raw.caller_header {
            if !is_header_name(&h.to_ascii_lowercase()) {
                err(
                    "caller_header".into(),
                    format!("{h:?} is not a valid header name"),
                );
            }
        }
        if let Some(p) = &raw.status_path {
            if !p.starts_with('/') {
                err("status_path".into(), format!("{p:?} must start with '/'"));
            }
        }

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Config {
            role: raw.role,
            providers,
            chains,
            breaker: BreakerPolicy {
                failures: b.failures,
                window_ms: b.window,
                cooldown_ms: b.cooldown,
                max_cooldown_ms: b.max_cooldown,
            },
            dead_marks: DeadMarkPolicy {
                model_not_found_ms: raw.dead_marks.model_not_found,
                setup_fault_ms: raw.dead_marks.setup_fault,
            },
            timeouts: Timeouts {
                attempt_ms: t.attempt,
                stall_ms: t.stall,
                budget_ms: t.budget,
                min_remaining_ms: t.min_remaining,
            },
            opt_out_header: raw.opt_out_header.to_ascii_lowercase(),
            caller_header: raw.caller_header.map(|h| h.to_ascii_lowercase()),
            cleared_headers,
            status_path: raw.status_path,
        })
    }

    pub fn provider_id(&self, name: &str) -> Option<ProviderId> {
        self.providers.iter().position(|p| p.name == name)
    }
}

fn add_trigger(set: &mut FailoverSet, trigger: &RawTrigger) -> Result<(), String> {
    match trigger {
        RawTrigger::Status(code) => {
            let code =
                u16::try_from(*code).map_err(|_| format!("status {code} is outside 100-599"))?;
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
                Some(class) => Err(format!("{:?} can never fall over", class.as_str())),
                None => Err(format!(
                    "unknown failure class {name:?}: use one of connection_error, timeout, rate_limited, server_error, overloaded, model_not_found, setup_fault, a status code, or \"4xx\"/\"5xx\""
                )),
            }
        }
    }
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.:".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn load(json: &str) -> Result<Config, Vec<ConfigError>> {
        Config::from_json(json.as_bytes(), &no_env)
    }

    fn errors_of(json: &str) -> Vec<String> {
        load(json)
            .expect_err("config should be refused")
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    const MINIMAL: &str = r#"{"providers":[{"name":"a"},{"name":"b","models":["gpt-*"]}],
        "chains":[{"name":"main","providers":["a","b"]}]}"#;

    #[test]
    fn minimal_config_gets_the_spec_defaults() {
        let c = load(MINIMAL).unwrap();
        assert_eq!(c.role, Role::Downstream);
        assert_eq!(c.chains[0].max_attempts, 3);
        assert_eq!(
            c.breaker,
            BreakerPolicy {
                failures: 10,
                window_ms: 30_000,
                cooldown_ms: 60_000,
                max_cooldown_ms: 300_000
            }
        );
        assert_eq!(c.dead_marks.model_not_found_ms, 6 * 3_600_000);
        assert_eq!(c.dead_marks.setup_fault_ms, 3_600_000);
        assert_eq!(c.timeouts.attempt_ms, 120_000);
        assert_eq!(c.timeouts.budget_ms, 300_000);
        assert_eq!(c.opt_out_header, "x-llm-fallback");
        assert_eq!(c.providers[0].cluster, "a");
        assert!(c.chains[0]
            .fallback_on
            .falls_over(Class::ServerError, Some(500)));
        assert!(!c.chains[0]
            .fallback_on
            .falls_over(Class::SetupFault, Some(401)));
    }

    #[test]
    fn unknown_provider_in_chain_is_named() {
        let e = errors_of(
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a","azur"]}]}"#,
        );
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("chains[0].providers[1]: unknown provider \"azur\""),
            "{e:?}"
        );
    }

    #[test]
    fn duplicate_provider_and_model_in_a_chain_is_refused_but_two_models_are_fine() {
        let e = errors_of(
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a","a"]}]}"#,
        );
        assert!(
            e[0].starts_with("chains[0].providers[1]:") && e[0].contains("twice"),
            "{e:?}"
        );
        let ok = load(
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":[{"provider":"a","model":"x"},{"provider":"a","model":"y"}]}]}"#,
        );
        assert_eq!(ok.unwrap().chains[0].entries.len(), 2);
    }

    #[test]
    fn empty_chain_and_zero_attempts_are_refused() {
        let e = errors_of(
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":[],"max_attempts":0}]}"#,
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("chains[0].providers: empty chain")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|m| m.starts_with("chains[0].max_attempts:")),
            "{e:?}"
        );
    }

    #[test]
    fn bad_durations_name_the_field() {
        let e = errors_of(
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}],"breaker":{"window":"30 parsecs"}}"#,
        );
        assert!(e[0].starts_with("breaker.window:"), "{e:?}");
        let ok = load(r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}],"breaker":{"window":"10s","cooldown":5,"max_cooldown":"2m","failures":3}}"#).unwrap();
        assert_eq!(
            ok.breaker,
            BreakerPolicy {
                failures: 3,
                window_ms: 10_000,
                cooldown_ms: 5_000,
                max_cooldown_ms: 120_000
            }
        );
    }

    #[test]
    fn failure_classes_and_statuses_are_checked() {
        let e = errors_of(
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"],"fallback_on":["server_eror",700,400,"invalid_request","client_disconnect"]}]}"#,
        );
        assert_eq!(e.len(), 5, "{e:?}");
        assert!(
            e[0].starts_with("chains[0].fallback_on[0]: unknown failure class"),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("chains[0].fallback_on[1]: status 700 is outside 100-599"),
            "{e:?}"
        );
        assert!(e[2].starts_with("chains[0].fallback_on[2]:"), "{e:?}");
        let ok = load(r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"],"fallback_on":[402,429,"5xx"]}]}"#).unwrap();
        let set = &ok.chains[0].fallback_on;
        assert!(set.falls_over(Class::SetupFault, Some(402)));
        assert!(!set.falls_over(Class::SetupFault, Some(401)));
        assert!(set.falls_over(Class::Overloaded, Some(503)));
        assert!(!set.falls_over(Class::Timeout, None));
    }

    #[test]
    fn unknown_fields_are_refused_with_their_path() {
        let e = errors_of(
            r#"{"providers":[{"name":"a","modles":["x"]}],"chains":[{"name":"c","providers":["a"]}]}"#,
        );
        assert!(
            e[0].starts_with("providers[0].modles: unknown field"),
            "{e:?}"
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let e = errors_of(
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["x"],"max_attempts":0},{"name":"d","providers":[]}]}"#,
        );
        assert_eq!(e.len(), 3, "{e:?}");
    }

    #[test]
    fn credentials_come_from_value_or_environment() {
        let env = |k: &str| (k == "KEY_B").then(|| "sk-b".to_string());
        let c = Config::from_json(
            br#"{"providers":[{"name":"a","credential":{"header":"Authorization","value":"sk-a","prefix":"Bearer "}},
                {"name":"b","credential":{"header":"x-api-key","env":"KEY_B"},"headers":{"Anthropic-Version":"2023-06-01"}}],
                "chains":[{"name":"c","providers":["a","b"]}]}"#,
            &env,
        )
        .unwrap();
        assert_eq!(
            c.providers[0].set_headers,
            vec![("authorization".to_string(), "Bearer sk-a".to_string())]
        );
        assert_eq!(
            c.providers[1].set_headers[0],
            ("x-api-key".to_string(), "sk-b".to_string())
        );
        assert_eq!(
            c.providers[1].set_headers[1],
            ("anthropic-version".to_string(), "2023-06-01".to_string())
        );
        for h in ["authorization", "x-api-key", "api-key", "anthropic-version"] {
            assert!(c.cleared_headers.iter().any(|x| x == h), "{h}");
        }
        let e = errors_of(
            r#"{"providers":[{"name":"a","credential":{"header":"x-api-key","env":"MISSING"}}],"chains":[{"name":"c","providers":["a"]}]}"#,
        );
        assert!(
            e[0].starts_with("providers[0].credential.env: environment variable MISSING"),
            "{e:?}"
        );
    }

    #[test]
    fn model_patterns_match_exact_prefix_and_any() {
        assert!(ModelPattern::parse("*").matches("anything"));
        assert!(ModelPattern::parse("gpt-*").matches("gpt-4o"));
        assert!(!ModelPattern::parse("gpt-*").matches("claude-3"));
        assert!(ModelPattern::parse("gpt-4o").matches("gpt-4o"));
        assert!(!ModelPattern::parse("gpt-4o").matches("gpt-4o-mini"));
    }

    #[test]
    fn not_json_is_refused_not_panicking() {
        assert!(load("").is_err());
        assert!(load("[]").is_err());
        assert!(load("{\"providers\":").is_err());
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Config::from_json(&bytes, &|_| None);
        }

        #[test]
        fn parser_never_panics_on_json_shaped_input(
            attempts in any::<i64>(), failures in any::<i64>(), window in ".{0,12}",
            trigger in prop_oneof![any::<i64>().prop_map(|v| v.to_string()), "\"[a-z0-9_]{0,12}\""],
        ) {
            let json = format!(
                r#"{{"providers":[{{"name":"a"}}],"chains":[{{"name":"c","providers":["a"],"max_attempts":{attempts},"fallback_on":[{trigger}]}}],"breaker":{{"failures":{failures},"window":{window:?}}}}}"#
            );
            let _ = Config::from_json(json.as_bytes(), &|_| None);
        }
    }
}
