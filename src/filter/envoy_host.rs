//! [`Host`] over proxy-wasm: a few lines per method. Header maps and properties are read in
//! place, bypassing the SDK's helpers: those copy every header into a `String` (panicking on
//! bytes that are not UTF-8) and allocate twice per property path.

use crate::host::{Cas, Clock, SetError, SharedStore};
use crate::roles::{Host, Map, MetricKind};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, MetricType, Status};
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

fn headers(map: Map) -> MapType {
    match map {
        Map::Request => MapType::HttpRequestHeaders,
        Map::Response => MapType::HttpResponseHeaders,
    }
}

fn body(map: Map) -> BufferType {
    match map {
        Map::Request => BufferType::HttpRequestBody,
        Map::Response => BufferType::HttpResponseBody,
    }
}

/// Envoy, as the current context (stream or root) sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvoyHost;

impl SharedStore for EnvoyHost {
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

impl Clock for EnvoyHost {
    fn now_ms(&self) -> u64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64)
    }
}

impl Host for EnvoyHost {
    fn header(&self, map: Map, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(headers(map), name)
            .ok()
            .flatten()
    }

    fn header_map(&self, map: Map) -> Vec<u8> {
        let (mut data, mut size) = (null_mut(), 0);
        // SAFETY: out-pointers to live locals.
        let status =
            unsafe { proxy_get_header_map_pairs(headers(map) as u32, &mut data, &mut size) };
        host_buffer(status, data, size).unwrap_or_default()
    }

    fn set_header(&self, map: Map, name: &str, value: Option<&str>) {
        let _ = hostcalls::set_map_value(headers(map), name, value);
    }

    fn set_header_bytes(&self, map: Map, name: &str, value: Option<&[u8]>) {
        let _ = hostcalls::set_map_value_bytes(headers(map), name, value);
    }

    fn add_header_bytes(&self, map: Map, name: &str, value: &[u8]) {
        let _ = hostcalls::add_map_value_bytes(headers(map), name, value);
    }

    fn property(&self, path: &[u8]) -> Option<Vec<u8>> {
        let (mut data, mut size) = (null_mut(), 0);
        // SAFETY: `path` is live for the call; out-pointers to live locals.
        let status = unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut data, &mut size) };
        host_buffer(status, data, size)
    }

    fn set_property(&self, name: &str, value: &[u8]) {
        // A refusal is ignored, like any other property the host will not take: the SDK's
        // helper would panic instead.
        // SAFETY: both slices are live for the call.
        unsafe { proxy_set_property(name.as_ptr(), name.len(), value.as_ptr(), value.len()) };
    }

    fn body(&self, map: Map, size: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(body(map), 0, size).ok().flatten()
    }

    fn set_body(&self, map: Map, size: usize, value: &[u8]) {
        let _ = hostcalls::set_buffer(body(map), 0, size, value);
    }

    fn body_range(&self, map: Map, start: usize, len: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(body(map), start, len).ok().flatten()
    }

    fn append_body(&self, map: Map, size: usize, value: &[u8]) {
        // Envoy appends what is written at or past the buffer's end (prepends at 0, which is
        // the same for an empty buffer).
        let _ = hostcalls::set_buffer(body(map), size, 0, value);
    }

    fn resume(&self, map: Map) {
        let _ = match map {
            Map::Request => hostcalls::resume_http_request(),
            Map::Response => hostcalls::resume_http_response(),
        };
    }

    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: Option<&[u8]>) {
        let _ = hostcalls::send_http_response(u32::from(status), headers.to_vec(), body);
    }

    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<u32> {
        let kind = match kind {
            MetricKind::Counter => MetricType::Counter,
            MetricKind::Gauge => MetricType::Gauge,
        };
        // Envoy refuses only an unknown metric type.
        hostcalls::define_metric(kind, name).ok()
    }

    fn increment_metric(&self, id: u32) {
        let _ = hostcalls::increment_metric(id, 1);
    }

    fn add_metric(&self, id: u32, delta: u64) {
        let _ = hostcalls::increment_metric(id, i64::try_from(delta).unwrap_or(i64::MAX));
    }

    fn record_metric(&self, id: u32, value: u64) {
        let _ = hostcalls::record_metric(id, value);
    }

    fn clear_route_cache(&self) -> bool {
        hostcalls::call_foreign_function("clear_route_cache", Some(&[])).is_ok()
    }
}
