//! An OpenAI Chat Completions caller served by an Anthropic Messages provider: the request to
//! Messages ([`request`], [`check`]), the answer and errors back to Chat Completions
//! ([`response`]). docs/translation.md is the user's table of what maps, what is dropped and
//! what makes the entry `content_incompatible`.
//!
//! [`check`] and [`request`] run the same rules: [`head`] and [`walk`] decide, `request`
//! writes what `walk` passes it and `check` drops it (no body is built).

use super::common::{self, Usage};
use super::gemini;
use super::json::{self, Obj, Out, Raw, EMPTY};
use super::messages::{self, image, tool_input, valid_id};
use super::model::{Choice, Part as Block, Request, Role, Tool};
use super::{RequestContext, Untranslatable};

#[cfg(test)]
mod tests;

type Result<T> = core::result::Result<T, Untranslatable>;

use super::{field, parse};

/// Whether the request can go to a Messages provider (the rules of [`request`], no body built).
pub fn check(body: &[u8]) -> Result<()> {
    let req = parse(body)?;
    head(&req)?;
    walk(&req, &mut |_, _| ())
}

/// The Messages request for the caller's Chat Completions request.
pub fn request(body: &[u8], cx: &RequestContext<'_>) -> Result<Vec<u8>> {
    let req = parse(body)?;
    // The tool results answering one assistant turn (OpenAI's `role: tool` messages) go in a
    // single user turn, before the text of a user message that follows them.
    let mut conversation = messages::Conversation::with_capacity(body.len() + 64);
    let rest = read(&req, &mut |role, part| conversation.push(role, &part))?;
    Ok(messages::request(conversation, &rest, cx))
}

/// The Gemini `generateContent` request for the caller's Chat Completions request (the same
/// rules as [`request`]).
pub fn to_gemini(body: &[u8]) -> Result<Vec<u8>> {
    let req = parse(body)?;
    let mut conversation = gemini::Conversation::with_capacity(body.len() + 64);
    let rest = read(&req, &mut |role, part| conversation.push(role, &part))?;
    Ok(gemini::request(conversation, &rest))
}

/// The Responses request for the caller's Chat Completions request (the same rules as
/// [`request`]; stop sequences, which Responses has none of, refused).
pub fn to_responses(body: &[u8], cx: &RequestContext<'_>) -> Result<Vec<u8>> {
    let req = parse(body)?;
    let mut conversation = super::responses::provider::Conversation::with_capacity(body.len() + 64);
    let rest = read(&req, &mut |role, part| conversation.push(role, &part))?;
    super::responses::provider::request(conversation, &rest, cx)
}

/// The request read into the model: its parts passed to `push`, the rest returned.
fn read<'a>(req: &Obj<'a>, push: &mut dyn FnMut(Role, Block<'a>)) -> Result<Request<'a>> {
    let head = head(req)?;
    walk(req, push)?;
    Ok(Request {
        max_tokens: req
            .u64("max_completion_tokens")
            .or_else(|| req.u64("max_tokens")),
        temperature: req.get("temperature"),
        top_p: req.get("top_p"),
        top_k: None,
        stops: head.stops,
        tools: head.tools,
        choice: head.choice,
        user: req.raw_str("user"),
        stream: req.bool("stream"),
    })
}

/// What of a request is not its messages: checked, and kept as written for `request`.
struct Head<'a> {
    tools: Vec<Tool<'a>>,
    choice: Option<Choice<'a>>,
    /// `stop` as JSON strings.
    stops: Vec<&'a str>,
}

/// The request-wide rules: what Messages cannot carry (dropping it would change the answer).
fn head<'a>(req: &Obj<'a>) -> Result<Head<'a>> {
    if req.u64("n").is_some_and(|n| n > 1) {
        return Err(field("n"));
    }
    if req.bool("logprobs") == Some(true) {
        return Err(field("logprobs"));
    }
    if req
        .obj("response_format")
        .and_then(|f| f.tag("type"))
        .is_some_and(|t| t != "text")
    {
        return Err(field("response_format"));
    }
    let audio = |m: &Raw<'_>| json::str(m).as_deref() == Some("audio");
    if req.has("audio") || req.arr("modalities").unwrap_or_default().iter().any(audio) {
        return Err(field("audio"));
    }
    if req.obj("logit_bias").is_some_and(|b| !b.is_empty()) {
        return Err(field("logit_bias"));
    }
    if req.has("functions") || req.has("function_call") {
        return Err(field("functions"));
    }
    if req.has("web_search_options") {
        return Err(field("web_search_options"));
    }
    let mut tools = Vec::new();
    for tool in req.arr("tools").unwrap_or_default() {
        let tool = json::obj(tool).filter(|t| t.tag("type") == Some("function"));
        let f = tool.and_then(|t| t.obj("function")).ok_or(field("tools"))?;
        tools.push(Tool {
            name: f.raw_str("name").ok_or(field("tools"))?,
            description: f.raw_str("description"),
            schema: f.get("parameters"),
        });
    }
    Ok(Head {
        tools,
        choice: tool_choice(req)?,
        stops: stops(req)?,
    })
}

/// `tool_choice` and `parallel_tool_calls: false` as Messages' `tool_choice`.
fn tool_choice<'a>(req: &Obj<'a>) -> Result<Option<Choice<'a>>> {
    tool_choice_named(req, |c| c.obj("function").and_then(|f| f.raw_str("name")))
}

/// OpenAI's `tool_choice` (`auto`, `none`, `required` or a named function, the function's
/// name read by `name` from the object) and `parallel_tool_calls: false` in the model's terms.
pub(crate) fn tool_choice_named<'a>(
    req: &Obj<'a>,
    name: fn(&Obj<'a>) -> Option<&'a str>,
) -> Result<Option<Choice<'a>>> {
    let given = req.get("tool_choice");
    let (kind, name) = match given {
        None => ("\"auto\"", None),
        Some(choice) => match json::str(choice).as_deref() {
            Some("auto") => ("\"auto\"", None),
            Some("none") => ("\"none\"", None),
            Some("required") => ("\"any\"", None),
            Some(_) => return Err(field("tool_choice")),
            None => {
                let named = json::obj(choice)
                    .filter(|c| c.tag("type") == Some("function"))
                    .and_then(|c| name(&c))
                    .ok_or(field("tool_choice"))?;
                ("\"tool\"", Some(named))
            }
        },
    };
    let serial = req.bool("parallel_tool_calls") == Some(false) && kind != "\"none\"";
    if given.is_none() && !serial {
        return Ok(None);
    }
    Ok(Some(Choice { kind, name, serial }))
}

/// `stop` as `stop_sequences`. Empty strings stop nothing and are dropped; Messages refuses a
/// stop sequence of only whitespace (`"\n"` is a common one), which cannot be dropped.
fn stops<'a>(req: &Obj<'a>) -> Result<Vec<&'a str>> {
    let Some(stop) = req.get("stop") else {
        return Ok(Vec::new());
    };
    let stops = match json::raw_str(stop) {
        Some(_) => vec![stop],
        None => json::arr(stop).ok_or(field("stop"))?,
    };
    let mut out = Vec::with_capacity(stops.len());
    for stop in stops {
        let value = json::str(stop).ok_or(field("stop"))?;
        if value.is_empty() {
            continue;
        }
        if value.trim().is_empty() {
            return Err(field("stop"));
        }
        out.push(stop);
    }
    Ok(out)
}

/// Passes each Messages block of the conversation to `push`, with where it goes.
fn walk<'a>(req: &Obj<'a>, push: &mut dyn FnMut(Role, Block<'a>)) -> Result<()> {
    let mut last = None;
    let mut turns = false;
    let mut counted = |role, block| {
        turns |= role != Role::System;
        push(role, block);
    };
    for m in req.arr("messages").ok_or(field("messages"))? {
        let m = json::obj(m).ok_or(field("messages"))?;
        last = Some(message(&m, &mut counted)?);
    }
    // Messages continues a last assistant turn (a prefill) where Chat answers after it, and
    // refuses a conversation of system messages only, which Chat answers.
    if last == Some(Role::Assistant) || !turns {
        return Err(field("messages"));
    }
    Ok(())
}

fn message<'a>(m: &Obj<'a>, push: &mut dyn FnMut(Role, Block<'a>)) -> Result<Role> {
    let role = match m.tag("role") {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => {
            push(Role::User, tool_result(m)?);
            return Ok(Role::User);
        }
        _ => return Err(field("messages.role")),
    };
    if let Some(content) = m.get("content") {
        if let Some(text) = json::raw_str(content) {
            // Messages refuses empty text blocks.
            if text != EMPTY {
                push(role, Block::Text(text));
            }
        } else {
            for p in json::arr(content).ok_or(field("messages.content"))? {
                if let Some(block) = part(p, role)? {
                    push(role, block);
                }
            }
        }
    }
    if role == Role::Assistant {
        // A refusal in the history is what the assistant said.
        if let Some(refusal) = m.raw_str("refusal").filter(|r| *r != EMPTY) {
            push(role, Block::Text(refusal));
        }
        for call in m.arr("tool_calls").unwrap_or_default() {
            push(role, tool_use(call)?);
        }
    }
    Ok(role)
}

/// One content part: text anywhere, images from users, refusals from the assistant. Empty
/// text is dropped.
fn part<'a>(p: Raw<'a>, role: Role) -> Result<Option<Block<'a>>> {
    let p = json::obj(p).ok_or(field("messages.content"))?;
    let text = |key| Ok(p.raw_str(key).filter(|t| *t != EMPTY).map(Block::Text));
    match (p.tag("type"), role) {
        (Some("text"), _) => text("text"),
        (Some("refusal"), Role::Assistant) => text("refusal"),
        (Some("image_url"), Role::User) => {
            let url = p
                .obj("image_url")
                .and_then(|i| i.str("url"))
                .unwrap_or_default();
            image(&url)?;
            Ok(Some(Block::Image(url)))
        }
        (Some("input_audio"), _) => Err(field("input_audio")),
        (Some("file"), _) => Err(field("file")),
        _ => Err(field("messages.content")),
    }
}

fn tool_use(call: Raw<'_>) -> Result<Block<'_>> {
    let call = json::obj(call).ok_or(field("tool_calls"))?;
    if call.tag("type").is_some_and(|t| t != "function") {
        return Err(field("tool_calls"));
    }
    let f = call.obj("function").ok_or(field("tool_calls"))?;
    Ok(Block::ToolCall {
        id: valid_id(call.str("id").unwrap_or_default()),
        name: f.raw_str("name").ok_or(field("tool_calls"))?,
        input: tool_input(f.str("arguments").unwrap_or_default())?,
    })
}

/// A `role: tool` message as a `tool_result` block (its id made valid like the call's).
fn tool_result<'a>(m: &Obj<'a>) -> Result<Block<'a>> {
    let id = valid_id(m.str("tool_call_id").ok_or(field("tool_call_id"))?);
    let (content, blocks) = match m.get("content") {
        None => (Vec::new(), false),
        Some(content) => match json::raw_str(content) {
            Some(text) => (
                Vec::from_iter((text != EMPTY).then_some(text.into())),
                false,
            ),
            None => {
                let mut texts = Vec::new();
                for p in json::arr(content).ok_or(field("messages.content"))? {
                    let p = json::obj(p).filter(|p| p.tag("type") == Some("text"));
                    let p = p.ok_or(field("messages.content"))?;
                    texts.extend(p.raw_str("text").filter(|t| *t != EMPTY).map(Into::into));
                }
                (texts, true)
            }
        },
    };
    Ok(Block::ToolResult {
        id,
        content,
        blocks,
    })
}

/// The provider's answer (or error) for the OpenAI caller. `created`: Unix seconds. `Err`: a
/// `2xx` body that is not a Messages answer, with the error the caller gets instead.
pub fn response(status: u16, body: &[u8], created: u64) -> std::result::Result<Vec<u8>, Vec<u8>> {
    if !(200..300).contains(&status) {
        return Ok(error(status, body));
    }
    let answer = Obj::parse_bytes(body);
    let Some(content) = answer.as_ref().and_then(|a| a.arr("content")) else {
        return Err(unreadable());
    };
    let answer = answer.unwrap_or_default();
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for block in content.iter().filter_map(|b| json::obj(b)) {
        match block.tag("type") {
            Some("text") => texts.extend(block.raw_str("text")),
            Some("tool_use") => calls.push(block),
            // Thinking and server-tool blocks do not cross vendors.
            _ => {}
        }
    }
    let stop_reason = answer.tag("stop_reason").unwrap_or("end_turn");
    // Anthropic's classifiers stopped the answer: what was said is OpenAI's `refusal`.
    let refused = stop_reason == "refusal";

    let mut out = Out::with_capacity(body.len() + 256);
    out.raw(r#"{"id":"#)
        .raw(answer.raw_str("id").unwrap_or(EMPTY));
    out.raw(r#""object":"chat.completion","created":"#)
        .num(created);
    out.key("model")
        .raw(answer.raw_str("model").unwrap_or(EMPTY));
    out.raw(r#""choices":[{"index":0,"message":{"role":"assistant","content":"#);
    if refused || (texts.is_empty() && !calls.is_empty()) {
        out.null();
    } else {
        joined(&mut out, &texts);
    }
    if refused && texts.iter().any(|t| *t != EMPTY) {
        joined(out.key("refusal"), &texts);
    }
    if !calls.is_empty() {
        out.key("tool_calls").open_arr();
        for call in &calls {
            out.raw(r#"{"id":"#)
                .raw(call.raw_str("id").unwrap_or(EMPTY));
            out.raw(r#""type":"function","function":{"name":"#);
            out.raw(call.raw_str("name").unwrap_or(EMPTY))
                .key("arguments");
            out.str(call.get("input").unwrap_or("{}"));
            out.close().close();
        }
        out.close_arr();
    }
    out.close().raw(r#""logprobs":null,"finish_reason":"#);
    out.str(common::finish_reason(stop_reason))
        .close()
        .close_arr();
    let usage = answer.obj("usage").unwrap_or_default();
    let usage = Usage {
        input: usage.u64("input_tokens").unwrap_or(0),
        output: usage.u64("output_tokens").unwrap_or(0),
        cache_read: usage.u64("cache_read_input_tokens").unwrap_or(0),
        cache_creation: usage.u64("cache_creation_input_tokens").unwrap_or(0),
    };
    write_openai_usage(&mut out, &usage);
    out.close();
    Ok(out.0)
}

/// The OpenAI caller's error instead of a `2xx` answer that is no Messages answer.
pub fn unreadable() -> Vec<u8> {
    common::openai_error_body(
        "api_error",
        None,
        "The provider's answer is not an Anthropic Messages answer and could not be translated.",
    )
}

/// Texts (JSON strings) as one string: the one as written, several joined.
fn joined(out: &mut Out, texts: &[&str]) {
    match texts {
        [] => {
            out.raw(EMPTY);
        }
        [one] => {
            out.raw(one);
        }
        many => {
            let all: String = many.iter().filter_map(|t| json::unescape(t)).collect();
            out.str(&all);
        }
    }
}

/// OpenAI's `usage` member. `cache_creation_input_tokens` is not OpenAI's (it reports no cache
/// writes): written when an Anthropic provider reported some, so nothing counted is lost.
pub(crate) fn write_openai_usage(out: &mut Out, u: &Usage) {
    out.raw(r#""usage":{"prompt_tokens":"#)
        .num(u.prompt_tokens());
    out.key("completion_tokens").num(u.output);
    out.key("total_tokens").num(u.total_tokens());
    out.raw(r#""prompt_tokens_details":{"cached_tokens":"#);
    out.num(u.cache_read);
    if u.cache_creation > 0 {
        out.key("cache_creation_input_tokens").num(u.cache_creation);
    }
    out.close().close();
}

/// A provider's error answer in OpenAI's shape: its message and type when it gave them.
pub(crate) fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let error = common::provider_error(body);
    let kind = error
        .as_ref()
        .and_then(|e| e.kind.as_deref())
        .unwrap_or(common::error_type(status));
    let message = common::error_message(status, error.as_ref(), body);
    common::openai_error_body(kind, None, &message)
}

/// OpenAI's error shape, `{"error": {"message", "type", "param": null, "code"}}`.
pub fn openai_error(kind: &str, code: &str, message: &str) -> Vec<u8> {
    common::openai_error_body(kind, Some(code), message)
}
