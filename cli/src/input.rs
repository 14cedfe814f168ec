//! Reading a failover file: `${VAR}` substitution, YAML, the renderer's own fields, and the
//! plugin configuration validated by the filter's own code (`llm_failover::config`).

use crate::checks;
use crate::diag::Diag;
use crate::subst;
use crate::version::{self, EnvoyVersion, Mode};
use llm_failover::config::Config;
use llm_failover::duration::parse_duration_ms;
use llm_failover::group::{self, Group};
use serde_yaml_ng::{Mapping, Value};
use std::net::{IpAddr, Ipv4Addr};

pub const DEFAULT_MODULE: &str = "dist/llm_failover.wasm";
pub const DEFAULT_LISTEN_ADDRESS: &str = "127.0.0.1";
pub const DEFAULT_LISTEN_PORT: u16 = 10000;
pub const DEFAULT_ADMIN_PORT: u16 = 9901;
/// The status endpoint's own listener, on loopback, unless `status_listen` says otherwise.
pub const DEFAULT_STATUS_PORT: u16 = 9902;
/// 10 MiB: above the 8 MiB bodies SPEC section 7 promises to replay.
pub const DEFAULT_MAX_REQUEST_BODY: u64 = 10 * 1024 * 1024;
pub const DEFAULT_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Top-level fields only the renderer reads; everything else is plugin configuration.
pub const RENDERER_KEYS: [&str; 8] = [
    "listen",
    "status_listen",
    "admin",
    "module",
    "max_request_body",
    "ca_file",
    "istio",
    "envoy_version",
];
/// Per-provider fields only the renderer reads.
pub const PROVIDER_RENDERER_KEYS: [&str; 5] =
    ["endpoint", "tls", "sni", "connect_timeout", "http2"];

/// Where a listener or the admin interface binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addr {
    pub address: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Host {
    /// The host as Envoy's `socket_address.address` wants it (IPv6 without brackets).
    pub fn address(&self) -> String {
        match self {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(name) => name.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: Host,
    pub port: u16,
}

/// How to reach one provider: what its Envoy cluster is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub provider: String,
    pub cluster: String,
    pub endpoint: Endpoint,
    pub tls: bool,
    pub sni: Option<String>,
    pub connect_timeout_ms: u64,
    /// Plain-HTTP provider spoken to in HTTP/2 (h2c); TLS providers negotiate it by ALPN.
    pub http2: bool,
}

impl Upstream {
    fn same_cluster_settings(&self, other: &Upstream) -> bool {
        self.endpoint == other.endpoint
            && self.tls == other.tls
            && self.sni == other.sni
            && self.connect_timeout_ms == other.connect_timeout_ms
            && self.http2 == other.http2
    }
}

/// Where the status endpoint is served (`status_path` set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusListen {
    /// Its own listener (the default: 127.0.0.1:9902), with its own copy of the downstream
    /// filter that answers the status path and nothing else; the API listener does not answer it.
    Own {
        addr: Addr,
        path: String,
        json: String,
    },
    /// On the API listener (`status_listen: api`): anyone who reaches the gateway reads it.
    Api,
}

/// A failover file, read and validated: everything the renderer needs.
#[derive(Debug, Clone)]
pub struct Gateway {
    pub listen: Addr,
    pub admin: Option<Addr>,
    pub module: String,
    pub max_request_body: u64,
    pub ca_file: String,
    /// The `istio:` block as written, read by `render --target istio` only (`crate::istio`).
    pub istio: Option<Value>,
    /// The Envoy the configuration is rendered for (`envoy_version:` or `--envoy-version`).
    pub envoy_version: EnvoyVersion,
    /// Where `envoy_version` was set: `Some("--envoy-version")`, `Some("envoy_version")` (the
    /// file), or `None` (the default).
    pub envoy_version_from: Option<&'static str>,
    /// Grouping mode's clusters (empty in router mode).
    pub groups: Vec<Group>,
    /// The plugin configuration (without `role`), keys in the file's order; renderer fields
    /// removed, renderer defaults (`authority`) added.
    pub plugin: Mapping,
    /// The same configuration as the filter will see it.
    pub config: Config,
    /// The plugin configuration JSON for the listener's filter (`"role":"downstream"`) and for
    /// the clusters' filters (`"role":"upstream"`): identical but for the role.
    pub downstream_json: String,
    pub upstream_json: String,
    /// The status endpoint's listener, when `status_path` is set.
    pub status: Option<StatusListen>,
    /// One per provider, in `config.providers` order.
    pub upstreams: Vec<Upstream>,
    /// Environment variables credentials are read from (`credential.env`), in file order.
    pub env_keys: Vec<String>,
    /// Cross-check findings that do not stop rendering.
    pub warnings: Vec<Diag>,
}

/// What credential `env:` lookups return while rendering: the key itself never goes into a
/// rendered file, Envoy passes the variable into the VM.
fn placeholder_env(_: &str) -> Option<String> {
    Some("rendered-placeholder".to_string())
}

/// Reads a failover file's text. `env` serves `${VAR}` substitution; `module` overrides the
/// file's `module:`. Returns every error at once.
pub fn load(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    module: Option<&str>,
) -> Result<Gateway, Vec<Diag>> {
    load_for(text, env, module, None)
}

/// [`load`] for the Envoy version `envoy_version` ("1.38"), which overrides the file's
/// `envoy_version:`.
pub fn load_for(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    module: Option<&str>,
    envoy_version: Option<&str>,
) -> Result<Gateway, Vec<Diag>> {
    let text = subst::substitute(text, env)?;
    let mut root = parse_yaml(&text)?;
    let mut errors = Vec::new();

    let listen = match root.shift_remove("listen") {
        None => Addr {
            address: DEFAULT_LISTEN_ADDRESS.into(),
            port: DEFAULT_LISTEN_PORT,
        },
        Some(v) => parse_addr(&v, "listen", DEFAULT_LISTEN_PORT, &mut errors),
    };
    let admin = root
        .shift_remove("admin")
        .map(|v| parse_addr(&v, "admin", DEFAULT_ADMIN_PORT, &mut errors));
    // `api`, or an address (default 127.0.0.1:9902); read once status_path is known.
    let status_listen = match root.shift_remove("status_listen") {
        Some(Value::String(s)) if s == "api" => None,
        Some(Value::Null) => Some(default_status_addr()),
        Some(v) if v.is_string() => {
            errors.push(Diag::error(
                "status_listen",
                format!(
                    "{} — write api, or an address such as {{address: 127.0.0.1, port: 9902}}",
                    show(&v)
                ),
            ));
            None
        }
        Some(v) => Some(parse_addr(
            &v,
            "status_listen",
            DEFAULT_STATUS_PORT,
            &mut errors,
        )),
        None => Some(default_status_addr()),
    };
    let file_module = root.shift_remove("module").and_then(|v| {
        non_empty_string(
            &v,
            "module",
            "the path of llm_failover.wasm as Envoy sees it",
            &mut errors,
        )
    });
    let module = module
        .map(str::to_string)
        .or(file_module)
        .unwrap_or_else(|| DEFAULT_MODULE.to_string());
    let max_request_body = match root.shift_remove("max_request_body") {
        None => DEFAULT_MAX_REQUEST_BODY,
        Some(v) => parse_size(&v).unwrap_or_else(|problem| {
            errors.push(Diag::error("max_request_body", problem));
            DEFAULT_MAX_REQUEST_BODY
        }),
    };
    let ca_file = root
        .shift_remove("ca_file")
        .and_then(|v| {
            non_empty_string(
                &v,
                "ca_file",
                "the CA bundle TLS providers are verified against",
                &mut errors,
            )
        })
        .unwrap_or_else(|| DEFAULT_CA_FILE.to_string());
    let istio = root.shift_remove("istio");
    let file_version = root.shift_remove("envoy_version");
    let envoy_version_from = match (envoy_version, &file_version) {
        (Some(_), _) => Some("--envoy-version"),
        (None, Some(_)) => Some("envoy_version"),
        (None, None) => None,
    };
    let envoy_version = match (envoy_version, &file_version) {
        (Some(flag), _) => EnvoyVersion::parse(flag).unwrap_or_else(|problem| {
            errors.push(Diag::error("--envoy-version", problem));
            version::DEFAULT
        }),
        (None, Some(v)) => parse_envoy_version(v).unwrap_or_else(|problem| {
            errors.push(Diag::error("envoy_version", problem));
            version::DEFAULT
        }),
        (None, None) => version::DEFAULT,
    };
    if root.contains_key("role") {
        errors.push(Diag::error(
            "role",
            "set by the renderer (downstream on the listener, upstream on each provider cluster) — remove it",
        ));
        root.shift_remove("role");
    }
    for key in ["routing", "hold_answers", "body_limit"] {
        if root.contains_key(key) {
            errors.push(Diag::error(
                key,
                "set by the renderer from envoy_version — remove it, and set envoy_version instead",
            ));
            root.shift_remove(key);
        }
    }

    // Per-provider renderer fields, by position in the file (the plugin config keeps the order).
    let mut upstreams: Vec<Option<Upstream>> = Vec::new();
    if let Some(Value::Sequence(providers)) = root.get_mut("providers") {
        for (i, p) in providers.iter_mut().enumerate() {
            let at = format!("providers[{i}]");
            let Value::Mapping(p) = p else {
                upstreams.push(None);
                continue;
            };
            upstreams.push(parse_upstream(p, &at, &mut errors));
        }
    }

    let json = match serde_json::to_string(&Value::Mapping(root.clone())) {
        Ok(json) => json,
        Err(e) => {
            errors.push(Diag::error("", format!("cannot be turned into the plugin's JSON: {e} — use plain strings as mapping keys")));
            return Err(errors);
        }
    };
    let config = match Config::from_json(json.as_bytes(), &placeholder_env) {
        Ok(config) => Some(config),
        Err(config_errors) => {
            for e in config_errors {
                let problem = explain_unknown_field(&e.field, &e.problem);
                errors.push(Diag::error(e.field, problem));
            }
            None
        }
    };
    let Some(config) = config else {
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }

    // Config keeps providers in file order, one per entry of the file's `providers`.
    let mut resolved = Vec::with_capacity(config.providers.len());
    for (i, (p, u)) in config.providers.iter().zip(upstreams).enumerate() {
        let Some(mut u) = u else {
            errors.push(Diag::error(
                format!("providers[{i}]"),
                "has no endpoint — add endpoint: host:port",
            ));
            continue;
        };
        u.provider = p.name.clone();
        u.cluster = p.cluster.clone();
        if let Some(first) = resolved.iter().find(|o: &&Upstream| o.cluster == u.cluster) {
            if !first.same_cluster_settings(&u) {
                errors.push(Diag::error(
                    format!("providers[{i}].endpoint"),
                    format!(
                        "cluster {:?} is also used by provider {:?} with a different endpoint, tls, sni or connect_timeout — give both the same settings, or different clusters",
                        u.cluster, first.provider
                    ),
                ));
            }
        }
        resolved.push(u);
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    add_default_authorities(&mut root, &resolved);
    let status_path = root
        .get("status_path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    let status = match (status_path, status_listen) {
        (None, _) => None,
        (Some(_), None) => Some(StatusListen::Api),
        (Some(path), Some(addr)) => {
            // The status listener's filter answers the path; the API listener's and the
            // clusters' filters never see it (and keep one configuration fingerprint).
            let json = match plugin_json(&root, "downstream", envoy_version, max_request_body) {
                Ok(json) => json,
                Err(e) => {
                    return Err(vec![Diag::error(
                        "",
                        format!("cannot be turned into the plugin's JSON: {e}"),
                    )])
                }
            };
            root.shift_remove("status_path");
            Some(StatusListen::Own { addr, path, json })
        }
    };
    let mode = envoy_version.mode();
    let (downstream_json, upstream_json) = match (
        plugin_json(&root, "downstream", envoy_version, max_request_body),
        plugin_json(&root, "upstream", envoy_version, max_request_body),
    ) {
        (Ok(d), Ok(u)) => (d, u),
        (Err(e), _) | (_, Err(e)) => {
            return Err(vec![Diag::error(
                "",
                format!("cannot be turned into the plugin's JSON: {e}"),
            )])
        }
    };
    // What Envoy will load, checked once more as the filter will see it.
    let config = loaded_config(&downstream_json)?;
    let groups = match mode {
        Mode::Router => Vec::new(),
        Mode::Grouping => grouping_clusters(&config, envoy_version)?,
    };
    let env_keys = credential_env_keys(&root);
    let warnings = checks::cross_check(&config);
    Ok(Gateway {
        listen,
        admin,
        module,
        max_request_body,
        ca_file,
        istio,
        envoy_version,
        envoy_version_from,
        groups,
        plugin: root,
        config,
        downstream_json,
        upstream_json,
        status,
        upstreams: resolved,
        env_keys,
        warnings,
    })
}

impl Gateway {
    /// The same gateway with provider `i` reaching Envoy cluster `clusters[i]` (e.g. the names
    /// Istio gives clusters): the plugin configuration of both roles and the upstreams follow.
    pub fn with_clusters(&self, clusters: &[String]) -> Result<Gateway, Vec<Diag>> {
        let mut gw = self.clone();
        if let Some(Value::Sequence(providers)) = gw.plugin.get_mut("providers") {
            for (p, cluster) in providers.iter_mut().zip(clusters) {
                if let Value::Mapping(p) = p {
                    p.insert("cluster".into(), cluster.as_str().into());
                }
            }
        }
        for (u, cluster) in gw.upstreams.iter_mut().zip(clusters) {
            u.cluster.clone_from(cluster);
        }
        let json_error = |e: serde_json::Error| {
            vec![Diag::error(
                "",
                format!("cannot be turned into the plugin's JSON: {e}"),
            )]
        };
        let version = gw.envoy_version;
        let body = gw.max_request_body;
        gw.downstream_json =
            plugin_json(&gw.plugin, "downstream", version, body).map_err(json_error)?;
        gw.upstream_json =
            plugin_json(&gw.plugin, "upstream", version, body).map_err(json_error)?;
        gw.config = loaded_config(&gw.downstream_json)?;
        if version.mode() == Mode::Grouping {
            gw.groups = grouping_clusters(&gw.config, version)?;
        }
        Ok(gw)
    }
}

/// Grouping mode's clusters for `config`, or why it cannot be served on `version`.
fn grouping_clusters(config: &Config, version: EnvoyVersion) -> Result<Vec<Group>, Vec<Diag>> {
    group::groups(config).map_err(|errs| {
        errs.into_iter()
            .map(|e| Diag::error(e.field, format!("envoy_version {version}: {}", e.problem)))
            .collect()
    })
}

/// The configuration as the filter will read it from `json`.
fn loaded_config(json: &str) -> Result<Config, Vec<Diag>> {
    Config::from_json(json.as_bytes(), &placeholder_env).map_err(|errs| {
        errs.into_iter()
            .map(|e| Diag::error(e.field, e.problem))
            .collect()
    })
}

fn default_status_addr() -> Addr {
    Addr {
        address: DEFAULT_LISTEN_ADDRESS.into(),
        port: DEFAULT_STATUS_PORT,
    }
}

/// The plugin configuration JSON for one role, with what the renderer sets for the target
/// Envoy (`routing`, `body_limit`, `hold_answers`).
fn plugin_json(
    plugin: &Mapping,
    role: &str,
    version: EnvoyVersion,
    max_request_body: u64,
) -> Result<String, serde_json::Error> {
    let mut m = Mapping::new();
    m.insert("role".into(), role.into());
    if version.mode() == Mode::Grouping {
        m.insert("routing".into(), "groups".into());
        m.insert("body_limit".into(), max_request_body.into());
    }
    if !version.holds_answers() {
        m.insert("hold_answers".into(), false.into());
    }
    m.extend(plugin.clone());
    serde_json::to_string(&Value::Mapping(m))
}

/// `envoy_version:` as written: a string, or a number YAML read from `1.38` (but `1.40` reads
/// as 1.4, so a number with one decimal is refused: quote it).
fn parse_envoy_version(v: &Value) -> Result<EnvoyVersion, String> {
    match v {
        Value::String(s) => EnvoyVersion::parse(s),
        Value::Number(n) => {
            let text = n.to_string();
            if text
                .split_once('.')
                .is_some_and(|(_, minor)| minor.len() >= 2)
            {
                EnvoyVersion::parse(&text)
            } else {
                Err(format!(
                    "{text} is ambiguous (YAML reads 1.40 as the number 1.4) — quote it, e.g. envoy_version: \"1.40\""
                ))
            }
        }
        other => Err(format!(
            "{} is not a version — write e.g. envoy_version: \"1.38\"",
            show(other)
        )),
    }
}

fn parse_yaml(text: &str) -> Result<Mapping, Vec<Diag>> {
    // serde_yaml_ng's message already says where: "... at line 2 column 7, while parsing ...".
    let mut value: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| vec![Diag::error("", format!("not valid YAML: {e}"))])?;
    value
        .apply_merge()
        .map_err(|e| vec![Diag::error("", format!("YAML merge key (<<) problem: {e}"))])?;
    match value {
        Value::Mapping(m) => Ok(m),
        Value::Null => Err(vec![Diag::error(
            "",
            "the file is empty — it needs at least providers: and chains:",
        )]),
        _ => Err(vec![Diag::error(
            "",
            "the file must be a YAML mapping with providers: and chains: at the top",
        )]),
    }
}

fn non_empty_string(v: &Value, field: &str, what: &str, errors: &mut Vec<Diag>) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        _ => {
            errors.push(Diag::error(
                field,
                format!("must be a non-empty string — {what}"),
            ));
            None
        }
    }
}

fn parse_addr(v: &Value, field: &str, default_port: u16, errors: &mut Vec<Diag>) -> Addr {
    let mut addr = Addr {
        address: DEFAULT_LISTEN_ADDRESS.into(),
        port: default_port,
    };
    let Value::Mapping(m) = v else {
        errors.push(Diag::error(
            field,
            "must be a mapping — write e.g. {address: 127.0.0.1, port: 10000}",
        ));
        return addr;
    };
    for (key, value) in m {
        match key.as_str() {
            Some("address") => match value.as_str().map(|s| s.parse::<IpAddr>()) {
                Some(Ok(ip)) => addr.address = ip.to_string(),
                _ => errors.push(Diag::error(
                    format!("{field}.address"),
                    format!("{} is not an IP address — Envoy binds IP literals only, e.g. 127.0.0.1 or 0.0.0.0", show(value)),
                )),
            },
            Some("port") => match parse_port(value) {
                Some(port) => addr.port = port,
                None => errors.push(Diag::error(format!("{field}.port"), format!("{} is not a port — use 1-65535", show(value)))),
            },
            _ => errors.push(Diag::error(format!("{field}.{}", show_key(key)), "unknown field — expected address or port")),
        }
    }
    addr
}

fn parse_port(v: &Value) -> Option<u16> {
    let port = match v {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    u16::try_from(port).ok().filter(|p| *p > 0)
}

/// Bytes as a number, or a size with a unit: "10MiB", "8MB", "512KiB", "1048576".
pub fn parse_size(v: &Value) -> Result<u64, String> {
    const HINT: &str = "write a number of bytes or a size such as \"10MiB\", \"8MB\", \"512KiB\"";
    let bytes = match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("{} is not a size — {HINT}", show(v)))?,
        Value::String(s) => {
            let t = s.trim();
            let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
            let (number, unit) = t.split_at(split);
            let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
                "" | "b" => 1,
                "k" | "kb" => 1_000,
                "ki" | "kib" => 1 << 10,
                "m" | "mb" => 1_000_000,
                "mi" | "mib" => 1 << 20,
                "g" | "gb" => 1_000_000_000,
                "gi" | "gib" => 1 << 30,
                _ => return Err(format!("{s:?} has an unknown unit — {HINT}")),
            };
            let n: u64 = number
                .parse()
                .map_err(|_| format!("{s:?} is not a size — {HINT}"))?;
            n.checked_mul(scale)
                .ok_or_else(|| format!("{s:?} is too large — at most 4GiB"))?
        }
        _ => return Err(format!("{} is not a size — {HINT}", show(v))),
    };
    if bytes == 0 {
        return Err(
            "must be more than 0 bytes — the request body is buffered for fallbacks".into(),
        );
    }
    if bytes > u64::from(u32::MAX) {
        return Err(
            "is larger than Envoy's buffer limits allow (4GiB) — use a smaller size".into(),
        );
    }
    Ok(bytes)
}

fn parse_upstream(p: &mut Mapping, at: &str, errors: &mut Vec<Diag>) -> Option<Upstream> {
    let endpoint = p.shift_remove("endpoint");
    let tls = p.shift_remove("tls");
    let sni = p.shift_remove("sni");
    let connect_timeout = p.shift_remove("connect_timeout");
    let http2 = p.shift_remove("http2");
    let before = errors.len();

    let endpoint = match endpoint {
        None => {
            errors.push(Diag::error(
                format!("{at}.endpoint"),
                "missing — add endpoint: host:port, e.g. \"api.openai.com:443\"",
            ));
            None
        }
        Some(Value::String(s)) => match parse_endpoint(&s) {
            Ok(e) => Some(e),
            Err(problem) => {
                errors.push(Diag::error(format!("{at}.endpoint"), problem));
                None
            }
        },
        Some(other) => {
            errors.push(Diag::error(
                format!("{at}.endpoint"),
                format!(
                    "{} is not host:port — quote it, e.g. \"api.openai.com:443\"",
                    show(&other)
                ),
            ));
            None
        }
    };
    let tls = match tls {
        None => None,
        Some(Value::Bool(b)) => Some(b),
        Some(other) => {
            errors.push(Diag::error(
                format!("{at}.tls"),
                format!("{} is not true or false", show(&other)),
            ));
            None
        }
    };
    let sni = match sni {
        None => None,
        Some(Value::String(s)) if !s.is_empty() && is_dns_name(&s) => Some(s),
        Some(other) => {
            errors.push(Diag::error(
                format!("{at}.sni"),
                format!(
                    "{} is not a host name — write the name the provider's certificate is for",
                    show(&other)
                ),
            ));
            None
        }
    };
    let connect_timeout_ms = match connect_timeout {
        None => DEFAULT_CONNECT_TIMEOUT_MS,
        Some(v) => match duration_ms(&v) {
            Ok(ms) if ms > 0 => ms,
            Ok(_) => {
                errors.push(Diag::error(
                    format!("{at}.connect_timeout"),
                    "must be longer than 0s — e.g. \"5s\"",
                ));
                DEFAULT_CONNECT_TIMEOUT_MS
            }
            Err(problem) => {
                errors.push(Diag::error(format!("{at}.connect_timeout"), problem));
                DEFAULT_CONNECT_TIMEOUT_MS
            }
        },
    };
    let endpoint = endpoint?;
    let tls = tls.unwrap_or(endpoint.port == 443);
    let http2 = match http2 {
        None => false,
        Some(Value::Bool(_)) if tls => {
            errors.push(Diag::error(
                format!("{at}.http2"),
                "TLS providers negotiate HTTP/2 by ALPN already — remove http2",
            ));
            false
        }
        Some(Value::Bool(b)) => b,
        Some(other) => {
            errors.push(Diag::error(
                format!("{at}.http2"),
                format!("{} is not true or false", show(&other)),
            ));
            false
        }
    };
    if !tls && sni.is_some() {
        errors.push(Diag::error(
            format!("{at}.sni"),
            "set without TLS — remove sni, or set tls: true",
        ));
    }
    let sni = match (&endpoint.host, sni) {
        (_, Some(s)) => Some(s),
        (Host::Name(name), None) if tls => Some(name.clone()),
        (Host::Ip(_), None) if tls => {
            // Without a name Envoy would accept any certificate the CA bundle trusts.
            errors.push(Diag::error(
                format!("{at}.sni"),
                "required for TLS to an IP address — set it to the name the provider's certificate is for",
            ));
            None
        }
        _ => None,
    };
    if errors.len() > before {
        return None;
    }
    Some(Upstream {
        provider: String::new(),
        cluster: String::new(),
        endpoint,
        tls,
        sni,
        connect_timeout_ms,
        http2,
    })
}

fn duration_ms(v: &Value) -> Result<u64, String> {
    match v {
        Value::String(s) => parse_duration_ms(s),
        Value::Number(n) => match n.as_f64() {
            Some(secs) if secs.is_finite() && (0.0..1e9).contains(&secs) => {
                Ok((secs * 1000.0).round() as u64)
            }
            _ => Err(format!("{n} is not a duration — write e.g. \"5s\"")),
        },
        other => Err(format!(
            "{} is not a duration — write e.g. \"5s\"",
            show(other)
        )),
    }
}

/// `host:port`, `1.2.3.4:port` or `[v6]:port`.
pub fn parse_endpoint(s: &str) -> Result<Endpoint, String> {
    const EXAMPLE: &str = "e.g. \"api.openai.com:443\" or \"127.0.0.1:8000\"";
    let t = s.trim();
    if t.contains("://") {
        return Err(format!(
            "{s:?} has a scheme — write host:port only ({EXAMPLE}); TLS is set with tls:"
        ));
    }
    if t.contains('/') {
        return Err(format!(
            "{s:?} has a path — write host:port only and put the path in path_prefix"
        ));
    }
    let (host, port) = if let Some(rest) = t.strip_prefix('[') {
        let (v6, port) = rest
            .split_once("]:")
            .ok_or_else(|| format!("{s:?} is not [IPv6]:port — e.g. \"[::1]:8000\""))?;
        let ip: std::net::Ipv6Addr = v6
            .parse()
            .map_err(|_| format!("{v6:?} is not an IPv6 address"))?;
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = t
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?} has no port — write host:port, {EXAMPLE}"))?;
        if host.contains(':') {
            return Err(format!(
                "{s:?}: write IPv6 addresses in brackets, e.g. \"[::1]:8000\""
            ));
        }
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            (Host::Ip(IpAddr::V4(ip)), port)
        } else if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !host.is_empty() {
            return Err(format!("{host:?} is not a valid IPv4 address"));
        } else if is_dns_name(host) {
            (Host::Name(host.to_ascii_lowercase()), port)
        } else {
            return Err(format!(
                "{host:?} is not a host name or IP address — {EXAMPLE}"
            ));
        }
    };
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("port {port:?} is not a number from 1 to 65535 — {EXAMPLE}"))?;
    Ok(Endpoint { host, port })
}

fn is_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Providers reached by host name get `authority` = that host (`host:port` on a non-default
/// port) unless they set one: providers behind shared front ends route on it. Providers at an
/// IP address over TLS get their `sni` name.
fn add_default_authorities(root: &mut Mapping, upstreams: &[Upstream]) {
    let Some(Value::Sequence(providers)) = root.get_mut("providers") else {
        return;
    };
    for (p, u) in providers.iter_mut().zip(upstreams) {
        let host = match (&u.endpoint.host, &u.sni) {
            (Host::Name(host), _) => host,
            (Host::Ip(_), Some(sni)) => sni,
            (Host::Ip(_), None) => continue,
        };
        let Value::Mapping(p) = p else {
            continue;
        };
        if p.contains_key("authority") {
            continue;
        }
        let default_port = if u.tls { 443 } else { 80 };
        let authority = if u.endpoint.port == default_port {
            host.clone()
        } else {
            format!("{host}:{}", u.endpoint.port)
        };
        p.insert("authority".into(), authority.into());
    }
}

fn credential_env_keys(root: &Mapping) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    let Some(Value::Sequence(providers)) = root.get("providers") else {
        return keys;
    };
    for p in providers {
        if let Some(var) = p
            .get("credential")
            .and_then(|c| c.get("env"))
            .and_then(Value::as_str)
        {
            if !keys.iter().any(|k| k == var) {
                keys.push(var.to_string());
            }
        }
    }
    keys
}

/// serde's "unknown field `x`, expected one of ..." becomes a suggestion; at the top level and
/// in providers the renderer's own fields are offered too.
fn explain_unknown_field(field: &str, problem: &str) -> String {
    let Some(rest) = problem.strip_prefix("unknown field `") else {
        return problem.to_string();
    };
    let Some((name, expected)) = rest.split_once('`') else {
        return problem.to_string();
    };
    let mut candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let top_level = !field.contains(['.', '[']);
    let in_provider = field.starts_with("providers[") && field.matches('.').count() == 1;
    if top_level {
        candidates.extend(RENDERER_KEYS);
    } else if in_provider {
        candidates.extend(PROVIDER_RENDERER_KEYS);
    }
    candidates.retain(|c| *c != "role");
    if let Some(best) = candidates
        .iter()
        .filter(|c| edit_distance(name, c) <= 2)
        .min_by_key(|c| edit_distance(name, c))
    {
        return format!("unknown field `{name}` — did you mean `{best}`?");
    }
    if candidates.is_empty() {
        return format!("unknown field `{name}` — remove it");
    }
    format!(
        "unknown field `{name}` — expected one of {}",
        candidates
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "nothing".into(),
        other => serde_json::to_string(other).unwrap_or_else(|_| "this value".into()),
    }
}

fn show_key(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_else(|| show(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_names_ips_and_v6() {
        assert_eq!(
            parse_endpoint("API.openai.com:443").unwrap(),
            Endpoint {
                host: Host::Name("api.openai.com".into()),
                port: 443
            }
        );
        assert_eq!(
            parse_endpoint("127.0.0.1:18101").unwrap().host,
            Host::Ip("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_endpoint("[::1]:8000").unwrap().host,
            Host::Ip("::1".parse().unwrap())
        );
        for (bad, says) in [
            ("api.openai.com", "has no port"),
            ("https://api.openai.com:443", "has a scheme"),
            ("api.openai.com:443/v1", "has a path"),
            ("api.openai.com:0", "port"),
            ("api.openai.com:99999", "port"),
            ("::1:80", "brackets"),
            ("1.2.3.400:80", "IPv4"),
            ("bad_host:80", "not a host name"),
            (":80", "not a host name"),
            ("[::1:80", "[IPv6]:port"),
        ] {
            let e = parse_endpoint(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes_take_units() {
        let s = |t: &str| parse_size(&Value::String(t.into()));
        assert_eq!(s("10MiB"), Ok(10 << 20));
        assert_eq!(s("8MB"), Ok(8_000_000));
        assert_eq!(s("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_size(&Value::Number(1024.into())), Ok(1024));
        assert!(s("5GiB").is_err());
        assert!(s("0").is_err());
        assert!(s("ten").is_err());
        assert!(s("10 parsecs").is_err());
    }

    #[test]
    fn unknown_fields_get_suggestions_including_renderer_fields() {
        let m = explain_unknown_field(
            "lisen",
            "unknown field `lisen`, expected one of `role`, `providers`, `chains`",
        );
        assert_eq!(m, "unknown field `lisen` — did you mean `listen`?");
        let m = explain_unknown_field(
            "providers[0].endpiont",
            "unknown field `endpiont`, expected one of `name`, `models`",
        );
        assert_eq!(m, "unknown field `endpiont` — did you mean `endpoint`?");
        let m = explain_unknown_field(
            "chains[0].zzz",
            "unknown field `zzz`, expected one of `name`, `models`",
        );
        assert_eq!(m, "unknown field `zzz` — expected one of `name`, `models`");
    }
}
