//! The `istio:` block of a failover file (and the command line's overrides).

use super::{check_version, DEFAULT_VERSION};
use crate::diag::Diag;
use crate::input::Gateway;
use serde_yaml_ng::{Mapping, Value};

pub const DEFAULT_NAMESPACE: &str = "istio-system";
pub const DEFAULT_SECRET: &str = "llm-failover-credentials";
pub const DEFAULT_SERVER_PORT: u16 = 80;
pub const DEFAULT_TARGET_PORT: u16 = 8080;
const MODULE_SCHEMES: [&str; 3] = ["oci://", "https://", "http://"];

/// Fields of the `istio:` block.
const ISTIO_KEYS: [&str; 10] = [
    "version",
    "namespace",
    "selector",
    "hosts",
    "port",
    "target_port",
    "module",
    "module_sha256",
    "credentials_secret",
    "proxy_container",
];

/// What the `istio:` block (and the command line) say about the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub version: String,
    pub namespace: String,
    /// Labels of the gateway pods (`Gateway.spec.selector`, `EnvoyFilter` workload selector).
    pub selector: Vec<(String, String)>,
    /// Host names the gateway serves the API on (`Gateway` server hosts).
    pub hosts: Vec<String>,
    /// The `Gateway` server port (the gateway Service's port).
    pub port: u16,
    /// The port the gateway pod listens on for `port` (Istio names its listener and route
    /// configuration after it: `0.0.0.0_8080`, `http.8080`).
    pub target_port: u16,
    /// Where istio-agent fetches the module: `oci://...` or `https://...`.
    pub module: String,
    pub module_sha256: Option<String>,
    /// The Kubernetes Secret holding the credentials (`credential.env` names are its keys).
    pub credentials_secret: String,
    pub proxy_container: String,
}

/// Reads the `istio:` block; `version` and `module` from the command line win over the file.
pub fn options(
    gw: &Gateway,
    version: Option<&str>,
    module: Option<&str>,
) -> Result<Options, Vec<Diag>> {
    let mut errors = Vec::new();
    if let Some(crate::input::StatusListen::Own { .. }) = &gw.status {
        errors.push(Diag::error(
            "status_listen",
            "the Istio target serves the status endpoint on the gateway's listener only: set status_listen: api and restrict the path (an AuthorizationPolicy), or remove status_path",
        ));
    }
    if let Some(fleet) = &gw.config.fleet {
        if fleet.cluster == llm_failover::config::FLEET_CLUSTER {
            errors.push(Diag::error(
                "fleet.cluster",
                "the Istio target adds no cluster for the rate-limit service: run it in the mesh and name the cluster Istio gives it, e.g. cluster: \"outbound|8081||ratelimit.ratelimit.svc.cluster.local\"",
            ));
        }
    }
    let empty = Mapping::new();
    let block = match &gw.istio {
        None => &empty,
        Some(Value::Mapping(m)) => m,
        Some(_) => {
            return Err(vec![Diag::error(
                "istio",
                "must be a mapping — e.g. {module: oci://ghcr.io/you/llm-failover:0.1.0}",
            )])
        }
    };
    for key in block.keys() {
        let k = key.as_str().unwrap_or("");
        if !ISTIO_KEYS.contains(&k) {
            errors.push(Diag::error(
                format!("istio.{k}"),
                crate::input::suggest::unknown_field(k, &ISTIO_KEYS),
            ));
        }
    }
    let text = |key: &str, errors: &mut Vec<Diag>| text_of(block, key, errors);
    let version = version
        .map(str::to_string)
        .or_else(|| text("version", &mut errors))
        .unwrap_or_else(|| DEFAULT_VERSION.to_string());
    if let Err(problem) = check_version(&version) {
        errors.push(Diag::error("istio.version", problem));
    }
    let namespace = text("namespace", &mut errors).unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    let selector = selector_of(block, &mut errors);
    let hosts = hosts_of(block, &mut errors);
    let module = module
        .map(str::to_string)
        .or_else(|| text("module", &mut errors));
    let module = module_of(module, &mut errors);
    let module_sha256 = text("module_sha256", &mut errors);
    if let Some(sha) = &module_sha256 {
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            errors.push(Diag::error(
                "istio.module_sha256",
                "must be the module's SHA-256 as 64 hex digits (sha256sum dist/llm_failover.wasm)",
            ));
        }
    }
    let opts = Options {
        version,
        namespace,
        selector,
        hosts,
        port: port_of(block, "port", DEFAULT_SERVER_PORT, &mut errors),
        target_port: port_of(block, "target_port", DEFAULT_TARGET_PORT, &mut errors),
        module,
        module_sha256,
        credentials_secret: text("credentials_secret", &mut errors)
            .unwrap_or_else(|| DEFAULT_SECRET.into()),
        proxy_container: text("proxy_container", &mut errors)
            .unwrap_or_else(|| "istio-proxy".into()),
    };
    errors.extend(literal_credentials(gw));
    if errors.is_empty() {
        Ok(opts)
    } else {
        Err(errors)
    }
}

/// `istio.<key>`: a non-empty string (a number is taken as written).
fn text_of(block: &Mapping, key: &str, errors: &mut Vec<Diag>) -> Option<String> {
    match block.get(key) {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => {
            errors.push(Diag::error(
                format!("istio.{key}"),
                "must be a non-empty string",
            ));
            None
        }
    }
}

/// `istio.<key>`: a port, `default` when absent.
fn port_of(block: &Mapping, key: &str, default: u16, errors: &mut Vec<Diag>) -> u16 {
    match block.get(key) {
        None => default,
        Some(v) => match v.as_u64().and_then(|p| u16::try_from(p).ok()) {
            Some(p) if p > 0 => p,
            _ => {
                errors.push(Diag::error(
                    format!("istio.{key}"),
                    "is not a port — use 1-65535",
                ));
                default
            }
        },
    }
}

/// `istio.selector`: the gateway pods' labels (default `istio: ingressgateway`).
fn selector_of(block: &Mapping, errors: &mut Vec<Diag>) -> Vec<(String, String)> {
    match block.get("selector") {
        None => vec![("istio".to_string(), "ingressgateway".to_string())],
        Some(Value::Mapping(m)) if !m.is_empty() => {
            let mut out = Vec::new();
            for (k, v) in m {
                match (k.as_str(), v.as_str()) {
                    (Some(k), Some(v)) => out.push((k.to_string(), v.to_string())),
                    _ => errors.push(Diag::error(
                        "istio.selector",
                        "labels must be strings — e.g. {istio: egressgateway}",
                    )),
                }
            }
            out
        }
        Some(_) => {
            errors.push(Diag::error(
                "istio.selector",
                "must be a non-empty mapping of pod labels — e.g. {istio: ingressgateway}",
            ));
            Vec::new()
        }
    }
}

/// `istio.hosts`: the hosts the gateway serves (default every one).
fn hosts_of(block: &Mapping, errors: &mut Vec<Diag>) -> Vec<String> {
    match block.get("hosts") {
        None => vec!["*".to_string()],
        Some(Value::Sequence(items)) if !items.is_empty() => items
            .iter()
            .filter_map(|h| match h.as_str() {
                Some(h) if !h.trim().is_empty() => Some(h.trim().to_ascii_lowercase()),
                _ => {
                    errors.push(Diag::error(
                        "istio.hosts",
                        "every host must be a non-empty string",
                    ));
                    None
                }
            })
            .collect(),
        Some(_) => {
            errors.push(Diag::error(
                "istio.hosts",
                "must be a non-empty list — e.g. [llm.example.com]",
            ));
            Vec::new()
        }
    }
}

/// The module's URL (the command line's, else `istio.module`): one istio-agent can fetch.
fn module_of(module: Option<String>, errors: &mut Vec<Diag>) -> String {
    match module {
        Some(m) if MODULE_SCHEMES.iter().any(|s| m.starts_with(s)) => m,
        Some(m) => {
            errors.push(Diag::error(
                "istio.module",
                format!("{m:?} is not a URL istio-agent can fetch — use oci://REGISTRY/IMAGE:TAG (see scripts/oci-image.sh) or https://.../llm_failover.wasm"),
            ));
            String::new()
        }
        None => {
            errors.push(Diag::error(
                "istio.module",
                "missing — add istio: {module: oci://REGISTRY/IMAGE:TAG} (or give --module oci://...)",
            ));
            String::new()
        }
    }
}

/// A key written into a manifest would sit in etcd and in git: credentials come from a Secret.
fn literal_credentials(gw: &Gateway) -> Vec<Diag> {
    let mut out = Vec::new();
    let Some(Value::Sequence(providers)) = gw.plugin.get("providers") else {
        return out;
    };
    for (i, p) in providers.iter().enumerate() {
        if p.get("credential").and_then(|c| c.get("value")).is_some() {
            out.push(Diag::error(
                format!("providers[{i}].credential.value"),
                "a literal key would be written into the EnvoyFilter — use env: NAME and put NAME in the credentials Secret",
            ));
        }
    }
    out
}
