//! Fail closed (docs/behaviour.md section 7): an attempt gets a provider's credential, model and rewrites
//! only once the upstream role has confirmed, from what Envoy says, that the attempt is going to
//! the planned provider, and that the plan was made under the configuration this role runs.
//! Anything else (a route without `refresh_cluster_on_retry`, a hand-merged config, a control
//! plane that dropped a field, an aggregate cluster spilling to its next sub-cluster, the two
//! roles updated one at a time) is refused: the attempt is never sent.

use crate::config::Provider;
use crate::handoff::Refused;
use crate::reply::Reply;

/// Endpoint metadata naming the provider behind a host, for grouping clusters whose name is
/// not a provider's (older-Envoy mode): `filter_metadata.llm_failover.provider`.
pub const HOST_METADATA_NAMESPACE: &str = "llm_failover";
pub const HOST_METADATA_PROVIDER_KEY: &str = "provider";

/// Why an attempt was refused before it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The plan was made under another configuration than the one this role runs (or cannot
    /// be read by it): its indices would name other providers here.
    ConfigMismatch { planned: Option<u64>, running: u64 },
    /// Envoy sent the attempt somewhere the plan did not put it.
    Misrouted {
        attempt: usize,
        provider: String,
        cluster: String,
        /// The cluster Envoy chose, and the provider its host's metadata names, if any.
        actual_cluster: String,
        actual_provider: Option<String>,
    },
    /// Envoy started an attempt the plan has no slot for.
    Unplanned { attempt: usize },
    /// Envoy retried by itself (after no response) past the end of a walk that had room for an
    /// alternative list it did not take (behaviour.md 3): not a misconfiguration, the walk is over.
    WalkEnded { attempt: usize, chain: String },
}

impl Refusal {
    /// The machine-readable code of the caller's `502`.
    pub fn code(&self) -> &'static str {
        self.reply().code
    }

    /// The answer the caller gets instead of the attempt.
    pub fn reply(&self) -> Reply {
        match self {
            Refusal::ConfigMismatch { planned, running } => Reply::config_mismatch(
                &planned.map_or_else(|| "an unreadable plan".to_string(), |p| format!("{p:016x}")),
                &format!("{running:016x}"),
            ),
            Refusal::Misrouted {
                attempt,
                provider,
                cluster,
                actual_cluster,
                actual_provider,
            } => {
                let actual = match actual_provider {
                    Some(p) => format!("cluster {actual_cluster:?} (host of provider {p:?})"),
                    None => format!("cluster {actual_cluster:?}"),
                };
                Reply::misrouted_attempt(*attempt, provider, cluster, &actual)
            }
            Refusal::WalkEnded { attempt, chain } => {
                Reply::fallbacks_exhausted(chain, attempt.saturating_sub(1))
            }
            Refusal::Unplanned { attempt } => Reply::misrouted_attempt(
                *attempt,
                "(none: the plan has fewer attempts)",
                "(none)",
                "a provider",
            ),
        }
    }
}

/// What the upstream role records and logs for a refusal ([`Refusal::report`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusalReport {
    /// The record the downstream role reads (`handoff::REFUSED`).
    pub record: Refused,
    /// How loud the log line is, and what it starts with (the reply's message follows).
    pub level: log::Level,
    pub lead: &'static str,
}

impl Refusal {
    /// A walk that ended is the chain running out, as planned: a debug line, and the
    /// downstream role answers `fallbacks_exhausted`. Anything else is a deployment fault
    /// (fail closed): an error line an operator must see.
    pub fn report(&self) -> RefusalReport {
        match self {
            Refusal::WalkEnded { .. } => RefusalReport {
                record: Refused::WalkEnded,
                level: log::Level::Debug,
                lead: "attempt not started: ",
            },
            Refusal::ConfigMismatch { .. }
            | Refusal::Misrouted { .. }
            | Refusal::Unplanned { .. } => RefusalReport {
                record: Refused::FailClosed,
                level: log::Level::Error,
                lead: "llm_failover: attempt refused: ",
            },
        }
    }
}

/// The plan's configuration must be the one this role runs.
pub fn check_config(planned: Option<u64>, running: u64) -> Result<(), Refusal> {
    if planned == Some(running) {
        Ok(())
    } else {
        Err(Refusal::ConfigMismatch { planned, running })
    }
}

/// Confirms that attempt `attempt`, planned for `provider`, is on its way to it: Envoy's
/// cluster for the attempt is the provider's, or (grouping clusters) the chosen host's
/// metadata names the provider. `host_provider` is read only when the cluster differs, so
/// router mode's healthy path pays one property read, not two.
pub fn confirm(
    provider: &Provider,
    attempt: usize,
    cluster: &[u8],
    host_provider: impl FnOnce() -> Option<Vec<u8>>,
) -> Result<(), Refusal> {
    if cluster == provider.cluster.as_bytes() {
        return Ok(());
    }
    let host = host_provider();
    if host.as_deref() == Some(provider.name.as_bytes()) {
        return Ok(());
    }
    Err(Refusal::Misrouted {
        attempt,
        provider: provider.name.clone(),
        cluster: provider.cluster.clone(),
        actual_cluster: String::from_utf8_lossy(cluster).into_owned(),
        actual_provider: host.map(|h| String::from_utf8_lossy(&h).into_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn config() -> Config {
        let json = r#"{"role":"upstream",
            "providers":[{"name":"p1","cluster":"c1"},{"name":"p2","cluster":"c2"}],
            "chains":[{"name":"main","providers":["p1","p2"]}]}"#;
        Config::from_json(json.as_bytes(), &|_| None).expect("valid config")
    }

    #[test]
    fn the_planned_cluster_is_confirmed_without_reading_host_metadata() {
        let c = config();
        let got = confirm(&c.providers[1], 2, b"c2", || panic!("metadata read"));
        assert_eq!(got, Ok(()));
    }

    #[test]
    fn another_providers_cluster_is_refused() {
        // A route without refresh_cluster_on_retry: attempt 2 goes to attempt 1's cluster.
        let c = config();
        let got = confirm(&c.providers[1], 2, b"c1", || None);
        let Err(refusal) = got else {
            panic!("misrouted attempt confirmed")
        };
        assert_eq!(refusal.code(), "misrouted_attempt");
        let reply = refusal.reply();
        assert_eq!((reply.status, reply.should_retry), (502, false));
        for needle in ["\"p2\"", "\"c2\"", "\"c1\"", "refresh_cluster_on_retry"] {
            assert!(
                reply.message.contains(needle),
                "{needle} in {}",
                reply.message
            );
        }
    }

    #[test]
    fn a_grouping_cluster_is_confirmed_by_the_hosts_provider_and_refused_on_a_spill() {
        let c = config();
        assert_eq!(
            confirm(&c.providers[0], 1, b"group_p1_p2", || Some(b"p1".to_vec())),
            Ok(())
        );
        // The aggregate spilled to p2's sub-cluster: p1's key must not go there.
        let spilled = confirm(&c.providers[0], 1, b"group_p1_p2", || Some(b"p2".to_vec()));
        assert!(
            matches!(&spilled, Err(Refusal::Misrouted { actual_provider: Some(p), .. }) if p == "p2"),
            "{spilled:?}"
        );
        // No metadata at all on a cluster that is not the provider's: refused too.
        assert!(confirm(&c.providers[0], 1, b"group_p1_p2", || None).is_err());
    }

    #[test]
    fn an_attempt_past_the_plan_is_refused() {
        let reply = Refusal::Unplanned { attempt: 4 }.reply();
        assert_eq!((reply.status, reply.code), (502, "misrouted_attempt"));
        assert!(reply.message.contains("attempt 4"), "{}", reply.message);
        // Past a walk that had room for an alternative list: exhausted, not misrouted.
        let ended = Refusal::WalkEnded {
            attempt: 2,
            chain: "solo".into(),
        }
        .reply();
        assert_eq!((ended.status, ended.code), (503, "fallbacks_exhausted"));
        assert!(
            ended.message.contains("All 1 attempts"),
            "{}",
            ended.message
        );
    }

    #[test]
    fn a_walk_that_ended_is_a_debug_line_and_a_fault_an_error() {
        let ended = Refusal::WalkEnded {
            attempt: 3,
            chain: "main".into(),
        }
        .report();
        assert_eq!(
            (ended.record, ended.level),
            (Refused::WalkEnded, log::Level::Debug)
        );
        assert!(!ended.lead.contains("attempt refused"), "{}", ended.lead);
        let faults = [
            Refusal::ConfigMismatch {
                planned: None,
                running: 1,
            },
            Refusal::Unplanned { attempt: 4 },
            confirm(&config().providers[1], 2, b"c1", || None).expect_err("misrouted"),
        ];
        for fault in faults {
            let report = fault.report();
            assert_eq!(
                (report.record, report.level),
                (Refused::FailClosed, log::Level::Error),
                "{fault:?}"
            );
            // test_fail_closed.py counts this phrase in Envoy's log.
            assert!(report.lead.contains("attempt refused"), "{}", report.lead);
        }
    }

    #[test]
    fn a_plan_from_another_configuration_is_refused() {
        assert_eq!(check_config(Some(7), 7), Ok(()));
        let other = check_config(Some(7), 8).expect_err("drifted plan accepted");
        assert_eq!(other.code(), "config_mismatch");
        assert!(check_config(None, 8).is_err());
        let reply = other.reply();
        assert_eq!(reply.status, 502);
        assert!(
            reply.message.contains("0000000000000007"),
            "{}",
            reply.message
        );
    }

    #[test]
    fn both_roles_of_one_configuration_share_a_fingerprint() {
        use crate::config::fingerprint;
        let down = br#"{"role":"downstream","providers":[{"name":"p1"}],"chains":[]}"#;
        let up = br#"{"role":"upstream","providers":[{"name":"p1"}],"chains":[]}"#;
        assert_eq!(fingerprint(down), fingerprint(up));
        let reordered = br#"{"role":"upstream","chains":[],"providers":[{"name":"p1"}]}"#;
        assert_ne!(fingerprint(down), fingerprint(reordered));
        let changed = br#"{"role":"upstream","providers":[{"name":"p2"}],"chains":[]}"#;
        assert_ne!(fingerprint(down), fingerprint(changed));
        assert_eq!(
            config().fingerprint,
            fingerprint(
                br#"{"role":"downstream",
            "providers":[{"name":"p1","cluster":"c1"},{"name":"p2","cluster":"c2"}],
            "chains":[{"name":"main","providers":["p1","p2"]}]}"#
            )
        );
    }
}
