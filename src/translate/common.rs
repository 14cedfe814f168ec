//! What the dialects share: the sampling members, tool ids valid on both sides (and the Gemini
//! signature some carry), what every provider takes of images and tool inputs, error types by
//! status, error bodies in each API's shape, and data URIs.

use std::borrow::Cow;

use super::json::{Obj, Out};
use super::model::Request;
use super::Untranslatable;

/// How a provider dialect names the sampling members it takes (`None`: it has no such member).
pub struct Sampling {
    pub max_tokens: &'static str,
    pub top_p: &'static str,
    pub top_k: Option<&'static str>,
    pub stop: Option<&'static str>,
}

impl Sampling {
    /// Writes the request's sampling members under this dialect's names, in this order: the
    /// output limit, `temperature`, top-p, top-k, the stop sequences (Messages writes its own:
    /// `max_tokens` is required there and its temperature scale differs).
    pub fn write(&self, out: &mut Out, req: &Request<'_>) {
        if let Some(max) = req.max_tokens {
            out.key(self.max_tokens).num(max);
        }
        if let Some(t) = req.temperature {
            out.key("temperature").raw(t);
        }
        if let Some(top_p) = req.top_p {
            out.key(self.top_p).raw(top_p);
        }
        if let (Some(name), Some(top_k)) = (self.top_k, req.top_k) {
            out.key(name).raw(top_k);
        }
        if let (Some(name), false) = (self.stop, req.stops.is_empty()) {
            out.key(name).open_arr();
            for stop in &req.stops {
                out.raw(stop);
            }
            out.close_arr();
        }
    }
}

/// A tool call id both APIs accept (Anthropic requires `^[a-zA-Z0-9_-]+$`): every other byte
/// becomes `_`, an empty id `_`. A pure function of the id, so a call and its result (sent in
/// different messages) get the same one.
pub fn tool_id(id: &str) -> Cow<'_, str> {
    let valid = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    if !id.is_empty() && id.bytes().all(valid) {
        return Cow::Borrowed(id);
    }
    if id.is_empty() {
        return Cow::Borrowed("_");
    }
    Cow::Owned(
        id.chars()
            .map(|c| {
                if c.is_ascii() && valid(c as u8) {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
    )
}

/// What separates a tool call's id from the `thoughtSignature` it carries (the convention
/// LiteLLM uses too): `call_1__thought__Ci4B...`.
pub const SIGNATURE: &str = "__thought__";

/// A tool call id without the signature it carries after [`SIGNATURE`] (Gemini's
/// `thoughtSignature`, docs/translation.md "Thought signatures"): the id other vendors
/// get (OpenAI takes at most 40 characters in Chat's ids, 64 in Responses', Anthropic 64), the
/// same on a call and on its result.
#[inline(never)]
pub fn unsigned(id: &str) -> &str {
    id.split_once(SIGNATURE).map_or(id, |(id, _)| id)
}

/// The image types Messages takes.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Whether Messages takes an image from this URL: a data URI of one of its types, or http(s).
pub fn image(url: &str) -> Result<(), Untranslatable> {
    let taken = match split_data_uri(url) {
        Some((media_type, _)) => IMAGE_TYPES.contains(&media_type),
        None => url.starts_with("https://") || url.starts_with("http://"),
    };
    if taken {
        Ok(())
    } else {
        Err(Untranslatable::Field("image_url"))
    }
}

/// A tool call id valid for Messages ([`tool_id`]), kept borrowed when it is.
pub fn valid_id(id: Cow<'_, str>) -> Cow<'_, str> {
    match tool_id(&id) {
        Cow::Borrowed(_) => id,
        Cow::Owned(valid) => Cow::Owned(valid),
    }
}

/// OpenAI's `arguments` (JSON text) as Messages' `input` (an object): empty text is `{}`;
/// anything but an object cannot be sent.
pub fn tool_input(arguments: Cow<'_, str>) -> Result<Cow<'_, str>, Untranslatable> {
    if arguments.trim().is_empty() {
        return Ok(Cow::Borrowed("{}"));
    }
    if Obj::parse(&arguments).is_none() {
        return Err(Untranslatable::Field("tool_calls.function.arguments"));
    }
    Ok(arguments)
}

/// Anthropic's `error.type` for a status (also the OpenAI `type` of an error whose provider
/// gave none).
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// What a provider's error body says: `error.message` and `error.type` of either API's shape
/// (OpenAI `{"error": {"message", "type"}}`, Anthropic `{"type": "error", "error": {"type",
/// "message"}}`; Google's `{"error": {"code", "message", "status"}}`, [`ProviderError::of`]),
/// else the top-level `message` of AWS's shape (Bedrock's `{"message"}`), or `None` when the
/// body has none of these.
pub fn provider_error(body: &[u8]) -> Option<ProviderError<'_>> {
    let answer = Obj::parse_bytes(body)?;
    match answer.obj("error") {
        Some(error) => Some(ProviderError::of(&error)),
        None => Some(ProviderError {
            message: Some(answer.str("message")?),
            kind: None,
        }),
    }
}

/// The readable parts of a provider's error body.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProviderError<'a> {
    pub message: Option<Cow<'a, str>>,
    pub kind: Option<Cow<'a, str>>,
}

impl<'a> ProviderError<'a> {
    /// The string members `message` and `type` of an error object (either may be missing).
    /// Google's error has no `type`: its `status` (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`, ...)
    /// comes with `code`, the HTTP status Google answers it with, whose [`error_type`] it is.
    pub fn of(error: &Obj<'a>) -> ProviderError<'a> {
        let google = || {
            error.tag("status")?;
            let code = u16::try_from(error.u64("code")?).ok()?;
            Some(Cow::Borrowed(error_type(code)))
        };
        ProviderError {
            message: error.str("message"),
            kind: error.str("type").or_else(google),
        }
    }
}

/// A message for a caller from a provider's error answer: the provider's own message, or for a
/// body that has none (an HTML page from a proxy, plain text, nothing) the status and the
/// start of the body.
pub fn error_message(status: u16, error: Option<&ProviderError<'_>>, body: &[u8]) -> String {
    if let Some(message) = error.and_then(|e| e.message.as_deref()) {
        return message.to_owned();
    }
    const SHOWN: usize = 200;
    let text = String::from_utf8_lossy(body.get(..SHOWN).unwrap_or(body));
    let text = text.trim();
    if text.is_empty() {
        format!("The provider answered {status} with no error message.")
    } else {
        let more = if body.len() > SHOWN { "..." } else { "" };
        format!("The provider answered {status}: {text}{more}")
    }
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}` (`param` is always
/// null here; `code` when there is one).
pub fn openai_error_body(kind: &str, code: Option<&str>, message: &str) -> Vec<u8> {
    let mut out = Out::with_capacity(message.len() + 96);
    out.raw(r#"{"error":{"message":"#)
        .str(message)
        .key("type")
        .str(kind);
    out.raw(r#""param":null,"code":"#);
    match code {
        Some(code) => out.str(code),
        None => out.null(),
    };
    out.close().close();
    out.0
}

/// Anthropic's error body: `{"type": "error", "error": {"type", "message"}}` (the type:
/// [`error_type`] of the status, unless the provider named one).
pub fn anthropic_error_body(kind: &str, message: &str) -> Vec<u8> {
    let mut out = Out::with_capacity(message.len() + 64);
    out.raw(r#"{"type":"error","error":{"type":"#).str(kind);
    out.key("message").str(message).close().close();
    out.0
}

/// The media type and base64 data of a `data:<media type>;base64,<data>` URI.
pub fn split_data_uri(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (head, data) = rest.split_once(',')?;
    let media_type = head.strip_suffix(";base64")?;
    Some((media_type, data))
}

/// A `data:` URI of base64 data.
pub fn data_uri(media_type: &str, data: &str) -> String {
    let mut uri = String::with_capacity(13 + media_type.len() + data.len());
    uri.push_str("data:");
    uri.push_str(media_type);
    uri.push_str(";base64,");
    uri.push_str(data);
    uri
}

/// Appends `text` as one path segment: every byte but RFC 3986's unreserved characters
/// percent-encoded (`:` in Bedrock's model ids becomes `%3A`, as AWS's SDKs send it), `@`
/// kept where asked (Vertex's `model@version`); a segment of dots is encoded whole, so a
/// model name can never climb out of its place in the path.
pub fn push_segment(path: &mut String, text: &str, keep_at: bool) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_ids_are_valid_on_both_sides_and_stable() {
        assert!(matches!(
            tool_id("call_abc-123"),
            Cow::Borrowed("call_abc-123")
        ));
        assert_eq!(
            tool_id("functions.get_weather:0"),
            "functions_get_weather_0"
        );
        assert_eq!(tool_id("ü id"), "__id");
        assert_eq!(tool_id(""), "_");
        assert_eq!(tool_id("a.b"), tool_id("a.b"));
    }

    #[test]
    fn error_types_follow_the_status() {
        for (status, kind) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (502, "api_error"),
            (503, "overloaded_error"),
            (529, "overloaded_error"),
            (422, "invalid_request_error"),
        ] {
            assert_eq!(error_type(status), kind, "{status}");
        }
    }

    #[test]
    fn error_bodies_in_each_shape() {
        assert_eq!(
            openai_error_body("rate_limit_error", None, "Slow \"down\""),
            br#"{"error":{"message":"Slow \"down\"","type":"rate_limit_error","param":null,"code":null}}"#
        );
        assert_eq!(
            anthropic_error_body("overloaded_error", "Overloaded"),
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        );
    }

    #[test]
    fn provider_messages_from_either_shape_or_the_raw_body() {
        let anthropic = br#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-x"},"request_id":"req_1"}"#;
        let e = provider_error(anthropic).unwrap();
        assert_eq!(e.kind.as_deref(), Some("not_found_error"));
        assert_eq!(error_message(404, Some(&e), anthropic), "model: claude-x");
        let openai = br#"{"error":{"message":"Rate limit \u0041","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
        let e = provider_error(openai).unwrap();
        assert_eq!(error_message(429, Some(&e), openai), "Rate limit A");
        let html = b"<html><body>502 Bad Gateway</body></html>\n";
        assert_eq!(provider_error(html), None);
        // Bedrock (AWS): the message at the top, no type.
        let bedrock = br#"{"message":"Input is too long for requested model."}"#;
        let e = provider_error(bedrock).unwrap();
        assert_eq!(
            e.message.as_deref(),
            Some("Input is too long for requested model.")
        );
        assert_eq!(e.kind, None);
        assert_eq!(provider_error(br#"{"detail":"x"}"#), None);
        assert_eq!(
            error_message(502, None, html),
            "The provider answered 502: <html><body>502 Bad Gateway</body></html>"
        );
        assert_eq!(
            error_message(503, None, b" "),
            "The provider answered 503 with no error message."
        );
        let long = vec![b'x'; 300];
        assert_eq!(error_message(500, None, &long).len(), 27 + 200 + 3);
    }

    #[test]
    fn data_uris_split_and_join() {
        assert_eq!(
            split_data_uri("data:image/png;base64,iVBORw0KGgo="),
            Some(("image/png", "iVBORw0KGgo="))
        );
        assert_eq!(split_data_uri("https://example.com/a.png"), None);
        assert_eq!(split_data_uri("data:text/plain,hello"), None);
        assert_eq!(
            data_uri("image/jpeg", "/9j/4AAQ"),
            "data:image/jpeg;base64,/9j/4AAQ"
        );
    }
}
