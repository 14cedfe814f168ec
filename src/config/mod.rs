//! Plugin configuration: the serde model users write (JSON in Envoy's plugin configuration,
//! YAML in the `llm-failover` CLI), and its validated, ready-to-use form.
//!
//! `Config::from_json` refuses anything half-valid: every problem is reported at once, each
//! naming the field path and what to do about it (docs/behaviour.md section 9). One module per section:
//! [`providers`], [`chains`], [`callers`], [`policies`] (breaker, dead marks, timeouts, request settings),
//! collecting into a path-scoped [`Problems`].
//!
//! Loading runs once per configuration, never per request: every function of it (here and in
//! the section modules) is `#[inline]`, so that its code is not compiled with this crate at
//! opt-level 3 but where it is called, the module crate's `load` at "z" (`module/src/lib.rs`;
//! BENCHMARKS.md "Module size": about -20 KB). A new loading function is `#[inline]` too.

mod callers;
mod chains;
mod envelope;
mod error_path;
pub mod forward;
mod model;
mod policies;
mod problems;
mod providers;
mod raw;

pub use crate::ids::{ChainId, EntryId, ProviderId};
pub use model::*;
pub use policies::fleet_window_problem;
pub use problems::ConfigError;
use problems::Problems;
pub use raw::*;

impl Config {
    /// Parses and validates plugin configuration JSON. Reads credential environment
    /// variables through `env` (the process environment inside the VM).
    #[inline]
    pub fn from_json(
        json: &[u8],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Vec<ConfigError>> {
        let raw: RawConfig = serde_json::from_slice(json).map_err(|e| {
            vec![ConfigError {
                field: error_path::of(json, &e),
                problem: e.to_string(),
            }]
        })?;
        let mut config = Config::from_raw(raw, env)?;
        config.fingerprint = fingerprint(json);
        Ok(config)
    }

    /// Validates an already parsed configuration (the CLI parses YAML into `RawConfig`).
    #[inline]
    pub fn from_raw(
        raw: RawConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Vec<ConfigError>> {
        let mut problems = Problems::default();
        providers::check_list(&raw.providers, &mut problems);
        chains::check_list(&raw.chains, &mut problems);
        let providers = providers::validate(
            &raw.providers,
            &raw.gateway_credential_headers,
            env,
            &mut problems,
        );
        let chains = chains::validate(&raw.chains, &providers.ids, &providers.list, &mut problems);
        let breaker = policies::breaker(&raw.breaker, &mut problems);
        let timeouts = policies::timeouts(&raw.timeouts, &mut problems);
        let fleet = policies::fleet(&raw, &mut problems);
        policies::request_settings(&raw, &mut problems);
        if raw.caller_header.is_none() {
            for (i, c) in raw.chains.iter().enumerate() {
                if !c.callers.is_empty() {
                    problems.field(
                        &format!("chains[{i}].callers"),
                        "set caller_header (the request header your auth filter sets) so callers can be told apart",
                    );
                }
            }
        }
        let callers = callers::validate(&raw.callers, raw.caller_header.as_deref(), &mut problems);
        let caller_chains = chains.iter().any(|c| !c.callers.is_empty());
        let busy_counted = busy_counted(&chains);
        // A chain whose `paths` take the liveness path keeps it: the filter never answers a
        // path the configuration routes.
        let liveness_path = Some(raw.liveness_path.clone()).filter(|p| {
            !p.is_empty()
                && !chains
                    .iter()
                    .any(|c| crate::pattern::any_matches(&c.paths, p))
        });
        let dead_marks = policies::dead_marks(&raw.dead_marks);
        let cleared_headers = providers.cleared_headers;
        let providers = providers.list;
        let forwarding = forward::HeaderPolicy::new(&providers, cleared_headers.clone());
        problems.into_result(|| Config {
            role: raw.role,
            routing: raw.routing,
            hold_answers: raw.hold_answers,
            body_limit: raw.body_limit,
            log_models: raw.log_models,
            ask_stream_usage: raw.ask_stream_usage,
            providers,
            chains,
            breaker,
            dead_marks,
            timeouts,
            opt_out_header: raw.opt_out_header.to_ascii_lowercase(),
            caller_header: raw.caller_header.map(|h| h.to_ascii_lowercase()),
            cleared_headers,
            gateway_credential_headers: raw
                .gateway_credential_headers
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            status_path: raw.status_path,
            fingerprint: 0,
            caller_chains,
            busy_counted,
            models_path: Some(raw.models_path).filter(|p| !p.is_empty()),
            liveness_path,
            forwarding,
            fleet,
            callers,
        })
    }

    pub fn provider_id(&self, name: &str) -> Option<ProviderId> {
        ProviderId::new(self.providers.iter().position(|p| p.name == name)?)
    }
}

/// Bit `i`: provider `i` is in a `least_busy` group, so its requests in flight are counted.
fn busy_counted(chains: &[Chain]) -> u64 {
    let mut bits = 0u64;
    for chain in chains {
        for g in (chain.groups.iter()).filter(|g| g.policy == GroupPolicy::LeastBusy) {
            for e in chain.entries.get(g.members()).unwrap_or_default() {
                bits |= 1u64.checked_shl(e.provider.index() as u32).unwrap_or(0);
            }
        }
    }
    bits
}

/// A fingerprint of a plugin configuration, the same for both roles of one rendered
/// configuration: the JSON bytes without the role member (`"role":"downstream"` or
/// `"role":"upstream"`, as the renderer writes it). Any other difference between the two roles'
/// texts counts as drift. FNV-1a: stable across builds and Rust versions, which std's hashers
/// do not promise, so two module builds agree. (Hashing a parsed `serde_json::Value` instead
/// would ignore formatting but adds 13 KB to the module.)
#[inline]
pub fn fingerprint(json: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut hasher = fnv::FnvHasher::default();
    let role = [&b"\"role\":\"downstream\""[..], b"\"role\":\"upstream\""]
        .iter()
        .find_map(|member| {
            let at = json.windows(member.len()).position(|w| w == *member)?;
            Some((at, at + member.len()))
        });
    match role.and_then(|(start, end)| Some((json.get(..start)?, json.get(end..)?))) {
        Some((before, after)) => {
            hasher.write(before);
            hasher.write(after);
        }
        None => hasher.write(json),
    }
    hasher.finish()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod groups_tests;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod proptests;
