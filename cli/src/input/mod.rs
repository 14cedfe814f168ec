//! Reading a failover file: `${VAR}` substitution, YAML, the renderer's own fields, and the
//! plugin configuration validated by the filter's own code (`llm_failover::config`).
//!
//! One module per part of the file: `yaml` (parsing, how values are shown in messages),
//! `listen` (`listen`, `admin`, `status_listen`), `upstream` (each provider's `endpoint`, `tls`,
//! `sni`, `connect_timeout`, `http2`), `values` (sizes, durations, Envoy versions as written),
//! `suggest` ("did you mean" for unknown fields); this file reads the whole file into a
//! [`Gateway`].

use crate::checks;
use crate::diag::Diag;
use crate::subst;
use crate::version::{self, EnvoyVersion, Mode};
use listen::{default_status_addr, parse_addr, port_clashes};
use llm_failover::config::Config;
use llm_failover::group::{self, Group};
use serde_yaml_ng::{Mapping, Value};
use suggest::in_users_terms;
use upstream::{add_default_authorities, parse_upstream};
use values::parse_envoy_version;
use yaml::{non_empty_string, parse_yaml, show};

mod listen;
pub mod locate;
pub(crate) mod suggest;
mod upstream;
mod values;
mod yaml;

pub use listen::{
    Addr, StatusListen, DEFAULT_ADMIN_PORT, DEFAULT_LISTEN_ADDRESS, DEFAULT_LISTEN_PORT,
    DEFAULT_STATUS_PORT,
};
pub use upstream::{
    parse_endpoint, AwsCredentials, AwsSigning, Endpoint, Host, TokenFile, Upstream,
    DEFAULT_CONNECT_TIMEOUT_MS, PROVIDER_RENDERER_KEYS,
};
pub use values::parse_size;

pub const DEFAULT_MODULE: &str = "dist/llm_failover.wasm";

/// 10 MiB: above the 8 MiB bodies docs/behaviour.md section 7 promises to replay.
pub const DEFAULT_MAX_REQUEST_BODY: u64 = 10 * 1024 * 1024;
pub const DEFAULT_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

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

/// A failover file, read and validated: everything the renderer needs.
#[derive(Debug, Clone)]
pub struct Gateway {
    pub listen: Addr,
    pub admin: Option<Addr>,
    pub module: String,
    /// Which build of the filter Envoy loads (`render --runtime`): `module` is its path.
    pub runtime: crate::version::Runtime,
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
    /// The file's text after `${VAR}` substitution: where later messages are located.
    pub text: String,
    /// Where `render` writes the secret files of `credential.file` providers
    /// (`render::secret_files`), absolute: beside the bootstrap.
    pub secret_dir: Option<String>,
    /// The OpenTelemetry collector each request's record is sent to (`render
    /// --otel-collector`, [`Gateway::with_otel`]).
    pub otel: Option<Endpoint>,
}

/// A Bedrock provider without a credential is signed by Envoy (AWS Signature V4, after this
/// filter): the region comes from its `region` or its endpoint. Grouping mode runs only the
/// grouping cluster's filters, which would sign every provider's attempts: there Bedrock needs
/// an API key.
fn aws_signing(
    i: usize,
    p: &llm_failover::config::Provider,
    u: &mut Upstream,
    envoy_version: EnvoyVersion,
) -> Result<(), Diag> {
    let at = format!("providers[{i}]");
    if !p
        .envelope
        .is_some_and(llm_failover::envelope::Envelope::aws_signed)
        || u.token_file.is_some()
        || p.set_headers
            .iter()
            .any(|(name, _)| name == "authorization")
    {
        if u.aws_credentials.is_some() {
            return Err(Diag::error(
                format!("{at}.aws_credentials"),
                "only for a Bedrock provider Envoy signs (api: bedrock or bedrock_converse without a credential) — remove it",
            ));
        }
        return Ok(());
    }
    if envoy_version.mode() == Mode::Grouping {
        return Err(Diag::error(
            format!("{at}.api"),
            "Bedrock signed with AWS Signature V4 needs Envoy 1.39+: on older Envoys only the grouping cluster's filters run and would sign every provider's requests — give it a Bedrock API key instead: credential: {header: authorization, prefix: \"Bearer \", env: AWS_BEARER_TOKEN_BEDROCK}",
        ));
    }
    match upstream::bedrock_region(u.region.as_deref(), &u.endpoint) {
        Some(region) => {
            u.aws_signing = Some(upstream::AwsSigning {
                region,
                credentials: u.aws_credentials.clone().unwrap_or_default(),
            });
            Ok(())
        }
        None => Err(Diag::error(
            format!("{at}.region"),
            "missing — the AWS region Bedrock requests are signed for, e.g. region: us-east-1 (read from a bedrock-runtime.<region>.amazonaws.com endpoint when absent)",
        )),
    }
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
    match read(&text, module, envoy_version) {
        Ok(mut gw) => {
            locate::locate_all(&text, &mut gw.warnings);
            gw.text = text;
            Ok(gw)
        }
        Err(mut errors) => {
            locate::locate_all(&text, &mut errors);
            Err(errors)
        }
    }
}

/// The renderer's own top-level fields, read (and removed) from the file.
struct RendererFields {
    listen: Addr,
    admin: Option<Addr>,
    /// `status_listen` was written (a port clash with it is the user's to fix).
    status_written: bool,
    /// `None` for `status_listen: api`; read once `status_path` is known.
    status_listen: Option<Addr>,
    module: String,
    max_request_body: u64,
    ca_file: String,
    istio: Option<Value>,
    envoy_version: EnvoyVersion,
    envoy_version_from: Option<&'static str>,
}

/// [`load_for`] on the file's text after `${VAR}` substitution; messages not yet located.
fn read(
    text: &str,
    module: Option<&str>,
    envoy_version: Option<&str>,
) -> Result<Gateway, Vec<Diag>> {
    let mut root = parse_yaml(text)?;
    let mut errors = Vec::new();
    let fields = renderer_fields(&mut root, module, envoy_version, &mut errors);
    refuse_renderer_settings(&mut root, &mut errors);
    let upstreams = provider_upstreams(&mut root, &mut errors);
    let config = plugin_config(&root, errors)?;
    let envoy_version = fields.envoy_version;
    let resolved = resolve_upstreams(&config, upstreams, envoy_version)?;

    add_default_authorities(&mut root, &resolved);
    clear_token_file_headers(&mut root, &resolved);
    let status = status_listener(&mut root, &fields)?;
    let status_addr = match &status {
        Some(StatusListen::Own { addr, .. }) => Some(addr),
        _ => None,
    };
    let clashes = port_clashes(
        &fields.listen,
        fields.admin.as_ref(),
        status_addr,
        fields.status_written,
    );
    if !clashes.is_empty() {
        return Err(clashes);
    }
    let (downstream_json, upstream_json) =
        role_jsons(&root, envoy_version, fields.max_request_body)?;
    // What Envoy will load, checked once more as the filter will see it.
    let config = loaded_config(&downstream_json)?;
    let groups = match envoy_version.mode() {
        Mode::Router => Vec::new(),
        Mode::Grouping => grouping_clusters(&config, envoy_version)?,
    };
    let hedge_errors = hedge_filters(&config, &resolved);
    if !hedge_errors.is_empty() {
        return Err(hedge_errors);
    }
    let env_keys = credential_env_keys(&root);
    let mut warnings = checks::cross_check(&config);
    warnings.extend(upstream::fleet_address_problem(&config));
    if warnings.iter().any(Diag::is_error) {
        return Err(warnings);
    }
    Ok(Gateway {
        listen: fields.listen,
        admin: fields.admin,
        module: fields.module,
        runtime: crate::version::Runtime::Wasm,
        max_request_body: fields.max_request_body,
        ca_file: fields.ca_file,
        istio: fields.istio,
        envoy_version,
        envoy_version_from: fields.envoy_version_from,
        groups,
        plugin: root,
        config,
        downstream_json,
        upstream_json,
        status,
        upstreams: resolved,
        env_keys,
        warnings,
        text: String::new(),
        secret_dir: None,
        otel: None,
    })
}

/// A hedged attempt runs its composite cluster's filters, not its provider cluster's
/// (docs/internals.md, hedging): a provider whose requests Envoy signs (Bedrock SigV4) or
/// whose credential Envoy injects from a file cannot be in a hedging chain.
fn hedge_filters(config: &Config, upstreams: &[Upstream]) -> Vec<Diag> {
    let mut errors = Vec::new();
    for (c, chain) in config.chains.iter().enumerate() {
        if chain.hedge_after_ms.is_none() {
            continue;
        }
        for e in chain.main_entries() {
            let Some(p) = config.provider(e.provider) else {
                continue;
            };
            let u = upstreams.iter().find(|u| u.provider == p.name);
            let why = match u {
                Some(u) if u.aws_signing.is_some() => "is signed by Envoy (AWS Signature V4)",
                Some(u) if u.token_file.is_some() => {
                    "has its credential injected by Envoy from a file"
                }
                _ => continue,
            };
            errors.push(Diag::error(
                format!("chains[{c}].hedge_after"),
                format!(
                    "provider {:?} {why}: a hedged attempt runs its pair's composite cluster's filters, not the provider's — give it a credential the filter sets (value: or env:), or remove hedge_after",
                    p.name
                ),
            ));
        }
    }
    errors
}

/// Reads and removes the renderer's top-level fields (`listen`, `admin`, `status_listen`,
/// `module`, `max_request_body`, `ca_file`, `istio`, `envoy_version`); `module` and
/// `envoy_version` are the command line's, over the file's.
fn renderer_fields(
    root: &mut Mapping,
    module: Option<&str>,
    envoy_version: Option<&str>,
    errors: &mut Vec<Diag>,
) -> RendererFields {
    let listen = match root.shift_remove("listen") {
        None => Addr {
            address: DEFAULT_LISTEN_ADDRESS.into(),
            port: DEFAULT_LISTEN_PORT,
        },
        Some(v) => parse_addr(&v, "listen", DEFAULT_LISTEN_PORT, errors),
    };
    let admin = root
        .shift_remove("admin")
        .map(|v| parse_addr(&v, "admin", DEFAULT_ADMIN_PORT, errors));
    let status_written = root.contains_key("status_listen");
    let status_listen = status_listen(root.shift_remove("status_listen"), errors);
    let file_module = root.shift_remove("module").and_then(|v| {
        non_empty_string(
            &v,
            "module",
            "the path of llm_failover.wasm as Envoy sees it",
            errors,
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
                errors,
            )
        })
        .unwrap_or_else(|| DEFAULT_CA_FILE.to_string());
    let istio = root.shift_remove("istio");
    let (envoy_version, envoy_version_from) =
        target_envoy(envoy_version, root.shift_remove("envoy_version"), errors);
    RendererFields {
        listen,
        admin,
        status_written,
        status_listen,
        module,
        max_request_body,
        ca_file,
        istio,
        envoy_version,
        envoy_version_from,
    }
}

/// `status_listen`: `api` (`None`), or an address (default 127.0.0.1:9902).
fn status_listen(written: Option<Value>, errors: &mut Vec<Diag>) -> Option<Addr> {
    match written {
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
        Some(v) => Some(parse_addr(&v, "status_listen", DEFAULT_STATUS_PORT, errors)),
        None => Some(default_status_addr()),
    }
}

/// The Envoy rendered for, and where it was said: `--envoy-version` over the file's
/// `envoy_version`, else the default.
fn target_envoy(
    flag: Option<&str>,
    file: Option<Value>,
    errors: &mut Vec<Diag>,
) -> (EnvoyVersion, Option<&'static str>) {
    match (flag, &file) {
        (Some(flag), _) => {
            let version = EnvoyVersion::parse(flag).unwrap_or_else(|problem| {
                errors.push(Diag::error("--envoy-version", problem));
                version::DEFAULT
            });
            (version, Some("--envoy-version"))
        }
        (None, Some(v)) => {
            let version = parse_envoy_version(v).unwrap_or_else(|problem| {
                errors.push(Diag::error("envoy_version", problem));
                version::DEFAULT
            });
            (version, Some("envoy_version"))
        }
        (None, None) => (version::DEFAULT, None),
    }
}

/// What the renderer sets itself (`role`, and from `envoy_version`: `routing`,
/// `hold_answers`, `body_limit`) is refused in the file, and removed.
fn refuse_renderer_settings(root: &mut Mapping, errors: &mut Vec<Diag>) {
    if root.contains_key("role") {
        errors.push(Diag::error(
            "role",
            "set by the renderer (downstream on the listener, upstream on each provider cluster) — remove it",
        ));
        root.shift_remove("role");
    }
    if root.contains_key("log_models") {
        errors.push(Diag::error(
            "log_models",
            "set by the renderer with render --otel-collector — remove it",
        ));
        root.shift_remove("log_models");
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
}

/// Per-provider renderer fields, by position in the file (the plugin config keeps the order);
/// `None` for an entry that is not a mapping.
fn provider_upstreams(root: &mut Mapping, errors: &mut Vec<Diag>) -> Vec<Option<Upstream>> {
    let mut upstreams = Vec::new();
    if let Some(Value::Sequence(providers)) = root.get_mut("providers") {
        for (i, p) in providers.iter_mut().enumerate() {
            let at = format!("providers[{i}]");
            let Value::Mapping(p) = p else {
                upstreams.push(None);
                continue;
            };
            upstreams.push(parse_upstream(p, &at, errors));
        }
    }
    upstreams
}

/// The plugin configuration as the filter's own code reads it; `errors` so far and the
/// configuration's, in the user's terms, when there are any.
fn plugin_config(root: &Mapping, mut errors: Vec<Diag>) -> Result<Config, Vec<Diag>> {
    let json = match serde_json::to_string(&Value::Mapping(root.clone())) {
        Ok(json) => json,
        Err(e) => {
            errors.push(Diag::error("", format!("cannot be turned into the plugin's JSON: {e} — use plain strings as mapping keys")));
            return Err(errors);
        }
    };
    match Config::from_json(json.as_bytes(), &placeholder_env) {
        Ok(config) if errors.is_empty() => Ok(config),
        Ok(_) => Err(errors),
        Err(config_errors) => {
            let names = provider_names(root);
            for e in config_errors {
                let problem = in_users_terms(&e.field, &e.problem, &names);
                errors.push(Diag::error(e.field, problem));
            }
            Err(errors)
        }
    }
}

/// Each provider's upstream (`config.providers` keeps the file's order, one per entry of its
/// `providers`), with its name, cluster and AWS signing, checked against the target Envoy and
/// against the other providers of its cluster.
fn resolve_upstreams(
    config: &Config,
    upstreams: Vec<Option<Upstream>>,
    envoy_version: EnvoyVersion,
) -> Result<Vec<Upstream>, Vec<Diag>> {
    let mut errors = Vec::new();
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
        if let Err(problem) = aws_signing(i, p, &mut u, envoy_version) {
            errors.push(problem);
        }
        if u.token_file.is_some() && envoy_version.mode() == Mode::Grouping {
            errors.push(Diag::error(
                format!("providers[{i}].credential.file"),
                "a credential Envoy reads from a file needs Envoy 1.39+: on older Envoys only the grouping cluster's filters run and would send it to every provider — use env: instead (credential: {header: authorization, prefix: \"Bearer \", env: VERTEX_ACCESS_TOKEN}), or envoy_version: \"1.40\"",
            ));
        }
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
    if errors.is_empty() {
        Ok(resolved)
    } else {
        Err(errors)
    }
}

/// The status endpoint's listener when `status_path` is set: the API's (`status_listen: api`)
/// or its own, whose filter alone answers the path (removed from the other filters'
/// configuration, which keep one fingerprint).
fn status_listener(
    root: &mut Mapping,
    fields: &RendererFields,
) -> Result<Option<StatusListen>, Vec<Diag>> {
    let status_path = root
        .get("status_path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    match (status_path, &fields.status_listen) {
        (None, _) => Ok(None),
        (Some(_), None) => Ok(Some(StatusListen::Api)),
        (Some(path), Some(addr)) => {
            let json = plugin_json(
                root,
                "downstream",
                fields.envoy_version,
                fields.max_request_body,
            )
            .map_err(json_error)?;
            root.shift_remove("status_path");
            Ok(Some(StatusListen::Own {
                addr: addr.clone(),
                path,
                json,
            }))
        }
    }
}

/// A plugin configuration serde_json cannot write, as the one error to show.
fn json_error(e: serde_json::Error) -> Vec<Diag> {
    vec![Diag::error(
        "",
        format!("cannot be turned into the plugin's JSON: {e}"),
    )]
}

/// The plugin configuration JSON of both roles: the listener's and the clusters'.
fn role_jsons(
    plugin: &Mapping,
    version: EnvoyVersion,
    max_request_body: u64,
) -> Result<(String, String), Vec<Diag>> {
    let downstream = plugin_json(plugin, "downstream", version, max_request_body);
    let upstream = plugin_json(plugin, "upstream", version, max_request_body);
    Ok((
        downstream.map_err(json_error)?,
        upstream.map_err(json_error)?,
    ))
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
        gw.replug()?;
        Ok(gw)
    }

    /// The same gateway sending each request's record to the OpenTelemetry collector at
    /// `collector` (`host:port`, OTLP over gRPC): the filter is told to write the models
    /// (`log_models`), the render adds the logger and the collector's cluster.
    pub fn with_otel(&self, collector: &str) -> Result<Gateway, Vec<Diag>> {
        let endpoint =
            parse_endpoint(collector).map_err(|e| vec![Diag::error("--otel-collector", e)])?;
        let mut gw = self.clone();
        gw.plugin.insert("log_models".into(), true.into());
        gw.otel = Some(endpoint);
        gw.replug()?;
        Ok(gw)
    }

    /// Both roles' plugin JSON (and what follows from it) again, after `plugin` changed.
    fn replug(&mut self) -> Result<(), Vec<Diag>> {
        let gw = self;
        let version = gw.envoy_version;
        (gw.downstream_json, gw.upstream_json) =
            role_jsons(&gw.plugin, version, gw.max_request_body)?;
        gw.config = loaded_config(&gw.downstream_json)?;
        if version.mode() == Mode::Grouping {
            gw.groups = grouping_clusters(&gw.config, version)?;
        }
        Ok(())
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

/// The `name` of every provider the file defines, for "did you mean".
fn provider_names(root: &Mapping) -> Vec<&str> {
    let Some(Value::Sequence(providers)) = root.get("providers") else {
        return Vec::new();
    };
    providers
        .iter()
        .filter_map(|p| p.get("name").and_then(Value::as_str))
        .collect()
}

/// The configuration as the filter will read it from `json`.
fn loaded_config(json: &str) -> Result<Config, Vec<Diag>> {
    Config::from_json(json.as_bytes(), &placeholder_env).map_err(|errs| {
        errs.into_iter()
            .map(|e| {
                let problem = in_users_terms(&e.field, &e.problem, &[]);
                Diag::error(e.field, problem)
            })
            .collect()
    })
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

/// A credential Envoy injects from a file (`credential.file`) is not the filter's to set, but
/// its header must leave every attempt, as a credential's does: it joins the gateway credential
/// headers (the filter's default list when the file sets none).
fn clear_token_file_headers(root: &mut Mapping, upstreams: &[Upstream]) {
    let headers = upstreams
        .iter()
        .filter_map(|u| u.token_file.as_ref().map(|t| t.header.as_str()));
    if headers.clone().next().is_none() {
        return;
    }
    let list = root
        .entry("gateway_credential_headers".into())
        .or_insert_with(|| {
            Value::Sequence(
                llm_failover::config::DEFAULT_GATEWAY_CREDENTIAL_HEADERS
                    .iter()
                    .map(|h| Value::from(*h))
                    .collect(),
            )
        });
    if let Value::Sequence(list) = list {
        for h in headers {
            if !list
                .iter()
                .any(|v| v.as_str().is_some_and(|v| v.eq_ignore_ascii_case(h)))
            {
                list.push(h.into());
            }
        }
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
