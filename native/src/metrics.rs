//! The filter's metrics (docs/behaviour.md section 8) as Envoy 1.40 lets a dynamic module have
//! them: defined on the filter configuration while it loads (Envoy refuses a definition later),
//! then used from any stream of that configuration by id. The roles define theirs by name on
//! first use ([`Host::define_metric`](llm_failover::roles::Host)), so every name they can ask
//! for is defined here first, under the same `wasmcustom` namespace (the bootstrap's
//! `metrics_namespace`) and the same flat names as the proxy-wasm build: Envoy's tag rules
//! (`llm_failover::metrics::stats_tags`) give them the same labels.
//!
//! Names only known at run time (`llm_failover_tokens_total` per model label) are one counter
//! with label names, whose values Envoy takes when counted.

use crate::abi::{self, FilterConfigEnvoy, ModuleBuffer};
use llm_failover::classify::Class;
use llm_failover::config::Config;
use llm_failover::eligible::SkipReason;
use llm_failover::fleet;
use llm_failover::host::{Clock, SharedStore};
use llm_failover::metrics as names;
use llm_failover::roles::{Host, MetricKind};
use llm_failover::roles::{Metrics, SharedWrites};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// `llm_failover_tokens_total`'s labels, in the order [`crate::host`] gives their values.
pub const TOKEN_LABELS: [&str; 3] = [names::PROVIDER, names::MODEL, names::KIND];
/// The same, with the caller's label.
pub const TOKEN_LABELS_BY_CALLER: [&str; 4] =
    [names::PROVIDER, names::MODEL, names::KIND, names::CALLER];

/// The key of a metric `name` with label names `labels` in a [`MetricTable`].
pub fn labelled(name: &str, labels: &[&str]) -> String {
    match labels {
        [] => name.to_string(),
        _ => format!("{name}{{{}}}", labels.join(",")),
    }
}

/// Envoy's metric ids of one filter configuration, by name.
///
/// Only the downstream role's configuration defines them, in Envoy's root scope: Envoy would
/// define an upstream filter's in its provider cluster's scope (`cluster.<name>.wasmcustom.*`,
/// where a dotted provider name cannot be told from the cluster's). The upstream role's
/// configuration defines none; its filters count through the downstream configuration of
/// their request, whose table has the same layout ([`MetricTable::counts_for`]), so every
/// metric is one root-scope series as in the wasm build's router mode.
#[derive(Default)]
pub struct MetricTable {
    ids: HashMap<String, (MetricKind, u32)>,
    /// The configuration that defined them (Envoy's pointer, as an address).
    owner: usize,
    /// The names and kinds defined, in order: two tables of the same layout give every name
    /// the same id.
    layout: u64,
    /// Defined in a provider cluster's scope (the upstream role's configuration).
    cluster_scoped: bool,
}

impl MetricTable {
    /// Defines every metric the roles can name under `config` (on Envoy's main thread, in
    /// `on_http_filter_config_new`).
    pub fn define(config_envoy: FilterConfigEnvoy, config: &Config) -> MetricTable {
        let mut table = MetricTable {
            owner: config_envoy as usize,
            cluster_scoped: config.role == llm_failover::config::Role::Upstream,
            ..MetricTable::default()
        };
        let providers: Vec<&str> = config.providers.iter().map(|p| p.name.as_str()).collect();
        let hedging = config.chains.iter().any(|c| c.hedge_after_ms.is_some());
        for p in &providers {
            for class in Class::ALL {
                table.add(config_envoy, MetricKind::Counter, names::attempts(p, class));
            }
            for reason in SkipReason::ALL {
                table.add(
                    config_envoy,
                    MetricKind::Counter,
                    names::skipped(p, reason.as_str()),
                );
            }
            for q in &providers {
                if p != q {
                    table.add(config_envoy, MetricKind::Counter, names::fallbacks(p, q));
                }
            }
            table.add(config_envoy, MetricKind::Gauge, names::breaker_state(p));
            table.add(config_envoy, MetricKind::Gauge, names::health_state(p));
            // A hedged race's attempts (`hedge_after`): only where a chain hedges.
            for outcome in llm_failover::hedge::Outcome::ALL
                .into_iter()
                .filter(|_| hedging)
            {
                table.add(config_envoy, MetricKind::Counter, names::hedges(p, outcome));
            }
        }
        for chain in &config.chains {
            table.add(
                config_envoy,
                MetricKind::Counter,
                names::exhausted(&chain.name),
            );
        }
        // The fleet's syncs, by how each ended.
        for result in fleet::StoreState::RESULTS
            .iter()
            .filter(|_| config.fleet.is_some())
        {
            let name = names::fleet_sync(result.as_str());
            table.add(config_envoy, MetricKind::Counter, name);
        }
        // Tokens by model: labels known at run time only, so Envoy labels them (a counter
        // with label names, its values given when counted), with and without the caller.
        for labels in [TOKEN_LABELS.as_slice(), &TOKEN_LABELS_BY_CALLER] {
            let name = names::TOKENS.to_string();
            table.add_labelled(config_envoy, MetricKind::Counter, name, labels);
        }
        table
    }

    fn add(&mut self, config_envoy: FilterConfigEnvoy, kind: MetricKind, name: String) {
        self.add_labelled(config_envoy, kind, name, &[]);
    }

    /// Defines `name` with `labels` (none: a plain metric), under [`labelled`]'s key.
    fn add_labelled(
        &mut self,
        config_envoy: FilterConfigEnvoy,
        kind: MetricKind,
        name: String,
        labels: &[&str],
    ) {
        let key = labelled(&name, labels);
        let mut hasher = std::hash::DefaultHasher::new();
        (self.layout, kind as u8, &key).hash(&mut hasher);
        self.layout = hasher.finish();
        if self.cluster_scoped {
            return;
        }
        let mut id = 0usize;
        let bytes = ModuleBuffer::of(name.as_bytes());
        let mut label_names: Vec<ModuleBuffer> = labels
            .iter()
            .map(|l| ModuleBuffer::of(l.as_bytes()))
            .collect();
        let (names_ptr, names_len) = match label_names.len() {
            0 => (std::ptr::null_mut(), 0),
            n => (label_names.as_mut_ptr(), n),
        };
        // SAFETY: Envoy's configuration pointer, in its config_new hook; the name and the label
        // names live for the call.
        let result = unsafe {
            match kind {
                MetricKind::Counter => {
                    abi::envoy_dynamic_module_callback_http_filter_config_define_counter(
                        config_envoy,
                        bytes,
                        names_ptr,
                        names_len,
                        &mut id,
                    )
                }
                MetricKind::Gauge => {
                    abi::envoy_dynamic_module_callback_http_filter_config_define_gauge(
                        config_envoy,
                        bytes,
                        names_ptr,
                        names_len,
                        &mut id,
                    )
                }
            }
        };
        if result == abi::METRICS_SUCCESS {
            if let Ok(id) = u32::try_from(id) {
                self.ids.insert(key, (kind, id));
            }
        }
    }

    /// The table of the request's downstream configuration (`downstream`) counts for this
    /// upstream one: its metrics then live in Envoy's root scope, as the wasm build's router
    /// mode has them, not in the provider cluster's (labels as the wasm build's, a dotted
    /// provider name kept whole). Only where both define the same names in the same order.
    pub fn counts_for(&self, downstream: &MetricTable) -> bool {
        self.cluster_scoped && !downstream.cluster_scoped && self.layout == downstream.layout
    }

    /// The upstream role's (it defines nothing of its own).
    pub fn cluster_scoped(&self) -> bool {
        self.cluster_scoped
    }

    /// The configuration that defined the table (Envoy's pointer).
    pub fn owner(&self) -> FilterConfigEnvoy {
        self.owner as FilterConfigEnvoy
    }

    /// The id of a metric defined under `name` as `kind`: the upstream role's, that of a
    /// downstream configuration of the same layout (its filters count through such a one).
    pub fn id(&self, kind: MetricKind, name: &str) -> Option<u32> {
        if self.cluster_scoped {
            return DOWNSTREAM.with_same_layout(self.layout, |d| d.id(kind, name));
        }
        self.ids
            .get(name)
            .and_then(|(k, id)| (*k == kind).then_some(*id))
    }
}

/// The downstream configurations' tables loaded in this process.
struct Registry(Mutex<Vec<Weak<MetricTable>>>);

static DOWNSTREAM: Registry = Registry(Mutex::new(Vec::new()));

impl Registry {
    fn with_same_layout<T>(
        &self,
        layout: u64,
        f: impl FnOnce(&MetricTable) -> Option<T>,
    ) -> Option<T> {
        let list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let table = list
            .iter()
            .filter_map(Weak::upgrade)
            .find(|t| t.layout == layout)?;
        drop(list);
        f(&table)
    }
}

/// A downstream configuration's table, for the upstream ones of the same layout (and forgets
/// those of configurations gone).
pub fn register(table: &Arc<MetricTable>) {
    if table.cluster_scoped {
        return;
    }
    let mut list = DOWNSTREAM.0.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|t| t.strong_count() > 0);
    list.push(Arc::downgrade(table));
}

/// Ids [`series`] gives: this bit and an index into the process's labelled series.
pub const LABELLED_ID: u32 = 1 << 31;

/// `llm_failover_tokens_total`'s series (label values known at run time only), for every
/// worker. Envoy 1.40 resolves a labelled counter's values on every increment, about 5,000
/// instructions each against about 40 for a plain counter (BENCHMARKS.md, "The native
/// build"), so the counts are held here and given to Envoy on the counting configuration's
/// one-second tick on its main thread, as the wasm build adds its tokens on its tick.
struct Labelled {
    /// (Envoy's id, label values), by the index in a [`LABELLED_ID`] id.
    series: Vec<(u32, Vec<String>)>,
    /// The configurations (Envoy's pointers, as addresses) whose tick counts their series.
    ticking: Vec<usize>,
    /// (configuration, series index, count) not given to Envoy yet.
    held: Vec<(usize, usize, u64)>,
}

static LABELLED: Mutex<Labelled> = Mutex::new(Labelled {
    series: Vec::new(),
    ticking: Vec::new(),
    held: Vec::new(),
});

fn labelled_series() -> std::sync::MutexGuard<'static, Labelled> {
    LABELLED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The id of Envoy's labelled counter `id` with label `values` (made the first time).
pub fn series(id: u32, values: Vec<String>) -> Option<u32> {
    let mut l = labelled_series();
    let at = match l.series.iter().position(|(i, v)| *i == id && *v == values) {
        Some(at) => at,
        None => {
            l.series.push((id, values));
            l.series.len() - 1
        }
    };
    u32::try_from(at).ok().map(|at| at | LABELLED_ID)
}

/// Adds `delta` to series `id` ([`series`]) counted by configuration `owner`: held for its
/// tick when it has one, else given to Envoy at once by `now` (Envoy's id, label values).
pub fn add_labelled(
    owner: FilterConfigEnvoy,
    id: u32,
    delta: u64,
    now: impl FnOnce(u32, &mut [ModuleBuffer]),
) {
    let index = (id & !LABELLED_ID) as usize;
    let mut l = labelled_series();
    let owner = owner as usize;
    if owner != 0 && l.ticking.contains(&owner) {
        match l
            .held
            .iter_mut()
            .find(|(o, i, _)| *o == owner && *i == index)
        {
            Some((_, _, count)) => *count = count.saturating_add(delta),
            None => l.held.push((owner, index, delta)),
        }
        return;
    }
    let Some((id, values)) = l.series.get(index) else {
        return;
    };
    let mut values: Vec<ModuleBuffer> = values
        .iter()
        .map(|v| ModuleBuffer::of(v.as_bytes()))
        .collect();
    now(*id, &mut values);
}

/// From now on the tick of configuration `owner` counts its labelled series (and writes
/// the gathered writes, [`after_request`]).
pub fn tick_counts(owner: FilterConfigEnvoy) {
    labelled_series().ticking.push(owner as usize);
    TICKING.fetch_add(1, Ordering::Relaxed);
}

/// Configuration `owner` is going: what it held is dropped (less than a tick's worth, at
/// shutdown: `render --runtime native` refuses configuration changes under traffic).
pub fn stop_ticking(owner: FilterConfigEnvoy) {
    let owner = owner as usize;
    let mut l = labelled_series();
    let before = l.ticking.len();
    l.ticking.retain(|o| *o != owner);
    TICKING.fetch_sub(before - l.ticking.len(), Ordering::Relaxed);
    l.held.retain(|(o, _, _)| *o != owner);
}

/// On the tick of configuration `owner` (Envoy's main thread): what it held, given to Envoy.
/// A series counted 0 is given too: Envoy shows it from then on, as the wasm build's.
pub fn flush_labelled(owner: FilterConfigEnvoy) {
    let mut l = labelled_series();
    let Labelled { series, held, .. } = &mut *l;
    held.retain(|&(o, index, count)| {
        if o != owner as usize {
            return true;
        }
        if let Some((id, values)) = series.get(index) {
            let mut values: Vec<ModuleBuffer> = values
                .iter()
                .map(|v| ModuleBuffer::of(v.as_bytes()))
                .collect();
            // SAFETY: the configuration's own pointer, on Envoy's main thread in its tick;
            // `id` has as many label names as `values` has values, which live for the call.
            unsafe {
                abi::envoy_dynamic_module_callback_http_filter_config_increment_counter(
                    owner,
                    *id as usize,
                    values.as_mut_ptr(),
                    values.len(),
                    count,
                )
            };
        }
        false
    });
}

/// Configurations with a tick on Envoy's main thread: while there is one, the workers gather
/// their writes to the shared records for it.
static TICKING: AtomicUsize = AtomicUsize::new(0);

/// Every worker's writes to the shared records (answers for the health windows, tokens for
/// the token records), made once a tick on Envoy's main thread ([`write_gathered`]): a
/// request's end costs a lock and a few additions here instead of a read and a write of a
/// shared record per provider (BENCHMARKS.md, "The native build"), and the records see them
/// within a tick, as the wasm build's workers write theirs on their ticks.
static GATHERED: Mutex<SharedWrites> = Mutex::new(SharedWrites::new());

/// The end of one of `config`'s requests on a worker ([`Metrics::after_request`]): its
/// writes gathered for the main thread's tick when there is one, else made now.
pub fn after_request(metrics: &Metrics, config: &Config, host: &impl Host) {
    if TICKING.load(Ordering::Relaxed) == 0 {
        metrics.after_request(config, host);
        return;
    }
    let mut writes = GATHERED.lock().unwrap_or_else(|e| e.into_inner());
    metrics.after_request_gathered(config, host, &mut writes);
}

/// On a configuration's tick (Envoy's main thread): the gathered writes, made in `store`.
pub fn write_gathered(config: &Config, store: &(impl SharedStore + Clock)) {
    let writes = GATHERED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if !writes.is_empty() {
        writes.write(config, store, store);
    }
}
