//! `render --target istio`: the same gateway as Kubernetes manifests for an Istio ingress or
//! egress gateway (SPEC section 11, DESIGN section 6).
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
//! (Envoy 1.39+), grouping mode (`llm_failover::group`, DESIGN section 7) on 1.30 (Envoy 1.38).
//! Grouping mode needs hosts whose metadata names their provider, which Istio's clusters
//! (from a `ServiceEntry`) cannot carry: there the provider clusters and the grouping clusters
//! are the standalone renderer's, added whole by `CLUSTER` `ADD` patches under names of their
//! own (`llm-failover-<provider>`), and Istio's own clusters are not touched.

use crate::diag::Diag;
use crate::input::{Gateway, Host, Upstream, DEFAULT_CA_FILE};
use crate::istio_schema::Schema;
use crate::render::{self, seq, to_yaml, typed};
use crate::version::{EnvoyVersion, Mode};
use serde_yaml_ng::{Mapping, Value};

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
pub const DEFAULT_NAMESPACE: &str = "istio-system";
pub const DEFAULT_SECRET: &str = "llm-failover-credentials";
pub const DEFAULT_SERVER_PORT: u16 = 80;
pub const DEFAULT_TARGET_PORT: u16 = 8080;
const HCM_NAME: &str = "envoy.filters.network.http_connection_manager";
const ROUTER_NAME: &str = "envoy.filters.http.router";
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
                format!("unknown field — expected one of {}", ISTIO_KEYS.join(", ")),
            ));
        }
    }
    let text = |key: &str, errors: &mut Vec<Diag>| -> Option<String> {
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
    };
    let port = |key: &str, default: u16, errors: &mut Vec<Diag>| -> u16 {
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
    };

    let version = version
        .map(str::to_string)
        .or_else(|| text("version", &mut errors))
        .unwrap_or_else(|| DEFAULT_VERSION.to_string());
    if let Err(problem) = check_version(&version) {
        errors.push(Diag::error("istio.version", problem));
    }
    let namespace = text("namespace", &mut errors).unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    let selector = match block.get("selector") {
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
    };
    let hosts = match block.get("hosts") {
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
    };
    let module = module
        .map(str::to_string)
        .or_else(|| text("module", &mut errors));
    let module = match module {
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
    };
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
        port: port("port", DEFAULT_SERVER_PORT, &mut errors),
        target_port: port("target_port", DEFAULT_TARGET_PORT, &mut errors),
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

/// The name the `ServiceEntry` gives a provider: its host, or for an IP endpoint its TLS name
/// or a made-up internal name.
pub fn service_host(u: &Upstream) -> String {
    match (&u.endpoint.host, &u.sni) {
        (Host::Name(name), _) => name.clone(),
        (Host::Ip(_), Some(sni)) => sni.clone(),
        (Host::Ip(_), None) => format!("{}.llm-failover.internal", dns_label(&u.provider)),
    }
}

fn dns_label(name: &str) -> String {
    let label: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    label.trim_matches('-').to_string()
}

/// Istio's name for the cluster of a `ServiceEntry` host and port.
pub fn cluster_name(u: &Upstream) -> String {
    format!("outbound|{}||{}", u.endpoint.port, service_host(u))
}

/// `prefix-<label>` for each name, numbered where two map to the same DNS label.
fn unique_labels<'a>(prefix: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        let base = format!("{prefix}-{}", dns_label(n));
        let mut name = base.clone();
        let mut k = 1;
        while out.contains(&name) {
            k += 1;
            name = format!("{base}-{k}");
        }
        out.push(name);
    }
    out
}

/// The gateway with every provider on its cluster: Istio's cluster of its `ServiceEntry` in
/// router mode; in grouping mode a cluster of its own, added by the `EnvoyFilter` (no dots in
/// the name: Istio's `cluster_name` stats tag ends a cluster name at the first dot).
pub fn istio_gateway(gw: &Gateway) -> Result<Gateway, Vec<Diag>> {
    if grouping(gw) {
        let names = unique_labels(NAME, gw.upstreams.iter().map(|u| u.provider.as_str()));
        return gw.with_clusters(&names);
    }
    // Istio applies one DestinationRule per host: one host reached two ways (another port,
    // TLS or not, another sni) cannot be expressed by per-host rules.
    let mut errors = Vec::new();
    for (i, u) in gw.upstreams.iter().enumerate() {
        let host = service_host(u);
        let same_way = |o: &Upstream| {
            cluster_name(o) == cluster_name(u)
                && (o.tls, &o.sni, o.connect_timeout_ms, o.http2)
                    == (u.tls, &u.sni, u.connect_timeout_ms, u.http2)
        };
        if let Some(first) = gw.upstreams[..i]
            .iter()
            .find(|o| service_host(o) == host && !same_way(o))
        {
            errors.push(Diag::error(
                format!("providers[{i}].endpoint"),
                format!(
                    "reaches host {host} like provider {:?} but with another port or TLS, sni, connect_timeout or http2 setting — Istio applies one DestinationRule per host: give both the same endpoint and settings",
                    first.provider
                ),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let names: Vec<String> = gw.upstreams.iter().map(cluster_name).collect();
    gw.with_clusters(&names)
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

/// `ServiceEntry` + `DestinationRule` for each provider cluster (TLS origination at the
/// gateway). None in grouping mode: there the `EnvoyFilter` adds the providers' clusters.
pub fn provider_resources(gw: &Gateway, opts: &Options) -> Vec<Value> {
    let mut out = Vec::new();
    if grouping(gw) {
        return out;
    }
    let clusters = render::clusters(gw);
    // Provider names map to DNS labels; two that map to the same label get numbered.
    let names = unique_labels(NAME, clusters.iter().map(|u| u.provider.as_str()));
    for (u, name) in clusters.into_iter().zip(names) {
        let host = service_host(u);
        let protocol = if u.http2 && !u.tls { "HTTP2" } else { "HTTP" };
        let mut se = Mapping::new();
        se.insert("hosts".into(), seq(vec![host.as_str().into()]));
        se.insert(
            "ports".into(),
            seq(vec![map! {
                "number" => u64::from(u.endpoint.port),
                "name" => format!("{}-llm", protocol.to_ascii_lowercase()),
                "protocol" => protocol,
            }]),
        );
        se.insert("location".into(), "MESH_EXTERNAL".into());
        match &u.endpoint.host {
            // One logical host per provider, as standalone (LOGICAL_DNS): provider front ends
            // answer with changing address sets.
            Host::Name(_) => {
                se.insert("resolution".into(), "DNS_ROUND_ROBIN".into());
            }
            Host::Ip(ip) => {
                se.insert("resolution".into(), "STATIC".into());
                se.insert(
                    "endpoints".into(),
                    seq(vec![map! { "address" => ip.to_string() }]),
                );
            }
        }
        // Only the gateway's namespace sees these hosts: sidecars elsewhere do not get a
        // direct, credential-less way to the providers from this file.
        se.insert("exportTo".into(), seq(vec![".".into()]));
        out.push(resource(
            "networking.istio.io/v1",
            "ServiceEntry",
            metadata(opts, &name),
            Value::Mapping(se),
        ));

        let mut policy = Mapping::new();
        policy.insert(
            "connectionPool".into(),
            map! { "tcp" => map! { "connectTimeout" => render::duration(u.connect_timeout_ms) } },
        );
        if let (true, Some(sni)) = (u.tls, &u.sni) {
            let mut tls = Mapping::new();
            tls.insert("mode".into(), "SIMPLE".into());
            // Explicit sni and SAN: Istio then sets neither auto_sni nor auto_san_validation,
            // so the cluster patch below has no Istio TLS option to restate.
            tls.insert("sni".into(), sni.as_str().into());
            tls.insert("subjectAltNames".into(), seq(vec![sni.as_str().into()]));
            if gw.ca_file != DEFAULT_CA_FILE {
                tls.insert("caCertificates".into(), gw.ca_file.as_str().into());
            }
            policy.insert("tls".into(), Value::Mapping(tls));
        }
        out.push(resource(
            "networking.istio.io/v1",
            "DestinationRule",
            metadata(opts, &name),
            map! {
                "host" => host.as_str(),
                "exportTo" => seq(vec![".".into()]),
                "trafficPolicy" => Value::Mapping(policy),
            },
        ));
    }
    out
}

/// The `Gateway` server and a `VirtualService` whose one route answers 503 until the route
/// patch turns it into the failover route.
pub fn gateway_resources(opts: &Options) -> Vec<Value> {
    let hosts = || seq(opts.hosts.iter().map(|h| h.as_str().into()).collect());
    let gateway = resource(
        "networking.istio.io/v1",
        "Gateway",
        metadata(opts, NAME),
        map! {
            "selector" => selector(opts),
            "servers" => seq(vec![map! {
                "port" => map! { "number" => u64::from(opts.port), "name" => "http-llm-failover", "protocol" => "HTTP" },
                "hosts" => hosts(),
            }]),
        },
    );
    let not_patched = "{\"error\":{\"type\":\"server_error\",\"code\":\"gateway_not_configured\",\"message\":\"the llm-failover EnvoyFilter is not applied on this gateway\"}}";
    let virtual_service = resource(
        "networking.istio.io/v1",
        "VirtualService",
        metadata(opts, NAME),
        map! {
            "hosts" => hosts(),
            "gateways" => seq(vec![NAME.into()]),
            "exportTo" => seq(vec![".".into()]),
            "http" => seq(vec![map! {
                "name" => ROUTE_NAME,
                "directResponse" => map! { "status" => 503u64, "body" => map! { "string" => not_patched } },
            }]),
        },
    );
    vec![gateway, virtual_service]
}

/// The wasm filter's typed config for ECDS: the standalone filter with the module fetched by
/// istio-agent from `opts.module` and failures closed.
fn extension_config(gw: &Gateway, opts: &Options, name: &str, json: &str) -> Value {
    let filter = render::wasm_filter(gw, name, json);
    let mut typed_config = filter.get("typed_config").cloned().unwrap_or(Value::Null);
    if let Some(Value::Mapping(config)) = typed_config.get_mut("config") {
        if let Some(Value::Mapping(vm)) = config.get_mut("vm_config") {
            let mut remote = Mapping::new();
            // istio-agent fetches the module and hands Envoy a local file; the cluster is a
            // placeholder Envoy never uses (as in the configs istiod makes for WasmPlugin).
            remote.insert(
                "http_uri".into(),
                map! { "uri" => opts.module.as_str(), "cluster" => "_", "timeout" => "30s" },
            );
            if let Some(sha) = &opts.module_sha256 {
                remote.insert("sha256".into(), sha.as_str().into());
            }
            vm.insert("code".into(), map! { "remote" => Value::Mapping(remote) });
        }
        config.insert("failure_policy".into(), "FAIL_CLOSED".into());
    }
    map! { "name" => name, "typed_config" => typed_config }
}

/// A filter that takes its configuration from istiod over ECDS (ADS): the Wasm type only, no
/// default; like istiod's own ECDS references, it holds its listener until the config arrives.
pub fn discovered_filter(name: &str) -> Value {
    render::discovered_from(
        name,
        map! { "ads" => map! {}, "resource_api_version" => "V3", "initial_fetch_timeout" => "0s" },
    )
}

fn patch(apply_to: &str, matcher: Value, operation: &str, value: Value) -> Value {
    let mut m = Mapping::new();
    m.insert("context".into(), "GATEWAY".into());
    if let Value::Mapping(extra) = matcher {
        m.extend(extra);
    }
    map! {
        "applyTo" => apply_to,
        "match" => Value::Mapping(m),
        "patch" => map! { "operation" => operation, "value" => value },
    }
}

fn listener_name(opts: &Options) -> String {
    format!("0.0.0.0_{}", opts.target_port)
}

/// Istio makes one virtual host per served host, named `<host>:<server port>`.
fn route_config_match(opts: &Options, host: &str, route: Option<&str>) -> Value {
    let vhost_name = format!("{host}:{}", opts.port);
    let mut vhost = Mapping::new();
    vhost.insert("name".into(), vhost_name.into());
    if let Some(route) = route {
        vhost.insert("route".into(), map! { "name" => route });
    }
    map! { "routeConfiguration" => map! { "name" => format!("http.{}", opts.target_port), "vhost" => Value::Mapping(vhost) } }
}

/// The route patch: the standalone route's action and body limit, merged into Istio's route.
fn route_patch_value(gw: &Gateway) -> Value {
    let mut route = match render::route(gw) {
        Value::Mapping(m) => m,
        _ => Mapping::new(),
    };
    // Istio's route keeps its own name and match.
    route.shift_remove("name");
    route.shift_remove("match");
    Value::Mapping(route)
}

/// The cluster patch: the upstream role and the protocol choice. A MERGE replaces Istio's whole
/// `HttpProtocolOptions` entry, so this is the complete entry.
fn cluster_patch_value(gw: &Gateway, u: &Upstream) -> Value {
    // Istio alone would speak HTTP/1.1, where every failed-over answer costs its connection.
    map! {
        "per_connection_buffer_limit_bytes" => gw.max_request_body,
        "typed_extension_protocol_options" => render::upstream_options(
            render::http_protocol(u),
            &discovered_filter(UPSTREAM_EXTENSION),
        ),
    }
}

/// Istio 1.30 lists in its stats inclusion list no name of the form `cluster.<name>.*`, where
/// Envoy 1.38 puts the upstream role's metrics (DESIGN section 7): this pattern lets them in.
fn cluster_scoped_metrics_pattern() -> String {
    format!(
        r"cluster\.[^.]+\.{}\.llm_failover_.*",
        llm_failover::metrics::ENVOY_NAMESPACE
    )
}

/// The one `EnvoyFilter` carrying both roles, the listener, virtual host, route and cluster
/// patches.
pub fn envoy_filter(gw: &Gateway, opts: &Options) -> Value {
    let listener_match = |filter: Option<Value>| {
        let mut l = Mapping::new();
        l.insert("name".into(), listener_name(opts).into());
        if let Some(f) = filter {
            l.insert("filterChain".into(), map! { "filter" => f });
        }
        map! { "listener" => Value::Mapping(l) }
    };
    let mut patches = vec![
        patch(
            "EXTENSION_CONFIG",
            map! {},
            "ADD",
            extension_config(gw, opts, DOWNSTREAM_EXTENSION, &gw.downstream_json),
        ),
        patch(
            "EXTENSION_CONFIG",
            map! {},
            "ADD",
            extension_config(gw, opts, UPSTREAM_EXTENSION, &gw.upstream_json),
        ),
        patch(
            "HTTP_FILTER",
            listener_match(Some(
                map! { "name" => HCM_NAME, "subFilter" => map! { "name" => ROUTER_NAME } },
            )),
            "INSERT_BEFORE",
            discovered_filter(DOWNSTREAM_EXTENSION),
        ),
        patch(
            "LISTENER",
            listener_match(None),
            "MERGE",
            map! { "per_connection_buffer_limit_bytes" => gw.max_request_body },
        ),
        // Envoy's own error answers in the filter's JSON shape (as standalone). istiod merges
        // the typed config into its HTTP connection manager's, which sets no local_reply_config.
        patch(
            "NETWORK_FILTER",
            listener_match(Some(map! { "name" => HCM_NAME })),
            "MERGE",
            map! {
                "name" => HCM_NAME,
                "typed_config" => typed(render::HCM, map! { "local_reply_config" => render::local_reply_config(gw) }),
            },
        ),
    ];
    for host in &opts.hosts {
        patches.push(patch(
            "VIRTUAL_HOST",
            route_config_match(opts, host, None),
            "MERGE",
            map! { "include_request_attempt_count" => true },
        ));
        // The route Istio makes of the VirtualService's direct response has no route action,
        // so no retry policy of Istio's (route.go: only a route with destinations gets one).
        // Lists replaced all the same where the release can (1.31+), so nothing Istio may add
        // there is appended to the failover route's; 1.30 has MERGE only.
        let operation = if grouping(gw) {
            "MERGE"
        } else {
            "MERGE_AND_REPLACE_LIST"
        };
        patches.push(patch(
            "HTTP_ROUTE",
            route_config_match(opts, host, Some(ROUTE_NAME)),
            operation,
            route_patch_value(gw),
        ));
    }
    if grouping(gw) {
        // The standalone renderer's clusters whole: hosts naming their provider, TLS
        // origination, circuit breakers, the grouping clusters over them.
        for mut cluster in render::cluster_values(gw, &discovered_filter(UPSTREAM_EXTENSION)) {
            // Stats named as Istio names its own clusters' (`<name>;`, DelimitedStatsPrefix):
            // its `cluster_name` tag (`^cluster(\.(.+);)`) then takes the name out of the
            // upstream role's metric names, as Envoy's default tag does standalone.
            if let Value::Mapping(c) = &mut cluster {
                let stat_name = c
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| format!("{n};"));
                if let Some(stat_name) = stat_name {
                    c.insert("alt_stat_name".into(), stat_name.into());
                }
            }
            patches.push(patch("CLUSTER", map! {}, "ADD", cluster));
        }
    } else {
        for u in render::clusters(gw) {
            patches.push(patch(
                "CLUSTER",
                map! { "cluster" => map! { "name" => u.cluster.as_str() } },
                "MERGE",
                cluster_patch_value(gw, u),
            ));
        }
    }
    resource(
        "networking.istio.io/v1alpha3",
        "EnvoyFilter",
        metadata(opts, NAME),
        map! {
            "workloadSelector" => map! { "labels" => selector(opts) },
            "configPatches" => seq(patches),
        },
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
