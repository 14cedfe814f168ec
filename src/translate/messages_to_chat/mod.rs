//! An Anthropic Messages caller served by an OpenAI Chat Completions provider: the request to
//! Chat Completions, the answer and errors back to Messages.
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

pub fn response(status: u16, body: &[u8]) -> Vec<u8> {
    let _ = status;
    body.to_vec()
}

/// Anthropic's error shape; its `error.type` follows the status.
pub fn anthropic_error(status: u16, message: &str) -> Vec<u8> {
    super::common::anthropic_error_body(super::common::error_type(status), message)
}
