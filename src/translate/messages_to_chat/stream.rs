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

use crate::translate::common::{
    anthropic_error_body, provider_error, stop_reason, tool_id, ProviderError, Usage,
};
use std::borrow::Cow;

use crate::translate::json::{elements, number, pick, put, Digits, Obj, RawStr};
use crate::translate::sse;

/// The translator of an OpenAI Chat stream for an Anthropic caller.
pub type Translator = sse::Translator<State>;

/// The translation state between events.
#[derive(Debug, Default)]
pub struct State {
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

impl sse::Pair for State {
    fn event(&mut self, e: sse::Event<'_>, out: &mut Vec<u8>) {
        self.on_event(e, out);
    }

    fn at_end(&mut self, out: &mut Vec<u8>) {
        // A stream whose finish came is complete without `[DONE]`.
        if self.stop.is_some() {
            self.end(out);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.is_some()
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
        if e.data == b"[DONE]" {
            return self.end(out);
        }
        let [id, model, object, choices, usage, error] = pick(
            e.data,
            [b"id", b"model", b"object", b"choices", b"usage", b"error"],
        );
        let is_error = !matches!(error, b"" | b"null") || object == br#""error""#;
        if is_error || e.name == b"error" {
            return self.error(e.data, out);
        }
        let choice = elements(choices).next();
        let usage = usage.starts_with(b"{").then_some(usage);
        if !self.started {
            if choice.is_none() && usage.is_none() {
                // Azure OpenAI's first chunk (`prompt_filter_results`, empty id and model),
                // or not a chunk at all: the message starts with the first chunk of an answer.
                return;
            }
            self.start(RawStr::of(id), RawStr::of(model), out);
        }
        if let Some(choice) = choice {
            let [delta, finish] = pick(choice, [b"delta", b"finish_reason"]);
            self.delta(delta, out);
            if let Some(reason) = RawStr::of(finish) {
                let reason = std::str::from_utf8(reason.inner()).unwrap_or_default();
                self.stop = Some(stop_reason(reason));
                self.close(out);
            }
        }
        if let Some(usage) = usage {
            let [prompt, completion, details] = pick(
                usage,
                [
                    b"prompt_tokens",
                    b"completion_tokens",
                    b"prompt_tokens_details",
                ],
            );
            // Cache reads, and cache writes when a gateway reports them
            // (`cache_creation_input_tokens`, as the translated answers write it, or
            // `cache_write_tokens`).
            let [cached, creation, write] = pick(
                details,
                [
                    b"cached_tokens",
                    b"cache_creation_input_tokens",
                    b"cache_write_tokens",
                ],
            );
            self.usage = Some(Usage::from_openai(
                number(prompt).unwrap_or(0),
                number(completion).unwrap_or(0),
                number(cached).unwrap_or(0),
                number(creation).or(number(write)).unwrap_or(0),
            ));
        }
        if self.stop.is_some() && self.usage.is_some() {
            self.end(out);
        }
    }

    #[inline(never)]
    fn delta(&mut self, delta: &[u8], out: &mut Vec<u8>) {
        let [content, refusal, tool_calls] = pick(delta, [b"content", b"refusal", b"tool_calls"]);
        for text in [content, refusal].into_iter().filter_map(RawStr::of) {
            if text.is_empty() {
                continue;
            }
            let block = match self.open {
                Some(block) if self.open_is_text => block,
                _ => {
                    let block = self.open_block(out, true);
                    event(
                        out,
                        b"content_block_start",
                        &[
                            br#"{"type":"content_block_start","index":"#,
                            Digits::of(block).get(),
                            br#","content_block":{"type":"text","text":""}}"#,
                        ],
                    );
                    block
                }
            };
            event(
                out,
                b"content_block_delta",
                &[
                    br#"{"type":"content_block_delta","index":"#,
                    Digits::of(block).get(),
                    br#","delta":{"type":"text_delta","text":"#,
                    text.0,
                    b"}}",
                ],
            );
        }
        for (position, call) in elements(tool_calls).enumerate() {
            let [index, id, function] = pick(call, [b"index", b"id", b"function"]);
            let [name, arguments] = pick(function, [b"name", b"arguments"]);
            let index = number(index).unwrap_or(position as u64);
            let block = match self.tools.iter().find(|(i, _)| *i == index) {
                Some(&(_, block)) => block,
                None => self.tool_start(index, RawStr::of(id), RawStr::of(name), out),
            };
            let Some(json) = RawStr::of(arguments).filter(|a| !a.is_empty()) else {
                continue;
            };
            // Calls come one after another; a delta for an earlier call (never seen from
            // OpenAI) still names its own block, which Anthropic's clients read by index.
            event(
                out,
                b"content_block_delta",
                &[
                    br#"{"type":"content_block_delta","index":"#,
                    Digits::of(block).get(),
                    br#","delta":{"type":"input_json_delta","partial_json":"#,
                    json.0,
                    b"}}",
                ],
            );
        }
    }

    /// Starts the `tool_use` block of OpenAI's call `index`; returns its block index.
    #[inline(never)]
    fn tool_start(
        &mut self,
        index: u64,
        id: Option<RawStr<'_>>,
        name: Option<RawStr<'_>>,
        out: &mut Vec<u8>,
    ) -> u64 {
        let block = self.open_block(out, false);
        self.tools.push((index, block));
        event(
            out,
            b"content_block_start",
            &[
                br#"{"type":"content_block_start","index":"#,
                Digits::of(block).get(),
                br#","content_block":{"type":"tool_use","id":"#,
                &tool_id_json(id, block),
                br#","name":"#,
                RawStr::or_empty(name),
                br#","input":{}}}"#,
            ],
        );
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
            event(
                out,
                b"content_block_stop",
                &[
                    br#"{"type":"content_block_stop","index":"#,
                    Digits::of(block).get(),
                    b"}",
                ],
            );
        }
    }

    fn start(&mut self, id: Option<RawStr<'_>>, model: Option<RawStr<'_>>, out: &mut Vec<u8>) {
        self.started = true;
        event(
            out,
            b"message_start",
            &[
                br#"{"type":"message_start","message":{"id":"#,
                RawStr::or_empty(id),
                br#","type":"message","role":"assistant","model":"#,
                RawStr::or_empty(model),
                br#","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#,
            ],
        );
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
        event(
            out,
            b"message_delta",
            &[
                br#"{"type":"message_delta","delta":{"stop_reason":""#,
                self.stop.unwrap_or("end_turn").as_bytes(),
                br#"","stop_sequence":null},"usage":{"input_tokens":"#,
                Digits::of(u.input).get(),
                br#","output_tokens":"#,
                Digits::of(u.output).get(),
                br#","cache_read_input_tokens":"#,
                Digits::of(u.cache_read).get(),
                br#","cache_creation_input_tokens":"#,
                Digits::of(u.cache_creation).get(),
                b"}}",
            ],
        );
        event(out, b"message_stop", &[br#"{"type":"message_stop"}"#]);
        self.finished = true;
    }

    /// The provider's error frame as Anthropic's error event: its message kept, its type one
    /// of Anthropic's.
    #[cold]
    #[inline(never)]
    fn error(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.failed = true;
        // OpenAI's `{"error": {...}}`, else vLLM's and SGLang's flat `{"object": "error", ...}`.
        let error = provider_error(data)
            .or_else(|| Obj::parse_bytes(data).map(|o| ProviderError::of(&o)))
            .unwrap_or_default();
        let message = error
            .message
            .as_deref()
            .unwrap_or("The provider's stream reported an error.");
        let kind = anthropic_error_type(error.kind.as_deref());
        event(out, b"error", &[&anthropic_error_body(kind, message)]);
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

/// A tool call id Anthropic accepts, as a JSON string: OpenAI's as it is when valid, else made
/// valid ([`tool_id`], as the request translator does for the call's result), else one of our
/// own.
fn tool_id_json(id: Option<RawStr<'_>>, block: u64) -> Cow<'_, [u8]> {
    let valid = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    match id {
        Some(id) if !id.is_empty() && id.inner().iter().all(|&b| valid(b)) => Cow::Borrowed(id.0),
        Some(id) if !id.is_empty() => format!("\"{}\"", tool_id(&id.value())).into_bytes().into(),
        _ => format!("\"toolu_{block}\"").into_bytes().into(),
    }
}

/// Writes one event: `event: <name>`, the `data` line, and the blank line.
fn event(out: &mut Vec<u8>, name: &[u8], data: &[&[u8]]) {
    put(out, &[b"event: ", name, b"\ndata: "]);
    put(out, data);
    put(out, &[b"\n\n"]);
}

#[cfg(test)]
mod tests;
