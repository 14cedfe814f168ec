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
use crate::config::{Config, Team};
use crate::health::{BreakerState, Pending};
use crate::ids::{ChainId, ProviderId};
use crate::metrics as names;
use crate::plan::SkipReason;
use crate::tokens::SharedTokens;
use crate::usage::{Kind, Usage};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

const CLASSES: usize = Class::ALL.len();
const REASONS: usize = SkipReason::ALL.len();
const HEDGE_OUTCOMES: usize = crate::hedge::Outcome::ALL.len();

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
    /// bring SipHash and its random keys (about 4 KB) for a few entries.
    fallbacks: RefCell<BTreeMap<(ProviderId, ProviderId), u32>>,
    /// Provider -> gauge id, defined at configure so every provider's state shows from the start.
    breaker: Vec<Option<u32>>,
    /// Provider -> `llm_failover_health_state` gauge id, likewise.
    health: Vec<Option<u32>>,
    /// Provider -> answers this worker counted and has not written to the shared health record
    /// yet (`health::Pending`: the success path writes nothing; the root's tick adds them).
    answers: Vec<Cell<Pending>>,
    /// `llm_failover_tokens_total` by (provider, model label, caller), in the order first
    /// counted: a short list (its labels are bounded by configuration,
    /// `Attempt::usage_model`, `Config::team_label`).
    tokens: RefCell<Vec<TokenSlot>>,
    /// `llm_failover_fleet_sync_total` by result (`fleet::StoreState::RESULTS`), defined at
    /// configure with `fleet` on.
    fleet_sync: Vec<Option<u32>>,
    /// When [`Metrics::after_request`] last read the gauges for this configuration on this
    /// worker (ms; 0: never).
    last_tick: Cell<u64>,
    /// `provider * 3 + outcome` -> `llm_failover_hedges_total` counter id (`hedge::Outcome`).
    hedges: Vec<Cell<Option<u32>>>,
}

/// How often a root does its periodic work ([`Metrics::tick`]): every second.
pub const TICK_MS: u64 = 1000;

/// One provider and model label's `llm_failover_tokens_total` counters (by `usage::Kind`) and
/// the tokens this worker counted and has not added to them yet (the root's tick adds them, so
/// an answer costs no metric call).
struct TokenSlot {
    provider: ProviderId,
    model: Box<str>,
    team: Team,
    ids: [Option<u32>; 3],
    held: Usage,
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
            tokens: RefCell::new(Vec::new()),
            hedges: (0..providers * HEDGE_OUTCOMES)
                .map(|_| Cell::new(None))
                .collect(),
            fleet_sync: match config.fleet {
                Some(_) => (crate::fleet::StoreState::RESULTS.iter())
                    .map(|r| {
                        host.define_metric(MetricKind::Counter, &names::fleet_sync(r.as_str()))
                    })
                    .collect(),
                None => Vec::new(),
            },
            last_tick: Cell::new(0),
        }
    }

    /// A root's periodic work for its configuration: the answers this worker held go to the
    /// shared health records (and its tokens to their counters), and the downstream role's
    /// breaker and health gauges are read again from shared data. proxy-wasm's roots run it on
    /// every tick ([`TICK_MS`]); a host without a tick on its workers runs
    /// [`Metrics::after_request`] and [`Metrics::tick_shared`].
    pub fn tick(&self, config: &Config, host: &impl Host) {
        self.flush_answers(config, host);
        self.tick_shared(config, host);
    }

    /// The part of [`Metrics::tick`] that reads only shared data (none of a worker's held
    /// answers): the downstream role's breaker and health gauges. A host whose periodic work
    /// runs off the workers (the native build's main thread) runs this alone.
    pub fn tick_shared(&self, config: &Config, host: &impl Host) {
        if config.role == crate::config::Role::Downstream {
            self.refresh_breaker_states(config, host);
        }
    }

    /// The end of one of this configuration's requests on a worker, where the host has no tick
    /// on its workers (the native build): the answers the worker held are written at once (no
    /// tick of this worker would write them if it went idle), and [`Metrics::tick_shared`]
    /// runs when a tick's time ([`TICK_MS`]) passed since this configuration last ran it on
    /// this worker; whether it ran. The time is kept per configuration (one `Metrics` per
    /// configuration and worker), so a busy configuration never holds back another's gauges.
    pub fn after_request(&self, config: &Config, host: &impl Host) -> bool {
        self.flush_answers(config, host);
        self.tick_shared_if_due(config, host)
    }

    /// [`Metrics::tick_shared`] when a tick's time passed since it last ran on this worker;
    /// whether it ran.
    fn tick_shared_if_due(&self, config: &Config, host: &impl Host) -> bool {
        let now = host.now_ms();
        let due = now.saturating_sub(self.last_tick.get()) >= TICK_MS;
        if due {
            self.last_tick.set(now);
            self.tick_shared(config, host);
        }
        due
    }

    /// `llm_failover_fleet_sync_total{result}` += 1.
    pub fn fleet_synced(&self, host: &impl Host, result: crate::fleet::StoreState) {
        let at = crate::fleet::StoreState::RESULTS
            .iter()
            .position(|r| *r == result);
        increment(
            host,
            at.and_then(|i| self.fleet_sync.get(i).copied().flatten()),
        );
    }

    /// `llm_failover_hedges_total{provider, outcome}` += 1 (a hedged request's racing attempt).
    #[inline(never)]
    pub fn hedge(
        &self,
        host: &impl Host,
        config: &Config,
        provider: ProviderId,
        outcome: crate::hedge::Outcome,
    ) {
        let at = crate::hedge::Outcome::ALL
            .iter()
            .position(|o| *o == outcome);
        let slot = at.and_then(|i| self.hedges.get(provider.index() * HEDGE_OUTCOMES + i));
        let id = cached(host, slot, || {
            names::hedges(name(config, provider), outcome)
        });
        increment(host, id);
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

    /// The token slot of `provider`, model label `model` and caller `team` (its counters
    /// defined the first time), for [`Metrics::count_tokens`].
    #[inline(never)]
    pub fn token_slot(
        &self,
        host: &impl Host,
        config: &Config,
        provider: ProviderId,
        model: &str,
        team: Team,
    ) -> usize {
        let mut slots = self.tokens.borrow_mut();
        if let Some(at) = slots
            .iter()
            .position(|s| s.provider == provider && s.team == team && &*s.model == model)
        {
            return at;
        }
        let caller = config.team_label(team);
        let ids = Kind::ALL
            .map(|kind| host.define_tokens_counter(name(config, provider), model, kind, caller));
        slots.push(TokenSlot {
            provider,
            model: model.into(),
            team,
            ids,
            held: Usage::default(),
        });
        slots.len() - 1
    }

    /// Counts what an answer cost toward its slot's `llm_failover_tokens_total` (added by the
    /// next tick: no metric call now).
    pub fn count_tokens(&self, slot: usize, usage: &Usage) {
        if let Some(s) = self.tokens.borrow_mut().get_mut(slot) {
            s.held.add(usage);
        }
    }

    /// Adds the tokens every slot holds to its counters (one `increment_metric` per kind that
    /// has some) and to its provider's token record (`tokens::SharedTokens`, one write per
    /// provider that has some).
    fn flush_tokens(&self, config: &Config, host: &impl Host) {
        self.count_tokens_held(config, host, |provider, sum| {
            let tokens = SharedTokens {
                store: host,
                clock: host,
            };
            tokens.add(provider, sum);
        });
    }

    /// Adds the tokens every slot holds to its counters and gives each provider's sum (some
    /// tokens) to `record`, for its token record.
    fn count_tokens_held(
        &self,
        config: &Config,
        host: &impl Host,
        mut record: impl FnMut(&str, &Usage),
    ) {
        let mut slots = self.tokens.borrow_mut();
        for (id, provider) in config.provider_ids() {
            let mut sum = Usage::default();
            for slot in slots.iter_mut().filter(|s| s.provider == id) {
                let held = std::mem::take(&mut slot.held);
                for ((_, count), id) in held.kinds().into_iter().zip(slot.ids) {
                    if let (Some(id), true) = (id, count > 0) {
                        host.add_metric(id, count);
                    }
                }
                sum.add(&held);
            }
            if sum != Usage::default() {
                record(&provider.name, &sum);
            }
        }
    }

    /// [`Metrics::after_request`] where one place gathers every worker's writes to the shared
    /// records (the native build: one process, its main thread writes them once a tick): the
    /// tokens go to their counters, the answers and each provider's tokens into `writes`
    /// instead of a read and a write of a shared record each per request.
    pub fn after_request_gathered(
        &self,
        config: &Config,
        host: &impl Host,
        writes: &mut SharedWrites,
    ) -> bool {
        self.count_tokens_held(config, host, |provider, sum| {
            if let Some(held) = writes.entry(provider) {
                held.tokens.add(sum);
            }
        });
        for (id, provider) in config.provider_ids() {
            let pending = self.take_answers(id);
            if let Some(held) = (!pending.is_empty())
                .then(|| writes.entry(&provider.name))
                .flatten()
            {
                held.add_answers(pending);
            }
        }
        self.tick_shared_if_due(config, host)
    }

    /// Writes every provider's held answers to the shared health records (one compare-and-swap
    /// per provider that has some). Called from each root's tick and when a root goes away.
    /// Also adds the tokens the worker counted to `llm_failover_tokens_total`.
    pub fn flush_answers(&self, config: &Config, host: &impl Host) {
        self.flush_tokens(config, host);
        let health = health(config, host, host);
        for (id, provider) in config.provider_ids() {
            let pending = self.take_answers(id);
            if !pending.is_empty() {
                health.add_answers(&provider.name, &pending);
            }
        }
    }
}

/// Writes to the shared records gathered from many requests (and workers) to be made at once
/// ([`Metrics::after_request_gathered`]): per provider, its answers for the health windows
/// and its tokens for the token record. A process-wide host keeps one, behind its lock.
#[derive(Default)]
pub struct SharedWrites {
    providers: Vec<HeldFor>,
}

struct HeldFor {
    provider: Box<str>,
    /// Answers by minute, oldest first (a later minute's never folds into an earlier one's).
    answers: Vec<Pending>,
    tokens: Usage,
}

impl HeldFor {
    fn add_answers(&mut self, pending: Pending) {
        match self.answers.last_mut() {
            Some(last) if last.minute == pending.minute => {
                last.answered = last.answered.saturating_add(pending.answered);
                last.last_ms = last.last_ms.max(pending.last_ms);
            }
            _ => self.answers.push(pending),
        }
    }
}

impl SharedWrites {
    pub const fn new() -> SharedWrites {
        SharedWrites {
            providers: Vec::new(),
        }
    }

    /// The provider's entry (made the first time; `None` never, in fact).
    fn entry(&mut self, provider: &str) -> Option<&mut HeldFor> {
        let at = (self.providers.iter())
            .position(|h| &*h.provider == provider)
            .unwrap_or_else(|| {
                self.providers.push(HeldFor {
                    provider: provider.into(),
                    answers: Vec::new(),
                    tokens: Usage::default(),
                });
                self.providers.len() - 1
            });
        self.providers.get_mut(at)
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.providers
            .iter()
            .all(|h| h.answers.is_empty() && h.tokens == Usage::default())
    }

    /// Everything held, taken out (this one keeps its room for the next).
    pub fn take(&mut self) -> SharedWrites {
        SharedWrites {
            providers: self
                .providers
                .iter_mut()
                .filter(|h| !h.answers.is_empty() || h.tokens != Usage::default())
                .map(|h| HeldFor {
                    provider: h.provider.clone(),
                    answers: std::mem::take(&mut h.answers),
                    tokens: std::mem::take(&mut h.tokens),
                })
                .collect(),
        }
    }

    /// Makes the writes: each provider's answers into its health record (`config`'s health
    /// policies), its tokens into its token record.
    pub fn write(
        &self,
        config: &Config,
        store: &dyn crate::host::SharedStore,
        clock: &dyn crate::host::Clock,
    ) {
        let health = health(config, store, clock);
        for held in &self.providers {
            for pending in &held.answers {
                health.add_answers(&held.provider, pending);
            }
            if held.tokens != Usage::default() {
                SharedTokens { store, clock }.add(&held.provider, &held.tokens);
            }
        }
    }
}
