//! The validated configuration the filter uses: ready-to-use types, no serde.

use super::{Role, Routing};
use crate::classify::{Class, FailoverSet};
use crate::ids::{ChainId, EntryId, ProviderId};
use crate::translate::{Api, FamilyEndpoint};
use std::collections::BTreeMap;

pub use crate::pattern::{any_matches, ModelPattern};

#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub cluster: String,
    pub models: Vec<ModelPattern>,
    /// Headers this provider's attempts carry (its credential first, then extra headers).
    pub set_headers: Vec<(String, String)>,
    /// The first of `set_headers` is its credential.
    pub credential: bool,
    pub authority: Option<String>,
    pub path_prefix: Option<String>,
    pub callers: Vec<String>,
    pub labels: BTreeMap<String, String>,
    /// Which of the caller's headers this provider receives (docs/behaviour.md section 7).
    pub forward: super::forward::Forward,
    /// The API it speaks (behaviour.md 13); `None`: whatever the caller speaks (never translated).
    pub api: Option<Api>,
    /// `max_tokens` for a request translated to Anthropic Messages that sets none.
    pub max_tokens: u32,
    /// A cloud's envelope around the API (behaviour.md 13): Azure OpenAI, Bedrock, Vertex AI, Gemini.
    pub envelope: Option<crate::envelope::Envelope>,
    /// Where it keeps the data it is sent: declared, or from a cloud's region; `None`: unknown.
    pub residency: Option<crate::residency::Residency>,
    /// Its token budget per window (docs/behaviour.md section 15), if it has one.
    pub budget: Option<Budget>,
    /// Skipped when its answers announce fewer tokens left than this (`announced`).
    pub reserve_tokens: u64,
}

impl Provider {
    /// The API an attempt of a caller speaking `caller` (on `path`) is sent in, when it
    /// differs from the caller's (the attempt is translated, or skipped where no translation
    /// exists); `None` when nothing is translated. An endpoint of the provider's own family
    /// that has no translation (OpenAI's Responses, embeddings, completions to a provider
    /// declaring `api: openai`) is the same dialect: sent as it is. `path` is read only for
    /// callers of such endpoints (`caller` `None`).
    #[inline]
    pub fn translates(&self, caller: Option<Api>, path: &str) -> Option<Api> {
        // Inlined where it is asked (planning, every attempt): a provider that declares no API
        // stops at this test, without a call.
        let api = self.api?;
        self.translates_from(api, caller, path)
    }

    /// [`Provider::translates`] for a provider that declares `api`.
    fn translates_from(&self, api: Api, caller: Option<Api>, path: &str) -> Option<Api> {
        let same = match caller {
            Some(Api::OpenAiResponses) => {
                api == Api::OpenAiResponses || self.serves_as_is(api, FamilyEndpoint::Responses)
            }
            Some(caller) => caller == api,
            None => Api::family_endpoint(path).is_some_and(|e| self.serves_as_is(api, e)),
        };
        (!same).then_some(api)
    }

    /// Whether this provider (speaking `api`) serves one of OpenAI's other endpoints as it
    /// is: OpenAI and Azure OpenAI serve Responses (Azure on its v1 API, a `path_prefix`
    /// without `api-version`), embeddings and completions; Gemini's OpenAI endpoint serves
    /// embeddings only; Anthropic's clouds none.
    fn serves_as_is(&self, api: Api, endpoint: FamilyEndpoint) -> bool {
        use crate::envelope::Envelope;
        use FamilyEndpoint as E;
        if api != Api::OpenAiChat {
            return false;
        }
        match (self.envelope, endpoint) {
            (None, _) | (Some(Envelope::AzureOpenAi), E::Embeddings | E::Completions) => true,
            (Some(Envelope::AzureOpenAi), E::Responses) => !self
                .path_prefix
                .as_deref()
                .unwrap_or_default()
                .contains('?'),
            (Some(Envelope::Gemini), E::Embeddings) => true,
            _ => false,
        }
    }

    /// The caller's headers it has its own value for, which never reach it (behaviour.md 7): those it
    /// sets, and those its envelope writes into the body.
    pub fn own_names(&self) -> impl Iterator<Item = &str> {
        let envelope = self.envelope.map_or(&[][..], |e| e.own_headers());
        (self.set_headers.iter().map(|(n, _)| n.as_str())).chain(envelope.iter().copied())
    }

    pub fn owns(&self, name: &str) -> bool {
        self.own_names().any(|n| n == name)
    }

    /// Whether it sets `name` beside its credential (from `headers`, or the default
    /// `anthropic-version`): the caller's own value goes to the providers that take it.
    pub fn sets_extra(&self, name: &str) -> bool {
        let mut extra = self.set_headers.iter().skip(usize::from(self.credential));
        extra.any(|(n, _)| n == name)
    }
}

/// What a chain entry's model takes (behaviour.md 2.4); `None` = unknown, which counts as capable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub vision: Option<bool>,
    pub tools: Option<bool>,
    /// Context window in tokens.
    pub context_window: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainEntry {
    pub provider: ProviderId,
    /// Model name sent to this provider; `None` keeps the requested model.
    pub model: Option<String>,
    pub capabilities: Capabilities,
    /// The effort and `max_tokens` its requests are sent with (docs/behaviour.md section 7).
    pub settings: crate::translate::entry_settings::EntrySettings,
}

impl ChainEntry {
    /// The same destination (provider and model): never tried twice in one walk (behaviour.md 2.7).
    pub fn same_destination(&self, other: &ChainEntry) -> bool {
        self.provider == other.provider && self.model == other.model
    }
}

/// An alternative list a chain names for one class (behaviour.md 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AltList {
    ContextWindow,
    ContentPolicy,
}

impl AltList {
    /// The list a class sends the walk to, if any.
    pub fn for_class(class: Class) -> Option<AltList> {
        match class {
            Class::ContextWindowExceeded => Some(AltList::ContextWindow),
            Class::ContentFiltered => Some(AltList::ContentPolicy),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Chain {
    pub name: String,
    pub models: Vec<ModelPattern>,
    pub routes: Vec<String>,
    /// Request path patterns (same syntax as models); empty = every path.
    pub paths: Vec<ModelPattern>,
    /// Callers this chain is for; empty = a generic chain.
    pub callers: Vec<String>,
    /// The chain's providers (`..main_len`), then its alternative lists' entries, so every
    /// entry a walk can reach has one index (a plan slot's `entry`).
    pub entries: Vec<ChainEntry>,
    /// How many of `entries` are the chain's own providers, walked in order.
    pub main_len: usize,
    /// Groups of equal entries among the chain's own providers, in chain order; each
    /// member is one of `entries`, a group's members consecutive (docs/behaviour.md 2.10).
    pub groups: Vec<EntryGroup>,
    /// Entries of the `context_window` list, in order.
    pub context_window: Vec<EntryId>,
    /// Entries of the `content_policy` list, in order.
    pub content_policy: Vec<EntryId>,
    pub max_attempts: usize,
    pub fallback_on: FailoverSet,
    /// Retry a failed attempt once on the same provider before moving on.
    pub retry_in_place: Option<RetryInPlace>,
    pub try_last: bool,
    pub fallbacks_exhausted: bool,
    /// Only entries of the request's first entry's residency (docs/behaviour.md 2.4).
    pub same_residency: bool,
    /// Hedging (docs/behaviour.md 5): a plan of two or more slots races its first two, the
    /// second started when the first has produced no output this long (ms).
    pub hedge_after_ms: Option<u64>,
    /// An entry is on a Gemini-native provider, whose tool calls reach the caller with their
    /// `thoughtSignature` in the id (`translate::common::SIGNATURE`): a same-API attempt to
    /// another provider sends them without it (`attempt::request::Mend::unsign`).
    pub signs_calls: bool,
    /// An entry is on an OpenAI Responses provider, which gives a Messages caller its reasoning
    /// as thinking blocks of ours (`llm-failover:openai:`, docs/translation.md "Reasoning"): a
    /// Messages caller's same-API attempt takes them out (`attempt::request::Mend::unwrap`).
    pub wraps_thinking: bool,
    /// An entry is on an Anthropic Messages provider (Anthropic, Bedrock, Vertex AI), which
    /// gives a Responses caller its thinking as reasoning items of ours
    /// (`llm-failover:anthropic:`): a Responses caller's same-API attempt takes them out.
    pub wraps_reasoning: bool,
}

impl Chain {
    /// The chain's own providers, in walk order.
    pub fn main_entries(&self) -> &[ChainEntry] {
        self.entries.get(..self.main_len).unwrap_or(&self.entries)
    }

    /// The entry `id` names; `None` for an id out of range.
    pub fn entry(&self, id: EntryId) -> Option<&ChainEntry> {
        self.entries.get(id.index())
    }

    /// Every entry with its id: the chain's own providers, then the lists' entries.
    pub fn entry_ids(&self) -> impl Iterator<Item = (EntryId, &ChainEntry)> {
        self.entries
            .iter()
            .enumerate()
            .map_while(|(i, e)| Some((EntryId::new(i)?, e)))
    }

    /// The chain's own providers with their ids, in walk order.
    pub fn main_ids(&self) -> impl Iterator<Item = (EntryId, &ChainEntry)> {
        self.entry_ids().take(self.main_len)
    }

    /// The entries of an alternative list.
    pub fn list(&self, list: AltList) -> &[EntryId] {
        match list {
            AltList::ContextWindow => &self.context_window,
            AltList::ContentPolicy => &self.content_policy,
        }
    }

    /// Does this chain name any alternative list?
    pub fn has_lists(&self) -> bool {
        !self.context_window.is_empty() || !self.content_policy.is_empty()
    }

    /// The group entry `id` is a member of, if any.
    pub fn group_of(&self, id: EntryId) -> Option<&EntryGroup> {
        (self.groups.iter()).find(|g| g.members().contains(&id.index()))
    }

    /// The place in the chain's `providers` list, as written, of the entry at `index` (a
    /// group's members all at the group's).
    pub fn written_position(&self, index: usize) -> usize {
        let stands =
            |i: &usize| (self.groups.iter()).all(|g| g.first == *i || !g.members().contains(i));
        (0..index).filter(stands).count()
    }

    /// The field of the chain's own entry at `index` as written: `providers[k]`, or a group
    /// member's `providers[k].group[m]`.
    pub fn entry_field(&self, index: usize) -> String {
        let k = self.written_position(index);
        match EntryId::new(index).and_then(|id| self.group_of(id)) {
            Some(g) => format!("providers[{k}].group[{}]", index - g.first),
            None => format!("providers[{k}]"),
        }
    }

    /// Where entry `id` stands in the chain's walk order: a group's members all stand at
    /// its first member's place.
    pub fn position(&self, id: EntryId) -> usize {
        self.group_of(id).map_or(id.index(), |g| g.first)
    }
}

/// Several equal entries at one position of a chain (behaviour.md 2.10): one is picked per
/// request, the others are tried next, each at most once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryGroup {
    /// Its first member's index in `Chain::entries`; the members follow it.
    pub first: usize,
    /// Each member's weight (at least 1), in member order.
    pub weights: Vec<u32>,
    pub policy: GroupPolicy,
}

impl EntryGroup {
    /// The members' indices in `Chain::entries`.
    pub fn members(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.weights.len()
    }

    /// Member `i`'s share of the requests, as its weight says, in tenths of a percent
    /// (`least_busy`: an even share, before load moves it); [`percent`] writes it.
    pub fn share_tenths(&self, i: usize) -> u64 {
        let total: u64 = self.weights.iter().map(|&w| u64::from(w)).sum();
        let w = u64::from(self.weights.get(i).copied().unwrap_or(0));
        (w * 1000 + total / 2).checked_div(total).unwrap_or(0)
    }
}

/// Tenths of a percent as a number with one decimal: `500` is `"50.0"`.
pub fn percent(tenths: u64) -> String {
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// How a group picks the member a request goes to first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    /// At random, in proportion to the weights, among the members that may take it.
    Weighted,
    /// The member with the fewest requests in flight across every worker.
    LeastBusy,
}

impl GroupPolicy {
    pub const NAMES: [&'static str; 2] = ["weighted", "least_busy"];

    pub fn parse(word: &str) -> Option<GroupPolicy> {
        match word {
            "weighted" => Some(GroupPolicy::Weighted),
            "least_busy" => Some(GroupPolicy::LeastBusy),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GroupPolicy::Weighted => "weighted",
            GroupPolicy::LeastBusy => "least_busy",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    pub failures: u32,
    pub window_ms: u64,
    pub cooldown_ms: u64,
    pub max_cooldown_ms: u64,
    /// With the fleet's store: the fleet's failures of a provider inside `fleet_window_ms`
    /// that open it on every replica (0: off; docs/behaviour.md section 15).
    pub fleet_failures: u32,
    pub fleet_window_ms: u64,
}

/// The fleet's store (`fleet:`): Envoy's rate-limit service, reached through `cluster`
/// (docs/configuration.md "fleet").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub cluster: String,
    /// `host:port` when given (the renderer writes `cluster` for it).
    pub address: Option<String>,
    pub domain: String,
    pub sync_ms: u64,
    pub timeout_ms: u64,
    /// `on_unavailable: closed`: budgets count as spent while the store fails.
    pub closed: bool,
}

/// The cluster `render` writes for `fleet.address` when the file names none.
pub const FLEET_CLUSTER: &str = "llm_failover_fleet";

/// A window the rate-limit service counts in (its `RateLimitUnit`, no multiplier): the only
/// windows budgets and the fleet's breaker counts may have with the store on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WindowUnit {
    Second = 1,
    Minute = 2,
    Hour = 3,
    Day = 4,
    Month = 5,
    Year = 6,
    /// 7 in Envoy's enum (after YEAR); the service counts week windows.
    Week = 7,
}

/// What a refused window's message lists.
pub const FLEET_WINDOWS: &str = "1s, 1m, 1h, 24h, 7d, 30d (the service's month) or 365d (its year)";

impl WindowUnit {
    /// The unit a window of `ms` is, if it is one (the service's month is 30 days, its year
    /// 365, both aligned to the Unix epoch as every window here is).
    pub fn of(ms: u64) -> Option<WindowUnit> {
        const DAY: u64 = 86_400_000;
        Some(match ms {
            1_000 => WindowUnit::Second,
            60_000 => WindowUnit::Minute,
            3_600_000 => WindowUnit::Hour,
            DAY => WindowUnit::Day,
            _ if ms == 7 * DAY => WindowUnit::Week,
            _ if ms == 30 * DAY => WindowUnit::Month,
            _ if ms == 365 * DAY => WindowUnit::Year,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadMarkPolicy {
    pub model_not_found_ms: u64,
    pub setup_fault_ms: u64,
    pub quota_exhausted_ms: u64,
    /// The longest an announced empty quota skips a provider (`announced`); 0: never.
    pub rate_limited_ahead_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub attempt_ms: u64,
    pub stall_ms: u64,
    /// The request's total time (the file's `timeouts.budget`; "budget" in the code means
    /// tokens, `budget.rs`).
    pub total_time_ms: u64,
    pub min_remaining_ms: u64,
    /// First-token timeout of streamed attempts (behaviour.md 5); 0 = off.
    pub first_token_ms: u64,
}

impl Timeouts {
    /// Whether another attempt may start `spent_ms` into the request (docs/behaviour.md section 5): not
    /// with less than `min_remaining` of the budget left. A budget of 0 means none. The one
    /// rule for every attempt, whether the filter asks for it (a marked answer) or Envoy
    /// starts it by itself (refused connection, reset, per-try timeout).
    pub fn room_for_attempt(&self, spent_ms: u64) -> bool {
        self.total_time_ms == 0
            || spent_ms.saturating_add(self.min_remaining_ms) <= self.total_time_ms
    }

    /// The first-token timeout that applies to a request (`stream`: it asked for a stream).
    pub fn first_token(&self, stream: bool) -> Option<u64> {
        (stream && self.first_token_ms > 0).then_some(self.first_token_ms)
    }

    /// How long Envoy waits for an attempt's response headers (`per_try_timeout`): for a
    /// streamed request with a first-token timeout, at most that (no headers, no output);
    /// the downstream role sets it per request (`x-envoy-upstream-rq-per-try-timeout-ms`).
    pub fn headers_wait_ms(&self, stream: bool) -> u64 {
        self.first_token(stream)
            .map_or(self.attempt_ms, |t| t.min(self.attempt_ms))
    }
}

/// In-place retry of a chain (behaviour.md 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryInPlace {
    pub back_off_ms: u64,
    pub max_retry_after_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub role: Role,
    pub routing: Routing,
    /// The upstream role may hold answers to read their bodies (behaviour.md 3); see
    /// [`super::RawConfig::hold_answers`].
    pub hold_answers: bool,
    /// Bodies larger than this are answered `413` by the downstream role (Envoy < 1.39).
    pub body_limit: Option<u64>,
    /// Write the models into filter state ([`super::RawConfig::log_models`]).
    pub log_models: bool,
    /// Ask an OpenAI Chat stream's usage for a caller that did not
    /// ([`super::RawConfig::ask_stream_usage`]).
    pub ask_stream_usage: bool,
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
    /// The caller's own gateway credential headers (lower case): the downstream role removes
    /// them before routing, so no attempt carries them even where the upstream role is missing.
    pub gateway_credential_headers: Vec<String>,
    pub status_path: Option<String>,
    /// Identifies this configuration whatever the role (see [`super::fingerprint`]): the plan
    /// carries it, and an upstream role running another configuration refuses the attempt.
    pub fingerprint: u64,
    /// Some chain names callers: chain selection must look past the first generic match.
    pub caller_chains: bool,
    /// Bit `i`: provider `i` is in a `least_busy` group ([`Config::counts_in_flight`]).
    pub busy_counted: u64,
    /// Where the filter answers `GET /v1/models` itself (`None`: turned off); `models::answer`
    /// builds the answers from the chains, outside this module.
    pub models_path: Option<String>,
    /// Where the filter answers `200 serving` itself (`None`: turned off, or a chain's `paths`
    /// take it); see `intake::liveness_request`.
    pub liveness_path: Option<String>,
    /// Which caller headers reach which provider (from each provider's `forward`).
    pub forwarding: super::forward::HeaderPolicy,
    /// The fleet's store, when `fleet:` is configured (`crate::fleet`).
    pub fleet: Option<Fleet>,
    /// Callers known by name (the file's `callers`), at most [`MAX_CALLERS`].
    pub callers: Vec<Caller>,
}

/// A caller known by name (a `caller_header` value): its token budget, if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub budget: Option<Budget>,
    /// The name its budget is counted under (`budget::caller_counter`), made once here so a
    /// request never builds it.
    pub counter: String,
}

/// The name a caller's budget is counted under (shared data, the fleet's descriptors):
/// `caller:<name>`, which no provider's name can be (a provider's name has no `:`).
#[inline]
pub fn caller_counter(name: &str) -> String {
    let mut counter = String::with_capacity(7 + name.len());
    counter.push_str("caller:");
    counter.push_str(name);
    counter
}

/// Which caller a request is from, as the token metric and the caller budgets tell callers
/// apart: one the file names (its place in [`Config::callers`]), another (`other`), or none
/// (no `caller_header` value, or the file names no callers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Team {
    #[default]
    None,
    Other,
    Known(u8),
}

impl Config {
    /// Whether attempts to `id` count toward its requests in flight (`busy`): it is in a
    /// `least_busy` group.
    pub fn counts_in_flight(&self, id: ProviderId) -> bool {
        (self.busy_counted >> (id.index() & 63)) & 1 == 1
    }

    /// The provider `id` names; `None` for an id out of range.
    pub fn provider(&self, id: ProviderId) -> Option<&Provider> {
        self.providers.get(id.index())
    }

    /// The chain `id` names; `None` for an id out of range.
    pub fn chain(&self, id: ChainId) -> Option<&Chain> {
        self.chains.get(id.index())
    }

    /// The providers with their ids, in configuration order.
    pub fn provider_ids(&self) -> impl Iterator<Item = (ProviderId, &Provider)> {
        self.providers
            .iter()
            .enumerate()
            .map_while(|(i, p)| Some((ProviderId::new(i)?, p)))
    }

    /// Which caller `caller` (the `caller_header` value) is: [`Team::None`] without one or
    /// when the file names no callers (nothing read then).
    pub fn team(&self, caller: Option<&str>) -> Team {
        match caller {
            Some(name) if !self.callers.is_empty() => (self.callers.iter())
                .position(|c| c.name == name)
                .and_then(|i| u8::try_from(i).ok())
                .map_or(Team::Other, Team::Known),
            _ => Team::None,
        }
    }

    /// The caller a [`Team::Known`] names.
    pub fn caller(&self, team: Team) -> Option<&Caller> {
        match team {
            Team::Known(i) => self.callers.get(usize::from(i)),
            _ => None,
        }
    }

    /// The `caller` label value of `team`'s tokens (docs/observability.md): its name, `other`,
    /// or `None` for no label.
    pub fn team_label(&self, team: Team) -> Option<&str> {
        match team {
            Team::None => None,
            Team::Other => Some(OTHER_CALLER),
            Team::Known(_) => self.caller(team).map(|c| c.name.as_str()),
        }
    }

    /// The chains with their ids, in configuration order.
    pub fn chain_ids(&self) -> impl Iterator<Item = (ChainId, &Chain)> {
        self.chains
            .iter()
            .enumerate()
            .map_while(|(i, c)| Some((ChainId::new(i)?, c)))
    }
}

/// Limits that keep per-request work and shared-data records small.
pub const MAX_PROVIDERS: usize = 64;
/// Chains are numbered in one byte (`ids::ChainId`).
pub const MAX_CHAINS: usize = 256;
pub const MAX_CHAIN_LEN: usize = 16;
pub const MAX_BREAKER_FAILURES: u32 = 1000;
/// Callers the file may name (one byte in the plan record, one metric label value each).
pub const MAX_CALLERS: usize = 255;
/// The `caller` label of every caller the file does not name (a name the file may not use).
pub const OTHER_CALLER: &str = "other";

/// A provider's or a caller's token budget: at most `tokens` (input and output) per window of `window_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub tokens: u64,
    pub window_ms: u64,
}

impl Budget {
    /// When the window `now` falls in ends (ms since the epoch).
    pub fn window_end(&self, now: u64) -> u64 {
        let len = self.window_ms.max(1);
        (now / len + 1).saturating_mul(len)
    }
}
