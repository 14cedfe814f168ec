//! Differential test: `read`'s `RawConfig` against serde's derived reading of the same model
//! (`derived.rs`, raw.rs as it was), over variants of a configuration that sets every field of
//! every section: the same value (`{:?}`) for what both accept, the same message (with its
//! line and column) and serde_path_to_error's same path for what both refuse.

mod derived;

use super::super::RawConfig;
use crate::config::error_path::tests::{broken_texts, variants};
use serde_json::Value;

/// Every section and field once, with values each reads (in declaration order: `json!` would
/// sort the members).
const EVERY_FIELD: &str = concat!(
    r#"{"role":"upstream","routing":"groups","hold_answers":false,"body_limit":1000,"#,
    r#""log_models":true,"ask_stream_usage":false,"providers":[{"name":"a","cluster":"ca","#,
    r#""models":["gpt*"],"credential":{"header":"authorization","value":"k","env":"E","#,
    r#""prefix":"Bearer "},"headers":{"x-h":"v"},"authority":"api.example.com","#,
    r#""path_prefix":"/v1","callers":["c"],"labels":{"l":"v"},"forward_headers":["x-a","x-b"],"#,
    r#""api":"openai","max_tokens":100,"residency":"eu","budget":{"tokens":5,"window":"24h"},"#,
    r#""reserve_tokens":2000},"#,
    r#"{"name":"b","forward_headers":"all"}],"chains":[{"name":"c","models":["*"],"#,
    r#""routes":["r"],"paths":["/v1/*"],"callers":["c"],"providers":["a",{"provider":"b","#,
    r#""model":"m","capabilities":{"vision":true,"tools":false,"context_window":1000},"#,
    r#""effort":"low","max_tokens":10},"b",{"group":["a",{"provider":"b"}],"#,
    r#""weights":[2,1],"policy":"weighted"}],"max_attempts":3,"#,
    r#""fallback_on":[429,"server_error",-1],"try_last":true,"fallbacks_exhausted":true,"#,
    r#""context_window":["b"],"content_policy":[{"provider":"a"}],"#,
    r#""retry_in_place":{"back_off":"1s","max_retry_after":"3s"},"same_residency":true,"hedge_after":"500ms"}],"#,
    r#""breaker":{"failures":3,"window":"30s","cooldown":"60s","max_cooldown":"5m","#,
    r#""fleet_failures":20,"fleet_window":"1m"},"#,
    r#""dead_marks":{"model_not_found":"6h","setup_fault":"1h","quota_exhausted":"1500ms","#,
    r#""rate_limited_ahead":"30s"},"#,
    r#""timeouts":{"attempt":"120s","stall":0,"budget":"300s","min_remaining":"10s","#,
    r#""first_token":"2s"},"opt_out_header":"x-llm-fallback","caller_header":"x-caller","#,
    r#""gateway_credential_headers":["authorization"],"status_path":"/status","#,
    r#""models_path":"/v1/models","liveness_path":"/live","fleet":{"address":"127.0.0.1:8081","#,
    r#""cluster":"rl","domain":"d","sync":"1s","timeout":"200ms","on_unavailable":"open"},"#,
    r#""callers":[{"name":"c","budget":{"tokens":7,"window":"1h"}},{"name":"d"}]}"#
);

/// Both readings of `text`: the value printed, or the error with serde_path_to_error's path.
fn both(text: &[u8]) -> (String, String) {
    fn one<T: for<'de> serde::Deserialize<'de> + std::fmt::Debug>(text: &[u8]) -> String {
        let plain = match serde_json::from_slice::<T>(text) {
            Ok(v) => return format!("{v:?}"),
            Err(e) => e.to_string(),
        };
        let de = &mut serde_json::Deserializer::from_slice(text);
        let path = match serde_path_to_error::deserialize::<_, T>(&mut *de) {
            Ok(_) => String::new(),
            Err(e) => e.path().to_string(),
        };
        format!("{path}: {plain}")
    }
    (one::<RawConfig>(text), one::<derived::RawConfig>(text))
}

#[test]
fn read_gives_what_serdes_derive_gave() {
    let mut values = Vec::new();
    variants(
        &serde_json::from_str::<Value>(EVERY_FIELD).unwrap(),
        &mut values,
    );
    let mut texts: Vec<Vec<u8>> = Vec::new();
    for v in &values {
        texts.push(serde_json::to_vec(v).unwrap());
    }
    let compact = EVERY_FIELD;
    broken_texts(compact, &mut texts);
    texts.push(compact.as_bytes().to_vec());
    // Sections written as sequences (serde's derive reads a struct from one), short and long;
    // unknown, misspelt and doubled members; the two untagged lists' odd values.
    for (from, to) in [
        (r#""name":"a""#, r#""name":"a","name":"a""#),
        (r#""failures":3"#, r#""failures":3,"failures":4"#),
        (r#""role":"upstream""#, r#""role":{"upstream":null}"#),
        (r#""role":"upstream""#, r#""role":"up""#),
        (r#""routing":"groups""#, r#""routing":5"#),
        (r#""max_attempts":3"#, r#""max_attempts":1e400"#),
        (r#""max_attempts":3"#, r#""max_attempts":4294967296"#),
        (r#""body_limit":1000"#, r#""body_limit":-1e400"#),
        (r#""forward_headers":"all""#, r#""forward_headers":[[[1]]]"#),
        (
            r#""forward_headers":"all""#,
            r#""forward_headers":["a",1,"b"]"#,
        ),
        (
            r#""forward_headers":"all""#,
            r#""forward_headers":["a",{"b":[1e400]}]"#,
        ),
        (r#""forward_headers":"all""#, r#""forward_headers":[]"#),
        (r#""forward_headers":"all""#, r#""forward_headers":null"#),
        (
            r#""forward_headers":"all""#,
            r#""forward_headers":{"a":"b"}"#,
        ),
        (
            r#""forward_headers":"all""#,
            r#""forward_headers":["a\u0062"]"#,
        ),
        (
            r#""forward_headers":"all""#,
            r#""forward_headers":["a" , "b" ] "#,
        ),
        (r#"429,"#, r#"18446744073709551615,"#),
        (r#"429,"#, r#"9223372036854775807,"#),
        (r#"429,"#, r#"-9223372036854775809,"#),
        (r#"429,"#, r#"4.0,"#),
        (r#"429,"#, r#"[429],"#),
        (r#"429,"#, r#"{"a":[1,2]} ,"#),
        (r#"429,"#, r#"null,"#),
        (r#""fallback_on":["#, r#""fallback_on":null,"x":["#),
        (
            r#"{"failures":3,"window":"30s","cooldown":"60s","max_cooldown":"5m","fleet_failures":20,"fleet_window":"1m"}"#,
            r#"[3,"30s"]"#,
        ),
        (
            r#"{"failures":3,"window":"30s","cooldown":"60s","max_cooldown":"5m","fleet_failures":20,"fleet_window":"1m"}"#,
            r#"[3,"30s","60s","5m",7,"1m",9]"#,
        ),
        (r#"{"tokens":5,"window":"24h"}"#, r#"[5,"24h"]"#),
        (r#"{"tokens":5,"window":"24h"}"#, r#"[5]"#),
        (r#"{"tokens":5,"window":"24h"}"#, r#"[]"#),
        (r#"{"provider":"a"}"#, r#"{"provider":"a","provider":"b"}"#),
        (r#"{"provider":"a"}"#, r#"{}"#),
        (r#"{"provider":"a"}"#, r#"{"model":null}"#),
        (r#"{"name":"b","forward_headers":"all"}"#, r#"["b"]"#),
        (r#"{"name":"b","forward_headers":"all"}"#, r#"[]"#),
        (
            r#"{"name":"b","forward_headers":"all"}"#,
            r#"["b",null,["x"]]"#,
        ),
        (r#""back_off":"1s","#, r#""#),
        (r#""retry_in_place":{"#, r#""retry_in_place":null,"y":{"#),
        (r#""capabilities":{"#, r#""capabilities":[true],"z":{"#),
        (r#""x-h":"v""#, r#""x-h":"v","x\u0068":5"#),
        (r#""x-h":"v""#, r#""x-h":"v","x-h":"w""#),
        (r#""role":"upstream","#, r#""#),
        (r#""domain":"d","#, r#""domain":5,"#),
        (r#""sync":"1s","#, r#""sync":"soon","#),
        (r#""fleet":{"#, r#""fleet":null,"f":{"#),
        (r#""cluster":"rl","#, r#""cluster":"rl","port":1,"#),
    ] {
        assert!(compact.contains(from), "{from}");
        texts.push(compact.replacen(from, to, 1).into_bytes());
    }
    // The whole configuration as a sequence of its fields.
    texts.push(
        br#"["downstream","slots",true,null,false,true,[{"name":"a"}],[{"name":"c","providers":["a"]}]]"#
            .to_vec(),
    );
    texts.push(br#"["downstream","slots",true,null,false,true,[{"name":"a"}]]"#.to_vec());
    let (mut accepted, mut refused, mut differ) = (0, 0, Vec::new());
    for text in &texts {
        let (read, derived) = both(text);
        if read.starts_with("RawConfig {") {
            accepted += 1;
        } else {
            refused += 1;
        }
        if read != derived {
            differ.push(format!(
                "{}\n  read:    {read}\n  derived: {derived}",
                String::from_utf8_lossy(text)
            ));
        }
    }
    assert!(accepted > 100 && refused > 5000, "{accepted} {refused}");
    assert!(
        differ.is_empty(),
        "{} of {} differ:\n{}",
        differ.len(),
        texts.len(),
        differ[..differ.len().min(20)].join("\n")
    );
}
