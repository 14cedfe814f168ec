//! No input makes `load` or the renderer panic: every failure is a message.

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use llm_failover_cli::{load, render};
use proptest::prelude::*;

const DEMO: &str = include_str!("../../envoy/demo.failover.yaml");
const REAL: &str = include_str!("../../envoy/openai-anthropic.failover.yaml");

fn exercise(text: &str) {
    let env = |k: &str| (k == "SET").then(|| "18101".to_string());
    if let Ok(gw) = load(text, &env, None) {
        let _ = render::bootstrap_text(&gw, "x.failover.yaml");
        let _ = render::pieces(&gw, "x.failover.yaml");
        let _ = llm_failover_cli::env_warnings(&gw, &env);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text(text in "\\PC{0,300}") {
        exercise(&text);
    }

    #[test]
    fn examples_with_bytes_cut_or_inserted(
        which in any::<bool>(), at in any::<prop::sample::Index>(), len in 0usize..40,
        insert in prop::sample::select(vec!["", ":", "{", "}", "[", "-", "\n", "${", "${SET}", "${X:-", "'", "\"", "*", " ", "0", "-1", "99999999999999999999", "null", "!!binary", "<<: *a", "&a", "\t"]),
    ) {
        let base = if which { DEMO } else { REAL };
        let mut cut = at.index(base.len());
        while !base.is_char_boundary(cut) { cut -= 1; }
        let mut end = (cut + len).min(base.len());
        while !base.is_char_boundary(end) { end -= 1; }
        let text = format!("{}{}{}", &base[..cut], insert, &base[end..]);
        exercise(&text);
    }

    #[test]
    fn renderer_fields_with_any_value(
        endpoint in "\\PC{0,30}", port in any::<i64>(), size in "\\PC{0,12}", timeout in "\\PC{0,8}",
        tls in prop::sample::select(vec!["true", "false", "1", "yes", "~", "[]"]), attempts in any::<i64>(),
    ) {
        let text = format!(
            "listen: {{port: {port}}}\nmax_request_body: {size:?}\nproviders:\n  - {{name: a, endpoint: {endpoint:?}, tls: {tls}, connect_timeout: {timeout:?}}}\nchains: [{{name: c, providers: [a], max_attempts: {attempts}}}]\n"
        );
        exercise(&text);
    }
}
