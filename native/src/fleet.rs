//! The fleet's sync on the native build (`llm_failover::fleet` decides everything, as for the
//! wasm build's `src/filter/fleet.rs`): on the downstream configuration's tick on Envoy's main
//! thread, the configuration whose tick claims the interval (one per Envoy: the claim is in
//! the process-wide store) starts one HTTP/2 stream to the rate-limit service's cluster
//! (`http_filter_config_start_http_stream`): the gRPC call `ShouldRateLimit` as a POST of one
//! gRPC frame. The answer's headers, body and trailers go to the core's
//! [`GrpcAnswer`], which says whether the call succeeded; its end (complete, or reset) ends
//! the sync. Envoy answers a refused connection or `fleet.timeout` itself, as a gRPC error
//! (`grpc-status: 14` in the headers), so those complete too. A configuration destroyed with a stream open hands back
//! what the sync took.
//!
//! Why a stream and not `http_filter_config_http_callout` (one request, one answer): Envoy 1.40
//! hands a callout's module the answer's headers and body but not its trailers, where a gRPC
//! server puts `grpc-status` when it sends a message (docs/internals.md "The native build").

use crate::abi::{self, FilterConfigEnvoy, Header, ModuleBuffer};
use crate::host::NativeHost;
use llm_failover::config::Config;
use llm_failover::fleet::wire::{grpc_frame, GrpcAnswer, GRPC_PATH};
use llm_failover::fleet::{self, Sync};
use llm_failover::roles::Metrics;
use std::cell::RefCell;

/// `envoy_dynamic_module_type_http_callout_init_result_Success`.
const STARTED: u32 = 0;

/// The sync a configuration has in flight: the stream's id, what it took, the answer so far.
struct InFlight {
    stream: u64,
    sync: Sync,
    answer: GrpcAnswer,
}

/// A downstream configuration's syncs (on Envoy's main thread only).
#[derive(Default)]
pub struct FleetSync(RefCell<Option<InFlight>>);

impl FleetSync {
    /// On the configuration's tick: claims this Envoy's sync when the interval has passed and
    /// starts it.
    pub fn tick(
        &self,
        config_envoy: FilterConfigEnvoy,
        config: &Config,
        metrics: &Metrics,
        host: &NativeHost,
    ) {
        let Some(f) = &config.fleet else { return };
        if self.0.borrow().is_some() || !fleet::claim(f, host, host) {
            return;
        }
        let Some(sync) = fleet::start(config, host, host) else {
            return;
        };
        let body = grpc_frame(&sync.message);
        let headers = [
            (":method", "POST"),
            (":path", GRPC_PATH),
            (":authority", f.cluster.as_str()),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ];
        let mut headers: Vec<Header> = headers.iter().map(|(k, v)| Header::of(k, v)).collect();
        let mut stream = 0u64;
        // SAFETY: the configuration's pointer, on Envoy's main thread (its scheduled hook);
        // every buffer lives for the call (Envoy copies them into its request).
        let started = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_start_http_stream(
                config_envoy,
                &mut stream,
                ModuleBuffer::of(f.cluster.as_bytes()),
                headers.as_mut_ptr(),
                headers.len(),
                ModuleBuffer::of(&body),
                true,
                f.timeout_ms,
            )
        };
        if started == STARTED {
            *self.0.borrow_mut() = Some(InFlight {
                stream,
                sync,
                answer: GrpcAnswer::default(),
            });
        } else {
            log::debug!("llm_failover: fleet sync not started: {started}");
            end(config, metrics, host, sync, None);
        }
    }

    /// Headers or trailers of the stream `stream`.
    pub fn headers(&self, stream: u64, headers: &[(&[u8], &[u8])]) {
        if let Some(f) = self.0.borrow_mut().as_mut().filter(|f| f.stream == stream) {
            for (k, v) in headers {
                f.answer.header(k, v);
            }
        }
    }

    /// Body of the stream `stream`.
    pub fn data(&self, stream: u64, chunks: &[&[u8]]) {
        if let Some(f) = self.0.borrow_mut().as_mut().filter(|f| f.stream == stream) {
            for chunk in chunks {
                f.answer.data(chunk);
            }
        }
    }

    /// The stream `stream` ended: `complete` with its whole answer (a gRPC error Envoy made
    /// included), else reset.
    pub fn ended(
        &self,
        stream: u64,
        complete: bool,
        config: &Config,
        metrics: &Metrics,
        host: &NativeHost,
    ) {
        let Some(f) = self.0.borrow_mut().take_if(|f| f.stream == stream) else {
            return;
        };
        let answer = match (complete, f.answer.message()) {
            (true, Ok(message)) => Some(message),
            (true, Err(why)) => {
                log::debug!("llm_failover: fleet sync failed: {why}");
                None
            }
            (false, _) => {
                log::debug!("llm_failover: fleet sync failed: stream reset");
                None
            }
        };
        end(config, metrics, host, f.sync, answer);
    }

    /// The configuration goes with a sync in flight: what it took is handed back (Envoy resets
    /// the stream without calling this configuration again).
    pub fn abandon(&self, config: &Config, host: &NativeHost) {
        if let Some(f) = self.0.borrow_mut().take() {
            fleet::hand_back(config, host, host, f.sync);
        }
    }
}

fn end(config: &Config, metrics: &Metrics, host: &NativeHost, sync: Sync, answer: Option<&[u8]>) {
    let outcome = fleet::finish(config, host, host, sync, answer);
    metrics.fleet_synced(host, outcome.result);
    for (level, line) in &outcome.lines {
        log::log!(*level, "{line}");
    }
    if !outcome.opened.is_empty() {
        metrics.refresh_breaker_states(config, host);
    }
}
