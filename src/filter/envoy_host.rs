//! The core's host traits over proxy-wasm (shared data with compare-and-swap, the clock), and
//! the few reads and writes of the per-request path that bypass the SDK's helpers: those copy
//! every header into a `String` (panicking on bytes that are not UTF-8) and allocate twice per
//! property path; these hand back the host's buffer as it is.

use super::metrics::Metrics;
use crate::config::Config;
use crate::health::{Admission, BreakerState, Health};
use crate::host::{Cas, Clock, SetError, SharedStore};
use crate::plan::Gatekeeper;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{MapType, Status};
use std::ptr::null_mut;
use std::time::UNIX_EPOCH;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_header_map_pairs(map_type: u32, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_get_property(
        path_data: *const u8,
        path_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
    ) -> u32;
    fn proxy_set_property(
        path_data: *const u8,
        path_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> u32;
}

/// Takes ownership of a buffer the host filled through the SDK's `proxy_on_memory_allocate`
/// (a boxed slice of exactly `size` bytes, which is what the SDK itself reclaims this way).
fn host_buffer(status: u32, data: *mut u8, size: usize) -> Option<Vec<u8>> {
    if status != Status::Ok as u32 || data.is_null() {
        return None;
    }
    // SAFETY: the host wrote `size` bytes into memory it obtained from the SDK's allocator,
    // and nothing else owns it.
    Some(unsafe { Vec::from_raw_parts(data, size, size) })
}

/// A whole header map as the host serializes it; read it with [`HeaderPairs`].
pub fn header_map(map: MapType) -> Vec<u8> {
    let (mut data, mut size) = (null_mut(), 0);
    // SAFETY: out-pointers to live locals.
    let status = unsafe { proxy_get_header_map_pairs(map as u32, &mut data, &mut size) };
    host_buffer(status, data, size).unwrap_or_default()
}

/// A property by its serialized path (segments joined by NUL, e.g. `b"response\0flags"`), so
/// constant paths cost no allocation. `None` when absent.
pub fn property(path: &[u8]) -> Option<Vec<u8>> {
    let (mut data, mut size) = (null_mut(), 0);
    // SAFETY: `path` is live for the call; out-pointers to live locals.
    let status = unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut data, &mut size) };
    host_buffer(status, data, size)
}

/// Writes one of our filter-state properties (a one-segment path). A refusal is ignored, like
/// any other property the host will not take: the SDK's helper would panic instead.
pub fn set_property(name: &str, value: &[u8]) {
    // SAFETY: both slices are live for the call.
    unsafe { proxy_set_property(name.as_ptr(), name.len(), value.as_ptr(), value.len()) };
}

/// Envoy shared data, visible to every worker VM with the same `vm_id`.
pub struct EnvoyStore;

impl SharedStore for EnvoyStore {
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)> {
        match hostcalls::get_shared_data(key) {
            Ok((Some(value), Some(cas))) => Some((value, cas)),
            _ => None,
        }
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<Cas>) -> Result<(), SetError> {
        // Envoy reads cas 0 (None) as "no check"; records are created at configure time, so
        // updates always carry the token they read.
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => Ok(()),
            Err(Status::CasMismatch) => Err(SetError::CasMismatch),
            Err(_) => Err(SetError::Refused),
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
pub fn u64_property(path: &[u8]) -> u64 {
    property(path)
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

/// The request's Envoy response flags (`response.flags`).
pub fn response_flags() -> u64 {
    u64_property(b"response\0flags")
}

/// Upstream attempts Envoy's router made for this request (`upstream.request_attempt_count`).
pub fn attempt_count() -> u64 {
    u64_property(b"upstream\0request_attempt_count")
}

/// A property holding text, as a `String`; `None` when absent or not UTF-8.
pub fn text_property(path: &[u8]) -> Option<String> {
    property(path).and_then(|b| String::from_utf8(b).ok())
}

/// The `:status` of a header map (0 when absent or unreadable).
pub fn status_code(map: MapType) -> u16 {
    header(map, ":status")
        .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
        .unwrap_or(0)
}

/// One header's value, as bytes (values need not be UTF-8).
pub fn header(map: MapType, name: &str) -> Option<Vec<u8>> {
    hostcalls::get_map_value_bytes(map, name).ok().flatten()
}

/// Answers the request with one of the filter's own replies (SPEC section 6): JSON error body
/// and `x-should-retry`. Serves both roles.
pub fn send_reply(reply: &crate::reply::Reply) {
    let body = reply.body();
    let should_retry = if reply.should_retry { "true" } else { "false" };
    let _ = hostcalls::send_http_response(
        u32::from(reply.status),
        vec![
            ("content-type", "application/json"),
            (crate::wire::SHOULD_RETRY_HEADER, should_retry),
        ],
        Some(body.as_bytes()),
    );
}
