//! Anthropic Messages as a provider dialect of the internal model ([`super::model`]): a request
//! written from the model ([`Conversation`], [`request`]), a whole answer read into it
//! ([`answer`]) and a stream read into its events ([`Decoder`]).
//!
//! The Chat Completions, Responses and Gemini callers write their requests through here (also
//! for Claude on Bedrock and Vertex AI, whose envelopes wrap these bytes). Messages as a caller
//! dialect is `caller.rs`.

use std::borrow::Cow;

use super::common;
use super::json::{self, number, pick, Obj, Out, RawStr};
use super::model::OPENAI_SIGNED;
use super::model::{Answer, Block, Event, Output, Part, Request, Role, Stop, Thinking, Usage};
use super::sse::{self, Reader};
use super::{RequestContext, Untranslatable};

/// The conversation as Messages writes it: the `system` blocks, and the turns (consecutive
/// parts of one role make one turn).
pub struct Conversation {
    system: Out,
    turns: Out,
    open: Option<Role>,
}

impl Conversation {
    pub fn with_capacity(n: usize) -> Conversation {
        Conversation {
            system: Out::default(),
            turns: Out::with_capacity(n),
            open: None,
        }
    }

    /// Adds the next part of the conversation.
    pub fn push(&mut self, role: Role, part: &Part<'_>) {
        if matches!(part, Part::Thinking(t) if t.goes_to() != super::Api::AnthropicMessages) {
            return;
        }
        if role == Role::System {
            return write_part(&mut self.system, part);
        }
        let turns = &mut self.turns;
        if self.open != Some(role) {
            if self.open.is_some() {
                turns.close_arr().close();
            }
            let name = if role == Role::User {
                r#"{"role":"user""#
            } else {
                r#"{"role":"assistant""#
            };
            turns.raw(name).raw(r#""content":["#);
            self.open = Some(role);
        }
        write_part(turns, part);
    }
}

/// The Messages request: the conversation and the rest of the request.
pub fn request(
    mut conversation: Conversation,
    req: &Request<'_>,
    cx: &RequestContext<'_>,
) -> Vec<u8> {
    let (system, turns) = (&conversation.system, &mut conversation.turns);
    if conversation.open.is_some() {
        turns.close_arr().close();
    }
    let mut out = Out::with_capacity(turns.0.len() + system.0.len() + 512);
    out.raw(r#"{"model":"#).str(cx.model).key("max_tokens");
    out.num(req.max_tokens.unwrap_or(u64::from(cx.default_max_tokens)));
    if !system.0.is_empty() {
        out.key("system").open_arr().0.extend_from_slice(&system.0);
        out.close_arr();
    }
    out.key("messages").open_arr().0.extend_from_slice(&turns.0);
    out.close_arr();
    if !req.stops.is_empty() {
        out.key("stop_sequences").open_arr();
        for stop in &req.stops {
            out.raw(stop);
        }
        out.close_arr();
    }
    if let Some(t) = req.temperature {
        // Anthropic's temperature is 0-1, OpenAI's 0-2: above 1 is sent as 1 (the most random
        // Messages allows).
        out.key("temperature")
            .raw(if json::above_one(t) { "1" } else { t });
    }
    if let Some(top_p) = req.top_p {
        out.key("top_p").raw(top_p);
    }
    if let Some(top_k) = req.top_k {
        out.key("top_k").raw(json::integral(top_k));
    }
    // Tools and tool_choice only together (Messages refuses a tool_choice without tools).
    if !req.tools.is_empty() {
        out.key("tools").open_arr();
        for tool in &req.tools {
            out.open().key("name").raw(tool.name);
            if let Some(description) = tool.description {
                out.key("description").raw(description);
            }
            // A function without parameters: Messages requires a schema.
            out.key("input_schema").raw(
                tool.schema
                    .unwrap_or(r#"{"type":"object","properties":{}}"#),
            );
            out.close();
        }
        out.close_arr();
        if let Some(choice) = &req.choice {
            out.key("tool_choice").open().key("type").raw(choice.kind);
            if let Some(name) = choice.name {
                out.key("name").raw(name);
            }
            if choice.serial {
                out.key("disable_parallel_tool_use").bool(true);
            }
            out.close();
        }
    }
    if let Some(user) = req.user {
        out.raw(r#""metadata":{"user_id":"#).raw(user).close();
    }
    if let Some(stream) = req.stream {
        out.key("stream").bool(stream);
    }
    out.close();
    out.0
}

/// Writes a part as a Messages block (JSON fragments in one call each: every call is code in
/// the module); OpenAI's reasoning with its item and encrypted content in the signature
/// ([`OPENAI_SIGNED`]), for a Messages caller.
fn write_part(out: &mut Out, part: &Part<'_>) {
    match part {
        Part::Text(text) => {
            out.raw(r#"{"type":"text","text":"#).raw(text);
        }
        Part::Image(url) => match common::split_data_uri(url) {
            Some((media_type, data)) => {
                out.raw(r#"{"type":"image","source":{"type":"base64","media_type":"#);
                out.str(media_type).key("data").str(data).close();
            }
            None => {
                out.raw(r#"{"type":"image","source":{"type":"url","url":"#);
                out.str(url).close();
            }
        },
        Part::ToolCall { id, name, input } => {
            out.raw(r#"{"type":"tool_use","id":"#)
                .str(common::unsigned(id));
            out.key("name").raw(name).key("input").raw(input.trim());
        }
        Part::ToolResult {
            id,
            content,
            blocks,
        } => {
            out.raw(r#"{"type":"tool_result","tool_use_id":"#)
                .str(common::unsigned(id));
            match (content.as_slice(), blocks) {
                ([], _) => {}
                ([text], false) => {
                    out.key("content").raw(text);
                }
                (texts, _) => {
                    out.key("content").open_arr();
                    for text in texts {
                        write_part(out, &Part::Text(text));
                    }
                    out.close_arr();
                }
            }
        }
        Part::Thinking(t) => {
            if t.redacted {
                out.raw(r#"{"type":"redacted_thinking","data":""#);
            } else {
                out.raw(r#"{"type":"thinking","thinking":"#).raw(t.text);
                out.raw(r#""signature":""#);
            }
            if !t.item.is_empty() {
                json::put(
                    &mut out.0,
                    &[OPENAI_SIGNED.as_bytes(), t.item.as_bytes(), b":"],
                );
            }
            json::put(&mut out.0, &[t.signature.as_bytes(), b"\""]);
        }
    }
    out.close();
}

/// A Messages answer read into the model (`None`: not a Messages answer). Thinking blocks
/// are read with their signature (a redacted one's data); server-tool blocks do not cross
/// vendors.
pub fn answer(body: &[u8]) -> Option<Answer<'_>> {
    let answer = Obj::parse_bytes(body)?;
    let content = answer.arr("content")?;
    let mut output = Vec::with_capacity(content.len());
    for block in content.iter().filter_map(|b| json::obj(b)) {
        match block.tag("type") {
            Some("text") => output.extend(block.raw_str("text").map(Output::Text)),
            Some("tool_use") => {
                let mut arguments = Out::with_capacity(64);
                arguments.str(block.get("input").unwrap_or("{}"));
                output.push(Output::ToolCall {
                    id: block.raw_str("id").unwrap_or(json::EMPTY),
                    name: block.raw_str("name").unwrap_or(json::EMPTY),
                    arguments: String::from_utf8(arguments.0)
                        .map_or(Cow::Borrowed("\"{}\""), Cow::Owned),
                });
            }
            Some(kind @ ("thinking" | "redacted_thinking")) => {
                let redacted = kind == "redacted_thinking";
                let [text, signature] = match redacted {
                    true => [None, block.raw_str("data")],
                    false => [block.raw_str("thinking"), block.raw_str("signature")],
                };
                output.push(Output::Thinking(Thinking {
                    text: text.unwrap_or(json::EMPTY),
                    signature: json::contents(signature.unwrap_or_default()),
                    redacted,
                    item: "",
                }));
            }
            _ => {}
        }
    }
    let usage = answer.obj("usage").unwrap_or_default();
    Some(Answer {
        id: answer.raw_str("id"),
        model: answer.raw_str("model"),
        output,
        stop: Stop::of_messages(answer.tag("stop_reason").unwrap_or("end_turn").as_bytes()),
        usage: Usage {
            input: usage.u64("input_tokens").unwrap_or(0),
            output: usage.u64("output_tokens").unwrap_or(0),
            cache_read: usage.u64("cache_read_input_tokens").unwrap_or(0),
            cache_creation: usage.u64("cache_creation_input_tokens").unwrap_or(0),
            reasoning: 0,
        },
    })
}

/// A Messages event stream read into the model's events, whatever the chunk boundaries.
#[derive(Debug, Default)]
pub struct Decoder {
    sse: Reader,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    usage: Usage,
    /// The content block indexes of the text, tool and thinking blocks (the others are not
    /// passed on).
    blocks: Vec<u64>,
    /// `message_stop` or an error came: done.
    ends: sse::Ends,
}

impl Decoder {
    /// The stop reason came.
    pub fn stopped(&self) -> bool {
        self.state.ends.stopped
    }

    /// Reads the next chunk (`end`: the last), passing each event to `on`. A stream whose stop
    /// reason came is complete without `message_stop` (docs/behaviour.md, section 5).
    pub fn push(&mut self, chunk: &[u8], end: bool, on: &mut dyn FnMut(Event<'_>)) {
        self.sse.decode(&mut self.state, chunk, end, on);
    }
}

impl sse::Decode for State {
    fn ends(&mut self) -> &mut sse::Ends {
        &mut self.ends
    }

    fn event(&mut self, e: sse::Event<'_>, on: &mut dyn FnMut(Event<'_>)) {
        let State {
            usage,
            blocks,
            ends,
        } = self;
        decode(e, usage, blocks, &mut ends.done, &mut ends.stopped, on);
    }
}

/// The members of an Anthropic event the stream readers read, as written (empty where absent).
pub(crate) struct Fields<'a> {
    pub kind: &'a [u8],
    pub message: &'a [u8],
    pub index: Option<u64>,
    pub content_block: &'a [u8],
    pub delta: &'a [u8],
    pub usage: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn read(data: &'a [u8]) -> Fields<'a> {
        let [kind, message, index, content_block, delta, usage] = pick(
            data,
            [
                b"type",
                b"message",
                b"index",
                b"content_block",
                b"delta",
                b"usage",
            ],
        );
        Fields {
            kind,
            message,
            index: number(index),
            content_block,
            delta,
            usage,
        }
    }
}

fn decode(
    e: sse::Event<'_>,
    usage: &mut Usage,
    blocks: &mut Vec<u64>,
    done: &mut bool,
    stopped: &mut bool,
    on: &mut dyn FnMut(Event<'_>),
) {
    let Fields {
        kind,
        message,
        index,
        content_block: block,
        delta,
        usage: reported,
    } = Fields::read(e.data);
    let index = index.unwrap_or(0);
    if e.name == b"error" || kind == br#""error""# {
        *done = true;
        let error = common::provider_error(e.data).unwrap_or_default();
        return on(Event::Error {
            kind: error.kind.as_deref(),
            message: error.message.as_deref(),
        });
    }
    match kind {
        br#""message_start""# => {
            let [id, model, start_usage] = pick(message, [b"id", b"model", b"usage"]);
            update_usage(start_usage, usage);
            on(Event::Usage(*usage));
            on(Event::Start { id, model });
        }
        br#""content_block_start""# => {
            let [kind, id, name, data] = pick(block, [b"type", b"id", b"name", b"data"]);
            let block = match kind {
                br#""text""# => Block::Text,
                br#""tool_use""# => Block::ToolCall { id, name },
                br#""thinking""# => Block::Thinking {
                    redacted: b"",
                    item: b"",
                },
                br#""redacted_thinking""# => Block::Thinking {
                    redacted: data,
                    item: b"",
                },
                _ => return, // server tools
            };
            blocks.push(index);
            on(Event::BlockStart { index, block });
        }
        br#""content_block_delta""# if blocks.contains(&index) => {
            let [kind, text, json, thinking, signature] = pick(
                delta,
                [b"type", b"text", b"partial_json", b"thinking", b"signature"],
            );
            let (piece, which) = match kind {
                br#""text_delta""# => (text, 0),
                br#""input_json_delta""# => (json, 1),
                br#""thinking_delta""# => (thinking, 2),
                br#""signature_delta""# => (signature, 3),
                _ => return,
            };
            let Some(piece) = RawStr::of(piece).filter(|p| !p.is_empty()) else {
                return;
            };
            let text = piece.0;
            on(match which {
                0 => Event::Text { index, text },
                1 => Event::Arguments { index, json: text },
                _ => Event::Thinking {
                    index,
                    text,
                    signature: which == 3,
                },
            });
        }
        br#""content_block_stop""# if blocks.contains(&index) => on(Event::BlockStop { index }),
        br#""message_delta""# => {
            update_usage(reported, usage);
            on(Event::Usage(*usage));
            let [reason] = pick(delta, [b"stop_reason"]);
            if let Some(reason) = RawStr::of(reason) {
                *stopped = true;
                on(Event::Stop(Stop::of_messages(reason.inner())));
            }
        }
        br#""message_stop""# => {
            *done = true;
            on(Event::End);
        }
        _ => {} // ping, and event types added later
    }
}

/// The counts a `usage` object reports replace the ones known.
pub(crate) fn update_usage(reported: &[u8], usage: &mut Usage) {
    let counts = pick(
        reported,
        [
            b"input_tokens",
            b"output_tokens",
            b"cache_read_input_tokens",
            b"cache_creation_input_tokens",
        ],
    );
    let known = [
        &mut usage.input,
        &mut usage.output,
        &mut usage.cache_read,
        &mut usage.cache_creation,
    ];
    for (count, known) in counts.into_iter().zip(known) {
        if let Some(n) = number(count) {
            *known = n;
        }
    }
}

mod caller;
pub use caller::*;
#[cfg(test)]
mod chat_stream_tests;
#[cfg(test)]
mod chat_tests;
