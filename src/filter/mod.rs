//! The proxy-wasm glue: thin adapters between Envoy's callbacks and the decision core.
//! One module serves both roles; the plugin configuration's `role` picks which context a
//! plugin instance creates (DESIGN section 1, router mode).

mod downstream;
mod envoy_host;
mod upstream;

use crate::config::{Config, Role};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root { config: None }) });
}}

/// One per plugin instance and worker: holds the validated configuration.
struct Root {
    config: Option<Rc<Config>>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let raw = self.get_plugin_configuration().unwrap_or_default();
        match Config::from_json(&raw, &|name| std::env::var(name).ok()) {
            Ok(config) => {
                envoy_host::init_health_records(&config);
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

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        let config = Rc::clone(self.config.as_ref()?);
        Some(match config.role {
            Role::Downstream => Box::new(downstream::Downstream::new(config)),
            Role::Upstream => Box::new(upstream::Upstream::new(config)),
        })
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
