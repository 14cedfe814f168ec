//! Request-body rewrites (SPEC 2.6 and 7): read the requested `model` once, remove a client-sent
//! top-level `fallbacks` member, and replace the top-level `model` value per attempt, forwarding
//! every other byte of the body unchanged.
//!
//! # Why a hand-written scanner
//! serde_json has no byte-span API: it can tell us *what* the model is but not *where* it is, and
//! re-serialising a parsed `Value` would reorder keys, reformat numbers (`1.0e3`), change escapes
//! and whitespace, and allocate per node on bodies of up to 8 MiB. So [`scan_top_level`] makes one
//! pass over the body with a small single-pass scanner, validates it as JSON (RFC 8259) and
//! records only two byte spans: the top-level `model` string token and the top-level `fallbacks`
//! member. Nested values are skipped without allocating or recursing (a fixed-size bit stack
//! remembers which containers are open). [`rewrite`] then splices those spans into one buffer of
//! exact capacity, or returns `None` (no allocation) when nothing changes.
//!
//! # Rules
//! - Only members of the top-level object count; `model` inside `messages` or anywhere deeper is
//!   ordinary data. The top-level members may come in any order (the OpenAI Python SDK sends
//!   `messages` before `model`).
//! - Member names compare by their decoded value, as every JSON parser sees them: `"mod\u0065l"`
//!   is `model`. Names are decoded only when they contain a backslash.
//! - A second top-level `model` or `fallbacks` member is refused
//!   ([`BodyError::DuplicateMember`]): parsers disagree on which duplicate wins (serde_json and
//!   Python keep the last, others the first), so a caller could make the filter route on one
//!   model while the provider reads another, or hide a `fallbacks` member from the filter.
//! - `model` must be a string ([`BodyError::ModelNotString`]). A body without `model` scans fine;
//!   the caller decides what that means, and [`rewrite`] never inserts one.
//! - The whole body is validated as strictly as serde_json: UTF-8, no trailing commas, no
//!   comments, no garbage after the object, no raw control characters inside strings, only the
//!   escapes JSON defines. Two things serde_json refuses are accepted here because they do not
//!   affect where members are: numbers outside the `f64` range (`1e400`) and unpaired UTF-16
//!   surrogate escapes (`"\ud800"`) outside the model name. Nesting is limited to
//!   [`MAX_DEPTH`] levels below the top-level object (serde_json stops at 128).
//! - Error messages name the problem and the 0-based byte offset, e.g.
//!   `request body is not valid JSON: expected ':' after the member name, found '}' at byte 17`.

use std::borrow::Cow;
use std::fmt;

/// Deepest nesting of arrays/objects accepted below the top-level object.
pub const MAX_DEPTH: usize = 512;

/// A half-open byte range `start..end` of the request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the interesting top-level members of a request body are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BodyScan {
    /// The top-level `model` value: the whole string token, both quotes included.
    pub model: Option<Span>,
    /// The whole top-level `fallbacks` member: name, colon, value and exactly one adjacent
    /// comma (the one before it, or the one after it when it is the first member), so that
    /// cutting the span out leaves valid JSON.
    pub fallbacks: Option<Span>,
}

/// Why a request body cannot be used. `Display` is a message a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// The body is empty or only whitespace.
    Empty,
    /// The body is not UTF-8 (JSON text must be).
    NotUtf8 { at: usize },
    /// The body ends before the JSON object is complete.
    Truncated { at: usize, expected: &'static str },
    /// The body is malformed JSON at `at`.
    Syntax {
        at: usize,
        expected: &'static str,
        found: u8,
    },
    /// The body is JSON, but its top-level value is not an object.
    NotObject { found: &'static str },
    /// Arrays/objects nested deeper than [`MAX_DEPTH`].
    TooDeep { at: usize },
    /// A second top-level `model` or `fallbacks` member, starting at `at`.
    DuplicateMember { name: &'static str, at: usize },
    /// The top-level `model` value (starting at `at`) is not a string.
    ModelNotString { found: &'static str, at: usize },
    /// The model name holds a `\u` escape that is not a character (an unpaired UTF-16
    /// surrogate), at `at`.
    InvalidModelEscape { at: usize },
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NOT_JSON: &str = "request body is not valid JSON:";
        match self {
            BodyError::Empty => f.write_str("request body is empty; expected a JSON object"),
            BodyError::NotUtf8 { at } => {
                write!(f, "request body is not valid UTF-8 at byte {at}; JSON must be UTF-8")
            }
            BodyError::Truncated { at, expected } => write!(
                f,
                "{NOT_JSON} the body ends at byte {at}, expected {expected} (truncated body?)"
            ),
            BodyError::Syntax {
                at,
                expected,
                found,
            } => {
                write!(f, "{NOT_JSON} expected {expected}, found ")?;
                match found {
                    b' '..=b'~' => write!(f, "'{}'", char::from(*found))?,
                    _ => write!(f, "byte 0x{found:02x}")?,
                }
                write!(f, " at byte {at}")
            }
            BodyError::NotObject { found } => {
                write!(f, "request body must be a JSON object, found {found}")
            }
            BodyError::TooDeep { at } => write!(
                f,
                "{NOT_JSON} arrays/objects are nested more than {MAX_DEPTH} levels deep at byte {at}"
            ),
            BodyError::DuplicateMember { name, at } => write!(
                f,
                "request body has more than one top-level \"{name}\" member (the second one at \
                 byte {at}); send it once"
            ),
            BodyError::ModelNotString { found, at } => write!(
                f,
                "request body's \"model\" must be a string naming the model, found {found} at \
                 byte {at}"
            ),
            BodyError::InvalidModelEscape { at } => write!(
                f,
                "request body's \"model\" holds an invalid \\u escape (unpaired UTF-16 \
                 surrogate) at byte {at}"
            ),
        }
    }
}

impl std::error::Error for BodyError {}

/// Scans the top-level object of `body` once, validating the whole body as JSON and recording
/// the spans of the top-level `model` value and `fallbacks` member (see the module doc for the
/// rules). Never panics; does not allocate.
pub fn scan_top_level(body: &[u8]) -> Result<BodyScan, BodyError> {
    if let Err(e) = std::str::from_utf8(body) {
        return Err(BodyError::NotUtf8 {
            at: e.valid_up_to(),
        });
    }
    let mut s = Scanner { b: body, i: 0 };
    s.skip_ws();
    match s.peek() {
        None => return Err(BodyError::Empty),
        Some(b'{') => s.i += 1,
        Some(c) => {
            return Err(match value_kind(c) {
                Some(found) => BodyError::NotObject { found },
                None => s.error("'{' (the body must be a JSON object)"),
            })
        }
    }
    let mut scan = BodyScan::default();
    s.skip_ws();
    if s.peek() == Some(b'}') {
        s.i += 1;
    } else {
        // Offset of the comma before the current member; None for the first member.
        let mut prev_comma: Option<usize> = None;
        // `fallbacks` was the first member: its span takes the comma after it, if any.
        let mut fallbacks_takes_next_comma = false;
        loop {
            s.skip_ws();
            let key_start = s.i;
            if s.peek() != Some(b'"') {
                return Err(s.error("a member name in double quotes"));
            }
            let escaped = s.string()?;
            let key = body
                .get(key_start + 1..s.i.saturating_sub(1))
                .unwrap_or_default();
            let member = Member::of(key, escaped);
            s.skip_ws();
            s.eat(b':', "':' after the member name")?;
            s.skip_ws();
            let value_start = s.i;
            match member {
                Member::Model => {
                    if scan.model.is_some() {
                        return Err(BodyError::DuplicateMember {
                            name: "model",
                            at: key_start,
                        });
                    }
                    if s.peek() == Some(b'"') {
                        s.string()?;
                        scan.model = Some(Span {
                            start: value_start,
                            end: s.i,
                        });
                    } else {
                        // Report bad JSON as such before complaining about the type.
                        s.value()?;
                        let found =
                            s.b.get(value_start)
                                .and_then(|&c| value_kind(c))
                                .unwrap_or("a value");
                        return Err(BodyError::ModelNotString {
                            found,
                            at: value_start,
                        });
                    }
                }
                Member::Fallbacks => {
                    if scan.fallbacks.is_some() {
                        return Err(BodyError::DuplicateMember {
                            name: "fallbacks",
                            at: key_start,
                        });
                    }
                    s.value()?;
                    let start = match prev_comma {
                        Some(comma) => comma,
                        None => {
                            fallbacks_takes_next_comma = true;
                            key_start
                        }
                    };
                    scan.fallbacks = Some(Span { start, end: s.i });
                }
                Member::Other => s.value()?,
            }
            s.skip_ws();
            match s.peek() {
                Some(b',') => {
                    if fallbacks_takes_next_comma {
                        fallbacks_takes_next_comma = false;
                        if let Some(span) = scan.fallbacks.as_mut() {
                            span.end = s.i + 1;
                        }
                    }
                    prev_comma = Some(s.i);
                    s.i += 1;
                }
                Some(b'}') => {
                    s.i += 1;
                    break;
                }
                _ => return Err(s.error("',' or '}' after an object member")),
            }
        }
    }
    s.skip_ws();
    if s.i < body.len() {
        return Err(s.error("nothing after the JSON object"));
    }
    Ok(scan)
}

/// The requested model: the decoded top-level `model` string, borrowed from `body` unless it
/// contains escapes. `Ok(None)` when the body has no top-level `model`. `scan` must come from
/// [`scan_top_level`] on this same `body`.
pub fn model_value<'a>(body: &'a [u8], scan: &BodyScan) -> Result<Option<Cow<'a, str>>, BodyError> {
    let Some(span) = scan.model else {
        return Ok(None);
    };
    let raw = string_contents(body, span).ok_or(BodyError::Truncated {
        at: span.start,
        expected: "the \"model\" string",
    })?;
    if !raw.contains('\\') {
        return Ok(Some(Cow::Borrowed(raw)));
    }
    let mut decoded = String::with_capacity(raw.len());
    unescape(raw, |c| {
        decoded.push(c);
        true
    })
    .map_err(|offset| BodyError::InvalidModelEscape {
        at: span.start.saturating_add(1).saturating_add(offset),
    })?;
    Ok(Some(Cow::Owned(decoded)))
}

/// The body for one attempt: the top-level `model` value replaced by `new_model` (JSON-escaped)
/// and, with `drop_fallbacks`, the `fallbacks` member cut out; every other byte is copied.
///
/// Returns `None` when nothing changes (no allocation): `new_model` is `None` or equals the
/// current model, or the body has no `model` (none is inserted), and there is no `fallbacks` to
/// drop. Otherwise allocates once, with exact capacity. `scan` must come from
/// [`scan_top_level`] on this same `body`; with any other scan the result is unspecified (it
/// never panics).
pub fn rewrite(
    body: &[u8],
    scan: &BodyScan,
    new_model: Option<&str>,
    drop_fallbacks: bool,
) -> Option<Vec<u8>> {
    let model_edit = match (new_model, scan.model) {
        (Some(new), Some(span)) => {
            let unchanged = string_contents(body, span).is_some_and(|raw| decoded_eq(raw, new));
            (!unchanged).then_some((span, new))
        }
        _ => None,
    };
    let cut = if drop_fallbacks { scan.fallbacks } else { None };

    // At most two edits, applied in body order; each replaces a span (a cut inserts nothing).
    let edits: [Option<(Span, Option<&str>)>; 2] = match (model_edit, cut) {
        (None, None) => return None,
        (Some((m, new)), None) => [Some((m, Some(new))), None],
        (None, Some(f)) => [Some((f, None)), None],
        (Some((m, new)), Some(f)) if m.end <= f.start => [Some((m, Some(new))), Some((f, None))],
        (Some((m, new)), Some(f)) if f.end <= m.start => [Some((f, None)), Some((m, Some(new)))],
        (Some(_), Some(_)) => return None, // overlapping spans: not a scan of this body
    };

    let mut len = body.len();
    for (span, new) in edits.iter().flatten() {
        let added = new.map_or(0, |m| escaped_len(m).saturating_add(2));
        len = len.checked_sub(span.len())?.checked_add(added)?;
    }
    let mut out = Vec::with_capacity(len);
    let mut pos = 0;
    for (span, new) in edits.iter().flatten() {
        out.extend_from_slice(body.get(pos..span.start)?);
        if let Some(m) = new {
            out.push(b'"');
            push_escaped(&mut out, m);
            out.push(b'"');
        }
        pos = span.end;
    }
    out.extend_from_slice(body.get(pos..)?);
    Some(out)
}

/// The text between the quotes of a string token at `span`, if `span` is one.
fn string_contents(body: &[u8], span: Span) -> Option<&str> {
    let inner = body.get(span.start.checked_add(1)?..span.end.checked_sub(1)?)?;
    std::str::from_utf8(inner).ok()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    Model,
    Fallbacks,
    Other,
}

impl Member {
    /// Classifies a member name by its raw bytes (between the quotes); decodes it only when it
    /// contains escapes.
    fn of(raw: &[u8], escaped: bool) -> Member {
        if !escaped {
            return match raw {
                b"model" => Member::Model,
                b"fallbacks" => Member::Fallbacks,
                _ => Member::Other,
            };
        }
        let Ok(raw) = std::str::from_utf8(raw) else {
            return Member::Other;
        };
        if decoded_eq(raw, "model") {
            Member::Model
        } else if decoded_eq(raw, "fallbacks") {
            Member::Fallbacks
        } else {
            Member::Other
        }
    }
}

/// What kind of JSON value starts with byte `c`, for messages.
fn value_kind(c: u8) -> Option<&'static str> {
    match c {
        b'{' => Some("an object"),
        b'[' => Some("an array"),
        b'"' => Some("a string"),
        b'-' | b'0'..=b'9' => Some("a number"),
        b't' | b'f' => Some("a boolean"),
        b'n' => Some("null"),
        _ => None,
    }
}

/// Open containers while skipping a nested value: one bit per level (1 = object, 0 = array).
struct Containers {
    bits: [u64; MAX_DEPTH / 64],
    depth: usize,
}

impl Containers {
    fn new() -> Self {
        Containers {
            bits: [0; MAX_DEPTH / 64],
            depth: 0,
        }
    }

    /// False when already [`MAX_DEPTH`] deep.
    fn push(&mut self, is_object: bool) -> bool {
        let Some(word) = self.bits.get_mut(self.depth / 64) else {
            return false;
        };
        let bit = 1u64 << (self.depth % 64);
        if is_object {
            *word |= bit;
        } else {
            *word &= !bit;
        }
        self.depth += 1;
        true
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Whether the innermost open container is an object; None when none is open.
    fn top_is_object(&self) -> Option<bool> {
        let d = self.depth.checked_sub(1)?;
        let word = self.bits.get(d / 64)?;
        Some((word >> (d % 64)) & 1 == 1)
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn rest(&self) -> &[u8] {
        self.b.get(self.i..).unwrap_or_default()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// The error for the current position: truncated at the end, else a syntax error.
    fn error(&self, expected: &'static str) -> BodyError {
        match self.peek() {
            None => BodyError::Truncated {
                at: self.i,
                expected,
            },
            Some(found) => BodyError::Syntax {
                at: self.i,
                expected,
                found,
            },
        }
    }

    fn eat(&mut self, c: u8, expected: &'static str) -> Result<(), BodyError> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.error(expected))
        }
    }

    /// A string token starting at the current `"`; leaves `i` after the closing quote.
    /// Returns whether the string contains escapes.
    fn string(&mut self) -> Result<bool, BodyError> {
        self.eat(b'"', "'\"'")?;
        let mut escaped = false;
        loop {
            match find_string_special(self.rest()) {
                Some(n) => self.i += n,
                None => {
                    self.i = self.b.len();
                    return Err(self.error("the closing '\"' of a string"));
                }
            }
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    self.i += 1;
                    self.escape()?;
                }
                _ => {
                    return Err(self.error(
                        "a string character (control characters must be escaped, e.g. \\n)",
                    ))
                }
            }
        }
    }

    /// The rest of an escape, after the backslash.
    fn escape(&mut self) -> Result<(), BodyError> {
        match self.peek() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.i += 1;
                Ok(())
            }
            Some(b'u') => {
                self.i += 1;
                for _ in 0..4 {
                    match self.peek() {
                        Some(c) if c.is_ascii_hexdigit() => self.i += 1,
                        _ => return Err(self.error("4 hex digits after \\u")),
                    }
                }
                Ok(())
            }
            _ => Err(self.error("an escape (one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)")),
        }
    }

    /// Skips ASCII digits; returns how many.
    fn digits(&mut self) -> usize {
        let n = self
            .rest()
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        self.i += n;
        n
    }

    fn number(&mut self) -> Result<(), BodyError> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("a digit")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.error("a digit after the decimal point"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("a digit in the exponent"));
            }
        }
        Ok(())
    }

    fn literal(&mut self, word: &'static [u8], expected: &'static str) -> Result<(), BodyError> {
        for &c in word {
            self.eat(c, expected)?;
        }
        Ok(())
    }

    /// The name and colon of an object member, leaving `i` at its value.
    fn member_name(&mut self) -> Result<(), BodyError> {
        self.skip_ws();
        if self.peek() != Some(b'"') {
            return Err(self.error("a member name in double quotes"));
        }
        self.string()?;
        self.skip_ws();
        self.eat(b':', "':' after the member name")?;
        self.skip_ws();
        Ok(())
    }

    /// Skips one complete JSON value starting at `i` (whitespace before it allowed), without
    /// recursion: `open` tracks the containers entered so far.
    fn value(&mut self) -> Result<(), BodyError> {
        let mut open = Containers::new();
        loop {
            // A value starts here.
            self.skip_ws();
            match self.peek() {
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal(b"true", "'true'")?,
                Some(b'f') => self.literal(b"false", "'false'")?,
                Some(b'n') => self.literal(b"null", "'null'")?,
                Some(open_byte @ (b'{' | b'[')) => {
                    let is_object = open_byte == b'{';
                    let at = self.i;
                    self.i += 1;
                    self.skip_ws();
                    let close = if is_object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.i += 1; // empty container: a complete value
                    } else {
                        if !open.push(is_object) {
                            return Err(BodyError::TooDeep { at });
                        }
                        if is_object {
                            self.member_name()?;
                        }
                        continue;
                    }
                }
                _ => return Err(self.error("a value")),
            }
            // A value ended: close containers until one continues with a comma.
            loop {
                let Some(is_object) = open.top_is_object() else {
                    return Ok(());
                };
                self.skip_ws();
                match (self.peek(), is_object) {
                    (Some(b','), _) => {
                        self.i += 1;
                        if is_object {
                            self.member_name()?;
                        }
                        break;
                    }
                    (Some(b'}'), true) | (Some(b']'), false) => {
                        self.i += 1;
                        open.pop();
                    }
                    (_, true) => return Err(self.error("',' or '}' in an object")),
                    (_, false) => return Err(self.error("',' or ']' in an array")),
                }
            }
        }
    }
}

/// Decodes the contents of a JSON string (already validated by the scanner), calling `emit` for
/// each character; stops early, returning `Ok(false)`, when `emit` returns false. `Err(offset)`
/// (relative to `raw`) for a malformed escape or an unpaired UTF-16 surrogate.
/// Position of the first byte that ends a run of plain string content: `"`, `\\` or a control
/// character. Message text is most of a chat body, so this skips it 8 bytes at a time
/// (SWAR: each test below is exact for "some byte in the word matches").
fn find_string_special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in chunks.by_ref() {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let special = has_zero(w ^ (ONES * u64::from(b'"')))
            | has_zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS);
        if special != 0 {
            break;
        }
        offset += 8;
    }
    bytes[offset..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|n| offset + n)
}

fn unescape(raw: &str, mut emit: impl FnMut(char) -> bool) -> Result<bool, usize> {
    fn hex4(chars: &mut std::str::CharIndices<'_>) -> Option<u32> {
        let mut v = 0;
        for _ in 0..4 {
            v = v * 16 + chars.next()?.1.to_digit(16)?;
        }
        Some(v)
    }
    let mut chars = raw.char_indices();
    while let Some((pos, c)) = chars.next() {
        let decoded = if c != '\\' {
            c
        } else {
            match chars.next().map(|(_, e)| e) {
                Some('"') => '"',
                Some('\\') => '\\',
                Some('/') => '/',
                Some('b') => '\u{8}',
                Some('f') => '\u{c}',
                Some('n') => '\n',
                Some('r') => '\r',
                Some('t') => '\t',
                Some('u') => {
                    let high = hex4(&mut chars).ok_or(pos)?;
                    let code = match high {
                        0xD800..=0xDBFF => {
                            let backslash_u = chars.next().map(|(_, c)| c) == Some('\\')
                                && chars.next().map(|(_, c)| c) == Some('u');
                            let low = hex4(&mut chars).filter(|_| backslash_u).ok_or(pos)?;
                            if !(0xDC00..=0xDFFF).contains(&low) {
                                return Err(pos);
                            }
                            0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                        }
                        _ => high,
                    };
                    char::from_u32(code).ok_or(pos)?
                }
                _ => return Err(pos),
            }
        };
        if !emit(decoded) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether the JSON string contents `raw` decode to exactly `target`.
fn decoded_eq(raw: &str, target: &str) -> bool {
    if !raw.contains('\\') {
        return raw == target;
    }
    let mut want = target.chars();
    matches!(unescape(raw, |c| want.next() == Some(c)), Ok(true)) && want.next().is_none()
}

/// The escaped form of byte `b` inside a JSON string, if it needs one (serde_json's choices:
/// short escapes where JSON has them, `\u00xx` for other control characters).
fn escape_of(b: u8) -> Option<&'static [u8]> {
    Some(match b {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        0x08 => b"\\b",
        0x0c => b"\\f",
        0..=0x1f => b"\\u00",
        _ => return None,
    })
}

fn escaped_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match escape_of(b) {
            Some(b"\\u00") => 6,
            Some(e) => e.len(),
            None => 1,
        })
        .sum()
}

/// Appends `s` JSON-escaped (without quotes).
fn push_escaped(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    let mut plain_from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let Some(esc) = escape_of(b) else { continue };
        out.extend_from_slice(bytes.get(plain_from..i).unwrap_or_default());
        out.extend_from_slice(esc);
        if esc == b"\\u00" {
            out.push(HEX.get(usize::from(b >> 4)).copied().unwrap_or(b'0'));
            out.push(HEX.get(usize::from(b & 0xf)).copied().unwrap_or(b'0'));
        }
        plain_from = i + 1;
    }
    out.extend_from_slice(bytes.get(plain_from..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_of(body: &str) -> Result<Option<String>, BodyError> {
        let scan = scan_top_level(body.as_bytes())?;
        Ok(model_value(body.as_bytes(), &scan)?.map(Cow::into_owned))
    }

    fn rewritten(body: &str, new_model: Option<&str>, drop: bool) -> Option<String> {
        let scan = scan_top_level(body.as_bytes()).unwrap();
        let out = rewrite(body.as_bytes(), &scan, new_model, drop)?;
        assert_eq!(out.capacity(), out.len(), "exact capacity");
        Some(String::from_utf8(out).unwrap())
    }

    fn err(body: &[u8]) -> BodyError {
        scan_top_level(body).unwrap_err()
    }

    #[test]
    fn finds_model_anywhere_at_top_level() {
        assert_eq!(
            model_of(r#"{"model":"gpt-4o"}"#).unwrap().as_deref(),
            Some("gpt-4o")
        );
        let sdk = r#"{"messages":[{"role":"user","content":"hi"}],"model":"gpt-4o","stream":true}"#;
        assert_eq!(model_of(sdk).unwrap().as_deref(), Some("gpt-4o"));
        let last = r#"{"temperature":0.5e-3,"n":-1,"x":null,"y":[true,false,{}],"model":"m"}"#;
        assert_eq!(model_of(last).unwrap().as_deref(), Some("m"));
        assert_eq!(model_of(r#"{"messages":[]}"#).unwrap(), None);
        assert_eq!(model_of("{}").unwrap(), None);
    }

    #[test]
    fn whitespace_everywhere_json_allows_it() {
        let body =
            "\r\n\t {\n \"messages\" :\t[ 1 , { \"a\" : [ ] } ] ,\r\n \"model\"\n:\n\"m\" \t}\n ";
        assert_eq!(model_of(body).unwrap().as_deref(), Some("m"));
        let scan = scan_top_level(body.as_bytes()).unwrap();
        assert_eq!(
            &body[scan.model.unwrap().start..scan.model.unwrap().end],
            "\"m\""
        );
    }

    #[test]
    fn nested_model_members_are_data() {
        let body = r#"{"messages":[{"model":"x","content":"\"model\":\"y\""}],"meta":{"model":"z","l":[{"model":"w"}]},"model":"real"}"#;
        assert_eq!(model_of(body).unwrap().as_deref(), Some("real"));
        assert_eq!(model_of(r#"{"a":{"model":"x"}}"#).unwrap(), None);
        // "model" as a value, not a name.
        assert_eq!(model_of(r#"{"x":"model","y":["model"]}"#).unwrap(), None);
    }

    #[test]
    fn string_specials_are_found_in_every_position_of_a_word() {
        for len in 0..40 {
            for special in [b'"', b'\\', b'\n', 0x1f, 0x00] {
                for at in 0..len {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = special;
                    assert_eq!(
                        find_string_special(&bytes),
                        Some(at),
                        "{len} {at} {special}"
                    );
                }
            }
            let plain: Vec<u8> = (0..len)
                .map(|i| [b'x', 0x20, 0x7f, 0xc3, 0xff, b'!'][i % 6])
                .collect();
            assert_eq!(find_string_special(&plain), None, "{plain:?}");
        }
    }

    #[test]
    fn strings_with_escapes_are_skipped() {
        let body = r#"{"a":"he said \"model\": \"x\\","b":"\\","c":"\u0022\ud83d\ude00\/\b\f\n\r\t","model":"m"}"#;
        assert_eq!(model_of(body).unwrap().as_deref(), Some("m"));
        let nested = r#"{"a":["\\\"",{"k\"ey":"v\\"}],"model":"m"}"#;
        assert_eq!(model_of(nested).unwrap().as_deref(), Some("m"));
    }

    #[test]
    fn model_value_borrows_unless_escaped() {
        let body = br#"{"model":"gpt-4o"}"#;
        let scan = scan_top_level(body).unwrap();
        assert!(matches!(
            model_value(body, &scan),
            Ok(Some(Cow::Borrowed("gpt-4o")))
        ));
        let body = br#"{"model":"a\"b\\c\u00e9\ud83d\ude00\/\n"}"#;
        let scan = scan_top_level(body).unwrap();
        let m = model_value(body, &scan).unwrap().unwrap();
        assert!(matches!(m, Cow::Owned(_)));
        assert_eq!(m, "a\"b\\c\u{e9}\u{1F600}/\n");
        assert_eq!(
            model_of(r#"{"model":"héllo"}"#).unwrap().as_deref(),
            Some("héllo")
        );
    }

    #[test]
    fn model_with_lone_surrogate_is_refused() {
        for body in [
            r#"{"model":"ab\ud800"}"#,
            r#"{"model":"ab\ud800x"}"#,
            r#"{"model":"ab\ud800\n"}"#,
            r#"{"model":"ab\ud800\u0041"}"#,
            r#"{"model":"ab\udc00"}"#,
        ] {
            assert_eq!(
                model_of(body),
                Err(BodyError::InvalidModelEscape { at: 12 }),
                "{body}"
            );
        }
        // Outside the model, lone surrogates are left alone.
        assert_eq!(
            model_of(r#"{"x":"\ud800","model":"m"}"#)
                .unwrap()
                .as_deref(),
            Some("m")
        );
    }

    #[test]
    fn escaped_member_names_are_decoded() {
        assert_eq!(
            model_of(r#"{"mod\u0065l":"m"}"#).unwrap().as_deref(),
            Some("m")
        );
        assert_eq!(
            model_of(r#"{"\u006D\u006f\u0064\u0065\u006c":"m"}"#)
                .unwrap()
                .as_deref(),
            Some("m")
        );
        assert_eq!(model_of(r#"{"mod\u0065":"m"}"#).unwrap(), None);
        assert_eq!(model_of(r#"{"mod\u0065ls":"m"}"#).unwrap(), None);
        assert_eq!(model_of(r#"{"mo\"del":"m"}"#).unwrap(), None);
        let body = r#"{"fallback\u0073":["x"],"model":"m"}"#;
        let scan = scan_top_level(body.as_bytes()).unwrap();
        assert!(scan.fallbacks.is_some());
        assert_eq!(rewritten(body, None, true).unwrap(), r#"{"model":"m"}"#);
    }

    #[test]
    fn duplicate_members_are_refused() {
        assert_eq!(
            err(br#"{"model":"a","model":"b"}"#),
            BodyError::DuplicateMember {
                name: "model",
                at: 13
            }
        );
        assert_eq!(
            err(br#"{"model":"a","mod\u0065l":"b"}"#),
            BodyError::DuplicateMember {
                name: "model",
                at: 13
            }
        );
        assert_eq!(
            err(br#"{"fallbacks":[],"model":"a","fallbacks":["b"]}"#),
            BodyError::DuplicateMember {
                name: "fallbacks",
                at: 28
            }
        );
        // Nested duplicates are data.
        assert!(scan_top_level(br#"{"a":{"model":1,"model":2},"model":"m"}"#).is_ok());
        let msg = err(br#"{"model":"a","model":"b"}"#).to_string();
        assert_eq!(
            msg,
            "request body has more than one top-level \"model\" member (the second one at byte \
             13); send it once"
        );
    }

    #[test]
    fn model_must_be_a_string() {
        for (body, found) in [
            (r#"{"model":1}"#, "a number"),
            (r#"{"model":-0.5}"#, "a number"),
            (r#"{"model":null}"#, "null"),
            (r#"{"model":true}"#, "a boolean"),
            (r#"{"model":["a"]}"#, "an array"),
            (r#"{"model":{"name":"a"}}"#, "an object"),
        ] {
            assert_eq!(
                err(body.as_bytes()),
                BodyError::ModelNotString { found, at: 9 },
                "{body}"
            );
        }
        assert_eq!(
            err(br#"{"model":42}"#).to_string(),
            "request body's \"model\" must be a string naming the model, found a number at byte 9"
        );
        // Bad JSON in the model value is reported as bad JSON.
        assert!(matches!(err(br#"{"model":nul}"#), BodyError::Syntax { .. }));
    }

    #[test]
    fn body_must_be_an_object() {
        for (body, found) in [
            ("[]", "an array"),
            (" [{\"model\":\"m\"}]", "an array"),
            ("\"model\"", "a string"),
            ("12", "a number"),
            ("-1", "a number"),
            ("null", "null"),
            ("true", "a boolean"),
        ] {
            assert_eq!(
                err(body.as_bytes()),
                BodyError::NotObject { found },
                "{body}"
            );
        }
        assert_eq!(err(b""), BodyError::Empty);
        assert_eq!(err(b" \r\n\t"), BodyError::Empty);
        assert_eq!(err(b"\xEF\xBB\xBF{}").to_string(),
            "request body is not valid JSON: expected '{' (the body must be a JSON object), found byte 0xef at byte 0");
        assert_eq!(
            err(b"[1]").to_string(),
            "request body must be a JSON object, found an array"
        );
    }

    #[test]
    fn truncated_bodies_are_refused() {
        let body = r#" {"messages":[{"role":"user","content":"h\"i\u00e9"}],"n":-1.5e+3,"t":true,"model":"gpt-4o","fallbacks":[null,false]} "#;
        assert!(scan_top_level(body.as_bytes()).is_ok());
        let end = body.trim_end().len();
        for cut in 2..end {
            let e = scan_top_level(&body.as_bytes()[..cut]);
            assert!(
                matches!(e, Err(BodyError::Truncated { at, .. }) if at == cut),
                "prefix {cut}: {e:?}"
            );
        }
        assert_eq!(
            err(br#"{"model":"gp"#).to_string(),
            "request body is not valid JSON: the body ends at byte 12, expected the closing '\"' \
             of a string (truncated body?)"
        );
    }

    #[test]
    fn malformed_json_is_refused_with_position() {
        for (body, at) in [
            (r#"{"a":1,}"#, 7),
            (r#"{"a" 1}"#, 5),
            (r#"{'a':1}"#, 1),
            (r#"{a:1}"#, 1),
            (r#"{"a":1} x"#, 8),
            (r#"{"a":1}{}"#, 7),
            (r#"{"a":01}"#, 6),
            (r#"{"a":1.}"#, 7),
            (r#"{"a":.5}"#, 5),
            (r#"{"a":-}"#, 6),
            (r#"{"a":1e}"#, 7),
            (r#"{"a":+1}"#, 5),
            (r#"{"a":tru}"#, 8),
            (r#"{"a":nulL}"#, 8),
            (r#"{"a":[1,]}"#, 8),
            (r#"{"a":[1}"#, 7),
            (r#"{"a":{"b":1]}"#, 11),
            (r#"{"a":{"b"}}"#, 9),
            (r#"{"a":"\x"}"#, 7),
            (r#"{"a":"\u12g4"}"#, 10),
            ("{\"a\":\"tab\there\"}", 9),
            ("{\"a\":\"\u{1f}\"}", 6),
            ("{\"a\":\"\n\"}", 6),
            (r#"{"a":1 2}"#, 7),
            (r#"{"a":[1 2]}"#, 8),
            (r#"{"a":/*c*/1}"#, 5),
            (r#"{"a":NaN}"#, 5),
        ] {
            match err(body.as_bytes()) {
                BodyError::Syntax { at: got, .. } => assert_eq!(got, at, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
        assert_eq!(
            err(br#"{"model" "m"}"#).to_string(),
            "request body is not valid JSON: expected ':' after the member name, found '\"' at byte 9"
        );
        assert_eq!(
            err(b"{\"a\":\"\x01\"}").to_string(),
            "request body is not valid JSON: expected a string character (control characters \
             must be escaped, e.g. \\n), found byte 0x01 at byte 6"
        );
    }

    #[test]
    fn invalid_utf8_is_refused() {
        assert_eq!(
            err(b"{\"model\":\"g\xffp\"}"),
            BodyError::NotUtf8 { at: 11 }
        );
        assert_eq!(err(b"{\"a\":\"\xc3\"}"), BodyError::NotUtf8 { at: 6 });
    }

    #[test]
    fn nesting_limit() {
        let nested = |n: usize| {
            format!(
                "{{\"a\":{}1{},\"model\":\"m\"}}",
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert_eq!(model_of(&nested(MAX_DEPTH)).unwrap().as_deref(), Some("m"));
        assert_eq!(
            err(nested(MAX_DEPTH + 1).as_bytes()),
            BodyError::TooDeep { at: 5 + MAX_DEPTH }
        );
        let objects = format!(
            "{{\"a\":{}1{}}}",
            "{\"b\":".repeat(MAX_DEPTH),
            "}".repeat(MAX_DEPTH)
        );
        assert!(scan_top_level(objects.as_bytes()).is_ok());
        // Mixed nesting must close with the matching bracket at every level.
        let mixed = format!("{{\"a\":{}1{}}}", "[{\"b\":".repeat(100), "}]".repeat(100));
        assert!(scan_top_level(mixed.as_bytes()).is_ok());
        let wrong = format!("{{\"a\":{}1{}}}", "[{\"b\":".repeat(100), "]}".repeat(100));
        assert!(matches!(
            scan_top_level(wrong.as_bytes()),
            Err(BodyError::Syntax { .. })
        ));
    }

    #[test]
    fn large_body() {
        let content = "x\\\"y ".repeat(2 * 1024 * 1024); // 10 MiB string with escapes
        let body =
            format!(r#"{{"messages":[{{"role":"user","content":"{content}"}}],"model":"m"}}"#);
        let scan = scan_top_level(body.as_bytes()).unwrap();
        assert_eq!(
            model_value(body.as_bytes(), &scan).unwrap().as_deref(),
            Some("m")
        );
        let out = rewrite(body.as_bytes(), &scan, Some("provider-m"), true).unwrap();
        assert_eq!(out.len(), body.len() + 9);
        assert!(out.ends_with(br#""model":"provider-m"}"#));
    }

    #[test]
    fn rewrite_returns_none_when_nothing_changes() {
        let body = r#"{"messages":[],"model":"gpt-4o"}"#;
        assert_eq!(rewritten(body, None, false), None);
        assert_eq!(rewritten(body, None, true), None); // no fallbacks to drop
        assert_eq!(rewritten(body, Some("gpt-4o"), true), None);
        // Same model written with escapes: unchanged, bytes kept as sent.
        assert_eq!(
            rewritten(r#"{"model":"gpt\u002d4o"}"#, Some("gpt-4o"), false),
            None
        );
        // No model member: none is inserted.
        assert_eq!(rewritten(r#"{"messages":[]}"#, Some("x"), false), None);
        // Fallbacks kept unless asked.
        assert_eq!(
            rewritten(r#"{"fallbacks":[],"model":"a"}"#, Some("a"), false),
            None
        );
    }

    #[test]
    fn rewrite_replaces_only_the_model_token() {
        let body = "{\"messages\":[{\"model\":\"x\"}] , \"model\" : \"gpt-4o\" ,\"n\":1.0e3}";
        assert_eq!(
            rewritten(body, Some("openai/gpt-4o-2024-08-06"), false).unwrap(),
            "{\"messages\":[{\"model\":\"x\"}] , \"model\" : \"openai/gpt-4o-2024-08-06\" ,\"n\":1.0e3}"
        );
        assert_eq!(
            rewritten(r#"{"model":"a\"b"}"#, Some("c"), false).unwrap(),
            r#"{"model":"c"}"#
        );
        assert_eq!(
            rewritten(r#"{"model":""}"#, Some("c"), false).unwrap(),
            r#"{"model":"c"}"#
        );
        assert_eq!(
            rewritten(r#"{"model":"c"}"#, Some(""), false).unwrap(),
            r#"{"model":""}"#
        );
    }

    #[test]
    fn rewrite_escapes_the_new_model() {
        let weird = "q\"b\\s/n\nr\rt\tb\u{8}f\u{c}z\u{0}u\u{1f}d\u{7f}é😀";
        let out = rewritten(r#"{"model":"a"}"#, Some(weird), false).unwrap();
        assert_eq!(
            out,
            format!(r#"{{"model":{}}}"#, serde_json::to_string(weird).unwrap())
        );
        assert_eq!(
            out,
            "{\"model\":\"q\\\"b\\\\s/n\\nr\\rt\\tb\\bf\\fz\\u0000u\\u001fd\u{7f}é😀\"}"
        );
        assert_eq!(model_of(&out).unwrap().as_deref(), Some(weird));
    }

    #[test]
    fn rewrite_drops_fallbacks_in_every_position() {
        for (body, want) in [
            (r#"{"fallbacks":[1]}"#, "{}"),
            (r#"{ "fallbacks" : [1] }"#, "{  }"),
            (r#"{"fallbacks":["a","b"],"model":"m"}"#, r#"{"model":"m"}"#),
            (
                r#"{"fallbacks":{"x":[]} , "model":"m"}"#,
                r#"{ "model":"m"}"#,
            ),
            (r#"{"model":"m","fallbacks":null}"#, r#"{"model":"m"}"#),
            (r#"{"model":"m" , "fallbacks":null }"#, r#"{"model":"m"  }"#),
            (r#"{"a":1,"fallbacks":"x","b":2}"#, r#"{"a":1,"b":2}"#),
            (r#"{"a":1, "fallbacks":"x", "b":2}"#, r#"{"a":1, "b":2}"#),
            (
                r#"{"a":{"fallbacks":1},"fallbacks":2}"#,
                r#"{"a":{"fallbacks":1}}"#,
            ),
        ] {
            let out = rewritten(body, None, true).unwrap();
            assert_eq!(out, want, "{body}");
            assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
            assert_eq!(scan_top_level(out.as_bytes()).unwrap().fallbacks, None);
        }
        // Nested "fallbacks" is data.
        assert_eq!(rewritten(r#"{"a":{"fallbacks":1}}"#, None, true), None);
    }

    #[test]
    fn rewrite_model_and_fallbacks_together() {
        for (body, want) in [
            (r#"{"fallbacks":["x"],"model":"a"}"#, r#"{"model":"b"}"#),
            (r#"{"model":"a","fallbacks":["x"]}"#, r#"{"model":"b"}"#),
            (
                r#"{"model":"a","fallbacks":["x"],"n":1}"#,
                r#"{"model":"b","n":1}"#,
            ),
            (
                r#"{"n":1,"fallbacks":["x"],"model":"a"}"#,
                r#"{"n":1,"model":"b"}"#,
            ),
            (
                r#"{"fallbacks":["x"],"n":1,"model":"a"}"#,
                r#"{"n":1,"model":"b"}"#,
            ),
        ] {
            assert_eq!(rewritten(body, Some("b"), true).unwrap(), want, "{body}");
        }
        // Same model, fallbacks dropped.
        assert_eq!(
            rewritten(r#"{"model":"a","fallbacks":[]}"#, Some("a"), true).unwrap(),
            r#"{"model":"a"}"#
        );
    }

    #[test]
    fn rewrite_with_a_foreign_scan_never_panics() {
        let body = br#"{"model":"a"}"#;
        for scan in [
            BodyScan {
                model: Some(Span { start: 5, end: 500 }),
                fallbacks: None,
            },
            BodyScan {
                model: Some(Span { start: 9, end: 3 }),
                fallbacks: Some(Span { start: 0, end: 13 }),
            },
            BodyScan {
                model: None,
                fallbacks: Some(Span { start: 12, end: 2 }),
            },
            BodyScan {
                model: Some(Span {
                    start: usize::MAX,
                    end: usize::MAX,
                }),
                fallbacks: Some(Span {
                    start: usize::MAX - 1,
                    end: usize::MAX,
                }),
            },
        ] {
            let _ = rewrite(body, &scan, Some("x"), true);
            let _ = model_value(body, &scan);
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod proptests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    /// Serialises JSON with pseudo-random whitespace and string escapes (driven by `rng`).
    struct Writer {
        rng: u64,
        out: String,
    }

    impl Writer {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.rng ^= self.rng >> 12;
            self.rng ^= self.rng << 25;
            self.rng ^= self.rng >> 27;
            self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn ws(&mut self) {
            let pick = ["", "", "", "", " ", "\n", "\t", "\r\n  "];
            let w = pick[(self.next() % pick.len() as u64) as usize];
            self.out.push_str(w);
        }

        fn string(&mut self, s: &str) {
            self.out.push('"');
            for c in s.chars() {
                match self.next() % 8 {
                    0 => {
                        let mut units = [0u16; 2];
                        for u in c.encode_utf16(&mut units) {
                            self.out.push_str(&format!("\\u{:04X}", u));
                        }
                    }
                    1 if c == '/' => self.out.push_str("\\/"),
                    _ => {
                        let quoted = serde_json::to_string(&c.to_string()).unwrap();
                        self.out.push_str(&quoted[1..quoted.len() - 1]);
                    }
                }
            }
            self.out.push('"');
        }

        fn members<'a>(&mut self, members: impl Iterator<Item = (&'a String, &'a Value)>) {
            self.out.push('{');
            self.ws();
            for (i, (k, v)) in members.enumerate() {
                if i > 0 {
                    self.out.push(',');
                    self.ws();
                }
                self.string(k);
                self.ws();
                self.out.push(':');
                self.ws();
                self.value(v);
                self.ws();
            }
            self.out.push('}');
        }

        fn value(&mut self, v: &Value) {
            match v {
                Value::Object(m) => self.members(m.iter()),
                Value::Array(a) => {
                    self.out.push('[');
                    self.ws();
                    for (i, x) in a.iter().enumerate() {
                        if i > 0 {
                            self.out.push(',');
                            self.ws();
                        }
                        self.value(x);
                        self.ws();
                    }
                    self.out.push(']');
                }
                Value::String(s) => self.string(s),
                other => self.out.push_str(&other.to_string()),
            }
        }
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9./-]{0,12}",
            "[\"\\\\/\\x00-\\x1f a-z\u{e9}\u{2028}\u{1F600}]{0,8}",
            any::<String>(),
        ]
    }

    fn arb_key() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => arb_string(),
            1 => Just("model".to_string()),
            1 => Just("fallbacks".to_string()),
        ]
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            arb_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((arb_key(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// A top-level object as ordered members with unique names, optionally with `model` and
    /// `fallbacks` at arbitrary positions, plus a seed for whitespace and escapes.
    #[derive(Debug, Clone)]
    struct Body {
        members: Vec<(String, Value)>,
        seed: u64,
    }

    impl Body {
        fn text(&self) -> String {
            let mut w = Writer {
                rng: self.seed | 1,
                out: String::new(),
            };
            w.ws();
            w.members(self.members.iter().map(|(k, v)| (k, v)));
            w.ws();
            w.out
        }
    }

    fn arb_body(model: impl Strategy<Value = Option<Value>>) -> impl Strategy<Value = Body> {
        (
            prop::collection::vec((arb_string(), arb_value()), 0..6),
            model,
            prop::option::of(arb_value()),
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            any::<u64>(),
        )
            .prop_map(|(others, model, fallbacks, mi, fi, seed)| {
                let mut members: Vec<(String, Value)> = Vec::new();
                for (k, v) in others {
                    if k != "model" && k != "fallbacks" && members.iter().all(|(m, _)| *m != k) {
                        members.push((k, v));
                    }
                }
                if let Some(m) = model {
                    members.insert(mi.index(members.len() + 1), ("model".into(), m));
                }
                if let Some(f) = fallbacks {
                    members.insert(fi.index(members.len() + 1), ("fallbacks".into(), f));
                }
                Body { members, seed }
            })
    }

    fn string_model() -> impl Strategy<Value = Option<Value>> {
        prop::option::weighted(0.85, arb_string().prop_map(Value::String))
    }

    fn any_model() -> impl Strategy<Value = Option<Value>> {
        prop::option::weighted(
            0.85,
            prop_oneof![3 => arb_string().prop_map(Value::String), 1 => arb_value()],
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// (1) The scanner reads the same model serde_json does (or refuses a non-string one).
        #[test]
        fn scanner_agrees_with_serde(body in arb_body(any_model())) {
            let text = body.text();
            let parsed: Value = serde_json::from_str(&text).unwrap();
            let result = scan_top_level(text.as_bytes());
            match parsed.get("model") {
                Some(Value::String(want)) => {
                    let scan = result.unwrap();
                    let got = model_value(text.as_bytes(), &scan).unwrap();
                    prop_assert_eq!(got.as_deref(), Some(want.as_str()));
                }
                Some(_) => prop_assert!(matches!(result, Err(BodyError::ModelNotString { .. })), "{:?}", result),
                None => {
                    let scan = result.unwrap();
                    prop_assert_eq!(scan.model, None);
                }
            }
            if let Ok(scan) = scan_top_level(text.as_bytes()) {
                prop_assert_eq!(scan.fallbacks.is_some(), parsed.get("fallbacks").is_some());
            }
        }

        /// (2) and (3): the rewritten body parses to the input with only `model` changed (and
        /// `fallbacks` gone when asked), and every byte outside the edited spans is unchanged.
        #[test]
        fn rewrite_changes_only_model_and_fallbacks(
            body in arb_body(string_model()),
            new_model in prop::option::of(arb_string()),
            drop in any::<bool>(),
        ) {
            let text = body.text();
            let input = text.as_bytes();
            let scan = scan_top_level(input).unwrap();
            let out = rewrite(input, &scan, new_model.as_deref(), drop);
            if let Some(out) = &out {
                prop_assert_eq!(out.capacity(), out.len());
            }
            let out = out.unwrap_or_else(|| input.to_vec());

            let mut want: Value = serde_json::from_slice(input).unwrap();
            let obj = want.as_object_mut().unwrap();
            if let (Some(new), Some(m)) = (&new_model, obj.get_mut("model")) {
                *m = Value::String(new.clone());
            }
            if drop {
                obj.remove("fallbacks");
            }
            let got: Value = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(&got, &want);

            // Byte-level: rebuild the expected output from the untouched pieces.
            let model_changed = match (&new_model, scan.model) {
                (Some(new), Some(_)) => {
                    model_value(input, &scan).unwrap().as_deref() != Some(new.as_str())
                }
                _ => false,
            };
            let mut expected = input.to_vec();
            let mut edits = Vec::new();
            if model_changed {
                let m = scan.model.unwrap();
                edits.push((m, serde_json::to_string(new_model.as_deref().unwrap()).unwrap()));
            }
            if drop {
                if let Some(f) = scan.fallbacks {
                    edits.push((f, String::new()));
                }
            }
            edits.sort_by_key(|(s, _)| std::cmp::Reverse(s.start));
            for (span, with) in edits {
                expected.splice(span.start..span.end, with.into_bytes());
            }
            prop_assert_eq!(out, expected);
        }

        /// (4) Arbitrary bytes never panic the scanner, model_value or rewrite.
        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..256),
                prop::collection::vec(prop::sample::select(
                    b"{}[]:,\"\\ \n0123456789.eE+-truefalsnlmodelfallbacks/u\xc3\xa9\xff".to_vec()),
                    0..96)
                    .prop_map(|mut v| { v.insert(0, b'{'); v }),
            ]
        ) {
            if let Ok(scan) = scan_top_level(&bytes) {
                let _ = model_value(&bytes, &scan);
                let _ = rewrite(&bytes, &scan, Some("x\"y"), true);
            }
        }

        /// Mutated valid bodies: whatever serde_json accepts as an object, the scanner accepts
        /// with the same model (unless it refuses a duplicate); whatever the scanner accepts,
        /// serde_json accepts too, except the documented leniencies.
        #[test]
        fn mutated_bodies_agree_with_serde(
            body in arb_body(any_model()),
            edits in prop::collection::vec(
                (any::<prop::sample::Index>(), 0u8..3, prop::sample::select(
                    b"{}[]:,\"\\ \t\x00\x1f\x7f0123456789.eE+-truefalsnl/u".to_vec())),
                1..4),
        ) {
            let mut bytes = body.text().into_bytes();
            for (at, op, b) in edits {
                let i = at.index(bytes.len() + 1);
                match op {
                    0 => bytes.insert(i, b),
                    1 if i < bytes.len() => { bytes.remove(i); }
                    _ if i < bytes.len() => bytes[i] = b,
                    _ => {}
                }
            }
            let ours = scan_top_level(&bytes);
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Object(obj)) => match (ours, obj.get("model")) {
                    (Err(BodyError::DuplicateMember { .. }), _) => {}
                    // A non-string model is refused at once, even if a duplicate string one
                    // (which serde_json keeps) follows.
                    (Err(BodyError::ModelNotString { .. }), Some(_)) => {}
                    (Ok(scan), Some(Value::String(want))) => {
                        let got = model_value(&bytes, &scan).unwrap();
                        prop_assert_eq!(got.as_deref(), Some(want.as_str()));
                    }
                    (Ok(scan), None) => prop_assert_eq!(scan.model, None),
                    (other, m) => prop_assert!(false, "serde accepted (model {:?}), we said {:?}", m, other),
                },
                Ok(_) => prop_assert!(matches!(ours, Err(BodyError::NotObject { .. })), "{:?}", ours),
                Err(e) => {
                    // Documented leniencies: numbers beyond f64 and unpaired surrogate
                    // escapes (serde_json reports those as "lone ... surrogate" or, when no
                    // `\u` follows a leading one, "unexpected end of hex escape").
                    let msg = e.to_string();
                    let surrogate_escape = bytes.windows(3).any(|w| {
                        w[0] == b'\\' && w[1] == b'u' && matches!(w[2], b'd' | b'D')
                    });
                    prop_assert!(
                        ours.is_err()
                            || msg.contains("out of range")
                            || (surrogate_escape && msg.contains("surrogate"))
                            || (surrogate_escape && msg.contains("hex escape")),
                        "serde refused ({}), we accepted", msg
                    );
                }
            }
        }
    }
}
