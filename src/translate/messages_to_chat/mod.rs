//! An Anthropic Messages caller served by an OpenAI Chat Completions provider: the request to
//! Chat Completions ([`request`], [`check`]), the answer and errors back to Messages
//! ([`response`]). docs/translation.md is the user's table of what maps, what is dropped and
//! what makes the entry `content_incompatible`.
//!
//! [`check`] and [`request`] run the same rules: [`head`] and [`walk`] decide, `request`
//! writes what `walk` passes it and `check` drops it (no body is built).

use std::borrow::Cow;

use super::common;
use super::json::{self, Obj, Out, Raw, EMPTY};
use super::model::{Choice, Tool};
use super::{RequestContext, Untranslatable};

pub mod stream;

#[cfg(test)]
mod tests;

type Result<T> = core::result::Result<T, Untranslatable>;

use super::{field, parse};

/// Whether the request can go to a Chat Completions provider (the rules of [`request`], no
/// body built).
pub fn check(body: &[u8]) -> Result<()> {
    let req = parse(body)?;
    head(&req)?;
    walk(&req, &mut |_| ())
}

/// The Chat Completions request for the caller's Messages request.
pub fn request(body: &[u8], cx: &RequestContext<'_>) -> Result<Vec<u8>> {
    let req = parse(body)?;
    let head = head(&req)?;
    let mut out = Out::with_capacity(body.len() + 256);
    out.raw(r#"{"model":"#).str(cx.model).raw(r#""messages":["#);
    walk(&req, &mut |m| write_message(&mut out, &m))?;
    out.close_arr();
    // Not max_tokens: OpenAI's reasoning models refuse it.
    if let Some(max) = req.u64("max_tokens") {
        out.key("max_completion_tokens").num(max);
    }
    for key in ["temperature", "top_p"] {
        if let Some(value) = req.get(key) {
            out.key(key).raw(value);
        }
    }
    if !head.stops.is_empty() {
        out.key("stop").open_arr();
        for stop in &head.stops {
            out.raw(stop);
        }
        out.close_arr();
    }
    super::chat::write_tools(&mut out, &head.tools, head.choice.as_ref());
    if let Some(user) = req.obj("metadata").and_then(|m| m.raw_str("user_id")) {
        out.key("user").raw(user);
    }
    if let Some(stream) = req.bool("stream") {
        out.key("stream").bool(stream);
        if stream {
            // So that a translated stream can report usage (OpenAI sends none unasked).
            out.raw(r#""stream_options":{"include_usage":true}"#);
        }
    }
    out.close();
    Ok(out.0)
}

/// The most stop sequences OpenAI takes.
const MAX_STOPS: usize = 4;

/// What of a request is not its messages: checked, and kept as written for `request`.
struct Head<'a> {
    tools: Vec<Tool<'a>>,
    choice: Option<Choice<'a>>,
    stops: Vec<Raw<'a>>,
}

fn head<'a>(req: &Obj<'a>) -> Result<Head<'a>> {
    let stops = req.arr("stop_sequences").unwrap_or_default();
    if stops.len() > MAX_STOPS {
        return Err(field("stop_sequences"));
    }
    if req.has("mcp_servers") {
        return Err(field("mcp_servers"));
    }
    if req.has("container") {
        return Err(field("container"));
    }
    // Client tools become functions; server tools (web search, code execution, bash...) run
    // at Anthropic and have no Chat counterpart.
    let mut tools = Vec::new();
    for tool in req.arr("tools").unwrap_or_default() {
        let tool = json::obj(tool).ok_or(field("tools"))?;
        if tool.tag("type").is_some_and(|t| t != "custom") {
            return Err(field("tools"));
        }
        tools.push(Tool {
            name: tool.raw_str("name").ok_or(field("tools"))?,
            description: tool.raw_str("description"),
            schema: tool.get("input_schema"),
        });
    }
    let choice = match req.obj("tool_choice") {
        None => None,
        Some(choice) => {
            let (kind, name) = match choice.tag("type") {
                Some("auto") => ("\"auto\"", None),
                Some("any") => ("\"any\"", None),
                Some("none") => ("\"none\"", None),
                Some("tool") => (
                    "\"tool\"",
                    Some(choice.raw_str("name").ok_or(field("tool_choice"))?),
                ),
                _ => return Err(field("tool_choice")),
            };
            let serial = choice.bool("disable_parallel_tool_use") == Some(true);
            Some(Choice { kind, name, serial })
        }
    };
    Ok(Head {
        tools,
        choice,
        stops,
    })
}

/// A Chat message, its pieces as written where they can be copied (JSON strings and objects).
enum Message<'a> {
    System(&'a str),
    User(Vec<Part<'a>>),
    /// A tool's result: its id, and its content (one string, or text parts).
    Tool {
        id: &'a str,
        texts: Vec<&'a str>,
        parts: bool,
    },
    /// The assistant's texts and tool calls.
    Assistant {
        texts: Vec<&'a str>,
        calls: Vec<Call<'a>>,
    },
}

enum Part<'a> {
    Text(&'a str),
    /// Base64 data (media type, data) as a data URI.
    Data(Raw<'a>, Raw<'a>),
    Url(&'a str),
}

struct Call<'a> {
    id: &'a str,
    name: &'a str,
    /// The input object's text.
    input: &'a str,
}

/// Passes the Chat messages of the request to `push`: `system` first (one message per text
/// block), then each turn's.
fn walk<'a>(req: &Obj<'a>, push: &mut dyn FnMut(Message<'a>)) -> Result<()> {
    if let Some(system) = req.get("system") {
        match json::raw_str(system) {
            Some(text) => push(Message::System(text)),
            None => {
                for block in json::arr(system).ok_or(field("system"))? {
                    let block = json::obj(block).filter(|b| b.tag("type") == Some("text"));
                    push(Message::System(
                        block
                            .and_then(|b| b.raw_str("text"))
                            .ok_or(field("system"))?,
                    ));
                }
            }
        }
    }
    let mut assistant_last = false;
    for m in req.arr("messages").ok_or(field("messages"))? {
        let m = json::obj(m).ok_or(field("messages"))?;
        assistant_last = turn(&m, push)?;
    }
    // A last assistant turn is a prefill: Messages continues it, Chat would answer after it.
    if assistant_last {
        return Err(field("messages"));
    }
    Ok(())
}

/// One turn's messages: a user turn's tool results first (one `role: tool` message each, as
/// Chat wants them right after the assistant's calls), then the rest of it; an assistant
/// turn's text and tool calls as one message. Whether it was the assistant's.
fn turn<'a>(m: &Obj<'a>, push: &mut dyn FnMut(Message<'a>)) -> Result<bool> {
    let assistant = match m.tag("role") {
        Some("user") => false,
        Some("assistant") => true,
        _ => return Err(field("messages.role")),
    };
    let content = m.get("content").ok_or(field("messages.content"))?;
    if let Some(text) = json::raw_str(content) {
        push(if assistant {
            Message::Assistant {
                texts: vec![text],
                calls: Vec::new(),
            }
        } else {
            Message::User(vec![Part::Text(text)])
        });
        return Ok(assistant);
    }
    let blocks = json::arr(content).ok_or(field("messages.content"))?;
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut parts = Vec::new();
    for block in blocks {
        let block = json::obj(block).ok_or(field("messages.content"))?;
        match (block.tag("type"), assistant) {
            (Some("text"), false) => parts.push(Part::Text(block.raw_str("text").unwrap_or(EMPTY))),
            (Some("text"), true) => texts.push(block.raw_str("text").unwrap_or(EMPTY)),
            (Some("image"), false) => parts.push(image(&block)?),
            (Some("tool_result"), false) => push(tool_message(&block)?),
            (Some("tool_use"), true) => calls.push(Call {
                id: block.raw_str("id").ok_or(field("tool_use"))?,
                name: block.raw_str("name").ok_or(field("tool_use"))?,
                input: block.get("input").unwrap_or("{}"),
            }),
            (Some("thinking" | "redacted_thinking"), _) => {}
            (Some("document"), _) => return Err(field("document")),
            _ => return Err(field("messages.content")),
        }
    }
    if assistant {
        push(Message::Assistant { texts, calls });
    } else if !parts.is_empty() {
        push(Message::User(parts));
    }
    Ok(assistant)
}

/// An image as an `image_url` part: base64 data as a data URI, a URL as itself. A Files API
/// source lives at Anthropic.
fn image<'a>(block: &Obj<'a>) -> Result<Part<'a>> {
    let source = block.obj("source").ok_or(field("image"))?;
    match source.tag("type") {
        Some("base64") => match (source.get("media_type"), source.get("data")) {
            (Some(media_type), Some(data)) if json::raw_str(media_type).is_some() => {
                json::raw_str(data).ok_or(field("image"))?;
                Ok(Part::Data(media_type, data))
            }
            _ => Err(field("image")),
        },
        Some("url") => source.raw_str("url").map(Part::Url).ok_or(field("image")),
        _ => Err(field("image")),
    }
}

/// A `tool_result` block as a `role: tool` message. Chat's tool messages carry text only;
/// `is_error` has no counterpart and is dropped (the result's text says what failed).
fn tool_message<'a>(block: &Obj<'a>) -> Result<Message<'a>> {
    let id = block.raw_str("tool_use_id").ok_or(field("tool_use_id"))?;
    let (texts, parts) = match block.get("content") {
        None => (Vec::new(), false),
        Some(content) => match json::raw_str(content) {
            Some(text) => (vec![text], false),
            None => {
                let mut texts = Vec::new();
                for b in json::arr(content).ok_or(field("tool_result.content"))? {
                    let b = json::obj(b).filter(|b| b.tag("type") == Some("text"));
                    texts.push(
                        b.and_then(|b| b.raw_str("text"))
                            .ok_or(field("tool_result.content"))?,
                    );
                }
                (texts, true)
            }
        },
    };
    Ok(Message::Tool { id, texts, parts })
}

fn write_message(out: &mut Out, m: &Message<'_>) {
    match m {
        Message::System(text) => {
            out.raw(r#"{"role":"system","content":"#).raw(text);
        }
        // A lone text as a plain string (what every OpenAI-compatible server takes).
        Message::User(parts) => {
            out.raw(r#"{"role":"user","content":"#);
            if let [Part::Text(text)] = parts.as_slice() {
                out.raw(text);
            } else {
                out.open_arr();
                for part in parts {
                    write_part(out, part);
                }
                out.close_arr();
            }
        }
        Message::Tool { id, texts, parts } => {
            out.raw(r#"{"role":"tool","content":"#);
            match (texts.as_slice(), parts) {
                ([], false) => {
                    out.raw(EMPTY);
                }
                ([text], false) => {
                    out.raw(text);
                }
                (texts, _) => {
                    out.open_arr();
                    for text in texts {
                        write_part(out, &Part::Text(text));
                    }
                    out.close_arr();
                }
            }
            out.key("tool_call_id").raw(id);
        }
        Message::Assistant { texts, calls } => {
            let texts: Vec<&str> = texts.iter().copied().filter(|t| *t != EMPTY).collect();
            // Chat refuses an assistant message with neither (only thinking was there).
            if texts.is_empty() && calls.is_empty() {
                return;
            }
            out.raw(r#"{"role":"assistant","content":"#);
            match texts.as_slice() {
                [] => {
                    out.null();
                }
                [one] => {
                    out.raw(one);
                }
                many => {
                    let all: String = many.iter().filter_map(|t| json::unescape(t)).collect();
                    out.str(&all);
                }
            }
            if !calls.is_empty() {
                out.key("tool_calls").open_arr();
                for call in calls {
                    out.raw(r#"{"id":"#).raw(call.id);
                    out.raw(r#""type":"function","function":{"name":"#)
                        .raw(call.name);
                    out.key("arguments").str(call.input).close().close();
                }
                out.close_arr();
            }
        }
    }
    out.close();
}

fn write_part(out: &mut Out, part: &Part<'_>) {
    out.open();
    match part {
        Part::Text(text) => {
            out.raw(r#""type":"text","text":"#).raw(text);
        }
        Part::Data(media_type, data) => {
            // The pieces of JSON strings joined inside one string keep their escapes.
            out.raw(r#""type":"image_url","image_url":{"url":"data:"#);
            out.0.extend_from_slice(inner(media_type).as_bytes());
            out.0.extend_from_slice(b";base64,");
            out.0.extend_from_slice(inner(data).as_bytes());
            out.0.push(b'"');
            out.close();
        }
        Part::Url(url) => {
            out.raw(r#""type":"image_url","image_url":{"url":"#)
                .raw(url)
                .close();
        }
    }
    out.close();
}

/// A JSON string's text without its quotes.
fn inner(text: &str) -> &str {
    text.get(1..text.len().saturating_sub(1))
        .unwrap_or_default()
}

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
