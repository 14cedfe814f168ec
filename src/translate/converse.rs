//! Amazon Bedrock's Converse API (`POST /model/{modelId}/converse`, `/converse-stream`) as a
//! provider dialect of the internal model ([`super::model`]): a request written from the model
//! ([`Conversation`], [`request`]), a whole answer read into it ([`answer`]) and a stream read
//! into its events ([`Decoder`]). The model id is in the path (the envelope writes it), not in
//! the body; the stream is an AWS event stream that `envelope::eventstream` unwraps into
//! `event: <event type>` / `data: <payload>` before it gets here. Errors are AWS's `{"message"}`
//! (a stream's exceptions come unwrapped as an `event: error`). No caller speaks Converse.
//! docs/translation.md "Converse" has the field table.

use super::common;
use super::json::{self, number, pick, Obj, Out, RawStr};
use super::model::{Answer, Block, Choice, Event, Output, Part, Request, Role, Stop, Usage};
use super::sse::{self, Reader};
use super::{field, RequestContext, Untranslatable};

#[cfg(test)]
mod tests;

/// The conversation as Converse writes it: the `system` blocks and the `messages` (one per run
/// of parts of one role). What Converse cannot carry (an image by URL, an image type it does
/// not take) is noted and refused when the request is written.
pub struct Conversation {
    system: Out,
    turns: Out,
    open: Option<Role>,
    refused: Option<Untranslatable>,
}

impl Conversation {
    pub fn with_capacity(n: usize) -> Conversation {
        Conversation {
            system: Out::default(),
            turns: Out::with_capacity(n),
            open: None,
            refused: None,
        }
    }

    /// Adds the next part of the conversation. Reasoning of another vendor's is not sent: its
    /// signature is that vendor's, and Bedrock's models take none of them.
    pub fn push(&mut self, role: Role, part: &Part<'_>) {
        if matches!(part, Part::Thinking(_)) || *part == Part::Text(json::EMPTY) {
            // Converse refuses a blank text block.
            return;
        }
        if role == Role::System {
            match part {
                Part::Text(text) => {
                    self.system.open().key("text").raw(text).close();
                }
                _ => self.refused = self.refused.or(Some(field("system"))),
            }
            return;
        }
        if self.open != Some(role) {
            if self.open.is_some() {
                self.turns.close_arr().close();
            }
            let name = if role == Role::User {
                r#"{"role":"user","content":["#
            } else {
                r#"{"role":"assistant","content":["#
            };
            self.turns.raw(name);
            self.open = Some(role);
        }
        if let Err(why) = write_part(&mut self.turns, part) {
            self.refused = self.refused.or(Some(why));
        }
    }
}

/// An error body in AWS's shape (`{"message"}`): no caller speaks Converse, so only the
/// exhaustive matches over the APIs write it.
pub fn error_body(message: &str) -> Vec<u8> {
    let mut out = Out::with_capacity(message.len() + 16);
    out.open().key("message").str(message).close();
    out.0
}

/// The image formats Converse takes, by media type.
const IMAGE_FORMATS: [(&str, &str); 4] = [
    ("image/png", "png"),
    ("image/jpeg", "jpeg"),
    ("image/gif", "gif"),
    ("image/webp", "webp"),
];

/// A tool use id Converse takes (`[a-zA-Z0-9_-]+`, at most 64 characters): the Gemini
/// signature left out ([`common::unsigned`]), every other byte as [`common::tool_id`] makes
/// it, cut at 64 (a pure function of the id: the call and its result get the same one).
fn tool_use_id(id: &str) -> std::borrow::Cow<'_, str> {
    let id = common::tool_id(common::unsigned(id));
    match id {
        std::borrow::Cow::Borrowed(id) => std::borrow::Cow::Borrowed(id.get(..64).unwrap_or(id)),
        std::borrow::Cow::Owned(mut id) => {
            id.truncate(64);
            std::borrow::Cow::Owned(id)
        }
    }
}

/// Writes a part as a Converse content block.
fn write_part(out: &mut Out, part: &Part<'_>) -> Result<(), Untranslatable> {
    match part {
        Part::Text(text) => {
            out.raw(r#"{"text":"#).raw(text).close();
        }
        Part::Image(url) => {
            let (media_type, data) = common::split_data_uri(url).ok_or(field("image_url"))?;
            let (_, format) = IMAGE_FORMATS
                .iter()
                .find(|(t, _)| *t == media_type)
                .ok_or(field("image_url"))?;
            out.raw(r#"{"image":{"format":"#).str(format);
            out.raw(r#""source":{"bytes":"#)
                .str(data)
                .close()
                .close()
                .close();
        }
        Part::ToolCall { id, name, input } => {
            out.raw(r#"{"toolUse":{"toolUseId":"#).str(&tool_use_id(id));
            out.key("name").raw(name).key("input").raw(input.trim());
            out.close().close();
        }
        Part::ToolResult { id, content, .. } => {
            out.raw(r#"{"toolResult":{"toolUseId":"#)
                .str(&tool_use_id(id));
            out.key("content").open_arr();
            for text in content.iter().filter(|t| t.as_ref() != json::EMPTY) {
                out.open().key("text").raw(text).close();
            }
            out.close_arr().close().close();
        }
        Part::Thinking(_) => {}
    }
    Ok(())
}

/// The Converse request: the conversation and the rest of the request (no model and no
/// `stream`: both are in the path). Refused when the conversation holds what Converse cannot
/// carry. Top-k has no place in `inferenceConfig` (it is model-specific) and is not sent, nor
/// `user`; a temperature above 1 (OpenAI's scale goes to 2) is sent as 1.
pub fn request(
    mut conversation: Conversation,
    req: &Request<'_>,
    _cx: &RequestContext<'_>,
) -> Result<Vec<u8>, Untranslatable> {
    if let Some(why) = conversation.refused {
        return Err(why);
    }
    let (system, turns) = (&conversation.system, &mut conversation.turns);
    if conversation.open.is_some() {
        turns.close_arr().close();
    }
    let mut out = Out::with_capacity(turns.0.len() + system.0.len() + 256);
    out.raw(r#"{"messages":["#).0.extend_from_slice(&turns.0);
    out.close_arr();
    if !system.0.is_empty() {
        out.key("system").open_arr().0.extend_from_slice(&system.0);
        out.close_arr();
    }
    let config = req.max_tokens.is_some()
        || req.temperature.is_some()
        || req.top_p.is_some()
        || !req.stops.is_empty();
    if config {
        out.key("inferenceConfig").open();
        if let Some(max) = req.max_tokens {
            out.key("maxTokens").num(max);
        }
        if let Some(t) = req.temperature {
            out.key("temperature")
                .raw(if json::above_one(t) { "1" } else { t });
        }
        if let Some(top_p) = req.top_p {
            out.key("topP").raw(top_p);
        }
        if !req.stops.is_empty() {
            out.key("stopSequences").open_arr();
            for stop in &req.stops {
                out.raw(stop);
            }
            out.close_arr();
        }
        out.close();
    }
    if !req.tools.is_empty() {
        out.raw(r#""toolConfig":{"tools":["#);
        for tool in &req.tools {
            out.raw(r#"{"toolSpec":{"name":"#).raw(tool.name);
            if let Some(description) = tool.description.filter(|d| *d != json::EMPTY) {
                out.key("description").raw(description);
            }
            // A function without parameters: Converse requires a schema.
            let schema = tool
                .schema
                .unwrap_or(r#"{"type":"object","properties":{}}"#);
            out.raw(r#""inputSchema":{"json":"#).raw(schema);
            out.close().close().close();
        }
        out.close_arr();
        if let Some(choice) = &req.choice {
            write_choice(&mut out, choice);
        }
        out.close();
    }
    out.close();
    Ok(out.0)
}

/// `toolChoice`: `auto`, `any`, or one `tool`. Converse has no "none": a caller's `none`
/// leaves the choice to the model (the tools stay: Converse refuses tool blocks in the
/// conversation without its `toolConfig`).
fn write_choice(out: &mut Out, choice: &Choice<'_>) {
    let kind = match choice.kind {
        "\"any\"" => r#"{"any":{}}"#,
        "\"tool\"" => match choice.name {
            Some(name) => {
                out.raw(r#""toolChoice":{"tool":{"name":"#).raw(name);
                out.close().close();
                return;
            }
            None => r#"{"any":{}}"#,
        },
        "\"auto\"" => r#"{"auto":{}}"#,
        _ => return,
    };
    out.key("toolChoice").raw(kind);
}

/// The model's stop reason for Converse's `stopReason`.
fn stop(reason: &[u8]) -> Stop {
    match reason {
        b"max_tokens" | b"model_context_window_exceeded" => Stop::MaxTokens,
        b"tool_use" => Stop::ToolUse,
        b"content_filtered" | b"guardrail_intervened" => Stop::Refusal,
        _ => Stop::End,
    }
}

/// Converse's `usage`: counted the Anthropic way (`inputTokens` without the cache's reads and
/// writes, which come apart).
fn usage_of(usage: &[u8]) -> Usage {
    let [input, output, read, write] = pick(
        usage,
        [
            b"inputTokens",
            b"outputTokens",
            b"cacheReadInputTokens",
            b"cacheWriteInputTokens",
        ],
    );
    let n = |v| number(v).unwrap_or(0);
    Usage {
        input: n(input),
        output: n(output),
        cache_read: n(read),
        cache_creation: n(write),
        reasoning: 0,
    }
}

/// Whether an unwrapped event of a Converse stream (its event type as `name`) is one: a known
/// event type whose payload is a JSON object, or an error.
pub fn is_stream_event(name: &[u8], data: &[u8]) -> bool {
    const EVENTS: [&[u8]; 7] = [
        b"messageStart",
        b"contentBlockStart",
        b"contentBlockDelta",
        b"contentBlockStop",
        b"messageStop",
        b"metadata",
        b"error",
    ];
    EVENTS.contains(&name) && data.starts_with(b"{")
}

/// A Converse answer read into the model (`None`: not a Converse answer). Its reasoning
/// (`reasoningContent`) is not passed on: its signature is Bedrock's, which no other provider
/// takes back. Converse's answers carry no id and no model.
pub fn answer(body: &[u8]) -> Option<Answer<'_>> {
    let answer = Obj::parse_bytes(body)?;
    let message = answer.obj("output")?.obj("message")?;
    let content = message.arr("content")?;
    let mut output = Vec::with_capacity(content.len());
    for block in content.iter().filter_map(|b| json::obj(b)) {
        if let Some(text) = block.raw_str("text") {
            output.push(Output::Text(text));
        } else if let Some(call) = block.obj("toolUse") {
            let mut arguments = Out::with_capacity(64);
            arguments.str(call.get("input").unwrap_or("{}"));
            output.push(Output::ToolCall {
                id: call.raw_str("toolUseId").unwrap_or(json::EMPTY),
                name: call.raw_str("name").unwrap_or(json::EMPTY),
                arguments: String::from_utf8(arguments.0).map_or(
                    std::borrow::Cow::Borrowed("\"{}\""),
                    std::borrow::Cow::Owned,
                ),
            });
        }
    }
    let reason = answer.tag("stopReason").unwrap_or("end_turn");
    Some(Answer {
        id: None,
        model: None,
        output,
        stop: stop(reason.as_bytes()),
        usage: answer
            .get("usage")
            .map_or_else(Usage::default, |u| usage_of(u.as_bytes())),
    })
}

/// A Converse stream (unwrapped from its AWS event stream) read into the model's events,
/// whatever the chunk boundaries. `messageStop` carries the stop reason and `metadata`, the
/// last event, the usage: the stop is passed on with the usage (so every caller's last event
/// has both), or at the stream's end when no `metadata` came.
#[derive(Debug, Default)]
pub struct Decoder {
    sse: Reader,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    /// The Converse content block indexes started, in order: the caller's block index is the
    /// position (text blocks have no `contentBlockStart`, their first delta starts them;
    /// reasoning blocks are not counted, so the caller's indexes have no gap).
    blocks: Vec<u64>,
    /// Reasoning blocks, which are not passed on.
    hidden: Vec<u64>,
    /// `messageStop`'s reason, until `metadata` (or the end) passes it on.
    stop: Option<Stop>,
    ends: sse::Ends,
}

impl Decoder {
    /// The stop reason came.
    pub fn stopped(&self) -> bool {
        self.state.ends.stopped
    }

    /// Reads the next chunk (`end`: the last), passing each event to `on`.
    pub fn push(&mut self, chunk: &[u8], end: bool, on: &mut dyn FnMut(Event<'_>)) {
        self.sse.decode(&mut self.state, chunk, false, on);
        if end {
            if let Some(stop) = self.state.stop.take().filter(|_| !self.state.ends.done) {
                on(Event::Stop(stop));
            }
            self.sse.decode(&mut self.state, b"", true, on);
        }
    }
}

impl sse::Decode for State {
    fn ends(&mut self) -> &mut sse::Ends {
        &mut self.ends
    }

    fn event(&mut self, e: sse::Event<'_>, on: &mut dyn FnMut(Event<'_>)) {
        let [index, start, delta, reason, usage] = pick(
            e.data,
            [
                b"contentBlockIndex",
                b"start",
                b"delta",
                b"stopReason",
                b"usage",
            ],
        );
        let index = number(index).unwrap_or(0);
        match e.name {
            b"messageStart" => on(Event::Start {
                id: b"",
                model: b"",
            }),
            b"contentBlockStart" => {
                let [call] = pick(start, [b"toolUse"]);
                if call.starts_with(b"{") && self.ours(index).is_none() {
                    let [id, name] = pick(call, [b"toolUseId", b"name"]);
                    let index = self.start(index);
                    on(Event::BlockStart {
                        index,
                        block: Block::ToolCall { id, name },
                    });
                }
            }
            b"contentBlockDelta" => self.delta(index, delta, on),
            b"contentBlockStop" => {
                if let Some(index) = self.ours(index) {
                    on(Event::BlockStop { index });
                }
            }
            b"messageStop" => {
                self.ends.stopped = true;
                self.stop = Some(stop(RawStr::of(reason).map_or(&b""[..], RawStr::inner)));
            }
            b"metadata" => {
                if usage.starts_with(b"{") {
                    on(Event::Usage(usage_of(usage)));
                }
                if let Some(stop) = self.stop.take() {
                    on(Event::Stop(stop));
                    self.ends.done = true;
                    on(Event::End);
                }
            }
            b"error" => {
                self.ends.done = true;
                let error = common::provider_error(e.data).unwrap_or_default();
                on(Event::Error {
                    kind: error.kind.as_deref(),
                    message: error.message.as_deref(),
                });
            }
            _ => {} // event types added later
        }
    }
}

impl State {
    /// The caller's index of Converse's block `index`, when it started.
    fn ours(&self, index: u64) -> Option<u64> {
        let at = self.blocks.iter().position(|&b| b == index)?;
        u64::try_from(at).ok()
    }

    /// Starts Converse's block `index`: the caller's index.
    fn start(&mut self, index: u64) -> u64 {
        self.blocks.push(index);
        u64::try_from(self.blocks.len() - 1).unwrap_or(u64::MAX)
    }

    /// A `contentBlockDelta`: text (its block started by its first piece), a tool call's
    /// input as a piece of JSON text, or reasoning (not passed on).
    fn delta(&mut self, index: u64, delta: &[u8], on: &mut dyn FnMut(Event<'_>)) {
        let [text, call, reasoning] = pick(delta, [b"text", b"toolUse", b"reasoningContent"]);
        if reasoning.starts_with(b"{") || self.hidden.contains(&index) {
            if !self.hidden.contains(&index) {
                self.hidden.push(index);
            }
            return;
        }
        if let Some(text) = RawStr::of(text) {
            let index = match self.ours(index) {
                Some(ours) => ours,
                None => {
                    let ours = self.start(index);
                    on(Event::BlockStart {
                        index: ours,
                        block: Block::Text,
                    });
                    ours
                }
            };
            if !text.is_empty() {
                on(Event::Text {
                    index,
                    text: text.0,
                });
            }
        } else if let Some(index) = self.ours(index) {
            let [input] = pick(call, [b"input"]);
            if let Some(input) = RawStr::of(input).filter(|i| !i.is_empty()) {
                on(Event::Arguments {
                    index,
                    json: input.0,
                });
            }
        }
    }
}
