//! Where Envoy listens: `listen` (the API), `admin`, and `status_listen` (the status endpoint).

use super::yaml::{show, show_key};
use crate::diag::Diag;
use serde_yaml_ng::Value;
use std::net::IpAddr;

pub const DEFAULT_LISTEN_ADDRESS: &str = "127.0.0.1";
pub const DEFAULT_LISTEN_PORT: u16 = 10000;
pub const DEFAULT_ADMIN_PORT: u16 = 9901;

/// The status endpoint's own listener, on loopback, unless `status_listen` says otherwise.
pub const DEFAULT_STATUS_PORT: u16 = 9902;

/// Where a listener or the admin interface binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addr {
    pub address: String,
    pub port: u16,
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

/// Envoy's listeners and admin interface on one port (on one address, or one of them on every
/// address) cannot all bind: Envoy would refuse to start. `status` is the status endpoint's own
/// listener, `status_written` whether the file sets `status_listen` (else it is the default).
pub(super) fn port_clashes(
    listen: &Addr,
    admin: Option<&Addr>,
    status: Option<&Addr>,
    status_written: bool,
) -> Vec<Diag> {
    let mut bound: Vec<(&str, &Addr)> = vec![("listen", listen)];
    bound.extend(admin.map(|a| ("admin", a)));
    bound.extend(status.map(|a| ("status_listen", a)));
    let mut out = Vec::new();
    for (i, (field, addr)) in bound.iter().enumerate() {
        let Some((other, taken)) = bound
            .iter()
            .take(i)
            .find(|(_, o)| o.port == addr.port && same_host(&o.address, &addr.address))
        else {
            continue;
        };
        let clash = format!(
            "{other} already binds {}:{} — Envoy cannot bind one port twice and would not start",
            taken.address, taken.port
        );
        if *field == "status_listen" && !status_written {
            out.push(Diag::error(
                "status_path",
                format!(
                    "the status endpoint gets its own listener, by default on {}:{}, but {clash}: set status_listen: {{port: ...}} to a free port, or move {other}",
                    addr.address, addr.port
                ),
            ));
        } else {
            out.push(Diag::error(
                format!("{field}.port"),
                format!(
                    "{} is taken: {clash} — give {field} another port",
                    addr.port
                ),
            ));
        }
    }
    out
}

/// Two bind addresses that share a port: the same address, or either on every address.
fn same_host(a: &str, b: &str) -> bool {
    let any = |x: &str| x.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
    a == b || any(a) || any(b)
}

pub(super) fn default_status_addr() -> Addr {
    Addr {
        address: DEFAULT_LISTEN_ADDRESS.into(),
        port: DEFAULT_STATUS_PORT,
    }
}

pub(super) fn parse_addr(
    v: &Value,
    field: &str,
    default_port: u16,
    errors: &mut Vec<Diag>,
) -> Addr {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(address: &str, port: u16) -> Addr {
        Addr {
            address: address.into(),
            port,
        }
    }

    #[test]
    fn listeners_on_one_port_clash() {
        let listen = at("127.0.0.1", 10000);
        assert!(port_clashes(&listen, Some(&at("127.0.0.1", 9901)), None, false).is_empty());
        assert!(port_clashes(&listen, Some(&at("127.0.0.2", 10000)), None, false).is_empty());
        let e = port_clashes(&listen, Some(&at("0.0.0.0", 10000)), None, false);
        assert_eq!(e[0].field, "admin.port");
        assert_eq!(
            e[0].problem,
            "10000 is taken: listen already binds 127.0.0.1:10000 — Envoy cannot bind one port twice and would not start — give admin another port"
        );
        let e = port_clashes(
            &listen,
            Some(&at("127.0.0.1", 9902)),
            Some(&at("127.0.0.1", 9902)),
            false,
        );
        assert_eq!(e[0].field, "status_path");
        assert_eq!(
            e[0].problem,
            "the status endpoint gets its own listener, by default on 127.0.0.1:9902, but admin already binds 127.0.0.1:9902 — Envoy cannot bind one port twice and would not start: set status_listen: {port: ...} to a free port, or move admin"
        );
        let e = port_clashes(&listen, None, Some(&at("127.0.0.1", 10000)), true);
        assert_eq!(e[0].field, "status_listen.port");
    }
}
