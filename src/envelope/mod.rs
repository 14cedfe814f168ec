//! Envelopes around a dialect (docs/behaviour.md section 13): what a cloud wraps around the API it speaks.
//! Azure OpenAI and Gemini speak OpenAI Chat under their own paths; Claude on AWS Bedrock and
//! on Google Vertex AI speak Anthropic Messages with the model in the path, a version field in
//! the body instead of `model` (and, on Bedrock, instead of `stream`), and on Bedrock a binary
//! event stream ([`eventstream`]).
//!
//! Pure functions over the attempt's facts; the upstream role applies what they return.

pub mod eventstream;

use crate::rewrite;
use crate::translate::Api;

/// A provider's envelope, from its `api` (`azure_openai`, `bedrock`, `vertex`, `gemini`). Its
/// parameters come from the provider's `path_prefix`, which `llm-failover render` writes from
/// the friendlier `api_version`, `project` and `region` (no configuration field of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// Azure OpenAI. With a query in `path_prefix` (`/openai?api-version=2024-10-21`): the
    /// deployments API, `{base}/deployments/{deployment}/chat/completions?api-version=...`, the
    /// deployment being the entry's model; without: the v1 API, `{base}/v1/chat/completions`
    /// (the deployment named by the body's `model`). `base` defaults to `/openai`.
    AzureOpenAi,
    /// Claude on AWS Bedrock (InvokeModel): `/model/{model id}/invoke` or
    /// `/invoke-with-response-stream`; `anthropic_version: bedrock-2023-05-31` in the body,
    /// `model` and `stream` out of it, the caller's `anthropic-beta` as `anthropic_beta`.
    Bedrock,
    /// Any model on AWS Bedrock through its Converse API (`api: bedrock_converse`):
    /// `/model/{model id}/converse` or `/converse-stream`; the body is Converse's own (written
    /// by the translators: every caller is translated to it), a stream comes as an AWS event
    /// stream ([`eventstream`]). Signed as [`Envelope::Bedrock`] is.
    BedrockConverse,
    /// Claude on Google Vertex AI: `{path_prefix}/publishers/anthropic/models/{model}:rawPredict`
    /// (or `:streamRawPredict`), `path_prefix` being `/v1/projects/{project}/locations/{region}`;
    /// `anthropic_version: vertex-2023-10-16` in the body, `model` out of it.
    Vertex,
    /// Gemini's OpenAI-compatible endpoint: `{path_prefix}/chat/completions`, `path_prefix`
    /// defaulting to Google AI's `/v1beta/openai` (on Vertex AI:
    /// `/v1/projects/{project}/locations/{region}/endpoints/openapi`).
    Gemini,
    /// Gemini's native API: `{path_prefix}/models/{model}:generateContent` (a stream:
    /// `:streamGenerateContent?alt=sse`), `path_prefix` defaulting to Google AI's `/v1beta`; on
    /// Vertex AI (a `path_prefix` `/v1/projects/{project}/locations/{region}`)
    /// `{path_prefix}/publishers/google/models/{model}:generateContent`. The body has no model.
    GeminiNative,
}

/// The version field Bedrock's InvokeModel takes for Claude.
pub const BEDROCK_VERSION: &str = "bedrock-2023-05-31";
/// The version field Vertex AI takes for Claude.
pub const VERTEX_VERSION: &str = "vertex-2023-10-16";

/// Headers AWS Signature V4 (Envoy's `aws_request_signing`, after this filter) adds to a
/// Bedrock attempt. Envoy shares one header map across attempts: every attempt clears them,
/// like credentials, so none reaches the next provider.
pub const SIGNING_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-content-sha256",
    "x-amz-security-token",
];

/// The AWS region in a Bedrock endpoint's host name
/// (`bedrock-runtime[-fips].<region>.amazonaws.com`), if it names one.
pub fn bedrock_region(host: &str) -> Option<&str> {
    let rest = (host.strip_prefix("bedrock-runtime."))
        .or_else(|| host.strip_prefix("bedrock-runtime-fips."))?;
    let region = rest.strip_suffix(".amazonaws.com")?;
    (!region.is_empty() && !region.contains('.')).then_some(region)
}

impl Envelope {
    /// The names configuration uses for `api` beyond `openai` and `anthropic`.
    pub const NAMES: [&'static str; 6] = [
        "azure_openai",
        "bedrock",
        "bedrock_converse",
        "vertex",
        "gemini",
        "gemini_native",
    ];

    pub fn parse(name: &str) -> Option<Envelope> {
        match name {
            "azure_openai" => Some(Envelope::AzureOpenAi),
            "bedrock" => Some(Envelope::Bedrock),
            "bedrock_converse" => Some(Envelope::BedrockConverse),
            "vertex" => Some(Envelope::Vertex),
            "gemini" => Some(Envelope::Gemini),
            "gemini_native" => Some(Envelope::GeminiNative),
            _ => None,
        }
    }

    /// The dialect inside the envelope.
    pub fn api(self) -> Api {
        match self {
            Envelope::AzureOpenAi | Envelope::Gemini => Api::OpenAiChat,
            Envelope::Bedrock | Envelope::Vertex => Api::AnthropicMessages,
            Envelope::GeminiNative => Api::Gemini,
            Envelope::BedrockConverse => Api::Converse,
        }
    }

    /// Whether Envoy signs this cloud's attempts with AWS Signature V4 (service `bedrock`)
    /// unless the provider has a credential of its own: Bedrock, either API.
    pub fn aws_signed(self) -> bool {
        match self {
            Envelope::Bedrock | Envelope::BedrockConverse => true,
            Envelope::AzureOpenAi
            | Envelope::Vertex
            | Envelope::Gemini
            | Envelope::GeminiNative => false,
        }
    }

    /// The AWS region a Bedrock endpoint's host names (`None` for the other clouds).
    pub fn aws_region(self, host: &str) -> Option<&str> {
        self.aws_signed().then(|| bedrock_region(host)).flatten()
    }

    /// The path of an attempt: `prefix` is the provider's `path_prefix`, `endpoint` the API
    /// path the attempt would take without an envelope (the caller's, or the translated API's
    /// endpoint, e.g. `/v1/chat/completions`), `model` the attempt's model, `stream` whether
    /// the caller asked for a stream.
    #[inline(never)]
    pub fn path(self, prefix: Option<&str>, endpoint: &str, model: &str, stream: bool) -> String {
        let (base, query) = match prefix.map(|p| p.split_once('?').unwrap_or((p, ""))) {
            Some((base, query)) => (Some(base), query),
            None => (None, ""),
        };
        let endpoint = endpoint.split_once('?').map_or(endpoint, |(p, _)| p);
        // `/v1/chat/completions` -> `/chat/completions`: the cloud's own base replaces `/v1`.
        let rest = endpoint.strip_prefix("/v1").filter(|r| r.starts_with('/'));
        let rest = rest.unwrap_or(endpoint);
        let mut path = String::with_capacity(96 + model.len());
        match self {
            Envelope::AzureOpenAi => {
                path.push_str(base.unwrap_or("/openai"));
                if query.is_empty() {
                    path.push_str("/v1");
                    path.push_str(rest);
                } else {
                    path.push_str("/deployments/");
                    push_segment(&mut path, model, false);
                    path.push_str(rest);
                    path.push('?');
                    path.push_str(query);
                }
            }
            Envelope::Bedrock | Envelope::BedrockConverse => {
                path.push_str(base.unwrap_or_default());
                path.push_str("/model/");
                push_segment(&mut path, model, false);
                path.push_str(match (self == Envelope::Bedrock, stream) {
                    (true, true) => "/invoke-with-response-stream",
                    (true, false) => "/invoke",
                    (false, true) => "/converse-stream",
                    (false, false) => "/converse",
                });
            }
            Envelope::Vertex => {
                path.push_str(base.unwrap_or_default());
                path.push_str("/publishers/anthropic/models/");
                push_segment(&mut path, model, true);
                path.push_str(if stream {
                    ":streamRawPredict"
                } else {
                    ":rawPredict"
                });
            }
            Envelope::Gemini => {
                path.push_str(base.unwrap_or("/v1beta/openai"));
                path.push_str(rest);
            }
            Envelope::GeminiNative => {
                let base = base.unwrap_or("/v1beta");
                path.push_str(base);
                path.push_str(if base.contains("/projects/") {
                    "/publishers/google/models/"
                } else {
                    "/models/"
                });
                push_segment(
                    &mut path,
                    model.strip_prefix("models/").unwrap_or(model),
                    true,
                );
                path.push_str(if stream {
                    ":streamGenerateContent?alt=sse"
                } else {
                    ":generateContent"
                });
            }
        }
        path
    }

    /// The caller's headers this cloud has its own value for, so they never reach it as
    /// headers: Claude's version (in the body) and, on Bedrock, the beta flags (put in the
    /// body from the caller's header, behaviour.md 13).
    pub fn own_headers(self) -> &'static [&'static str] {
        match self {
            Envelope::Bedrock => &["anthropic-version", crate::wire::ANTHROPIC_BETA],
            Envelope::Vertex => &["anthropic-version"],
            Envelope::AzureOpenAi
            | Envelope::Gemini
            | Envelope::GeminiNative
            | Envelope::BedrockConverse => &[],
        }
    }

    /// Whether the request body changes beyond the model (then the role always rewrites it).
    pub fn edits_body(self) -> bool {
        matches!(self, Envelope::Bedrock | Envelope::Vertex)
    }

    /// Whether the answer of a streamed request comes as an AWS event stream.
    pub fn event_stream(self) -> bool {
        self.aws_signed()
    }

    /// The body to send (`None`: forward it as it is): for Bedrock and Vertex, the top-level
    /// `model` (and on Bedrock `stream`) removed and the version field added, with the caller's
    /// `anthropic-beta` header values (`beta`, comma-separated) as Bedrock's `anthropic_beta`.
    /// A body that is not a JSON object is forwarded as it is (the provider answers 400).
    pub fn body(self, body: &[u8], beta: Option<&str>) -> Option<Vec<u8>> {
        match self {
            Envelope::Bedrock => {
                let mut add = Vec::with_capacity(64);
                add.extend_from_slice(br#""anthropic_version":""#);
                add.extend_from_slice(BEDROCK_VERSION.as_bytes());
                add.push(b'"');
                let mut flags = 0;
                for flag in beta.unwrap_or_default().split(',') {
                    let flag = flag.trim();
                    if flag.is_empty() {
                        continue;
                    }
                    add.extend_from_slice(if flags == 0 {
                        br#","anthropic_beta":[""#
                    } else {
                        br#",""#
                    });
                    rewrite::push_escaped(&mut add, flag);
                    add.push(b'"');
                    flags += 1;
                }
                if flags > 0 {
                    add.push(b']');
                }
                edit_members(body, &["model", "stream", "anthropic_version"], &add)
            }
            Envelope::Vertex => {
                let add = format!(r#""anthropic_version":"{VERTEX_VERSION}""#);
                edit_members(body, &["model", "anthropic_version"], add.as_bytes())
            }
            // Converse's body is the translators' own.
            Envelope::AzureOpenAi
            | Envelope::Gemini
            | Envelope::GeminiNative
            | Envelope::BedrockConverse => None,
        }
    }
}

pub use crate::translate::common::push_segment;

/// The JSON object `body` with its top-level members named in `drop` left out (names compared
/// decoded) and `add` (member text, without braces) appended, in one pass; `None` when `body`
/// is not a JSON object.
pub fn edit_members(body: &[u8], drop: &[&str], add: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len() + add.len() + 2);
    out.push(b'{');
    let mut kept = 0usize;
    for_each_member(body, &mut |name, member, _| {
        if !drop.iter().any(|d| rewrite::decoded_eq(name, d)) {
            if kept > 0 {
                out.push(b',');
            }
            out.extend_from_slice(member);
            kept += 1;
        }
        false
    })?;
    if !add.is_empty() {
        if kept > 0 {
            out.push(b',');
        }
        out.extend_from_slice(add);
    }
    out.push(b'}');
    Some(out)
}

/// Walks the top-level members of the JSON object `json`, giving `f` each one's name (raw,
/// between the quotes), whole member text and value text, until `f` returns `true`. `None`
/// when `json` is not one JSON object (then `f` may have seen some members). Read with the
/// translators' member walker (`translate::json`): one JSON reader in the module.
#[inline(never)]
pub(crate) fn for_each_member<'a>(
    json: &'a [u8],
    f: &mut dyn FnMut(&'a str, &'a [u8], &'a [u8]) -> bool,
) -> Option<()> {
    let mut members = crate::translate::json::members(json);
    while let Some((name, value)) = members.next_span() {
        let member = json.get(name.start.checked_sub(1)?..value.end)?;
        let name = std::str::from_utf8(json.get(name)?).ok()?;
        if f(name, member, json.get(value)?) {
            return Some(());
        }
    }
    members.complete().then_some(())
}

#[cfg(test)]
mod tests;
