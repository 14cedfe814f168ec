//! An Anthropic Messages caller served by an OpenAI Chat Completions provider: what is left of
//! the pair, its whole answer and errors back to Messages ([`response`]). The request is the
//! Messages reader's (`messages::to_chat`, through the Chat writer), the stream Chat's decoder
//! and the Messages encoder (`messages::Encoder`). docs/translation.md is the user's table of
//! what maps, what is dropped and what makes the entry `content_incompatible`.

use std::borrow::Cow;

use super::common;
use super::json::{self, Obj, Out, EMPTY};

#[cfg(test)]
mod tests;

/// The provider's answer (or error) for the Anthropic caller. `Err`: a `2xx` body that is not
/// a Chat completion, with the error the caller gets instead.
pub fn response(status: u16, body: &[u8]) -> std::result::Result<Vec<u8>, Vec<u8>> {
    if !(200..300).contains(&status) {
        let error = common::provider_error(body);
        let message = common::error_message(status, error.as_ref(), body);
        return Ok(anthropic_error(status, &message));
    }
    let answer = Obj::parse_bytes(body);
    let Some(choices) = answer.as_ref().and_then(|a| a.arr("choices")) else {
        return Err(unreadable());
    };
    let answer = answer.unwrap_or_default();
    let choice = choices
        .first()
        .and_then(|c| json::obj(c))
        .unwrap_or_default();
    let message = choice.obj("message").unwrap_or_default();
    let refusal = message.raw_str("refusal").filter(|r| *r != EMPTY);

    let mut out = Out::with_capacity(body.len() + 256);
    out.raw(r#"{"id":"#)
        .raw(answer.raw_str("id").unwrap_or(EMPTY));
    out.raw(r#""type":"message","role":"assistant","model":"#);
    out.raw(answer.raw_str("model").unwrap_or(EMPTY))
        .raw(r#""content":["#);
    let text_block = |out: &mut Out| {
        out.raw(r#"{"type":"text","text":"#);
    };
    if let Some(content) = message.get("content") {
        match json::raw_str(content) {
            Some(EMPTY) => {}
            Some(text) => {
                text_block(&mut out);
                out.raw(text).close();
            }
            // Content parts (some OpenAI-compatible servers): their texts joined.
            None => {
                let all: String = json::arr(content)
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(json::obj)
                    .filter_map(|p| p.str("text"))
                    .collect();
                if !all.is_empty() {
                    text_block(&mut out);
                    out.str(&all).close();
                }
            }
        }
    }
    if let Some(refusal) = refusal {
        text_block(&mut out);
        out.raw(refusal).close();
    }
    for call in message.arr("tool_calls").unwrap_or_default() {
        let call = json::obj(call).unwrap_or_default();
        let f = call.obj("function").unwrap_or_default();
        // Arguments that are not an object (cut short by max_tokens) cannot be an input.
        let arguments = f.str("arguments").unwrap_or_default();
        let input = super::messages::tool_input(arguments).unwrap_or(Cow::Borrowed("{}"));
        out.raw(r#"{"type":"tool_use","id":"#);
        out.str(&common::tool_id(&call.str("id").unwrap_or_default()));
        out.key("name").raw(f.raw_str("name").unwrap_or(EMPTY));
        out.key("input").raw(input.trim()).close();
    }
    out.close_arr();
    let stop_reason = if refusal.is_some() {
        "refusal"
    } else {
        common::stop_reason(choice.tag("finish_reason").unwrap_or("stop"))
    };
    out.key("stop_reason")
        .str(stop_reason)
        .raw(r#""stop_sequence":null"#);
    let usage = answer.obj("usage").unwrap_or_default();
    let details = usage.obj("prompt_tokens_details").unwrap_or_default();
    let usage = common::Usage::from_openai(
        usage.u64("prompt_tokens").unwrap_or(0),
        usage.u64("completion_tokens").unwrap_or(0),
        details.u64("cached_tokens").unwrap_or(0),
        details.u64("cache_creation_input_tokens").unwrap_or(0),
    );
    out.raw(r#""usage":{"input_tokens":"#).num(usage.input);
    out.key("cache_creation_input_tokens")
        .num(usage.cache_creation);
    out.key("cache_read_input_tokens").num(usage.cache_read);
    out.key("output_tokens").num(usage.output).close();
    out.close();
    Ok(out.0)
}

/// The Anthropic caller's error instead of a `2xx` answer that is no Chat completion.
pub fn unreadable() -> Vec<u8> {
    common::anthropic_error_body(
        "api_error",
        "The provider's answer is not an OpenAI Chat Completions answer and could not be translated.",
    )
}

/// Anthropic's error shape; its `error.type` follows the status.
pub fn anthropic_error(status: u16, message: &str) -> Vec<u8> {
    common::anthropic_error_body(common::error_type(status), message)
}
