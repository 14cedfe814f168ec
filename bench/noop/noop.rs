//! A do-nothing proxy-wasm filter (ABI 0.2.1), used only by the benchmark to measure the
//! fixed cost of running wasm callbacks in Envoy: it exports the same HTTP callbacks as a
//! proxy-wasm Rust SDK filter and returns "continue" from every one without a single hostcall.
//! Build (scripts/bench.sh does it): rustc --edition 2021 --target wasm32-wasip1
//!   --crate-type cdylib -C opt-level=3 -C panic=abort bench/noop/noop.rs -o .work/bench/noop.wasm

use std::alloc::{alloc, Layout};

#[no_mangle]
pub extern "C" fn proxy_abi_version_0_2_1() {}

#[no_mangle]
pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
    let layout = match Layout::from_size_align(size.max(1), 8) {
        Ok(l) => l,
        Err(_) => return std::ptr::null_mut(),
    };
    // SAFETY: the layout has a non-zero size.
    unsafe { alloc(layout) }
}

#[no_mangle]
pub extern "C" fn proxy_on_context_create(_context_id: u32, _parent_context_id: u32) {}
#[no_mangle]
pub extern "C" fn proxy_on_vm_start(_root: u32, _size: usize) -> bool {
    true
}
#[no_mangle]
pub extern "C" fn proxy_on_configure(_root: u32, _size: usize) -> bool {
    true
}
#[no_mangle]
pub extern "C" fn proxy_on_request_headers(_c: u32, _n: usize, _eos: bool) -> u32 {
    0
}
#[no_mangle]
pub extern "C" fn proxy_on_request_body(_c: u32, _n: usize, _eos: bool) -> u32 {
    0
}
#[no_mangle]
pub extern "C" fn proxy_on_request_trailers(_c: u32, _n: usize) -> u32 {
    0
}
#[no_mangle]
pub extern "C" fn proxy_on_response_headers(_c: u32, _n: usize, _eos: bool) -> u32 {
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
