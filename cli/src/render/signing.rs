//! AWS Signature V4 for a Bedrock provider (issue 22): Envoy's own `aws_request_signing`
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
use crate::input::Upstream;
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

/// The signer for `region` and the guard after it.
pub(crate) fn aws_filters(region: &str) -> [Value; 2] {
    [
        map! {
            "name" => "envoy.filters.http.aws_request_signing",
            "typed_config" => typed(AWS_REQUEST_SIGNING, map! {
                "service_name" => "bedrock",
                "region" => region,
                // Sign the body's hash (Envoy buffers the body for it): a changed body fails.
                "use_unsigned_payload" => false,
            }),
        },
        map! {
            "name" => "llm_failover.unsigned_guard",
            "typed_config" => typed(LUA, map! {
                "default_source_code" => map! { "inline_string" => UNSIGNED_GUARD },
            }),
        },
    ]
}

/// What Envoy does to a provider's attempts after this filter, for `explain`: signs them for
/// Bedrock, injects a credential read from a file, or nothing beyond the filter's headers
/// (then `None`, but for Bedrock: its API key is the credential).
pub fn sending(u: &Upstream, p: &Provider) -> Option<String> {
    if let Some(region) = &u.aws_signing {
        return Some(format!(
            "signing: AWS Signature V4 by Envoy after this filter (service bedrock, region {region}), over the body as sent; unsigned, it is answered 502 and not sent"
        ));
    }
    if let Some(t) = &u.token_file {
        return Some(format!(
            "credential: {} from {}, injected by Envoy after this filter (re-read when the file is replaced)",
            t.header, t.path
        ));
    }
    (p.envelope == Some(Envelope::Bedrock))
        .then(|| "signing: none (a Bedrock API key in authorization)".to_string())
}
