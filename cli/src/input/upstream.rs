//! How each provider is reached: the renderer's per-provider fields (`endpoint`, `tls`, `sni`,
//! `connect_timeout`, `http2`) and the `authority` they imply.

use super::values::duration_ms;
use super::yaml::show;
use crate::diag::Diag;
use llm_failover::residency::Residency;
use serde_yaml_ng::{Mapping, Value};
use std::net::{IpAddr, Ipv4Addr};

pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Per-provider fields only the renderer reads.
pub const PROVIDER_RENDERER_KEYS: [&str; 9] = [
    "endpoint",
    "tls",
    "sni",
    "connect_timeout",
    "http2",
    "api_version",
    "project",
    "region",
    "aws_credentials",
];

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
    /// `api: bedrock` without a credential: Envoy signs each attempt with AWS Signature V4
    /// for this region, with credentials from these sources (`crate::render::signing`).
    pub aws_signing: Option<AwsSigning>,
    /// `aws_credentials` as written (`None`: the default, the environment only).
    pub aws_credentials: Option<AwsCredentials>,
    /// `region` as written (Bedrock's signing region; Vertex's is in `path_prefix`).
    pub region: Option<String>,
    /// `credential.file`: Envoy injects the credential from this file, re-read when it is
    /// replaced (`crate::render::credential`).
    pub token_file: Option<TokenFile>,
}

/// How Envoy signs a Bedrock provider's attempts: the region, and where its AWS credentials
/// come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsSigning {
    pub region: String,
    pub credentials: AwsCredentials,
}

/// `aws_credentials`: the sources Envoy's signer reads AWS credentials from (its
/// `credential_provider`). Only the ones named are asked: with `Env`, the default, Envoy never
/// queries the instance metadata address.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AwsCredentials {
    /// `env`: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`) only.
    #[default]
    Env,
    /// `chain`: Envoy's default chain (environment, credentials and config files, web identity
    /// from the environment, container and instance metadata).
    Chain,
    /// `{file, profile}`: a credentials file in AWS's format.
    File {
        path: String,
        profile: Option<String>,
    },
    /// `{web_identity_token_file, role_arn, role_session_name}`: AssumeRoleWithWebIdentity (an
    /// EKS service account's token).
    WebIdentity {
        token_file: String,
        role_arn: String,
        session_name: String,
    },
}

/// Reads `aws_credentials` (`at`: the provider's path).
fn aws_credentials(v: &Value, at: &str, errors: &mut Vec<Diag>) -> Option<AwsCredentials> {
    const FORMS: &str = "write env (the default), chain, {file: PATH, profile: NAME} or {web_identity_token_file: PATH, role_arn: ARN}";
    let field = format!("{at}.aws_credentials");
    let mut refuse = |problem: String| {
        errors.push(Diag::error(field.clone(), problem));
        None
    };
    let m = match v {
        Value::String(s) if s == "env" => return Some(AwsCredentials::Env),
        Value::String(s) if s == "chain" => return Some(AwsCredentials::Chain),
        Value::Mapping(m) => m,
        other => {
            return refuse(format!(
                "{} is not a credential source — {FORMS}",
                show(other)
            ))
        }
    };
    let text = |key: &str| m.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
    let keys: Vec<&str> = m.keys().filter_map(Value::as_str).collect();
    let allowed: &[&str] = if keys.contains(&"file") {
        &["file", "profile"]
    } else {
        &["web_identity_token_file", "role_arn", "role_session_name"]
    };
    if let Some(unknown) = keys.iter().find(|k| !allowed.contains(k)) {
        return refuse(super::suggest::unknown_field(unknown, allowed));
    }
    if keys.contains(&"file") {
        return match text("file") {
            Some(path) if path.starts_with('/') => Some(AwsCredentials::File {
                path: path.to_string(),
                profile: text("profile").map(str::to_string),
            }),
            _ => refuse(format!(
                "file: the credentials file's absolute path, e.g. /etc/aws/credentials — {FORMS}"
            )),
        };
    }
    match (text("web_identity_token_file"), text("role_arn")) {
        (Some(token_file), Some(role_arn)) if token_file.starts_with('/') => {
            Some(AwsCredentials::WebIdentity {
                token_file: token_file.to_string(),
                role_arn: role_arn.to_string(),
                session_name: text("role_session_name")
                    .unwrap_or("llm-failover")
                    .to_string(),
            })
        }
        _ => refuse(format!(
            "web identity needs web_identity_token_file (an absolute path) and role_arn — {FORMS}"
        )),
    }
}

/// A credential Envoy reads from a file (`credential: {header, prefix, file}`): the
/// renderer's, which the filter never sees (it only clears `header` on every attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFile {
    /// Lowercase header name.
    pub header: String,
    pub prefix: String,
    /// Absolute path of the file holding the bare token.
    pub path: String,
}

impl Upstream {
    pub(super) fn same_cluster_settings(&self, other: &Upstream) -> bool {
        self.endpoint == other.endpoint
            && self.tls == other.tls
            && self.sni == other.sni
            && self.connect_timeout_ms == other.connect_timeout_ms
            && self.http2 == other.http2
            && self.aws_signing == other.aws_signing
            && self.token_file == other.token_file
    }
}

pub(super) fn parse_upstream(
    p: &mut Mapping,
    at: &str,
    errors: &mut Vec<Diag>,
) -> Option<Upstream> {
    let endpoint = p.shift_remove("endpoint");
    let tls = p.shift_remove("tls");
    let sni = p.shift_remove("sni");
    let connect_timeout = p.shift_remove("connect_timeout");
    let http2 = p.shift_remove("http2");
    let before = errors.len();
    let region = cloud_fields(p, at, errors);
    let token_file = token_file(p, at, errors);
    let aws_credentials = p
        .shift_remove("aws_credentials")
        .and_then(|v| aws_credentials(&v, at, errors));

    let endpoint = endpoint_of(endpoint, at, errors);
    let tls = tls.and_then(|v| bool_of(&v, &format!("{at}.tls"), errors));
    let sni = sni.and_then(|v| sni_of(v, at, errors));
    let connect_timeout_ms = connect_timeout.map_or(DEFAULT_CONNECT_TIMEOUT_MS, |v| {
        connect_timeout_of(&v, at, errors)
    });
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
        Some(v) => bool_of(&v, &format!("{at}.http2"), errors).unwrap_or(false),
    };
    let sni = verified_name(&endpoint.host, sni, tls, at, errors);
    bedrock_residency(p, region.as_deref(), &endpoint, at, errors);
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
        aws_signing: None,
        aws_credentials,
        region,
        token_file,
    })
}

/// `endpoint`: `host:port`, required.
fn endpoint_of(endpoint: Option<Value>, at: &str, errors: &mut Vec<Diag>) -> Option<Endpoint> {
    match endpoint {
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
    }
}

/// A `true` or `false` field (`field`: its path).
fn bool_of(v: &Value, field: &str, errors: &mut Vec<Diag>) -> Option<bool> {
    if let Value::Bool(b) = v {
        return Some(*b);
    }
    errors.push(Diag::error(
        field,
        format!("{} is not true or false — write true or false", show(v)),
    ));
    None
}

/// `sni`: a host name.
fn sni_of(v: Value, at: &str, errors: &mut Vec<Diag>) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() && is_dns_name(&s) => Some(s),
        other => {
            errors.push(Diag::error(
                format!("{at}.sni"),
                format!(
                    "{} is not a host name — write the name the provider's certificate is for",
                    show(&other)
                ),
            ));
            None
        }
    }
}

/// `connect_timeout`: a duration above 0.
fn connect_timeout_of(v: &Value, at: &str, errors: &mut Vec<Diag>) -> u64 {
    match duration_ms(v) {
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
    }
}

/// The name a TLS provider's certificate is verified for: `sni`, else the endpoint's host
/// name (an IP address needs `sni`); none without TLS, where `sni` is refused.
fn verified_name(
    host: &Host,
    sni: Option<String>,
    tls: bool,
    at: &str,
    errors: &mut Vec<Diag>,
) -> Option<String> {
    if !tls && sni.is_some() {
        errors.push(Diag::error(
            format!("{at}.sni"),
            "set without TLS — remove sni, or set tls: true",
        ));
    }
    match (host, sni) {
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
    }
}

/// `credential.file`: taken out of the plugin configuration with the whole `credential` (the
/// filter has no value to set); the header joins the gateway credential headers in
/// `super::load`, so every attempt clears it and Envoy's injector sets it on this provider's
/// cluster only.
fn token_file(p: &mut Mapping, at: &str, errors: &mut Vec<Diag>) -> Option<TokenFile> {
    let Some(Value::Mapping(c)) = p.get("credential") else {
        return None;
    };
    let file = c.get("file")?.clone();
    let at = format!("{at}.credential");
    let path = match file {
        Value::String(s) if s.starts_with('/') && !s.ends_with('/') => s,
        other => {
            errors.push(Diag::error(
                format!("{at}.file"),
                format!(
                    "{} is not an absolute file path, e.g. /var/run/vertex/token",
                    show(&other)
                ),
            ));
            return None;
        }
    };
    if c.contains_key("value") || c.contains_key("env") {
        errors.push(Diag::error(
            at,
            "give exactly one of `value`, `env` or `file`",
        ));
        return None;
    }
    let header = match c.get("header") {
        Some(Value::String(h))
            if !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            h.to_ascii_lowercase()
        }
        _ => {
            errors.push(Diag::error(
                format!("{at}.header"),
                "missing — the header the credential goes in, e.g. header: authorization",
            ));
            return None;
        }
    };
    let prefix = match c.get("prefix") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            errors.push(Diag::error(
                format!("{at}.prefix"),
                format!("{} is not text", show(other)),
            ));
            return None;
        }
    };
    if let Some(extra) = c
        .keys()
        .filter_map(Value::as_str)
        .find(|k| !["header", "prefix", "file"].contains(k))
    {
        errors.push(Diag::error(
            format!("{at}.{extra}"),
            "unknown field — a credential read from a file takes header, prefix and file",
        ));
        return None;
    }
    p.shift_remove("credential");
    Some(TokenFile {
        header,
        prefix,
        path,
    })
}

/// The clouds' own fields, which the filter reads from `path_prefix`: Azure's
/// `api_version` (`/openai?api-version=...`), Vertex's `project` and `region`
/// (`/v1/projects/{project}/locations/{region}`, `/endpoints/openapi` after it for Gemini's
/// OpenAI endpoint; Gemini's native API on Vertex takes it as it is).
/// Returns `region` (Bedrock's signing region).
fn cloud_fields(p: &mut Mapping, at: &str, errors: &mut Vec<Diag>) -> Option<String> {
    let api = p
        .get("api")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut text = |key: &str| match p.shift_remove(key) {
        None => None,
        Some(Value::String(s)) if !s.is_empty() && !s.contains(['/', '?', '&', ' ']) => Some(s),
        Some(other) => {
            errors.push(Diag::error(
                format!("{at}.{key}"),
                format!("{} is not a valid {key}", show(&other)),
            ));
            None
        }
    };
    let (api_version, project, region) = (text("api_version"), text("project"), text("region"));
    let takes = match api.as_str() {
        "azure_openai" => [true, false, false],
        "bedrock" | "bedrock_converse" => [false, false, true],
        "vertex" | "gemini" | "gemini_native" => [false, true, true],
        _ => [false; 3],
    };
    for ((key, given), taken) in [
        ("api_version", &api_version),
        ("project", &project),
        ("region", &region),
    ]
    .into_iter()
    .zip(takes)
    {
        if given.is_some() && !taken {
            errors.push(Diag::error(
                format!("{at}.{key}"),
                format!(
                    "not used with api: {} — remove it",
                    if api.is_empty() { "openai" } else { &api }
                ),
            ));
        }
    }
    let prefix = match (api.as_str(), &api_version, &project, &region) {
        ("azure_openai", Some(v), _, _) => Some(format!("/openai?api-version={v}")),
        ("vertex" | "gemini_native", _, Some(p), Some(r)) => {
            Some(format!("/v1/projects/{p}/locations/{r}"))
        }
        ("gemini", _, Some(p), Some(r)) => {
            Some(format!("/v1/projects/{p}/locations/{r}/endpoints/openapi"))
        }
        ("vertex" | "gemini" | "gemini_native", _, Some(_), None)
        | ("vertex" | "gemini" | "gemini_native", _, None, Some(_)) => {
            errors.push(Diag::error(
                format!("{at}.project"),
                format!("api: {api} on Vertex AI needs both project and region (the location, e.g. us-east5 or global)"),
            ));
            None
        }
        _ => None,
    };
    if let Some(prefix) = prefix {
        if p.contains_key("path_prefix") {
            errors.push(Diag::error(
                format!("{at}.path_prefix"),
                "give either path_prefix or api_version/project/region, not both",
            ));
        } else {
            p.insert("path_prefix".into(), prefix.into());
        }
    }
    region
}

/// The AWS region a Bedrock provider's requests are signed for: its `region`, else the one in
/// a `bedrock-runtime[-fips].<region>.amazonaws.com` endpoint.
pub(super) fn bedrock_region(region: Option<&str>, endpoint: &Endpoint) -> Option<String> {
    if let Some(region) = region {
        return Some(region.to_string());
    }
    let Host::Name(name) = &endpoint.host else {
        return None;
    };
    llm_failover::envelope::bedrock_region(name).map(str::to_string)
}

/// A Bedrock provider's residency follows its region (`region`, or its endpoint's): written
/// into the plugin configuration, where the filter does not see the region; a `residency`
/// the region contradicts is refused.
fn bedrock_residency(
    p: &mut Mapping,
    region: Option<&str>,
    endpoint: &Endpoint,
    at: &str,
    errors: &mut Vec<Diag>,
) {
    let api = p.get("api").and_then(Value::as_str).unwrap_or_default();
    if !llm_failover::envelope::Envelope::parse(api).is_some_and(|e| e.aws_signed()) {
        return;
    }
    let Some(region) = bedrock_region(region, endpoint) else {
        return;
    };
    let Some(residency) = Residency::of_region(&region) else {
        return;
    };
    match p.get("residency").and_then(Value::as_str) {
        None => {
            p.insert("residency".into(), residency.as_str().into());
        }
        Some(declared) if Residency::parse(declared).is_some_and(|d| d != residency) => {
            errors.push(Diag::error(
                format!("{at}.residency"),
                format!(
                    "{declared:?}, but region {region} is in {:?}: remove residency (Bedrock's follows its region) or fix the region",
                    residency.as_str()
                ),
            ));
        }
        Some(_) => {}
    }
}

/// `fleet.address` is written into the store's cluster as an endpoint, so it is held to the
/// providers' rule (no scheme, no path; the filter itself only checks it names a port).
pub(super) fn fleet_address_problem(config: &llm_failover::config::Config) -> Option<Diag> {
    let address = config.fleet.as_ref()?.address.as_deref()?;
    parse_endpoint(address)
        .err()
        .map(|problem| Diag::error("fleet.address", problem))
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

/// Providers get `authority` = their endpoint's host (`host:port` on a non-default port) unless
/// they set one: providers behind shared front ends route on it, and none gets the caller's
/// `host` (the gateway's own). Providers at an IP address over TLS get their `sni` name; at an
/// IP address over plain HTTP, that address (IPv6 in brackets), as a client dialling it sends.
pub(super) fn add_default_authorities(root: &mut Mapping, upstreams: &[Upstream]) {
    let Some(Value::Sequence(providers)) = root.get_mut("providers") else {
        return;
    };
    for (p, u) in providers.iter_mut().zip(upstreams) {
        let ip;
        let host = match (&u.endpoint.host, &u.sni) {
            (Host::Name(host), _) => host,
            (Host::Ip(_), Some(sni)) => sni,
            (Host::Ip(addr), None) => {
                ip = match addr {
                    std::net::IpAddr::V4(v4) => v4.to_string(),
                    std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                };
                &ip
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_address_that_is_no_endpoint_is_refused() {
        let problem = |a: &str| {
            let json = format!(
                r#"{{"providers":[{{"name":"a"}}],"chains":[{{"name":"c","providers":["a"]}}],
                "fleet":{{"address":"{a}"}}}}"#
            );
            let config =
                llm_failover::config::Config::from_json(json.as_bytes(), &|_| None).expect("valid");
            fleet_address_problem(&config).map(|d| format!("{}: {}", d.field, d.problem))
        };
        let refused = problem("http://rl:8081").unwrap_or_default();
        assert!(
            refused.starts_with("fleet.address: \"http://rl:8081\" has a scheme"),
            "{refused}"
        );
        assert_eq!(problem("ratelimit:8081"), None);
    }

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
}
