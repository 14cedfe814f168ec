//! The `llm-failover` command: renders a complete Envoy configuration (router mode) from one
//! concise failover file, and validates such files with the filter's own configuration code.

// Tests may unwrap, index and panic (the workspace denies these in the tools' code).
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod checks;
pub mod diag;
pub mod input;
pub mod names;
#[macro_use]
pub mod render;
pub mod subst;
pub mod version;

// After `render`: uses its `map!` macro.
pub mod istio;
pub mod istio_schema;

pub use diag::{Diag, Level};
pub use input::{load, load_for, Gateway};

/// Warnings `validate` adds for credential variables missing from this environment: rendering
/// does not need them, but Envoy must have them when it starts.
pub fn env_warnings(gw: &Gateway, env: &dyn Fn(&str) -> Option<String>) -> Vec<Diag> {
    let mut out = Vec::new();
    let Some(serde_yaml_ng::Value::Sequence(providers)) = gw.plugin.get("providers") else {
        return out;
    };
    for (i, p) in providers.iter().enumerate() {
        let Some(var) = p
            .get("credential")
            .and_then(|c| c.get("env"))
            .and_then(|v| v.as_str())
        else {
            continue;
        };
        if env(var).map_or(true, |v| v.is_empty()) {
            out.push(Diag::warning(
                format!("providers[{i}].credential.env"),
                format!("{var} is not set here — Envoy needs it in its environment when it starts (rendering does not)"),
            ));
        }
    }
    out
}
