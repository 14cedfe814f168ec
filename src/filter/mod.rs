//! The proxy-wasm glue: thin adapters between Envoy's callbacks and the decision core.
//! One module serves both roles; the plugin configuration's `role` picks which context a
//! plugin instance creates (DESIGN section 1, router mode).

mod downstream;
mod envoy_host;
mod metrics;
mod upstream;

use crate::config::{Config, Role};
use metrics::Metrics;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};
use std::rc::Rc;
use std::time::Duration;

/// How often the downstream root re-reads the breaker states into the gauge.
const GAUGE_REFRESH: Duration = Duration::from_secs(1);

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root { config: None, metrics: None })
    });
}}

/// One per plugin instance and worker: holds the validated configuration and the metric ids.
struct Root {
    config: Option<Rc<Config>>,
    metrics: Option<Rc<Metrics>>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        // Follow Envoy's level for wasm logs (`-l debug`, or `--component-log-level wasm:debug`),
        // read once here: debug lines cost nothing unless that level is on.
        if let Ok(level) = hostcalls::get_log_level() {
            proxy_wasm::set_log_level(level);
        }
        let raw = self.get_plugin_configuration().unwrap_or_default();
        match Config::from_json(&raw, &|name| std::env::var(name).ok()) {
            Ok(config) => {
                envoy_host::init_health_records(&config);
                let metrics = Metrics::new(&config);
                metrics.refresh_breaker_states(&config);
                if config.role == Role::Downstream {
                    self.set_tick_period(GAUGE_REFRESH);
                }
                self.metrics = Some(Rc::new(metrics));
                self.config = Some(Rc::new(config));
                true
            }
            Err(problems) => {
                for problem in &problems {
                    log::error!("llm_failover: invalid plugin configuration: {problem}");
                }
                // Refusing the configuration makes Envoy refuse the filter: nothing
                // half-configured ever serves traffic.
                false
            }
        }
    }

    fn on_tick(&mut self) {
        if let (Some(config), Some(metrics)) = (&self.config, &self.metrics) {
            metrics.refresh_breaker_states(config);
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        let config = Rc::clone(self.config.as_ref()?);
        let metrics = Rc::clone(self.metrics.as_ref()?);
        Some(match config.role {
            Role::Downstream => Box::new(downstream::Downstream::new(config, metrics)),
            Role::Upstream => Box::new(upstream::Upstream::new(config, metrics)),
        })
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
