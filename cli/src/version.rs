//! The Envoy version a configuration is rendered for, and what follows from it.
//!
//! Router mode needs `refresh_cluster_on_retry` (Envoy 1.39). Envoy 1.36-1.38 get grouping
//! clusters (`llm_failover::group`, docs/older-envoys.md): same module, same failover file.

use std::fmt;

/// `major.minor` of the target Envoy (patch releases do not change what is rendered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EnvoyVersion {
    pub major: u32,
    pub minor: u32,
}

/// What `envoy_version:` defaults to: the Envoy the project is tested on first.
pub const DEFAULT: EnvoyVersion = EnvoyVersion {
    major: 1,
    minor: 40,
};
/// The oldest Envoy rendered for.
pub const OLDEST: EnvoyVersion = EnvoyVersion {
    major: 1,
    minor: 36,
};
/// The first Envoy that survives retrying an attempt whose answer an upstream filter held
/// (1.36.4 crashes: a 429 or a stream's first event read before deciding, then retried).
pub const RETRIES_HELD_ANSWERS: EnvoyVersion = EnvoyVersion {
    major: 1,
    minor: 37,
};
/// The first Envoy with `refresh_cluster_on_retry` (router mode).
pub const ROUTER_MODE: EnvoyVersion = EnvoyVersion {
    major: 1,
    minor: 39,
};

/// The Envoy whose dynamic-modules ABI the native module is built against (`native/src/abi.rs`).
pub const NATIVE_ABI: EnvoyVersion = EnvoyVersion {
    major: 1,
    minor: 40,
};

/// Which build of the filter Envoy loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    /// The proxy-wasm module (`dist/llm_failover.wasm`): any Envoy rendered for, and Istio.
    #[default]
    Wasm,
    /// The Envoy dynamic module (`dist/libllm_failover.so`): Envoy 1.40 and 1.41 only.
    Native,
}

/// How attempts are carried on the target Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Envoy >= 1.39: the route picks each attempt's cluster again (`refresh_cluster_on_retry`).
    Router,
    /// Envoy 1.36-1.38: one aggregate cluster per provider order, attempt k on its k-th
    /// sub-cluster (`previous_priorities`).
    Grouping,
}

impl EnvoyVersion {
    /// Reads "1.38", "1.38.2" or "v1.38.2". The patch number is accepted and ignored.
    pub fn parse(text: &str) -> Result<EnvoyVersion, String> {
        let hint = "write the Envoy version as major.minor, e.g. \"1.38\"";
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.split('.');
        let mut number = |what: &str| -> Result<u32, String> {
            parts
                .next()
                .and_then(|p| p.parse::<u32>().ok())
                .ok_or_else(|| format!("{text:?} has no {what} number — {hint}"))
        };
        let major = number("major")?;
        let minor = number("minor")?;
        if let Some(patch) = parts.next() {
            if patch.parse::<u32>().is_err() {
                return Err(format!("{text:?} is not a version — {hint}"));
            }
        }
        if parts.next().is_some() {
            return Err(format!("{text:?} is not a version — {hint}"));
        }
        let v = EnvoyVersion { major, minor };
        if v < OLDEST {
            return Err(format!(
                "Envoy {v} is not supported — llm-failover needs Envoy {OLDEST} or later \
                 (older ones were never tested; upgrade Envoy)"
            ));
        }
        Ok(v)
    }

    /// Whether this Envoy can load the native module: Envoy loads a dynamic module built for
    /// 1.X on 1.X and 1.(X+1) only; the reason when it cannot.
    pub fn loads_native(self) -> Result<(), String> {
        let next = EnvoyVersion {
            major: NATIVE_ABI.major,
            minor: NATIVE_ABI.minor + 1,
        };
        if self == NATIVE_ABI || self == next {
            return Ok(());
        }
        Err(format!(
            "Envoy {self} cannot load the native module: it is built against Envoy {NATIVE_ABI}'s \
             dynamic-modules ABI, which Envoy {NATIVE_ABI} and {next} load and no other release \
             does — use the wasm module (--runtime wasm) on this Envoy"
        ))
    }

    /// May the upstream role hold an answer to read its body (behaviour.md 3)?
    pub fn holds_answers(self) -> bool {
        self >= RETRIES_HELD_ANSWERS
    }

    pub fn mode(self) -> Mode {
        if self >= ROUTER_MODE {
            Mode::Router
        } else {
            Mode::Grouping
        }
    }
}

impl fmt::Display for EnvoyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_pick_the_mode() {
        let v = |t: &str| EnvoyVersion::parse(t).map(EnvoyVersion::mode);
        assert_eq!(v("1.40"), Ok(Mode::Router));
        assert_eq!(v("1.39.3"), Ok(Mode::Router));
        assert_eq!(v("v1.38.2"), Ok(Mode::Grouping));
        assert_eq!(v("1.36"), Ok(Mode::Grouping));
        assert_eq!(v("2.0"), Ok(Mode::Router));
        assert!(v("1.35").unwrap_err().contains("needs Envoy 1.36 or later"));
        for bad in ["1", "latest", "1.x", "1.38.2.1", "1.38.x", ""] {
            assert!(v(bad).is_err(), "{bad}");
        }
        assert_eq!(EnvoyVersion::parse("1.38.2").unwrap().to_string(), "1.38");
        assert!(!EnvoyVersion::parse("1.36").unwrap().holds_answers());
        assert!(EnvoyVersion::parse("1.37").unwrap().holds_answers());
    }
}
