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
