//! Host-only tests of `rewrite`: property tests and threads.

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
