//! Tokens per provider over the last 15 minutes, in shared data (docs/behaviour.md section 15):
//! what the status endpoint shows. One record per provider (`llm_failover.tokens.<provider>`),
//! apart from its health record so that planning, which reads health, never copies it. Each
//! worker adds what it counted once a tick (`roles::Metrics::flush_answers`, about a second),
//! one compare-and-swap per provider that served tokens (`health::update_key`, the breaker's
//! loop), so counts from every worker add up exactly and an answer writes nothing.
//!
//! # Layout (version 1, little-endian)
//! ```text
//! offset  size  field
//!      0     8  version = 1 (anything else reads as an empty record)
//!      8   480  15 buckets of minute, input, output, cached input (u64 each); minute m at
//!               index m % 15
//! ```

use crate::health::{update_key, Step, BUCKETS, BUCKET_MS};
use crate::host::{Clock, SharedStore};
use crate::usage::Usage;

const VERSION: u8 = 1;
const HEADER_LEN: usize = 8;
const BUCKET_LEN: usize = 32;
pub const RECORD_LEN: usize = HEADER_LEN + BUCKETS * BUCKET_LEN;

/// The shared-data key of a provider's token record.
pub fn key(provider: &str) -> String {
    let mut key = String::from("llm_failover.tokens.");
    key.push_str(provider);
    key
}

/// A provider's token record: its stored bytes, read and changed in place (always
/// [`RECORD_LEN`] long).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record(Vec<u8>);

impl Default for Record {
    fn default() -> Record {
        let mut b = vec![0; RECORD_LEN];
        if let Some(v) = b.first_mut() {
            *v = VERSION;
        }
        Record(b)
    }
}

impl Record {
    /// Reads a stored record; anything malformed reads as empty (the next write replaces it).
    pub fn decode(b: &[u8]) -> Record {
        if b.len() != RECORD_LEN || b.first() != Some(&VERSION) {
            return Record::default();
        }
        Record(b.to_vec())
    }

    fn get(&self, off: usize) -> u64 {
        self.0
            .get(off..off + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, u64::from_le_bytes)
    }

    fn put(&mut self, off: usize, v: u64) {
        if let Some(s) = self.0.get_mut(off..off + 8) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Where the bucket of `minute` starts.
    fn at(minute: u64) -> usize {
        HEADER_LEN + (minute % BUCKETS as u64) as usize * BUCKET_LEN
    }

    /// Adds `usage` to the bucket of `minute` (a bucket holding an older minute starts over;
    /// one holding a later minute is left alone).
    pub fn add(&mut self, minute: u64, usage: &Usage) {
        let at = Record::at(minute);
        let held = self.get(at);
        if held > minute {
            return;
        }
        if held < minute {
            self.put(at, minute);
            for k in 1..4 {
                self.put(at + 8 * k, 0);
            }
        }
        for (k, (_, v)) in usage.kinds().into_iter().enumerate() {
            let off = at + 8 * (k + 1);
            self.put(off, self.get(off).saturating_add(v));
        }
    }

    /// The usage of the 15 minutes ending at `now_ms` (the current minute and the 14 before).
    pub fn recent(&self, now_ms: u64) -> Usage {
        let current = now_ms / BUCKET_MS;
        let first = current.saturating_sub(BUCKETS as u64 - 1);
        let mut sum = Usage::default();
        for i in 0..BUCKETS {
            let at = HEADER_LEN + i * BUCKET_LEN;
            let minute = self.get(at);
            if minute >= first && minute <= current {
                sum.add(&Usage {
                    input: self.get(at + 8),
                    output: self.get(at + 16),
                    cached_input: self.get(at + 24),
                });
            }
        }
        sum
    }
}

/// The providers' token records in shared data.
pub struct SharedTokens<'a> {
    pub store: &'a dyn SharedStore,
    pub clock: &'a dyn Clock,
}

impl SharedTokens<'_> {
    /// A provider's record (empty when never written).
    pub fn read(&self, provider: &str) -> Record {
        self.store
            .get(&key(provider))
            .map_or_else(Record::default, |(b, _)| Record::decode(&b))
    }

    /// Adds `usage` to the provider's current minute; false when the store refused.
    #[inline(never)]
    pub fn add(&self, provider: &str, usage: &Usage) -> bool {
        let written = update_key(self.store, self.clock, &key(provider), |bytes, now| {
            let mut record = bytes.map_or_else(Record::default, |b| Record::decode(&b));
            record.add(now / BUCKET_MS, usage);
            Step::Write(record.0, true)
        });
        written.unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{ManualClock, MemoryStore};

    const M: u64 = BUCKET_MS;

    fn usage(input: u64, output: u64, cached_input: u64) -> Usage {
        Usage {
            input,
            output,
            cached_input,
        }
    }

    #[test]
    fn the_record_holds_fifteen_minutes_and_garbage_reads_empty() {
        let store = MemoryStore::default();
        let clock = ManualClock::at(10 * M);
        let t = SharedTokens {
            store: &store,
            clock: &clock,
        };
        assert!(t.add("a", &usage(5, 1, 0)));
        clock.advance(10 * M);
        assert!(t.add("a", &usage(7, 2, 1)));
        clock.advance(4 * M);
        assert!(t.add("a", &usage(1, 1, 1)));
        assert!(t.add("a", &usage(1, 1, 1)));
        assert_eq!(t.read("a").recent(24 * M + 5), usage(14, 5, 3));
        assert_eq!(t.read("a").recent(25 * M + 5), usage(9, 4, 3));
        assert_eq!(t.read("a").recent(50 * M), Usage::default());
        assert_eq!(t.read("b").recent(24 * M), Usage::default());
        let (bytes, _) = store.get(&key("a")).unwrap();
        assert_eq!(Record::decode(&bytes).recent(24 * M), usage(14, 5, 3));
        assert_eq!(Record::decode(&bytes[1..]), Record::default());
    }
}
