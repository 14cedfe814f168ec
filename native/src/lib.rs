//! The Envoy dynamic module (`dist/libllm_failover.so`, built by `scripts/build.sh`): the same
//! roles as the proxy-wasm module (`llm_failover::roles`), run against [`host::NativeHost`]
//! instead of proxy-wasm hostcalls. Envoy 1.40's dynamic-modules HTTP filter loads it, as the
//! downstream filter before the router and as the upstream filter of every provider cluster,
//! configured by the same JSON as the wasm plugins (`llm-failover render --runtime native`).
//!
//! - Configuration: parsed and validated on Envoy's main thread when the filter config loads
//!   (an invalid one is refused, so Envoy refuses the filter), then once more per worker
//!   thread on its first request: the roles hold `Rc`s, as in one wasm VM per worker.
//! - Shared data: one process-wide store (`host::STORE`), the same counts as proxy-wasm's
//!   shared data across workers.
//! - A panic in a role is caught at the hook: the request fails closed with a 500 (the
//!   filter answers nothing else for that stream), and Envoy goes on.
//! - Periodic work: the upstream role's deadlines run from a thread of the module's own
//!   (`timers`); the answers each worker holds for the health windows are written when one of
//!   its requests ends a second or more after the last write (proxy-wasm: every second's tick).
//!
//! docs/internals.md "The native build" says what Envoy does not give a dynamic module yet.

mod abi;
mod hooks;
mod host;
mod metrics;
mod requests;
mod timers;

use llm_failover::config::Config;
use llm_failover::roles::{self, Metrics};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// A filter configuration as Envoy holds it (one per filter in the bootstrap): the validated
/// JSON, parsed again per worker.
pub(crate) struct NativeConfig {
    id: u64,
    json: Vec<u8>,
    /// Its metrics, defined while it loaded.
    metrics: std::sync::Arc<metrics::MetricTable>,
}

/// One configuration as one worker thread parsed it: (configuration id, config, metrics).
type Loaded = (u64, Rc<Config>, Rc<Metrics>);

/// Environment variables the configuration names (credentials): the process's own.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl NativeConfig {
    /// Validates `json` (and creates the providers' shared records); the problems when it is
    /// not a valid configuration.
    fn load(config_envoy: abi::FilterConfigEnvoy, json: &[u8]) -> Result<NativeConfig, String> {
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        match Config::from_json(json, &env) {
            Ok(config) => {
                roles::init_health_records(&config, &host::NativeHost::detached());
                Ok(NativeConfig {
                    id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    json: json.to_vec(),
                    metrics: std::sync::Arc::new(metrics::MetricTable::define(
                        config_envoy,
                        &config,
                    )),
                })
            }
            Err(problems) => Err(problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")),
        }
    }

    /// This worker's parse of the configuration, with its metrics (made the first time).
    fn on_this_worker(&self) -> Option<(Rc<Config>, Rc<Metrics>)> {
        thread_local! {
            static LOADED: RefCell<Vec<Loaded>> =
                const { RefCell::new(Vec::new()) };
        }
        LOADED.with(|loaded| {
            if let Some((_, c, m)) = loaded.borrow().iter().find(|(id, _, _)| *id == self.id) {
                return Some((Rc::clone(c), Rc::clone(m)));
            }
            let config = Rc::new(Config::from_json(&self.json, &env).ok()?);
            let host = host::NativeHost::detached_with(Some(self.metrics.clone()));
            let metrics = Rc::new(Metrics::new(&config, &host));
            roles::registry::register(&config, &metrics);
            loaded
                .borrow_mut()
                .push((self.id, Rc::clone(&config), Rc::clone(&metrics)));
            Some((config, metrics))
        })
    }
}

/// Writes the answers this worker holds into the health windows, and sets the breaker and
/// health gauges from shared data, at most once a second (proxy-wasm's build does both on
/// every root's one-second tick).
fn flush_answers(config: &Config, metrics: &Metrics, host: &host::NativeHost) {
    thread_local! {
        static LAST: Cell<u64> = const { Cell::new(0) };
    }
    let now = llm_failover::host::Clock::now_ms(host);
    LAST.with(|last| {
        if now.saturating_sub(last.get()) >= 1000 {
            last.set(now);
            metrics.flush_answers(config, host);
            if config.role == llm_failover::config::Role::Downstream {
                metrics.refresh_breaker_states(config, host);
            }
        }
    });
}

/// Envoy's log, at `level` (`abi::LOG_*`).
pub(crate) fn envoy_log(level: u32, message: &str) {
    // SAFETY: the message lives for the call.
    unsafe {
        abi::envoy_dynamic_module_callback_log(level, abi::ModuleBuffer::of(message.as_bytes()))
    };
}

/// The `log` crate's records (the core logs through it) into Envoy's log.
struct EnvoyLogger;

impl log::Log for EnvoyLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        let level = match record.level() {
            log::Level::Error => abi::LOG_ERROR,
            log::Level::Warn => abi::LOG_WARN,
            log::Level::Info => abi::LOG_INFO,
            log::Level::Debug | log::Level::Trace => abi::LOG_DEBUG,
        };
        envoy_log(level, &record.args().to_string());
    }

    fn flush(&self) {}
}

/// The library's start: the logger and the panic hook (say what it was, once, at the
/// highest level; the hook that caught it fails the request closed).
fn start() {
    static LOGGER: EnvoyLogger = EnvoyLogger;
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Info);
    std::panic::set_hook(Box::new(|info| {
        envoy_log(abi::LOG_CRITICAL, &format!("llm_failover: panic: {info}"));
    }));
}
