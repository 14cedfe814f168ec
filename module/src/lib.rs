//! The Envoy proxy-wasm module (`dist/llm_failover.wasm`, built by `scripts/build.sh`).
//!
//! Everything lives in the `llm-failover` crate; its proxy-wasm callbacks (`proxy_on_*`) are
//! exported from this cdylib because they are `#[no_mangle]`. This crate only exists to be the
//! root of the link: rustc runs fat LTO at the root crate's opt-level, and this one's is "z",
//! so the link stops inlining across the whole module a second time (about -58 KB) while every
//! function of the filter crate keeps the opt-level 3 code it was compiled to.
//!
//! It also holds the module's start (`_initialize`) and hands the filter its configuration
//! loader, [`load`]: code compiled in this crate is compiled at "z", and so are the
//! `#[inline]` and generic functions only it calls: the configuration's parsing (serde's
//! derived visitors) and validation, which run once per configuration, not per request; and,
//! the same way, the downstream role's models list and status page
//! (`llm_failover::roles::LocalAnswers`, built here) (BENCHMARKS.md "Module size").
pub use llm_failover;

#[cfg(target_arch = "wasm32")]
proxy_wasm::main! {{
    llm_failover::filter::start(load, llm_failover::roles::LocalAnswers::new());
}}

/// Parses and validates the plugin configuration (`Config::from_json`, compiled here).
#[cfg(target_arch = "wasm32")]
fn load(
    json: &[u8],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<llm_failover::config::Config, Vec<llm_failover::config::ConfigError>> {
    llm_failover::config::Config::from_json(json, env)
}
