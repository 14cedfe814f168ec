//! JSON for the translators, read lazily in place and written by hand: one reader for the
//! whole answers and requests ([`Obj`]) and the stream translators' events ([`members`],
//! [`elements`], [`pick`]), over the request scanner's tokenizer (`rewrite::Scanner`, which
//! validates every value it steps over as strictly as the request body's check).
//!
//! Reading: an object is its members as written ([`Obj`]); a member is read (as a string, an
//! array, an object, a number) only when the translation asks for it, and most strings are
//! copied into the output as they were written, escapes included, never unescaped and escaped
//! again. Member names are compared decoded (`"mod\u0065l"` is `model`) except where a stream
//! translator picks an event's members ([`pick`]: providers do not escape names).
//!
//! Not serde: serde readers (the earlier `RawValue` members, typed derives, `Value`) made the
//! module larger by each instantiation (BENCHMARKS-journal.md "One JSON reader"), and this walker is one
//! small non-generic function. Every reader and writer here is a call, never inlined: the
//! translators make hundreds of them, and inlined at this crate's opt-level 3 they made the
//! module 90 KB larger.

use std::borrow::Cow;
use std::ops::Range;

use crate::rewrite::{decoded_eq, push_escaped, unescape as decode, Scanner};

/// A JSON value as written (validated, without the whitespace around it).
pub type Raw<'a> = &'a str;

/// One object's members or one array's elements, in order, as positions in the text.
struct Walk<'a> {
    scan: Scanner<'a>,
    /// `{` or `[`, before the first item; then `,`.
    delimiter: u8,
    /// An object's members (names before values), not an array's elements.
    named: bool,
    /// No item follows (the end, or a syntax error).
    done: bool,
    /// The container was read to its closing bracket.
    closed: bool,
}

impl<'a> Walk<'a> {
    fn new(json: &'a [u8], open: u8) -> Walk<'a> {
        Walk {
            scan: Scanner::new(json),
            delimiter: open,
            named: open == b'{',
            done: false,
            closed: false,
        }
    }

    /// The next member (its name between the quotes, its value) or element (an empty name, its
    /// value). Stops at the end or at the first syntax error.
    #[inline(never)]
    fn next(&mut self) -> Option<(Range<usize>, Range<usize>)> {
        if self.done {
            return None;
        }
        let item = self.item();
        self.done = item.is_none();
        item
    }

    fn item(&mut self) -> Option<(Range<usize>, Range<usize>)> {
        let s = &mut self.scan;
        s.skip_ws();
        let (opening, named) = (self.delimiter != b',', self.named);
        let close = if named { b'}' } else { b']' };
        if !opening && s.peek() == Some(close) {
            s.i += 1;
            self.closed = true;
            return None;
        }
        if s.peek() != Some(self.delimiter) {
            return None; // a syntax error, or not the container expected
        }
        s.i += 1;
        s.skip_ws();
        if opening {
            if s.peek() == Some(close) {
                s.i += 1;
                self.closed = true;
                return None; // empty
            }
            self.delimiter = b',';
        }
        let mut name = 0..0;
        if named {
            let at = s.i;
            s.string().ok()?;
            name = at + 1..s.i.saturating_sub(1);
            s.skip_ws();
            if s.peek() != Some(b':') {
                return None;
            }
            s.i += 1;
            s.skip_ws();
        }
        let at = s.i;
        s.value().ok()?;
        Some((name, at..s.i))
    }

    /// The container was read to its closing bracket with only whitespace after it (call once
    /// `next` returned `None`).
    fn complete(&mut self) -> bool {
        self.scan.skip_ws();
        self.closed && self.scan.peek().is_none()
    }
}

/// The members of the JSON object `json`, in order: each name (between its quotes, as
/// written) and its value (as written). Stops at the first syntax error.
pub fn members(json: &[u8]) -> Members<'_> {
    Members(Walk::new(json, b'{'))
}

/// The elements of the JSON array `json`, as written. Stops at the first syntax error.
pub fn elements(json: &[u8]) -> Elements<'_> {
    Elements(Walk::new(json, b'['))
}

pub struct Members<'a>(Walk<'a>);
pub struct Elements<'a>(Walk<'a>);

impl Members<'_> {
    /// The next member's name (between its quotes) and value as positions in the text.
    pub(crate) fn next_span(&mut self) -> Option<(Range<usize>, Range<usize>)> {
        self.0.next()
    }

    /// The object was read to its closing brace with only whitespace after it (once the
    /// members ran out).
    pub(crate) fn complete(&mut self) -> bool {
        self.0.complete()
    }

    /// Where the object ends (just past its closing brace), once the members ran out; `None`
    /// when it was not read to its closing brace.
    pub(crate) fn end(&self) -> Option<usize> {
        self.0.closed.then_some(self.0.scan.i)
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (name, value) = self.0.next()?;
        let json = self.0.scan.b;
        Some((json.get(name)?, json.get(value)?))
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (_, value) = self.0.next()?;
        self.0.scan.b.get(value)
    }
}

/// The values of the members `names` of the object `json`, as written, in one pass (empty
/// where absent; a repeated member counts by its last occurrence; names compared as written).
/// (A shell over [`pick_into`], so one walk serves every `N`.)
#[inline]
pub fn pick<'a, const N: usize>(json: &'a [u8], names: [&[u8]; N]) -> [&'a [u8]; N] {
    let mut found = [&b""[..]; N];
    pick_into(json, &names, &mut found);
    found
}

/// [`pick`]'s walk: `found[i]` is the value of the member `names[i]`.
#[inline(never)]
fn pick_into<'a>(json: &'a [u8], names: &[&[u8]], found: &mut [&'a [u8]]) {
    for (name, value) in members(json) {
        if let Some(slot) = names
            .iter()
            .position(|n| *n == name)
            .and_then(|i| found.get_mut(i))
        {
            *slot = value;
        }
    }
}

/// The members of a JSON object, their values unread: each name as written between its
/// quotes, and its value as written.
#[derive(Debug, Default)]
pub struct Obj<'a>(Vec<(&'a str, Raw<'a>)>);

impl<'a> Obj<'a> {
    /// The object a text holds (`None`: not JSON, or not an object; whitespace around it is
    /// allowed).
    #[inline(never)]
    pub fn parse(text: &'a str) -> Option<Obj<'a>> {
        let mut walk = Walk::new(text.as_bytes(), b'{');
        let mut members = Vec::new();
        while let Some((name, value)) = walk.next() {
            let name = text.get(name)?;
            // A name's escapes must be characters (as any JSON parser reads names).
            if name.contains('\\') && decode(name, |_| true).is_err() {
                return None;
            }
            members.push((name, text.get(value)?));
        }
        walk.complete().then_some(Obj(members))
    }

    /// The object a body holds.
    #[inline(never)]
    pub fn parse_bytes(body: &'a [u8]) -> Option<Obj<'a>> {
        Obj::parse(std::str::from_utf8(body).ok()?)
    }

    /// A member's value (the first of that name); `None` when absent or `null`.
    #[inline(never)]
    pub fn get(&self, key: &str) -> Option<Raw<'a>> {
        self.0
            .iter()
            .find(|(k, _)| decoded_eq(k, key))
            .map(|&(_, v)| v)
            .filter(|v| *v != "null")
    }

    #[inline(never)]
    pub fn str(&self, key: &str) -> Option<Cow<'a, str>> {
        self.get(key).and_then(str)
    }

    /// A name-like string member (a `type`, a `role`, a stop reason) as written, without its
    /// quotes: compared as written, without unescaping (`"t\u0065xt"` is not `text`; no API
    /// or SDK escapes such names).
    #[inline(never)]
    pub fn tag(&self, key: &str) -> Option<&'a str> {
        let raw = self.raw_str(key)?;
        raw.get(1..raw.len().saturating_sub(1))
    }

    /// A string member as written (quotes and escapes included), to copy into the output.
    #[inline(never)]
    pub fn raw_str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(raw_str)
    }

    #[inline(never)]
    pub fn obj(&self, key: &str) -> Option<Obj<'a>> {
        self.get(key).and_then(obj)
    }

    #[inline(never)]
    pub fn arr(&self, key: &str) -> Option<Vec<Raw<'a>>> {
        self.get(key).and_then(arr)
    }

    #[inline(never)]
    pub fn u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| number(v.as_bytes()))
    }

    #[inline(never)]
    pub fn bool(&self, key: &str) -> Option<bool> {
        match self.get(key) {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        }
    }

    #[inline(never)]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The members in order: each name as written between its quotes, and its value.
    pub fn members(&self) -> &[(&'a str, Raw<'a>)] {
        &self.0
    }

    /// Whether a member is present (and not `null`).
    #[inline(never)]
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

/// A string's value (`None`: not a string).
#[inline(never)]
pub fn str(raw: Raw<'_>) -> Option<Cow<'_, str>> {
    unescape(raw)
}

/// The value of a JSON string's text (quotes included), borrowed when it holds no escape;
/// `None` when it is not a string or an escape is not a character.
#[inline(never)]
pub fn unescape(text: &str) -> Option<Cow<'_, str>> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    let mut value = String::with_capacity(inner.len());
    decode(inner, |c| {
        value.push(c);
        true
    })
    .ok()?;
    Some(Cow::Owned(value))
}

/// A string as written, quotes included (`None`: not a string).
#[inline(never)]
pub fn raw_str(raw: Raw<'_>) -> Option<&str> {
    Some(raw).filter(|t| t.starts_with('"'))
}

#[inline(never)]
pub fn obj(raw: Raw<'_>) -> Option<Obj<'_>> {
    Obj::parse(raw)
}

/// An array's elements as written (`None`: not an array).
#[inline(never)]
pub fn arr(raw: Raw<'_>) -> Option<Vec<Raw<'_>>> {
    let mut walk = Walk::new(raw.as_bytes(), b'[');
    let mut items = Vec::new();
    while let Some((_, value)) = walk.next() {
        items.push(raw.get(value)?);
    }
    walk.complete().then_some(items)
}

/// The empty string as written.
pub const EMPTY: &str = "\"\"";

/// A JSON string's contents, between its quotes, escapes as written (so pieces concatenate);
/// `""` for anything else.
pub fn contents(json_string: &str) -> &str {
    let inside = json_string
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'));
    inside.unwrap_or_default()
}

/// A JSON string exactly as written, quotes included (`"Hi \"you\""`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStr<'a>(pub &'a [u8]);

impl<'a> RawStr<'a> {
    /// `value` when it is a string (a validated value starting with `"`).
    pub fn of(value: &'a [u8]) -> Option<RawStr<'a>> {
        value.starts_with(b"\"").then_some(RawStr(value))
    }

    /// The string as written, `""` for none.
    pub fn or_empty(s: Option<RawStr<'a>>) -> &'a [u8] {
        s.map_or(&b"\"\""[..], |s| s.0)
    }

    /// The empty string `""`.
    pub fn is_empty(self) -> bool {
        self.0 == b"\"\""
    }

    /// The text between the quotes, escapes as written.
    pub fn inner(self) -> &'a [u8] {
        self.0
            .get(1..self.0.len().saturating_sub(1))
            .unwrap_or_default()
    }

    /// The string's value (escapes read; empty when one is not a character).
    pub fn value(self) -> Cow<'a, str> {
        std::str::from_utf8(self.0)
            .ok()
            .and_then(unescape)
            .unwrap_or_default()
    }
}

/// `value` when it is a non-negative integer that fits in a `u64` (token counts, indices).
#[inline(never)]
pub fn number(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Appends `parts` (one call for a whole piece of output: the stream translators write
/// through here, not through many inlined appends).
#[inline(never)]
pub fn put(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.reserve(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.extend_from_slice(part);
    }
}

/// `n` in decimal, on the stack.
pub struct Digits {
    digits: [u8; 20],
    at: usize,
}

impl Digits {
    #[inline(never)]
    pub fn of(n: u64) -> Digits {
        let mut d = Digits {
            digits: [0; 20],
            at: 20,
        };
        let mut rest = n;
        loop {
            d.at -= 1;
            if let Some(digit) = d.digits.get_mut(d.at) {
                *digit = b'0' + (rest % 10) as u8;
            }
            rest /= 10;
            if rest == 0 {
                return d;
            }
        }
    }

    pub fn get(&self) -> &[u8] {
        self.digits.get(self.at..).unwrap_or_default()
    }
}

/// A number written with a zero fraction (`40.0`, as google-genai writes Gemini's integer
/// `topK`) without it, for an API whose member is an integer; any other number as it is.
pub fn integral(number: &str) -> &str {
    match number.split_once('.') {
        Some((whole, fraction)) if !whole.is_empty() && fraction.bytes().all(|b| b == b'0') => {
            whole
        }
        _ => number,
    }
}

/// Whether a JSON number is above 1 (read from its text: no float parsing).
pub fn above_one(number: &str) -> bool {
    if number.starts_with('-') {
        return false;
    }
    let (mantissa, exponent) = match number.find(['e', 'E']) {
        Some(at) => (
            number.get(..at).unwrap_or_default(),
            number
                .get(at + 1..)
                .and_then(|e| e.parse::<i32>().ok())
                .unwrap_or(0),
        ),
        None => (number, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = || int.bytes().chain(frac.bytes());
    let Some(first) = digits().position(|d| d != b'0') else {
        return false; // zero
    };
    // The power of ten of the first significant digit.
    let power = int.len() as i64 - 1 - first as i64 + i64::from(exponent);
    if power != 0 {
        return power > 0;
    }
    let mut rest = digits().skip(first);
    rest.next() != Some(b'1') || rest.any(|d| d != b'0')
}

/// JSON written by hand: a comma goes before a member or an element unless it opens its
/// object or array (the last byte written says which).
#[derive(Debug, Default)]
pub struct Out(pub Vec<u8>);

impl Out {
    pub fn with_capacity(n: usize) -> Out {
        Out(Vec::with_capacity(n))
    }

    #[inline(never)]
    fn sep(&mut self) {
        if !matches!(self.0.last(), None | Some(b'{' | b'[' | b':')) {
            self.0.push(b',');
        }
    }

    /// Opens an object (as a value or an element).
    #[inline(never)]
    pub fn open(&mut self) -> &mut Out {
        self.sep();
        self.0.push(b'{');
        self
    }

    #[inline(never)]
    pub fn close(&mut self) -> &mut Out {
        self.0.push(b'}');
        self
    }

    #[inline(never)]
    pub fn open_arr(&mut self) -> &mut Out {
        self.sep();
        self.0.push(b'[');
        self
    }

    #[inline(never)]
    pub fn close_arr(&mut self) -> &mut Out {
        self.0.push(b']');
        self
    }

    /// A member's name (names are this module's literals: nothing to escape).
    #[inline(never)]
    pub fn key(&mut self, key: &str) -> &mut Out {
        self.sep();
        self.0.push(b'"');
        self.0.extend_from_slice(key.as_bytes());
        self.0.extend_from_slice(b"\":");
        self
    }

    /// A JSON value as written (a raw member, a string with its quotes).
    #[inline(never)]
    pub fn raw(&mut self, raw: &str) -> &mut Out {
        self.sep();
        self.0.extend_from_slice(raw.as_bytes());
        self
    }

    /// A string, escaped (as the request rewriter escapes a model name).
    #[inline(never)]
    pub fn str(&mut self, s: &str) -> &mut Out {
        self.sep();
        self.0.reserve(s.len() + 2);
        self.0.push(b'"');
        push_escaped(&mut self.0, s);
        self.0.push(b'"');
        self
    }

    #[inline(never)]
    pub fn num(&mut self, n: u64) -> &mut Out {
        self.sep();
        put(&mut self.0, &[Digits::of(n).get()]);
        self
    }

    #[inline(never)]
    pub fn bool(&mut self, b: bool) -> &mut Out {
        self.raw(if b { "true" } else { "false" })
    }

    #[inline(never)]
    pub fn null(&mut self) -> &mut Out {
        self.raw("null")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_read_when_asked() {
        let o = Obj::parse(
            r#" {"s": "a\"b", "n": 12, "t": true, "z": null, "o": {"k": [1, "x"]}, "e": "\u00e9\/"}"#,
        )
        .unwrap();
        assert_eq!(o.str("s").as_deref(), Some("a\"b"));
        assert_eq!(o.raw_str("s"), Some(r#""a\"b""#));
        assert_eq!(o.u64("n"), Some(12));
        assert_eq!(o.bool("t"), Some(true));
        assert!(o.get("z").is_none() && !o.has("z") && o.get("nope").is_none());
        let inner = o.obj("o").unwrap();
        let list = inner.arr("k").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(str(list[1]).as_deref(), Some("x"));
        assert!(matches!(o.str("e"), Some(Cow::Owned(e)) if e == "é/"));
        assert!(matches!(o.str("s"), Some(Cow::Owned(_))));
        assert_eq!(o.str("n"), None);
        assert!(o.obj("s").is_none() && o.arr("o").is_none());
        assert!(Obj::parse("[1]").is_none() && Obj::parse("{").is_none());
        assert!(Obj::parse_bytes(b"{\"a\": \xff}").is_none());
        // Whitespace around the object only; names compared decoded, the first one counts.
        assert!(Obj::parse(" {} \n").is_some_and(|o| o.is_empty()));
        for not in [
            r#"{"a": 1} x"#,
            r#"{"a": 1,}"#,
            r#"{"a": 1"#,
            r#"{"a": tru}"#,
            "{} {}",
        ] {
            assert!(Obj::parse(not).is_none(), "{not}");
        }
        let o = Obj::parse(r#"{"mod\u0065l": "m", "model": "n"}"#).unwrap();
        assert_eq!(o.tag("model"), Some("m"));
        assert!(Obj::parse(r#"{"\ud800": 1}"#).is_none());
        assert_eq!(arr("[]"), Some(vec![]));
        assert_eq!(arr(r#"[1, "x" ,{}]"#), Some(vec!["1", "\"x\"", "{}"]));
        assert_eq!(arr("[1,]"), None);
        assert_eq!(unescape(r#""\ud800""#), None);
        assert_eq!(o.u64("model"), None);
    }

    #[test]
    fn objects_are_accepted_as_serde_json_accepts_them() {
        for text in [
            r#"{"a": [1, 2.5e-3, -0, true, null, {"b": "\u00e9\n"}]}"#,
            r#"{"a": "\ud83d\ude00", "b": "\/"}"#,
            "\t{ }\r\n",
            r#"{"a": 01}"#,
            r#"{"a": 1.}"#,
            r#"{"a": "\x"}"#,
            r#"{"a": "\u0001"}"#,
            "{\"a\": \"\x01\"}",
            r#"{a: 1}"#,
            r#"{"a": [1 2]}"#,
            r#"{"a": {"b": 1,}}"#,
            r#"{"a": 1}}"#,
            r#"[{"a": 1}]"#,
            "",
        ] {
            let serde = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text);
            assert_eq!(Obj::parse(text).is_some(), serde.is_ok(), "{text}");
        }
    }

    #[test]
    fn output_is_json_with_commas_where_they_belong() {
        let mut out = Out::default();
        out.open()
            .key("a")
            .str("q\"\\\n\r\t\u{1}\u{8}\u{c}é")
            .key("b")
            .open_arr();
        out.num(1)
            .open()
            .close()
            .raw("\"x\"")
            .null()
            .bool(false)
            .close_arr();
        out.key("c").open().close().close();
        let text = String::from_utf8(out.0).unwrap();
        assert_eq!(
            text,
            r#"{"a":"q\"\\\n\r\t\u0001\b\fé","b":[1,{},"x",null,false],"c":{}}"#
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["a"], "q\"\\\n\r\t\u{1}\u{8}\u{c}é");
    }

    #[test]
    fn a_zero_fraction_is_dropped_for_an_integer_member() {
        for (n, out) in [("40.0", "40"), ("3.00", "3"), ("40", "40"), ("2.5", "2.5")] {
            assert_eq!(integral(n), out, "{n}");
        }
        // Not a number's zero fraction: kept as written.
        assert_eq!(integral(".0"), ".0");
        assert_eq!(integral("1.0e2"), "1.0e2");
    }

    #[test]
    fn numbers_above_one_from_their_text() {
        for (n, above) in [
            ("0", false),
            ("1", false),
            ("1.0", false),
            ("1.000", false),
            ("0.7", false),
            ("1.01", true),
            ("2", true),
            ("10", true),
            ("1.5", true),
            ("-3", false),
            ("1e0", false),
            ("1e-1", false),
            ("15e-1", true),
            ("0.2e1", true),
            ("0.1e1", false),
            ("0.00", false),
            ("007", true),
            ("1E+1", true),
        ] {
            assert_eq!(above_one(n), above, "{n}");
        }
    }

    fn all(json: &str) -> Vec<(String, String)> {
        members(json.as_bytes())
            .map(|(n, v)| {
                (
                    String::from_utf8(n.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn members_are_read_as_written() {
        let doc = r#" { "type" : "text_delta", "text":"a\n\"b\"\u00e9", "n": 12,
            "o": {"x": [1, {"y": null}]}, "e": {}, "l": [] , "t": true } "#;
        let got = all(doc);
        let want = [
            ("type", r#""text_delta""#),
            ("text", r#""a\n\"b\"\u00e9""#),
            ("n", "12"),
            ("o", r#"{"x": [1, {"y": null}]}"#),
            ("e", "{}"),
            ("l", "[]"),
            ("t", "true"),
        ];
        assert_eq!(
            got,
            want.map(|(n, v)| (n.to_string(), v.to_string())).to_vec()
        );
        assert!(all("{}").is_empty());
        assert!(all(" [1] ").is_empty());
        assert!(all("[DONE]").is_empty());
        assert!(all("").is_empty());
    }

    #[test]
    fn reading_stops_at_a_syntax_error() {
        assert_eq!(all(r#"{"a": 1, "b": tru}"#), [("a".into(), "1".into())]);
        assert_eq!(all(r#"{"a": "x"#), []);
        // A raw control character in a string is not JSON (and would break an SSE line).
        assert_eq!(
            all("{\"a\": 1, \"b\": \"x\ny\"}"),
            [("a".into(), "1".into())]
        );
        assert_eq!(all(r#"{"a" 1}"#), []);
    }

    #[test]
    fn elements_are_read_as_written() {
        let got: Vec<&[u8]> = elements(br#" [ {"a": [1]} , "x", 2 ,null]"#).collect();
        assert_eq!(got, [&br#"{"a": [1]}"#[..], b"\"x\"", b"2", b"null"]);
        assert_eq!(elements(b"[]").count(), 0);
        assert_eq!(elements(b"null").count(), 0);
        assert_eq!(elements(b"").count(), 0);
        assert_eq!(elements(b"[1, }").collect::<Vec<_>>(), [&b"1"[..]]);
    }

    #[test]
    fn picked_members() {
        let [kind, text, missing] = pick(
            br#"{"type":"text_delta","x":{"text":"no"},"text":"a","type":"last"}"#,
            [b"type", b"text", b"missing"],
        );
        assert_eq!(
            (kind, text, missing),
            (&br#""last""#[..], &br#""a""#[..], &b""[..])
        );
    }

    #[test]
    fn strings_and_numbers() {
        let s = RawStr::of(br#""a\n\"b\"\u00e9""#).unwrap();
        assert_eq!(s.value(), "a\n\"b\"é");
        assert_eq!(s.inner(), br#"a\n\"b\"\u00e9"#);
        assert!(!s.is_empty());
        assert!(RawStr::of(b"\"\"").unwrap().is_empty());
        assert_eq!(RawStr::of(b"null"), None);
        assert_eq!(RawStr::of(b"5"), None);
        assert_eq!(number(b"188086"), Some(188_086));
        assert_eq!(number(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(number(b"18446744073709551616"), None);
        for not in [&b"-1"[..], b"1.5", b"1e3", b"", b"null", b"\"7\""] {
            assert_eq!(number(not), None);
        }
    }

    #[test]
    fn numbers_in_decimal() {
        for n in [0, 7, 10, 1920, u64::MAX] {
            let mut out = b"x".to_vec();
            put(&mut out, &[Digits::of(n).get(), b"y"]);
            assert_eq!(out, format!("x{n}y").as_bytes());
        }
    }
}
