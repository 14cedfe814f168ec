//! OpenAI Chat Completions as a caller dialect of the internal model ([`super::super::model`]):
//! the model's stream events written as Chat chunks ([`Encoder`]). The provider side is
//! [`super`]. docs/translation.md has the field tables.
//!
//! | model event (Anthropic's, as its decoder reads them) | OpenAI chunk                  |
//! |--------------------------------------|-------------------------------------------------------|
//! | `Start` (`message_start`)            | `delta: {role: assistant, content: ""}`; its id and model kept |
//! | `BlockStart` of a tool call (`tool_use`) | `tool_calls: [{index, id, type: function, function: {name, arguments: ""}}]` |
//! | `Text` (`text_delta`)                | `delta: {content}`                                    |
//! | `Arguments` (`input_json_delta`)     | `tool_calls: [{index, function: {arguments}}]`        |
//! | `Stop` (`message_delta`)             | `delta: {}` with `finish_reason`                      |
//! | `Usage`                              | kept: the last counts win                             |
//! | `End` (`message_stop`)               | the usage chunk (`choices: []`, when the caller asked), `[DONE]` |
//! | `Error`                              | `data: {"error": {message, type}}`, nothing after it   |
//!
//! Usage: OpenAI's `prompt_tokens` counts every input token, cached or not
//! (`prompt_tokens_details.cached_tokens` the ones read from the cache).

use crate::translate::common::{openai_error_body, Usage};
use crate::translate::json::{pick, put, Digits, RawStr};
use crate::translate::model::{Block, Event};
use crate::translate::StreamContext;

/// The model's stream written as Chat chunks, state kept between events.
#[derive(Debug, Default)]
pub struct Encoder {
    cx: StreamContext,
    /// The start every chunk shares: `{"id":…,"object":"chat.completion.chunk","created":…,
    /// "model":…,`, written once the answer starts.
    head: Vec<u8>,
    usage: Usage,
    /// For each tool call block: its block index in the provider's stream and its OpenAI tool
    /// call index (the count of tool calls before it).
    tools: Vec<(u64, u64)>,
    finish_sent: bool,
    /// `[DONE]` was written: the caller's stream is complete.
    finished: bool,
    /// An error frame was written: nothing more goes to the caller.
    failed: bool,
}

impl Encoder {
    pub fn new(cx: StreamContext) -> Encoder {
        let mut encoder = Encoder {
            cx,
            ..Encoder::default()
        };
        encoder.set_head(None, None);
        encoder
    }

    /// The finish reason was written.
    pub fn stopped(&self) -> bool {
        self.finish_sent
    }

    /// `[DONE]` was written.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The stream ended properly: `[DONE]`, or the provider's own error, written.
    pub fn ended(&self) -> bool {
        self.finished || self.failed
    }

    /// The stream's end owes the caller `[DONE]`: the finish reason came, the end not yet.
    pub fn owes_end(&self) -> bool {
        self.finish_sent && !self.ended()
    }

    /// One event of the model's stream (a provider dialect's decoder read it), written as
    /// this caller's chunks.
    pub fn on(&mut self, e: Event<'_>, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        match e {
            Event::Start { id, model } => {
                self.set_head(RawStr::of(id), RawStr::of(model));
                self.chunk(out, &[br#""role":"assistant","content":"""#]);
            }
            Event::BlockStart {
                index,
                block: Block::ToolCall { id, name },
            } => self.tool_start(index, id, name, out),
            Event::Text { text, .. } => self.chunk(out, &[br#""content":"#, text]),
            Event::Arguments { index, json } => self.arguments(index, json, out),
            Event::Stop(stop) => self.finish(stop.finish_reason(), out),
            Event::Usage(usage) => self.usage = usage,
            Event::End => self.end(out),
            Event::Error { kind, message } => self.fail(kind, message, out),
            Event::BlockStart { .. } | Event::BlockStop { .. } => {}
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
