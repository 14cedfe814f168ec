//! The bootstrap override ConfigMap (metric tags) and the gateway Deployment patch
//! (credentials from the Secret).

use super::{grouping, metadata, Options, NAME};
use crate::input::Gateway;
use crate::render::{self, seq};
use serde_yaml_ng::{Mapping, Value};

/// Istio 1.30 lists in its stats inclusion list no name of the form `cluster.<name>.*`, where
/// Envoy 1.38 puts the upstream role's metrics (docs/older-envoys.md): this pattern lets them in.
fn cluster_scoped_metrics_pattern() -> String {
    format!(
        r"cluster\.[^.]+\.{}\.llm_failover_.*",
        llm_failover::metrics::ENVOY_NAMESPACE
    )
}

/// The bootstrap override ConfigMap: the stats tags that label the metrics (EnvoyFilter
/// BOOTSTRAP patches are ignored by istiod). pilot-agent hands it to Envoy, which merges it
/// into Istio's bootstrap (lists appended): in grouping mode it also adds the upstream role's
/// cluster-scoped metric names to Istio's stats inclusion list.
pub fn bootstrap_config_map(gw: &Gateway, opts: &Options) -> Value {
    let mut stats = render::stats_config_for(gw);
    if let (true, Value::Mapping(m)) = (grouping(gw), &mut stats) {
        m.insert(
            "stats_matcher".into(),
            map! { "inclusion_list" => map! { "patterns" => seq(vec![
                map! { "safe_regex" => map! { "regex" => cluster_scoped_metrics_pattern() } },
            ]) } },
        );
    }
    let bootstrap = map! { "stats_config" => stats };
    let json = serde_json::to_string_pretty(&bootstrap).unwrap_or_default();
    map! {
        "apiVersion" => "v1",
        "kind" => "ConfigMap",
        "metadata" => metadata(opts, &format!("{NAME}-bootstrap")),
        "data" => map! { "custom_bootstrap.json" => json },
    }
}

/// Strategic-merge patch for the gateway Deployment: the bootstrap override and each credential
/// variable from the Secret into the proxy's environment
/// (pilot-agent passes its environment to Envoy; the wasm VM reads the names listed in
/// `vm_config.environment_variables.host_env_keys`).
pub fn deployment_patch(gw: &Gateway, opts: &Options) -> Value {
    let env: Vec<Value> = gw
        .env_keys
        .iter()
        .map(|k| {
            map! {
                "name" => k.as_str(),
                "valueFrom" => map! { "secretKeyRef" => map! { "name" => opts.credentials_secret.as_str(), "key" => k.as_str() } },
            }
        })
        .collect();
    let mut container = Mapping::new();
    container.insert("name".into(), opts.proxy_container.as_str().into());
    if !env.is_empty() {
        container.insert("env".into(), seq(env));
    }
    map! {
        "spec" => map! { "template" => map! {
            // Istio's stats matcher keeps `wasm*` names by default: no proxyStatsMatcher needed.
            "metadata" => map! { "annotations" => map! {
                "sidecar.istio.io/bootstrapOverride" => format!("{NAME}-bootstrap"),
            } },
            "spec" => map! { "containers" => seq(vec![Value::Mapping(container)]) },
        } },
    }
}
