//! The JSON tokenizer under [`super::scan_top_level`] and every other reader of request and
//! answer bodies (`translate::json`, `config::error_path`): one token at a time, validated as
//! strictly as serde_json (see the rules at the top of `rewrite.rs`), with the string escapes
//! both directions.

use super::{BodyError, Content, MAX_DEPTH};

/// What kind of JSON value starts with byte `c`, for messages.
pub(super) fn value_kind(c: u8) -> Option<&'static str> {
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
    pub(super) fn new() -> Self {
        Containers {
            bits: [0; MAX_DEPTH / 64],
            depth: 0,
        }
    }

    /// False when already [`MAX_DEPTH`] deep.
    pub(super) fn push(&mut self, is_object: bool) -> bool {
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

    pub(super) fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Whether the innermost open container is an object; None when none is open.
    pub(super) fn top_is_object(&self) -> Option<bool> {
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
    pub(super) content: Content,
    pub(super) media_bytes: usize,
    /// The nested member name just read, when its string value tells something.
    pending: Pending,
}

/// Where Google's Files API keeps an uploaded file (`fileUri`s such as
/// `https://generativelanguage.googleapis.com/v1beta/files/abc`): only that account reads it.
const GOOGLE_FILES: &[u8] = b"\"https://generativelanguage.googleapis.com/";

/// A nested member whose string value the scanner notes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pending {
    None,
    /// `type`: `image_url`, `image` or `input_image` is an image; `item_reference` an item a
    /// provider stored.
    Type,
    /// `file_id`: a file kept by a provider.
    FileId,
    /// `mimeType` (Gemini's `inlineData` and `fileData`): `image/...` is an image.
    Mime,
    /// `fileUri` (Gemini's `fileData`): a file in Google's Files API is kept by that account.
    FileUri,
    /// `data`: inline (base64) media.
    Data,
}

impl Pending {
    pub(super) fn of(name: &[u8]) -> Pending {
        match name {
            b"type" => Pending::Type,
            b"file_id" => Pending::FileId,
            b"data" => Pending::Data,
            // Google's JSON takes the proto's field names too.
            b"mimeType" | b"mime_type" => Pending::Mime,
            b"fileUri" | b"file_uri" => Pending::FileUri,
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
                // A Responses input item naming an item the provider stored.
                self.content.provider_state |= token == b"\"item_reference\"";
            }
            Pending::FileId => self.content.provider_state = true,
            Pending::Mime => self.content.images |= token.starts_with(b"\"image/"),
            Pending::FileUri => {
                self.content.provider_state |=
                    token.windows(GOOGLE_FILES.len()).any(|w| w == GOOGLE_FILES);
            }
            Pending::Data => self.media_bytes += token.len(),
            Pending::None if token.starts_with(b"\"data:") => self.media_bytes += token.len(),
            Pending::None => {}
        }
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    pub(super) fn rest(&self) -> &[u8] {
        self.b.get(self.i..).unwrap_or_default()
    }

    pub(crate) fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// The error for the current position: truncated at the end, else a syntax error.
    pub(super) fn error(&self, expected: &'static str) -> BodyError {
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

    pub(super) fn eat(&mut self, c: u8, expected: &'static str) -> Result<(), BodyError> {
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
    pub(super) fn escape(&mut self) -> Result<(), BodyError> {
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
    pub(super) fn digits(&mut self) -> usize {
        let n = self
            .rest()
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        self.i += n;
        n
    }

    pub(super) fn number(&mut self) -> Result<(), BodyError> {
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

    pub(super) fn literal(
        &mut self,
        word: &'static [u8],
        expected: &'static str,
    ) -> Result<(), BodyError> {
        for &c in word {
            self.eat(c, expected)?;
        }
        Ok(())
    }

    /// The name and colon of an object member, leaving `i` at its value.
    pub(super) fn member_name(&mut self) -> Result<(), BodyError> {
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
pub(super) fn find_string_special(bytes: &[u8]) -> Option<usize> {
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
    pub(super) fn hex4(chars: &mut std::str::CharIndices<'_>) -> Option<u32> {
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
pub(super) fn escape_of(b: u8) -> Option<&'static [u8]> {
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

pub(super) fn escaped_len(s: &str) -> usize {
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
