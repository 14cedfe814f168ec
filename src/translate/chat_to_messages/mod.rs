//! An OpenAI Chat Completions caller served by an Anthropic Messages provider: the request to
//! Messages ([`request`], [`check`]), the answer and errors back to Chat Completions
//! ([`response`]). docs/translation.md is the user's table of what maps, what is dropped and
//! what makes the entry `content_incompatible`.
//!
//! [`check`] and [`request`] run the same fallible conversions (one set of rules): `check` only
//! drops what they return (borrowed blocks, nothing allocated but a tool result's parts).

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::anthropic as a;
use super::common::{self, StrOr};
use super::openai as o;
use super::{RequestContext, Untranslatable};

pub mod stream;

#[cfg(test)]
mod tests;

type Result<T> = core::result::Result<T, Untranslatable>;

fn parse(body: &[u8]) -> Result<o::Request<'_>> {
    serde_json::from_slice(body).map_err(|_| Untranslatable::NotJson)
}

/// Whether the request can go to a Messages provider (the rules of [`request`], no body built).
pub fn check(body: &[u8]) -> Result<()> {
    let req = parse(body)?;
    head(&req)?;
    for m in &req.messages {
        blocks(m, &mut |_| ())?;
    }
    Ok(())
}

/// What of a request is not its messages, converted: the part of the rules `check` shares
/// with [`request`] besides [`blocks`].
struct Head<'b> {
    tools: Vec<a::Tool<'b>>,
    tool_choice: Option<a::ToolChoice<'b>>,
    stop_sequences: Option<Vec<Cow<'b, str>>>,
}

fn head<'b>(req: &'b o::Request<'_>) -> Result<Head<'b>> {
    rules(req)?;
    Ok(Head {
        tools: req
            .tools
            .iter()
            .flatten()
            .map(tool)
            .collect::<Result<Vec<_>>>()?,
        tool_choice: tool_choice(req)?,
        stop_sequences: stop_sequences(req)?,
    })
}

/// The Messages request for the caller's Chat Completions request.
pub fn request(body: &[u8], cx: &RequestContext<'_>) -> Result<Vec<u8>> {
    let req = parse(body)?;
    let Head {
        tools,
        tool_choice,
        stop_sequences,
    } = head(&req)?;
    let mut system = Vec::new();
    let mut messages: Vec<a::Message<'_>> = Vec::with_capacity(req.messages.len());
    for m in &req.messages {
        let mut turn = Vec::new();
        let role = blocks(m, &mut |b| turn.push(b))?;
        let role = match role {
            Role::System => {
                system.append(&mut turn);
                continue;
            }
            // A message left empty (an assistant turn with an empty content) is not sent:
            // Messages refuses empty content.
            _ if turn.is_empty() => continue,
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        // Consecutive turns of one role become one: the tool results that answer one
        // assistant turn (OpenAI's `role: tool` messages) go in a single user turn, before
        // the text of a user message that follows them.
        match messages.last_mut() {
            Some(a::Message {
                role: last,
                content: StrOr::Other(blocks),
            }) if *last == role => blocks.append(&mut turn),
            _ => messages.push(a::Message {
                role: Cow::Borrowed(role),
                content: StrOr::Other(turn),
            }),
        }
    }
    let has_tools = !tools.is_empty();
    let out = a::Request {
        model: Cow::Borrowed(cx.model),
        max_tokens: Some(
            req.max_completion_tokens
                .or(req.max_tokens)
                .unwrap_or(u64::from(cx.default_max_tokens)),
        ),
        system: (!system.is_empty()).then_some(StrOr::Other(system)),
        messages,
        stop_sequences,
        temperature: req.temperature.map(temperature),
        top_p: req.top_p,
        tools: has_tools.then_some(tools),
        tool_choice: tool_choice.filter(|_| has_tools),
        metadata: req.user.as_deref().map(|user| a::Metadata {
            user_id: Some(Cow::Borrowed(user)),
        }),
        stream: req.stream,
        ..a::Request::default()
    };
    serde_json::to_vec(&out).map_err(|_| Untranslatable::NotJson)
}

fn field(name: &'static str) -> Untranslatable {
    Untranslatable::Field(name)
}

/// A member that is present and not `null`.
fn is_set(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| r.get() != "null")
}

/// The request-wide fields Messages cannot carry (dropping them would change the answer).
fn rules(req: &o::Request<'_>) -> Result<()> {
    if req.n.is_some_and(|n| n > 1) {
        return Err(field("n"));
    }
    if req.logprobs == Some(true) {
        return Err(field("logprobs"));
    }
    if req
        .response_format
        .as_ref()
        .is_some_and(|f| f.kind != "text")
    {
        return Err(field("response_format"));
    }
    if is_set(req.audio) || req.modalities.iter().flatten().any(|m| m == "audio") {
        return Err(field("audio"));
    }
    if req
        .logit_bias
        .is_some_and(|b| !matches!(b.get().trim(), "null" | "{}"))
    {
        return Err(field("logit_bias"));
    }
    if is_set(req.functions) || is_set(req.function_call) {
        return Err(field("functions"));
    }
    if is_set(req.web_search_options) {
        return Err(field("web_search_options"));
    }
    Ok(())
}

/// Anthropic's sampling temperature is 0-1, OpenAI's 0-2: above 1 is sent as 1 (the most
/// random Messages allows); anything else as written.
fn temperature(raw: &RawValue) -> &RawValue {
    match raw.get().parse::<f64>() {
        Ok(t) if t > 1.0 => serde_json::from_str("1").unwrap_or(raw),
        _ => raw,
    }
}

/// `stop` as `stop_sequences`. Empty strings stop nothing and are dropped; Messages refuses
/// a stop sequence of only whitespace (`"\n"` is a common one), which cannot be dropped.
fn stop_sequences<'b>(req: &'b o::Request<'_>) -> Result<Option<Vec<Cow<'b, str>>>> {
    let stops: &[Cow<'_, str>] = match &req.stop {
        None => return Ok(None),
        Some(StrOr::Str(one)) => std::slice::from_ref(one),
        Some(StrOr::Other(many)) => many,
    };
    let mut out = Vec::with_capacity(stops.len());
    for stop in stops.iter().filter(|s| !s.is_empty()) {
        if stop.trim().is_empty() {
            return Err(field("stop"));
        }
        out.push(Cow::Borrowed(&**stop));
    }
    Ok((!out.is_empty()).then_some(out))
}

fn tool<'b>(tool: &'b o::Tool<'_>) -> Result<a::Tool<'b>> {
    match (&*tool.kind, &tool.function) {
        ("function", Some(f)) => Ok(a::Tool {
            kind: None,
            name: Cow::Borrowed(&f.name),
            description: f.description.as_deref().map(Cow::Borrowed),
            // OpenAI's parameters may be left out (a function without arguments); Messages
            // requires a schema.
            input_schema: match f.parameters {
                Some(schema) => Some(schema),
                None => empty_schema(),
            },
        }),
        _ => Err(field("tools")),
    }
}

fn empty_schema() -> Option<&'static RawValue> {
    serde_json::from_str(r#"{"type":"object","properties":{}}"#).ok()
}

/// `tool_choice` and `parallel_tool_calls: false` as Messages' `tool_choice` (sent only with
/// tools).
fn tool_choice<'b>(req: &'b o::Request<'_>) -> Result<Option<a::ToolChoice<'b>>> {
    let (kind, name) = match &req.tool_choice {
        None => ("auto", None),
        Some(StrOr::Str(mode)) => match &**mode {
            "auto" => ("auto", None),
            "none" => ("none", None),
            "required" => ("any", None),
            _ => return Err(field("tool_choice")),
        },
        Some(StrOr::Other(o::NamedToolChoice {
            kind,
            function: Some(f),
        })) if kind == "function" => ("tool", Some(Cow::Borrowed(&*f.name))),
        Some(StrOr::Other(_)) => return Err(field("tool_choice")),
    };
    let serial = req.parallel_tool_calls == Some(false) && kind != "none";
    if req.tool_choice.is_none() && !serial {
        return Ok(None);
    }
    Ok(Some(a::ToolChoice {
        kind: Cow::Borrowed(kind),
        name,
        disable_parallel_tool_use: serial.then_some(true),
    }))
}

/// Where a Chat message's blocks go.
enum Role {
    /// Hoisted into `system` (system and developer messages, wherever they are).
    System,
    User,
    Assistant,
}

/// Passes each Messages block of one Chat message to `push` and says where they go.
fn blocks<'b>(m: &'b o::Message<'_>, push: &mut impl FnMut(a::Block<'b>)) -> Result<Role> {
    let role = match &*m.role {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => {
            push(tool_result(m)?);
            return Ok(Role::User);
        }
        _ => return Err(field("messages.role")),
    };
    match &m.content {
        Some(StrOr::Str(text)) if !text.is_empty() => push(text_block(text)),
        None | Some(StrOr::Str(_)) => {}
        Some(StrOr::Other(parts)) => {
            for p in parts {
                if let Some(block) = part(p, &role)? {
                    push(block);
                }
            }
        }
    }
    if let Role::Assistant = role {
        // A refusal in the history is what the assistant said.
        if let Some(refusal) = m.refusal.as_deref().filter(|r| !r.is_empty()) {
            push(text_block(refusal));
        }
        for call in m.tool_calls.iter().flatten() {
            push(tool_use(call)?);
        }
    }
    Ok(role)
}

fn text_block(text: &str) -> a::Block<'_> {
    a::Block {
        kind: Cow::Borrowed("text"),
        text: Some(Cow::Borrowed(text)),
        ..a::Block::default()
    }
}

/// One content part: text anywhere, images from users, refusals from the assistant. Empty
/// text is dropped (Messages refuses empty text blocks).
fn part<'b>(p: &'b o::Part<'_>, role: &Role) -> Result<Option<a::Block<'b>>> {
    match (&*p.kind, role) {
        ("text", _) => Ok(p.text.as_deref().filter(|t| !t.is_empty()).map(text_block)),
        ("refusal", Role::Assistant) => Ok(p
            .refusal
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(text_block)),
        ("image_url", Role::User) => {
            let url = p.image_url.as_ref().map_or("", |i| &*i.url);
            Ok(Some(a::Block {
                kind: Cow::Borrowed("image"),
                source: Some(image_source(url)?),
                ..a::Block::default()
            }))
        }
        ("input_audio", _) => Err(field("input_audio")),
        ("file", _) => Err(field("file")),
        _ => Err(field("messages.content")),
    }
}

/// The image types Messages takes.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// A data URI as a base64 source, an http(s) URL as a URL source.
fn image_source(url: &str) -> Result<a::Source<'_>> {
    if let Some((media_type, data)) = common::split_data_uri(url) {
        if !IMAGE_TYPES.contains(&media_type) {
            return Err(field("image_url"));
        }
        return Ok(a::Source {
            kind: Cow::Borrowed("base64"),
            media_type: Some(Cow::Borrowed(media_type)),
            data: Some(Cow::Borrowed(data)),
            url: None,
        });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(a::Source {
            kind: Cow::Borrowed("url"),
            url: Some(Cow::Borrowed(url)),
            ..a::Source::default()
        });
    }
    Err(field("image_url"))
}

fn tool_use<'b>(call: &'b o::ToolCall<'_>) -> Result<a::Block<'b>> {
    if call.kind != "function" {
        return Err(field("tool_calls"));
    }
    Ok(a::Block {
        kind: Cow::Borrowed("tool_use"),
        id: Some(common::tool_id(&call.id)),
        name: Some(Cow::Borrowed(&call.function.name)),
        input: Some(Cow::Borrowed(tool_input(&call.function.arguments)?)),
        ..a::Block::default()
    })
}

/// OpenAI's `arguments` (JSON text) as Messages' `input` (an object): empty text is `{}`;
/// anything but an object cannot be sent.
pub(crate) fn tool_input(arguments: &str) -> Result<&RawValue> {
    if arguments.trim().is_empty() {
        return serde_json::from_str("{}").map_err(|_| field("tool_calls"));
    }
    match serde_json::from_str::<&RawValue>(arguments) {
        Ok(raw) if raw.get().starts_with('{') => Ok(raw),
        _ => Err(field("tool_calls.function.arguments")),
    }
}

/// A `role: tool` message as a `tool_result` block (its id made valid like the call's).
fn tool_result<'b>(m: &'b o::Message<'_>) -> Result<a::Block<'b>> {
    let id = m.tool_call_id.as_deref().ok_or(field("tool_call_id"))?;
    let content = match &m.content {
        None => None,
        Some(StrOr::Str(text)) => (!text.is_empty()).then(|| StrOr::Str(Cow::Borrowed(&**text))),
        Some(StrOr::Other(parts)) => {
            let mut blocks = Vec::with_capacity(parts.len());
            for p in parts {
                match (&*p.kind, p.text.as_deref()) {
                    ("text", Some(text)) if !text.is_empty() => blocks.push(text_block(text)),
                    ("text", _) => {}
                    _ => return Err(field("messages.content")),
                }
            }
            (!blocks.is_empty()).then_some(StrOr::Other(blocks))
        }
    };
    Ok(a::Block {
        kind: Cow::Borrowed("tool_result"),
        tool_use_id: Some(common::tool_id(id)),
        content,
        ..a::Block::default()
    })
}

/// The provider's answer (or error) for the OpenAI caller. `created`: Unix seconds.
pub fn response(status: u16, body: &[u8], created: u64) -> Vec<u8> {
    if !(200..300).contains(&status) {
        return error(status, body);
    }
    let Ok(answer) = serde_json::from_slice::<a::Response<'_>>(body) else {
        return common::openai_error_body(
            "api_error",
            None,
            "The provider's answer is not an Anthropic Messages answer and could not be translated.",
        );
    };
    let mut text: Option<Cow<'_, str>> = None;
    let mut tool_calls = Vec::new();
    for block in &answer.content {
        match (&*block.kind, &block.text) {
            ("text", Some(t)) => {
                if let Some(all) = &mut text {
                    all.to_mut().push_str(t);
                } else {
                    text = Some(Cow::Borrowed(t));
                }
            }
            ("tool_use", _) => tool_calls.push(o::ToolCall {
                id: Cow::Borrowed(block.id.as_deref().unwrap_or_default()),
                kind: Cow::Borrowed("function"),
                function: o::FunctionCall {
                    name: Cow::Borrowed(block.name.as_deref().unwrap_or_default()),
                    arguments: Cow::Borrowed(block.input.as_deref().map_or("{}", RawValue::get)),
                },
            }),
            // Thinking and server-tool blocks do not cross vendors.
            _ => {}
        }
    }
    let stop_reason = answer.stop_reason.as_deref().unwrap_or("end_turn");
    // Anthropic's classifiers stopped the answer: what was said is OpenAI's `refusal`.
    let (content, refusal) = if stop_reason == "refusal" {
        (None, text.filter(|t| !t.is_empty()))
    } else if text.is_none() && tool_calls.is_empty() {
        (Some(Cow::Borrowed("")), None)
    } else {
        (text, None)
    };
    let out = o::Response {
        id: answer.id,
        object: Cow::Borrowed("chat.completion"),
        created,
        model: answer.model,
        choices: vec![o::Choice {
            index: 0,
            message: o::Message {
                role: Cow::Borrowed("assistant"),
                content: content.map(StrOr::Str),
                refusal,
                tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
                tool_call_id: None,
            },
            logprobs: None,
            finish_reason: Some(Cow::Borrowed(common::finish_reason(stop_reason))),
        }],
        usage: Some(o::Usage::from_common(answer.usage.common())),
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

/// A provider's error answer in OpenAI's shape: its message and type when it gave them.
fn error(status: u16, body: &[u8]) -> Vec<u8> {
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
