//! `render --target istio`: the checked-in manifests in envoy/istio/rendered/ are exactly what
//! the renderer makes of envoy/istio/gateway.failover.yaml; every rendered manifest fits the
//! Istio API of the release it targets; what the renderer refuses.

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use llm_failover_cli::istio;
use llm_failover_cli::istio_schema::Schema;
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
    let (gw, opts) = istio::load(text, &|_| None, None, None, version).map_err(|e| {
        e.iter()
            .map(|d| d.render("f"))
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    istio::render_files(&gw, "gateway.failover.yaml", &opts).map_err(|e| format!("{e:?}"))
}

/// The one EnvoyFilter of a render, and its patches.
fn envoy_filter(files: &[(&'static str, String)]) -> Value {
    docs(&files[0].1)
        .into_iter()
        .find(|m| m.get("kind").and_then(Value::as_str) == Some("EnvoyFilter"))
        .unwrap()
}

fn patches<'a>(ef: &'a Value, apply_to: &str) -> Vec<&'a Value> {
    ef["spec"]["configPatches"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|p| p["applyTo"].as_str() == Some(apply_to))
        .collect()
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
    // The file's release (1.31, router mode) and Istio 1.30 (grouping mode).
    for (version, dir) in [(None, "rendered"), (Some("1.30"), "rendered-1.30")] {
        let out = istio_dir().join(dir);
        let mut stale = Vec::new();
        for (name, text) in render(&example(), version).unwrap() {
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
        let flag = version.map_or(String::new(), |v| format!(" --istio-version {v}"));
        assert!(
            stale.is_empty(),
            "{dir}: stale: {stale:?}; regenerate from the repository root with\n  \
             cargo run -q -p llm-failover-cli -- render --no-env envoy/istio/gateway.failover.yaml --target istio{flag} --out envoy/istio/{dir}\n\
             (or: LLM_FAILOVER_BLESS=1 cargo test -p llm-failover-cli --test istio)"
        );
    }
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
        let providers = [
            "ServiceEntry",
            "DestinationRule",
            "ServiceEntry",
            "DestinationRule",
            "ServiceEntry",
            "DestinationRule",
        ];
        // Istio 1.30: the EnvoyFilter adds the providers' clusters itself.
        let providers: &[&str] = if version == "1.30" { &[] } else { &providers };
        let rest = ["Gateway", "VirtualService", "EnvoyFilter", "ConfigMap"];
        assert_eq!(kinds, [providers, &rest].concat(), "{version}");
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
fn unknown_releases_are_refused() {
    let e = render(&example(), Some("1.2")).unwrap_err();
    assert!(e.contains("is not a supported Istio release"), "{e}");
    let e = render(&example(), Some("1.29")).unwrap_err();
    assert!(e.contains("use one of 1.30, 1.31, 1.32"), "{e}");
}

#[test]
fn an_envoy_version_that_is_not_the_istio_releases_envoy_is_refused_naming_the_field() {
    let with = |v: &str| format!("envoy_version: \"{v}\"\n{}", example());
    for (envoy, istio_version) in [
        ("1.38", None),
        ("1.39", Some("1.30")),
        ("1.40", Some("1.31")),
    ] {
        let e = render(&with(envoy), istio_version).unwrap_err();
        let release = istio_version.unwrap_or("1.31");
        assert!(
            e.starts_with(&format!(
                "f: envoy_version: is {envoy} but Istio {release} runs Envoy"
            )),
            "{e}"
        );
    }
    // The release's own Envoy is accepted, and renders what leaving it out renders.
    for (release, envoy) in istio::RELEASES {
        assert_eq!(
            render(&with(envoy), Some(release)).unwrap(),
            render(&example(), Some(release)).unwrap(),
            "{release}"
        );
    }
    // --envoy-version is checked the same way, named as the flag.
    let e = istio::load(&example(), &|_| None, None, Some("1.40"), Some("1.30")).unwrap_err();
    assert_eq!(e[0].field, "--envoy-version");
    assert!(
        e[0].problem.contains("Istio 1.30 runs Envoy 1.38"),
        "{:?}",
        e[0]
    );
}

#[test]
fn istio_1_30_gets_grouping_mode_from_added_clusters_and_a_plain_merge() {
    let files = render(&example(), Some("1.30")).unwrap();
    let ef = envoy_filter(&files);
    // No operation 1.30 lacks, no field its istiod would drop.
    let text = serde_json::to_string(&ef).unwrap();
    assert!(!text.contains("MERGE_AND_REPLACE_LIST"));
    assert!(!text.contains("refresh_cluster_on_retry"));
    let (route,) = match patches(&ef, "HTTP_ROUTE").as_slice() {
        [r] => (*r,),
        other => panic!("{other:?}"),
    };
    assert_eq!(route["patch"]["operation"], "MERGE");
    let rp = &route["patch"]["value"]["route"]["retry_policy"];
    assert_eq!(
        rp["retry_priority"]["name"],
        "envoy.retry_priorities.previous_priorities"
    );
    assert_eq!(rp["num_retries"], 2);
    // Istio's own clusters are not patched: every provider and grouping cluster is added.
    let clusters = patches(&ef, "CLUSTER");
    assert!(clusters
        .iter()
        .all(|p| p["patch"]["operation"] == "ADD" && p["match"].get("cluster").is_none()));
    let names: Vec<&str> = clusters
        .iter()
        .map(|p| p["patch"]["value"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        &names[..3],
        [
            "llm-failover-openai",
            "llm-failover-azure",
            "llm-failover-anthropic"
        ]
    );
    // gpt: 3 providers, 3 attempts -> 4 orders; claude: 2 attempts -> 1.
    assert_eq!(names.len(), 3 + 5, "{names:?}");
    assert!(names[3..].iter().all(|n| n.starts_with("llm_failover~")));
    assert!(names.iter().all(|n| !n.contains('.')), "{names:?}");
    for p in &clusters[..3] {
        let c = &p["patch"]["value"];
        let provider = c["name"]
            .as_str()
            .unwrap()
            .trim_start_matches("llm-failover-");
        let host = &c["load_assignment"]["endpoints"][0]["lb_endpoints"][0];
        assert_eq!(
            host["metadata"]["filter_metadata"]["llm_failover"]["provider"],
            provider
        );
        let tls = &c["transport_socket"]["typed_config"];
        assert_eq!(tls["sni"], host["endpoint"]["hostname"]);
    }
    for p in &clusters {
        let filters = &p["patch"]["value"]["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"];
        assert_eq!(filters[0]["name"], "llm-failover-upstream");
        assert_eq!(
            filters[0]["config_discovery"]["type_urls"],
            serde_yaml_ng::from_str::<Value>(
                "[type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]"
            )
            .unwrap()
        );
    }
    // Both roles name the added clusters, in grouping mode.
    for ec in patches(&ef, "EXTENSION_CONFIG") {
        let json = ec["patch"]["value"]["typed_config"]["config"]["configuration"]["value"]
            .as_str()
            .unwrap();
        assert!(json.contains("\"routing\":\"groups\""), "{json}");
        assert!(
            json.contains("\"cluster\":\"llm-failover-anthropic\""),
            "{json}"
        );
    }
    // The upstream role's metrics live under a cluster's scope on Envoy 1.38: the bootstrap
    // override lets them through Istio's stats inclusion list and labels them.
    let cm = docs(&files[0].1)
        .into_iter()
        .find(|m| m["kind"] == "ConfigMap")
        .unwrap();
    let bootstrap = cm["data"]["custom_bootstrap.json"].as_str().unwrap();
    assert!(bootstrap.contains("llm_failover_scope"), "{bootstrap}");
    assert!(bootstrap.contains("inclusion_list"), "{bootstrap}");
}

#[test]
fn every_release_maps_envoys_local_replies_to_json_errors_on_istios_connection_manager() {
    for version in istio::SUPPORTED_VERSIONS {
        let files = render(&example(), Some(version)).unwrap();
        let ef = envoy_filter(&files);
        let nf = patches(&ef, "NETWORK_FILTER");
        assert_eq!(nf.len(), 1, "{version}");
        assert_eq!(nf[0]["patch"]["operation"], "MERGE");
        assert_eq!(
            nf[0]["match"]["listener"]["filterChain"]["filter"]["name"],
            "envoy.filters.network.http_connection_manager"
        );
        let mappers = nf[0]["patch"]["value"]["typed_config"]["local_reply_config"]["mappers"]
            .as_sequence()
            .unwrap();
        assert_eq!(mappers.len(), 3, "{version}");
        assert_eq!(
            mappers[0]["filter"]["status_code_filter"]["comparison"]["value"]["default_value"],
            413
        );
    }
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
    assert!(
        e.contains("istio.modul: unknown field `modul` — did you mean `module`?"),
        "{e}"
    );
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

#[test]
fn a_credential_from_a_file_is_refused_on_the_istio_target() {
    let text = example().replace(
        "credential: {header: authorization, prefix: \"Bearer \", env: OPENAI_API_KEY}",
        "credential: {header: authorization, prefix: \"Bearer \", file: /var/run/token}",
    );
    assert_ne!(text, example());
    let e = render(&text, None).expect_err("a file credential on Istio");
    assert!(
        e.contains("credential.file") && e.contains("Istio") && e.contains("env:"),
        "{e}"
    );
}

#[test]
fn the_fleets_store_needs_its_mesh_cluster_named() {
    let with = |fleet: &str| format!("{fleet}\n{}", example());
    let e = render(&with("fleet: {address: \"127.0.0.1:8081\"}"), None).unwrap_err();
    assert!(
        e.contains("fleet.cluster: the Istio target adds no cluster"),
        "{e}"
    );
    let named = "fleet: {cluster: \"outbound|8081||ratelimit.ratelimit.svc.cluster.local\"}";
    assert!(render(&with(named), None).is_ok());
}
