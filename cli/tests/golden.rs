//! The checked-in Envoy configs in envoy/ are exactly what `render` makes of their
//! `*.failover.yaml` sources with an empty environment (every `${VAR:-default}` at its default).

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use llm_failover_cli::{load, render};
use std::path::{Path, PathBuf};

fn envoy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("envoy")
}

fn sources() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(envoy_dir())
        .expect("envoy/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".failover.yaml"))
        .collect();
    files.sort();
    files
}

fn name_of(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn checked_in_configs_equal_a_fresh_render() {
    let bless = std::env::var_os("LLM_FAILOVER_BLESS").is_some();
    let mut stale = Vec::new();
    let files = sources();
    assert!(
        files.len() >= 2,
        "expected the demo and the openai-anthropic examples, found {files:?}"
    );
    for source in files {
        let name = name_of(&source);
        let text = std::fs::read_to_string(&source).unwrap();
        let gw = load(&text, &|_| None, None).unwrap_or_else(|errors| {
            panic!(
                "{name} does not load:\n{}",
                errors
                    .iter()
                    .map(|e| e.render(&name))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        });
        let rendered = render::bootstrap_text(&gw, &name);
        let target_name = name.replace(".failover.yaml", ".yaml");
        let target = envoy_dir().join(&target_name);
        if bless {
            std::fs::write(&target, &rendered).unwrap();
            continue;
        }
        let current = std::fs::read_to_string(&target).unwrap_or_default();
        if current != rendered {
            stale.push(format!(
                "  cargo run -q -p llm-failover-cli -- render --no-env envoy/{name} --out envoy/{target_name}"
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "checked-in Envoy configs are stale; regenerate them from the repository root with:\n{}\n\
         (or: LLM_FAILOVER_BLESS=1 cargo test -p llm-failover-cli --test golden)",
        stale.join("\n")
    );
}

#[test]
fn examples_load_without_warnings() {
    for source in sources() {
        let name = name_of(&source);
        let gw = load(&std::fs::read_to_string(&source).unwrap(), &|_| None, None).unwrap();
        assert!(gw.warnings.is_empty(), "{name}: {:?}", gw.warnings);
    }
}

#[test]
fn demo_is_three_local_providers_in_one_chain_with_a_rewrite_on_the_third() {
    let text = std::fs::read_to_string(envoy_dir().join("demo.failover.yaml")).unwrap();
    let gw = load(&text, &|_| None, None).unwrap();
    let names: Vec<&str> = gw
        .config
        .providers
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["primary", "secondary", "tertiary"]);
    let ports: Vec<u16> = gw.upstreams.iter().map(|u| u.endpoint.port).collect();
    assert_eq!(ports, [18101, 18102, 18103]);
    assert!(gw
        .upstreams
        .iter()
        .all(|u| !u.tls && u.endpoint.host.address() == "127.0.0.1"));
    assert_eq!(
        (gw.listen.port, gw.admin.as_ref().map(|a| a.port)),
        (10000, Some(9901))
    );
    assert_eq!(gw.config.chains.len(), 1);
    let chain = &gw.config.chains[0];
    assert_eq!(chain.name, "default");
    assert_eq!(chain.entries.len(), 3);
    assert_eq!(chain.entries[2].model.as_deref(), Some("tertiary-model"));
    for (p, key) in gw
        .config
        .providers
        .iter()
        .zip(["sk-primary", "sk-secondary", "sk-tertiary"])
    {
        assert!(
            p.set_headers.iter().any(|(_, v)| v.ends_with(key)),
            "{}: {:?}",
            p.name,
            p.set_headers
        );
    }
    assert!(gw.env_keys.is_empty());

    // The environment moves every port.
    let env = |k: &str| match k {
        "PRIMARY_PORT" => Some("28101".to_string()),
        "SECONDARY_PORT" => Some("28102".to_string()),
        "TERTIARY_PORT" => Some("28103".to_string()),
        "LISTEN_PORT" => Some("20000".to_string()),
        "ADMIN_PORT" => Some("29901".to_string()),
        _ => None,
    };
    let gw = load(&text, &env, None).unwrap();
    let ports: Vec<u16> = gw.upstreams.iter().map(|u| u.endpoint.port).collect();
    assert_eq!(ports, [28101, 28102, 28103]);
    assert_eq!(
        (gw.listen.port, gw.admin.as_ref().map(|a| a.port)),
        (20000, Some(29901))
    );
}
