//! What users write: the serde model of the plugin configuration (JSON in Envoy, YAML in the
//! `llm-failover` CLI). Validation into [`super::Config`] lives in the sibling modules.
//!
//! `RawConfig`'s `Deserialize` is written in [`read`] (one reader of a table of the sections'
//! fields, what serde's derive gave byte for byte, in less code): a field added here is added
//! to its section's table there, with its default. Every section refuses unknown fields.

use serde::Deserialize;

mod read;
use std::collections::BTreeMap;

/// Which half of the filter a plugin instance is (docs/internals.md "How attempts are carried", router mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Before the router: plans each request's chain, writes the public response headers.
    #[default]
    Downstream,
    /// On every provider cluster: rewrites and classifies each attempt, feeds the breaker.
    Upstream,
}

/// How the route picks each attempt's cluster (set by the renderer from the target Envoy
/// version, never written by users).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Envoy >= 1.39: one filter-state slot per attempt, `refresh_cluster_on_retry`.
    #[default]
    Slots,
    /// Envoy 1.36-1.38: one grouping cluster per provider order, named in filter state
    /// (see `crate::group`).
    Groups,
}

#[inline]
fn default_attempts() -> u32 {
    3
}
#[inline]
fn default_any_model() -> Vec<String> {
    vec!["*".to_string()]
}

#[derive(Debug, Clone)]
pub struct RawConfig {
    pub role: Role,
    pub routing: Routing,
    /// Set by the renderer, false for Envoy 1.36: the upstream role may hold a failing answer
    /// (or a stream's first event) to read its body before deciding (behaviour.md 3). Envoy 1.36.4
    /// crashes when an attempt whose answer an upstream filter held is retried.
    pub hold_answers: bool,
    /// Set by the renderer for Envoy 1.36-1.38: the largest request body, which the downstream
    /// role answers `413` above (there Envoy's own limit is twice it; docs/older-envoys.md).
    pub body_limit: Option<u64>,
    /// Set by the renderer with `--otel-collector`: the downstream role writes the request's
    /// and the answer's model into filter state for the OpenTelemetry access log
    /// (docs/observability.md); off, the request pays nothing for it.
    pub log_models: bool,
    /// An OpenAI Chat stream whose caller did not ask for its usage: a same-API attempt asks
    /// the provider for it and takes the usage chunk out of the caller's stream, so its tokens
    /// count (docs/behaviour.md section 15); `false` sends such requests as they are.
    pub ask_stream_usage: bool,
    pub providers: Vec<RawProvider>,
    pub chains: Vec<RawChain>,
    pub breaker: RawBreaker,
    pub dead_marks: RawDeadMarks,
    pub timeouts: RawTimeouts,
    /// Request header that limits a request to its first provider when set to "off".
    pub opt_out_header: String,
    /// Request header naming the caller (set by an authentication filter that runs before
    /// this one), checked against each provider's `callers`.
    pub caller_header: Option<String>,
    /// The caller's own gateway credential headers: removed from every attempt.
    pub gateway_credential_headers: Vec<String>,
    /// Path answered by the filter itself with the providers' health (off when absent).
    pub status_path: Option<String>,
    /// Path answered by the filter itself with the models the chains serve (OpenAI's
    /// `GET /v1/models`, and `/{id}` below it); `""` turns it off.
    pub models_path: String,
    /// Path answered `200 serving` by the filter itself, no key needed, contacting no provider
    /// (a liveness check for load balancers; docs/behaviour.md section 10); `""` turns it off.
    pub liveness_path: String,
    /// The fleet's store (docs/configuration.md "fleet"): budgets and breaker counts shared by
    /// every replica through Envoy's rate-limit service. Absent: everything per instance.
    pub fleet: Option<RawFleet>,
    /// Callers (values of `caller_header`) known by name: each may have a token budget of its
    /// own, and each is a `caller` label of the token metric (docs/behaviour.md section 15).
    pub callers: Vec<RawCaller>,
}

/// `callers: [{name: team-a, budget: {tokens: 100000, window: 24h}}]`.
#[derive(Debug, Clone)]
pub struct RawCaller {
    /// The `caller_header` value.
    pub name: String,
    /// At most this many tokens per window for this caller's requests, whichever provider
    /// answers them.
    pub budget: Option<RawBudget>,
}

/// `fleet: {address: 127.0.0.1:8081}` or `fleet: {cluster: ratelimit}`.
#[derive(Debug, Clone)]
pub struct RawFleet {
    /// The rate-limit service's `host:port` (`render` writes its cluster).
    pub address: Option<String>,
    /// The Envoy cluster that reaches the service (HTTP/2); defaults to the one `render`
    /// writes for `address`.
    pub cluster: Option<String>,
    /// The service's domain the descriptors go to.
    pub domain: String,
    /// How often one worker of each Envoy syncs.
    pub sync: u64,
    /// How long a sync waits for the service.
    pub timeout: u64,
    /// `open`: a store that fails leaves each replica on its own counts; `closed`: budgeted
    /// providers and callers count as spent while it fails.
    pub on_unavailable: String,
}

impl Default for RawFleet {
    #[inline]
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

/// `gateway_credential_headers` when the configuration sets none.
pub const DEFAULT_GATEWAY_CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

#[derive(Debug, Clone)]
pub struct RawProvider {
    pub name: String,
    /// Envoy cluster that reaches this provider; defaults to `name`.
    pub cluster: Option<String>,
    /// Models this provider serves (exact names, `prefix*`, or `*`).
    pub models: Vec<String>,
    pub credential: Option<RawCredential>,
    /// Extra headers set on every attempt to this provider (e.g. `anthropic-version`).
    pub headers: BTreeMap<String, String>,
    /// `:authority` for attempts to this provider.
    pub authority: Option<String>,
    /// Prepended to the request path for this provider (e.g. "/openai").
    pub path_prefix: Option<String>,
    /// Callers allowed to use this provider; empty means everyone.
    pub callers: Vec<String>,
    pub labels: BTreeMap<String, String>,
    /// Caller headers this provider receives besides the default list (names or `prefix*`),
    /// or `all`.
    pub forward_headers: Option<RawForward>,
    /// The API this provider speaks (`openai` or `anthropic`): a caller of the other API is
    /// translated for it (behaviour.md 13). Unset: whatever the caller speaks, never translated.
    pub api: Option<String>,
    /// `max_tokens` written into a request translated for an Anthropic provider when the
    /// caller set none (Messages requires it).
    pub max_tokens: Option<u32>,
    /// Where it keeps the data it is sent (`us`, `eu`, `apac`, `global`), for chains with
    /// `same_residency`. Unset: a cloud's region decides (Bedrock, Vertex AI), else unknown.
    pub residency: Option<String>,
    /// At most this many tokens per window (docs/behaviour.md section 15): spent, the provider
    /// is skipped (`budget_exhausted`) until the window rolls over.
    pub budget: Option<RawBudget>,
    /// Skip it when its answers announce fewer tokens left than this (docs/behaviour.md
    /// section 4); 0: only when none are left.
    pub reserve_tokens: u64,
}

/// `budget: {tokens: 2000000, window: 24h}`.
#[derive(Debug, Clone)]
pub struct RawBudget {
    pub tokens: u64,
    pub window: u64,
}

/// `forward_headers`: a list of extra names, or the word `all`.
#[derive(Debug, Clone)]
pub enum RawForward {
    Names(Vec<String>),
    Word(String),
}

#[derive(Debug, Clone)]
pub struct RawCredential {
    /// Header that carries the key, e.g. `authorization`, `x-api-key`, `api-key`.
    pub header: String,
    /// The value itself (fine for tests; prefer `env` in production).
    pub value: Option<String>,
    /// Environment variable holding the key (pass it to the VM with
    /// `vm_config.environment_variables.host_env_keys`).
    pub env: Option<String>,
    /// Put before the key, e.g. "Bearer ".
    pub prefix: String,
}

#[derive(Debug, Clone)]
pub struct RawChain {
    pub name: String,
    /// Requested models this chain serves (exact, `prefix*`, `*`).
    pub models: Vec<String>,
    /// Envoy route names this chain is for; empty means every route.
    pub routes: Vec<String>,
    /// Request paths this chain is for (exact, `prefix*`, `*`; the query is ignored); empty
    /// means every path.
    pub paths: Vec<String>,
    /// Callers (values of `caller_header`) this chain is for; empty means every caller. A
    /// chain naming the caller wins over one that names nobody, whatever their order.
    pub callers: Vec<String>,
    pub providers: Vec<RawChainEntry>,
    pub max_attempts: u32,
    /// Classes (`"server_error"`) and statuses (`429`, `"5xx"`) that move to the next provider.
    pub fallback_on: Option<Vec<RawTrigger>>,
    /// Put providers with an open breaker or a dead mark last instead of dropping them.
    pub try_last: bool,
    /// When every attempt failed: answer `503 fallbacks_exhausted` instead of the last error.
    pub fallbacks_exhausted: bool,
    /// Larger-context entries: a `context_window_exceeded` answer continues the walk here
    /// instead of at the next provider (behaviour.md 3).
    pub context_window: Vec<RawChainEntry>,
    /// Entries for a `content_filtered` answer; without them that answer goes to the caller.
    pub content_policy: Vec<RawChainEntry>,
    /// Retry a failed attempt once on the same provider before moving on (behaviour.md 5):
    /// `{back_off, max_retry_after}`, `{}` for the defaults. (An object only: an untagged
    /// `true | {...}` would cost the module about 5 KB of serde's buffering.)
    pub retry_in_place: Option<RawRetrySettings>,
    /// Send a request only to entries whose provider has the residency of its first entry's
    /// (an unknown residency never matches).
    pub same_residency: bool,
    /// Race the first two entries (docs/behaviour.md 5, hedging): the second starts, without
    /// cancelling the first, when the first has produced no output this long (ms).
    pub hedge_after: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct RawRetrySettings {
    /// Wait before retrying a connection error, server error or overload.
    pub back_off: u64,
    /// A 429 is retried in place only when its `Retry-After` asks for no more than this.
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

/// One chain entry: `provider` (a provider's name, which is all a bare string entry says), the
/// model it is sent (`None`: the caller's) and what that model takes. Read by `read::Entry`: a
/// string or a mapping of exactly these fields, so a misspelt field (`modle`) or a bad value
/// inside the entry is refused naming that field, never read as "no model".
#[derive(Debug, Clone)]
pub struct RawChainEntry {
    pub provider: String,
    pub model: Option<String>,
    /// What this entry's model takes (behaviour.md 2.4); unknown = capable.
    pub capabilities: Option<RawCapabilities>,
    /// The reasoning effort this entry's requests are sent with (`minimal`, `low`, `medium`,
    /// `high`), in its provider's dialect (`entry_settings`).
    pub effort: Option<String>,
    /// The `max_tokens` this entry's requests are sent with, in its provider's dialect.
    pub max_tokens: Option<u32>,
    /// A group of equal entries at this position (`provider` then unset): one is picked per
    /// request, the others tried next (docs/configuration.md "Groups of equal deployments").
    pub group: Vec<RawChainEntry>,
    /// The group members' weights, in the members' order; `None`: equal.
    pub weights: Option<Vec<u32>>,
    /// How a group picks: `weighted` (the default) or `least_busy`.
    pub policy: Option<String>,
}

/// What a chain entry is, in serde's "expected ..." of a refused one.
pub(super) const ENTRY_EXPECTED: &str =
    "a provider's name or a mapping {provider, model, capabilities, effort, max_tokens} or {group, weights, policy}";

/// A chain entry's `capabilities`: what its model takes. An unset field means capable.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCapabilities {
    pub vision: Option<bool>,
    pub tools: Option<bool>,
    /// The model's context window in tokens.
    pub context_window: Option<u64>,
}

#[derive(Debug, Clone)]
pub enum RawTrigger {
    Status(i64),
    Name(String),
}

#[derive(Debug, Clone)]
pub struct RawBreaker {
    pub failures: u32,
    pub window: u64,
    pub cooldown: u64,
    pub max_cooldown: u64,
    /// With `fleet`: the fleet's failures of a provider inside `fleet_window` that open it on
    /// every replica (0: off).
    pub fleet_failures: u32,
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

#[derive(Debug, Clone)]
pub struct RawDeadMarks {
    pub model_not_found: u64,
    pub setup_fault: u64,
    /// How long a spent quota marks the provider dead when the answer names no reset time.
    pub quota_exhausted: u64,
    /// The longest a provider whose answer announced an empty quota is skipped
    /// (`rate_limited_ahead`, docs/behaviour.md section 4); 0 turns the skip off.
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

#[derive(Debug, Clone)]
pub struct RawTimeouts {
    /// Time to response headers for one attempt (Envoy's `per_try_timeout`).
    pub attempt: u64,
    /// No bytes for this long while waiting ends the attempt (`per_try_idle_timeout`); 0 = off.
    pub stall: u64,
    /// Total time across attempts: no new attempt starts with less than `min_remaining` left.
    pub budget: u64,
    pub min_remaining: u64,
    /// A streamed attempt with no output this long after its start falls over as a timeout
    /// (behaviour.md 5); 0 = off.
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
