//! Every record the two roles hand each other through Envoy filter state, with its filter-state
//! name: typed, versioned, and cheap to write and read on the per-request path.
//!
//! - [`PLAN`]: the downstream role's plan, read by every attempt's upstream role
//!   ([`PlanRecord`] writes it, [`PlanText`] reads it).
//! - [`OUTCOMES`]: the class of each failed attempt, written by the upstream roles and read by
//!   the downstream role for `x-llm-fallback-reason` and to tell an exhausted chain
//!   ([`Outcomes`]). Successes are not written: nothing reads them back, and the success path
//!   stays one property write shorter.
//! - [`FORWARD`]: the caller headers that only some providers take (`config::forward::encode_kept`,
//!   header-map layout), written by the downstream role when the providers' `forward_headers`
//!   differ; each attempt puts back its provider's share (`config::forward::HeaderPolicy`).
//! - [`REFUSED`]: the upstream role refused to start an attempt ([`Refused`]): the answer is the
//!   gateway's own and that attempt reached no provider.
//!
//! The attempt log (`wire::ATTEMPTS_PROPERTY`) is output only: access logs print it, no role
//! reads it back for a decision.

use crate::classify::Class;
use crate::config::{Team, MAX_CHAIN_LEN};
use crate::ids::{ChainId, EntryId};
use crate::plan::Slot;
use crate::translate::Api;
use std::ops::Range;

/// Filter-state name of the plan (`wasm.llm_failover.plan` in Envoy).
pub const PLAN: &str = "llm_failover.plan";
/// Filter-state name of the failed attempts' classes.
pub const OUTCOMES: &str = "llm_failover.outcomes";

/// Filter-state name of the caller headers only some providers take.
pub const FORWARD: &str = "llm_failover.forward";
/// Filter-state name of an attempt's refusal.
pub const REFUSED: &str = "llm_failover.refused";
/// When an in-place retry may be sent (milliseconds on the host's clock, decimal): written by
/// the failed attempt, read by its retry (behaviour.md 5).
pub const RETRY_AT: &str = "llm_failover.retry_at";

/// A hedged request (docs/behaviour.md 5, hedging): its second attempt started while the first
/// ran (written by the second attempt, "1"), so both are in a race.
pub const HEDGED: &str = "llm_failover.hedged";
/// A hedged request: the attempt whose answer goes to the caller (its number, decimal),
/// written by that attempt as it lets the answer go; the other attempt, reset by Envoy, lost.
pub const ANSWERED: &str = "llm_failover.answered";

/// Version of the plan record's text format (its first line).
pub const PLAN_VERSION: &str = "1";
/// Version of the outcomes record (its first byte).
pub const OUTCOMES_VERSION: u8 = 1;

// ---------------------------------------------------------------------------------------------
// The plan, one line per field:
//   version, configuration fingerprint (16 hex digits), chain index (followed by "/o" for a
//   caller the file does not name, "/<i>" for its i-th named caller, nothing without one:
//   `config::Team`; a file that names no callers writes nothing), request start (ms), body
//   length, flags (one hex digit: 1 = attempt log started, 2 = the caller asked for a stream,
//   4 = an OpenAI Chat caller, 8 = an Anthropic Messages caller, added; the caller's API is
//   written only when some entry of the chain speaks another API, so a same-API plan is
//   byte-for-byte what it was before translation existed), slots
//   ("entry[p][q]" comma separated, p = pristine, q = probe), alternative lists (empty, or
//   "limit;context_window entries;content_policy entries" with entries comma separated),
//   original :path, original :authority, requested model.
// Newlines cannot occur in header values, and the planner refuses models containing them.

/// What each attempt needs to know about its request, as the downstream role writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanRecord<'a> {
    /// Fingerprint of the configuration the plan was made under.
    pub config: u64,
    pub chain: ChainId,
    /// The request's caller, as budgets and the token metric tell callers apart.
    pub team: Team,
    pub start_ms: u64,
    pub body_len: u64,
    /// Planning already wrote skips to the attempt log: the first attempt must append to it
    /// rather than start it (saves a read on the common path).
    pub log_started: bool,
    /// The caller asked for a stream (`"stream": true`): a `200` may be an SSE answer whose
    /// first event must be read before it is released.
    pub stream: bool,
    /// The caller's API, when an attempt may be translated (behaviour.md 13); `None` otherwise.
    pub caller_api: Option<Api>,
    /// The caller did not ask for a stream, but under a first-token timeout each attempt is
    /// streamed from the provider (`stream` is set too) and its answer gathered into one JSON
    /// answer (docs/behaviour.md section 5).
    pub gather: bool,
    /// An OpenAI Chat stream whose caller did not ask for its usage: a same-API attempt asks
    /// for it and takes the usage chunk out of the caller's stream (docs/behaviour.md 15).
    pub ask_usage: bool,
    /// The caller's body has a top-level `stream_options` member: the usage ask is merged
    /// into it; without one, it is written as the body's first member (`entry_settings`).
    pub stream_options: bool,
    pub slots: &'a [Slot],
    /// Attempts Envoy may make (`Plan::attempt_limit`); 0 means `slots.len()`.
    pub limit: u8,
    /// Candidates of the chain's alternative lists (`Plan::context_window`).
    pub context_window: &'a [EntryId],
    pub content_policy: &'a [EntryId],
    pub path: &'a str,
    pub authority: &'a str,
    pub model: &'a str,
}

const CHAT_CALLER: u8 = 4;
const GATHER: u8 = 16;
const MESSAGES_CALLER: u8 = 8;
/// Both bits: a Responses caller.
const RESPONSES_CALLER: u8 = CHAT_CALLER | MESSAGES_CALLER;
/// A Gemini native caller.
const GEMINI_CALLER: u8 = 32;
const ASK_USAGE: u8 = 64;
const STREAM_OPTIONS: u8 = 128;

fn api_flag(api: Option<Api>) -> u8 {
    match api {
        None => 0,
        Some(Api::OpenAiChat) => CHAT_CALLER,
        Some(Api::AnthropicMessages) => MESSAGES_CALLER,
        Some(Api::OpenAiResponses) => RESPONSES_CALLER,
        Some(Api::Gemini) => GEMINI_CALLER,
        // A provider dialect only: no caller's request is in it.
        Some(Api::Converse) => 0,
    }
}

fn push_entries(out: &mut String, entries: &[EntryId]) {
    for (i, e) in entries.iter().enumerate() {
        let before = if i > 0 { b',' } else { 0 };
        push_number(out, before, e.index() as u64, 10, 1);
    }
}

/// `text` after `out` (one call: the record's many pieces are not each a copy of
/// `push_str`'s code).
#[inline(never)]
fn push(out: &mut String, text: &str) {
    out.push_str(text);
}

/// A one-byte piece: stored, not copied (a copy of unknown length is a `memory.copy`).
#[inline(never)]
fn push_char(out: &mut String, c: char) {
    out.push(c);
}

/// `before` (an ASCII separator; 0: none) and `n` in base `radix` (10 or 16, lowercase), at
/// least `width` digits: as `{}` and `{:0width$x}` write it. The record is written on every
/// request: without the formatting machinery, each digit stored (no copy, no UTF-8 check).
#[inline(never)]
fn push_number(out: &mut String, before: u8, n: u64, radix: u64, width: usize) {
    if before != 0 {
        out.push(char::from(before));
    }
    // The value of the first digit's place (`place * radix` never passes `n`: no overflow).
    let (mut place, mut digits) = (1u64, 1usize);
    while place <= n / radix || digits < width {
        place *= radix;
        digits += 1;
    }
    loop {
        let digit = b"0123456789abcdef".get((n / place % radix) as usize);
        out.push(char::from(digit.copied().unwrap_or(b'0')));
        if place <= 1 {
            return;
        }
        place /= radix;
    }
}

impl PlanRecord<'_> {
    /// The record's flag byte (its sixth line, in hex).
    fn flags(&self) -> u8 {
        u8::from(self.log_started)
            | u8::from(self.stream) << 1
            | api_flag(self.caller_api)
            | if self.gather { GATHER } else { 0 }
            | if self.ask_usage { ASK_USAGE } else { 0 }
            | if self.stream_options {
                STREAM_OPTIONS
            } else {
                0
            }
    }

    /// The record's text: one allocation, sized up front.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(
            80 + 4 * self.slots.len() + self.path.len() + self.authority.len() + self.model.len(),
        );
        let flags = self.flags();
        push(&mut out, PLAN_VERSION);
        for (n, radix, width) in [(self.config, 16, 16), (self.chain.index() as u64, 10, 1)] {
            push_number(&mut out, b'\n', n, radix, width);
        }
        match self.team {
            Team::None => {}
            Team::Other => push(&mut out, "/o"),
            Team::Known(i) => push_number(&mut out, b'/', u64::from(i), 10, 1),
        }
        for (n, radix, width) in [
            (self.start_ms, 10, 1),
            (self.body_len, 10, 1),
            (u64::from(flags), 16, 1),
        ] {
            push_number(&mut out, b'\n', n, radix, width);
        }
        push_char(&mut out, '\n');
        for (i, s) in self.slots.iter().enumerate() {
            let before = if i > 0 { b',' } else { 0 };
            push_number(&mut out, before, s.entry.index() as u64, 10, 1);
            if s.pristine {
                push_char(&mut out, 'p');
            }
            if s.probe {
                push_char(&mut out, 'q');
            }
        }
        push_char(&mut out, '\n');
        if self.limit != 0 || !self.context_window.is_empty() || !self.content_policy.is_empty() {
            push_number(&mut out, 0, u64::from(self.limit), 10, 1);
            push_char(&mut out, ';');
            push_entries(&mut out, self.context_window);
            push_char(&mut out, ';');
            push_entries(&mut out, self.content_policy);
        }
        for field in [self.path, self.authority, self.model] {
            push_char(&mut out, '\n');
            push(&mut out, field);
        }
        out
    }
}

/// A plan record as read back: owns the text it was read from and hands out views of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanText {
    text: String,
    config: u64,
    chain: ChainId,
    team: Team,
    start_ms: u64,
    body_len: u64,
    log_started: bool,
    stream: bool,
    caller_api: Option<Api>,
    gather: bool,
    ask_usage: bool,
    stream_options: bool,
    limit: u8,
    /// Parsed once: every callback of the attempt reads them.
    slots: [Slot; MAX_CHAIN_LEN],
    slot_count: u8,
    context_window: Range<usize>,
    content_policy: Range<usize>,
    path: Range<usize>,
    authority: Range<usize>,
    model: Range<usize>,
}

/// The fields of a read plan, borrowed from its [`PlanText`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanView<'a> {
    pub config: u64,
    pub chain: ChainId,
    /// See [`PlanRecord::team`].
    pub team: Team,
    pub start_ms: u64,
    pub body_len: u64,
    pub log_started: bool,
    pub stream: bool,
    /// The caller's API when an attempt may be translated (see [`PlanRecord::caller_api`]).
    pub caller_api: Option<Api>,
    /// See [`PlanRecord::gather`].
    pub gather: bool,
    /// See [`PlanRecord::ask_usage`].
    pub ask_usage: bool,
    /// See [`PlanRecord::stream_options`].
    pub stream_options: bool,
    limit: u8,
    slots: &'a [Slot],
    context_window: &'a str,
    content_policy: &'a str,
    pub path: &'a str,
    pub authority: &'a str,
    pub model: &'a str,
}

const NO_SLOT: Slot = Slot {
    entry: EntryId::FIRST,
    pristine: false,
    probe: false,
};

fn parse_slot(item: &str) -> Option<Slot> {
    let digits = item.trim_end_matches(['p', 'q']);
    let flags = item.get(digits.len()..)?;
    Some(Slot {
        entry: EntryId::parse(digits)?,
        pristine: flags.contains('p'),
        probe: flags.contains('q'),
    })
}

impl PlanText {
    /// Reads a record written by [`PlanRecord::encode`] (this version only); `None` for
    /// anything else. Allocates nothing: the fields are ranges of `text`.
    pub fn decode(text: String) -> Option<PlanText> {
        let mut at = 0usize;
        let mut line = |last: bool| -> Option<Range<usize>> {
            let rest = text.get(at..)?;
            let len = if last {
                rest.len()
            } else {
                rest.bytes().position(|b| b == b'\n')?
            };
            let range = at..at + len;
            at += len + 1;
            Some(range)
        };
        let version = line(false)?;
        let config = line(false)?;
        let chain = line(false)?;
        let start = line(false)?;
        let body = line(false)?;
        let flags = line(false)?;
        let slots = line(false)?;
        let lists = line(false)?;
        let path = line(false)?;
        let authority = line(false)?;
        let model = line(true)?;
        let field = |r: &Range<usize>| text.get(r.clone());
        if field(&version)? != PLAN_VERSION {
            return None;
        }
        let flags: u8 = match field(&flags)? {
            f if f.len() <= 2 => u8::from_str_radix(f, 16).ok()?,
            _ => return None,
        };
        // (Every bit of the byte is a flag.)
        let caller_api = match flags & (CHAT_CALLER | MESSAGES_CALLER | GEMINI_CALLER) {
            0 => None,
            CHAT_CALLER => Some(Api::OpenAiChat),
            MESSAGES_CALLER => Some(Api::AnthropicMessages),
            RESPONSES_CALLER => Some(Api::OpenAiResponses),
            GEMINI_CALLER => Some(Api::Gemini),
            _ => return None,
        };
        // "limit;context_window;content_policy", each list's entries comma separated.
        let (limit, context_window, content_policy) = if lists.is_empty() {
            (0, lists.clone(), lists.clone())
        } else {
            let text = field(&lists)?;
            let first = text.find(';')?;
            let second = first + 1 + text.get(first + 1..)?.find(';')?;
            let limit = text.get(..first)?.parse().ok()?;
            let cw = lists.start + first + 1..lists.start + second;
            let cp = lists.start + second + 1..lists.end;
            for list in [&cw, &cp] {
                if !field(list)?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .all(|e| EntryId::parse(e).is_some())
                {
                    return None;
                }
            }
            (limit, cw, cp)
        };
        let mut parsed = [NO_SLOT; MAX_CHAIN_LEN];
        let mut slot_count = 0u8;
        for item in field(&slots)?.split(',').filter(|s| !s.is_empty()) {
            *parsed.get_mut(usize::from(slot_count))? = parse_slot(item)?;
            slot_count += 1;
        }
        let (chain, team) = match field(&chain)?.split_once('/') {
            None => (field(&chain)?, Team::None),
            Some((chain, "o")) => (chain, Team::Other),
            Some((chain, i)) => (chain, Team::Known(i.parse().ok()?)),
        };
        Some(PlanText {
            config: u64::from_str_radix(field(&config)?, 16).ok()?,
            chain: ChainId::parse(chain)?,
            team,
            start_ms: field(&start)?.parse().ok()?,
            body_len: field(&body)?.parse().ok()?,
            log_started: flags & 1 != 0,
            stream: flags & 2 != 0,
            caller_api,
            gather: flags & GATHER != 0,
            ask_usage: flags & ASK_USAGE != 0,
            stream_options: flags & STREAM_OPTIONS != 0,
            limit,
            slots: parsed,
            slot_count,
            context_window,
            content_policy,
            path,
            authority,
            model,
            text,
        })
    }

    pub fn view(&self) -> PlanView<'_> {
        let field = |r: &Range<usize>| self.text.get(r.clone()).unwrap_or_default();
        PlanView {
            config: self.config,
            chain: self.chain,
            team: self.team,
            start_ms: self.start_ms,
            body_len: self.body_len,
            log_started: self.log_started,
            stream: self.stream,
            caller_api: self.caller_api,
            gather: self.gather,
            ask_usage: self.ask_usage,
            stream_options: self.stream_options,
            limit: self.limit,
            slots: self
                .slots
                .get(..usize::from(self.slot_count))
                .unwrap_or_default(),
            context_window: field(&self.context_window),
            content_policy: field(&self.content_policy),
            path: field(&self.path),
            authority: field(&self.authority),
            model: field(&self.model),
        }
    }
}

impl<'a> PlanView<'a> {
    /// The planned slots, in attempt order.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + 'a {
        self.slots.iter().copied()
    }

    /// The planned slots, as a slice.
    pub fn slot_list(&self) -> &'a [Slot] {
        self.slots
    }

    /// The slot of attempt `attempt` (1-based, as Envoy counts).
    pub fn slot(&self, attempt: usize) -> Option<Slot> {
        self.slots.get(attempt.checked_sub(1)?).copied()
    }

    /// How many attempts were planned.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Attempts Envoy may make for this request.
    pub fn limit(&self) -> usize {
        if self.limit == 0 {
            self.len()
        } else {
            usize::from(self.limit)
        }
    }

    /// The candidates of the chain's alternative lists (context window, content policy).
    pub fn lists(&self) -> (Vec<EntryId>, Vec<EntryId>) {
        let entries = |text: &str| text.split(',').filter_map(EntryId::parse).collect();
        (entries(self.context_window), entries(self.content_policy))
    }
}

// ---------------------------------------------------------------------------------------------
// The outcomes: byte 0 the version, byte n the class of attempt n (`Class as u8`), 0xFF where
// nothing was recorded (a success, or an attempt whose filter never settled).

const NO_OUTCOME: u8 = 0xFF;

/// The failed attempts' classes, as the upstream roles record them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcomes<'a> {
    bytes: &'a [u8],
}

impl<'a> Outcomes<'a> {
    /// Reads the record; anything of another version reads as empty.
    pub fn new(bytes: &'a [u8]) -> Outcomes<'a> {
        let bytes = if bytes.first() == Some(&OUTCOMES_VERSION) {
            bytes
        } else {
            &[]
        };
        Outcomes { bytes }
    }

    /// The class recorded for attempt `attempt` (1-based), if any.
    pub fn of(&self, attempt: usize) -> Option<Class> {
        if attempt == 0 {
            return None;
        }
        self.bytes
            .get(attempt)
            .filter(|b| **b != NO_OUTCOME)
            .and_then(|b| Class::from_u8(*b))
    }

    /// The record with attempt `attempt`'s class set (earlier entries kept). `attempt` is at most
    /// `config::MAX_CHAIN_LEN` in practice; larger numbers are not recorded.
    pub fn with(&self, attempt: usize, class: Class) -> Vec<u8> {
        let mut out = Vec::with_capacity(attempt.max(self.bytes.len()) + 1);
        out.push(OUTCOMES_VERSION);
        out.extend_from_slice(self.bytes.get(1..).unwrap_or_default());
        if (1..=MAX_CHAIN_LEN).contains(&attempt) {
            if out.len() <= attempt {
                out.resize(attempt + 1, NO_OUTCOME);
            }
            if let Some(b) = out.get_mut(attempt) {
                *b = class as u8;
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// The refusal: version byte, then 0 (time budget) or 1 (fail closed).

/// Why the upstream role refused to start an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Less than `min_remaining` of the time budget was left (docs/behaviour.md section 5): the answer is
    /// the last attempt's failure.
    TotalTime,
    /// The attempt was not going where the plan put it, or the plan came from another
    /// configuration (docs/behaviour.md section 7): the answer is the gateway's `502`.
    FailClosed,
    /// Envoy retried by itself past a walk that had room for an alternative list it did not
    /// take (behaviour.md 3): the chain is exhausted, the answer is `503 fallbacks_exhausted`.
    WalkEnded,
}

const REFUSED_VERSION: u8 = 1;

impl Refused {
    pub fn encode(self) -> [u8; 2] {
        [REFUSED_VERSION, self as u8]
    }

    /// A present record that is not a budget refusal of this version reads as fail closed.
    pub fn decode(bytes: &[u8]) -> Refused {
        if bytes == Refused::TotalTime.encode() {
            Refused::TotalTime
        } else if bytes == Refused::WalkEnded.encode() {
            Refused::WalkEnded
        } else {
            Refused::FailClosed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(entry: u8, pristine: bool, probe: bool) -> Slot {
        Slot {
            entry: entry.into(),
            pristine,
            probe,
        }
    }

    #[test]
    fn plan_record_round_trips() {
        let slots = [
            slot(2, true, false),
            slot(0, false, true),
            slot(1, false, false),
        ];
        let record = PlanRecord {
            config: 0x0123_4567_89ab_cdef,
            chain: 3.into(),
            team: Default::default(),
            start_ms: 1_700_000_000_123,
            body_len: 5 * 1024 * 1024,
            log_started: true,
            stream: false,
            caller_api: None,
            gather: false,
            ask_usage: false,
            stream_options: false,
            slots: &slots,
            limit: 0,
            context_window: &[],
            content_policy: &[],
            path: "/v1/chat/completions?x=1",
            authority: "gateway.example:8080",
            model: "gpt-4o",
        };
        let text = PlanText::decode(record.encode()).expect("decodes");
        let view = text.view();
        assert_eq!(
            (
                view.config,
                view.chain.index(),
                view.start_ms,
                view.body_len
            ),
            (record.config, 3, record.start_ms, record.body_len)
        );
        assert!(view.log_started);
        assert_eq!(view.slots().collect::<Vec<_>>(), slots);
        assert_eq!(
            (view.path, view.authority, view.model),
            (record.path, record.authority, record.model)
        );
        assert_eq!(view.slot(1), Some(slots[0]));
        assert_eq!(view.slot(3), Some(slots[2]));
        assert_eq!(view.slot(4), None);
        assert_eq!(view.slot(0), None);
        assert_eq!(view.len(), 3);
        assert_eq!((view.limit(), view.stream), (3, false));
        assert_eq!(view.lists(), (vec![], vec![]));
        // The caller rides on the chain's line; without one the record is what it was.
        assert!(record
            .encode()
            .starts_with("1\n0123456789abcdef\n3\n1700000000123\n"));
        for (team, line) in [
            (Team::Other, "3/o"),
            (Team::Known(0), "3/0"),
            (Team::Known(254), "3/254"),
        ] {
            let text = PlanRecord { team, ..record }.encode();
            assert_eq!(text.lines().nth(2), Some(line));
            let read = PlanText::decode(text).expect("decodes");
            assert_eq!((read.view().team, read.view().chain.index()), (team, 3));
        }
        for bad in ["3/", "3/x", "3/256", "/1"] {
            let text = record.encode().replacen("\n3\n", &format!("\n{bad}\n"), 1);
            assert_eq!(PlanText::decode(text), None, "{bad}");
        }
        let with_lists = PlanRecord {
            stream: true,
            limit: 5,
            context_window: &[4.into(), 5.into()],
            content_policy: &[],
            ..record
        };
        let text = PlanText::decode(with_lists.encode()).expect("decodes");
        let view = text.view();
        assert_eq!(
            (view.limit(), view.stream, view.log_started),
            (5, true, true)
        );
        assert_eq!(view.lists(), (vec![4.into(), 5.into()], vec![]));
        assert_eq!(view.slots().collect::<Vec<_>>(), slots);
        assert_eq!(view.model, record.model);
        // An empty model, path or authority survives too.
        let bare = PlanRecord {
            model: "",
            path: "",
            authority: "",
            ..record
        };
        let bare = PlanText::decode(bare.encode()).expect("decodes");
        assert_eq!(bare.view().model, "");
    }

    #[test]
    fn the_plan_record_text_is_the_version_1_format_byte_for_byte() {
        // Typed ids (`ids.rs`) write the numbers they stand for: the format did not change.
        let slots = [
            slot(2, true, false),
            slot(0, false, true),
            slot(17, false, false),
        ];
        let record = PlanRecord {
            config: 0x0123_4567_89ab_cdef,
            chain: 255.into(),
            team: Default::default(),
            start_ms: 1_700_000_000_123,
            body_len: 42,
            log_started: true,
            stream: true,
            caller_api: None,
            gather: false,
            ask_usage: false,
            stream_options: false,
            slots: &slots,
            limit: 5,
            context_window: &[4.into(), 5.into()],
            content_policy: &[],
            path: "/v1/chat",
            authority: "gw",
            model: "m",
        };
        let text =
            "1\n0123456789abcdef\n255\n1700000000123\n42\n3\n2p,0q,17\n5;4,5;\n/v1/chat\ngw\nm";
        assert_eq!(record.encode(), text);
        let read = PlanText::decode(text.into()).expect("decodes");
        assert_eq!(read.view().chain, record.chain);
        assert_eq!(read.view().slot_list(), &slots);
        // Past one byte is not an id: refused, as the `u8` fields refused it.
        assert_eq!(PlanText::decode(text.replace("\n255\n", "\n256\n")), None);
        assert_eq!(PlanText::decode(text.replace("0q,17", "0q,256")), None);
        assert_eq!(PlanText::decode(text.replace("5;4,5;", "5;4,256;")), None);
    }

    /// The record is written as `write!` with the version 1 format wrote it, whatever its
    /// numbers (hex with leading zeros, the widest values, every flag byte).
    #[test]
    fn the_record_is_written_as_the_format_string_wrote_it() {
        let slots = [slot(0, false, false), slot(255, true, true)];
        for (config, start_ms, body_len) in [
            (0, 0, 0),
            (1, 9, 10),
            (0xf, 99, 100),
            (0x10, 1_700_000_000_123, 42),
            (0x0123_4567_89ab_cdef, u64::MAX / 10, u64::MAX),
            (u64::MAX, u64::MAX, 1),
        ] {
            for flags in 0..=255u8 {
                let record = PlanRecord {
                    config,
                    chain: 255.into(),
                    team: Default::default(),
                    start_ms,
                    body_len,
                    log_started: flags & 1 != 0,
                    stream: flags & 2 != 0,
                    caller_api: [
                        None,
                        Some(Api::OpenAiChat),
                        Some(Api::AnthropicMessages),
                        Some(Api::OpenAiResponses),
                        Some(Api::Gemini),
                    ][usize::from(flags >> 2) % 5],
                    gather: flags & 16 != 0,
                    ask_usage: flags & 64 != 0,
                    stream_options: flags & 128 != 0,
                    slots: &slots,
                    limit: flags,
                    context_window: if flags & 8 != 0 {
                        &[4.into(), 5.into()]
                    } else {
                        &[]
                    },
                    content_policy: &[7.into()],
                    path: "/v1/chat",
                    authority: "gw",
                    model: "m",
                };
                let bits = record.flags();
                let entries = |list: &[EntryId]| {
                    list.iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                };
                let want = format!(
                    "{PLAN_VERSION}\n{config:016x}\n{}\n{start_ms}\n{body_len}\n{bits:x}\n0,255pq\n{};{};{}\n/v1/chat\ngw\nm",
                    record.chain,
                    record.limit,
                    entries(record.context_window),
                    entries(record.content_policy),
                );
                assert_eq!(record.encode(), want);
            }
        }
    }

    #[test]
    fn the_callers_api_rides_in_the_flags_only_when_set() {
        let slots = [slot(0, true, false), slot(1, false, false)];
        let record = PlanRecord {
            config: 7,
            chain: ChainId::FIRST,
            team: Default::default(),
            start_ms: 1,
            body_len: 2,
            log_started: true,
            stream: true,
            caller_api: None,
            gather: false,
            ask_usage: false,
            stream_options: false,
            slots: &slots,
            limit: 0,
            context_window: &[],
            content_policy: &[],
            path: "/v1/messages",
            authority: "gw",
            model: "m",
        };
        let same_api = record.encode();
        assert_eq!(
            same_api.split('\n').nth(5),
            Some("3"),
            "a same-API plan keeps the flags it always had"
        );
        for (api, flags) in [
            (Api::OpenAiChat, "7"),
            (Api::AnthropicMessages, "b"),
            (Api::OpenAiResponses, "f"),
        ] {
            let crossing = PlanRecord {
                caller_api: Some(api),
                ..record
            };
            let text = crossing.encode();
            assert_eq!(text.split('\n').nth(5), Some(flags));
            let read = PlanText::decode(text).expect("decodes");
            let view = read.view();
            assert_eq!(view.caller_api, Some(api));
            assert!(view.log_started && view.stream);
            assert_eq!(view.slot_list(), &slots);
        }
        assert_eq!(
            PlanText::decode(same_api.clone()).map(|t| t.view().caller_api),
            Some(None)
        );
    }

    #[test]
    fn other_versions_and_garbage_are_refused() {
        let slots = [slot(0, false, false)];
        let record = PlanRecord {
            config: 1,
            chain: ChainId::FIRST,
            team: Default::default(),
            start_ms: 1,
            body_len: 0,
            log_started: false,
            stream: false,
            caller_api: None,
            gather: false,
            ask_usage: false,
            stream_options: false,
            slots: &slots,
            limit: 0,
            context_window: &[],
            content_policy: &[],
            path: "/",
            authority: "a",
            model: "m",
        };
        let good = record.encode();
        assert!(PlanText::decode(good.clone()).is_some());
        assert_eq!(PlanText::decode(good.replacen('1', "2", 1)), None);
        assert_eq!(PlanText::decode("garbage".into()), None);
        // Line by line: 5 = flags, 6 = slots, 7 = lists.
        let with_line = |n: usize, text: &str| {
            let mut lines: Vec<&str> = good.split('\n').collect();
            lines[n] = text;
            lines.join("\n")
        };
        assert!(PlanText::decode(with_line(5, "3")).is_some());
        assert!(PlanText::decode(with_line(5, "13")).is_some_and(|p| p.view().gather));
        assert!(PlanText::decode(with_line(5, "43")).is_some_and(|p| p.view().ask_usage));
        assert!(PlanText::decode(with_line(5, "c3")).is_some_and(|p| p.view().stream_options));
        assert_eq!(PlanText::decode(with_line(5, "183")), None);
        // A Gemini caller has its own bit, never with another caller's.
        let gemini = PlanText::decode(with_line(5, "23"));
        assert_eq!(gemini.map(|p| p.view().caller_api), Some(Some(Api::Gemini)));
        assert_eq!(PlanText::decode(with_line(5, "27")), None);
        assert_eq!(PlanText::decode(with_line(5, "113")), None);
        assert_eq!(PlanText::decode(with_line(5, "g")), None);
        assert_eq!(PlanText::decode(with_line(6, "x,y")), None);
        assert_eq!(PlanText::decode(with_line(7, "3;1;x")), None);
        assert_eq!(PlanText::decode(with_line(7, "3;1")), None);
        // The previous, unversioned format is refused rather than misread.
        assert_eq!(PlanText::decode("1\n2\n3\n0\n0\n/\na\nm".into()), None);
    }

    #[test]
    fn refusals_read_back_and_anything_else_fails_closed() {
        for r in [Refused::TotalTime, Refused::FailClosed, Refused::WalkEnded] {
            assert_eq!(Refused::decode(&r.encode()), r);
        }
        assert_eq!(Refused::decode(b"budget"), Refused::FailClosed);
        assert_eq!(Refused::decode(b""), Refused::FailClosed);
    }

    #[test]
    fn outcomes_record_each_failed_attempt() {
        let empty = Outcomes::new(&[]);
        assert_eq!(empty.of(1), None);
        let one = empty.with(1, Class::ServerError);
        let two = Outcomes::new(&one).with(3, Class::Timeout);
        let read = Outcomes::new(&two);
        assert_eq!(read.of(1), Some(Class::ServerError));
        assert_eq!(read.of(2), None);
        assert_eq!(read.of(3), Some(Class::Timeout));
        assert_eq!(read.of(0), None);
        assert_eq!(read.of(4), None);
        // Another version reads as nothing recorded.
        assert_eq!(Outcomes::new(&[9, 4]).of(1), None);
        // Out-of-range attempts are not recorded (and do not panic).
        assert_eq!(Outcomes::new(&empty.with(1000, Class::Ok)).of(1000), None);
    }
}
