//! An OpenAI Chat Completions caller served by an Anthropic Messages provider: the request
//! to Messages, the answer and errors back to Chat Completions.
//! (Interface only: the translators are being written; see `super` for the contract.)

use super::{RequestContext, Untranslatable};

pub mod stream;

pub fn request(body: &[u8], cx: &RequestContext<'_>) -> Result<Vec<u8>, Untranslatable> {
    let _ = (body, cx);
    Err(Untranslatable::Field("translation not built yet"))
}

pub fn check(body: &[u8]) -> Result<(), Untranslatable> {
    let _ = body;
    Err(Untranslatable::Field("translation not built yet"))
}

pub fn response(status: u16, body: &[u8], created: u64) -> Vec<u8> {
    let _ = (status, created);
    body.to_vec()
}

/// OpenAI's error shape, `{"error": {"message", "type", "param": null, "code"}}`.
pub fn openai_error(kind: &str, code: &str, message: &str) -> Vec<u8> {
    super::common::openai_error_body(kind, Some(code), message)
}
