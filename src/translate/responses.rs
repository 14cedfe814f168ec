//! OpenAI's Responses API as a provider dialect of the internal model (`api: openai_responses`,
//! models served only through `/v1/responses`: OpenAI's, and Azure OpenAI's v1 API): a request
//! written from the model ([`Conversation`], [`request`]), a whole answer read into it
//! ([`answer`]) and its typed event stream read into the model's events ([`Decoder`]). Every
//! caller dialect that reads into the model reaches it through these; docs/translation.md has
//! the field table. As a caller: `responses/caller.rs`, as every dialect's caller side is laid out.

use std::borrow::Cow;

use crate::translate::common::{self, Sampling};
use crate::translate::json::{self, number, pick, Obj, Out, RawStr, EMPTY};
use crate::translate::model::{Answer, Block, Event, Output, Part, Request, Role, Stop};
use crate::translate::model::{Thinking, Usage};
use crate::translate::sse::{self, Reader};
use crate::translate::{field, Api, RequestContext, Untranslatable};

/// The conversation as Responses writes it: system parts joined as `instructions`, the rest as
/// `input` items (one `message` per run of a role's text and images, each function call and
/// each result its own item).
pub struct Conversation {
    /// The instructions so far: JSON string contents (escapes as written), without quotes.
    instructions: Vec<u8>,
    input: Out,
    /// The role of the open message (its `content` array is open).
    open: Option<Role>,
}

impl Conversation {
    pub fn with_capacity(n: usize) -> Conversation {
        Conversation {
            instructions: Vec::new(),
            input: Out::with_capacity(n),
            open: None,
        }
    }

    fn close(&mut self) {
        if self.open.take().is_some() {
            self.input.close_arr().close();
        }
    }

    /// Adds the next part of the conversation.
    #[inline(never)]
    pub fn push(&mut self, role: Role, part: &Part<'_>) {
        match part {
            // OpenAI's reasoning again (id, summary, encrypted content); Anthropic's, which
            // OpenAI cannot read, is dropped.
            Part::Thinking(t) if t.goes_to() == Api::OpenAiResponses => {
                self.close();
                caller::reasoning_item(&mut self.input.raw("").0, b"", t);
            }
            Part::Thinking(_) => {}
            Part::Text(text) if role == Role::System => {
                if !self.instructions.is_empty() {
                    self.instructions.extend_from_slice(b"\\n\\n");
                }
                self.instructions
                    .extend_from_slice(RawStr(text.as_bytes()).inner());
            }
            Part::Text(text) => {
                // An assistant's earlier text is `output_text`, as the API gave it.
                let kind = if role == Role::Assistant {
                    r#"{"type":"output_text","text":"#
                } else {
                    r#"{"type":"input_text","text":"#
                };
                self.message(role).raw(kind).raw(text).close();
            }
            Part::Image(url) => {
                let out = self.message(role);
                out.raw(r#"{"type":"input_image","detail":"auto","image_url":"#);
                out.str(url).close();
            }
            Part::ToolCall { id, name, input } => {
                self.close();
                let out = &mut self.input;
                out.raw(r#"{"type":"function_call","call_id":"#)
                    .str(common::unsigned(id));
                out.key("name").raw(name);
                out.key("arguments").str(input.trim()).close();
            }
            Part::ToolResult { id, content, .. } => {
                self.close();
                let out = &mut self.input;
                out.raw(r#"{"type":"function_call_output","call_id":"#)
                    .str(common::unsigned(id));
                out.key("output");
                match content.as_slice() {
                    [] => {
                        out.raw(EMPTY);
                    }
                    [text] => {
                        out.raw(text);
                    }
                    texts => {
                        out.open_arr();
                        for text in texts {
                            out.raw(r#"{"type":"input_text","text":"#).raw(text).close();
                        }
                        out.close_arr();
                    }
                }
                out.close();
            }
        }
    }

    /// The open message of `role` (opened when another was), for a content part.
    fn message(&mut self, role: Role) -> &mut Out {
        if self.open != Some(role) {
            self.close();
            self.input.raw(if role == Role::Assistant {
                r#"{"type":"message","role":"assistant","content":["#
            } else {
                r#"{"type":"message","role":"user","content":["#
            });
            self.open = Some(role);
        }
        &mut self.input
    }
}

/// The Responses request: the conversation and the rest of the request (`store: false`: the
/// caller's API keeps no state at the provider). Stop sequences cannot be carried (Responses
/// has none): such a request is refused.
#[inline(never)]
pub fn request(
    mut conversation: Conversation,
    req: &Request<'_>,
    cx: &RequestContext<'_>,
) -> Result<Vec<u8>, Untranslatable> {
    if !req.stops.is_empty() {
        return Err(field("stop"));
    }
    conversation.close();
    let input = &conversation.input.0;
    let mut out = Out::with_capacity(input.len() + conversation.instructions.len() + 512);
    out.raw(r#"{"model":"#).str(cx.model);
    out.key("input").open_arr().0.extend_from_slice(input);
    out.close_arr();
    if !conversation.instructions.is_empty() {
        out.key("instructions");
        json::put(&mut out.0, &[b"\"", &conversation.instructions, b"\""]);
    }
    // Responses has no stop sequences (refused above).
    Sampling {
        max_tokens: "max_output_tokens",
        top_p: "top_p",
        top_k: None,
        stop: None,
    }
    .write(&mut out, req);
    if !req.tools.is_empty() {
        out.key("tools").open_arr();
        for tool in &req.tools {
            out.raw(r#"{"type":"function","name":"#).raw(tool.name);
            if let Some(description) = tool.description {
                out.key("description").raw(description);
            }
            if let Some(schema) = tool.schema {
                out.key("parameters").raw(schema);
            }
            // Chat's and Messages' schemas are not strict unless they say so.
            out.key("strict").bool(false).close();
        }
        out.close_arr();
        if let Some(choice) = &req.choice {
            out.key("tool_choice");
            match (choice.kind, choice.name) {
                ("\"tool\"", Some(name)) => {
                    out.raw(r#"{"type":"function","name":"#).raw(name).close();
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
    if let Some(user) = req.user {
        out.key("user").raw(user);
    }
    out.key("store").bool(false);
    if req.thinking {
        // Its reasoning, shown and sent back without state at OpenAI (docs/translation.md
        // "Reasoning").
        out.raw(r#""reasoning":{"summary":"auto"},"include":["reasoning.encrypted_content"]"#);
    }
    if let Some(stream) = req.stream {
        out.key("stream").bool(stream);
    }
    out.close();
    Ok(out.0)
}

/// Responses' `usage`: `input_tokens` counts the cached ones too.
fn usage_of(usage: &[u8]) -> Usage {
    let [input, output, details, output_details] = pick(
        usage,
        [
            b"input_tokens",
            b"output_tokens",
            b"input_tokens_details",
            b"output_tokens_details",
        ],
    );
    let [cached] = pick(details, [b"cached_tokens"]);
    let [reasoning] = pick(output_details, [b"reasoning_tokens"]);
    let n = |v| number(v).unwrap_or(0);
    Usage::from_openai(n(input), n(output), n(cached), 0).with_reasoning(n(reasoning))
}

/// The stop reason of a finished response: `incomplete_details.reason` for an incomplete one,
/// else a call or the end of the turn.
fn stop(response: &[u8], called: bool) -> Stop {
    let [details] = pick(response, [b"incomplete_details"]);
    match pick(details, [b"reason"])[0] {
        br#""max_output_tokens""# => Stop::MaxTokens,
        br#""content_filter""# => Stop::Refusal,
        _ if called => Stop::ToolUse,
        _ => Stop::End,
    }
}

/// A Responses answer read into the model (`None`: not a Response): its message items' text
/// (`output_text` and `refusal` parts), its `function_call` items, its reasoning items with
/// their encrypted content ([`reasoning`]); built-in tool items are dropped.
pub fn answer(body: &[u8]) -> Option<Answer<'_>> {
    let response = Obj::parse_bytes(body)?;
    let items = response.arr("output")?;
    let mut output = Vec::new();
    let mut refused = false;
    for item in items.iter().filter_map(|i| json::obj(i)) {
        match item.tag("type") {
            Some("message") => {
                for part in item.arr("content").unwrap_or_default() {
                    let part = json::obj(part).unwrap_or_default();
                    let text = match part.tag("type") {
                        Some("output_text") => part.raw_str("text"),
                        Some("refusal") => {
                            refused = true;
                            part.raw_str("refusal")
                        }
                        _ => None,
                    };
                    output.extend(text.filter(|t| *t != EMPTY).map(Output::Text));
                }
            }
            Some("function_call") => output.push(Output::ToolCall {
                id: item.raw_str("call_id").unwrap_or(EMPTY),
                name: item.raw_str("name").unwrap_or(EMPTY),
                arguments: Cow::Borrowed(item.raw_str("arguments").unwrap_or(EMPTY)),
            }),
            Some("reasoning") => {
                if let (Some(id), Some(signature)) =
                    (item.raw_str("id"), item.raw_str("encrypted_content"))
                {
                    output.push(Output::Thinking(Thinking {
                        text: caller::summary(&item),
                        signature: json::contents(signature),
                        redacted: false,
                        item: json::contents(id),
                    }));
                }
            }
            _ => {}
        }
    }
    let called = output.iter().any(|o| matches!(o, Output::ToolCall { .. }));
    let stop = match stop(body, called) {
        Stop::End if refused => Stop::Refusal,
        stop => stop,
    };
    Some(Answer {
        id: response.raw_str("id"),
        model: response.raw_str("model"),
        output,
        stop,
        usage: usage_of(response.get("usage").unwrap_or_default().as_bytes()),
    })
}

/// A reasoning item as the model's thinking, when it carries its encrypted content (asked with
/// `include`): without it a request with `store: false` cannot send it back, and it is dropped.
/// Its `id`, `encrypted_content` and first summary text (JSON strings; `""` for no text).
fn reasoning(item: &[u8]) -> Option<[&[u8]; 3]> {
    let mut found = pick(item, [b"id", b"encrypted_content", b"summary"]);
    // The first part's (`pick` reads the first object after the bracket).
    let [first] = pick(found[2].get(1..).unwrap_or_default(), [b"text"]);
    found[2] = Some(first)
        .filter(|t| t.starts_with(b"\""))
        .unwrap_or(EMPTY.as_bytes());
    (RawStr::of(found[0]).is_some() && RawStr::of(found[1]).is_some()).then_some(found)
}

/// A Responses event stream (`event: <type>` and `data: {"type": ...}`) read into the
/// model's events, whatever the chunk boundaries: output items are the model's blocks (their
/// `output_index` the block's index), `response.completed` / `.incomplete` the end,
/// `response.failed` and `error` the provider's error.
#[derive(Debug, Default)]
pub struct Decoder {
    sse: Reader,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    started: bool,
    /// The open output item: its index, whether it is a call, whether its arguments came.
    open: Option<(u64, bool, bool)>,
    called: bool,
    /// `response.completed` (and an error) is the stop and the end at once: both are set.
    ends: sse::Ends,
}

impl Decoder {
    /// The final event came (`response.completed` is the stop and the end at once).
    pub fn stopped(&self) -> bool {
        self.state.ends.stopped
    }

    /// Reads the next chunk (`end`: the last), passing each event to `on`.
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
    #[inline(never)]
    fn read(&mut self, e: sse::Event<'_>, on: &mut dyn FnMut(Event<'_>)) {
        let [kind, response, item, index, delta] = pick(
            e.data,
            [b"type", b"response", b"item", b"output_index", b"delta"],
        );
        let kind = RawStr::of(kind).map_or(&b""[..], RawStr::inner);
        let kind = if e.name == b"error" { b"error" } else { kind };
        let index = number(index).unwrap_or(0);
        match kind {
            b"response.created" | b"response.in_progress" => self.start(response, on),
            b"response.output_item.added" => {
                self.start(response, on);
                self.stop_block(on);
                let [item_type, call_id, name] = pick(item, [b"type", b"call_id", b"name"]);
                let block = match item_type {
                    br#""message""# => Block::Text,
                    br#""function_call""# => Block::ToolCall { id: call_id, name },
                    // Reasoning and built-in tools' items do not cross dialects.
                    _ => return,
                };
                let call = matches!(block, Block::ToolCall { .. });
                self.called |= call;
                self.open = Some((index, call, false));
                on(Event::BlockStart { index, block });
            }
            b"response.output_text.delta" | b"response.refusal.delta" => {
                if let (Some((open, false, _)), Some(text)) = (self.open, RawStr::of(delta)) {
                    if open == index && !text.is_empty() {
                        on(Event::Text {
                            index,
                            text: text.0,
                        });
                    }
                }
            }
            b"response.function_call_arguments.delta" => {
                if let (Some((open, true, _)), Some(json)) = (self.open, RawStr::of(delta)) {
                    if open == index && !json.is_empty() {
                        self.open = Some((open, true, true));
                        on(Event::Arguments {
                            index,
                            json: json.0,
                        });
                    }
                }
            }
            b"response.output_item.done" => {
                // A reasoning item (the one kind with encrypted content) is one thinking
                // block: its encrypted content comes only here.
                if let Some([id, signature, summary]) = reasoning(item) {
                    let block = Block::Thinking {
                        redacted: b"",
                        item: id,
                    };
                    on(Event::BlockStart { index, block });
                    // Its summary's text, then its signature.
                    for (text, signature) in [(summary, false), (signature, true)] {
                        on(Event::Thinking {
                            index,
                            text,
                            signature,
                        });
                    }
                    return on(Event::BlockStop { index });
                }
                if let Some((open, true, false)) = self.open.filter(|o| o.0 == index) {
                    // A call whose arguments came whole, in its last event only.
                    let [arguments] = pick(item, [b"arguments"]);
                    if let Some(json) = RawStr::of(arguments).filter(|a| !a.is_empty()) {
                        on(Event::Arguments {
                            index: open,
                            json: json.0,
                        });
                    }
                }
                if self.open.is_some_and(|o| o.0 == index) {
                    self.stop_block(on);
                }
            }
            b"response.completed" | b"response.incomplete" => {
                self.start(response, on);
                self.stop_block(on);
                self.ends = sse::Ends {
                    stopped: true,
                    done: true,
                };
                let [usage] = pick(response, [b"usage"]);
                if usage.starts_with(b"{") {
                    on(Event::Usage(usage_of(usage)));
                }
                on(Event::Stop(stop(response, self.called)));
                on(Event::End);
            }
            b"response.failed" | b"error" => {
                // Nothing more is read (`stopped` as before: the encoder has failed anyway).
                self.ends = sse::Ends {
                    stopped: true,
                    done: true,
                };
                failed(
                    if response.starts_with(b"{") {
                        response
                    } else {
                        e.data
                    },
                    on,
                );
            }
            _ => {} // content parts' start and end, text `done` events, annotations
        }
    }

    fn start(&mut self, response: &[u8], on: &mut dyn FnMut(Event<'_>)) {
        if !std::mem::replace(&mut self.started, true) {
            let [id, model] = pick(response, [b"id", b"model"]);
            on(Event::Start { id, model });
        }
    }

    fn stop_block(&mut self, on: &mut dyn FnMut(Event<'_>)) {
        if let Some((index, ..)) = self.open.take() {
            on(Event::BlockStop { index });
        }
    }
}

/// The provider's error: `response.failed`'s `response.error` (`code`, `message`), or an
/// `error` event's (its members, or an `error` object in it).
#[cold]
#[inline(never)]
fn failed(data: &[u8], on: &mut dyn FnMut(Event<'_>)) {
    let outer = Obj::parse_bytes(data).unwrap_or_default();
    let error = outer.obj("error").unwrap_or(outer);
    let kind = (error.str("code"))
        .or_else(|| error.str("type"))
        .filter(|k| k != "error");
    on(Event::Error {
        kind: kind.as_deref(),
        message: error.str("message").as_deref(),
    });
}

mod caller;
pub use caller::*;
#[cfg(test)]
mod tests;
