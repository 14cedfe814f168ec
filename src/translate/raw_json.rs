//! A provider's JSON read in place, for the stream translators: the members of an object as
//! (name, value as written), values validated by the request scanner's tokenizer
//! (`rewrite::Scanner`), strings kept with their quotes and escapes and copied into the caller's
//! JSON as they are, so a text delta is never unescaped and escaped again.
//!
//! Not serde: derived deserializers for the events' types, compiled at this crate's opt-level,
//! made the module 66 KB larger; this walker is one small non-generic function. Member names
//! are compared as written (providers do not escape them).

use crate::rewrite::{unescape, Scanner};

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

impl<'a> Iterator for Members<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        self.0.next().map(|(_, value)| value)
    }
}

/// One object's members or one array's elements, in order.
struct Walk<'a> {
    scan: Scanner<'a>,
    /// `{` or `[`, before the first item; then `,`.
    delimiter: u8,
    /// An object's members (names before values), not an array's elements.
    named: bool,
    done: bool,
}

impl<'a> Walk<'a> {
    fn new(json: &'a [u8], open: u8) -> Walk<'a> {
        Walk {
            scan: Scanner::new(json),
            delimiter: open,
            named: open == b'{',
            done: false,
        }
    }

    fn next(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        if self.done {
            return None;
        }
        let item = self.item();
        self.done = item.is_none();
        item
    }

    /// The next member (name, value) or element (empty name, value).
    fn item(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        let s = &mut self.scan;
        s.skip_ws();
        let (opening, named) = (self.delimiter != b',', self.named);
        if s.peek() != Some(self.delimiter) {
            return None; // the end, or not the container expected
        }
        s.i += 1;
        s.skip_ws();
        if opening {
            if s.peek() == Some(if named { b'}' } else { b']' }) {
                return None; // empty
            }
            self.delimiter = b',';
        }
        let mut name: &[u8] = b"";
        if named {
            let at = s.i;
            s.string().ok()?;
            name = s.b.get(at + 1..s.i.saturating_sub(1))?;
            s.skip_ws();
            if s.peek() != Some(b':') {
                return None;
            }
            s.i += 1;
            s.skip_ws();
        }
        let at = s.i;
        s.value().ok()?;
        Some((name, s.b.get(at..s.i)?))
    }
}

/// The values of the members `names` of the object `json`, as written, in one pass (empty
/// where absent; a repeated member counts by its last occurrence).
pub fn pick<'a, const N: usize>(json: &'a [u8], names: [&[u8]; N]) -> [&'a [u8]; N] {
    let mut found = [&b""[..]; N];
    for (name, value) in members(json) {
        if let Some(slot) = names
            .iter()
            .position(|n| *n == name)
            .and_then(|i| found.get_mut(i))
        {
            *slot = value;
        }
    }
    found
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

    /// The string's value (escapes read).
    pub fn value(self) -> String {
        let inner = std::str::from_utf8(self.inner()).unwrap_or_default();
        let mut text = String::with_capacity(inner.len());
        let _ = unescape(inner, |c| {
            text.push(c);
            true
        });
        text
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

/// Writes `n` in decimal.
pub fn push_number(out: &mut Vec<u8>, n: u64) {
    put(out, &[Digits::of(n).get()]);
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

#[cfg(test)]
mod tests {
    use super::*;

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
