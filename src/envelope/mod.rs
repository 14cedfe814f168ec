//! Envelopes around a dialect (SPEC section 13): what a cloud wraps around the API it speaks.
//! Azure OpenAI and Gemini speak OpenAI Chat under their own paths; Claude on AWS Bedrock and
//! on Google Vertex AI speak Anthropic Messages with the model in the path, a version field in
//! the body instead of `model` (and, on Bedrock, instead of `stream`), and on Bedrock a binary
//! event stream ([`eventstream`]).
//!
//! Pure functions over the attempt's facts; the upstream role applies what they return.

pub mod eventstream;

use crate::rewrite::{self, Scanner};
use crate::translate::Api;

/// A provider's envelope, from its `api` (`azure_openai`, `bedrock`, `vertex`, `gemini`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    /// Azure OpenAI: `/openai/deployments/{deployment}/chat/completions?api-version=...`, the
    /// deployment being the entry's model; without an `api_version`, the v1 API
    /// (`/openai/v1/chat/completions`, the deployment named by the body's `model`).
    AzureOpenAi { api_version: Option<String> },
    /// Claude on AWS Bedrock (InvokeModel): `/model/{model id}/invoke` or
    /// `/invoke-with-response-stream`; `anthropic_version: bedrock-2023-05-31` in the body,
    /// `model` and `stream` out of it, the caller's `anthropic-beta` as `anthropic_beta`.
    Bedrock,
    /// Claude on Google Vertex AI: `/v1/projects/{project}/locations/{region}/publishers/
    /// anthropic/models/{model}:rawPredict` (or `:streamRawPredict`);
    /// `anthropic_version: vertex-2023-10-16` in the body, `model` out of it.
    Vertex { project: String, region: String },
    /// Gemini's OpenAI-compatible endpoint: Google AI's `/v1beta/openai/...`, or with a
    /// project Vertex AI's `/v1/projects/{project}/locations/{region}/endpoints/openapi/...`.
    Gemini { vertex: Option<(String, String)> },
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

impl Envelope {
    /// The names configuration uses for `api` beyond `openai` and `anthropic`.
    pub const NAMES: [&'static str; 4] = ["azure_openai", "bedrock", "vertex", "gemini"];

    /// The dialect inside the envelope.
    pub fn api(&self) -> Api {
        match self {
            Envelope::AzureOpenAi { .. } | Envelope::Gemini { .. } => Api::OpenAiChat,
            Envelope::Bedrock | Envelope::Vertex { .. } => Api::AnthropicMessages,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Envelope::AzureOpenAi { .. } => "azure_openai",
            Envelope::Bedrock => "bedrock",
            Envelope::Vertex { .. } => "vertex",
            Envelope::Gemini { .. } => "gemini",
        }
    }

    /// The path of an attempt: `endpoint` is the API path the attempt would take without an
    /// envelope (the caller's, or the translated API's endpoint, e.g. `/v1/chat/completions`),
    /// `model` the attempt's model, `stream` whether the caller asked for a stream.
    pub fn path(&self, endpoint: &str, model: &str, stream: bool) -> String {
        let endpoint = endpoint.split_once('?').map_or(endpoint, |(p, _)| p);
        // `/v1/chat/completions` -> `/chat/completions`: the cloud's own base replaces `/v1`.
        let rest = endpoint.strip_prefix("/v1").filter(|r| r.starts_with('/'));
        let rest = rest.unwrap_or(endpoint);
        let mut path = String::with_capacity(96 + model.len());
        match self {
            Envelope::AzureOpenAi { api_version: None } => {
                path.push_str("/openai/v1");
                path.push_str(rest);
            }
            Envelope::AzureOpenAi {
                api_version: Some(version),
            } => {
                path.push_str("/openai/deployments/");
                push_segment(&mut path, model, false);
                path.push_str(rest);
                path.push_str("?api-version=");
                push_segment(&mut path, version, false);
            }
            Envelope::Bedrock => {
                path.push_str("/model/");
                push_segment(&mut path, model, false);
                path.push_str(if stream {
                    "/invoke-with-response-stream"
                } else {
                    "/invoke"
                });
            }
            Envelope::Vertex { project, region } => {
                push_vertex_base(&mut path, project, region);
                path.push_str("/publishers/anthropic/models/");
                push_segment(&mut path, model, true);
                path.push_str(if stream {
                    ":streamRawPredict"
                } else {
                    ":rawPredict"
                });
            }
            Envelope::Gemini { vertex: None } => {
                path.push_str("/v1beta/openai");
                path.push_str(rest);
            }
            Envelope::Gemini {
                vertex: Some((project, region)),
            } => {
                push_vertex_base(&mut path, project, region);
                path.push_str("/endpoints/openapi");
                path.push_str(rest);
            }
        }
        path
    }

    /// Whether the request body changes beyond the model (then the role always rewrites it).
    pub fn edits_body(&self) -> bool {
        matches!(self, Envelope::Bedrock | Envelope::Vertex { .. })
    }

    /// Whether the answer of a streamed request comes as an AWS event stream.
    pub fn event_stream(&self) -> bool {
        matches!(self, Envelope::Bedrock)
    }

    /// The body to send (`None`: forward it as it is): for Bedrock and Vertex, the top-level
    /// `model` (and on Bedrock `stream`) removed and the version field added, with the caller's
    /// `anthropic-beta` header values (`beta`, comma-separated) as Bedrock's `anthropic_beta`.
    /// A body that is not a JSON object is forwarded as it is (the provider answers 400).
    pub fn body(&self, body: &[u8], beta: Option<&str>) -> Option<Vec<u8>> {
        match self {
            Envelope::Bedrock => {
                let mut add = Vec::with_capacity(64);
                add.extend_from_slice(br#""anthropic_version":""#);
                add.extend_from_slice(BEDROCK_VERSION.as_bytes());
                add.push(b'"');
                let flags = beta.into_iter().flat_map(|b| b.split(','));
                let mut flags = flags.map(str::trim).filter(|f| !f.is_empty()).peekable();
                if flags.peek().is_some() {
                    add.extend_from_slice(br#","anthropic_beta":["#);
                    for (i, flag) in flags.enumerate() {
                        if i > 0 {
                            add.push(b',');
                        }
                        add.push(b'"');
                        rewrite::push_escaped(&mut add, flag);
                        add.push(b'"');
                    }
                    add.push(b']');
                }
                edit_members(body, &["model", "stream", "anthropic_version"], &add)
            }
            Envelope::Vertex { .. } => {
                let add = format!(r#""anthropic_version":"{VERTEX_VERSION}""#);
                edit_members(body, &["model", "anthropic_version"], add.as_bytes())
            }
            Envelope::AzureOpenAi { .. } | Envelope::Gemini { .. } => None,
        }
    }

    /// Request headers this envelope's provider must not get from the caller (Bedrock takes
    /// `anthropic-beta` in the body, and neither Bedrock nor Vertex wants `anthropic-version`).
    pub fn dropped_headers(&self) -> &'static [&'static str] {
        match self {
            Envelope::Bedrock => &["anthropic-beta", "anthropic-version"],
            Envelope::Vertex { .. } => &["anthropic-version"],
            Envelope::AzureOpenAi { .. } | Envelope::Gemini { .. } => &[],
        }
    }
}

fn push_vertex_base(path: &mut String, project: &str, region: &str) {
    path.push_str("/v1/projects/");
    push_segment(path, project, false);
    path.push_str("/locations/");
    push_segment(path, region, false);
}

/// Appends `text` as one path segment: every byte but RFC 3986's unreserved characters
/// percent-encoded (`:` in Bedrock's model ids becomes `%3A`, as AWS's SDKs send it), `@`
/// kept where asked (Vertex's `model@version`); a segment of dots is encoded whole, so a
/// model name can never climb out of its place in the path.
fn push_segment(path: &mut String, text: &str, keep_at: bool) {
    let dots = !text.is_empty() && text.bytes().all(|b| b == b'.');
    for b in text.bytes() {
        let plain = b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'~')
            || (b == b'.' && !dots)
            || (b == b'@' && keep_at);
        if plain {
            path.push(char::from(b));
        } else {
            let hex = |n: u8| char::from_digit(u32::from(n), 16).map(|c| c.to_ascii_uppercase());
            path.push('%');
            path.extend(hex(b >> 4));
            path.extend(hex(b & 15));
        }
    }
}

/// The JSON object `body` with its top-level members named in `drop` left out (names compared
/// decoded) and `add` (member text, without braces) appended, in one pass; `None` when `body`
/// is not a JSON object.
pub fn edit_members(body: &[u8], drop: &[&str], add: &[u8]) -> Option<Vec<u8>> {
    let mut s = Scanner::new(body);
    s.skip_ws();
    if s.peek() != Some(b'{') {
        return None;
    }
    s.i += 1;
    let mut out = Vec::with_capacity(body.len() + add.len() + 2);
    out.push(b'{');
    let mut kept = 0usize;
    s.skip_ws();
    if s.peek() == Some(b'}') {
        s.i += 1;
    } else {
        loop {
            s.skip_ws();
            let start = s.i;
            s.string().ok()?;
            let name = std::str::from_utf8(body.get(start + 1..s.i - 1)?).ok()?;
            s.skip_ws();
            if s.peek() != Some(b':') {
                return None;
            }
            s.i += 1;
            s.skip_ws();
            s.value().ok()?;
            if !drop.iter().any(|d| rewrite::decoded_eq(name, d)) {
                if kept > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(body.get(start..s.i)?);
                kept += 1;
            }
            s.skip_ws();
            match s.peek() {
                Some(b',') => s.i += 1,
                Some(b'}') => {
                    s.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    s.skip_ws();
    if s.i != body.len() {
        return None;
    }
    if !add.is_empty() {
        if kept > 0 {
            out.push(b',');
        }
        out.extend_from_slice(add);
    }
    out.push(b'}');
    Some(out)
}

#[cfg(test)]
mod tests;
