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

/// What a request carries that not every chain entry can take (found by [`scan_top_level`]
/// in the same pass that finds the model; eligibility reads it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Content {
    /// An image part (`type` `image_url`, `image` or `input_image`) anywhere in the body.
    pub images: bool,
    /// A non-empty top-level `tools` (or `functions`) list.
    pub tools: bool,
    /// State kept by one provider: a non-null `previous_response_id` or `conversation`, or
    /// a `file_id` anywhere in the body.
    pub provider_state: bool,
    /// Body bytes without inline media (base64 `data` and `data:` URIs), the base of the
    /// prompt-size estimate.
    pub text_bytes: usize,
}

impl Content {
    /// The prompt's size in tokens, estimated as a quarter of the body's bytes without inline
    /// media (about what English text and JSON take in OpenAI's and Anthropic's tokenizers;
    /// the JSON around the messages makes it err on the large side).
    pub fn prompt_tokens(&self) -> u64 {
        (self.text_bytes / 4) as u64
    }
}

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
    /// The top-level `stream` member is the literal `true` (the caller asked for SSE).
    pub stream: bool,
    /// What the request carries that not every chain entry can take (SPEC 2.4).
    pub content: Content,
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
    let mut s = Scanner::new(body);
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
                Member::Stream => {
                    s.value()?;
                    scan.stream = body.get(value_start..s.i) == Some(b"true");
                }
                Member::Tools => {
                    s.value()?;
                    let value = body.get(value_start..s.i).unwrap_or_default();
                    s.content.tools |= is_non_empty_array(value);
                }
                Member::ProviderState => {
                    s.value()?;
                    s.content.provider_state |= body.get(value_start..s.i) != Some(b"null");
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
    scan.content = s.content;
    scan.content.text_bytes = body.len().saturating_sub(s.media_bytes);
    Ok(scan)
}

/// `[` with something in it (a JSON array value, already validated).
fn is_non_empty_array(value: &[u8]) -> bool {
    let mut rest = value.iter().filter(|c| !c.is_ascii_whitespace());
    rest.next() == Some(&b'[') && rest.next() != Some(&b']')
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
    Stream,
    /// `tools` (or the older `functions`): a non-empty list means the request uses tools.
    Tools,
    /// `previous_response_id`, `conversation`: state a provider keeps (Responses API).
    ProviderState,
    Other,
}

impl Member {
    /// Classifies a member name by its raw bytes (between the quotes); decodes it only when it
    /// contains escapes.
    fn of(raw: &[u8], escaped: bool) -> Member {
        const NAMED: [(&str, Member); 7] = [
            ("model", Member::Model),
            ("fallbacks", Member::Fallbacks),
            ("stream", Member::Stream),
            ("tools", Member::Tools),
            ("functions", Member::Tools),
            ("previous_response_id", Member::ProviderState),
            ("conversation", Member::ProviderState),
        ];
        if !escaped {
            return NAMED
                .iter()
                .find(|(name, _)| name.as_bytes() == raw)
                .map_or(Member::Other, |(_, m)| *m);
        }
        let Ok(raw) = std::str::from_utf8(raw) else {
            return Member::Other;
        };
        NAMED
            .iter()
            .find(|(name, _)| decoded_eq(raw, name))
            .map_or(Member::Other, |(_, m)| *m)
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

/// One JSON token at a time, validating as it goes (also walked by the configuration's error
/// paths, `config::error_path`). While it skips nested values it notes what the request
/// carries (`content`): images, a provider's file id, and the bytes of inline media, which
/// the prompt-size estimate leaves out.
pub(crate) struct Scanner<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) i: usize,
    content: Content,
    media_bytes: usize,
    /// The nested member name just read, when its string value tells something.
    pending: Pending,
}

/// A nested member whose string value the scanner notes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pending {
    None,
    /// `type`: `image_url`, `image` or `input_image` is an image.
    Type,
    /// `file_id`: a file kept by a provider.
    FileId,
    /// `data`: inline (base64) media.
    Data,
}

impl Pending {
    fn of(name: &[u8]) -> Pending {
        match name {
            b"type" => Pending::Type,
            b"file_id" => Pending::FileId,
            b"data" => Pending::Data,
            _ => Pending::None,
        }
    }
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Scanner<'a> {
        Scanner {
            b,
            i: 0,
            content: Content::default(),
            media_bytes: 0,
            pending: Pending::None,
        }
    }

    /// Notes a string value (the token from `start`, quotes included) read after `pending`.
    fn note_string(&mut self, start: usize, pending: Pending) {
        let token = self.b.get(start..self.i).unwrap_or_default();
        match pending {
            Pending::Type => {
                self.content.images |=
                    matches!(token, b"\"image_url\"" | b"\"image\"" | b"\"input_image\"");
            }
            Pending::FileId => self.content.provider_state = true,
            Pending::Data => self.media_bytes += token.len(),
            Pending::None if token.starts_with(b"\"data:") => self.media_bytes += token.len(),
            Pending::None => {}
        }
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn rest(&self) -> &[u8] {
        self.b.get(self.i..).unwrap_or_default()
    }

    pub(crate) fn skip_ws(&mut self) {
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
    pub(crate) fn string(&mut self) -> Result<bool, BodyError> {
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
        let start = self.i + 1;
        self.string()?;
        let name = self.b.get(start..self.i.saturating_sub(1));
        self.pending = Pending::of(name.unwrap_or_default());
        self.skip_ws();
        self.eat(b':', "':' after the member name")?;
        self.skip_ws();
        Ok(())
    }

    /// Skips one complete JSON value starting at `i` (whitespace before it allowed), without
    /// recursion: `open` tracks the containers entered so far.
    pub(crate) fn value(&mut self) -> Result<(), BodyError> {
        let mut open = Containers::new();
        loop {
            // A value starts here.
            self.skip_ws();
            let pending = std::mem::replace(&mut self.pending, Pending::None);
            match self.peek() {
                Some(b'"') => {
                    let start = self.i;
                    self.string()?;
                    self.note_string(start, pending);
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
    bytes
        .get(offset..)
        .unwrap_or_default()
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|n| offset + n)
}

pub(crate) fn unescape(raw: &str, mut emit: impl FnMut(char) -> bool) -> Result<bool, usize> {
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
pub(crate) fn decoded_eq(raw: &str, target: &str) -> bool {
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
pub(crate) fn push_escaped(out: &mut Vec<u8>, s: &str) {
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
mod tests;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod proptests;
