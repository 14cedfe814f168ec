//! `RawConfig`'s `Deserialize`, written once instead of derived per type: one table of every
//! section's fields ([`Shape`]) and one reader of it ([`Seed`]), which asks the deserializer for
//! each value exactly what serde's derived visitors asked (`deserialize_struct`, `_option`,
//! `_seq`, `_identifier`, `_any` for the two lists that take a name or a list, the primitives'
//! own `Deserialize`), so every accepted configuration, every error message and every error
//! position is what the derived code gave (src/config/raw/read/tests.rs holds it to a derived
//! copy of the model over thousands of broken configurations). Derived, each type's visitor was
//! its own generic code (a map visitor and a sequence visitor per section, the values inlined
//! per field, serde's buffering for the two untagged enums): BENCHMARKS.md "Module size".
//!
//! The reader builds a small tree ([`V`]); the typed model is made from it here, with the
//! defaults raw.rs names.

use super::{
    RawBreaker, RawBudget, RawCaller, RawCapabilities, RawChain, RawChainEntry, RawConfig,
    RawCredential, RawDeadMarks, RawFleet, RawProvider, RawRetrySettings, RawTimeouts, RawTrigger,
    Role, Routing,
};
use serde::de::{DeserializeSeed, Deserializer};
use serde::Deserialize;
use values::{Seed, V};

mod values;

/// What a field (or a list's element) holds.
enum Ty {
    Str,
    Bool,
    U32,
    U64,
    /// `serde_duration`: a string such as "30s" or a number of seconds.
    Duration,
    Role,
    Routing,
    /// `Vec<String>`.
    Strings,
    /// `BTreeMap<String, String>`.
    StrMap,
    Opt(&'static Ty),
    Struct(&'static Shape),
    List(&'static Ty),
    /// A chain entry: a provider's name or a [`RawChainEntry`] mapping.
    Entry,
    /// `forward_headers`: a list of names or a word (serde's untagged `RawForward`).
    Forward,
    /// A `fallback_on` trigger: a status or a name (serde's untagged `RawTrigger`).
    Trigger,
}

/// One section (a struct of the model): its serde name, its fields in declaration order, what
/// each holds, and which have no default.
struct Shape {
    name: &'static str,
    fields: &'static [&'static str],
    tys: &'static [Ty],
    /// Bit `i`: field `i` must be there.
    required: u32,
}

impl Shape {
    #[inline]
    fn required(&self, i: usize) -> bool {
        i < 32 && (self.required >> i) & 1 == 1
    }
}

/// The whole configuration.
static CONFIG_TY: Ty = Ty::Struct(&CONFIG);

static CONFIG: Shape = Shape {
    name: "RawConfig",
    fields: &[
        "role",
        "routing",
        "hold_answers",
        "body_limit",
        "log_models",
        "ask_stream_usage",
        "providers",
        "chains",
        "breaker",
        "dead_marks",
        "timeouts",
        "opt_out_header",
        "caller_header",
        "gateway_credential_headers",
        "status_path",
        "models_path",
        "liveness_path",
        "fleet",
        "callers",
    ],
    tys: &[
        Ty::Role,
        Ty::Routing,
        Ty::Bool,
        Ty::Opt(&Ty::U64),
        Ty::Bool,
        Ty::Bool,
        Ty::List(&Ty::Struct(&PROVIDER)),
        Ty::List(&Ty::Struct(&CHAIN)),
        Ty::Struct(&BREAKER),
        Ty::Struct(&DEAD_MARKS),
        Ty::Struct(&TIMEOUTS),
        Ty::Str,
        Ty::Opt(&Ty::Str),
        Ty::Strings,
        Ty::Opt(&Ty::Str),
        Ty::Str,
        Ty::Str,
        Ty::Opt(&Ty::Struct(&FLEET)),
        Ty::List(&Ty::Struct(&CALLER)),
    ],
    required: 1 << 6 | 1 << 7,
};

static FLEET: Shape = Shape {
    name: "RawFleet",
    fields: &[
        "address",
        "cluster",
        "domain",
        "sync",
        "timeout",
        "on_unavailable",
    ],
    tys: &[
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::Str),
        Ty::Str,
        Ty::Duration,
        Ty::Duration,
        Ty::Str,
    ],
    required: 0,
};

static CALLER: Shape = Shape {
    name: "RawCaller",
    fields: &["name", "budget"],
    tys: &[Ty::Str, Ty::Opt(&Ty::Struct(&BUDGET))],
    required: 1,
};

static PROVIDER: Shape = Shape {
    name: "RawProvider",
    fields: &[
        "name",
        "cluster",
        "models",
        "credential",
        "headers",
        "authority",
        "path_prefix",
        "callers",
        "labels",
        "forward_headers",
        "api",
        "max_tokens",
        "residency",
        "budget",
        "reserve_tokens",
    ],
    tys: &[
        Ty::Str,
        Ty::Opt(&Ty::Str),
        Ty::Strings,
        Ty::Opt(&Ty::Struct(&CREDENTIAL)),
        Ty::StrMap,
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::Str),
        Ty::Strings,
        Ty::StrMap,
        Ty::Opt(&Ty::Forward),
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::U32),
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::Struct(&BUDGET)),
        Ty::U64,
    ],
    required: 1,
};

static BUDGET: Shape = Shape {
    name: "RawBudget",
    fields: &["tokens", "window"],
    tys: &[Ty::U64, Ty::Duration],
    required: 0b11,
};

static CREDENTIAL: Shape = Shape {
    name: "RawCredential",
    fields: &["header", "value", "env", "prefix"],
    tys: &[Ty::Str, Ty::Opt(&Ty::Str), Ty::Opt(&Ty::Str), Ty::Str],
    required: 1,
};

static CHAIN: Shape = Shape {
    name: "RawChain",
    fields: &[
        "name",
        "models",
        "routes",
        "paths",
        "callers",
        "providers",
        "max_attempts",
        "fallback_on",
        "try_last",
        "fallbacks_exhausted",
        "context_window",
        "content_policy",
        "retry_in_place",
        "same_residency",
        "hedge_after",
    ],
    tys: &[
        Ty::Str,
        Ty::Strings,
        Ty::Strings,
        Ty::Strings,
        Ty::Strings,
        Ty::List(&Ty::Entry),
        Ty::U32,
        Ty::Opt(&Ty::List(&Ty::Trigger)),
        Ty::Bool,
        Ty::Bool,
        Ty::List(&Ty::Entry),
        Ty::List(&Ty::Entry),
        Ty::Opt(&Ty::Struct(&RETRY)),
        Ty::Bool,
        Ty::Duration,
    ],
    required: 1 | 1 << 5,
};

static RETRY: Shape = Shape {
    name: "RawRetrySettings",
    fields: &["back_off", "max_retry_after"],
    tys: &[Ty::Duration, Ty::Duration],
    required: 0,
};

static ENTRY: Shape = Shape {
    name: "RawChainEntry",
    fields: &[
        "provider",
        "model",
        "capabilities",
        "effort",
        "max_tokens",
        "group",
        "weights",
        "policy",
    ],
    tys: &[
        Ty::Str,
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::Struct(&CAPABILITIES)),
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::U32),
        Ty::List(&Ty::Entry),
        Ty::Opt(&Ty::List(&Ty::U32)),
        Ty::Opt(&Ty::Str),
    ],
    // `provider` or `group`: the validator says which is missing.
    required: 0,
};

static CAPABILITIES: Shape = Shape {
    name: "RawCapabilities",
    fields: &["vision", "tools", "context_window"],
    tys: &[Ty::Opt(&Ty::Bool), Ty::Opt(&Ty::Bool), Ty::Opt(&Ty::U64)],
    required: 0,
};

static BREAKER: Shape = Shape {
    name: "RawBreaker",
    fields: &[
        "failures",
        "window",
        "cooldown",
        "max_cooldown",
        "fleet_failures",
        "fleet_window",
    ],
    tys: &[
        Ty::U32,
        Ty::Duration,
        Ty::Duration,
        Ty::Duration,
        Ty::U32,
        Ty::Duration,
    ],
    required: 0,
};

static DEAD_MARKS: Shape = Shape {
    name: "RawDeadMarks",
    fields: &[
        "model_not_found",
        "setup_fault",
        "quota_exhausted",
        "rate_limited_ahead",
    ],
    tys: &[Ty::Duration, Ty::Duration, Ty::Duration, Ty::Duration],
    required: 0,
};

static TIMEOUTS: Shape = Shape {
    name: "RawTimeouts",
    fields: &["attempt", "stall", "budget", "min_remaining", "first_token"],
    tys: &[
        Ty::Duration,
        Ty::Duration,
        Ty::Duration,
        Ty::Duration,
        Ty::Duration,
    ],
    required: 0,
};

impl<'de> Deserialize<'de> for RawConfig {
    #[inline]
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Seed(&CONFIG_TY).deserialize(d).map(config)
    }
}

#[inline]
fn config(v: V) -> RawConfig {
    let [role, routing, hold_answers, body_limit, log_models, ask_stream_usage, providers, chains, breaker, dead_marks, timeouts, opt_out_header, caller_header, gateway_credential_headers, status_path, models_path, liveness_path, fleet, callers] =
        v.fields();
    RawConfig {
        role: match role {
            V::Role(r) => r,
            _ => Role::default(),
        },
        routing: match routing {
            V::Routing(r) => r,
            _ => Routing::default(),
        },
        hold_answers: (hold_answers.bool()).unwrap_or_else(RawConfig::default_hold_answers),
        body_limit: body_limit.num(),
        log_models: log_models.bool().unwrap_or_default(),
        ask_stream_usage: (ask_stream_usage.bool())
            .unwrap_or_else(RawConfig::default_ask_stream_usage),
        providers: providers.list(provider),
        chains: chains.list(chain),
        breaker: self::breaker(breaker),
        dead_marks: self::dead_marks(dead_marks),
        timeouts: self::timeouts(timeouts),
        opt_out_header: (opt_out_header.str()).unwrap_or_else(RawConfig::default_opt_out_header),
        caller_header: caller_header.str(),
        gateway_credential_headers: (gateway_credential_headers.strings())
            .unwrap_or_else(RawConfig::default_gateway_credential_headers),
        status_path: status_path.str(),
        models_path: (models_path.str()).unwrap_or_else(RawConfig::default_models_path),
        liveness_path: (liveness_path.str()).unwrap_or_else(RawConfig::default_liveness_path),
        fleet: fleet.section(|v| {
            let [address, cluster, domain, sync, timeout, on_unavailable] = v.fields();
            let d = RawFleet::default();
            RawFleet {
                address: address.str(),
                cluster: cluster.str(),
                domain: domain.str().unwrap_or(d.domain),
                sync: sync.num().unwrap_or(d.sync),
                timeout: timeout.num().unwrap_or(d.timeout),
                on_unavailable: on_unavailable.str().unwrap_or(d.on_unavailable),
            }
        }),
        callers: callers.list(caller),
    }
}

#[inline]
fn provider(v: V) -> RawProvider {
    let [name, cluster, models, credential, headers, authority, path_prefix, callers, labels, forward_headers, api, max_tokens, residency, budget, reserve_tokens] =
        v.fields();
    RawProvider {
        name: name.str().unwrap_or_default(),
        cluster: cluster.str(),
        models: models.strings().unwrap_or_else(super::default_any_model),
        credential: credential.section(self::credential),
        headers: headers.map(),
        authority: authority.str(),
        path_prefix: path_prefix.str(),
        callers: callers.strings().unwrap_or_default(),
        labels: labels.map(),
        forward_headers: match forward_headers {
            V::Forward(f) => Some(f),
            _ => None,
        },
        api: api.str(),
        max_tokens: max_tokens.small(),
        residency: residency.str(),
        budget: budget.section(self::budget),
        reserve_tokens: reserve_tokens.num().unwrap_or_default(),
    }
}

#[inline]
fn caller(v: V) -> RawCaller {
    let [name, budget] = v.fields();
    RawCaller {
        name: name.str().unwrap_or_default(),
        budget: budget.section(self::budget),
    }
}

#[inline]
fn budget(v: V) -> RawBudget {
    let [tokens, window] = v.fields();
    RawBudget {
        tokens: tokens.num().unwrap_or_default(),
        window: window.num().unwrap_or_default(),
    }
}

#[inline]
fn credential(v: V) -> RawCredential {
    let [header, value, env, prefix] = v.fields();
    RawCredential {
        header: header.str().unwrap_or_default(),
        value: value.str(),
        env: env.str(),
        prefix: prefix.str().unwrap_or_default(),
    }
}

#[inline]
fn chain(v: V) -> RawChain {
    let [name, models, routes, paths, callers, providers, max_attempts, fallback_on, try_last, fallbacks_exhausted, context_window, content_policy, retry_in_place, same_residency, hedge_after] =
        v.fields();
    RawChain {
        name: name.str().unwrap_or_default(),
        models: models.strings().unwrap_or_else(super::default_any_model),
        routes: routes.strings().unwrap_or_default(),
        paths: paths.strings().unwrap_or_default(),
        callers: callers.strings().unwrap_or_default(),
        providers: providers.list(entry),
        max_attempts: max_attempts.small().unwrap_or_else(super::default_attempts),
        fallback_on: fallback_on.section(|v| {
            v.list(|t| match t {
                V::Trigger(t) => t,
                _ => RawTrigger::Status(0),
            })
        }),
        try_last: try_last.bool().unwrap_or_default(),
        fallbacks_exhausted: fallbacks_exhausted.bool().unwrap_or_default(),
        context_window: context_window.list(entry),
        content_policy: content_policy.list(entry),
        retry_in_place: retry_in_place.section(|v| {
            let d = RawRetrySettings::default();
            let [back_off, max_retry_after] = v.fields();
            RawRetrySettings {
                back_off: back_off.num().unwrap_or(d.back_off),
                max_retry_after: max_retry_after.num().unwrap_or(d.max_retry_after),
            }
        }),
        same_residency: same_residency.bool().unwrap_or_default(),
        hedge_after: hedge_after.num(),
    }
}

#[inline]
fn entry(v: V) -> RawChainEntry {
    let [provider, model, capabilities, effort, max_tokens, group, weights, policy] = match v {
        // A bare name: the provider, the rest absent.
        V::Str(name) => {
            let mut fields: [V; 8] = std::array::from_fn(|_| V::Absent);
            if let Some(first) = fields.first_mut() {
                *first = V::Str(name);
            }
            fields
        }
        v => v.fields(),
    };
    RawChainEntry {
        provider: provider.str().unwrap_or_default(),
        model: model.str(),
        capabilities: capabilities.section(|v| {
            let [vision, tools, context_window] = v.fields();
            RawCapabilities {
                vision: vision.bool(),
                tools: tools.bool(),
                context_window: context_window.num(),
            }
        }),
        effort: effort.str(),
        max_tokens: max_tokens.small(),
        group: group.list(entry),
        weights: weights.section(|v| v.list(|w| w.small().unwrap_or_default())),
        policy: policy.str(),
    }
}

#[inline]
fn breaker(v: V) -> RawBreaker {
    let d = RawBreaker::default();
    let [failures, window, cooldown, max_cooldown, fleet_failures, fleet_window] = v.fields();
    RawBreaker {
        failures: failures.small().unwrap_or(d.failures),
        window: window.num().unwrap_or(d.window),
        cooldown: cooldown.num().unwrap_or(d.cooldown),
        max_cooldown: max_cooldown.num().unwrap_or(d.max_cooldown),
        fleet_failures: fleet_failures.small().unwrap_or(d.fleet_failures),
        fleet_window: fleet_window.num().unwrap_or(d.fleet_window),
    }
}

#[inline]
fn dead_marks(v: V) -> RawDeadMarks {
    let d = RawDeadMarks::default();
    let [model_not_found, setup_fault, quota_exhausted, rate_limited_ahead] = v.fields();
    RawDeadMarks {
        model_not_found: model_not_found.num().unwrap_or(d.model_not_found),
        setup_fault: setup_fault.num().unwrap_or(d.setup_fault),
        quota_exhausted: quota_exhausted.num().unwrap_or(d.quota_exhausted),
        rate_limited_ahead: (rate_limited_ahead.num()).unwrap_or(d.rate_limited_ahead),
    }
}

#[inline]
fn timeouts(v: V) -> RawTimeouts {
    let d = RawTimeouts::default();
    let [attempt, stall, budget, min_remaining, first_token] = v.fields();
    RawTimeouts {
        attempt: attempt.num().unwrap_or(d.attempt),
        stall: stall.num().unwrap_or(d.stall),
        budget: budget.num().unwrap_or(d.budget),
        min_remaining: min_remaining.num().unwrap_or(d.min_remaining),
        first_token: first_token.num().unwrap_or(d.first_token),
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
