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
            // A stream whose stop reason came is complete without `message_stop` (behaviour.md 5);
            // one that ended before it was cut short ([`crate::translate::StreamTranslator::push`]).
        }
        if end && self.state.finish_sent {
            // As if it came (nothing happens when it did, or after an error); its type names
            // it, as in every Anthropic event.
            let data = br#"{"type":"message_stop"}"#;
            self.state.event(sse::Event { name: b"", data }, out);
        }
    }

    /// The provider's `message_stop` came (or its stop reason, and the stream ended): `[DONE]`
    /// was written.
    pub fn finished(&self) -> bool {
        self.state.finished
    }

    /// The stream ended properly: its end marker, or the provider's own error event, written.
    pub fn ended(&self) -> bool {
        self.state.finished || self.state.failed
    }

    /// The stream's end owes the caller its end marker: the stop reason came, `message_stop`
    /// not yet.
    pub fn owes_end(&self) -> bool {
        self.state.finish_sent && !self.state.finished && !self.state.failed
    }
}

impl State {
    #[inline(never)]
    fn event(&mut self, e: sse::Event<'_>, out: &mut Vec<u8>) {
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
            br#""message_stop""# => {
                if !self.finish_sent {
                    self.finish("stop", out);
                }
                if self.cx.include_usage {
                    self.usage_chunk(out);
                }
                put(out, &[b"data: [DONE]\n\n"]);
                self.finished = true;
            }
            _ => {} // ping, content_block_stop, and event types added later
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
            br#""tool_use""# => {
                let tool = self.tools.len() as u64;
                self.tools.push((event.index.unwrap_or(0), tool));
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
            _ => {} // thinking, redacted thinking, server tools: not carried across vendors
        }
    }

    fn delta(&mut self, event: &Event<'_>, out: &mut Vec<u8>) {
        let [kind, text, json] = pick(event.delta, [b"type", b"text", b"partial_json"]);
        match (kind, RawStr::of(text), RawStr::of(json)) {
            (br#""text_delta""#, Some(text), _) if !text.is_empty() => self.content(text, out),
            (br#""input_json_delta""#, _, Some(json)) if !json.is_empty() => {
                let block = event.index.unwrap_or(0);
                let Some(&(_, tool)) = self.tools.iter().find(|(b, _)| *b == block) else {
                    return;
                };
                self.chunk(
                    out,
                    &[
                        br#""tool_calls":[{"index":"#,
                        Digits::of(tool).get(),
                        br#","function":{"arguments":"#,
                        json.0,
                        b"}}]",
                    ],
                );
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
        self.failed = true;
        let error = provider_error(data).unwrap_or_default();
        let message = error
            .message
            .as_deref()
            .unwrap_or("The provider's stream reported an error.");
        let body = openai_error_body(error.kind.as_deref().unwrap_or("api_error"), None, message);
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
