//! The part of Envoy's dynamic-modules C ABI this shell uses, bound by hand from Envoy
//! **1.40.0**'s `source/extensions/dynamic_modules/abi/abi.h` (Envoy's Rust SDK is not
//! published; nothing of it is used). Envoy loads a module built for 1.X on 1.X and 1.(X+1):
//! `llm-failover render --runtime native` refuses any other Envoy.
//!
//! Hooks (`envoy_dynamic_module_on_*`) are exported by `crate::hooks`; the callbacks below
//! are resolved from the Envoy binary when the library is loaded. C enums are `int`-sized
//! (`u32` here), C `bool` is Rust's `bool`, and the buffer structs are two words, passed by
//! value as the header declares.
#![allow(non_camel_case_types, dead_code)]

use std::ffi::c_void;

/// Envoy 1.40.0's `ENVOY_DYNAMIC_MODULES_ABI_VERSION` (the one version string in the 1.40.0
/// binary). Envoy compares it for equality only to warn: any other string loads too, with
/// "Dynamic module ABI version ... is deprecated" in the log; this one logs "matched".
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

pub type FilterConfigEnvoy = *mut c_void;
pub type FilterEnvoy = *mut c_void;
pub type Scheduler = *mut c_void;

/// `envoy_dynamic_module_type_envoy_buffer`: bytes owned by Envoy.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

impl EnvoyBuffer {
    pub const NULL: EnvoyBuffer = EnvoyBuffer {
        ptr: std::ptr::null(),
        length: 0,
    };

    /// The bytes, valid until the hook returns or the source changes (copy before either).
    ///
    /// # Safety
    /// Envoy filled this buffer in the current hook and nothing changed its source since.
    pub unsafe fn bytes<'a>(&self) -> &'a [u8] {
        if self.ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr, self.length)
    }
}

/// `envoy_dynamic_module_type_module_buffer`: bytes owned by the module.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

impl ModuleBuffer {
    pub fn of(bytes: &[u8]) -> ModuleBuffer {
        ModuleBuffer {
            ptr: bytes.as_ptr(),
            length: bytes.len(),
        }
    }
    /// A null buffer (a header setter removes the header).
    pub const NULL: ModuleBuffer = ModuleBuffer {
        ptr: std::ptr::null(),
        length: 0,
    };
}

/// `envoy_dynamic_module_type_envoy_http_header` / `..._module_http_header`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Header {
    pub key_ptr: *const u8,
    pub key_length: usize,
    pub value_ptr: *const u8,
    pub value_length: usize,
}

impl Header {
    /// A header the module owns (for a call that copies it).
    pub fn of(key: &str, value: &str) -> Header {
        Header {
            key_ptr: key.as_ptr(),
            key_length: key.len(),
            value_ptr: value.as_ptr(),
            value_length: value.len(),
        }
    }
}

// envoy_dynamic_module_type_http_header_type
pub const REQUEST_HEADER: u32 = 0;
pub const RESPONSE_HEADER: u32 = 2;

// envoy_dynamic_module_type_http_body_type
pub const RECEIVED_REQUEST_BODY: u32 = 0;
pub const BUFFERED_REQUEST_BODY: u32 = 1;
pub const RECEIVED_RESPONSE_BODY: u32 = 2;
pub const BUFFERED_RESPONSE_BODY: u32 = 3;

// envoy_dynamic_module_type_log_level
pub const LOG_DEBUG: u32 = 1;
pub const LOG_INFO: u32 = 2;
pub const LOG_WARN: u32 = 3;
pub const LOG_ERROR: u32 = 4;
pub const LOG_CRITICAL: u32 = 5;

// envoy_dynamic_module_type_metrics_result
pub const METRICS_SUCCESS: u32 = 0;

// envoy_dynamic_module_type_metadata_source
pub const METADATA_HOST: u32 = 3;

// envoy_dynamic_module_type_attribute_id (the ids this shell reads)
pub const ATTR_RESPONSE_CODE_DETAILS: u32 = 16;
pub const ATTR_RESPONSE_FLAGS: u32 = 17;
pub const ATTR_UPSTREAM_TRANSPORT_FAILURE_REASON: u32 = 52;
pub const ATTR_UPSTREAM_REQUEST_ATTEMPT_COUNT: u32 = 53;
pub const ATTR_XDS_CLUSTER_NAME: u32 = 57;
pub const ATTR_XDS_ROUTE_NAME: u32 = 61;

// envoy_dynamic_module_type_on_http_filter_{request,response}_{headers,body,trailers}_status
pub const HEADERS_CONTINUE: u32 = 0;
pub const HEADERS_STOP_ITERATION: u32 = 1;
pub const BODY_CONTINUE: u32 = 0;
pub const BODY_STOP_ITERATION_AND_BUFFER: u32 = 1;
pub const TRAILERS_CONTINUE: u32 = 0;
pub const TRAILERS_STOP_ITERATION: u32 = 1;

/// `increment_counter` and `set_gauge` (and the gauges' increment and decrement) share a shape.
pub type MetricCall =
    unsafe extern "C" fn(FilterEnvoy, usize, *mut ModuleBuffer, usize, u64) -> u32;

extern "C" {
    pub fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);
    /// The level of Envoy's `dynamic_modules` logger (spdlog's: 0 trace ... 6 off).
    pub fn envoy_dynamic_module_callback_get_log_level() -> u32;

    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: FilterConfigEnvoy,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: FilterConfigEnvoy,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: FilterEnvoy,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_set_gauge(
        filter: FilterEnvoy,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;

    pub fn envoy_dynamic_module_callback_http_get_header(
        filter: FilterEnvoy,
        header_type: u32,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: FilterEnvoy,
        header_type: u32,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_headers(
        filter: FilterEnvoy,
        header_type: u32,
        result_headers: *mut Header,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter: FilterEnvoy,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_add_header(
        filter: FilterEnvoy,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: FilterEnvoy,
        status_code: u32,
        headers: *mut Header,
        headers_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );

    pub fn envoy_dynamic_module_callback_http_get_body_chunks_size(
        filter: FilterEnvoy,
        body_type: u32,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_body_chunks(
        filter: FilterEnvoy,
        body_type: u32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_body_size(
        filter: FilterEnvoy,
        body_type: u32,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_append_body(
        filter: FilterEnvoy,
        body_type: u32,
        data: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_drain_body(
        filter: FilterEnvoy,
        body_type: u32,
        number_of_bytes: usize,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_get_metadata_string(
        filter: FilterEnvoy,
        source: u32,
        namespace: ModuleBuffer,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_filter_state_bytes(
        filter: FilterEnvoy,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_filter_state_bytes(
        filter: FilterEnvoy,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: FilterEnvoy,
        attribute_id: u32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_int(
        filter: FilterEnvoy,
        attribute_id: u32,
        result: *mut u64,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_cluster_name(
        filter: FilterEnvoy,
        result: *mut EnvoyBuffer,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: FilterEnvoy);
    pub fn envoy_dynamic_module_callback_http_filter_continue_encoding(filter: FilterEnvoy);
    pub fn envoy_dynamic_module_callback_http_clear_route_cache(filter: FilterEnvoy);

    pub fn envoy_dynamic_module_callback_http_filter_scheduler_new(
        filter: FilterEnvoy,
    ) -> Scheduler;
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: Scheduler,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: Scheduler);

    // The configuration's own: a scheduler whose events run on Envoy's main thread
    // (`on_http_filter_config_scheduled`), and its metrics used from there.
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(
        config: FilterConfigEnvoy,
    ) -> Scheduler;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: Scheduler,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(scheduler: Scheduler);
    /// A stream from the configuration to `cluster_name` (Envoy's async client, on the main
    /// thread): `headers` must hold `:method`, `:path` and `:authority`; the answer comes to
    /// `on_http_filter_config_http_stream_*`. 0: started (`stream_id` set).
    pub fn envoy_dynamic_module_callback_http_filter_config_start_http_stream(
        config: FilterConfigEnvoy,
        stream_id: *mut u64,
        cluster_name: ModuleBuffer,
        headers: *mut Header,
        headers_size: usize,
        body: ModuleBuffer,
        end_stream: bool,
        timeout_ms: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: FilterConfigEnvoy,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_set_gauge(
        config: FilterConfigEnvoy,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;
}
