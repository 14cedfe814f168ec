//! llm-failover: an Envoy HTTP filter (proxy-wasm) that keeps LLM requests answering through
//! provider outages by walking an ordered chain of providers.
//!
//! The decision core (everything but `filter`) is plain Rust with no proxy-wasm types: it is
//! unit-tested on the host and inside wasm. `filter` is the thin proxy-wasm glue.

pub mod classify;
pub mod config;
pub mod duration;
pub mod host;
pub mod wire;

#[cfg(target_arch = "wasm32")]
mod filter;
