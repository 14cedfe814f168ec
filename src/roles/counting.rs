//! What the answer the caller got cost (docs/behaviour.md section 15), counted: the upstream
//! role's few calls into [`Metrics::count_tokens`], the provider's budget and the attempt log.
//! An attempt whose answer goes to the caller (class `ok`, not marked for a retry) gets a
//! [`Counting`] when it settles, and its passage (`attempt::passage`) reads the usage from the
//! provider's own bytes as they pass (before any translation, after a Bedrock event stream is
//! unwrapped); when the last chunk has passed, [`Counting::finish`] takes what it read.
//!
//! Cheap by design (the success path's instructions, BENCHMARKS.md): a JSON answer is read
//! only at its end (`usage::Reader::wanted`: its last bytes, one `get_buffer_bytes` per
//! chunk), a stream through the read its end watch makes anyway; the counters are added by
//! the root's tick ([`Metrics::count_tokens`]), and the attempt log, held from the settle, is
//! written once, with the tokens, instead of twice.
//!
//! [`Counting::finish`] is the one place a served answer's `usage::Usage` is known, with its
//! provider and caller: it counts the tokens (`Metrics::token_slot` holds the provider, model
//! and caller labels), spends them from the provider's budget and the caller's
//! (`super::spend_budget`), and the attempt log entry it writes carries
//! `in=/out=/cached=` for whatever reads the access log's attempts.

use super::{Host, Metrics};
use crate::attempt_log;
use crate::config::{Config, Team};
use crate::ids::ProviderId;
use crate::usage;
use crate::wire;

/// A served answer being counted: the attempt log its entry joins, and where its tokens go.
pub struct Counting {
    /// How the provider reports the answer's usage (its passage reads it so).
    pub dialect: usage::Dialect,
    /// The attempt log with this attempt's entry, not written yet: written once, with the
    /// tokens, when the answer ends ([`Counting::finish`]), or as it is when it does not
    /// ([`Counting::abandon`]).
    log: String,
    /// Its `Metrics::token_slot` (provider and model label).
    slot: usize,
    provider: ProviderId,
    /// The request's caller (its budget is spent too).
    team: Team,
    /// A hedged request: where this attempt's entry starts in `log`. The losing attempt's
    /// entry may be added to the record meanwhile: written after it, not over it.
    merge_from: Option<usize>,
}

impl Counting {
    pub fn new(
        dialect: usage::Dialect,
        log: String,
        slot: usize,
        provider: ProviderId,
        team: Team,
    ) -> Self {
        Counting {
            dialect,
            log,
            slot,
            provider,
            team,
            merge_from: None,
        }
    }

    /// This attempt's entry starts at `own` in its log (a hedged request's, see `merge_from`).
    pub fn merge_from(&mut self, own: usize) {
        self.merge_from = Some(own);
    }

    /// Keeps what a settle returned in the attempt's `slot` (a settle that returns none, the
    /// second one, leaves the first one's); the dialect the passage reads the usage in, when
    /// this settle sends the answer to the caller. The one way both of the upstream role's
    /// settles keep it.
    pub fn keep(slot: &mut Option<Counting>, settled: Option<Counting>) -> Option<usage::Dialect> {
        let dialect = settled.as_ref().map(|c| c.dialect);
        if settled.is_some() {
            *slot = settled;
        }
        dialect
    }

    /// The answer's last byte passed with `usage` read from it: counts it, spends it from the
    /// provider's budget and the caller's and writes the attempt log with it.
    #[inline(never)]
    pub fn finish(
        mut self,
        host: &impl Host,
        config: &Config,
        metrics: &Metrics,
        usage: Option<usage::Usage>,
    ) {
        if let Some(usage) = usage {
            metrics.count_tokens(self.slot, &usage);
            if let Some(provider) = config.provider(self.provider) {
                super::spend_budget(host, provider, config.caller(self.team), &usage);
            }
            attempt_log::push_usage(&mut self.log, &usage);
            if config.log_models {
                log_tokens(host, &usage);
            }
        }
        self.abandon(host);
    }

    /// The attempt ended without its answer's end: its log entry as it is, no tokens.
    pub fn abandon(self, host: &impl Host) {
        let merged = self.merge_from.and_then(|own| {
            let now = host.property(wire::ATTEMPTS_PROPERTY.as_bytes())?;
            let mine = self.log.get(own..)?;
            merged_log(&now, self.log.get(..own)?.as_bytes(), mine)
        });
        let log = merged.as_deref().unwrap_or(&self.log);
        host.set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
    }
}

/// The attempt log written meanwhile (`now`), when it grew past what this attempt read
/// (`before`), with this attempt's entry (`mine`, led by a comma when `before` had entries)
/// after it; `None` when nothing was added.
fn merged_log(now: &[u8], before: &[u8], mine: &str) -> Option<String> {
    if now.len() <= before.len() || !now.starts_with(before) {
        return None;
    }
    let mut out = String::from_utf8(now.to_vec()).ok()?;
    out.push(',');
    out.push_str(mine.strip_prefix(',').unwrap_or(mine));
    Some(out)
}

/// The served answer's tokens for the OpenTelemetry access log (`log_models`, set by `render
/// --otel-collector`).
#[cold]
fn log_tokens(host: &impl Host, usage: &usage::Usage) {
    let input = usage.input.to_string();
    let output = usage.output.to_string();
    host.set_property(wire::INPUT_TOKENS_PROPERTY, input.as_bytes());
    host.set_property(wire::OUTPUT_TOKENS_PROPERTY, output.as_bytes());
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_losers_entry_written_meanwhile_stays_before_the_winners() {
        let merged = super::merged_log(
            b"a:skipped:dead,b:hedge_lost:9ms",
            b"a:skipped:dead",
            ",c:ok:5ms",
        );
        assert_eq!(
            merged.as_deref(),
            Some("a:skipped:dead,b:hedge_lost:9ms,c:ok:5ms")
        );
        let first = super::merged_log(b"b:hedge_lost:9ms", b"", "c:ok:5ms:in=1/out=2/cached=0");
        assert_eq!(
            first.as_deref(),
            Some("b:hedge_lost:9ms,c:ok:5ms:in=1/out=2/cached=0")
        );
        assert_eq!(super::merged_log(b"a", b"a", ",c:ok:5ms"), None);
    }
}
