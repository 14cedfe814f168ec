//! A dynamic module that does nothing (bench/native_profile.py's `native_noop`): the hooks
//! Envoy 1.40 requires of an HTTP filter module, each returning "continue" with no callback
//! into Envoy; what Envoy's dynamic-modules filter costs by itself, in llm-failover's two
//! places. Built with `rustc --crate-type cdylib` (no dependencies).
#![allow(clippy::missing_safety_doc)]

use std::ffi::c_void;

#[repr(C)]
pub struct Buffer {
    ptr: *const u8,
    length: usize,
}

/// Any non-null pointer: the configuration and the filters hold no state.
const SOME: *const c_void = 8 as *const c_void;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    b"v0.2.0\0".as_ptr()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    _c: *mut c_void,
    _name: Buffer,
    _config: Buffer,
) -> *const c_void {
    SOME
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(_c: *const c_void) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _c: *mut c_void,
    _config: *const c_void,
    _event: u64,
) {
}

// No per-route configuration; a filter is any non-null pointer, as its configuration.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(_n: Buffer, _c: Buffer) -> *const c_void { std::ptr::null() }
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_destroy(_c: *const c_void) {}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(_c: *const c_void, _f: *mut c_void) -> *const c_void { SOME }

macro_rules! go {
    ($($name:ident($($arg:ty),*);)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name(_f: *mut c_void, _m: *const c_void $(, _: $arg)*) -> u32 {
            0
        }
    )*};
}

go! {
    envoy_dynamic_module_on_http_filter_request_headers(bool);
    envoy_dynamic_module_on_http_filter_request_body(bool);
    envoy_dynamic_module_on_http_filter_request_trailers();
    envoy_dynamic_module_on_http_filter_response_headers(bool);
    envoy_dynamic_module_on_http_filter_response_body(bool);
    envoy_dynamic_module_on_http_filter_response_trailers();
}

macro_rules! nothing {
    ($($name:ident($($arg:ty),*);)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name(_f: *mut c_void, _m: *const c_void $(, _: $arg)*) {}
    )*};
}

nothing! {
    envoy_dynamic_module_on_http_filter_stream_complete();
    envoy_dynamic_module_on_http_filter_scheduled(u64);
    envoy_dynamic_module_on_http_filter_http_callout_done(u64, u32, *const c_void, usize, *const c_void, usize);
    envoy_dynamic_module_on_http_filter_http_stream_headers(u64, *const c_void, usize, bool);
    envoy_dynamic_module_on_http_filter_http_stream_data(u64, *const c_void, usize, bool);
    envoy_dynamic_module_on_http_filter_http_stream_trailers(u64, *const c_void, usize);
    envoy_dynamic_module_on_http_filter_http_stream_complete(u64);
    envoy_dynamic_module_on_http_filter_http_stream_reset(u64, u32);
    envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark();
    envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark();
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(_m: *const c_void) {}
