//! The filter's metrics (docs/behaviour.md section 8) as Envoy 1.40 lets a dynamic module have
//! them: defined on the filter configuration while it loads (Envoy refuses a definition later),
//! then used from any stream of that configuration by id. The roles define theirs by name on
//! first use ([`Host::define_metric`](llm_failover::roles::Host)), so every name they can ask
//! for is defined here first, under the same `wasmcustom` namespace (the bootstrap's
//! `metrics_namespace`) and the same flat names as the proxy-wasm build: Envoy's tag rules
//! (`llm_failover::metrics::stats_tags`) give them the same labels.
//!
//! Names only known at run time are not defined: `llm_failover_tokens_total` per model label
//! (docs/internals.md "The native build").

use crate::abi::{self, FilterConfigEnvoy, ModuleBuffer};
use llm_failover::classify::Class;
use llm_failover::config::Config;
use llm_failover::eligible::SkipReason;
use llm_failover::metrics as names;
use llm_failover::roles::MetricKind;
use std::collections::HashMap;

/// Envoy's metric ids of one filter configuration, by name.
#[derive(Default)]
pub struct MetricTable {
    ids: HashMap<String, (MetricKind, u32)>,
}

impl MetricTable {
    /// Defines every metric the roles can name under `config` (on Envoy's main thread, in
    /// `on_http_filter_config_new`).
    pub fn define(config_envoy: FilterConfigEnvoy, config: &Config) -> MetricTable {
        let mut table = MetricTable::default();
        let providers: Vec<&str> = config.providers.iter().map(|p| p.name.as_str()).collect();
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
        }
        for chain in &config.chains {
            table.add(
                config_envoy,
                MetricKind::Counter,
                names::exhausted(&chain.name),
            );
        }
        table
    }

    fn add(&mut self, config_envoy: FilterConfigEnvoy, kind: MetricKind, name: String) {
        let mut id = 0usize;
        let bytes = ModuleBuffer::of(name.as_bytes());
        // SAFETY: Envoy's configuration pointer, in its config_new hook; the name lives for the
        // call; no labels.
        let result = unsafe {
            match kind {
                MetricKind::Counter => {
                    abi::envoy_dynamic_module_callback_http_filter_config_define_counter(
                        config_envoy,
                        bytes,
                        std::ptr::null_mut(),
                        0,
                        &mut id,
                    )
                }
                MetricKind::Gauge => {
                    abi::envoy_dynamic_module_callback_http_filter_config_define_gauge(
                        config_envoy,
                        bytes,
                        std::ptr::null_mut(),
                        0,
                        &mut id,
                    )
                }
            }
        };
        if result == abi::METRICS_SUCCESS {
            if let Ok(id) = u32::try_from(id) {
                self.ids.insert(name, (kind, id));
            }
        }
    }

    /// The id of a metric defined under `name` as `kind`.
    pub fn id(&self, kind: MetricKind, name: &str) -> Option<u32> {
        self.ids
            .get(name)
            .and_then(|(k, id)| (*k == kind).then_some(*id))
    }
}
