//! `render --target istio`: the same gateway as Kubernetes manifests for an Istio ingress or
//! egress gateway (docs/behaviour.md section 11, docs/istio.md).
//!
//! Both roles must run in one wasm VM (one `vm_id`) so they share one health state, and the
//! upstream role must sit on every provider cluster. A `WasmPlugin` can do neither (no `vm_id`,
//! no upstream filters), so both roles are `EnvoyFilter` `EXTENSION_CONFIG` entries (served by
//! istiod over ECDS; istio-agent downloads the module they name), referenced by an
//! `HTTP_FILTER` patch before the router (downstream role) and by each provider cluster's
//! upstream `http_filters` (upstream role). The references accept the Wasm type only: when
//! istio-agent cannot fetch a module it substitutes an RBAC filter, and a reference that
//! accepted RBAC would then run an allow-all filter in the module's place. No default config,
//! fail closed.
//!
//! The route, virtual host, listener and cluster pieces are the standalone renderer's
//! (`crate::render`) under Istio's names: route config `http.<target port>`, virtual host
//! `<host>:<server port>`, clusters `outbound|<port>||<host>`. The route Istio builds from the
//! rendered `VirtualService` answers 503 until the route patch lands on it (so a patch that
//! did not apply sends nothing to a provider).
//!
//! Each Istio release is rendered for the Envoy it ships ([`RELEASES`]): router mode on 1.31+
//! (Envoy 1.39+), grouping mode (`llm_failover::group`, docs/older-envoys.md) on 1.30 (Envoy 1.38).
//! Grouping mode needs hosts whose metadata names their provider, which Istio's clusters
//! (from a `ServiceEntry`) cannot carry: there the provider clusters and the grouping clusters
//! are the standalone renderer's, added whole by `CLUSTER` `ADD` patches under names of their
//! own (`llm-failover-<provider>`), and Istio's own clusters are not touched.
//!
//! One module per part of the output: `options` (the `istio:` block), `providers`
//! (`ServiceEntry` and `DestinationRule` per provider), `gateway` (`Gateway` and
//! `VirtualService`), `envoy_filter` (both roles and every patch), `deployment` (the bootstrap
//! ConfigMap and the gateway Deployment patch); this file reads the file and writes the files.

use crate::diag::Diag;
use crate::input::Gateway;
use crate::istio_schema::Schema;
use crate::render::to_yaml;
use crate::version::{EnvoyVersion, Mode};
use serde_yaml_ng::{Mapping, Value};

mod deployment;
mod envoy_filter;
mod gateway;
mod options;
mod providers;

pub use deployment::{bootstrap_config_map, deployment_patch};
pub use envoy_filter::{discovered_filter, envoy_filter};
pub use gateway::gateway_resources;
pub use options::{
    options, Options, DEFAULT_NAMESPACE, DEFAULT_SECRET, DEFAULT_SERVER_PORT, DEFAULT_TARGET_PORT,
};
pub use providers::{cluster_name, istio_gateway, provider_resources, service_host};

/// Istio releases this renderer targets, each with the Envoy it ships. 1.31+ (Envoy 1.39+, an
/// istiod whose go-control-plane knows `refresh_cluster_on_retry` and the
/// `MERGE_AND_REPLACE_LIST` operation) get router mode; 1.30 (Envoy 1.38) grouping mode.
pub const RELEASES: [(&str, &str); 3] = [("1.30", "1.38"), ("1.31", "1.39"), ("1.32", "1.40")];
pub const SUPPORTED_VERSIONS: [&str; 3] = ["1.30", "1.31", "1.32"];
pub const DEFAULT_VERSION: &str = "1.31";

/// Name of every resource rendered here, and prefix of the extension configs.
pub const NAME: &str = "llm-failover";
pub const DOWNSTREAM_EXTENSION: &str = "llm-failover-downstream";
pub const UPSTREAM_EXTENSION: &str = "llm-failover-upstream";

/// The `VirtualService` route the route patch merges into (Istio names the Envoy route after it).
pub const ROUTE_NAME: &str = "llm-failover";

pub fn check_version(version: &str) -> Result<(), String> {
    if SUPPORTED_VERSIONS.contains(&version) {
        return Ok(());
    }
    Err(format!(
        "{version:?} is not a supported Istio release — use one of {}",
        SUPPORTED_VERSIONS.join(", ")
    ))
}

/// The Envoy an Istio release ships.
pub fn envoy_of(release: &str) -> Option<EnvoyVersion> {
    RELEASES
        .iter()
        .find(|(r, _)| *r == release)
        .and_then(|(_, e)| EnvoyVersion::parse(e).ok())
}

/// Reads a failover file for `render --target istio`: the `istio:` block (`version` and
/// `module` from the command line win), and the gateway rendered for the Envoy of that Istio
/// release. An Envoy version set in the file (`envoy_version:`) or by `--envoy-version` must
/// be that Envoy.
pub fn load(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    module: Option<&str>,
    envoy_version: Option<&str>,
    istio_version: Option<&str>,
) -> Result<(Gateway, Options), Vec<Diag>> {
    let gw = crate::input::load_for(text, env, module, envoy_version)?;
    if let Some(i) = gw.upstreams.iter().position(|u| u.token_file.is_some()) {
        return Err(vec![Diag::error(
            format!("providers[{i}].credential.file"),
            "not on the Istio target: give the credential from the Secret with env: instead (credential: {header: authorization, prefix: \"Bearer \", env: VERTEX_ACCESS_TOKEN})",
        )]);
    }
    let opts = options(&gw, istio_version, module)?;
    let Some(want) = envoy_of(&opts.version) else {
        return Err(vec![Diag::error("istio.version", "unknown release")]);
    };
    if gw.envoy_version == want {
        return Ok((gw, opts));
    }
    if let Some(field) = gw.envoy_version_from {
        return Err(vec![Diag::error(
            field,
            format!(
                "is {} but Istio {} runs Envoy {want} — remove {field} (the Istio release sets it), or set istio: {{version: ...}} to the release that ships Envoy {} ({})",
                gw.envoy_version,
                opts.version,
                gw.envoy_version,
                RELEASES
                    .iter()
                    .map(|(r, e)| format!("Istio {r}: Envoy {e}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )]);
    }
    let gw = crate::input::load_for(text, env, module, Some(&want.to_string()))?;
    Ok((gw, opts))
}

fn grouping(gw: &Gateway) -> bool {
    gw.envoy_version.mode() == Mode::Grouping
}

fn metadata(opts: &Options, name: &str) -> Value {
    map! {
        "name" => name,
        "namespace" => opts.namespace.as_str(),
        "labels" => map! { "app.kubernetes.io/name" => NAME, "app.kubernetes.io/managed-by" => "llm-failover-render" },
    }
}

fn resource(api: &str, kind: &str, meta: Value, spec: Value) -> Value {
    map! { "apiVersion" => api, "kind" => kind, "metadata" => meta, "spec" => spec }
}

fn selector(opts: &Options) -> Value {
    let mut m = Mapping::new();
    for (k, v) in &opts.selector {
        m.insert(k.as_str().into(), v.as_str().into());
    }
    Value::Mapping(m)
}

/// Every manifest `kubectl apply` takes, in apply order.
pub fn manifests(gw: &Gateway, opts: &Options) -> Vec<Value> {
    let mut out = provider_resources(gw, opts);
    out.extend(gateway_resources(opts));
    out.push(envoy_filter(gw, opts));
    out.push(bootstrap_config_map(gw, opts));
    out
}

/// Files `render --target istio --out DIR` writes: (name, text).
pub fn render_files(
    gw: &Gateway,
    source: &str,
    opts: &Options,
) -> Result<Vec<(&'static str, String)>, Vec<Diag>> {
    if envoy_of(&opts.version) != Some(gw.envoy_version) {
        return Err(vec![Diag::error(
            "envoy_version",
            format!(
                "the gateway was read for Envoy {}, not for Istio {}'s (use istio::load)",
                gw.envoy_version, opts.version
            ),
        )]);
    }
    let igw = istio_gateway(gw)?;
    let manifests = manifests(&igw, opts);
    let patch = deployment_patch(&igw, opts);
    // Every field name and enum value must exist in the release targeted.
    if let Some(schema) = Schema::for_release(&opts.version) {
        let mut problems: Vec<String> = manifests
            .iter()
            .flat_map(|m| schema.check_manifest(m))
            .collect();
        problems.extend(schema.check_deployment_patch(&patch));
        if !problems.is_empty() {
            return Err(problems
                .into_iter()
                .map(|p| {
                    Diag::error(
                        "istio",
                        format!("rendered manifest does not fit Istio {}: {p}", opts.version),
                    )
                })
                .collect());
        }
    }
    let docs: Vec<String> = manifests.iter().map(to_yaml).collect();
    let manifests = format!(
        "# Istio {} manifests for the llm-failover gateway, rendered by `llm-failover render {source} --target istio`.\n\
         # Do not edit: change {source} and render again.\n\
         # kubectl apply -f manifests.yaml, after the credentials Secret and the gateway Deployment patch\n\
         # (gateway-deployment-patch.yaml); README section \"Istio\" has the steps.\n---\n{}",
        opts.version,
        docs.join("---\n")
    );
    let keys = if igw.env_keys.is_empty() {
        "(none: no provider reads a credential from the environment)".to_string()
    } else {
        igw.env_keys.join(", ")
    };
    let patch = format!(
        "# Rendered by `llm-failover render {source} --target istio`: a strategic-merge patch for the\n\
         # gateway Deployment (selector {}), e.g.\n\
         #   kubectl -n {} patch deployment istio-ingressgateway --patch-file gateway-deployment-patch.yaml\n\
         # It mounts the stats tags (ConfigMap {NAME}-bootstrap) and puts\n\
         # the credentials into the proxy's environment from Secret {} (keys: {keys}).\n{}",
        opts.selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
        opts.namespace,
        opts.credentials_secret,
        to_yaml(&patch)
    );
    Ok(vec![
        ("manifests.yaml", manifests),
        ("gateway-deployment-patch.yaml", patch),
    ])
}
