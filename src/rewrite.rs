//! Request-body rewrites (behaviour.md 2.6 and 7): read the requested `model` once, remove a client-sent
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

use scanner::{escaped_len, value_kind};
use std::borrow::Cow;
use std::fmt;

/// Deepest nesting of arrays/objects accepted below the top-level object.
pub const MAX_DEPTH: usize = 512;

/// What a request carries that not every chain entry can take (found by [`scan_top_level`]
/// in the same pass that finds the model; eligibility reads it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Content {
    /// An image part (`type` `image_url`, `image` or `input_image`, or Gemini's `mimeType`
    /// `image/...`) anywhere in the body.
    pub images: bool,
    /// A non-empty top-level `tools` (or `functions`) list.
    pub tools: bool,
    /// State kept by one provider: a non-null `previous_response_id`, `conversation` or
    /// `cachedContent`, or a `file_id`, an `item_reference` item or a `fileUri` in Google's
    /// Files API anywhere in the body.
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
    /// The top-level `stream_options` value (whether it asks for the stream's usage is the
    /// caller's to read: `intake::RequestBody::stream_usage`).
    pub stream_options: Option<Span>,
    /// What the request carries that not every chain entry can take (behaviour.md 2.4).
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
                Member::Model => model_member(&mut s, &mut scan, key_start, value_start)?,
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
                Member::StreamOptions => {
                    s.value()?;
                    scan.stream_options = Some(Span {
                        start: value_start,
                        end: s.i,
                    });
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

/// The top-level `model` member (its name at `key_start`, its value at `value_start`): its
/// string's span, read once ([`scan_top_level`]'s step, inlined there: the same code).
#[inline(always)]
fn model_member(
    s: &mut Scanner<'_>,
    scan: &mut BodyScan,
    key_start: usize,
    value_start: usize,
) -> Result<(), BodyError> {
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
        Ok(())
    } else {
        // Report bad JSON as such before complaining about the type.
        s.value()?;
        let found =
            s.b.get(value_start)
                .and_then(|&c| value_kind(c))
                .unwrap_or("a value");
        Err(BodyError::ModelNotString {
            found,
            at: value_start,
        })
    }
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
    /// `previous_response_id`, `conversation` (Responses API), `cachedContent` (Gemini's
    /// stored context cache): state a provider keeps.
    ProviderState,
    /// `stream_options` (OpenAI Chat: `include_usage`).
    StreamOptions,
    Other,
}

impl Member {
    /// Classifies a member name by its raw bytes (between the quotes); decodes it only when it
    /// contains escapes.
    fn of(raw: &[u8], escaped: bool) -> Member {
        const NAMED: [(&str, Member); 10] = [
            ("model", Member::Model),
            ("fallbacks", Member::Fallbacks),
            ("stream", Member::Stream),
            ("stream_options", Member::StreamOptions),
            ("tools", Member::Tools),
            ("functions", Member::Tools),
            ("previous_response_id", Member::ProviderState),
            ("conversation", Member::ProviderState),
            ("cachedContent", Member::ProviderState),
            ("cached_content", Member::ProviderState),
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

mod scanner;

pub(crate) use scanner::{decoded_eq, push_escaped, unescape, Scanner};

#[cfg(test)]
mod tests;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod proptests;
