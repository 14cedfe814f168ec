//! `credential.file`: a credential Envoy reads from a file and re-reads when it is replaced
//! (a Vertex AI access token that a job refreshes). Envoy's own `credential_injector` with the
//! generic credential, after this filter in the provider cluster's upstream filters, over a
//! secret from secret discovery (SDS) from a file this renderer writes beside the bootstrap.
//!
//! Verified on Envoy 1.40.0: a secret in the bootstrap's `static_resources.secrets` is read
//! once (even with the data source's `watched_directory`); a secret from SDS whose generic
//! secret names the token file by `filename` is re-read when a file is moved onto it (a
//! rotation job's write-then-rename), not when it is rewritten in place. The injector
//! (`overwrite: true`) replaces any value the header has; with the secret unreadable it fails
//! the request `401` itself (`allow_request_without_credential: false`).

use super::{seq, to_yaml, typed};
use crate::input::{Gateway, TokenFile, Upstream};
use serde_yaml_ng::{Mapping, Value};

const CREDENTIAL_INJECTOR: &str =
    "type.googleapis.com/envoy.extensions.filters.http.credential_injector.v3.CredentialInjector";
const GENERIC: &str =
    "type.googleapis.com/envoy.extensions.http.injected_credentials.generic.v3.Generic";
const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

/// The secret's name, and its SDS file's name in the secret directory.
fn secret_name(cluster: &str) -> String {
    format!("llm_failover.credential.{cluster}")
}

fn sds_file_name(cluster: &str) -> String {
    format!("{cluster}.credential.yaml")
}

/// The injector for `token` on `cluster`, its secret discovered from `dir` (absolute).
pub(crate) fn injector(cluster: &str, token: &TokenFile, dir: &str) -> Value {
    let mut generic = Mapping::new();
    generic.insert(
        "credential".into(),
        map! {
            "name" => secret_name(cluster),
            "sds_config" => map! {
                "path_config_source" => map! { "path" => format!("{dir}/{}", sds_file_name(cluster)) },
                "resource_api_version" => "V3",
            },
        },
    );
    generic.insert("header".into(), token.header.as_str().into());
    if !token.prefix.is_empty() {
        generic.insert("header_value_prefix".into(), token.prefix.as_str().into());
    }
    map! {
        "name" => "envoy.filters.http.credential_injector",
        "typed_config" => typed(CREDENTIAL_INJECTOR, map! {
            "overwrite" => true,
            "allow_request_without_credential" => false,
            "credential" => map! {
                "name" => "envoy.http.injected_credentials.generic",
                "typed_config" => typed(GENERIC, Value::Mapping(generic)),
            },
        }),
    }
}

/// The SDS files `render` writes into the secret directory: one per cluster with a
/// `credential.file`, naming the token file (which Envoy watches itself).
pub fn secret_files(gw: &Gateway) -> Vec<(String, String)> {
    super::clusters(gw)
        .into_iter()
        .filter_map(|u: &Upstream| {
            let token = u.token_file.as_ref()?;
            let body = map! {
                "resources" => seq(vec![typed(SECRET, map! {
                    "name" => secret_name(&u.cluster),
                    "generic_secret" => map! { "secret" => map! { "filename" => token.path.as_str() } },
                })]),
            };
            Some((
                sds_file_name(&u.cluster),
                format!(
                    "# The credential Envoy injects for cluster {}, rendered by `llm-failover render`:\n\
                     # Envoy re-reads {} when a file is moved onto it (write a new file, then rename).\n{}",
                    u.cluster,
                    token.path,
                    to_yaml(&body)
                ),
            ))
        })
        .collect()
}
