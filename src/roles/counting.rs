//! What the answer the caller got cost (docs/behaviour.md section 15), counted: the upstream
//! role's few calls into `usage::Reader`, [`Metrics::count_tokens`] and the attempt log. An
//! attempt whose answer goes to the caller (class `ok`, not marked for a retry) gets a
//! [`Counting`] when it settles; the role hands it the provider's bytes as they pass (in the
//! provider's own dialect: before any translation, after a Bedrock event stream is unwrapped)
//! and [`Counting::finish`]es it when the last chunk has passed.
//!
//! Cheap by design (the success path's instructions, BENCHMARKS.md): a JSON answer is read
//! only at its end ([`usage::Reader::wanted`]: its last bytes, one `get_buffer_bytes` per
//! chunk), a stream through the read its end watch makes anyway; the counters are added by
//! the root's tick ([`Metrics::count_tokens`]), and the attempt log, held from the settle, is
//! written once, with the tokens, instead of twice.
//!
//! Where the other parts of issue 30 plug in: [`Counting::finish`] is the one place a served
//! answer's `usage::Usage` is known, with its provider (`Metrics::token_slot` holds the provider
//! and model label); budgets spend from there, and the attempt log entry it writes carries
//! `in=/out=/cached=` for whatever reads the access log's attempts.

use super::{Host, Map, Metrics};
use crate::attempt_log;
use crate::usage;
use crate::wire;

/// A served answer's usage being read, and the attempt log its entry joins.
pub struct Counting {
    reader: usage::Reader,
    /// The attempt log with this attempt's entry, not written yet: written once, with the
    /// tokens, when the answer ends ([`Counting::finish`]), or as it is when it does not
    /// ([`Counting::abandon`]).
    log: String,
    /// Its `Metrics::token_slot` (provider and model label).
    slot: usize,
    /// The answer is an event stream (else one JSON document).
    stream: bool,
}

impl Counting {
    pub fn new(dialect: usage::Dialect, stream: bool, log: String, slot: usize) -> Counting {
        Counting {
            reader: usage::Reader::new(dialect, stream),
            log,
            slot,
            stream,
        }
    }

    /// Reads what the reader wants of the `size` bytes in the response buffer, which pass on
    /// untranslated; returns them when that is all of them (for the stream's end watch).
    pub fn read_buffer(&mut self, host: &impl Host, size: usize) -> Option<Vec<u8>> {
        if size == 0 {
            return None;
        }
        let from = self.reader.wanted(size);
        if from > 0 {
            self.reader.skip();
        }
        let bytes = host.body_range(Map::Response, from, size - from)?;
        if !self.stream {
            self.reader.push_owned(bytes);
            return None;
        }
        self.reader.push(&bytes);
        (from == 0).then_some(bytes)
    }

    /// The provider's next bytes, read already.
    pub fn push(&mut self, bytes: &[u8]) {
        self.reader.push(bytes);
    }

    /// The answer's last byte passed: counts its usage and writes the attempt log with it.
    #[inline(never)]
    pub fn finish(mut self, host: &impl Host, metrics: &Metrics) {
        if let Some(usage) = self.reader.finish() {
            metrics.count_tokens(self.slot, &usage);
            attempt_log::push_usage(&mut self.log, &usage);
        }
        self.abandon(host);
    }

    /// The attempt ended without its answer's end: its log entry as it is, no tokens.
    pub fn abandon(self, host: &impl Host) {
        host.set_property(wire::ATTEMPTS_PROPERTY, self.log.as_bytes());
    }
}
