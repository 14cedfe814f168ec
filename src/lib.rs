//! llm-failover: an Envoy HTTP filter (proxy-wasm) that keeps LLM requests answering through
//! provider outages by walking an ordered chain of providers.
//!
//! The decision core (everything but `filter`) is plain Rust with no proxy-wasm types: it is
//! unit-tested on the host and inside wasm. `filter` is the thin proxy-wasm glue.

#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod announced;
pub mod answer;
pub mod attempt;
pub mod attempt_log;
pub mod budget;
pub mod busy;
pub mod bytes;
pub mod classify;
pub mod config;
pub mod destination;
pub mod duration;
pub mod eligible;
pub mod envelope;
pub mod explain;
pub mod failing_answer;
pub mod fleet;
pub mod group;
pub mod handoff;
pub mod header_pairs;
pub mod health;
pub mod hedge;
pub mod host;
pub mod ids;
pub mod intake;
pub mod metrics;
pub mod models;
pub mod pattern;
pub mod pick;
pub mod plan;
pub mod reply;
pub mod residency;
pub mod retry_after;
pub mod rewrite;
pub mod roles;
pub mod status;
pub mod tokens;
pub mod translate;
pub mod usage;
pub mod wire;

#[cfg(target_arch = "wasm32")]
pub mod filter;
