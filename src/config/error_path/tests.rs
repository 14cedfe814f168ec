//! Differential test: the field paths of `error_path::of` against serde_path_to_error (the
//! oracle), over broken variants of a configuration that sets every field.

use super::super::RawConfig;
use serde_json::{json, Value};

fn full() -> Value {
    json!({
        "role": "downstream", "routing": "slots", "hold_answers": true, "body_limit": 1000,
        "providers": [
            {"name": "a", "cluster": "ca", "models": ["gpt*"],
             "credential": {"header": "authorization", "value": "k", "env": "E", "prefix": "Bearer "},
             "headers": {"x-h": "v"}, "authority": "api.example.com", "path_prefix": "/v1",
             "callers": ["c"], "labels": {"l": "v"}, "forward_headers": ["x-a", "x-b"]},
            {"name": "b", "forward_headers": "all"}
        ],
        "chains": [{
            "name": "c", "models": ["*"], "routes": ["r"], "paths": ["/v1/*"], "callers": ["c"],
            "providers": ["a", {"provider": "b", "model": "m"}, "b"], "max_attempts": 3,
            "fallback_on": [429, "server_error"], "try_last": false, "fallbacks_exhausted": true,
            "context_window": ["b"], "content_policy": [{"provider": "a"}]
        }],
        "breaker": {"failures": 3, "window": "30s", "cooldown": "60s", "max_cooldown": "5m"},
        "dead_marks": {"model_not_found": "6h", "setup_fault": "1h", "quota_exhausted": "1h"},
        "timeouts": {"attempt": "120s", "stall": 0, "budget": "300s", "min_remaining": "10s"},
        "opt_out_header": "x-llm-fallback", "caller_header": "x-caller",
        "gateway_credential_headers": ["authorization"], "status_path": "/status",
        "models_path": "/v1/models"
    })
}

const WRONG: &[&str] = &[
    "5",
    "-1",
    "1.5",
    "99999999999",
    "\"x\"",
    "\"\"",
    "true",
    "null",
    "[]",
    "[1]",
    "[\"x\"]",
    "[[1]]",
    "[{}]",
    "{}",
    "{\"a\":1}",
];

/// Every variant of `v` with one node changed: each value replaced by each of [`WRONG`], each
/// member misspelt or left out.
pub(in crate::config) fn variants(v: &Value, out: &mut Vec<Value>) {
    fn walk(v: &Value, rebuild: &dyn Fn(Value) -> Value, out: &mut Vec<Value>) {
        for w in WRONG {
            out.push(rebuild(serde_json::from_str(w).unwrap()));
        }
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let mut misspelt = m.clone();
                    let value = misspelt.remove(k).unwrap();
                    let mut missing = misspelt.clone();
                    misspelt.insert(format!("{k}x"), value);
                    out.push(rebuild(Value::Object(misspelt)));
                    missing.remove(k);
                    out.push(rebuild(Value::Object(missing)));
                    let (k, m) = (k.clone(), m.clone());
                    walk(
                        child,
                        &|c| {
                            let mut m = m.clone();
                            m.insert(k.clone(), c);
                            rebuild(Value::Object(m))
                        },
                        out,
                    );
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    let a = a.clone();
                    walk(
                        child,
                        &|c| {
                            let mut a = a.clone();
                            a[i] = c;
                            rebuild(Value::Array(a))
                        },
                        out,
                    );
                }
            }
            _ => {}
        }
    }
    walk(v, &|v| v, out);
}

/// Text variants: the text cut at every byte, and each byte left out, doubled, or followed by
/// a stray `x`, `,`, `}` or `]`.
pub(in crate::config) fn broken_texts(text: &str, out: &mut Vec<Vec<u8>>) {
    let b = text.as_bytes();
    for i in 0..b.len() {
        out.push(b[..i].to_vec());
        let mut cut = b.to_vec();
        cut.remove(i);
        out.push(cut);
        for extra in [b[i], b'x', b',', b'}', b']'] {
            let mut added = b.to_vec();
            added.insert(i, extra);
            out.push(added);
        }
    }
}

fn oracle(text: &[u8]) -> Result<(), (String, String)> {
    let de = &mut serde_json::Deserializer::from_slice(text);
    serde_path_to_error::deserialize::<_, RawConfig>(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        (path, e.to_string())
    })?;
    // What `serde_json::from_slice` adds: nothing but whitespace after the value.
    de.end().map_err(|e| (String::new(), e.to_string()))
}

/// serde_path_to_error's path as `of` words it: `?` (an unread member name) left out.
fn normalised(path: &str) -> String {
    let path = path.replace(".?", "");
    match path.as_str() {
        "." | "?" => String::new(),
        _ => path,
    }
}

#[test]
fn field_paths_match_serde_path_to_error() {
    let mut values = Vec::new();
    variants(&full(), &mut values);
    let mut texts: Vec<Vec<u8>> = Vec::new();
    for v in &values {
        texts.push(serde_json::to_vec(v).unwrap());
        texts.push(serde_json::to_vec_pretty(v).unwrap());
    }
    let compact = serde_json::to_string(&full()).unwrap();
    broken_texts(&compact, &mut texts);
    broken_texts(&serde_json::to_string_pretty(&full()).unwrap(), &mut texts);
    for (from, to) in [
        ("\"name\":\"a\"", "\"name\":\"a\",\"name\":\"a\""),
        ("\"failures\":3", "\"failures\":3,\"failures\":4"),
        ("\"role\":\"downstream\"", "\"role\":\"down\""),
        ("\"role\":\"downstream\"", "\"role\":{\"x\":1}"),
        ("\"routing\":\"slots\"", "\"routing\":5"),
        ("\"max_attempts\":3", "\"max_attempts\":1e400"),
        ("\"body_limit\":1000", "\"body_limit\":-1e400"),
        ("\"forward_headers\":\"all\"", "\"forward_headers\":[[[1]]]"),
        ("\"x-h\":\"v\"", "\"x-h\":\"v\",\"x\\u0068\":5"),
    ] {
        texts.push(compact.replacen(from, to, 1).into_bytes());
    }
    let (mut checked, mut mismatches) = (0, Vec::new());
    for text in &texts {
        let plain = serde_json::from_slice::<RawConfig>(text);
        let Err((want, problem)) = oracle(text) else {
            assert!(plain.is_ok(), "{}", String::from_utf8_lossy(text));
            continue;
        };
        let e = plain.expect_err("the oracle refused it");
        assert_eq!(e.to_string(), problem);
        let got = super::of(text, &e);
        let want = normalised(&want);
        checked += 1;
        if got == want {
            continue;
        }
        // `"window": [[1]]`: refused as a whole after its `[` was read, which is where an
        // element `[` is refused too: the path names the first element.
        if problem.contains("expected a duration") && got == format!("{want}[0]") {
            continue;
        }
        let at = super::byte_offset(text, e.line(), e.column());
        let around =
            String::from_utf8_lossy(&text[at.saturating_sub(40)..(at + 10).min(text.len())]);
        mismatches.push(format!(
            "{:?} ^ {:?}\n  want {want:?}, got {got:?}: {problem}",
            &around[..around.len().min(40)],
            &around[around.len().min(40)..],
        ));
    }
    assert!(checked > 5000, "{checked}");
    assert!(
        mismatches.is_empty(),
        "{} of {checked} differ:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
