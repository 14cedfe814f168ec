//! Hedged first tokens (docs/behaviour.md section 5, "Hedging"): a chain's `hedge_after` makes a
//! plan of two slots a race. Envoy carries it (docs/internals.md, hedging): the downstream role
//! sends attempt 1 to the pair's composite cluster with the per-try timeout set to
//! `hedge_after` and Envoy's hedge on, so a first attempt with no output by then gets attempt 2
//! beside it, on slot 2's provider; the first to let an answer go wins and Envoy resets the
//! other. What each attempt of such a race counts as is decided here.

use crate::health::{update_key, Step};
use crate::host::{Clock, SharedStore};

/// How an attempt of a race ended, for `llm_failover_hedges_total{provider, outcome}`, the
/// status endpoint and the attempt log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its answer went to the caller.
    Won,
    /// The other attempt's answer went to the caller first: Envoy reset this one. Neither a
    /// success nor a failure for its provider's breaker.
    Lost,
    /// It failed while the other ran (counted for its breaker as any failure).
    Failed,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Won, Outcome::Lost, Outcome::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Won => "won",
            Outcome::Lost => "lost",
            Outcome::Failed => "failed",
        }
    }

    /// The attempt log's outcome for a lost attempt (`primary:hedge_lost:512ms`).
    pub const LOST_LOG: &'static str = "hedge_lost";
}

/// Whether a settled attempt's answer goes to the caller: it has response headers and no
/// retry marker (`marked`: a marked answer Envoy drops while the other attempt runs).
pub fn answers(status: Option<u16>, marked: bool) -> bool {
    status.is_some() && !marked
}

/// A settled attempt's outcome in a race.
pub fn settled_outcome(answers: bool) -> Outcome {
    if answers {
        Outcome::Won
    } else {
        Outcome::Failed
    }
}

/// Whether attempt `number`, ended without an answer, lost the race: the request's answer is
/// another attempt's (`answered`, from `handoff::ANSWERED`).
pub fn lost(number: usize, answered: Option<usize>) -> bool {
    answered.is_some_and(|n| n != number)
}

/// Reads `handoff::ANSWERED`'s value.
pub fn parse_answered(bytes: &[u8]) -> Option<usize> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Attempt 2 of a hedged request is a hedge (the first still runs) when attempt 1 has no
/// recorded outcome yet: a failed attempt 1 records its class before Envoy retries.
pub fn is_hedge(number: usize, first_recorded: bool) -> bool {
    number == 2 && !first_recorded
}

/// The shared-data key of a provider's race counts (`llm_failover.hedges.<provider>`): won,
/// lost and failed since the Envoy started, 8 bytes each (little-endian), for the status
/// endpoint. Written only by racing attempts, one compare-and-swap each.
pub fn key(provider: &str) -> String {
    let mut key = String::from("llm_failover.hedges.");
    key.push_str(provider);
    key
}

const RECORD_LEN: usize = 8 * Outcome::ALL.len();

/// A provider's race counts as stored (`[won, lost, failed]`; malformed reads as none).
pub fn decode(bytes: &[u8]) -> [u64; 3] {
    let mut out = [0; 3];
    if bytes.len() == RECORD_LEN {
        for (n, chunk) in out.iter_mut().zip(bytes.chunks_exact(8)) {
            *n = <[u8; 8]>::try_from(chunk).map_or(0, u64::from_le_bytes);
        }
    }
    out
}

/// Adds one `outcome` to `provider`'s race counts.
pub fn count(store: &dyn SharedStore, clock: &dyn Clock, provider: &str, outcome: Outcome) {
    let at = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
    update_key(store, clock, &key(provider), |bytes, _| {
        let mut counts = bytes.map_or([0; 3], |b| decode(&b));
        if let Some(n) = counts.get_mut(at) {
            *n = n.saturating_add(1);
        }
        Step::Write(counts.iter().flat_map(|n| n.to_le_bytes()).collect(), ())
    });
}

/// `provider`'s race counts (`[won, lost, failed]`).
pub fn read(store: &dyn SharedStore, provider: &str) -> [u64; 3] {
    store
        .get(&key(provider))
        .map_or([0; 3], |(b, _)| decode(&b))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn race_counts_add_up_per_provider() {
        let store = crate::host::MemoryStore::default();
        let clock = crate::host::ManualClock::at(0);
        count(&store, &clock, "a", Outcome::Won);
        count(&store, &clock, "a", Outcome::Won);
        count(&store, &clock, "a", Outcome::Lost);
        count(&store, &clock, "b", Outcome::Failed);
        assert_eq!(read(&store, "a"), [2, 1, 0]);
        assert_eq!(read(&store, "b"), [0, 0, 1]);
        assert_eq!(read(&store, "c"), [0, 0, 0]);
        assert_eq!(decode(b"short"), [0, 0, 0]);
    }

    #[test]
    fn an_answer_wins_a_marked_or_missing_one_fails() {
        assert_eq!(settled_outcome(answers(Some(200), false)), Outcome::Won);
        assert_eq!(settled_outcome(answers(Some(200), false)), Outcome::Won);
        // A final error answer goes to the caller too: it won the race.
        assert_eq!(settled_outcome(answers(Some(400), false)), Outcome::Won);
        assert_eq!(settled_outcome(answers(Some(503), true)), Outcome::Failed);
        assert_eq!(settled_outcome(answers(None, false)), Outcome::Failed);
    }

    #[test]
    fn only_another_attempts_answer_makes_a_loser() {
        assert!(lost(1, Some(2)));
        assert!(lost(2, Some(1)));
        assert!(!lost(2, Some(2)));
        assert!(!lost(1, None));
        assert_eq!(parse_answered(b"2"), Some(2));
        assert_eq!(parse_answered(b"x"), None);
    }

    #[test]
    fn attempt_two_is_a_hedge_only_while_the_first_has_no_outcome() {
        assert!(is_hedge(2, false));
        assert!(!is_hedge(2, true));
        assert!(!is_hedge(1, false));
    }

    #[test]
    fn outcome_names_are_the_metric_labels() {
        let names: Vec<_> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(names, ["won", "lost", "failed"]);
    }
}
