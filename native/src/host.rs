//! [`Host`] over Envoy's dynamic-module callbacks: a few lines per method, like the proxy-wasm
//! shell's `EnvoyHost`. Shared data is this process's [`STORE`] (every worker thread sees it,
//! with proxy-wasm's CAS semantics), the clock is the system's.
//!
//! Filter state: an upstream filter that Envoy is destroying (an attempt that got no answer) has
//! no stream info left, so it can neither read nor write filter state, while its role still
//! reads and writes its request's records then (the attempt log, the failed attempts' classes).
//! So the roles' one-segment properties live in this module, per request ([`requests`]), keyed
//! by an id the downstream filter writes into filter state for the upstream filters of the same
//! request to read; only what Envoy itself reads goes to filter state: the attempt slots and the
//! grouping cluster (the route's matcher reads them) as the roles write them (a slot rewritten
//! from a destroyed upstream filter goes through the request's downstream filter,
//! [`NativeHost::set_filter_state`]), and the access-log properties at the end of the request
//! ([`NativeHost::publish_logs`]), under the same `wasm.` names as the proxy-wasm build, so the
//! rendered routes and log formats are the same for both.

use crate::abi::{self, EnvoyBuffer, FilterEnvoy, Header, ModuleBuffer};
use crate::metrics::{self, MetricTable};
use crate::requests;
use llm_failover::host::{Cas, Clock, ProcessStore, SetError, SharedStore};
use llm_failover::roles::{Host, Map, MetricKind};
use llm_failover::wire;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

/// The process-wide shared data.
pub static STORE: ProcessStore = ProcessStore::new();

/// Filter-state key of the request's id in [`requests`].
const REQUEST_ID_KEY: &[u8] = b"llm_failover.native_request";

/// Where [`NativeHost::keep_response_flags`] keeps them in the request's record.
const KEPT_RESPONSE_FLAGS: &str = "native.response_flags";

/// The properties Envoy reads at the end of the request (access logs), published once.
const LOGGED: [&str; 7] = [
    wire::ATTEMPTS_PROPERTY,
    wire::CHAIN_PROPERTY,
    wire::CALLER_PROPERTY,
    wire::REQUEST_MODEL_PROPERTY,
    wire::RESPONSE_MODEL_PROPERTY,
    wire::INPUT_TOKENS_PROPERTY,
    wire::OUTPUT_TOKENS_PROPERTY,
];

/// A `response.flags` value (u64, little-endian) as a number.
fn flags_of(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn header_type(map: Map) -> u32 {
    match map {
        Map::Request => abi::REQUEST_HEADER,
        Map::Response => abi::RESPONSE_HEADER,
    }
}

/// Where the first chunk of body `body_type` starts (null: none), to tell two buffers apart.
pub(crate) fn first_chunk(filter: FilterEnvoy, body_type: u32) -> *const u8 {
    let mut first = std::ptr::null();
    // SAFETY: live filter pointer, in its hook.
    unsafe {
        with_chunks(filter, body_type, |chunks| {
            first = chunks.first().map_or(std::ptr::null(), |c| c.ptr);
        })
    };
    first
}

/// `f` of the body chunks of one of Envoy's buffers (not called when it has none), listed
/// on the stack when there are a few (a body is one or a few chunks), else in a vector.
///
/// # Safety
/// A live filter pointer, in its hook; the chunks are Envoy's, valid until the hook returns
/// or the body changes.
unsafe fn with_chunks(filter: FilterEnvoy, body_type: u32, f: impl FnOnce(&[EnvoyBuffer])) {
    let n = abi::envoy_dynamic_module_callback_http_get_body_chunks_size(filter, body_type);
    let mut few = [EnvoyBuffer::NULL; 8];
    let mut many = Vec::new();
    let chunks = match few.get_mut(..n) {
        Some(chunks) => chunks,
        None => {
            many.resize(n, EnvoyBuffer::NULL);
            many.as_mut_slice()
        }
    };
    // The list has room for the count Envoy gave.
    if n > 0
        && abi::envoy_dynamic_module_callback_http_get_body_chunks(
            filter,
            body_type,
            chunks.as_mut_ptr(),
        )
    {
        f(chunks);
    }
}

/// `n` in decimal, written on the stack.
fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
        at -= 1;
        if n == 0 {
            break;
        }
    }
    digits.get(at..).unwrap_or_default()
}

/// `f` of `name` under the proxy-wasm build's prefix (`wasm.<name>`), put together on the
/// stack when it fits.
fn with_wasm_key<T>(name: &str, f: impl FnOnce(&[u8]) -> T) -> T {
    let prefix = wire::ENVOY_WASM_STATE_PREFIX.as_bytes();
    let mut key = [0u8; 96];
    match key.get_mut(..prefix.len() + name.len()) {
        Some(room) => {
            let (head, tail) = room.split_at_mut(prefix.len());
            head.copy_from_slice(prefix);
            tail.copy_from_slice(name.as_bytes());
            f(room)
        }
        None => f([prefix, name.as_bytes()].concat().as_slice()),
    }
}

pub(crate) fn body_types(map: Map) -> (u32, u32) {
    match map {
        Map::Request => (abi::BUFFERED_REQUEST_BODY, abi::RECEIVED_REQUEST_BODY),
        Map::Response => (abi::BUFFERED_RESPONSE_BODY, abi::RECEIVED_RESPONSE_BODY),
    }
}

/// Envoy, as one filter (one stream) sees it; `filter` is null for the configuration's own
/// use (shared data and the clock only).
pub struct NativeHost {
    filter: FilterEnvoy,
    /// The configuration's own pointer, for its work on Envoy's main thread (metrics only;
    /// null otherwise).
    config: abi::FilterConfigEnvoy,
    stream: Rc<Stream>,
    /// The metric ids of the filter's configuration (none: the roles count nothing).
    metrics: Option<Arc<MetricTable>>,
}

/// What the shell knows of the stream, shared by the role's host and the shell's.
#[derive(Default)]
struct Stream {
    /// This request's id in [`requests`] (0: not known yet).
    request: Cell<u64>,
    /// The body callback running now, if any: its chunk is part of the body the roles see
    /// (proxy-wasm's buffered body is what Envoy buffered plus this chunk).
    receiving: Cell<Option<Map>>,
    /// The hooks' pointer to the filter this stream belongs to (null until known).
    module: Cell<*const std::ffi::c_void>,
    /// An upstream filter's: the downstream configuration that counts its metrics (found
    /// the first time it counts; none: it counts in its own cluster's scope).
    counted_by: std::cell::OnceCell<Option<Arc<MetricTable>>>,
}

impl NativeHost {
    pub fn new(filter: FilterEnvoy, metrics: Option<Arc<MetricTable>>) -> NativeHost {
        NativeHost {
            filter,
            config: std::ptr::null_mut(),
            stream: Rc::default(),
            metrics,
        }
    }

    /// The host of a configuration's work on Envoy's main thread (no stream): its metrics
    /// counted through the configuration.
    pub fn for_config(config: abi::FilterConfigEnvoy, metrics: Arc<MetricTable>) -> NativeHost {
        NativeHost {
            config,
            ..NativeHost::new(std::ptr::null_mut(), Some(metrics))
        }
    }

    /// Another host for the same stream (the shell keeps one, the role owns the other).
    pub fn twin(&self) -> NativeHost {
        NativeHost {
            filter: self.filter,
            config: self.config,
            stream: Rc::clone(&self.stream),
            metrics: self.metrics.clone(),
        }
    }

    /// The shell's host for configuration-time work (no stream; metric ids from `metrics`,
    /// which it cannot count).
    pub fn detached_with(metrics: Option<Arc<MetricTable>>) -> NativeHost {
        NativeHost::new(std::ptr::null_mut(), metrics)
    }

    /// The shell's host for configuration-time work (no stream).
    pub fn detached() -> NativeHost {
        NativeHost::new(std::ptr::null_mut(), None)
    }

    pub fn filter(&self) -> FilterEnvoy {
        self.filter
    }

    /// Adds to a counter or sets a gauge, unlabelled: through the configuration that counts
    /// for the stream (`config_call`: an upstream filter's request's downstream configuration,
    /// or the configuration's own work on the main thread), else through the stream (`call`).
    fn metric(&self, call: abi::MetricCall, config_call: abi::MetricCall, id: u32, value: u64) {
        let (call, target) = match self.counted_by() {
            Some(config) => (config_call, config),
            None => (call, self.filter),
        };
        if target.is_null() {
            return;
        }
        if id & metrics::LABELLED_ID == 0 {
            // SAFETY: a live filter pointer of the configuration that defined `id`; or a
            // configuration whose table has the same ids: this one's own (on Envoy's main
            // thread), or the downstream configuration of the request this stream belongs to,
            // which Envoy keeps while the listener that made the request lives; no labels.
            unsafe { call(target, id as usize, std::ptr::null_mut(), 0, value) };
            return;
        }
        // A labelled series (the tokens'): counted by this configuration.
        let owner = match self.counted_by() {
            Some(config) => config,
            None => self
                .metrics
                .as_ref()
                .map_or(std::ptr::null_mut(), |m| m.owner()),
        };
        metrics::add_labelled(owner, id, value, |id, values| {
            // SAFETY: as above; `id` has as many label names as `values` has values, which
            // live for the call.
            unsafe {
                call(
                    target,
                    id as usize,
                    values.as_mut_ptr(),
                    values.len(),
                    value,
                )
            };
        });
    }

    /// The configuration counting this stream's metrics, if not the stream's own filter: the
    /// configuration's own work, or an upstream filter's request's downstream configuration
    /// ([`MetricTable::counts_for`]; null: an upstream filter that finds none counts nothing).
    fn counted_by(&self) -> Option<abi::FilterConfigEnvoy> {
        if !self.config.is_null() {
            return Some(self.config);
        }
        let own = self.metrics.as_ref()?;
        if !own.cluster_scoped() {
            return None;
        }
        let by = self.stream.counted_by.get_or_init(|| {
            if self.filter.is_null() {
                return None;
            }
            requests::downstream_metrics(self.request_id()).filter(|d| own.counts_for(d))
        });
        Some(
            by.as_ref()
                .map_or(std::ptr::null_mut(), |table| table.owner()),
        )
    }

    /// The hooks' pointer to this stream's filter.
    pub fn set_module(&self, module: *const std::ffi::c_void) {
        self.stream.module.set(module);
    }

    /// The request's upstream filters still alive (the hooks' pointers), for the downstream
    /// filter to finish them when the request ends ([`crate::hooks`]).
    pub fn upstreams(&self) -> impl Iterator<Item = *const std::ffi::c_void> {
        requests::upstreams(self.request_id())
            .into_iter()
            .filter(|m| !m.is_null())
    }

    /// Marks the body callback of `map` running (or none).
    pub fn set_receiving(&self, map: Option<Map>) {
        self.stream.receiving.set(map);
    }

    /// The downstream filter opens the request's property record and tells the upstream
    /// filters where it is.
    pub fn open_request(&self) {
        if self.stream.request.get() != 0 {
            return;
        }
        let id = requests::open(self.metrics.clone(), self.filter);
        self.stream.request.set(id);
        let mut digits = [0u8; 20];
        self.set_filter_state(REQUEST_ID_KEY, decimal(id, &mut digits));
    }

    /// The filter is done with the request's record (an upstream filter that found it too).
    pub fn close_request(&self) {
        requests::close(
            self.stream.request.replace(0),
            self.filter,
            self.stream.module.get(),
        );
    }

    /// Writes the access-log properties into filter state (once, at the request's end).
    pub fn publish_logs(&self) {
        let id = self.request_id();
        for name in LOGGED {
            requests::with(id, name, |value| self.set_wasm_state(name, value));
        }
    }

    /// The downstream stream's response flags into the request's record, when it completes:
    /// an attempt that got no answer is destroyed after it, when Envoy 1.40 lets its filter
    /// read no attribute any more, and reads whether the caller left here (docs/internals.md
    /// "The native build").
    pub fn keep_response_flags(&self) {
        if let Some(flags) = self.attribute_int(abi::ATTR_RESPONSE_FLAGS) {
            requests::set(self.request_id(), KEPT_RESPONSE_FLAGS, &flags);
        }
    }

    fn request_id(&self) -> u64 {
        let id = self.stream.request.get();
        if id != 0 {
            return id;
        }
        let mut text = EnvoyBuffer::NULL;
        // SAFETY: a live filter pointer (Envoy's, for this hook); out-pointer to a local; the
        // bytes are read before the hook returns.
        let id = unsafe {
            abi::envoy_dynamic_module_callback_http_get_filter_state_bytes(
                self.filter,
                ModuleBuffer::of(REQUEST_ID_KEY),
                &mut text,
            )
        }
        .then(|| {
            std::str::from_utf8(unsafe { text.bytes() })
                .ok()?
                .parse()
                .ok()
        })
        .flatten()
        .filter(|id| requests::hold(*id, self.stream.module.get()))
        .unwrap_or(0);
        self.stream.request.set(id);
        id
    }

    /// Writes filter state, through the request's downstream filter when this filter cannot:
    /// an upstream filter that Envoy is destroying (an attempt that got no answer) has no
    /// stream info left, while the router has yet to pick the next attempt's cluster from the
    /// slots its role rewrites there (docs/internals.md "The native build").
    fn set_filter_state(&self, key: &[u8], value: &[u8]) {
        let write = |filter: FilterEnvoy| {
            // SAFETY: a live filter pointer (this one, or the request's downstream filter,
            // which Envoy has not destroyed: `requests::close` forgets it first); both buffers
            // live for the call.
            unsafe {
                abi::envoy_dynamic_module_callback_http_set_filter_state_bytes(
                    filter,
                    ModuleBuffer::of(key),
                    ModuleBuffer::of(value),
                )
            }
        };
        if write(self.filter) {
            return;
        }
        let downstream = requests::downstream_filter(self.request_id());
        if downstream.is_null() || downstream == self.filter || !write(downstream) {
            log::debug!(
                "llm_failover: filter state {} not written (no stream left to hold it)",
                String::from_utf8_lossy(key)
            );
        }
    }

    /// Filter state under the proxy-wasm build's name for a property (`wasm.<name>`).
    fn set_wasm_state(&self, name: &str, value: &[u8]) {
        with_wasm_key(name, |key| self.set_filter_state(key, value));
    }

    fn attribute_string(&self, id: u32) -> Option<Vec<u8>> {
        let mut out = EnvoyBuffer::NULL;
        // SAFETY: live filter pointer; out-pointer to a local; copied at once.
        let found = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_get_attribute_string(
                self.filter,
                id,
                &mut out,
            )
        };
        found.then(|| unsafe { out.bytes() }.to_vec())
    }

    fn attribute_int(&self, id: u32) -> Option<Vec<u8>> {
        let mut out = 0u64;
        // SAFETY: live filter pointer; out-pointer to a local.
        let found = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_get_attribute_int(
                self.filter,
                id,
                &mut out,
            )
        };
        found.then(|| out.to_le_bytes().to_vec())
    }

    /// The body chunks of one of Envoy's buffers, appended to `out`.
    fn chunks(&self, body_type: u32, out: &mut Vec<u8>) {
        // SAFETY: live filter pointer; the chunks are copied before the hook returns.
        unsafe {
            with_chunks(self.filter, body_type, |chunks| {
                let len = chunks.iter().map(|c| c.length).sum();
                out.reserve(len);
                for chunk in chunks {
                    out.extend_from_slice(chunk.bytes());
                }
            })
        }
    }

    /// The body the roles see: what Envoy buffered, then the chunk of the running callback.
    fn whole_body(&self, map: Map) -> Vec<u8> {
        let (buffered, received) = body_types(map);
        let mut out = Vec::new();
        self.chunks(buffered, &mut out);
        if self.stream.receiving.get() == Some(map) {
            self.chunks(received, &mut out);
        }
        out
    }

    /// The buffer a write to the body goes to: the chunk of the running body callback, else
    /// what Envoy buffered.
    fn written_body(&self, map: Map) -> u32 {
        let (buffered, received) = body_types(map);
        if self.stream.receiving.get() == Some(map) {
            received
        } else {
            buffered
        }
    }

    /// Replaces the whole body with `body`.
    fn replace_body(&self, map: Map, body: &[u8]) {
        let (buffered, received) = body_types(map);
        let into = self.written_body(map);
        // SAFETY: live filter pointer; `body` lives for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_drain_body(self.filter, buffered, usize::MAX);
            if into == received {
                abi::envoy_dynamic_module_callback_http_drain_body(
                    self.filter,
                    received,
                    usize::MAX,
                );
            }
            abi::envoy_dynamic_module_callback_http_append_body(
                self.filter,
                into,
                ModuleBuffer::of(body),
            );
        }
    }
}

impl SharedStore for NativeHost {
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)> {
        STORE.get(key)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<Cas>) -> Result<(), SetError> {
        STORE.set(key, value, cas)
    }
}

impl Clock for NativeHost {
    fn now_ms(&self) -> u64 {
        crate::timers::now_ms()
    }
}

impl Host for NativeHost {
    fn header(&self, map: Map, name: &str) -> Option<Vec<u8>> {
        let mut out = EnvoyBuffer::NULL;
        // SAFETY: live filter pointer; the key lives for the call; copied at once.
        let found = unsafe {
            abi::envoy_dynamic_module_callback_http_get_header(
                self.filter,
                header_type(map),
                ModuleBuffer::of(name.as_bytes()),
                &mut out,
                0,
                std::ptr::null_mut(),
            )
        };
        (found && !out.ptr.is_null()).then(|| unsafe { out.bytes() }.to_vec())
    }

    fn header_map(&self, map: Map) -> Vec<u8> {
        // The layout proxy-wasm's `get_header_map_pairs` returns (`header_pairs::HeaderPairs`):
        // count, then each key and value length (u32 LE), then each key and value NUL-ended.
        let kind = header_type(map);
        // SAFETY: live filter pointer; the list has room for the count Envoy gave; the
        // headers' bytes are copied before the hook returns.
        unsafe {
            let n = abi::envoy_dynamic_module_callback_http_get_headers_size(self.filter, kind);
            let empty = Header {
                key_ptr: std::ptr::null(),
                key_length: 0,
                value_ptr: std::ptr::null(),
                value_length: 0,
            };
            // Listed on the stack when there are not many.
            let (mut few, mut many) = ([empty; 32], Vec::new());
            let mut headers = match few.get_mut(..n) {
                Some(headers) => headers,
                None => {
                    many.resize(n, empty);
                    many.as_mut_slice()
                }
            };
            if n > 0
                && !abi::envoy_dynamic_module_callback_http_get_headers(
                    self.filter,
                    kind,
                    headers.as_mut_ptr(),
                )
            {
                headers = &mut [];
            }
            let size: usize = headers
                .iter()
                .map(|h| 10 + h.key_length + h.value_length)
                .sum();
            let mut out = Vec::with_capacity(4 + size);
            out.extend_from_slice(&(headers.len() as u32).to_le_bytes());
            for h in headers.iter() {
                out.extend_from_slice(&(h.key_length as u32).to_le_bytes());
                out.extend_from_slice(&(h.value_length as u32).to_le_bytes());
            }
            for h in headers.iter() {
                let key = EnvoyBuffer {
                    ptr: h.key_ptr,
                    length: h.key_length,
                };
                let value = EnvoyBuffer {
                    ptr: h.value_ptr,
                    length: h.value_length,
                };
                out.extend_from_slice(key.bytes());
                out.push(0);
                out.extend_from_slice(value.bytes());
                out.push(0);
            }
            out
        }
    }

    fn set_header(&self, map: Map, name: &str, value: Option<&str>) {
        self.set_header_bytes(map, name, value.map(str::as_bytes));
    }

    fn set_header_bytes(&self, map: Map, name: &str, value: Option<&[u8]>) {
        let value = value.map_or(ModuleBuffer::NULL, ModuleBuffer::of);
        // SAFETY: live filter pointer; buffers live for the call (a null value removes).
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_header(
                self.filter,
                header_type(map),
                ModuleBuffer::of(name.as_bytes()),
                value,
            )
        };
    }

    fn add_header_bytes(&self, map: Map, name: &str, value: &[u8]) {
        // SAFETY: live filter pointer; buffers live for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_add_header(
                self.filter,
                header_type(map),
                ModuleBuffer::of(name.as_bytes()),
                ModuleBuffer::of(value),
            )
        };
    }

    fn property(&self, path: &[u8]) -> Option<Vec<u8>> {
        match path {
            b"response\0code_details" => self.attribute_string(abi::ATTR_RESPONSE_CODE_DETAILS),
            b"response\0flags" => {
                // Once the downstream stream completed, its flags (the caller left) hold for
                // every attempt still open, whether or not its filter can still read its own.
                let own = self.attribute_int(abi::ATTR_RESPONSE_FLAGS);
                let kept = requests::get(self.request_id(), KEPT_RESPONSE_FLAGS);
                match (own, kept) {
                    (Some(own), Some(kept)) => {
                        Some((flags_of(&own) | flags_of(&kept)).to_le_bytes().to_vec())
                    }
                    (own, kept) => own.or(kept),
                }
            }
            b"xds\0route_name" => self.attribute_string(abi::ATTR_XDS_ROUTE_NAME),
            b"upstream\0transport_failure_reason" => {
                self.attribute_string(abi::ATTR_UPSTREAM_TRANSPORT_FAILURE_REASON)
            }
            b"upstream\0request_attempt_count" => self
                .attribute_int(abi::ATTR_UPSTREAM_REQUEST_ATTEMPT_COUNT)
                .or_else(|| {
                    // The response carries it too (`include_attempt_count_in_response`).
                    let text = self.header(Map::Response, wire::ATTEMPT_COUNT_HEADER)?;
                    let n: u64 = std::str::from_utf8(&text).ok()?.parse().ok()?;
                    Some(n.to_le_bytes().to_vec())
                }),
            _ if path == wire::CLUSTER_NAME_PROPERTY => {
                let mut out = EnvoyBuffer::NULL;
                // SAFETY: live filter pointer; out-pointer to a local; copied at once.
                let found = unsafe {
                    abi::envoy_dynamic_module_callback_http_get_cluster_name(self.filter, &mut out)
                };
                if found {
                    return Some(unsafe { out.bytes() }.to_vec());
                }
                self.attribute_string(abi::ATTR_XDS_CLUSTER_NAME)
            }
            _ if path == wire::HOST_PROVIDER_PROPERTY => {
                let mut out = EnvoyBuffer::NULL;
                // SAFETY: as above.
                let found = unsafe {
                    abi::envoy_dynamic_module_callback_http_get_metadata_string(
                        self.filter,
                        abi::METADATA_HOST,
                        ModuleBuffer::of(b"llm_failover"),
                        ModuleBuffer::of(b"provider"),
                        &mut out,
                    )
                };
                found.then(|| unsafe { out.bytes() }.to_vec())
            }
            _ if !path.contains(&0) => {
                let name = std::str::from_utf8(path).ok()?;
                requests::get(self.request_id(), name)
            }
            _ => None,
        }
    }

    fn set_property(&self, name: &str, value: &[u8]) {
        requests::set(self.request_id(), name, value);
        if name.starts_with(wire::SLOT_PROPERTY_PREFIX) || name == wire::GROUP_PROPERTY {
            self.set_wasm_state(name, value);
        }
    }

    fn body(&self, map: Map, size: usize) -> Option<Vec<u8>> {
        let mut body = self.whole_body(map);
        body.truncate(size);
        Some(body)
    }

    fn set_body(&self, map: Map, size: usize, value: &[u8]) {
        let body = self.whole_body(map);
        let mut new = Vec::with_capacity(value.len() + body.len().saturating_sub(size));
        new.extend_from_slice(value);
        new.extend_from_slice(body.get(size..).unwrap_or_default());
        self.replace_body(map, &new);
    }

    fn body_range(&self, map: Map, start: usize, len: usize) -> Option<Vec<u8>> {
        // The range cut out of the body's one copy, not copied again.
        let mut body = self.whole_body(map);
        body.truncate(start.saturating_add(len));
        body.drain(..start.min(body.len()));
        Some(body)
    }

    fn append_body(&self, map: Map, _size: usize, value: &[u8]) {
        let into = self.written_body(map);
        // SAFETY: live filter pointer; `value` lives for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_append_body(
                self.filter,
                into,
                ModuleBuffer::of(value),
            )
        };
    }

    fn resume(&self, map: Map) {
        // SAFETY: live filter pointer.
        unsafe {
            match map {
                Map::Request => {
                    abi::envoy_dynamic_module_callback_http_filter_continue_decoding(self.filter)
                }
                Map::Response => {
                    abi::envoy_dynamic_module_callback_http_filter_continue_encoding(self.filter)
                }
            }
        }
    }

    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: Option<&[u8]>) {
        let mut pairs: Vec<Header> = headers.iter().map(|(k, v)| Header::of(k, v)).collect();
        let body = body.map_or(ModuleBuffer::NULL, ModuleBuffer::of);
        // SAFETY: live filter pointer; headers and body live for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(
                self.filter,
                u32::from(status),
                pairs.as_mut_ptr(),
                pairs.len(),
                body,
                ModuleBuffer::of(b"llm_failover"),
            )
        };
    }

    fn define_tokens_counter(
        &self,
        provider: &str,
        model: &str,
        kind: llm_failover::usage::Kind,
        caller: Option<&str>,
    ) -> Option<u32> {
        let labels = match caller {
            None => metrics::TOKEN_LABELS.as_slice(),
            Some(_) => metrics::TOKEN_LABELS_BY_CALLER.as_slice(),
        };
        let id = self.define_metric(
            MetricKind::Counter,
            &metrics::labelled(llm_failover::metrics::TOKENS, labels),
        )?;
        let values: Vec<String> = [provider, model, kind.as_str()]
            .into_iter()
            .chain(caller)
            .map(str::to_string)
            .collect();
        metrics::series(id, values).inspect(|id| {
            // Envoy makes a labelled series when first counted: shown from its definition on,
            // at 0, as the wasm build's.
            self.add_metric(*id, 0);
        })
    }

    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<u32> {
        // Defined when the configuration loaded (`metrics::MetricTable`), looked up here.
        self.metrics.as_ref()?.id(kind, name)
    }

    fn increment_metric(&self, id: u32) {
        self.add_metric(id, 1);
    }

    fn add_metric(&self, id: u32, delta: u64) {
        self.metric(
            abi::envoy_dynamic_module_callback_http_filter_increment_counter,
            abi::envoy_dynamic_module_callback_http_filter_config_increment_counter,
            id,
            delta,
        );
    }

    fn record_metric(&self, id: u32, value: u64) {
        self.metric(
            abi::envoy_dynamic_module_callback_http_filter_set_gauge,
            abi::envoy_dynamic_module_callback_http_filter_config_set_gauge,
            id,
            value,
        );
    }

    fn clear_route_cache(&self) -> bool {
        // SAFETY: live filter pointer.
        unsafe { abi::envoy_dynamic_module_callback_http_clear_route_cache(self.filter) };
        true
    }
}
