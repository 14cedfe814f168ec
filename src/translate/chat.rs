//! OpenAI Chat Completions as a provider dialect of the internal model ([`super::model`]): a
//! request written from the model ([`Conversation`], [`request`]), a whole answer read into it
//! ([`answer`]) and a stream of chunks read into its events ([`Decoder`]).
//!
//! Every other caller dialect writes its requests for Chat providers through here (Gemini's
//! OpenAI endpoint, Azure OpenAI's deployments API, vLLM...). Chat as a caller dialect is
//! `caller.rs`.

use std::borrow::Cow;

use super::common;
use super::json::{self, elements, number, pick, Obj, Out, RawStr};
use super::model::{Answer, Block, Choice, Event, Output, Part, Request, Role, Stop, Tool, Usage};
use super::sse::{self, Reader};
use super::RequestContext;

/// The conversation as Chat writes it: one message per run of parts of one role, an
/// assistant's text and tool calls in one message, each tool result its own `tool` message.
pub struct Conversation {
    out: Out,
    /// The role of the message being written.
    open: Option<Role>,
    /// The open assistant message's tool calls (written when it closes).
    calls: Out,
    /// The open message has content parts (its `content` array is open).
    parts: bool,
    /// Strings where they can be (the Messages caller's Chat requests): a user message of one
    /// text has it as its `content` string, an assistant's texts are joined into one string
    /// (none: `null`), a tool message's `content` comes before its `tool_call_id`.
    compact: bool,
    /// Where the open message's `content` string starts (compact).
    string: Option<usize>,
}

impl Conversation {
    pub fn with_capacity(n: usize) -> Conversation {
        Conversation {
            out: Out::with_capacity(n),
            open: None,
            calls: Out::default(),
            parts: false,
            compact: false,
            string: None,
        }
    }

    /// A conversation written with strings where they can be ([`Conversation::compact`]).
    pub fn compact(n: usize) -> Conversation {
        Conversation {
            compact: true,
            ..Conversation::with_capacity(n)
        }
    }

    fn close(&mut self) {
        let Some(role) = self.open.take() else {
            return;
        };
        let out = &mut self.out;
        if self.string.take().is_some() {
            // Its content is a string.
        } else if std::mem::take(&mut self.parts) {
            out.close_arr();
        } else {
            // An assistant message of tool calls only.
            out.key("content").null();
        }
        if role == Role::Assistant && !self.calls.0.is_empty() {
            out.key("tool_calls")
                .open_arr()
                .0
                .extend_from_slice(&self.calls.0);
            out.close_arr();
            self.calls.0.clear();
        }
        out.close();
    }

    fn open(&mut self, role: Role) {
        if self.open == Some(role) {
            return;
        }
        self.close();
        let name = match role {
            Role::System => r#"{"role":"system""#,
            Role::User => r#"{"role":"user""#,
            Role::Assistant => r#"{"role":"assistant""#,
        };
        self.out.raw(name);
        self.open = Some(role);
    }

    /// Opens a message of `role` for a content part.
    fn part(&mut self, role: Role) -> &mut Out {
        self.open(role);
        if let Some(at) = self.string.take() {
            // A second part: the string becomes the first text part.
            let text = self.out.0.split_off(at);
            self.out.raw(r#"[{"type":"text","text":"#);
            self.out.0.extend_from_slice(&text);
            self.out.close();
            self.parts = true;
        } else if !std::mem::replace(&mut self.parts, true) {
            self.out.raw(r#""content":["#);
        }
        &mut self.out
    }

    /// A text as the open message's `content` string (compact): a user's first text, or an
    /// assistant's texts joined.
    fn string(&mut self, role: Role, text: &str) {
        self.open(role);
        match self.string {
            Some(at) => {
                let mut joined = String::new();
                for t in [
                    std::str::from_utf8(self.out.0.get(at..).unwrap_or_default()),
                    Ok(text),
                ] {
                    joined.push_str(&t.ok().and_then(json::unescape).unwrap_or_default());
                }
                self.out.0.truncate(at);
                self.out.str(&joined);
            }
            None => {
                self.out.key("content");
                self.string = Some(self.out.0.len());
                self.out.raw(text);
            }
        }
    }

    /// Adds the next part of the conversation.
    pub fn push(&mut self, role: Role, part: &Part<'_>) {
        match part {
            // Another vendor's reasoning: no Chat server can read it.
            Part::Thinking(_) => {}
            // Instructions as a string, which every Chat server takes.
            Part::Text(text) if role == Role::System => {
                self.close();
                self.out
                    .raw(r#"{"role":"system","content":"#)
                    .raw(text)
                    .close();
            }
            Part::Text(text)
                if self.compact && (role == Role::Assistant || self.open != Some(role)) =>
            {
                self.string(role, text);
            }
            Part::Text(text) => {
                let out = self.part(role);
                out.raw(r#"{"type":"text","text":"#).raw(text).close();
            }
            Part::Image(url) => {
                let out = self.part(role);
                out.raw(r#"{"type":"image_url","image_url":{"url":"#);
                out.str(url).close().close();
            }
            Part::ToolCall { id, name, input } => {
                self.open(Role::Assistant);
                let calls = &mut self.calls;
                calls.raw(r#"{"id":"#).str(common::unsigned(id));
                calls
                    .raw(r#""type":"function","function":{"name":"#)
                    .raw(name);
                calls.key("arguments").str(input.trim()).close().close();
            }
            Part::ToolResult {
                id,
                content,
                blocks,
            } => {
                self.close();
                let out = &mut self.out;
                if self.compact {
                    out.raw(r#"{"role":"tool""#);
                } else {
                    out.raw(r#"{"role":"tool","tool_call_id":"#)
                        .str(common::unsigned(id));
                }
                out.key("content");
                match (content.as_slice(), blocks) {
                    ([], _) => {
                        out.raw(json::EMPTY);
                    }
                    ([text], false) => {
                        out.raw(text);
                    }
                    (texts, _) => {
                        out.open_arr();
                        for text in texts {
                            out.raw(r#"{"type":"text","text":"#).raw(text).close();
                        }
                        out.close_arr();
                    }
                }
                if self.compact {
                    out.key("tool_call_id").str(common::unsigned(id));
                }
                out.close();
            }
        }
    }
}

/// The Chat Completions request: the conversation and the rest of the request. A stream asks
/// for usage (`stream_options.include_usage`), so the caller gets it.
pub fn request(
    mut conversation: Conversation,
    req: &Request<'_>,
    cx: &RequestContext<'_>,
) -> Vec<u8> {
    conversation.close();
    let turns = &conversation.out;
    let mut out = Out::with_capacity(turns.0.len() + 512);
    out.raw(r#"{"model":"#).str(cx.model);
    out.key("messages").open_arr().0.extend_from_slice(&turns.0);
    out.close_arr();
    common::Sampling {
        // Not max_tokens: OpenAI's reasoning models refuse it.
        max_tokens: "max_completion_tokens",
        top_p: "top_p",
        top_k: None,
        stop: Some("stop"),
    }
    .write(&mut out, req);
    write_tools(&mut out, &req.tools, req.choice.as_ref());
    if let Some(user) = req.user {
        out.key("user").raw(user);
    }
    if let Some(stream) = req.stream {
        out.key("stream").bool(stream);
        if stream {
            out.raw(r#""stream_options":{"include_usage":true}"#);
        }
    }
    out.close();
    out.0
}

/// `tools`, `tool_choice` and `parallel_tool_calls`, only together (Chat refuses the others
/// without tools): the model's choice (in Messages' terms) in Chat's.
pub fn write_tools(out: &mut Out, tools: &[Tool<'_>], choice: Option<&Choice<'_>>) {
    if tools.is_empty() {
        return;
    }
    out.key("tools").open_arr();
    for tool in tools {
        out.raw(r#"{"type":"function","function":{"name":"#)
            .raw(tool.name);
        if let Some(description) = tool.description {
            out.key("description").raw(description);
        }
        if let Some(schema) = tool.schema {
            out.key("parameters").raw(schema);
        }
        out.close().close();
    }
    out.close_arr();
    if let Some(choice) = choice {
        out.key("tool_choice");
        match (choice.kind, choice.name) {
            ("\"tool\"", Some(name)) => {
                out.raw(r#"{"type":"function","function":{"name":"#)
                    .raw(name);
                out.close().close();
            }
            ("\"any\"", _) => {
                out.raw("\"required\"");
            }
            (kind, _) => {
                out.raw(kind);
            }
        }
        if choice.serial {
            out.key("parallel_tool_calls").bool(false);
        }
    }
}

/// The model's stop reason for a Chat `finish_reason`.
fn stop(finish_reason: &[u8]) -> Stop {
    match finish_reason {
        b"length" => Stop::MaxTokens,
        b"tool_calls" | b"function_call" => Stop::ToolUse,
        b"content_filter" => Stop::Refusal,
        _ => Stop::End,
    }
}

fn usage_of(usage: &Obj<'_>) -> Usage {
    let details = usage.obj("prompt_tokens_details").unwrap_or_default();
    let reasoning = (usage.obj("completion_tokens_details"))
        .and_then(|d| d.u64("reasoning_tokens"))
        .unwrap_or(0);
    Usage::from_openai(
        usage.u64("prompt_tokens").unwrap_or(0),
        usage.u64("completion_tokens").unwrap_or(0),
        details.u64("cached_tokens").unwrap_or(0),
        // Cache writes when a gateway reports them (as the translated answers write them, or
        // as `cache_write_tokens`).
        (details.u64("cache_creation_input_tokens"))
            .or_else(|| details.u64("cache_write_tokens"))
            .unwrap_or(0),
    )
    .with_reasoning(reasoning)
}

/// A Chat answer read into the model (`None`: not a Chat answer): its content (a string, or
/// the texts of content parts, as some OpenAI-compatible servers send), then its refusal (the
/// answer's stop then a refusal), then its tool calls.
pub fn answer(body: &[u8]) -> Option<Answer<'_>> {
    let answer = Obj::parse_bytes(body)?;
    let choices = answer.arr("choices")?;
    let choice = choices
        .first()
        .and_then(|c| json::obj(c))
        .unwrap_or_default();
    let message = choice.obj("message").unwrap_or_default();
    let mut output = Vec::new();
    let content = message.get("content").unwrap_or_default();
    match json::raw_str(content) {
        Some(text) if text != json::EMPTY => output.push(Output::Text(text)),
        Some(_) => {}
        None => {
            let parts = json::arr(content).unwrap_or_default().into_iter();
            let texts = parts.filter_map(|p| json::obj(p)?.raw_str("text"));
            output.extend(texts.map(Output::Text));
        }
    }
    let refusal = message.raw_str("refusal").filter(|r| *r != json::EMPTY);
    output.extend(refusal.map(Output::Text));
    for call in message.arr("tool_calls").unwrap_or_default() {
        let call = json::obj(call).unwrap_or_default();
        let f = call.obj("function").unwrap_or_default();
        output.push(Output::ToolCall {
            id: call.raw_str("id").unwrap_or(json::EMPTY),
            name: f.raw_str("name").unwrap_or(json::EMPTY),
            arguments: Cow::Borrowed(f.raw_str("arguments").unwrap_or(json::EMPTY)),
        });
    }
    let reason = choice.tag("finish_reason").unwrap_or("stop");
    Some(Answer {
        id: answer.raw_str("id"),
        model: answer.raw_str("model"),
        output,
        stop: match refusal {
            Some(_) => Stop::Refusal,
            None => stop(reason.as_bytes()),
        },
        usage: usage_of(&answer.obj("usage").unwrap_or_default()),
    })
}

/// A Chat stream (`data:` chunks, `[DONE]`) read into the model's events, whatever the chunk
/// boundaries.
#[derive(Debug, Default)]
pub struct Decoder {
    sse: Reader,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    started: bool,
    /// The open block: its index and, for a tool call, its Chat `index`.
    open: Option<(u64, Option<u64>)>,
    blocks: u64,
    ends: sse::Ends,
}

impl Decoder {
    /// The finish reason came.
    pub fn stopped(&self) -> bool {
        self.state.ends.stopped
    }

    /// Reads the next chunk (`end`: the last), passing each event to `on`. A stream whose
    /// finish reason came is complete without `[DONE]`.
    pub fn push(&mut self, chunk: &[u8], end: bool, on: &mut dyn FnMut(Event<'_>)) {
        self.sse.decode(&mut self.state, chunk, end, on);
    }
}

impl sse::Decode for State {
    fn ends(&mut self) -> &mut sse::Ends {
        &mut self.ends
    }

    fn event(&mut self, e: sse::Event<'_>, on: &mut dyn FnMut(Event<'_>)) {
        self.read(e, on);
    }
}

impl State {
    fn read(&mut self, e: sse::Event<'_>, on: &mut dyn FnMut(Event<'_>)) {
        if e.data == b"[DONE]" {
            self.ends.done = true;
            return on(Event::End);
        }
        let [id, model, choices, usage, error, object] = pick(
            e.data,
            [b"id", b"model", b"choices", b"usage", b"error", b"object"],
        );
        if !matches!(error, b"" | b"null") || object == br#""error""# || e.name == b"error" {
            self.ends.done = true;
            let error = common::provider_error(e.data).unwrap_or_default();
            return on(Event::Error {
                kind: error.kind.as_deref(),
                message: error.message.as_deref(),
            });
        }
        let choice = elements(choices).next();
        if !self.started {
            if choice.is_none() && !usage.starts_with(b"{") {
                // Azure OpenAI's first chunk (`prompt_filter_results`, empty id and model), or
                // not a chunk at all: the answer starts with the first chunk of an answer.
                return;
            }
            self.started = true;
            on(Event::Start { id, model });
        }
        if let Some(choice) = choice {
            let [delta, finish] = pick(choice, [b"delta", b"finish_reason"]);
            let [content, refusal, calls] = pick(delta, [b"content", b"refusal", b"tool_calls"]);
            let text = RawStr::of(content).or(RawStr::of(refusal));
            if let Some(text) = text.filter(|t| !t.is_empty()) {
                let index = match self.open {
                    Some((index, None)) => index,
                    _ => self.start(Block::Text, None, on),
                };
                on(Event::Text {
                    index,
                    text: text.0,
                });
            }
            for call in elements(calls) {
                let [k, id, function] = pick(call, [b"index", b"id", b"function"]);
                let [name, arguments] = pick(function, [b"name", b"arguments"]);
                let k = number(k).unwrap_or(0);
                let index = match self.open {
                    Some((index, Some(open))) if open == k => index,
                    _ => self.start(Block::ToolCall { id, name }, Some(k), on),
                };
                if let Some(arguments) = RawStr::of(arguments).filter(|a| !a.is_empty()) {
                    on(Event::Arguments {
                        index,
                        json: arguments.0,
                    });
                }
            }
            if let Some(reason) = RawStr::of(finish) {
                self.stop_block(on);
                self.ends.stopped = true;
                on(Event::Stop(stop(reason.inner())));
            }
        }
        if usage.starts_with(b"{") {
            let usage = Obj::parse_bytes(usage).unwrap_or_default();
            on(Event::Usage(usage_of(&usage)));
        }
    }

    /// Stops the open block and starts the next: its index.
    fn start(&mut self, block: Block<'_>, call: Option<u64>, on: &mut dyn FnMut(Event<'_>)) -> u64 {
        self.stop_block(on);
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some((index, call));
        on(Event::BlockStart { index, block });
        index
    }

    fn stop_block(&mut self, on: &mut dyn FnMut(Event<'_>)) {
        if let Some((index, _)) = self.open.take() {
            on(Event::BlockStop { index });
        }
    }
}

mod caller;
pub use caller::*;
#[cfg(test)]
mod messages_stream_tests;
#[cfg(test)]
mod messages_tests;
