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

use crate::translate::common::{finish_reason, openai_error_body, provider_error, Usage};
use crate::translate::json::{pick, put, Digits, RawStr};
use crate::translate::messages::{update_usage, Fields as Event};
use crate::translate::model::{Block, Event as ModelEvent};
use crate::translate::sse;
use crate::translate::StreamContext;

/// The translator of an Anthropic stream for an OpenAI caller.
pub type Translator = sse::Translator<State>;

/// The translation state between events.
#[derive(Debug, Default)]
pub struct State {
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
        Translator::of(State::new(cx))
    }
}

impl State {
    /// One event of the model's stream (another provider dialect's decoder read it), written
    /// as this caller's chunks.
    pub fn on(&mut self, e: ModelEvent<'_>, out: &mut Vec<u8>) {
        self.model_event(e, out);
    }

    pub fn new(cx: StreamContext) -> State {
        let mut state = State {
            cx,
            ..State::default()
        };
        state.set_head(None, None);
        state
    }
}

impl sse::Pair for State {
    fn event(&mut self, e: sse::Event<'_>, out: &mut Vec<u8>) {
        self.on_event(e, out);
    }

    fn at_end(&mut self, out: &mut Vec<u8>) {
        if self.finish_sent {
            // As if it came (nothing happens when it did, or after an error); its type names
            // it, as in every Anthropic event.
            let data = br#"{"type":"message_stop"}"#;
            self.on_event(sse::Event { name: b"", data }, out);
        }
    }

    fn stopped(&self) -> bool {
        self.finish_sent
    }

    fn finished(&self) -> bool {
        self.finished
    }

    fn failed(&self) -> bool {
        self.failed
    }
}

impl State {
    #[inline(never)]
    fn on_event(&mut self, e: sse::Event<'_>, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        let event = Event::read(e.data);
        if e.name == b"error" || event.kind == br#""error""# {
            return self.error(e.data, out);
        }
        match event.kind {
            br#""message_start""# => {
                let [id, model, usage] = pick(event.message, [b"id", b"model", b"usage"]);
                self.set_head(RawStr::of(id), RawStr::of(model));
                update_usage(usage, &mut self.usage);
                self.chunk(out, &[br#""role":"assistant","content":"""#]);
            }
            br#""content_block_start""# => self.block_start(&event, out),
            br#""content_block_delta""# => self.delta(&event, out),
            br#""message_delta""# => {
                update_usage(event.usage, &mut self.usage);
                let [reason] = pick(event.delta, [b"stop_reason"]);
                if let Some(reason) = RawStr::of(reason) {
                    let reason = std::str::from_utf8(reason.inner()).unwrap_or_default();
                    self.finish(finish_reason(reason), out);
                }
            }
            br#""message_stop""# => self.end(out),
            _ => {} // ping, content_block_stop, and event types added later
        }
    }

    /// The answer's end: its finish reason (if none came), the usage chunk (when asked) and
    /// `[DONE]`.
    fn end(&mut self, out: &mut Vec<u8>) {
        if !self.finish_sent {
            self.finish("stop", out);
        }
        if self.cx.include_usage {
            self.usage_chunk(out);
        }
        put(out, &[b"data: [DONE]\n\n"]);
        self.finished = true;
    }

    /// One event of the model (read by another provider dialect's decoder) as Chat chunks.
    fn model_event(&mut self, e: ModelEvent<'_>, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        match e {
            ModelEvent::Start { id, model } => {
                self.set_head(RawStr::of(id), RawStr::of(model));
                self.chunk(out, &[br#""role":"assistant","content":"""#]);
            }
            ModelEvent::BlockStart {
                index,
                block: Block::ToolCall { id, name },
            } => self.tool_start(index, id, name, out),
            ModelEvent::Text { text, .. } => self.content(RawStr(text), out),
            ModelEvent::Arguments { index, json } => self.arguments(index, json, out),
            ModelEvent::Stop(stop) => self.finish(stop.finish_reason(), out),
            ModelEvent::Usage(usage) => self.usage = usage,
            ModelEvent::End => self.end(out),
            ModelEvent::Error { kind, message } => self.fail(kind, message, out),
            ModelEvent::BlockStart { .. } | ModelEvent::BlockStop { .. } => {}
        }
    }

    fn block_start(&mut self, event: &Event<'_>, out: &mut Vec<u8>) {
        let [kind, id, name, text] = pick(event.content_block, [b"type", b"id", b"name", b"text"]);
        match kind {
            br#""text""# => {
                if let Some(text) = RawStr::of(text).filter(|t| !t.is_empty()) {
                    self.content(text, out);
                }
            }
            br#""tool_use""# => self.tool_start(event.index.unwrap_or(0), id, name, out),
            _ => {} // thinking, redacted thinking, server tools: not carried across vendors
        }
    }

    /// A tool call's first chunk (`block`: its block in the provider's stream).
    fn tool_start(&mut self, block: u64, id: &[u8], name: &[u8], out: &mut Vec<u8>) {
        let tool = self.tools.len() as u64;
        self.tools.push((block, tool));
        self.chunk(
            out,
            &[
                br#""tool_calls":[{"index":"#,
                Digits::of(tool).get(),
                br#","id":"#,
                RawStr::or_empty(RawStr::of(id)),
                br#","type":"function","function":{"name":"#,
                RawStr::or_empty(RawStr::of(name)),
                br#","arguments":""}}]"#,
            ],
        );
    }

    /// A piece of the arguments of the tool call of `block`.
    fn arguments(&mut self, block: u64, json: &[u8], out: &mut Vec<u8>) {
        let Some(&(_, tool)) = self.tools.iter().find(|(b, _)| *b == block) else {
            return;
        };
        self.chunk(
            out,
            &[
                br#""tool_calls":[{"index":"#,
                Digits::of(tool).get(),
                br#","function":{"arguments":"#,
                json,
                b"}}]",
            ],
        );
    }

    fn delta(&mut self, event: &Event<'_>, out: &mut Vec<u8>) {
        let [kind, text, json] = pick(event.delta, [b"type", b"text", b"partial_json"]);
        match (kind, RawStr::of(text), RawStr::of(json)) {
            (br#""text_delta""#, Some(text), _) if !text.is_empty() => self.content(text, out),
            (br#""input_json_delta""#, _, Some(json)) if !json.is_empty() => {
                self.arguments(event.index.unwrap_or(0), json.0, out);
            }
            _ => {} // thinking, signature and citations deltas
        }
    }

    fn content(&self, text: RawStr<'_>, out: &mut Vec<u8>) {
        self.chunk(out, &[br#""content":"#, text.0]);
    }

    fn finish(&mut self, reason: &str, out: &mut Vec<u8>) {
        self.finish_sent = true;
        put(
            out,
            &[
                b"data: ",
                &self.head,
                br#""choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":""#,
                reason.as_bytes(),
                b"\"}]}\n\n",
            ],
        );
    }

    /// A chunk of the one choice, its delta's members written as `delta`.
    fn chunk(&self, out: &mut Vec<u8>, delta: &[&[u8]]) {
        put(
            out,
            &[b"data: ", &self.head, br#""choices":[{"index":0,"delta":{"#],
        );
        put(out, delta);
        put(out, &[b"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"]);
    }

    /// OpenAI's last chunk when usage was asked for: no choices, the whole request's usage.
    fn usage_chunk(&self, out: &mut Vec<u8>) {
        let u = &self.usage;
        let written = Digits::of(u.cache_creation);
        put(
            out,
            &[
                b"data: ",
                &self.head,
                br#""choices":[],"usage":{"prompt_tokens":"#,
                Digits::of(u.prompt_tokens()).get(),
                br#","completion_tokens":"#,
                Digits::of(u.output).get(),
                br#","total_tokens":"#,
                Digits::of(u.total_tokens()).get(),
                br#","prompt_tokens_details":{"cached_tokens":"#,
                Digits::of(u.cache_read).get(),
                // Not OpenAI's (as in the translated JSON answer): so no counted token is lost.
                if u.cache_creation > 0 {
                    br#","cache_creation_input_tokens":"#
                } else {
                    b""
                },
                if u.cache_creation > 0 {
                    written.get()
                } else {
                    b""
                },
                b"}}}\n\n",
            ],
        );
    }

    /// The provider's error event as OpenAI's error frame, its type and message kept.
    #[cold]
    #[inline(never)]
    fn error(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let error = provider_error(data).unwrap_or_default();
        self.fail(error.kind.as_deref(), error.message.as_deref(), out);
    }

    /// OpenAI's error frame (the provider's type and message when it gave them): nothing
    /// after it.
    #[cold]
    #[inline(never)]
    fn fail(&mut self, kind: Option<&str>, message: Option<&str>, out: &mut Vec<u8>) {
        self.failed = true;
        let message = message.unwrap_or("The provider's stream reported an error.");
        let body = openai_error_body(kind.unwrap_or("api_error"), None, message);
        put(out, &[b"data: ", &body, b"\n\n"]);
    }

    fn set_head(&mut self, id: Option<RawStr<'_>>, model: Option<RawStr<'_>>) {
        self.head.clear();
        put(
            &mut self.head,
            &[
                br#"{"id":"#,
                RawStr::or_empty(id),
                br#","object":"chat.completion.chunk","created":"#,
                Digits::of(self.cx.created).get(),
                br#","model":"#,
                RawStr::or_empty(model),
                b",",
            ],
        );
    }
}

/// Whether an OpenAI Chat request body sets `stream_options.include_usage` to `true`.
pub fn wants_usage(body: &[u8]) -> bool {
    let [options] = pick(body, [b"stream_options"]);
    pick(options, [b"include_usage"]) == [&b"true"[..]]
}

#[cfg(test)]
mod tests;
