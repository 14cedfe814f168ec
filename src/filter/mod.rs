//! The proxy-wasm glue: Envoy's callbacks handed to the roles (`crate::roles`), which run
//! against [`EnvoyHost`]. One module serves both roles; the plugin configuration's `role` picks
//! which context a plugin instance creates (docs/internals.md "How attempts are carried", router mode).

mod envoy_host;
mod fleet;
mod timers;

use crate::config::{Config, ConfigError, Role};
use crate::roles::{self, Downstream, Flow, LocalAnswers, Metrics, Upstream};
use envoy_host::EnvoyHost;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use std::rc::Rc;
use std::time::Duration;

/// How often every root does its periodic work (`Metrics::tick`: the answers its worker held
/// to shared data, the downstream root's gauges read again).
const TICK: Duration = Duration::from_millis(roles::TICK_MS);

/// Parses and validates the plugin configuration ([`Config::from_json`]). The module crate
/// (`module/`) passes it to [`start`] so that configuration loading, which runs once per
/// configuration, is compiled there, at opt-level "z", and not with this crate's per-request
/// code at 3 (BENCHMARKS.md "Module size").
pub type Load = fn(&[u8], &dyn Fn(&str) -> Option<String>) -> Result<Config, Vec<ConfigError>>;

/// The loader and the downstream role's cold answers [`start`] was given.
static HOOKS: std::sync::OnceLock<(Load, LocalAnswers)> = std::sync::OnceLock::new();

/// The module's start (`_initialize`, from `module/`): the log level, the panic hook and the
/// root contexts, which load their configuration with `load`; the downstream role answers the
/// models list and the status page with `answers` (compiled in the module crate too).
pub fn start(load: Load, answers: LocalAnswers) {
    proxy_wasm::set_log_level(LogLevel::Info);
    // Replaces the SDK's hook (installed by `set_log_level`), which unwraps the log call: a
    // panic aborts the VM, so say what it was, once, at the highest level, before it does.
    std::panic::set_hook(Box::new(|info| {
        let _ = hostcalls::log(LogLevel::Critical, &format!("llm_failover: panic: {info}"));
    }));
    let _ = HOOKS.set((load, answers));
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root {
            config: None,
            metrics: None,
            timers: Rc::default(),
            fleet: fleet::InFlight::default(),
        })
    });
}

/// One per plugin instance and worker: holds the validated configuration and the metric ids.
struct Root {
    config: Option<Rc<Config>>,
    metrics: Option<Rc<Metrics>>,
    /// The upstream role's per-attempt deadlines: they bring the next tick forward.
    timers: Rc<timers::Timers>,
    /// The downstream root's sync with the fleet's store, when one is in flight.
    fleet: fleet::InFlight,
}

impl Context for Root {
    fn on_grpc_call_response(&mut self, token_id: u32, status_code: u32, response_size: usize) {
        if let (Some(config), Some(metrics)) = (&self.config, &self.metrics) {
            (self.fleet).answered((config, metrics), token_id, status_code, response_size);
        }
    }

    fn on_done(&mut self) -> bool {
        // Answers held in this VM reach shared data before it goes.
        if let (Some(config), Some(metrics)) = (&self.config, &self.metrics) {
            metrics.flush_answers(config, &EnvoyHost);
            self.fleet.abandon(config);
        }
        true
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        // Follow Envoy's level for wasm logs (`-l debug`, or `--component-log-level wasm:debug`),
        // read once here: debug lines cost nothing unless that level is on.
        if let Ok(level) = hostcalls::get_log_level() {
            proxy_wasm::set_log_level(level);
        }
        let raw = self.get_plugin_configuration().unwrap_or_default();
        let Some((load, _)) = HOOKS.get() else {
            return false;
        };
        match load(&raw, &|name| std::env::var(name).ok()) {
            Ok(config) => {
                roles::init_health_records(&config, &EnvoyHost);
                let metrics = Metrics::new(&config, &EnvoyHost);
                metrics.refresh_breaker_states(&config, &EnvoyHost);
                // With the fleet's store the downstream root ticks at least once per sync.
                let tick = match (&config.fleet, config.role) {
                    (Some(f), Role::Downstream) => TICK.min(Duration::from_millis(f.sync_ms)),
                    _ => TICK,
                };
                self.set_tick_period(tick);
                let (config, metrics) = (Rc::new(config), Rc::new(metrics));
                roles::registry::register(&config, &metrics);
                self.metrics = Some(metrics);
                self.config = Some(config);
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
            metrics.tick(config, &EnvoyHost);
            match config.role {
                Role::Downstream => self.fleet.tick(config, metrics),
                Role::Upstream => self.timers.fire(),
            }
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        let config = Rc::clone(self.config.as_ref()?);
        let metrics = Rc::clone(self.metrics.as_ref()?);
        Some(match config.role {
            Role::Downstream => Box::new(DownstreamContext(Downstream::new(
                EnvoyHost,
                config,
                metrics,
                HOOKS.get()?.1,
            ))),
            Role::Upstream => Box::new(UpstreamContext {
                id: context_id,
                role: Rc::new(std::cell::RefCell::new(Upstream::new(
                    EnvoyHost, config, metrics,
                ))),
                timers: Rc::clone(&self.timers),
                deadline: None,
            }),
        })
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

fn action(flow: Flow) -> Action {
    match flow {
        Flow::Continue => Action::Continue,
        Flow::Pause => Action::Pause,
    }
}

struct DownstreamContext(Downstream<EnvoyHost>);

impl Context for DownstreamContext {
    fn on_done(&mut self) -> bool {
        self.0.on_done();
        true
    }
}

impl HttpContext for DownstreamContext {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        action(self.0.on_request_headers(end_of_stream))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        action(self.0.on_request_body(body_size, end_of_stream))
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        action(self.0.on_response_headers())
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        action(self.0.on_response_body(body_size, end_of_stream))
    }
}

/// One attempt in the upstream role. The role is shared with the root's timers, which wake it
/// at its deadline ([`timers`]); after every callback its deadline is handed to them.
struct UpstreamContext {
    id: u32,
    role: timers::Shared,
    timers: Rc<timers::Timers>,
    /// The deadline the timers hold for this attempt.
    deadline: Option<u64>,
}

impl UpstreamContext {
    /// After each callback: hands the attempt's deadline to the timers when it changed.
    #[inline(never)]
    fn after(&mut self) {
        let deadline = self.role.borrow().deadline();
        if deadline != self.deadline {
            self.deadline = deadline;
            self.timers.set(self.id, deadline, &self.role);
        }
    }
}

impl Context for UpstreamContext {
    fn on_done(&mut self) -> bool {
        self.role.borrow_mut().on_done();
        if self.deadline.take().is_some() {
            self.timers.set(self.id, None, &self.role);
        }
        true
    }
}

impl HttpContext for UpstreamContext {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let flow = self.role.borrow_mut().on_request_headers(end_of_stream);
        self.after();
        action(flow)
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let flow = self
            .role
            .borrow_mut()
            .on_request_body(body_size, end_of_stream);
        self.after();
        action(flow)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let flow = self.role.borrow_mut().on_response_headers(end_of_stream);
        self.after();
        action(flow)
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let flow = self
            .role
            .borrow_mut()
            .on_response_body(body_size, end_of_stream);
        self.after();
        action(flow)
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        let flow = self.role.borrow_mut().on_response_trailers();
        self.after();
        action(flow)
    }
}
