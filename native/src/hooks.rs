//! The event hooks Envoy calls (`envoy_dynamic_module_on_*`, Envoy 1.40.0's `abi.h`), each a
//! thin step into the roles, behind [`guard`]: a panic fails the request closed.

use crate::abi::{self, EnvoyBuffer, FilterConfigEnvoy, FilterEnvoy};
use crate::host::NativeHost;
use crate::timers::Timer;
use crate::NativeConfig;
use llm_failover::config::{Config, Role};
use llm_failover::roles::{Downstream, Flow, LocalAnswers, Map, Metrics, Upstream};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

// The filter is boxed whole (one allocation per stream, like a proxy-wasm context): a
// variant's size costs nothing more.
#[allow(clippy::large_enum_variant)]
enum Part {
    Down(Downstream<NativeHost>),
    Up(Upstream<NativeHost>, Timer),
}

/// One stream's filter: the role, and the shell's own host for the same stream.
struct Filter {
    part: Part,
    host: NativeHost,
    config: Rc<Config>,
    metrics: Rc<Metrics>,
    /// A hook panicked: the request was answered (fail closed) and the role is not run again.
    failed: bool,
    /// The role had its last word (`on_done`).
    done: bool,
}

/// The reply of a request whose filter panicked: an internal error, not worth retrying here.
const FAILED_BODY: &[u8] = br#"{"error":{"message":"The gateway's filter failed on this request (an internal error). The request was not sent on.","type":"internal_error","code":"filter_failed"}}"#;

impl Filter {
    /// After each hook of an attempt: its deadline to the timer thread.
    fn after(&mut self) {
        if let Part::Up(up, timer) = &mut self.part {
            timer.set(self.host.filter(), up.deadline());
        }
    }
}

thread_local! {
    /// How many of this worker's hooks are running into one another (a hook of one filter can
    /// make Envoy call another's: a local reply ends the downstream stream).
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Runs `step` on the filter unless it failed before; a panic answers 500 and stops the
/// stream's iteration (`stop`), a filter that failed earlier lets the stream go on (`go`).
fn guard(module: *const c_void, go: u32, stop: u32, step: impl FnOnce(&mut Filter) -> u32) -> u32 {
    // SAFETY: `module` is the pointer `on_http_filter_new` returned, alive until destroy;
    // Envoy calls one stream's hooks on one thread, never two at once.
    let Some(filter) = (unsafe { (module as *mut Filter).as_mut() }) else {
        return go;
    };
    if filter.failed {
        return go;
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    let ran = catch_unwind(AssertUnwindSafe(|| {
        let result = step(filter);
        filter.after();
        result
    }));
    DEPTH.with(|d| d.set(d.get() - 1));
    match ran {
        Ok(result) => result,
        Err(_) => {
            filter.failed = true;
            let headers = [
                ("content-type", "application/json"),
                ("x-should-retry", "false"),
            ];
            use llm_failover::roles::Host;
            let _ = catch_unwind(AssertUnwindSafe(|| {
                filter.host.send_response(500, &headers, Some(FAILED_BODY))
            }));
            stop
        }
    }
}

fn headers_status(flow: Flow) -> u32 {
    match flow {
        Flow::Continue => abi::HEADERS_CONTINUE,
        Flow::Pause => abi::HEADERS_STOP_ITERATION,
    }
}

fn body_status(flow: Flow) -> u32 {
    match flow {
        Flow::Continue => abi::BODY_CONTINUE,
        Flow::Pause => abi::BODY_STOP_ITERATION_AND_BUFFER,
    }
}

/// The size of the body the roles see in a body hook (buffered plus this chunk), and whether
/// this chunk is a chunk of its own: after a filter that buffered the whole body (the Bedrock
/// signer), Envoy hands the next filters the buffer itself as the chunk, and counting both
/// would see the body twice.
fn body_size(filter: FilterEnvoy, map: Map) -> (usize, bool) {
    let (buffered, received) = crate::host::body_types(map);
    // SAFETY: a live filter pointer, in its hook.
    let (b, r) = unsafe {
        (
            abi::envoy_dynamic_module_callback_http_get_body_size(filter, buffered),
            abi::envoy_dynamic_module_callback_http_get_body_size(filter, received),
        )
    };
    if b == r
        && b > 0
        && crate::host::first_chunk(filter, buffered) == crate::host::first_chunk(filter, received)
    {
        return (b, false);
    }
    (b + r, true)
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    crate::start();
    abi::ABI_VERSION.as_ptr()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    config_envoy: FilterConfigEnvoy,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    // SAFETY: Envoy's buffer, valid for this hook; copied by `load`.
    let json = unsafe { config.bytes() };
    match catch_unwind(|| NativeConfig::load(config_envoy, json)) {
        Ok(Ok(config)) => {
            let config = Box::into_raw(Box::new(config)) as *const c_void;
            live_configs().push(config as usize);
            config
        }
        Ok(Err(problems)) => {
            // Refusing the configuration makes Envoy refuse the filter: nothing
            // half-configured ever serves traffic.
            crate::envoy_log(
                abi::LOG_ERROR,
                &format!("llm_failover: invalid plugin configuration: {problems}"),
            );
            std::ptr::null()
        }
        Err(_) => std::ptr::null(),
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    live_configs().retain(|c| *c != config as usize);
    if !config.is_null() {
        // SAFETY: made by `Box::into_raw` in config_new, destroyed once by Envoy.
        drop(unsafe { Box::from_raw(config as *mut NativeConfig) });
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    config_envoy: FilterConfigEnvoy,
    config: *const c_void,
    _event_id: u64,
) {
    // SAFETY: the pointer config_new returned; Envoy runs this on its main thread, where the
    // configuration is destroyed, so it is alive here.
    if let Some(config) = unsafe { (config as *const NativeConfig).as_ref() } {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            config.on_main_thread_tick(config_envoy)
        }));
    }
}

/// The configurations alive (made by config_new, not yet destroyed), by address: a stream's
/// hook names its configuration, and one Envoy resets after destroying it must find nothing.
fn live_configs() -> std::sync::MutexGuard<'static, Vec<usize>> {
    static LIVE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `step` on a live configuration, on Envoy's main thread (a stream it started).
fn on_config(config: *const c_void, step: impl FnOnce(&NativeConfig)) {
    if !live_configs().contains(&(config as usize)) {
        return;
    }
    // SAFETY: live (made by config_new, not destroyed), and destroyed on this same thread.
    if let Some(config) = unsafe { (config as *const NativeConfig).as_ref() } {
        let _ = catch_unwind(AssertUnwindSafe(|| step(config)));
    }
}

/// Envoy's header array as byte pairs, valid for the hook.
///
/// # Safety
/// `headers` points to `size` headers Envoy filled for this hook (or is null).
unsafe fn header_pairs<'a>(headers: *const abi::Header, size: usize) -> Vec<(&'a [u8], &'a [u8])> {
    if headers.is_null() {
        return Vec::new();
    }
    std::slice::from_raw_parts(headers, size)
        .iter()
        .map(|h| {
            let bytes = |ptr: *const u8, len| EnvoyBuffer { ptr, length: len }.bytes();
            (
                bytes(h.key_ptr, h.key_length),
                bytes(h.value_ptr, h.value_length),
            )
        })
        .collect()
}

// A configuration's own streams (the fleet's sync, `crate::fleet`), on Envoy's main thread.

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_headers(
    _config_envoy: FilterConfigEnvoy,
    config: *const c_void,
    stream: u64,
    headers: *const abi::Header,
    headers_size: usize,
    _end_stream: bool,
) {
    // SAFETY: Envoy's headers, valid for this hook.
    let headers = unsafe { header_pairs(headers, headers_size) };
    on_config(config, |c| c.on_stream(stream, &headers, &[]));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_data(
    _config_envoy: FilterConfigEnvoy,
    config: *const c_void,
    stream: u64,
    data: *const EnvoyBuffer,
    data_count: usize,
    _end_stream: bool,
) {
    let chunks: Vec<&[u8]> = if data.is_null() {
        Vec::new()
    } else {
        // SAFETY: Envoy's buffers, valid for this hook.
        unsafe { std::slice::from_raw_parts(data, data_count) }
            .iter()
            // SAFETY: as above.
            .map(|b| unsafe { b.bytes() })
            .collect()
    };
    on_config(config, |c| c.on_stream(stream, &[], &chunks));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_trailers(
    _config_envoy: FilterConfigEnvoy,
    config: *const c_void,
    stream: u64,
    trailers: *const abi::Header,
    trailers_size: usize,
) {
    // SAFETY: Envoy's trailers, valid for this hook.
    let trailers = unsafe { header_pairs(trailers, trailers_size) };
    on_config(config, |c| c.on_stream(stream, &trailers, &[]));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_complete(
    _config_envoy: FilterConfigEnvoy,
    config: *const c_void,
    stream: u64,
) {
    on_config(config, |c| c.on_stream_end(stream, true));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_reset(
    _config_envoy: FilterConfigEnvoy,
    config: *const c_void,
    stream: u64,
    _reason: u32,
) {
    on_config(config, |c| c.on_stream_end(stream, false));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(
    _name: EnvoyBuffer,
    _config: EnvoyBuffer,
) -> *const c_void {
    // No per-route configuration: Envoy refuses one.
    std::ptr::null()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_destroy(_c: *const c_void) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    filter_envoy: FilterEnvoy,
) -> *const c_void {
    // SAFETY: the pointer config_new returned, alive while Envoy makes filters from it.
    let Some(config) = (unsafe { (config as *const NativeConfig).as_ref() }) else {
        return std::ptr::null();
    };
    let native = config;
    let made = catch_unwind(AssertUnwindSafe(|| {
        let (config, metrics) = native.on_this_worker()?;
        let host = NativeHost::new(filter_envoy, Some(native.metrics.clone()));
        let part = match config.role {
            Role::Downstream => Part::Down(Downstream::new(
                host.twin(),
                Rc::clone(&config),
                Rc::clone(&metrics),
                LocalAnswers::new(),
            )),
            Role::Upstream => Part::Up(
                Upstream::new(host.twin(), Rc::clone(&config), Rc::clone(&metrics)),
                Timer::default(),
            ),
        };
        Some(Filter {
            part,
            host,
            config,
            metrics,
            failed: false,
            done: false,
        })
    }));
    match made {
        Ok(Some(filter)) => {
            let module = Box::into_raw(Box::new(filter));
            // SAFETY: just made, not yet known to Envoy.
            unsafe { (*module).host.set_module(module as *const c_void) };
            module as *const c_void
        }
        // A null filter: Envoy closes the stream (fail closed).
        _ => std::ptr::null(),
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    _filter_envoy: FilterEnvoy,
    module: *const c_void,
    end_of_stream: bool,
) -> u32 {
    guard(
        module,
        abi::HEADERS_CONTINUE,
        abi::HEADERS_STOP_ITERATION,
        |f| {
            headers_status(match &mut f.part {
                Part::Down(down) => {
                    f.host.open_request();
                    down.on_request_headers(end_of_stream)
                }
                Part::Up(up, _) => up.on_request_headers(end_of_stream),
            })
        },
    )
}

/// A body hook of either direction: the role sees the body buffered so far with this chunk.
fn body_hook(filter_envoy: FilterEnvoy, module: *const c_void, map: Map, end: bool) -> u32 {
    let (go, stop) = (abi::BODY_CONTINUE, abi::BODY_STOP_ITERATION_AND_BUFFER);
    guard(module, go, stop, |f| {
        let (size, own_chunk) = body_size(filter_envoy, map);
        f.host.set_receiving(own_chunk.then_some(map));
        let flow = match (&mut f.part, map) {
            (Part::Down(down), Map::Request) => down.on_request_body(size, end),
            (Part::Down(down), Map::Response) => down.on_response_body(size, end),
            (Part::Up(up, _), Map::Request) => up.on_request_body(size, end),
            (Part::Up(up, _), Map::Response) => up.on_response_body(size, end),
        };
        f.host.set_receiving(None);
        body_status(flow)
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    filter_envoy: FilterEnvoy,
    module: *const c_void,
    end_of_stream: bool,
) -> u32 {
    body_hook(filter_envoy, module, Map::Request, end_of_stream)
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
) -> u32 {
    abi::TRAILERS_CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    _filter_envoy: FilterEnvoy,
    module: *const c_void,
    end_of_stream: bool,
) -> u32 {
    guard(
        module,
        abi::HEADERS_CONTINUE,
        abi::HEADERS_STOP_ITERATION,
        |f| {
            headers_status(match &mut f.part {
                Part::Down(down) => down.on_response_headers(),
                Part::Up(up, _) => up.on_response_headers(end_of_stream),
            })
        },
    )
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    filter_envoy: FilterEnvoy,
    module: *const c_void,
    end_of_stream: bool,
) -> u32 {
    body_hook(filter_envoy, module, Map::Response, end_of_stream)
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _filter_envoy: FilterEnvoy,
    module: *const c_void,
) -> u32 {
    guard(
        module,
        abi::TRAILERS_CONTINUE,
        abi::TRAILERS_STOP_ITERATION,
        |f| match &mut f.part {
            Part::Down(_) => abi::TRAILERS_CONTINUE,
            Part::Up(up, _) => match up.on_response_trailers() {
                Flow::Continue => abi::TRAILERS_CONTINUE,
                Flow::Pause => abi::TRAILERS_STOP_ITERATION,
            },
        },
    )
}

/// The role's last word (proxy-wasm's `on_done`), once; then (downstream) the access-log
/// properties.
fn finish(module: *const c_void) {
    finish_if(module, false);
}

/// [`finish`], or (`ending`) only an attempt whose end the request's end is
/// ([`Upstream::ends_with_request`]).
fn finish_if(module: *const c_void, ending: bool) {
    guard(module, 0, 0, |f| {
        if f.done || (ending && !matches!(&f.part, Part::Up(up, _) if up.ends_with_request())) {
            return 0;
        }
        f.done = true;
        match &mut f.part {
            Part::Down(down) => {
                f.host.keep_response_flags();
                // An attempt still open when the request ends with it (an answer cut midway, a
                // hedged race's loser) has its last word now, before the access log reads the
                // walk: Envoy destroys its filter only after the log (docs/internals.md "The
                // native build"). Not from inside another filter's hook, which may be that
                // attempt's.
                if DEPTH.with(|d| d.get()) == 1 {
                    for upstream in f.host.upstreams() {
                        finish_if(upstream, true);
                    }
                }
                down.on_done();
                f.host.publish_logs();
            }
            Part::Up(up, _) => up.on_done(),
        }
        // What proxy-wasm's tick does on this worker, for this configuration.
        crate::metrics::after_request(&f.metrics, &f.config, &f.host);
        0
    });
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _filter_envoy: FilterEnvoy,
    module: *const c_void,
) {
    finish(module);
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(module: *const c_void) {
    if module.is_null() {
        return;
    }
    // An upstream filter whose attempt got no answer (refused, reset, timed out) is destroyed
    // without a stream_complete: it has its last word here, as proxy-wasm's on_done.
    finish(module);
    // SAFETY: made by `Box::into_raw` in filter_new; Envoy destroys it once, last.
    let mut filter = unsafe { Box::from_raw(module as *mut Filter) };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Part::Up(_, timer) = &mut filter.part {
            timer.close();
        }
        filter.host.close_request();
        drop(filter);
    }));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    _filter_envoy: FilterEnvoy,
    module: *const c_void,
    _event_id: u64,
) {
    guard(module, 0, 0, |f| {
        if let Part::Up(up, timer) = &mut f.part {
            timer.fired();
            up.on_timer();
        }
        0
    });
}

// Hooks Envoy 1.40 requires of every HTTP filter module; this one starts no callouts and no
// streams of its own, and is never a terminal filter.

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
    _callout_id: u64,
    _result: u32,
    _headers: *const abi::Header,
    _headers_size: usize,
    _body: *const EnvoyBuffer,
    _body_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
    _stream: u64,
    _headers: *const abi::Header,
    _headers_size: usize,
    _end_stream: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
    _stream: u64,
    _data: *const EnvoyBuffer,
    _data_count: usize,
    _end_stream: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
    _stream: u64,
    _trailers: *const abi::Header,
    _trailers_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
    _stream: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
    _stream: u64,
    _reason: u32,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _filter_envoy: FilterEnvoy,
    _module: *const c_void,
) {
}
