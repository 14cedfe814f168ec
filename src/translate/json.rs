//! JSON for the non-streamed translators: read lazily, written by hand.
//!
//! Reading: an object is its members as raw text ([`Obj`]); a member is read (as a string, an
//! array, an object, a number) only when the translation asks for it, and most strings are
//! copied into the output as they were written, escapes included, never unescaped and escaped
//! again. Every read goes through three serde instances (an object's members, an array's
//! elements, a string), shared by every field of both APIs, over the byte reader
//! (`from_slice`) the rest of the module already uses (a `str` reader would be a second copy
//! of serde_json's parser).
//!
//! Every reader and writer here is a call, never inlined: the translators make hundreds of
//! them, and inlined at this crate's opt-level 3 they made the module 90 KB larger.
//!
//! Why not typed structs with derived serde code: one derived reader per wire type, inlined at
//! this crate's opt-level 3, made the two directions 165 KB of module (measured: 416,366 ->
//! 581,728 bytes); nor `serde_json::Value`: its float printer and a tree per body, where the
//! translation reads a few members and copies the rest as text.

use std::borrow::Cow;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON value as written.
pub type Raw<'a> = &'a RawValue;

/// The members of a JSON object, their values unread.
#[derive(Debug, Default)]
pub struct Obj<'a>(Vec<(Cow<'a, str>, Raw<'a>)>);

impl<'a> Obj<'a> {
    /// The object a text holds (`None`: not JSON, or not an object).
    #[inline(never)]
    pub fn parse(text: &'a str) -> Option<Obj<'a>> {
        if !text.trim_start().starts_with('{') {
            return None;
        }
        serde_json::from_slice(text.as_bytes()).ok()
    }

    /// The object a body holds.
    #[inline(never)]
    pub fn parse_bytes(body: &'a [u8]) -> Option<Obj<'a>> {
        Obj::parse(std::str::from_utf8(body).ok()?)
    }

    /// A member's value; `None` when absent or `null`.
    #[inline(never)]
    pub fn get(&self, key: &str) -> Option<Raw<'a>> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|&(_, v)| v)
            .filter(|v| v.get() != "null")
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
        self.get(key).and_then(|v| v.get().parse().ok())
    }

    #[inline(never)]
    pub fn bool(&self, key: &str) -> Option<bool> {
        match self.get(key).map(RawValue::get) {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        }
    }

    #[inline(never)]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
    unescape(raw.get())
}

/// The value of a JSON string's text (quotes included).
#[inline(never)]
pub fn unescape(text: &str) -> Option<Cow<'_, str>> {
    if !text.starts_with('"') {
        return None;
    }
    serde_json::from_slice::<Text<'_>>(text.as_bytes())
        .ok()
        .map(|t| t.0)
}

/// A string as written, quotes included (`None`: not a string).
#[inline(never)]
pub fn raw_str(raw: Raw<'_>) -> Option<&str> {
    Some(raw.get()).filter(|t| t.starts_with('"'))
}

#[inline(never)]
pub fn obj(raw: Raw<'_>) -> Option<Obj<'_>> {
    Obj::parse(raw.get())
}

#[inline(never)]
pub fn arr(raw: Raw<'_>) -> Option<Vec<Raw<'_>>> {
    if !raw.get().starts_with('[') {
        return None;
    }
    serde_json::from_slice(raw.get().as_bytes()).ok()
}

/// The empty string as written.
pub const EMPTY: &str = "\"\"";

/// A string's value, borrowed from the text when it holds no escape.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Obj<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Obj<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Obj<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    members.push((key.0, map.next_value::<Raw<'de>>()?));
                }
                Ok(Obj(members))
            }
        }
        d.deserialize_map(V)
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

    /// A string, escaped.
    #[inline(never)]
    pub fn str(&mut self, s: &str) -> &mut Out {
        self.sep();
        self.0.reserve(s.len() + 2);
        self.0.push(b'"');
        let mut start = 0;
        for (i, b) in s.bytes().enumerate() {
            let escape: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0..=0x1f => b"",
                _ => continue,
            };
            self.0
                .extend_from_slice(s.as_bytes().get(start..i).unwrap_or_default());
            if escape.is_empty() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                self.0.extend_from_slice(b"\\u00");
                self.0
                    .push(HEX.get(usize::from(b >> 4)).copied().unwrap_or(b'0'));
                self.0
                    .push(HEX.get(usize::from(b & 15)).copied().unwrap_or(b'0'));
            } else {
                self.0.extend_from_slice(escape);
            }
            start = i + 1;
        }
        self.0
            .extend_from_slice(s.as_bytes().get(start..).unwrap_or_default());
        self.0.push(b'"');
        self
    }

    #[inline(never)]
    pub fn num(&mut self, n: u64) -> &mut Out {
        self.sep();
        super::raw_json::push_number(&mut self.0, n);
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
    }

    #[test]
    fn output_is_json_with_commas_where_they_belong() {
        let mut out = Out::default();
        out.open()
            .key("a")
            .str("q\"\\\n\r\t\u{1}é")
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
            r#"{"a":"q\"\\\n\r\t\u0001é","b":[1,{},"x",null,false],"c":{}}"#
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["a"], "q\"\\\n\r\t\u{1}é");
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
}
