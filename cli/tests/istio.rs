//! `render --target istio`: the checked-in manifests in envoy/istio/rendered/ are exactly what
//! the renderer makes of envoy/istio/gateway.failover.yaml; every rendered manifest fits the
//! Istio API of the release it targets; what the renderer refuses.

use llm_failover_cli::istio::{self, Options};
use llm_failover_cli::istio_schema::Schema;
use llm_failover_cli::load;
use serde_yaml_ng::Value;
use std::path::{Path, PathBuf};

fn istio_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("envoy")
        .join("istio")
}

fn example() -> String {
    std::fs::read_to_string(istio_dir().join("gateway.failover.yaml")).unwrap()
}

fn render(text: &str, version: Option<&str>) -> Result<Vec<(&'static str, String)>, String> {
    let gw = load(text, &|_| None, None).map_err(|e| format!("{e:?}"))?;
    let opts: Options = istio::options(&gw, version, None).map_err(|e| {
        e.iter()
            .map(|d| d.render("f"))
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    istio::render_files(&gw, "gateway.failover.yaml", &opts).map_err(|e| format!("{e:?}"))
}

fn docs(text: &str) -> Vec<Value> {
    // The renderer separates documents with a line "---".
    format!("\n{text}")
        .split("\n---\n")
        .map(|d| serde_yaml_ng::from_str::<Value>(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn checked_in_manifests_equal_a_fresh_render() {
    let bless = std::env::var_os("LLM_FAILOVER_BLESS").is_some();
    let out = istio_dir().join("rendered");
    let mut stale = Vec::new();
    for (name, text) in render(&example(), None).unwrap() {
        let path = out.join(name);
        if bless {
            std::fs::create_dir_all(&out).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        if std::fs::read_to_string(&path).unwrap_or_default() != text {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "stale: {stale:?}; regenerate from the repository root with\n  \
         cargo run -q -p llm-failover-cli -- render --no-env envoy/istio/gateway.failover.yaml --target istio --out envoy/istio/rendered\n\
         (or: LLM_FAILOVER_BLESS=1 cargo test -p llm-failover-cli --test istio)"
    );
}

#[test]
fn every_rendered_manifest_fits_the_istio_api_of_its_release() {
    for version in istio::SUPPORTED_VERSIONS {
        let files = render(&example(), Some(version)).unwrap();
        let schema = Schema::for_release(version).unwrap();
        let manifests = docs(&files[0].1);
        let kinds: Vec<&str> = manifests
            .iter()
            .map(|m| m.get("kind").and_then(Value::as_str).unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "ServiceEntry",
                "DestinationRule",
                "ServiceEntry",
                "DestinationRule",
                "ServiceEntry",
                "DestinationRule",
                "Gateway",
                "VirtualService",
                "EnvoyFilter",
                "ConfigMap"
            ]
        );
        for m in &manifests {
            assert_eq!(schema.check_manifest(m), Vec::<String>::new());
        }
        let patch = docs(&files[1].1);
        assert_eq!(
            schema.check_deployment_patch(&patch[0]),
            Vec::<String>::new()
        );
    }
}

#[test]
fn the_structural_check_fails_on_a_misspelt_field_of_a_rendered_manifest() {
    let files = render(&example(), None).unwrap();
    let schema = Schema::for_release("1.31").unwrap();
    for (good, bad, says) in [
        (
            "    subjectAltNames:",
            "    subjectAltName:",
            "trafficPolicy.tls.subjectAltName: no such field in ClientTLSSettings",
        ),
        (
            "  workloadSelector:",
            "  workloadSelectors:",
            "spec.workloadSelectors: no such field in EnvoyFilterSpec",
        ),
        (
            "      routeConfiguration:",
            "      routeConfig:",
            "match.routeConfig: no such field in EnvoyConfigObjectMatch",
        ),
        (
            "applyTo: HTTP_ROUTE",
            "applyTo: HTTP_ROUTES",
            "applyTo: \"HTTP_ROUTES\" is not one of its values",
        ),
    ] {
        assert!(files[0].1.contains(good), "{good}");
        let text = files[0].1.replacen(good, bad, 1);
        let problems: Vec<String> = docs(&text)
            .iter()
            .flat_map(|m| schema.check_manifest(m))
            .collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains(says), "{problems:?}");
    }
    let patch = files[1].1.replacen("secretKeyRef", "secretRef", 1);
    let problems = schema.check_deployment_patch(&docs(&patch)[0]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("valueFrom.secretRef: no such field in EnvVarSource"));
}

#[test]
fn istio_1_30_is_refused_with_the_reason_and_unknown_releases_too() {
    let e = render(&example(), Some("1.30")).unwrap_err();
    assert!(
        e.contains("istio.version: Istio 1.30 runs Envoy 1.38"),
        "{e}"
    );
    assert!(e.contains("refresh_cluster_on_retry"), "{e}");
    let e = render(&example(), Some("1.2")).unwrap_err();
    assert!(e.contains("is not a supported Istio release"), "{e}");
}

#[test]
fn literal_keys_missing_module_and_unknown_fields_are_refused() {
    let text = example().replace(
        "credential: {header: x-api-key, env: ANTHROPIC_API_KEY}",
        "credential: {header: x-api-key, value: sk-ant-literal}",
    );
    let e = render(&text, None).unwrap_err();
    assert!(
        e.contains("providers[2].credential.value: a literal key would be written"),
        "{e}"
    );
    let text = example().replace(
        "  module: oci://ghcr.io/example/llm-failover:0.1.0",
        "  modul: x",
    );
    let e = render(&text, None).unwrap_err();
    assert!(e.contains("istio.modul: unknown field"), "{e}");
    assert!(e.contains("istio.module: missing"), "{e}");
    let text = example().replace(
        "oci://ghcr.io/example/llm-failover:0.1.0",
        "dist/llm_failover.wasm",
    );
    let e = render(&text, None).unwrap_err();
    assert!(e.contains("is not a URL istio-agent can fetch"), "{e}");
}

#[test]
fn providers_land_on_istio_cluster_names_in_both_roles_and_the_route() {
    let files = render(&example(), None).unwrap();
    let manifests = docs(&files[0].1);
    let ef = manifests
        .iter()
        .find(|m| m.get("kind").and_then(Value::as_str) == Some("EnvoyFilter"))
        .unwrap();
    let text = serde_json::to_string(ef).unwrap();
    for host in [
        "api.openai.com",
        "my-resource.openai.azure.com",
        "api.anthropic.com",
    ] {
        let cluster = format!("outbound|443||{host}");
        // plugin config of both roles (JSON inside a string) and the route's matcher.
        assert!(
            text.matches(&format!("\\\"cluster\\\":\\\"{cluster}\\\""))
                .count()
                == 2,
            "{host}"
        );
        assert!(
            text.contains(&format!("\"cluster\":\"{cluster}\"")),
            "{host}"
        );
    }
    // References accept the Wasm type only: no RBAC substitution can run in the module's place.
    assert!(!text.contains("rbac"));
    assert_eq!(
        text.matches(
            "\"type_urls\":[\"type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm\"]"
        )
        .count(),
        4
    );
    assert!(!text.contains("default_config"));
}

#[test]
fn one_host_reached_two_ways_is_refused_and_resource_names_stay_unique() {
    let two_ports = example().replace(
        "endpoint: api.anthropic.com:443",
        "endpoint: api.openai.com:8443\n    tls: true",
    );
    let e = render(&two_ports, None).unwrap_err();
    assert!(
        e.contains("providers[2].endpoint")
            && e.contains("reaches host api.openai.com like provider \\\"openai\\\""),
        "{e}"
    );
    // Same host and settings: one cluster, one ServiceEntry, both providers on it.
    let shared = example()
        .replace(
            "endpoint: api.anthropic.com:443",
            "endpoint: api.openai.com:443",
        )
        .replace("    connect_timeout: 3s\n", "");
    let files = render(&shared, None).unwrap();
    let kinds: Vec<String> = docs(&files[0].1)
        .iter()
        .map(|m| m.get("kind").and_then(Value::as_str).unwrap().to_string())
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "ServiceEntry").count(), 2);
    // Provider names that map to the same DNS label get numbered resource names.
    let clash = example()
        .replace("name: openai", "name: open.ai")
        .replace("name: azure", "name: open-ai")
        .replace("- openai\n", "- open.ai\n")
        .replace("- azure\n", "- open-ai\n")
        .replace("provider: openai", "provider: open.ai");
    let files = render(&clash, None).unwrap();
    let names: Vec<String> = docs(&files[0].1)
        .iter()
        .filter(|m| m.get("kind").and_then(Value::as_str) == Some("ServiceEntry"))
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "llm-failover-open-ai",
            "llm-failover-open-ai-2",
            "llm-failover-anthropic"
        ]
    );
}

#[test]
fn the_command_renders_istio_to_a_directory_and_validate_checks_the_istio_block() {
    let bin = env!("CARGO_BIN_EXE_llm-failover");
    let dir = std::env::temp_dir().join(format!("llm-failover-istio-{}", std::process::id()));
    let src = istio_dir().join("gateway.failover.yaml");
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .env_clear()
            .output()
            .unwrap()
    };
    let out = run(&[
        "render",
        src.to_str().unwrap(),
        "--target",
        "istio",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    for (name, text) in render(&example(), None).unwrap() {
        assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), text);
    }
    let _ = std::fs::remove_dir_all(&dir);
    // Without --out there are two files to write and nowhere to put them.
    let out = run(&["render", src.to_str().unwrap(), "--target", "istio"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["render", src.to_str().unwrap(), "--istio-version", "1.31"]);
    assert_eq!(out.status.code(), Some(2));

    let bad = dir.with_extension("bad.failover.yaml");
    std::fs::write(
        &bad,
        example().replace("  module: oci://", "  module: xoci://"),
    )
    .unwrap();
    let out = run(&["validate", bad.to_str().unwrap()]);
    let _ = std::fs::remove_file(&bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("istio.module:"));
}
