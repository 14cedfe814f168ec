//! Providers in the mesh: the host and cluster names Istio gives them, and a `ServiceEntry` and
//! `DestinationRule` each (router mode).

use super::{grouping, metadata, resource, Options, NAME};
use crate::diag::Diag;
use crate::input::{Gateway, Host, Upstream, DEFAULT_CA_FILE};
use crate::render::{self, seq};
use serde_yaml_ng::{Mapping, Value};

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
        if let Some(first) = gw
            .upstreams
            .iter()
            .take(i)
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
