//! `render --runtime native`: the dynamic-module filters in place of the wasm ones, and a
//! refusal, with its reason, wherever the native module cannot load.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::process::Command;

const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../envoy/demo.failover.yaml");

/// Exit code, standard output and standard error of `render DEMO <args>`.
fn render(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_llm-failover"))
        .arg("render")
        .arg(DEMO)
        .args(args)
        .env_clear()
        .output()
        .expect("runs");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
    )
}

#[test]
fn native_renders_the_dynamic_module_in_both_roles_and_nothing_else_changes() {
    let (code, native, stderr) =
        render(&["--runtime", "native", "--module", "/srv/libllm_failover.so"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, wasm, stderr) = render(&[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!native.contains("envoy.extensions.filters.http.wasm.v3.Wasm"));
    assert!(!native.contains(".wasm"));
    let filters = native
        .matches("dynamic_modules.v3.DynamicModuleFilter")
        .count();
    // The downstream filter and one upstream filter per provider cluster (3 in the demo).
    assert_eq!(filters, 4, "{native}");
    assert_eq!(
        native.matches("filename: /srv/libllm_failover.so").count(),
        4
    );
    assert_eq!(
        wasm.matches("envoy.extensions.filters.http.wasm.v3.Wasm")
            .count(),
        4
    );
    // The same routes (slots in filter state under the same names).
    let route =
        |t: &str| t[t.find("route_config").unwrap()..t.find("http_filters").unwrap()].to_string();
    assert_eq!(route(&native), route(&wasm));
}

#[test]
fn native_is_refused_where_it_cannot_load_naming_why() {
    for version in ["1.39", "1.38", "1.42"] {
        let (code, stdout, stderr) = render(&["--runtime", "native", "--envoy-version", version]);
        assert_eq!(code, 1, "{version}: {stderr}");
        assert!(stdout.is_empty());
        assert!(
            stderr.contains(&format!("Envoy {version} cannot load the native module")),
            "{stderr}"
        );
        assert!(stderr.contains("1.40 and 1.41"), "{stderr}");
        assert!(stderr.contains("--runtime wasm"), "{stderr}");
    }
    let (code, _, stderr) = render(&["--runtime", "native", "--envoy-version", "1.41"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = render(&["--runtime", "native", "--target", "istio"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("Istio loads the wasm module"), "{stderr}");
}

#[test]
fn native_renders_the_fleet_with_its_http2_rate_limit_cluster() {
    // The native module's sync is an HTTP/2 stream from the filter configuration to the
    // rate-limit service's cluster (docs/internals.md "The native build").
    let fleet = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../envoy/fleet-demo.failover.yaml"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_llm-failover"))
        .args(["render", fleet, "--runtime", "native"])
        .args(["--module", "/srv/libllm_failover.so"])
        .env_clear()
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cluster = &stdout[stdout.find("- name: llm_failover_fleet").unwrap()..];
    assert!(cluster.contains("http2_protocol_options"), "{cluster}");
    assert!(stdout.contains("dynamic_modules.v3.DynamicModuleFilter"));
    assert!(
        stdout.contains(r#""fleet":{"address":"127.0.0.1:18081""#),
        "{stdout}"
    );
}
