//! Rate limits a provider announces on its answers (docs/behaviour.md section 4): a provider
//! whose answer says nothing remains (requests, or tokens below its `reserve_tokens`) is
//! skipped without an attempt (`rate_limited_ahead`) until the announced reset, capped at
//! `dead_marks.rate_limited_ahead` (default 60 s).
//!
//! Read from every attempt's answer that carries the headers (`ResponseHead::rate_limits`
//! says whether one does, from the one pass over the header map the upstream role makes
//! anyway): OpenAI and Azure OpenAI (and the servers that copy them: Groq, Together,
//! Fireworks) send `x-ratelimit-{remaining,reset}-{requests,tokens}` with resets as Go
//! durations (`6m0s`, `20ms`); Anthropic sends
//! `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}` with
//! resets as RFC 3339 times. Resets go through `retry_after::parse_rate_limit_reset`, the one
//! reset parser. A dimension counts only with both of its headers well formed: an absent,
//! malformed or negative value changes nothing, a reset in the past or of zero changes
//! nothing, and a reset further than the cap is the cap.
//!
//! State is per provider entry (each entry has one credential, so two entries with the same
//! endpoint and different keys are separate), in this Envoy's shared data like the breaker's:
//! every worker sees it, each replica has its own (a fleet store for budgets does not carry
//! it: announcements come back on every answer, so each replica learns them by itself). The
//! skip's end lives in the provider's health record (`health::Health::skip_ahead`), which
//! planning reads anyway: a provider that never announced costs planning nothing. What was
//! announced, for the status endpoint, is its own record:
//!
//! # Record (`llm_failover.ahead.<provider>`, 40 bytes, little-endian)
//! ```text
//! offset  size  field
//!      0     8  skipped until (ms since the epoch)
//!      8     8  when it was announced (ms since the epoch)
//!     16     8  requests remaining as announced (u64::MAX: not announced)
//!     24     8  tokens remaining as announced, the least of its token dimensions (u64::MAX: not announced)
//!     32     1  the dimension found spent (Dimension as u8)
//!     33     7  zero
//! ```
//! Written only by an answer that announces an empty dimension and moved the skip's end in the
//! health record (a compare-and-swap there: the later of two skips wins). No record is created
//! at configure time; only the status endpoint reads it.

use crate::host::SharedStore;
use crate::retry_after::parse_rate_limit_reset;
use crate::wire::with_key;

const KEY_PREFIX: &str = "llm_failover.ahead.";
const RECORD_LEN: usize = 40;
const NOT_ANNOUNCED: u64 = u64::MAX;

/// A rate-limit dimension providers announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Dimension {
    Requests = 0,
    Tokens = 1,
    InputTokens = 2,
    OutputTokens = 3,
}

impl Dimension {
    const ALL: [Dimension; 4] = [
        Dimension::Requests,
        Dimension::Tokens,
        Dimension::InputTokens,
        Dimension::OutputTokens,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Requests => "requests",
            Dimension::Tokens => "tokens",
            Dimension::InputTokens => "input_tokens",
            Dimension::OutputTokens => "output_tokens",
        }
    }

    fn from_u8(b: u8) -> Dimension {
        Dimension::ALL
            .get(usize::from(b))
            .copied()
            .unwrap_or(Dimension::Requests)
    }

    /// The dimension a header name's tail names (`requests`, `tokens`, `input-tokens`,
    /// `output-tokens`).
    fn of(tail: &[u8]) -> Option<Dimension> {
        Some(match tail {
            b"requests" => Dimension::Requests,
            b"tokens" => Dimension::Tokens,
            b"input-tokens" => Dimension::InputTokens,
            b"output-tokens" => Dimension::OutputTokens,
            _ => return None,
        })
    }
}

/// Whether a response header (name lowercase, as Envoy gives it) is one this module reads: the
/// cheap test the header pass makes on every answer.
#[inline]
pub fn is_rate_limit_header(name: &[u8]) -> bool {
    name.starts_with(b"x-ratelimit-") || name.starts_with(b"anthropic-ratelimit-")
}

/// What an answer announced, when it names a dimension as spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announced {
    /// Skipped until then (ms since the epoch), the cap applied.
    pub until_ms: u64,
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// Requests remaining, if announced.
    pub requests: Option<u64>,
    /// Tokens remaining (the least of the token dimensions announced), if announced.
    pub tokens: Option<u64>,
    /// The spent dimension whose reset is the latest.
    pub spent: Dimension,
}

/// Which header of a dimension a name is.
enum Part {
    Remaining,
    Reset,
}

/// Slots per header family (OpenAI's names at 0..4, Anthropic's at 4..8): a family's
/// remaining pairs only with its own reset.
const SLOTS: usize = 8;

/// The slot (family and dimension) and part a rate-limit header name says, for the OpenAI and
/// Anthropic names.
fn name_of(name: &[u8]) -> Option<(usize, Part)> {
    if let Some(rest) = name.strip_prefix(b"x-ratelimit-") {
        if let Some(tail) = rest.strip_prefix(b"remaining-") {
            return Some((Dimension::of(tail)? as usize, Part::Remaining));
        }
        let tail = rest.strip_prefix(b"reset-")?;
        return Some((Dimension::of(tail)? as usize, Part::Reset));
    }
    let rest = name.strip_prefix(b"anthropic-ratelimit-")?;
    if let Some(dim) = rest.strip_suffix(b"-remaining") {
        return Some((4 + Dimension::of(dim)? as usize, Part::Remaining));
    }
    let dim = rest.strip_suffix(b"-reset")?;
    Some((4 + Dimension::of(dim)? as usize, Part::Reset))
}

/// A `*-remaining-*` value: a whole number of 0 or more (spaces around allowed; a number too
/// large for 64 bits is plenty left). Negative, fractional or anything else: `None`.
fn remaining(value: &[u8]) -> Option<u64> {
    let v = value.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// What `headers` (one answer's, names lowercase) announce at `now_ms`: `Some` when a
/// dimension is spent (requests at 0; a token dimension at 0 or under `reserve_tokens`) and its
/// reset is a well-formed time after now; the skip ends at the latest such reset, at most
/// `cap_ms` from now. A cap of 0 turns skipping off.
pub fn read<'a>(
    headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    now_ms: u64,
    reserve_tokens: u64,
    cap_ms: u64,
) -> Option<Announced> {
    // Per family and dimension: remaining, and the reset as sent (read only for a spent
    // dimension: an answer with room left parses no time).
    let mut left: [Option<u64>; SLOTS] = [None; SLOTS];
    let mut reset: [Option<&[u8]>; SLOTS] = [None; SLOTS];
    for (name, value) in headers {
        let Some((i, part)) = name_of(name) else {
            continue;
        };
        match part {
            Part::Remaining => {
                if let Some(slot) = left.get_mut(i) {
                    *slot = remaining(value);
                }
            }
            Part::Reset => {
                if let Some(slot) = reset.get_mut(i) {
                    *slot = Some(value);
                }
            }
        }
    }
    let mut spent: Option<(Dimension, u64)> = None;
    for i in 0..SLOTS {
        let dim = Dimension::from_u8(u8::try_from(i % 4).unwrap_or_default());
        let (Some(Some(left)), Some(Some(reset))) = (left.get(i), reset.get(i)) else {
            continue;
        };
        let floor = if dim == Dimension::Requests {
            1
        } else {
            reserve_tokens.max(1)
        };
        if *left >= floor {
            continue;
        }
        let delay = std::str::from_utf8(reset)
            .ok()
            .and_then(|v| parse_rate_limit_reset(v, now_ms))
            .filter(|&d| d > 0);
        if let Some(delay) = delay.filter(|&d| spent.map_or(true, |(_, s)| d > s)) {
            spent = Some((dim, delay));
        }
    }
    let (dim, delay) = spent?;
    if cap_ms == 0 {
        return None;
    }
    let of = |requests: bool| {
        (left.iter().enumerate())
            .filter(|(i, _)| (i % 4 == Dimension::Requests as usize) == requests)
            .filter_map(|(_, v)| *v)
            .min()
    };
    Some(Announced {
        until_ms: now_ms.saturating_add(delay.min(cap_ms)),
        at_ms: now_ms,
        requests: of(true),
        tokens: of(false),
        spent: dim,
    })
}

fn get_u64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn decode(bytes: &[u8]) -> Option<Announced> {
    if bytes.len() != RECORD_LEN {
        return None;
    }
    let known = |v: u64| (v != NOT_ANNOUNCED).then_some(v);
    Some(Announced {
        until_ms: get_u64(bytes, 0),
        at_ms: get_u64(bytes, 8),
        requests: known(get_u64(bytes, 16)),
        tokens: known(get_u64(bytes, 24)),
        spent: Dimension::from_u8(bytes.get(32).copied().unwrap_or_default()),
    })
}

fn encode(a: &Announced) -> Vec<u8> {
    let mut b = Vec::with_capacity(RECORD_LEN);
    b.extend_from_slice(&a.until_ms.to_le_bytes());
    b.extend_from_slice(&a.at_ms.to_le_bytes());
    b.extend_from_slice(&a.requests.unwrap_or(NOT_ANNOUNCED).to_le_bytes());
    b.extend_from_slice(&a.tokens.unwrap_or(NOT_ANNOUNCED).to_le_bytes());
    b.push(a.spent as u8);
    b.extend_from_slice(&[0; 7]);
    b
}

/// Announcements in this Envoy's shared data.
pub struct SharedAnnouncements<'a> {
    pub store: &'a dyn SharedStore,
}

impl SharedAnnouncements<'_> {
    /// The last announcement that skipped `provider` (live or not), if any.
    pub fn last(&self, provider: &str) -> Option<Announced> {
        with_key(KEY_PREFIX, provider, |key| self.store.get(key))
            .and_then(|(bytes, _)| decode(&bytes))
    }

    /// Records an announcement that moved the provider's skip (`Health::skip_ahead` said it
    /// did: the later end already won there). A plain write, no compare-and-swap: two workers
    /// racing here both moved the skip, and either's announcement is a true one.
    pub fn note(&self, provider: &str, announced: &Announced) -> bool {
        let record = encode(announced);
        with_key(KEY_PREFIX, provider, |key| {
            self.store.set(key, &record, None).is_ok()
        })
    }
}

#[cfg(test)]
mod tests;
