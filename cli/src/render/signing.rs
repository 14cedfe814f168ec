//! AWS Signature V4 for a Bedrock provider: Envoy's own `aws_request_signing`
//! after this filter in the provider cluster's upstream filters, so the signature covers the
//! body and headers the filter wrote; then a guard that refuses what left the signer unsigned.
//!
//! Verified on Envoy 1.36.4, 1.38.2, 1.39.3 and 1.40.0: when the signer finds no credentials
//! (no environment variables, credentials file, or instance/pod role) it forwards the request
//! unsigned (envoyproxy/envoy#47519). The guard (Lua, an upstream filter on every version;
//! RBAC is one only from 1.39) answers such a request `502` itself: nothing reaches Bedrock
//! unsigned. Envoy sends an upstream filter's local reply straight to the caller (the router
//! never retries it), so that request does not fall over; the attempt counts as a connection
//! error toward Bedrock's breaker, which then takes Bedrock out of the chain until it works.

use super::typed;
use crate::input::{AwsCredentials, AwsSigning, Upstream};
use llm_failover::config::Provider;
use llm_failover::envelope::Envelope;
use serde_yaml_ng::{Mapping, Value};

const AWS_REQUEST_SIGNING: &str =
    "type.googleapis.com/envoy.extensions.filters.http.aws_request_signing.v3.AwsRequestSigning";
const LUA: &str = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua";

/// Refuses a request the signer left without an AWS Signature V4 `authorization`.
const UNSIGNED_GUARD: &str = r#"function envoy_on_request(handle)
  local auth = handle:headers():get("authorization")
  if auth == nil or string.sub(auth, 1, 17) ~= "AWS4-HMAC-SHA256 " then
    handle:logErr("llm-failover: a Bedrock request was not signed (Envoy found no AWS credentials); not sent")
    handle:respond({[":status"] = "502", ["content-type"] = "application/json"},
      '{"message":"llm-failover: the request to Bedrock was not signed (Envoy found no AWS credentials), so it was not sent"}')
  end
end
"#;

/// The signer for `signing`'s region and credential sources, and the guard after it.
pub(crate) fn aws_filters(signing: &AwsSigning) -> [Value; 2] {
    let mut signer = map! {
        "service_name" => "bedrock",
        "region" => signing.region.as_str(),
        // Sign the body's hash (Envoy buffers the body for it): a changed body fails.
        "use_unsigned_payload" => false,
    };
    if let Some(sources) = credential_provider(&signing.credentials) {
        if let Value::Mapping(m) = &mut signer {
            m.insert("credential_provider".into(), sources);
        }
    }
    [
        map! {
            "name" => "envoy.filters.http.aws_request_signing",
            "typed_config" => typed(AWS_REQUEST_SIGNING, signer),
        },
        map! {
            "name" => "llm_failover.unsigned_guard",
            "typed_config" => typed(LUA, map! {
                "default_source_code" => map! { "inline_string" => UNSIGNED_GUARD },
            }),
        },
    ]
}

/// Envoy's `credential_provider` for `credentials` (`None`: its default chain). A custom
/// chain holds only the sources named, so Envoy asks nothing else (no instance metadata).
fn credential_provider(credentials: &AwsCredentials) -> Option<Value> {
    let source = match credentials {
        AwsCredentials::Chain => return None,
        AwsCredentials::Env => ("environment_credential_provider", map! {}),
        AwsCredentials::File { path, profile } => {
            let mut file =
                map! { "credentials_data_source" => map! { "filename" => path.as_str() } };
            if let (Some(profile), Value::Mapping(m)) = (profile, &mut file) {
                m.insert("profile".into(), profile.as_str().into());
            }
            ("credentials_file_provider", file)
        }
        AwsCredentials::WebIdentity {
            token_file,
            role_arn,
            session_name,
        } => (
            "assume_role_with_web_identity_provider",
            map! {
                "web_identity_token_data_source" => map! { "filename" => token_file.as_str() },
                "role_arn" => role_arn.as_str(),
                "role_session_name" => session_name.as_str(),
            },
        ),
    };
    let mut provider = Mapping::new();
    provider.insert("custom_credential_provider_chain".into(), true.into());
    provider.insert(source.0.into(), source.1);
    Some(Value::Mapping(provider))
}

/// What Envoy does to a provider's attempts after this filter, for `explain`: signs them for
/// Bedrock, injects a credential read from a file, or nothing beyond the filter's headers
/// (then `None`, but for Bedrock: its API key is the credential).
pub fn sending(u: &Upstream, p: &Provider) -> Option<String> {
    if let Some(signing) = &u.aws_signing {
        let from = match &signing.credentials {
            AwsCredentials::Env => "the environment only".to_string(),
            AwsCredentials::Chain => "Envoy's default chain".to_string(),
            AwsCredentials::File { path, .. } => format!("the file {path}"),
            AwsCredentials::WebIdentity { role_arn, .. } => format!("web identity as {role_arn}"),
        };
        return Some(format!(
            "signing: AWS Signature V4 by Envoy after this filter (service bedrock, region {}, credentials from {from}), over the body as sent; unsigned, it is answered 502 and not sent",
            signing.region
        ));
    }
    if let Some(t) = &u.token_file {
        return Some(format!(
            "credential: {} from {}, injected by Envoy after this filter (re-read when the file is replaced)",
            t.header, t.path
        ));
    }
    (p.envelope.is_some_and(Envelope::aws_signed))
        .then(|| "signing: none (a Bedrock API key in authorization)".to_string())
}
