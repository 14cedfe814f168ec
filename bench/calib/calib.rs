//! A calibration filter (proxy-wasm ABI 0.2.1), used only by `scripts/bench.sh --calibrate`.
//! Like bench/noop/noop.rs it has no logic; it makes exactly the hostcalls its plugin
//! configuration lists, so the benchmark can price each kind of call and measure a skeleton
//! of llm-failover's per-request calls without any of its decisions.
//!
//! Configuration: whitespace-separated steps `<callback>:<op>[*<n>]`, run in order:
//! - callbacks: `rh` request headers, `rb` request body (at its end), `sh` response headers;
//! - ops: `time` (`proxy_get_current_time_nanoseconds`, the bare crossing), `get_header`
//!   (`:path` or `:status`: a read that hands bytes back, so Envoy calls
//!   `proxy_on_memory_allocate` into the module), `get_absent` (a header that is not there),
//!   `pairs` (the whole header map), `set_header`,
//!   `remove_header` (of an absent header), `set_property` (a new filter-state object per step),
//!   `get_property` (`calib.rb0`, which a downstream `rb:set_property` step wrote), `shared_get` (a
//!   120-byte value, the size of a provider's health record), `body` (the request body),
//!   `route` (`clear_route_cache`), `metric` (a counter increment), `pause` (in `rh`: stop at
//!   the headers and wait for the whole body, as planning on the body's `model` must).
//!
//! Build (bench.py does it): rustc --edition 2021 --target wasm32-wasip1 --crate-type cdylib
//!   -C opt-level=3 -C panic=abort bench/calib/calib.rs -o .work/bench/calib.wasm

use std::alloc::{alloc, dealloc, Layout};
use std::cell::RefCell;

extern "C" {
    fn proxy_get_current_time_nanoseconds(return_time: *mut u64) -> u32;
    fn proxy_get_header_map_value(
        map_type: u32,
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> u32;
    fn proxy_get_header_map_pairs(
        map_type: u32,
        return_map_data: *mut *mut u8,
        return_map_size: *mut usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        map_type: u32,
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(map_type: u32, key_data: *const u8, key_size: usize) -> u32;
    fn proxy_set_property(
        path_data: *const u8,
        path_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_get_property(
        path_data: *const u8,
        path_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> u32;
    fn proxy_get_shared_data(
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
        return_cas: *mut u32,
    ) -> u32;
    fn proxy_set_shared_data(
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
        cas: u32,
    ) -> u32;
    fn proxy_get_buffer_bytes(
        buffer_type: u32,
        start: usize,
        max_size: usize,
        return_buffer_data: *mut *mut u8,
        return_buffer_size: *mut usize,
    ) -> u32;
    fn proxy_call_foreign_function(
        function_name_data: *const u8,
        function_name_size: usize,
        arguments_data: *const u8,
        arguments_size: usize,
        results_data: *mut *mut u8,
        results_size: *mut usize,
    ) -> u32;
    fn proxy_define_metric(
        metric_type: u32,
        name_data: *const u8,
        name_size: usize,
        return_metric_id: *mut u32,
    ) -> u32;
    fn proxy_increment_metric(metric_id: u32, offset: i64) -> u32;
}

const REQUEST_HEADERS: u32 = 0;
const RESPONSE_HEADERS: u32 = 2;
const REQUEST_BODY: u32 = 0;
const PLUGIN_CONFIGURATION: u32 = 7;
const SHARED_KEY: &[u8] = b"llm_failover_calibration";

#[derive(Clone, Copy, PartialEq)]
enum Callback {
    RequestHeaders,
    RequestBody,
    ResponseHeaders,
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Time,
    GetHeader,
    GetAbsent,
    Pairs,
    SetHeader,
    RemoveHeader,
    SetProperty,
    GetProperty,
    SharedGet,
    Body,
    Route,
    Metric,
    Pause,
}

struct Step {
    callback: Callback,
    op: Op,
    /// Filter-state key of a `set_property` step (one per step and repetition).
    keys: Vec<String>,
    times: usize,
}

#[derive(Default)]
struct Script {
    steps: Vec<Step>,
    pause: bool,
    metric: u32,
}

thread_local! {
    static SCRIPT: RefCell<Script> = RefCell::new(Script::default());
}

fn layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.max(1), 8).ok()
}

/// Frees what Envoy handed back through `proxy_on_memory_allocate`.
fn release(ptr: *mut u8, size: usize) {
    if let (false, Some(l)) = (ptr.is_null(), layout(size)) {
        // SAFETY: allocated by proxy_on_memory_allocate with this very layout.
        unsafe { dealloc(ptr, l) }
    }
}

fn parse(text: &str) -> Script {
    let mut script = Script::default();
    for token in text.split_whitespace() {
        let Some((callback, rest)) = token.split_once(':') else {
            continue;
        };
        let (op, times) = match rest.split_once('*') {
            Some((op, n)) => (op, n.parse().unwrap_or(1)),
            None => (rest, 1),
        };
        let callback = match callback {
            "rh" => Callback::RequestHeaders,
            "rb" => Callback::RequestBody,
            "sh" => Callback::ResponseHeaders,
            _ => continue,
        };
        let op = match op {
            "time" => Op::Time,
            "get_header" => Op::GetHeader,
            "get_absent" => Op::GetAbsent,
            "pairs" => Op::Pairs,
            "set_header" => Op::SetHeader,
            "remove_header" => Op::RemoveHeader,
            "set_property" => Op::SetProperty,
            "get_property" => Op::GetProperty,
            "shared_get" => Op::SharedGet,
            "body" => Op::Body,
            "route" => Op::Route,
            "metric" => Op::Metric,
            "pause" => Op::Pause,
            _ => continue,
        };
        if op == Op::Pause {
            script.pause = true;
            continue;
        }
        let prefix = match callback {
            Callback::RequestHeaders => "rh",
            Callback::RequestBody => "rb",
            Callback::ResponseHeaders => "sh",
        };
        let keys = (0..times).map(|i| format!("calib.{prefix}{i}")).collect();
        script.steps.push(Step { callback, op, keys, times });
    }
    script
}

/// Runs the steps of `callback`; `body_size` is the request body's size in `rb`.
fn run(callback: Callback, body_size: usize) {
    SCRIPT.with(|script| {
        let script = script.borrow();
        let headers = if callback == Callback::ResponseHeaders { RESPONSE_HEADERS } else { REQUEST_HEADERS };
        let header: &[u8] = if callback == Callback::ResponseHeaders { b":status" } else { b":path" };
        for step in script.steps.iter().filter(|s| s.callback == callback) {
            for i in 0..step.times {
                let mut ptr: *mut u8 = std::ptr::null_mut();
                let mut len: usize = 0;
                // SAFETY: every pointer passed points at live memory of the stated size, and
                // out-pointers are written by Envoy through our allocator.
                unsafe {
                    match step.op {
                        Op::Time => {
                            let mut t = 0u64;
                            proxy_get_current_time_nanoseconds(&mut t);
                        }
                        Op::GetHeader => {
                            proxy_get_header_map_value(headers, header.as_ptr(), header.len(), &mut ptr, &mut len);
                        }
                        Op::GetAbsent => {
                            let key = b"x-calibration-absent";
                            proxy_get_header_map_value(headers, key.as_ptr(), key.len(), &mut ptr, &mut len);
                        }
                        Op::Pairs => {
                            proxy_get_header_map_pairs(headers, &mut ptr, &mut len);
                        }
                        Op::SetHeader => {
                            let (key, value) = (b"x-calibration", b"1");
                            proxy_replace_header_map_value(headers, key.as_ptr(), key.len(), value.as_ptr(), value.len());
                        }
                        Op::RemoveHeader => {
                            let key = b"x-calibration-absent";
                            proxy_remove_header_map_value(headers, key.as_ptr(), key.len());
                        }
                        Op::SetProperty => {
                            let key = step.keys[i].as_bytes();
                            let value = b"primary";
                            proxy_set_property(key.as_ptr(), key.len(), value.as_ptr(), value.len());
                        }
                        Op::GetProperty => {
                            let key = b"calib.rb0";
                            proxy_get_property(key.as_ptr(), key.len(), &mut ptr, &mut len);
                        }
                        Op::SharedGet => {
                            let mut cas = 0u32;
                            proxy_get_shared_data(SHARED_KEY.as_ptr(), SHARED_KEY.len(), &mut ptr, &mut len, &mut cas);
                        }
                        Op::Body => {
                            proxy_get_buffer_bytes(REQUEST_BODY, 0, body_size, &mut ptr, &mut len);
                        }
                        Op::Route => {
                            let name = b"clear_route_cache";
                            proxy_call_foreign_function(name.as_ptr(), name.len(), std::ptr::null(), 0, &mut ptr, &mut len);
                        }
                        Op::Metric => {
                            proxy_increment_metric(script.metric, 1);
                        }
                        Op::Pause => {}
                    }
                }
                release(ptr, len);
            }
        }
    });
}

#[no_mangle]
pub extern "C" fn proxy_abi_version_0_2_1() {}

#[no_mangle]
pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
    match layout(size) {
        // SAFETY: the layout has a non-zero size.
        Some(l) => unsafe { alloc(l) },
        None => std::ptr::null_mut(),
    }
}

#[no_mangle]
pub extern "C" fn proxy_on_context_create(_context_id: u32, _parent_context_id: u32) {}
#[no_mangle]
pub extern "C" fn proxy_on_vm_start(_root: u32, _size: usize) -> bool {
    true
}

#[no_mangle]
pub extern "C" fn proxy_on_configure(_root: u32, size: usize) -> bool {
    let mut ptr: *mut u8 = std::ptr::null_mut();
    let mut len: usize = 0;
    // SAFETY: out-pointers are valid; Envoy allocates the buffer through our allocator.
    let status = unsafe { proxy_get_buffer_bytes(PLUGIN_CONFIGURATION, 0, size, &mut ptr, &mut len) };
    let text = if status == 0 && !ptr.is_null() {
        // SAFETY: Envoy wrote `len` bytes at `ptr`.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec();
        release(ptr, len);
        String::from_utf8(bytes).unwrap_or_default()
    } else {
        String::new()
    };
    let mut script = parse(&text);
    let name = b"calibration_total";
    let value = [7u8; 120];
    // SAFETY: pointers to live slices and a live out-parameter.
    unsafe {
        proxy_define_metric(0, name.as_ptr(), name.len(), &mut script.metric);
        proxy_set_shared_data(SHARED_KEY.as_ptr(), SHARED_KEY.len(), value.as_ptr(), value.len(), 0);
    }
    SCRIPT.with(|s| *s.borrow_mut() = script);
    true
}

#[no_mangle]
pub extern "C" fn proxy_on_request_headers(_c: u32, _n: usize, eos: bool) -> u32 {
    run(Callback::RequestHeaders, 0);
    let pause = SCRIPT.with(|s| s.borrow().pause);
    if pause && !eos {
        1 // stop iteration until the body is complete
    } else {
        0
    }
}

#[no_mangle]
pub extern "C" fn proxy_on_request_body(_c: u32, size: usize, eos: bool) -> u32 {
    let pause = SCRIPT.with(|s| s.borrow().pause);
    if !eos {
        return u32::from(pause); // 1: stop and buffer
    }
    run(Callback::RequestBody, size);
    0
}
#[no_mangle]
pub extern "C" fn proxy_on_request_trailers(_c: u32, _n: usize) -> u32 {
    0
}
#[no_mangle]
pub extern "C" fn proxy_on_response_headers(_c: u32, _n: usize, _eos: bool) -> u32 {
    run(Callback::ResponseHeaders, 0);
    0
}
#[no_mangle]
pub extern "C" fn proxy_on_response_body(_c: u32, _n: usize, _eos: bool) -> u32 {
    0
}
#[no_mangle]
pub extern "C" fn proxy_on_response_trailers(_c: u32, _n: usize) -> u32 {
    0
}
#[no_mangle]
pub extern "C" fn proxy_on_done(_c: u32) -> bool {
    true
}
#[no_mangle]
pub extern "C" fn proxy_on_log(_c: u32) {}
#[no_mangle]
pub extern "C" fn proxy_on_delete(_c: u32) {}
