//! The Envoy proxy-wasm module (`dist/llm_failover.wasm`, built by `scripts/build.sh`).
//!
//! Everything lives in the `llm-failover` crate: its proxy-wasm entry points (`_initialize`,
//! `proxy_on_*`) are exported from this cdylib because they are `#[no_mangle]`. This crate only
//! exists to be the root of the link: rustc runs fat LTO at the root crate's opt-level, and this
//! one's is "z", so the link stops inlining across the whole module a second time (about -58 KB)
//! while every function of the filter crate keeps the opt-level 3 code it was compiled to.
pub use llm_failover;
