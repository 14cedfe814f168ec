//! An Anthropic Messages event stream translated, event by event, into OpenAI Chat Completions
//! chunks for an OpenAI caller.
//!
//! | Anthropic event                      | OpenAI chunk                                          |
//! |--------------------------------------|-------------------------------------------------------|
//! | `message_start`                      | `delta: {role: assistant, content: ""}`; its id, model and usage kept |
//! | `content_block_start` `tool_use`     | `tool_calls: [{index, id, type: function, function: {name, arguments: ""}}]` |
//! | `text_delta`                         | `delta: {content}`                                    |
//! | `input_json_delta`                   | `tool_calls: [{index, function: {arguments}}]`        |
//! | `message_delta`                      | `delta: {}` with `finish_reason`; usage updated        |
//! | `message_stop`                       | the usage chunk (`choices: []`, when the caller asked), `[DONE]` |
//! | `error`                              | `data: {"error": {message, type}}`, nothing after it   |
//! | `ping`, thinking, signatures, citations, other blocks | nothing                       |
//!
//! Usage: OpenAI's `prompt_tokens` counts every input token, cached or not
//! (`prompt_tokens_details.cached_tokens` the ones read from the cache); Anthropic reports
//! input and cache tokens in `message_start` and may update them, with the output tokens, in
//! `message_delta`: the last value of each wins.

use serde::Deserialize;

use crate::translate::common::{finish_reason, openai_error_body, provider_error, Usage};
use crate::translate::raw_json::{push_number, RawStr};
use crate::translate::sse::{self, Reader};
use crate::translate::StreamContext;

/// The translation state between chunks.
#[derive(Debug, Default)]
pub struct Translator {
    sse: Reader,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    cx: StreamContext,
    /// The start every chunk shares: `{"id":…,"object":"chat.completion.chunk","created":…,
    /// "model":…,`, written once at `message_start`.
    head: Vec<u8>,
    usage: Usage,
    /// For each `tool_use` block: its Anthropic content block index and its OpenAI tool call
    /// index (the count of tool calls before it).
    tools: Vec<(u64, u64)>,
    finish_sent: bool,
    /// `message_stop` was translated: the caller's stream is complete.
    finished: bool,
    /// An error event was translated: nothing more goes to the caller.
    failed: bool,
}

impl Translator {
    pub fn new(cx: StreamContext) -> Translator {
        let mut state = State {
            cx,
            ..State::default()
        };
        state.set_head(None, None);
        Translator {
            sse: Reader::default(),
            state,
        }
    }

    /// Feeds the next chunk of the provider's stream; appends the caller's chunks to `out`.
    pub fn push(&mut self, chunk: &[u8], end: bool, out: &mut Vec<u8>) {
        let state = &mut self.state;
        let mut on_event = |e: sse::Event<'_>| state.event(e, out);
        self.sse.feed(chunk, &mut on_event);
        if end {
            self.sse.finish(&mut on_event);
        }
    }

    /// The provider's `message_stop` came (and `[DONE]` was written).
    pub fn finished(&self) -> bool {
        self.state.finished
    }
}

/// One Anthropic event (every event type's members; those absent from a type stay `None`).
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    message: Option<Message<'a>>,
    index: Option<u64>,
    #[serde(borrow)]
    content_block: Option<Block<'a>>,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    usage: Option<UsageIn>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<RawStr<'a>>,
    #[serde(borrow)]
    model: Option<RawStr<'a>>,
    usage: Option<UsageIn>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    id: Option<RawStr<'a>>,
    #[serde(borrow)]
    name: Option<RawStr<'a>>,
    #[serde(borrow)]
    text: Option<RawStr<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    text: Option<RawStr<'a>>,
    #[serde(borrow)]
    partial_json: Option<RawStr<'a>>,
    #[serde(borrow)]
    stop_reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct UsageIn {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl UsageIn {
    /// The counts this event reports replace the ones known.
    fn update(&self, usage: &mut Usage) {
        let fields = [
            (self.input_tokens, &mut usage.input),
            (self.output_tokens, &mut usage.output),
            (self.cache_read_input_tokens, &mut usage.cache_read),
            (self.cache_creation_input_tokens, &mut usage.cache_creation),
        ];
        for (reported, known) in fields {
            if let Some(n) = reported {
                *known = n;
            }
        }
    }
}

impl State {
    fn event(&mut self, e: sse::Event<'_>, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        let event = serde_json::from_slice::<Event<'_>>(e.data);
        let kind = event.as_ref().ok().and_then(|ev| ev.kind);
        if e.name == b"error" || kind == Some("error") {
            return self.error(e.data, out);
        }
        let Ok(event) = event else {
            return; // not an event we can read: nothing the caller could use
        };
        match kind {
            Some("message_start") => {
                if let Some(message) = &event.message {
                    self.set_head(message.id, message.model);
                    if let Some(usage) = &message.usage {
                        usage.update(&mut self.usage);
                    }
                }
                self.chunk(out, |o| {
                    o.extend_from_slice(br#""role":"assistant","content":"""#)
                });
            }
            Some("content_block_start") => self.block_start(&event, out),
            Some("content_block_delta") => self.delta(&event, out),
            Some("message_delta") => {
                if let Some(usage) = &event.usage {
                    usage.update(&mut self.usage);
                }
                if let Some(reason) = event.delta.as_ref().and_then(|d| d.stop_reason) {
                    self.finish(finish_reason(reason), out);
                }
            }
            Some("message_stop") => {
                if !self.finish_sent {
                    self.finish("stop", out);
                }
                if self.cx.include_usage {
                    self.usage_chunk(out);
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                self.finished = true;
            }
            _ => {} // ping, content_block_stop, and event types added later
        }
    }

    fn block_start(&mut self, event: &Event<'_>, out: &mut Vec<u8>) {
        let Some(block) = &event.content_block else {
            return;
        };
        match block.kind {
            Some("text") => {
                if let Some(text) = block.text.filter(|t| !t.is_empty()) {
                    self.content(text, out);
                }
            }
            Some("tool_use") => {
                let tool = self.tools.len() as u64;
                self.tools.push((event.index.unwrap_or(0), tool));
                self.chunk(out, |o| {
                    o.extend_from_slice(br#""tool_calls":[{"index":"#);
                    push_number(o, tool);
                    o.extend_from_slice(br#","id":"#);
                    o.extend_from_slice(block.id.map_or("\"\"", |s| s.0).as_bytes());
                    o.extend_from_slice(br#","type":"function","function":{"name":"#);
                    o.extend_from_slice(block.name.map_or("\"\"", |s| s.0).as_bytes());
                    o.extend_from_slice(br#","arguments":""}}]"#);
                });
            }
            _ => {} // thinking, redacted thinking, server tools: not carried across vendors
        }
    }

    fn delta(&mut self, event: &Event<'_>, out: &mut Vec<u8>) {
        let Some(delta) = &event.delta else {
            return;
        };
        match (delta.kind, delta.text, delta.partial_json) {
            (Some("text_delta"), Some(text), _) if !text.is_empty() => self.content(text, out),
            (Some("input_json_delta"), _, Some(json)) if !json.is_empty() => {
                let block = event.index.unwrap_or(0);
                let Some(&(_, tool)) = self.tools.iter().find(|(b, _)| *b == block) else {
                    return;
                };
                self.chunk(out, |o| {
                    o.extend_from_slice(br#""tool_calls":[{"index":"#);
                    push_number(o, tool);
                    o.extend_from_slice(br#","function":{"arguments":"#);
                    o.extend_from_slice(json.0.as_bytes());
                    o.extend_from_slice(b"}}]");
                });
            }
            _ => {} // thinking, signature and citations deltas
        }
    }

    fn content(&self, text: RawStr<'_>, out: &mut Vec<u8>) {
        self.chunk(out, |o| {
            o.extend_from_slice(br#""content":"#);
            o.extend_from_slice(text.0.as_bytes());
        });
    }

    fn finish(&mut self, reason: &str, out: &mut Vec<u8>) {
        self.finish_sent = true;
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&self.head);
        out.extend_from_slice(
            br#""choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":""#,
        );
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\"}]}\n\n");
    }

    /// A chunk of the one choice, its delta's members written by `delta`.
    fn chunk(&self, out: &mut Vec<u8>, delta: impl FnOnce(&mut Vec<u8>)) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&self.head);
        out.extend_from_slice(br#""choices":[{"index":0,"delta":{"#);
        delta(out);
        out.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    }

    /// OpenAI's last chunk when usage was asked for: no choices, the whole request's usage.
    fn usage_chunk(&self, out: &mut Vec<u8>) {
        let u = &self.usage;
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&self.head);
        out.extend_from_slice(br#""choices":[],"usage":{"prompt_tokens":"#);
        push_number(out, u.prompt_tokens());
        out.extend_from_slice(br#","completion_tokens":"#);
        push_number(out, u.output);
        out.extend_from_slice(br#","total_tokens":"#);
        push_number(out, u.total_tokens());
        out.extend_from_slice(br#","prompt_tokens_details":{"cached_tokens":"#);
        push_number(out, u.cache_read);
        if u.cache_creation > 0 {
            // Not OpenAI's (as in the translated JSON answer): so no counted token is lost.
            out.extend_from_slice(br#","cache_creation_input_tokens":"#);
            push_number(out, u.cache_creation);
        }
        out.extend_from_slice(b"}}}\n\n");
    }

    /// The provider's error event as OpenAI's error frame, its type and message kept.
    fn error(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.failed = true;
        let error = provider_error(data).unwrap_or_default();
        let message = error
            .message
            .as_deref()
            .unwrap_or("The provider's stream reported an error.");
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&openai_error_body(
            error.kind.as_deref().unwrap_or("api_error"),
            None,
            message,
        ));
        out.extend_from_slice(b"\n\n");
    }

    fn set_head(&mut self, id: Option<RawStr<'_>>, model: Option<RawStr<'_>>) {
        let head = &mut self.head;
        head.clear();
        head.extend_from_slice(br#"{"id":"#);
        head.extend_from_slice(id.map_or("\"\"", |s| s.0).as_bytes());
        head.extend_from_slice(br#","object":"chat.completion.chunk","created":"#);
        push_number(head, self.cx.created);
        head.extend_from_slice(br#","model":"#);
        head.extend_from_slice(model.map_or("\"\"", |s| s.0).as_bytes());
        head.push(b',');
    }
}

/// Whether an OpenAI Chat request body sets `stream_options.include_usage` to `true`.
pub fn wants_usage(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Request {
        stream_options: Option<StreamOptions>,
    }
    #[derive(serde::Deserialize)]
    struct StreamOptions {
        include_usage: Option<bool>,
    }
    serde_json::from_slice::<Request>(body).is_ok_and(|r| {
        r.stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests;
