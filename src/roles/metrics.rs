//! The docs/behaviour.md section 8 metrics over the [`Host`]: each (metric, labels) combination is defined once
//! per VM, the first time it is needed, and its id cached by provider/class/chain index, so the
//! hot path never formats a name it has seen (a success costs one `increment_metric`).
//! Names and the Envoy tag rules that turn them into labels live in [`crate::metrics`].
//!
//! Every worker runs its own VM, but Envoy keeps one stat per name: counters defined by all
//! workers under the same name are one counter (increments add up), and the breaker-state gauge
//! is one gauge that every worker sets to the state it reads from shared data, which is the same
//! for all of them (see [`Metrics::refresh_breaker_states`]).

use super::{health, Host, MetricKind};
use crate::classify::Class;
use crate::config::Config;
use crate::health::{BreakerState, Pending};
use crate::ids::{ChainId, ProviderId};
use crate::metrics as names;
use crate::plan::SkipReason;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

const CLASSES: usize = Class::ALL.len();
const REASONS: usize = SkipReason::ALL.len();

fn reason_index(reason: SkipReason) -> usize {
    reason.index()
}

/// Metric ids of one VM (one per plugin instance's root context; cheap to share by `Rc`).
pub struct Metrics {
    /// `provider * CLASSES + class` -> counter id.
    attempts: Vec<Cell<Option<u32>>>,
    /// `provider * REASONS + reason` -> counter id.
    skipped: Vec<Cell<Option<u32>>>,
    /// Chain index -> counter id.
    exhausted: Vec<Cell<Option<u32>>>,
    /// (from, to) -> counter id. A BTreeMap, as every map in the module: std's HashMap would
    /// bring SipHash and its random keys (about 4 KB) for a few entries (issue 12).
    fallbacks: RefCell<BTreeMap<(ProviderId, ProviderId), u32>>,
    /// Provider -> gauge id, defined at configure so every provider's state shows from the start.
    breaker: Vec<Option<u32>>,
    /// Provider -> `llm_failover_health_state` gauge id, likewise.
    health: Vec<Option<u32>>,
    /// Provider -> answers this worker counted and has not written to the shared health record
    /// yet (`health::Pending`: the success path writes nothing; the root's tick adds them).
    answers: Vec<Cell<Pending>>,
}

/// A provider's name (ids come from the validated configuration).
fn name(config: &Config, provider: ProviderId) -> &str {
    config.provider(provider).map_or("", |p| p.name.as_str())
}

fn increment(host: &impl Host, id: Option<u32>) {
    if let Some(id) = id {
        host.increment_metric(id);
    }
}

/// The cached id in `slot`, defining counter `name()` on first use.
fn cached(
    host: &impl Host,
    slot: Option<&Cell<Option<u32>>>,
    name: impl FnOnce() -> String,
) -> Option<u32> {
    let slot = slot?;
    if let Some(id) = slot.get() {
        return Some(id);
    }
    let id = host.define_metric(MetricKind::Counter, &name());
    slot.set(id);
    id
}

impl Metrics {
    /// Sizes the caches for `config` and defines the breaker-state gauges.
    pub fn new(config: &Config, host: &impl Host) -> Metrics {
        let providers = config.providers.len();
        Metrics {
            attempts: (0..providers * CLASSES).map(|_| Cell::new(None)).collect(),
            skipped: (0..providers * REASONS).map(|_| Cell::new(None)).collect(),
            exhausted: (0..config.chains.len()).map(|_| Cell::new(None)).collect(),
            fallbacks: RefCell::new(BTreeMap::new()),
            breaker: config
                .providers
                .iter()
                .map(|p| host.define_metric(MetricKind::Gauge, &names::breaker_state(&p.name)))
                .collect(),
            health: config
                .providers
                .iter()
                .map(|p| host.define_metric(MetricKind::Gauge, &names::health_state(&p.name)))
                .collect(),
            answers: (0..providers).map(|_| Cell::default()).collect(),
        }
    }

    /// `llm_failover_attempts_total{provider, outcome}` += 1.
    pub fn attempt(&self, host: &impl Host, config: &Config, provider: ProviderId, class: Class) {
        let slot = self
            .attempts
            .get(provider.index() * CLASSES + class as usize);
        increment(
            host,
            cached(host, slot, || {
                names::attempts(name(config, provider), class)
            }),
        );
    }

    /// `llm_failover_skipped_total{provider, reason}` += 1.
    pub fn skipped(
        &self,
        host: &impl Host,
        config: &Config,
        provider: ProviderId,
        reason: SkipReason,
    ) {
        let slot = self
            .skipped
            .get(provider.index() * REASONS + reason_index(reason));
        increment(
            host,
            cached(host, slot, || {
                names::skipped(name(config, provider), reason.as_str())
            }),
        );
    }

    /// `llm_failover_exhausted_total{chain}` += 1.
    pub fn exhausted(&self, host: &impl Host, config: &Config, chain: ChainId) {
        increment(
            host,
            cached(host, self.exhausted.get(chain.index()), || {
                names::exhausted(config.chain(chain).map_or("", |c| c.name.as_str()))
            }),
        );
    }

    /// `llm_failover_fallbacks_total{from, to}` += 1. Never inlined: the map lookup stays out
    /// of `Upstream::settle`, which every attempt runs (only a failover calls this).
    #[inline(never)]
    pub fn fallback(&self, host: &impl Host, config: &Config, from: ProviderId, to: ProviderId) {
        let key = (from, to);
        let known = self.fallbacks.borrow().get(&key).copied();
        let id = known.or_else(|| {
            let id = host.define_metric(
                MetricKind::Counter,
                &names::fallbacks(name(config, from), name(config, to)),
            )?;
            self.fallbacks.borrow_mut().insert(key, id);
            Some(id)
        });
        increment(host, id);
    }

    /// Sets `llm_failover_breaker_state{provider}`.
    pub fn breaker_state(&self, host: &impl Host, provider: ProviderId, state: BreakerState) {
        if let Some(Some(id)) = self.breaker.get(provider.index()) {
            host.record_metric(*id, u64::from(state.metric_value()));
        }
    }

    /// Sets every provider's breaker and health gauges from the shared health records (one
    /// shared-data read each). Called at configure and from the downstream root's tick, so the
    /// gauges also follow changes nobody reports, such as a cooldown ending (open -> half-open)
    /// with no traffic, or a quiet provider's window emptying.
    pub fn refresh_breaker_states(&self, config: &Config, host: &impl Host) {
        let health = health(config, host, host);
        for (id, provider) in config.provider_ids() {
            let snapshot = health.snapshot(&provider.name);
            self.breaker_state(host, id, snapshot.state);
            if let Some(Some(gauge)) = self.health.get(id.index()) {
                host.record_metric(*gauge, u64::from(snapshot.recent.state.metric_value()));
            }
        }
    }

    /// Counts an answer from `provider` at `now` without writing it; returns the answers of an
    /// earlier minute to write now ([`Pending::add`]).
    pub fn hold_answer(&self, provider: ProviderId, now: u64) -> Option<Pending> {
        let cell = self.answers.get(provider.index())?;
        let mut pending = cell.get();
        let earlier = pending.add(now);
        cell.set(pending);
        earlier
    }

    /// The answers held for `provider`, leaving none (to fold into a report's write).
    pub fn take_answers(&self, provider: ProviderId) -> Pending {
        self.answers
            .get(provider.index())
            .map(Cell::take)
            .unwrap_or_default()
    }

    /// Writes every provider's held answers to the shared health records (one compare-and-swap
    /// per provider that has some). Called from each root's tick and when a root goes away.
    pub fn flush_answers(&self, config: &Config, host: &impl Host) {
        let health = health(config, host, host);
        for (id, provider) in config.provider_ids() {
            let pending = self.take_answers(id);
            if !pending.is_empty() {
                health.add_answers(&provider.name, &pending);
            }
        }
    }
}
