//! An OpenAI Chat Completions stream translated, chunk by chunk, into Anthropic Messages events
//! for an Anthropic caller.
//!
//! | OpenAI chunk                           | Anthropic events                                  |
//! |----------------------------------------|---------------------------------------------------|
//! | the first chunk                        | `message_start` (its id and model; usage 0 until the end) |
//! | `delta.content`, `delta.refusal`       | a `text` block started (the block before it stopped), `text_delta` |
//! | a `tool_calls` entry of a new index    | a `tool_use` block started (id, name; the block before it stopped) |
//! | `function.arguments`                   | `input_json_delta` on that call's block           |
//! | `finish_reason`                        | the open block stopped; the stop reason kept       |
//! | the usage chunk (`choices: []`), or `[DONE]`, after the finish | `message_delta` (stop reason, usage), `message_stop` |
//! | `data: {"error": ...}` (or `"object": "error"`) | `event: error`, nothing after it          |
//! | reasoning deltas, logprobs, other choices | nothing                                        |
//!
//! The request translator asks OpenAI for `stream_options.include_usage`, so usage comes in a
//! last chunk after the one with `finish_reason`: `message_delta` waits for it (or `[DONE]`, or
//! the end of a stream whose finish came).

use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::translate::common::{anthropic_error_body, provider_error, stop_reason, tool_id, Usage};
use crate::translate::raw_json::{push_number, First, RawStr};
use crate::translate::sse::{self, Reader};

/// The translation state between chunks.
#[derive(Debug, Default)]
pub struct Translator {
    sse: Reader,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    /// `message_start` was written.
    started: bool,
    /// The content block open now (its index), if any.
    open: Option<u64>,
    /// How many content blocks were started (the next one's index).
    blocks: u64,
    /// The open block is a text block.
    open_is_text: bool,
    /// For each tool call: its OpenAI index and its Anthropic content block index.
    tools: Vec<(u64, u64)>,
    /// The Anthropic stop reason, once a `finish_reason` came.
    stop: Option<&'static str>,
    usage: Option<Usage>,
    /// `message_stop` was written: the caller's stream is complete.
    finished: bool,
    /// An error event was written: nothing more goes to the caller.
    failed: bool,
}

impl Translator {
    /// Feeds the next chunk of the provider's stream; appends the caller's events to `out`.
    pub fn push(&mut self, chunk: &[u8], end: bool, out: &mut Vec<u8>) {
        let state = &mut self.state;
        let mut on_event = |e: sse::Event<'_>| state.event(e, out);
        self.sse.feed(chunk, &mut on_event);
        if end {
            self.sse.finish(&mut on_event);
            // A stream whose finish came is complete without `[DONE]` (SPEC 5).
            if state.stop.is_some() {
                state.end(out);
            }
        }
    }

    /// The provider's last chunk came (its finish, then usage or `[DONE]` or the end of the
    /// stream) and `message_stop` was written.
    pub fn finished(&self) -> bool {
        self.state.finished
    }
}

/// One OpenAI chunk (or error frame).
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    id: Option<RawStr<'a>>,
    #[serde(borrow)]
    model: Option<RawStr<'a>>,
    #[serde(borrow)]
    object: Option<&'a str>,
    #[serde(borrow)]
    choices: Option<First<Choice<'a>>>,
    usage: Option<UsageIn>,
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    content: Option<RawStr<'a>>,
    #[serde(borrow)]
    refusal: Option<RawStr<'a>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    index: Option<u64>,
    #[serde(borrow)]
    id: Option<RawStr<'a>>,
    #[serde(borrow)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    name: Option<RawStr<'a>>,
    #[serde(borrow)]
    arguments: Option<RawStr<'a>>,
}

#[derive(Deserialize)]
struct UsageIn {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
}

/// Cache reads, and cache writes when a gateway reports them (`cache_creation_input_tokens`,
/// as the translated answers write it, or `cache_write_tokens`).
#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
}

impl State {
    fn event(&mut self, e: sse::Event<'_>, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        if e.data == b"[DONE]" {
            return self.end(out);
        }
        let Ok(chunk) = serde_json::from_slice::<Chunk<'_>>(e.data) else {
            if e.name == b"error" {
                self.error(e.data, out);
            }
            return; // not a chunk we can read: nothing the caller could use
        };
        if chunk.error.is_some() || chunk.object == Some("error") || e.name == b"error" {
            return self.error(e.data, out);
        }
        let choice = chunk.choices.and_then(|c| c.0);
        if !self.started {
            if choice.is_none() && chunk.usage.is_none() {
                // Azure OpenAI's first chunk (`prompt_filter_results`, empty id and model):
                // the message starts with the first chunk that carries it.
                return;
            }
            self.start(chunk.id, chunk.model, out);
        }
        if let Some(choice) = choice {
            if let Some(delta) = &choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.stop = Some(stop_reason(reason));
                self.close(out);
            }
        }
        if let Some(u) = chunk.usage {
            let details = u.prompt_tokens_details;
            let cached = details.as_ref().and_then(|d| d.cached_tokens);
            let written =
                details.and_then(|d| d.cache_creation_input_tokens.or(d.cache_write_tokens));
            self.usage = Some(Usage::from_openai(
                u.prompt_tokens.unwrap_or(0),
                u.completion_tokens.unwrap_or(0),
                cached.unwrap_or(0),
                written.unwrap_or(0),
            ));
        }
        if self.stop.is_some() && self.usage.is_some() {
            self.end(out);
        }
    }

    fn delta(&mut self, delta: &Delta<'_>, out: &mut Vec<u8>) {
        for text in [delta.content, delta.refusal].into_iter().flatten() {
            if text.is_empty() {
                continue;
            }
            let block = match self.open {
                Some(block) if self.open_is_text => block,
                _ => {
                    let block = self.open_block(out, true);
                    event(out, b"content_block_start", |o| {
                        o.extend_from_slice(br#"{"type":"content_block_start","index":"#);
                        push_number(o, block);
                        o.extend_from_slice(br#","content_block":{"type":"text","text":""}}"#);
                    });
                    block
                }
            };
            event(out, b"content_block_delta", |o| {
                o.extend_from_slice(br#"{"type":"content_block_delta","index":"#);
                push_number(o, block);
                o.extend_from_slice(br#","delta":{"type":"text_delta","text":"#);
                o.extend_from_slice(text.0.as_bytes());
                o.extend_from_slice(b"}}");
            });
        }
        for (position, call) in delta.tool_calls.iter().flatten().enumerate() {
            let index = call.index.unwrap_or(position as u64);
            let function = call.function.as_ref();
            let block = match self.tools.iter().find(|(i, _)| *i == index) {
                Some(&(_, block)) => block,
                None => self.tool_start(index, call.id, function.and_then(|f| f.name), out),
            };
            let Some(json) = function.and_then(|f| f.arguments).filter(|a| !a.is_empty()) else {
                continue;
            };
            // Calls come one after another; a delta for an earlier call (never seen from
            // OpenAI) still names its own block, which Anthropic's clients read by index.
            event(out, b"content_block_delta", |o| {
                o.extend_from_slice(br#"{"type":"content_block_delta","index":"#);
                push_number(o, block);
                o.extend_from_slice(br#","delta":{"type":"input_json_delta","partial_json":"#);
                o.extend_from_slice(json.0.as_bytes());
                o.extend_from_slice(b"}}");
            });
        }
    }

    /// Starts the `tool_use` block of OpenAI's call `index`; returns its block index.
    fn tool_start(
        &mut self,
        index: u64,
        id: Option<RawStr<'_>>,
        name: Option<RawStr<'_>>,
        out: &mut Vec<u8>,
    ) -> u64 {
        let block = self.open_block(out, false);
        self.tools.push((index, block));
        event(out, b"content_block_start", |o| {
            o.extend_from_slice(br#"{"type":"content_block_start","index":"#);
            push_number(o, block);
            o.extend_from_slice(br#","content_block":{"type":"tool_use","id":"#);
            push_tool_id(o, id, block);
            o.extend_from_slice(br#","name":"#);
            o.extend_from_slice(name.map_or("\"\"", |n| n.0).as_bytes());
            o.extend_from_slice(br#","input":{}}}"#);
        });
        block
    }

    /// Stops the open block and opens the next one (its start event is the caller's to write).
    fn open_block(&mut self, out: &mut Vec<u8>, text: bool) -> u64 {
        self.close(out);
        let block = self.blocks;
        self.blocks += 1;
        self.open = Some(block);
        self.open_is_text = text;
        block
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some(block) = self.open.take() {
            event(out, b"content_block_stop", |o| {
                o.extend_from_slice(br#"{"type":"content_block_stop","index":"#);
                push_number(o, block);
                o.push(b'}');
            });
        }
    }

    fn start(&mut self, id: Option<RawStr<'_>>, model: Option<RawStr<'_>>, out: &mut Vec<u8>) {
        self.started = true;
        event(out, b"message_start", |o| {
            o.extend_from_slice(br#"{"type":"message_start","message":{"id":"#);
            o.extend_from_slice(id.map_or("\"\"", |s| s.0).as_bytes());
            o.extend_from_slice(br#","type":"message","role":"assistant","model":"#);
            o.extend_from_slice(model.map_or("\"\"", |s| s.0).as_bytes());
            o.extend_from_slice(br#","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#);
        });
    }

    /// The message's end: the open block stopped, `message_delta` with the stop reason and
    /// usage, `message_stop`.
    fn end(&mut self, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        if !self.started {
            self.start(None, None, out);
        }
        self.close(out);
        let u = self.usage.unwrap_or_default();
        event(out, b"message_delta", |o| {
            o.extend_from_slice(br#"{"type":"message_delta","delta":{"stop_reason":""#);
            o.extend_from_slice(self.stop.unwrap_or("end_turn").as_bytes());
            o.extend_from_slice(br#"","stop_sequence":null},"usage":{"input_tokens":"#);
            push_number(o, u.input);
            o.extend_from_slice(br#","output_tokens":"#);
            push_number(o, u.output);
            o.extend_from_slice(br#","cache_read_input_tokens":"#);
            push_number(o, u.cache_read);
            o.extend_from_slice(br#","cache_creation_input_tokens":"#);
            push_number(o, u.cache_creation);
            o.extend_from_slice(b"}}");
        });
        event(out, b"message_stop", |o| {
            o.extend_from_slice(br#"{"type":"message_stop"}"#);
        });
        self.finished = true;
    }

    /// The provider's error frame as Anthropic's error event: its message kept, its type one
    /// of Anthropic's.
    fn error(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.failed = true;
        // OpenAI's `{"error": {...}}`, else vLLM's and SGLang's flat `{"object": "error", ...}`.
        let error = provider_error(data)
            .or_else(|| serde_json::from_slice(data).ok())
            .unwrap_or_default();
        let message = error
            .message
            .as_deref()
            .unwrap_or("The provider's stream reported an error.");
        let kind = anthropic_error_type(error.kind.as_deref());
        event(out, b"error", |o| {
            o.extend_from_slice(&anthropic_error_body(kind, message));
        });
    }
}

/// Anthropic's `error.type` for an OpenAI error `type`: the names both APIs use are kept, the
/// rest (`server_error`, none) is `api_error`.
fn anthropic_error_type(openai: Option<&str>) -> &'static str {
    match openai {
        Some("invalid_request_error") => "invalid_request_error",
        Some("authentication_error") => "authentication_error",
        Some("permission_error") => "permission_error",
        Some("not_found_error") => "not_found_error",
        Some("rate_limit_error" | "rate_limit_exceeded" | "requests" | "tokens") => {
            "rate_limit_error"
        }
        Some("overloaded_error") => "overloaded_error",
        _ => "api_error",
    }
}

/// A tool call id Anthropic accepts: OpenAI's as it is when valid, else made valid
/// ([`tool_id`], as the request translator does for the call's result), else one of our own.
fn push_tool_id(out: &mut Vec<u8>, id: Option<RawStr<'_>>, block: u64) {
    let valid = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    match id {
        Some(id) if !id.is_empty() && id.only(valid) => out.extend_from_slice(id.0.as_bytes()),
        Some(id) if !id.is_empty() => {
            out.push(b'"');
            out.extend_from_slice(tool_id(&id.value()).as_bytes());
            out.push(b'"');
        }
        _ => {
            out.extend_from_slice(b"\"toolu_");
            push_number(out, block);
            out.push(b'"');
        }
    }
}

/// Writes one event: `event: <name>`, its data written by `data`, and the blank line.
fn event(out: &mut Vec<u8>, name: &[u8], data: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name);
    out.extend_from_slice(b"\ndata: ");
    data(out);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests;
