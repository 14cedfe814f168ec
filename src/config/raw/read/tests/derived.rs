//! Serde's derived reading of the configuration model as it was before `read` (raw.rs at
//! 2966fd4, doc comments left out): the oracle `read` is held to. The same type names, so that
//! both parse results print alike with `{:?}`.
#![allow(dead_code)]

use crate::config::{Role, Routing};
use crate::duration::serde_duration;
use serde::Deserialize;
use std::collections::BTreeMap;

#[inline]
fn default_attempts() -> u32 {
    3
}
#[inline]
fn default_any_model() -> Vec<String> {
    vec!["*".to_string()]
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub role: Role,
    #[serde(default)]
    pub routing: Routing,
    #[serde(default = "RawConfig::default_hold_answers")]
    pub hold_answers: bool,
    #[serde(default)]
    pub body_limit: Option<u64>,
    #[serde(default)]
    pub log_models: bool,
    #[serde(default = "RawConfig::default_ask_stream_usage")]
    pub ask_stream_usage: bool,
    pub providers: Vec<RawProvider>,
    pub chains: Vec<RawChain>,
    #[serde(default)]
    pub breaker: RawBreaker,
    #[serde(default)]
    pub dead_marks: RawDeadMarks,
    #[serde(default)]
    pub timeouts: RawTimeouts,
    #[serde(default = "RawConfig::default_opt_out_header")]
    pub opt_out_header: String,
    #[serde(default)]
    pub caller_header: Option<String>,
    #[serde(default = "RawConfig::default_gateway_credential_headers")]
    pub gateway_credential_headers: Vec<String>,
    #[serde(default)]
    pub status_path: Option<String>,
    #[serde(default = "RawConfig::default_models_path")]
    pub models_path: String,
    #[serde(default = "RawConfig::default_liveness_path")]
    pub liveness_path: String,
    #[serde(default)]
    pub fleet: Option<RawFleet>,
    #[serde(default)]
    pub callers: Vec<RawCaller>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawFleet {
    pub address: Option<String>,
    pub cluster: Option<String>,
    pub domain: String,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub sync: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub timeout: u64,
    pub on_unavailable: String,
}

impl Default for RawFleet {
    fn default() -> Self {
        RawFleet {
            address: None,
            cluster: None,
            domain: "llm-failover".to_string(),
            sync: 1_000,
            timeout: 200,
            on_unavailable: "open".to_string(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCaller {
    pub name: String,
    #[serde(default)]
    pub budget: Option<RawBudget>,
}

impl RawConfig {
    #[inline]
    fn default_hold_answers() -> bool {
        true
    }
    #[inline]
    fn default_ask_stream_usage() -> bool {
        true
    }
    #[inline]
    fn default_opt_out_header() -> String {
        "x-llm-fallback".to_string()
    }
    #[inline]
    fn default_models_path() -> String {
        "/v1/models".to_string()
    }
    #[inline]
    fn default_liveness_path() -> String {
        "/".to_string()
    }
    #[inline]
    fn default_gateway_credential_headers() -> Vec<String> {
        DEFAULT_GATEWAY_CREDENTIAL_HEADERS.map(String::from).into()
    }
}

const DEFAULT_GATEWAY_CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    pub name: String,
    #[serde(default)]
    pub cluster: Option<String>,
    #[serde(default = "default_any_model")]
    pub models: Vec<String>,
    #[serde(default)]
    pub credential: Option<RawCredential>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub authority: Option<String>,
    #[serde(default)]
    pub path_prefix: Option<String>,
    #[serde(default)]
    pub callers: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub forward_headers: Option<RawForward>,
    #[serde(default)]
    pub api: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub residency: Option<String>,
    #[serde(default)]
    pub budget: Option<RawBudget>,
    #[serde(default)]
    pub reserve_tokens: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    pub tokens: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub window: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawForward {
    Names(Vec<String>),
    Word(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCredential {
    pub header: String,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub env: Option<String>,
    #[serde(default)]
    pub prefix: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChain {
    pub name: String,
    #[serde(default = "default_any_model")]
    pub models: Vec<String>,
    #[serde(default)]
    pub routes: Vec<String>,
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub callers: Vec<String>,
    #[serde(deserialize_with = "entries")]
    pub providers: Vec<RawChainEntry>,
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    #[serde(default)]
    pub fallback_on: Option<Vec<RawTrigger>>,
    #[serde(default)]
    pub try_last: bool,
    #[serde(default)]
    pub fallbacks_exhausted: bool,
    #[serde(default, deserialize_with = "entries")]
    pub context_window: Vec<RawChainEntry>,
    #[serde(default, deserialize_with = "entries")]
    pub content_policy: Vec<RawChainEntry>,
    #[serde(default)]
    pub retry_in_place: Option<RawRetrySettings>,
    #[serde(default)]
    pub same_residency: bool,
    #[serde(default, deserialize_with = "opt_duration")]
    pub hedge_after: Option<u64>,
}

fn opt_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    serde_duration::deserialize(d).map(Some)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRetrySettings {
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub back_off: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub max_retry_after: u64,
}

impl Default for RawRetrySettings {
    #[inline]
    fn default() -> Self {
        RawRetrySettings {
            back_off: 500,
            max_retry_after: 2_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChainEntry {
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub capabilities: Option<RawCapabilities>,
    #[serde(default)]
    pub effort: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default, deserialize_with = "entries")]
    pub group: Vec<RawChainEntry>,
    #[serde(default)]
    pub weights: Option<Vec<u32>>,
    #[serde(default)]
    pub policy: Option<String>,
}

const ENTRY_EXPECTED: &str =
    "a provider's name or a mapping {provider, model, capabilities, effort, max_tokens} or {group, weights, policy}";

#[inline]
fn entries<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<RawChainEntry>, D::Error> {
    struct Entry(RawChainEntry);
    impl<'de> Deserialize<'de> for Entry {
        #[inline]
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(EntryVisitor).map(Entry)
        }
    }
    struct EntryVisitor;
    impl<'de> serde::de::Visitor<'de> for EntryVisitor {
        type Value = RawChainEntry;
        #[inline]
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(ENTRY_EXPECTED)
        }
        #[inline]
        fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<RawChainEntry, E> {
            Ok(RawChainEntry {
                provider: name.to_string(),
                model: None,
                capabilities: None,
                effort: None,
                max_tokens: None,
                group: Vec::new(),
                weights: None,
                policy: None,
            })
        }
        #[inline]
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            map: A,
        ) -> Result<RawChainEntry, A::Error> {
            RawChainEntry::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    let list: Vec<Entry> = Deserialize::deserialize(d)?;
    Ok(list.into_iter().map(|e| e.0).collect())
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCapabilities {
    #[serde(default)]
    pub vision: Option<bool>,
    #[serde(default)]
    pub tools: Option<bool>,
    #[serde(default)]
    pub context_window: Option<u64>,
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
    pub fleet_failures: u32,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub fleet_window: u64,
}

impl Default for RawBreaker {
    #[inline]
    fn default() -> Self {
        RawBreaker {
            failures: 10,
            window: 30_000,
            cooldown: 60_000,
            max_cooldown: 300_000,
            fleet_failures: 0,
            fleet_window: 60_000,
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
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub quota_exhausted: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub rate_limited_ahead: u64,
}

impl Default for RawDeadMarks {
    #[inline]
    fn default() -> Self {
        RawDeadMarks {
            model_not_found: 6 * 3_600_000,
            setup_fault: 3_600_000,
            quota_exhausted: 3_600_000,
            rate_limited_ahead: 60_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTimeouts {
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub attempt: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub stall: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub budget: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub min_remaining: u64,
    #[serde(deserialize_with = "serde_duration::deserialize")]
    pub first_token: u64,
}

impl Default for RawTimeouts {
    #[inline]
    fn default() -> Self {
        RawTimeouts {
            attempt: 120_000,
            stall: 0,
            budget: 300_000,
            min_remaining: 10_000,
            first_token: 0,
        }
    }
}
