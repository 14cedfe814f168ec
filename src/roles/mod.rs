//! The two roles' glue, written once against [`Host`]: each callback reads facts from the host,
//! calls the decision core (`intake`, `plan`, `attempt`, `answer`, `health`), and applies the
//! result. No branch here decides failover policy.
//!
//! In Envoy the host is `filter::envoy_host::EnvoyHost` (proxy-wasm hostcalls, a few lines per
//! method); the unit tests drive both roles through whole requests against a recording host
//! that plays Envoy's side (`tests`).

mod counting;
mod downstream;
mod metrics;
pub mod registry;
mod upstream;

pub use downstream::Downstream;
pub use metrics::{Metrics, SharedWrites, TICK_MS};
pub use upstream::Upstream;

/// The downstream role's cold answers, the `/v1/models` list and the status page, called
/// through these pointers: their code is compiled where [`LocalAnswers::new`] is called, which
/// in the wasm module is the module crate at opt-level "z" (`module/src/lib.rs`, as the
/// configuration's loader), not with this crate's per-request code at 3 (BENCHMARKS.md
/// "Module size"). The functions behind them, and what only they call, are `#[inline]` for
/// that reason. A request pays for neither unless it is for one of their paths.
#[derive(Clone, Copy)]
pub struct LocalAnswers {
    /// [`crate::models::answer`]: the models list (or one model) for a request on its path.
    pub models: fn(&Config, &str, bool) -> Option<crate::models::Answer<'static>>,
    /// [`crate::status::render`]: the status page's JSON.
    pub status: fn(&Config, &Health, &dyn Budgets, &crate::tokens::SharedTokens, u64) -> String,
}

impl Default for LocalAnswers {
    #[inline]
    fn default() -> LocalAnswers {
        LocalAnswers::new()
    }
}

impl LocalAnswers {
    /// The answers, compiled in the caller's crate.
    #[inline]
    pub fn new() -> LocalAnswers {
        LocalAnswers {
            models: crate::models::answer,
            status: crate::status::render,
        }
    }
}

use crate::budget::{Budgets, SharedBudgets};
use crate::config::{Caller, Config, Provider};
use crate::health::{Admission, Health};
use crate::host::{Clock, FixedClock, SharedStore};
use crate::ids::ProviderId;
use crate::plan::Gatekeeper;
use crate::reply::Reply;
use crate::translate::Api;
use crate::usage::Usage;
use crate::wire;

/// Which header map (and body) of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Map {
    Request,
    Response,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
}

/// What a callback tells the host to do with the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Pause,
}

impl Flow {
    /// `Pause` when `pause`, else `Continue`.
    pub fn pause_if(pause: bool) -> Flow {
        if pause {
            Flow::Pause
        } else {
            Flow::Continue
        }
    }
}

/// Everything the roles need from Envoy: the stream's headers, bodies and filter state, local
/// replies, metrics, the route cache, and (through the supertraits) shared data with
/// compare-and-swap and the clock.
pub trait Host: SharedStore + Clock {
    /// One header's value, as bytes (values need not be UTF-8).
    fn header(&self, map: Map, name: &str) -> Option<Vec<u8>>;
    /// The whole map, serialized as `header_pairs::HeaderPairs` reads it.
    fn header_map(&self, map: Map) -> Vec<u8>;
    /// Sets a header, or removes it (`None`).
    fn set_header(&self, map: Map, name: &str, value: Option<&str>);
    /// Sets a header to a value that need not be UTF-8, or removes it (`None`).
    fn set_header_bytes(&self, map: Map, name: &str, value: Option<&[u8]>);
    /// Adds another value to a header (a repeated header).
    fn add_header_bytes(&self, map: Map, name: &str, value: &[u8]);
    /// A property by its serialized path (segments joined by NUL); `None` when absent.
    fn property(&self, path: &[u8]) -> Option<Vec<u8>>;
    /// Writes one of our filter-state properties (a one-segment name).
    fn set_property(&self, name: &str, value: &[u8]);
    /// The first `size` bytes of the buffered body.
    fn body(&self, map: Map, size: usize) -> Option<Vec<u8>>;
    /// Replaces the first `size` bytes of the buffered body with `value`.
    fn set_body(&self, map: Map, size: usize, value: &[u8]);
    /// `len` bytes of the buffered body from `start` (fewer when it is shorter).
    fn body_range(&self, map: Map, start: usize, len: usize) -> Option<Vec<u8>>;
    /// Adds `value` after the `size` bytes of the buffered body.
    fn append_body(&self, map: Map, size: usize, value: &[u8]);
    /// Resumes the request (`Map::Request`) or response paused by an earlier callback.
    fn resume(&self, map: Map);
    /// Answers the request locally (the stream goes no further).
    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: Option<&[u8]>);
    /// Defines (or finds) a metric; `None` when the host refuses.
    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<u32>;
    /// Defines (or finds) `llm_failover_tokens_total`'s counter for these labels: by its flat
    /// name (Envoy's tag rules label it), unless the host labels counters itself (the native
    /// build, where names cannot be defined at run time).
    fn define_tokens_counter(
        &self,
        provider: &str,
        model: &str,
        kind: crate::usage::Kind,
        caller: Option<&str>,
    ) -> Option<u32> {
        let name = crate::metrics::tokens(provider, model, kind, caller);
        self.define_metric(MetricKind::Counter, &name)
    }
    fn increment_metric(&self, id: u32);
    /// Adds `delta` to a counter.
    fn add_metric(&self, id: u32, delta: u64);
    fn record_metric(&self, id: u32, value: u64);
    /// Makes the route re-read filter state (Envoy's `clear_route_cache` foreign function);
    /// `false` when the host has no such function.
    fn clear_route_cache(&self) -> bool;
}

/// An integer property (Envoy hands them over as 8 little-endian bytes); 0 when absent.
fn u64_property(host: &impl Host, path: &[u8]) -> u64 {
    host.property(path)
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

/// A property holding text, as a `String`; `None` when absent or not UTF-8.
fn text_property(host: &impl Host, path: &[u8]) -> Option<String> {
    host.property(path).and_then(|b| String::from_utf8(b).ok())
}

/// The `:status` of a header map (0 when absent or unreadable).
fn status_code(host: &impl Host, map: Map) -> u16 {
    host.header(map, ":status")
        .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
        .unwrap_or(0)
}

/// Answers with one of the filter's own replies (docs/behaviour.md section 6): JSON error body in the
/// caller's API's shape (`caller`, from its path) and `x-should-retry`.
fn send_reply(host: &impl Host, reply: &Reply, caller: Option<Api>) {
    send_reply_with(host, reply, caller, None, None);
}

/// A request planning refused ([`send_reply`] with `Retry-After`, whole seconds, when given):
/// no provider was called, which `x-llm-attempts: 0` says (and no `x-llm-provider`).
fn send_refusal(host: &impl Host, reply: &Reply, caller: Option<Api>, after: Option<u64>) {
    send_reply_with(host, reply, caller, after, Some("0"));
}

fn send_reply_with(
    host: &impl Host,
    reply: &Reply,
    caller: Option<Api>,
    after: Option<u64>,
    attempts: Option<&str>,
) {
    let body = reply.body_for(caller);
    let should_retry = if reply.should_retry { "true" } else { "false" };
    let seconds = after.map(|s| s.to_string());
    let headers = [
        ("content-type", Some("application/json")),
        (wire::SHOULD_RETRY_HEADER, Some(should_retry)),
        ("retry-after", seconds.as_deref()),
        (wire::ATTEMPTS_HEADER, attempts),
    ];
    let headers: Vec<(&str, &str)> = (headers.iter())
        .filter_map(|(name, value)| Some((*name, (*value)?)))
        .collect();
    host.send_response(reply.status, &headers, Some(&body));
}

/// Provider health over the host's shared data, read against `clock`.
pub fn health<'a>(
    config: &'a Config,
    store: &'a dyn SharedStore,
    clock: &'a dyn Clock,
) -> Health<'a> {
    Health::new(store, clock, &config.breaker, &config.dead_marks)
}

/// Planning's view of health and budgets at one instant (`plan::Gatekeeper`), over shared
/// data: one read per provider considered (and one more per provider with a token budget).
/// The downstream role plans with it, the upstream role reroutes to an alternative list with
/// it: both pick providers through `plan`'s one check.
pub struct SharedGatekeeper<'a, H: Host> {
    host: &'a H,
    config: &'a Config,
    health: Health<'a>,
    metrics: &'a Metrics,
    budgets: SharedBudgets<'a>,
}

impl<'a, H: Host> SharedGatekeeper<'a, H> {
    pub fn new(host: &'a H, config: &'a Config, metrics: &'a Metrics, now: &'a FixedClock) -> Self {
        SharedGatekeeper {
            host,
            config,
            health: health(config, host, now),
            metrics,
            budgets: SharedBudgets {
                store: host,
                clock: now,
            },
        }
    }

    /// The health records it reads (the upstream role reports its attempt there too).
    pub fn health(&self) -> &Health<'a> {
        &self.health
    }
}

impl<H: Host> Gatekeeper for SharedGatekeeper<'_, H> {
    fn gate(&self, provider: ProviderId, model: &str) -> Admission {
        let Some(name) = self.config.provider(provider).map(|p| p.name.as_str()) else {
            return Admission::Dead;
        };
        let admission = self
            .health
            .admit(name, model, self.config.timeouts.attempt_ms);
        if let Some(state) = admission.shown_state() {
            self.metrics.breaker_state(self.host, provider, state);
        }
        admission
    }

    fn budgets(&self) -> Option<&dyn Budgets> {
        Some(&self.budgets)
    }

    fn draw(&self) -> u64 {
        draw(self.host)
    }

    fn in_flight(&self, provider: ProviderId) -> u32 {
        let name = self
            .config
            .provider(provider)
            .map_or("", |p| p.name.as_str());
        crate::busy::in_flight(self.host, name)
    }
}

thread_local! {
    /// This worker's random sequence for group picks (a VM per worker: each has its own);
    /// 0 until the first draw seeds it.
    static DRAWS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Key of the count of workers that seeded their draws, so no two seed alike.
const SEEDED_KEY: &str = "llm_failover.seeded";

/// The next number of this worker's random sequence (`pick::next`), for a request's group
/// picks: no shared data per request. The first draw seeds the sequence from the clock and
/// this worker's place among the workers that seeded (one compare-and-swap, once).
pub fn draw(host: &impl Host) -> u64 {
    DRAWS.with(|state| {
        let mut s = state.get();
        if s == 0 {
            let place = crate::health::update_key(host, host, SEEDED_KEY, |bytes, _| {
                let n = (bytes.as_deref())
                    .and_then(|b| b.get(..8)?.try_into().ok())
                    .map_or(0, u64::from_le_bytes);
                crate::health::Step::Write((n + 1).to_le_bytes().to_vec(), n)
            });
            s = (host.now_ms() ^ place.unwrap_or(0).rotate_left(40)) | 1;
        }
        let r = crate::pick::next(&mut s);
        state.set(s);
        r
    })
}

/// Seeds this worker's draws with `seed` (tests: a known sequence).
#[cfg(test)]
pub fn seed_draws(seed: u64) {
    DRAWS.with(|state| state.set(seed | 1));
}

/// Creates each provider's health record if no worker has yet, so that every later update is
/// a real compare-and-swap (Envoy cannot CAS on a key that does not exist).
pub fn init_health_records(config: &Config, host: &impl Host) {
    let health = health(config, host, host);
    let budgets = SharedBudgets {
        store: host,
        clock: host,
    };
    for (i, provider) in config.provider_ids() {
        health.ensure_record(&provider.name);
        if config.counts_in_flight(i) {
            crate::busy::ensure_record(host, &provider.name);
        }
    }
    for counter in crate::budget::counters(config) {
        budgets.ensure_record(&counter.name, config.fleet.is_some());
    }
    if config.fleet.is_some() {
        crate::fleet::ensure_records(config, host);
    }
}

/// The usage counting's one call when the answer the caller got has its usage: counts it
/// against the provider's token budget and the caller's, whichever has one (`budget::spend`,
/// docs/internals.md). Reads the clock only when one has.
pub fn spend_budget(host: &impl Host, provider: &Provider, caller: Option<&Caller>, usage: &Usage) {
    if !crate::budget::spends(provider, caller) {
        return;
    }
    let clock = FixedClock(host.now_ms());
    let budgets = SharedBudgets {
        store: host,
        clock: &clock,
    };
    crate::budget::spend(&budgets, provider, caller, usage);
}

#[cfg(test)]
mod tests;
