//! The fleet's sync in Envoy (`crate::fleet` decides everything): on the downstream root's
//! tick, the worker that claims the interval dispatches one gRPC call to the rate-limit
//! service's cluster; its answer (or failure, or timeout) ends the sync, and the outcome is
//! counted, logged once per change of the store's state, and shown in the breaker gauges.

use super::envoy_host::EnvoyHost;
use crate::config::Config;
use crate::fleet::{self, Sync};
use crate::roles::Metrics;
use proxy_wasm::hostcalls;
use proxy_wasm::types::BufferType;
use std::time::Duration;

/// The sync this worker has in flight: the call's token and what it took.
#[derive(Default)]
pub struct InFlight(Option<(u32, Sync)>);

impl InFlight {
    /// On a tick: claims this Envoy's sync when the interval has passed and starts it.
    pub fn tick(&mut self, config: &Config, metrics: &Metrics) {
        let Some(f) = &config.fleet else { return };
        if self.0.is_some() || !fleet::claim(f, &EnvoyHost, &EnvoyHost) {
            return;
        }
        let Some(sync) = fleet::start(config, &EnvoyHost, &EnvoyHost) else {
            return;
        };
        let call = hostcalls::dispatch_grpc_call(
            &f.cluster,
            fleet::SERVICE,
            fleet::METHOD,
            Vec::new(),
            Some(&sync.message),
            Duration::from_millis(f.timeout_ms),
        );
        match call {
            Ok(token) => self.0 = Some((token, sync)),
            Err(status) => {
                log::debug!("llm_failover: fleet sync not dispatched: {status:?}");
                end(config, metrics, sync, None);
            }
        }
    }

    /// The worker's VM goes: a sync still in flight gives back what it took.
    pub fn abandon(&mut self, config: &Config) {
        if let Some((_, sync)) = self.0.take() {
            fleet::hand_back(config, &EnvoyHost, &EnvoyHost, sync);
        }
    }

    /// The call's answer (`status` 0: OK, with `size` bytes of response).
    pub fn answered(
        &mut self,
        (config, metrics): (&Config, &Metrics),
        token: u32,
        status: u32,
        size: usize,
    ) {
        let Some((_, sync)) = self.0.take_if(|(t, _)| *t == token) else {
            return;
        };
        if status != 0 {
            log::debug!("llm_failover: fleet sync failed: gRPC status {status}");
            return end(config, metrics, sync, None);
        }
        let body = hostcalls::get_buffer(BufferType::GrpcReceiveBuffer, 0, size);
        let body = body.ok().flatten().unwrap_or_default();
        end(config, metrics, sync, Some(&body));
    }
}

fn end(config: &Config, metrics: &Metrics, sync: Sync, answer: Option<&[u8]>) {
    let outcome = fleet::finish(config, &EnvoyHost, &EnvoyHost, sync, answer);
    metrics.fleet_synced(&EnvoyHost, outcome.result);
    for (level, line) in &outcome.lines {
        log::log!(*level, "{line}");
    }
    if !outcome.opened.is_empty() {
        metrics.refresh_breaker_states(config, &EnvoyHost);
    }
}
