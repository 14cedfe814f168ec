//! The core's host traits over proxy-wasm: shared data with compare-and-swap, and the clock.

use super::metrics::Metrics;
use crate::config::Config;
use crate::health::{Admission, BreakerState, Health};
use crate::host::{Cas, CasMismatch, Clock, SharedStore};
use crate::plan::Gatekeeper;
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;
use std::time::UNIX_EPOCH;

/// Envoy shared data, visible to every worker VM with the same `vm_id`.
pub struct EnvoyStore;

impl SharedStore for EnvoyStore {
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)> {
        match hostcalls::get_shared_data(key) {
            Ok((Some(value), Some(cas))) => Some((value, cas)),
            _ => None,
        }
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<Cas>) -> Result<(), CasMismatch> {
        // Envoy reads cas 0 (None) as "no check"; records are created at configure time, so
        // updates always carry the token they read.
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => Ok(()),
            Err(Status::CasMismatch) => Err(CasMismatch),
            Err(_) => Err(CasMismatch),
        }
    }
}

pub struct EnvoyClock;

pub fn now_ms() -> u64 {
    EnvoyClock.now_ms()
}

impl Clock for EnvoyClock {
    fn now_ms(&self) -> u64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64)
    }
}

pub fn health(config: &Config) -> Health<'_> {
    health_at(config, &EnvoyClock)
}

/// Health read against a clock the caller already read (see `FixedClock`).
pub fn health_at<'a>(config: &'a Config, clock: &'a dyn Clock) -> Health<'a> {
    Health::new(&EnvoyStore, clock, &config.breaker, &config.dead_marks)
}

/// Creates each provider's health record if no worker has yet, so that every later update is
/// a real compare-and-swap (Envoy cannot CAS on a key that does not exist).
pub fn init_health_records(config: &Config) {
    let health = health(config);
    for provider in &config.providers {
        health.ensure_record(&provider.name);
    }
}

/// Planning's view of health: one shared-data read per provider considered.
pub struct SharedGatekeeper<'a> {
    pub config: &'a Config,
    pub health: Health<'a>,
    pub metrics: &'a Metrics,
}

impl Gatekeeper for SharedGatekeeper<'_> {
    fn gate(&self, provider: usize, model: &str) -> Admission {
        let name = &self.config.providers[provider].name;
        let admission = self
            .health
            .admit(name, model, self.config.timeouts.attempt_ms);
        if let Admission::Available { probe: true, .. } = admission {
            // This request claimed the probe after the cooldown: half-open.
            self.metrics.breaker_state(provider, BreakerState::HalfOpen);
        }
        admission
    }
}

/// Envoy's `DC` response flag: the downstream connection went away.
pub const DOWNSTREAM_CONNECTION_TERMINATION: u64 = 0x4000;

/// An integer property (Envoy hands them over as 8 little-endian bytes); 0 when absent.
pub fn u64_property(context: &dyn proxy_wasm::traits::Context, path: Vec<&str>) -> u64 {
    context
        .get_property(path)
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

/// The request's Envoy response flags (`response.flags`).
pub fn response_flags(context: &dyn proxy_wasm::traits::Context) -> u64 {
    u64_property(context, vec!["response", "flags"])
}

/// Upstream attempts Envoy's router made for this request (`upstream.request_attempt_count`).
pub fn attempt_count(context: &dyn proxy_wasm::traits::Context) -> u64 {
    u64_property(context, vec!["upstream", "request_attempt_count"])
}
