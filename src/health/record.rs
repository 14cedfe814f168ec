//! The health record as stored in shared data: a zero-copy view for reads, an owned form for
//! updates.
//!
//! # Layout (version 3, little-endian, no padding)
//! ```text
//! offset  size  field
//!      0     1  version = 3 (any other value: the record is read as fresh and healthy)
//!      1     1  last failure class (Class as u8), 0xFF = none
//!      2     1  M = number of model marks (0..=16)
//!      3     1  reserved, 0
//!      4     2  F = number of failure timestamps (u16, 0..=1000)
//!      6     2  reserved, 0
//!      8     8  open_until ms (0 = closed; <= now = half-open)
//!     16     8  probe_until ms (0 = no probe claim; <= now = the claim expired)
//!     24     8  last failure time ms (meaningful when the class byte is not 0xFF)
//!     32     8  provider dead until ms (0 = none; a setup_fault mark)
//!     40     8  rate-limited ahead until ms (0 = none; an answer announced its rate limit
//!               spent: `crate::announced`)
//!     48   8*F  failure timestamps ms, ascending
//!      …        M model marks, each: until ms (8), class (1), name length N (1, 1..=255),
//!               N bytes of UTF-8 model name
//!      …   188  the tally (`super::tally`): last answer ms (8), then 15 buckets of minute,
//!               attempts, failed (u32 each; minute m at index m % 15)
//! ```
//! The record must end exactly after the tally. Anything that does not parse (short, too
//! long, wrong version, bad class byte, bad UTF-8, counts over the caps) reads as a fresh,
//! healthy record, and the next update overwrites it. A 10-failure record with no marks is
//! 316 bytes. (Version 1 had no tally, version 2 no rate-limited-ahead time: a record left by
//! an older module reads as fresh, once.)

use super::tally::{Bucket, Tally, TALLY_LEN};
use crate::classify::Class;

/// Encoding version (first byte of every record).
pub const RECORD_VERSION: u8 = 3;
/// Most failure timestamps a record holds (the config cap on `breaker.failures`).
pub const MAX_FAILURES: usize = 1000;
/// Most model dead marks a record holds.
pub const MAX_MODEL_MARKS: usize = 16;
/// Longest model name (bytes) that can be marked dead.
pub const MAX_MODEL_NAME: usize = 255;

pub(super) const HEADER_LEN: usize = 48;
pub(super) const NO_CLASS: u8 = 0xFF;
pub(super) const OFF_OPEN_UNTIL: usize = 8;
pub(super) const OFF_PROBE_UNTIL: usize = 16;
pub(super) const OFF_LAST_FAILURE: usize = 24;
pub(super) const OFF_PROVIDER_DEAD: usize = 32;
pub(super) const OFF_AHEAD_UNTIL: usize = 40;

pub(super) fn get_u64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, u32::from_le_bytes)
}

pub(super) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    if let Some(s) = b.get_mut(off..off + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

pub(super) struct MarkRef<'a> {
    pub(super) model: &'a str,
    pub(super) until: u64,
    pub(super) class: Class,
}

/// A validated record, borrowed from the bytes read.
#[derive(Default)]
pub(super) struct View<'a> {
    pub(super) last_failure: Option<(Class, u64)>,
    pub(super) open_until: u64,
    pub(super) probe_until: u64,
    pub(super) provider_dead_until: u64,
    pub(super) ahead_until: u64,
    pub(super) failures: &'a [u8],
    pub(super) marks: &'a [u8],
    /// The tally's [`TALLY_LEN`] bytes.
    pub(super) tally: &'a [u8],
}

impl<'a> View<'a> {
    /// Validates the whole layout; `None` for anything malformed.
    pub(super) fn parse(b: &'a [u8]) -> Option<View<'a>> {
        let header = b.get(..HEADER_LEN)?;
        let byte = |i: usize| header.get(i).copied().unwrap_or_default();
        if byte(0) != RECORD_VERSION {
            return None;
        }
        let n_models = usize::from(byte(2));
        let n_failures = usize::from(u16::from_le_bytes([byte(4), byte(5)]));
        if n_models > MAX_MODEL_MARKS || n_failures > MAX_FAILURES {
            return None;
        }
        let last_failure = match byte(1) {
            NO_CLASS => None,
            c => Some((Class::from_u8(c)?, get_u64(header, OFF_LAST_FAILURE))),
        };
        let failures_end = HEADER_LEN + 8 * n_failures;
        let tally_start = b.len().checked_sub(TALLY_LEN)?;
        let view = View {
            last_failure,
            open_until: get_u64(header, OFF_OPEN_UNTIL),
            probe_until: get_u64(header, OFF_PROBE_UNTIL),
            provider_dead_until: get_u64(header, OFF_PROVIDER_DEAD),
            ahead_until: get_u64(header, OFF_AHEAD_UNTIL),
            failures: b.get(HEADER_LEN..failures_end)?,
            marks: b.get(failures_end..tally_start)?,
            tally: b.get(tally_start..)?,
        };
        // Every mark must parse and the tally must start right after the last one.
        let mut rest = view.marks;
        for _ in 0..n_models {
            let (_, after) = next_mark(rest)?;
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
        Some(view)
    }

    pub(super) fn failures(&self) -> impl Iterator<Item = u64> + 'a {
        self.failures.chunks_exact(8).map(|c| get_u64(c, 0))
    }

    pub(super) fn marks(&self) -> MarkIter<'a> {
        MarkIter { rest: self.marks }
    }

    /// The tally (all zero for a view of nothing).
    pub(super) fn tally(&self) -> Tally {
        let mut tally = Tally {
            last_answer: get_u64(self.tally, 0),
            ..Tally::default()
        };
        for (i, b) in tally.buckets.iter_mut().enumerate() {
            let off = 8 + 12 * i;
            *b = Bucket {
                minute: get_u32(self.tally, off),
                attempts: get_u32(self.tally, off + 4),
                failed: get_u32(self.tally, off + 8),
            };
        }
        tally
    }
}

pub(super) fn next_mark(b: &[u8]) -> Option<(MarkRef<'_>, &[u8])> {
    let until = get_u64(b.get(..8)?, 0);
    let class = Class::from_u8(*b.get(8)?)?;
    let len = usize::from(*b.get(9)?);
    if len == 0 {
        return None;
    }
    let model = std::str::from_utf8(b.get(10..10 + len)?).ok()?;
    Some((
        MarkRef {
            model,
            until,
            class,
        },
        b.get(10 + len..)?,
    ))
}

pub(super) struct MarkIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for MarkIter<'a> {
    type Item = MarkRef<'a>;
    fn next(&mut self) -> Option<MarkRef<'a>> {
        let (mark, rest) = next_mark(self.rest)?;
        self.rest = rest;
        Some(mark)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ModelMark {
    pub(super) model: String,
    pub(super) until: u64,
    pub(super) class: Class,
}

/// The owned record that updates work on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Record {
    pub(super) last_failure: Option<(Class, u64)>,
    pub(super) open_until: u64,
    pub(super) probe_until: u64,
    pub(super) provider_dead_until: u64,
    /// Skipped until then: its rate limit was announced spent (0: never).
    pub(super) ahead_until: u64,
    /// Ascending.
    pub(super) failures: Vec<u64>,
    pub(super) models: Vec<ModelMark>,
    pub(super) tally: Tally,
}

impl Record {
    /// Garbage reads as a fresh record.
    pub(super) fn decode(b: &[u8]) -> Record {
        let Some(view) = View::parse(b) else {
            return Record::default();
        };
        let mut failures: Vec<u64> = view.failures().collect();
        if failures
            .iter()
            .zip(failures.iter().skip(1))
            .any(|(a, b)| a > b)
        {
            // Only a record this filter did not write is out of order. An insertion sort: the
            // list is short (at most the breaker's window) and std's sort adds 3 KB to the module.
            for i in 1..failures.len() {
                let mut j = i;
                while j > 0 && failures.get(j - 1) > failures.get(j) {
                    failures.swap(j - 1, j);
                    j -= 1;
                }
            }
        }
        Record {
            last_failure: view.last_failure,
            open_until: view.open_until,
            probe_until: view.probe_until,
            provider_dead_until: view.provider_dead_until,
            ahead_until: view.ahead_until,
            failures,
            models: view
                .marks()
                .map(|m| ModelMark {
                    model: m.model.to_string(),
                    until: m.until,
                    class: m.class,
                })
                .collect(),
            tally: view.tally(),
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let failures = self
            .failures
            .get(self.failures.len().saturating_sub(MAX_FAILURES)..)
            .unwrap_or_default();
        let models: Vec<&ModelMark> = self
            .models
            .iter()
            .filter(|m| !m.model.is_empty() && m.model.len() <= MAX_MODEL_NAME)
            .take(MAX_MODEL_MARKS)
            .collect();
        let marks_len: usize = models.iter().map(|m| 10 + m.model.len()).sum();
        let mut b = Vec::with_capacity(HEADER_LEN + 8 * failures.len() + marks_len + TALLY_LEN);
        b.push(RECORD_VERSION);
        b.push(self.last_failure.map_or(NO_CLASS, |(c, _)| c as u8));
        b.push(u8::try_from(models.len()).unwrap_or(0));
        b.push(0);
        b.extend_from_slice(&u16::try_from(failures.len()).unwrap_or(0).to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.open_until.to_le_bytes());
        b.extend_from_slice(&self.probe_until.to_le_bytes());
        b.extend_from_slice(&self.last_failure.map_or(0, |(_, t)| t).to_le_bytes());
        b.extend_from_slice(&self.provider_dead_until.to_le_bytes());
        b.extend_from_slice(&self.ahead_until.to_le_bytes());
        for t in failures {
            b.extend_from_slice(&t.to_le_bytes());
        }
        for m in models {
            b.extend_from_slice(&m.until.to_le_bytes());
            b.push(m.class as u8);
            b.push(u8::try_from(m.model.len()).unwrap_or(0));
            b.extend_from_slice(m.model.as_bytes());
        }
        b.extend_from_slice(&self.tally.last_answer.to_le_bytes());
        for bucket in &self.tally.buckets {
            for v in [bucket.minute, bucket.attempts, bucket.failed] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b
    }
}
