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
//!   (`timers`); a configuration's periodic work (proxy-wasm: every second's tick) runs on
//!   Envoy's main thread, from the downstream configuration's tick: the gauges, and what the
//!   workers hand over at each request's end (answers and tokens for the shared records, the
//!   tokens' labelled counts: `metrics::after_request`).
//! - The fleet's sync (`fleet:`): one HTTP/2 stream to the rate-limit service from the
//!   downstream configuration's tick on Envoy's main thread (`fleet`).
//!
//! docs/internals.md "The native build" says what Envoy does not give a dynamic module yet.

mod abi;
mod fleet;
mod hooks;
mod host;
mod metrics;
mod requests;
mod timers;

use llm_failover::config::Config;
use llm_failover::roles::{self, Metrics};
use std::cell::RefCell;
use std::rc::Rc;

/// A filter configuration as Envoy holds it (one per filter in the bootstrap): the validated
/// JSON, parsed again per worker.
pub(crate) struct NativeConfig {
    id: u64,
    json: Vec<u8>,
    /// Its metrics, defined while it loaded.
    metrics: std::sync::Arc<metrics::MetricTable>,
    /// Its periodic work on Envoy's main thread, if it has some.
    main: Option<MainThread>,
}

/// A configuration's parse for its work on Envoy's main thread (proxy-wasm: the root's tick),
/// used there only: made while it loads, run by its [`timers::Tick`], dropped with it.
struct MainThread {
    config: Config,
    metrics: Metrics,
    /// The fleet's sync in flight, with `fleet:`.
    fleet: fleet::FleetSync,
    host: host::NativeHost,
    /// Stops (unlisted, then deleted) when the configuration goes.
    _tick: timers::Tick,
}

impl Drop for MainThread {
    fn drop(&mut self) {
        self.fleet.abandon(&self.config, &self.host);
    }
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
        follow_envoy_log_level();
        match Config::from_json(json, &env) {
            Ok(config) => {
                roles::init_health_records(&config, &host::NativeHost::detached());
                let table =
                    std::sync::Arc::new(metrics::MetricTable::define(config_envoy, &config));
                metrics::register(&table);
                // The root's tick, for what it reads from shared data alone (the downstream
                // role's gauges, so they follow a cooldown's end with no traffic) and what the
                // workers handed over at their requests' ends (`metrics::after_request`).
                // With the fleet's store, it ticks at least once per sync.
                let period = match &config.fleet {
                    Some(f) => roles::TICK_MS.min(f.sync_ms.max(1)),
                    None => roles::TICK_MS,
                };
                let main = (config.role == llm_failover::config::Role::Downstream)
                    .then(|| timers::Tick::start(config_envoy, period))
                    .flatten()
                    .map(|tick| {
                        metrics::tick_counts(config_envoy);
                        let host = host::NativeHost::for_config(config_envoy, table.clone());
                        let metrics = Metrics::new(&config, &host);
                        metrics.tick_shared(&config, &host);
                        MainThread {
                            config,
                            metrics,
                            fleet: fleet::FleetSync::default(),
                            host,
                            _tick: tick,
                        }
                    });
                Ok(NativeConfig {
                    id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    json: json.to_vec(),
                    metrics: table,
                    main,
                })
            }
            Err(problems) => Err(problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")),
        }
    }

    /// The configuration's tick on Envoy's main thread.
    fn on_main_thread_tick(&self, config_envoy: abi::FilterConfigEnvoy) {
        if let Some(main) = &self.main {
            main.metrics.tick_shared(&main.config, &main.host);
            metrics::write_gathered(&main.config, &host::NativeHost::detached());
            metrics::flush_labelled(config_envoy);
            (main.fleet).tick(config_envoy, &main.config, &main.metrics, &main.host);
        }
    }

    /// Headers or trailers (`headers`), or body (`data`), of a stream this configuration
    /// started (on Envoy's main thread).
    fn on_stream(&self, stream: u64, headers: &[(&[u8], &[u8])], data: &[&[u8]]) {
        if let Some(main) = &self.main {
            main.fleet.headers(stream, headers);
            main.fleet.data(stream, data);
        }
    }

    /// A stream this configuration started ended (`complete`, or reset).
    fn on_stream_end(&self, stream: u64, complete: bool) {
        if let Some(m) = &self.main {
            (m.fleet).ended(stream, complete, &m.config, &m.metrics, &m.host);
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

impl Drop for NativeConfig {
    fn drop(&mut self) {
        if self.main.is_some() {
            metrics::stop_ticking(self.metrics.owner());
        }
    }
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

/// Follows the level of Envoy's `dynamic_modules` logger (`-l debug`, or
/// `--component-log-level dynamic_modules:debug`), read when a configuration loads as the wasm
/// build reads its own: debug lines cost nothing unless that level is on.
fn follow_envoy_log_level() {
    // SAFETY: no arguments; Envoy's logger outlives the module.
    let level = unsafe { abi::envoy_dynamic_module_callback_get_log_level() };
    log::set_max_level(match level {
        0 => log::LevelFilter::Trace,
        1 => log::LevelFilter::Debug,
        2 => log::LevelFilter::Info,
        3 => log::LevelFilter::Warn,
        4 | 5 => log::LevelFilter::Error,
        _ => log::LevelFilter::Off,
    });
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
