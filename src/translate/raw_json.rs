//! Pieces of a provider's JSON read without copying, for the stream translators: strings are
//! kept as written (quotes and escapes included) and copied into the caller's JSON as they are,
//! so a text delta is never unescaped and escaped again.

use serde::de::{Deserialize, Deserializer, Error, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON string exactly as written, quotes included (`"Hi \"you\""`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStr<'a>(pub &'a str);

impl RawStr<'_> {
    /// The empty string `""`.
    pub fn is_empty(self) -> bool {
        self.0 == "\"\""
    }

    /// Whether the string holds only bytes from `allowed` (no escapes either): it can be used
    /// as it is where the target restricts it.
    pub fn only(self, allowed: impl Fn(u8) -> bool) -> bool {
        let inner = self.0.get(1..self.0.len().saturating_sub(1)).unwrap_or("");
        inner.bytes().all(allowed)
    }

    /// The string's value (escapes read).
    pub fn value(self) -> String {
        serde_json::from_str(self.0).unwrap_or_default()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(d)?.get();
        if raw.starts_with('"') {
            Ok(RawStr(raw))
        } else {
            Err(D::Error::custom("expected a string"))
        }
    }
}

/// The first element of a JSON array, the others read and skipped (OpenAI's `choices`, of
/// which a translated request asks for one): no vector is built.
#[derive(Debug)]
pub struct First<T>(pub Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Elements<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Elements<T> {
            type Value = First<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<First<T>, A::Error> {
                let first = seq.next_element::<T>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(First(first))
            }
        }
        d.deserialize_seq(Elements(std::marker::PhantomData))
    }
}

/// Writes `n` in decimal.
pub fn push_number(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        if let Some(d) = digits.get_mut(at) {
            *d = b'0' + (rest % 10) as u8;
        }
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(at..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Doc<'a> {
        #[serde(borrow)]
        s: Option<RawStr<'a>>,
        list: Option<First<u32>>,
    }

    #[test]
    fn strings_are_kept_as_written() {
        let doc: Doc = serde_json::from_slice(br#"{"s": "a\n\"b\"\u00e9"}"#).unwrap();
        let s = doc.s.unwrap();
        assert_eq!(s.0, r#""a\n\"b\"\u00e9""#);
        assert_eq!(s.value(), "a\n\"b\"é");
        assert!(!s.is_empty());
        assert!(!s.only(|b| b.is_ascii_alphanumeric()));
        let doc: Doc = serde_json::from_slice(br#"{"s": "call_1"}"#).unwrap();
        assert!(doc
            .s
            .unwrap()
            .only(|b| b.is_ascii_alphanumeric() || b == b'_'));
        let doc: Doc = serde_json::from_slice(br#"{"s": ""}"#).unwrap();
        assert!(doc.s.unwrap().is_empty());
        let doc: Doc = serde_json::from_slice(br#"{"s": null}"#).unwrap();
        assert_eq!(doc.s, None);
        assert!(serde_json::from_slice::<Doc>(br#"{"s": 5}"#).is_err());
    }

    #[test]
    fn only_the_first_element_is_kept() {
        let doc: Doc = serde_json::from_slice(br#"{"list": [7, {"x": [1]}, "y"]}"#).unwrap();
        assert_eq!(doc.list.unwrap().0, Some(7));
        let doc: Doc = serde_json::from_slice(br#"{"list": []}"#).unwrap();
        assert_eq!(doc.list.unwrap().0, None);
        assert!(serde_json::from_slice::<Doc>(br#"{"list": {}}"#).is_err());
    }

    #[test]
    fn numbers_in_decimal() {
        for n in [0, 7, 10, 1920, u64::MAX] {
            let mut out = b"x".to_vec();
            push_number(&mut out, n);
            assert_eq!(out, format!("x{n}").as_bytes());
        }
    }
}
