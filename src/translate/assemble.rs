//! A streamed answer gathered into one whole answer (the first-token timeout of a request that
//! did not ask for a stream, docs/behaviour.md section 5: the attempt is streamed from the
//! provider, and the caller, of any of the four APIs, gets one JSON answer in its API). The
//! stream's events, as its provider dialect's decoder reads them
//! ([`super::stream::Decoder`] over the four), are collected into an owned [`Collected`];
//! [`whole`] writes it as the caller's API's JSON answer by that dialect's writer
//! (`chat::write_answer`, `messages::write_answer`, `responses::write_answer`,
//! `gemini::write_answer`).

use super::model::{Answer, Block, Event, Output, Stop, Thinking, Usage};
use super::{json, Api};
use std::borrow::Cow;

/// One block of the answer: text, or a function call with its id, name and arguments, each a
/// JSON string's contents without its closing quote until [`Collected::answer`] closes it
/// (escapes as written, so pieces concatenate).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// A call, or (`thinking`: whether redacted) reasoning, whose text and signature (or
    /// redacted data) are its `id` and `name`, OpenAI's item id its `arguments`.
    Call {
        id: String,
        name: String,
        arguments: String,
        thinking: Option<bool>,
    },
}

/// The events of one streamed answer, gathered.
#[derive(Debug, Default)]
pub struct Collected {
    id: String,
    model: String,
    /// Blocks by their stream index.
    pieces: Vec<(u64, Piece)>,
    stop: Stop,
    usage: Usage,
    /// The answer's end came.
    pub complete: bool,
    /// The provider reported an error in the stream.
    pub error: bool,
}

/// The contents of a JSON string written `"..."` ([`json::contents`]), from an event's bytes.
fn inner(json_string: &[u8]) -> &str {
    json::contents(std::str::from_utf8(json_string).unwrap_or_default())
}

/// A JSON string opened with `contents` (closed by [`Collected::answer`]).
fn opened(contents: &[u8]) -> String {
    let mut s = String::with_capacity(contents.len() + 2);
    s.push('"');
    s.push_str(inner(contents));
    s
}

impl Collected {
    /// Takes one event of the stream.
    pub fn on(&mut self, e: Event<'_>) {
        match e {
            Event::Start { id, model } => {
                self.id = opened(id);
                self.model = opened(model);
            }
            Event::BlockStart { index, block } => {
                let piece = match block {
                    Block::Text => Piece::Text(opened(b"")),
                    Block::ToolCall { id, name } => Piece::Call {
                        id: opened(id),
                        name: opened(name),
                        arguments: opened(b""),
                        thinking: None,
                    },
                    Block::Thinking { redacted, item } => Piece::Call {
                        id: opened(b""),
                        name: opened(redacted),
                        arguments: opened(item),
                        thinking: Some(!redacted.is_empty()),
                    },
                };
                self.pieces.push((index, piece));
            }
            Event::Text { index, text } => match self.piece(index) {
                Some(Piece::Text(t)) => t.push_str(inner(text)),
                // Text with no block opened for it (Chat opens none before its first delta).
                _ => self.pieces.push((index, Piece::Text(opened(text)))),
            },
            Event::Arguments { index, json } => {
                if let Some(Piece::Call { arguments, .. }) = self.piece(index) {
                    arguments.push_str(inner(json));
                }
            }
            Event::Thinking {
                index,
                text,
                signature,
            } => {
                if let Some(Piece::Call {
                    id,
                    name,
                    thinking: Some(_),
                    ..
                }) = self.piece(index)
                {
                    (if signature { name } else { id }).push_str(inner(text));
                }
            }
            Event::BlockStop { .. } => {}
            Event::Stop(stop) => self.stop = stop,
            Event::Usage(usage) => self.usage = usage,
            Event::End => self.complete = true,
            Event::Error { .. } => self.error = true,
        }
    }

    fn piece(&mut self, index: u64) -> Option<&mut Piece> {
        self.pieces
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == index)
            .map(|(_, p)| p)
    }

    /// The gathered answer, as the model's [`Answer`] (its strings closed and borrowed here).
    pub fn answer(&mut self) -> Answer<'_> {
        let close = |s: &mut String| {
            if s.is_empty() {
                s.push('"');
            }
            s.push('"');
        };
        close(&mut self.id);
        close(&mut self.model);
        for (_, piece) in &mut self.pieces {
            match piece {
                Piece::Text(t) => close(t),
                Piece::Call {
                    id,
                    name,
                    arguments,
                    ..
                } => {
                    close(id);
                    close(name);
                    close(arguments);
                }
            }
        }
        Answer {
            id: Some(self.id.as_str()).filter(|s| s.len() > 2),
            model: Some(self.model.as_str()).filter(|s| s.len() > 2),
            output: (self.pieces.iter())
                .map(|(_, p)| match p {
                    Piece::Text(t) => Output::Text(t),
                    Piece::Call {
                        id,
                        name,
                        arguments,
                        thinking: Some(redacted),
                    } => Output::Thinking(Thinking {
                        text: id,
                        signature: inner(name.as_bytes()),
                        redacted: *redacted,
                        item: json::contents(arguments),
                    }),
                    Piece::Call {
                        id,
                        name,
                        arguments,
                        ..
                    } => Output::ToolCall {
                        id,
                        name,
                        arguments: Cow::Borrowed(arguments),
                    },
                })
                .collect(),
            stop: self.stop,
            usage: self.usage,
        }
    }
}

/// A caller's whole answer in `caller`'s API from a stream gathered into `c` (`created`: Unix
/// seconds, for OpenAI's answers). `None` when the stream did not end with its answer's end
/// (cut short, or an error event): the attempt failed.
pub fn whole(caller: Api, c: &mut Collected, created: u64) -> Option<Vec<u8>> {
    if !c.complete || c.error {
        return None;
    }
    Some(write(caller, &c.answer(), created))
}

/// An answer read into the model, written as `caller`'s JSON answer.
pub fn write(caller: Api, answer: &Answer<'_>, created: u64) -> Vec<u8> {
    match caller {
        Api::OpenAiChat => super::chat::write_answer(answer, created, false),
        Api::AnthropicMessages => super::messages::write_answer(answer),
        Api::OpenAiResponses => super::responses::write_answer(answer, created),
        Api::Gemini => super::gemini::write_answer(answer),
        // No caller speaks Converse (`Api::is_caller`).
        Api::Converse => super::converse::error_body("no caller speaks Bedrock Converse"),
    }
}

/// Gathers a whole stream in `provider`'s dialect (all its bytes, in one piece or several) and
/// writes it as `caller`'s JSON answer.
pub fn stream_to_answer(
    provider: Api,
    caller: Api,
    chunks: &[&[u8]],
    created: u64,
) -> Option<Vec<u8>> {
    let mut c = Collected::default();
    let last = chunks.len().saturating_sub(1);
    let mut d = super::stream::Decoder::new(provider);
    for (i, chunk) in chunks.iter().enumerate() {
        d.push(chunk, i == last, &mut |e| c.on(e));
    }
    whole(caller, &mut c, created)
}

#[cfg(test)]
mod callers;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(body: &[u8]) -> Value {
        serde_json::from_slice(body).expect("JSON")
    }

    const CHAT: &str = concat!(
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\\"you\\\"\"}}]}\n\n",
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
        "data: [DONE]\n\n"
    );

    #[test]
    fn a_chat_stream_becomes_one_chat_completion_with_its_usage() {
        // Whatever the chunk boundaries.
        for cut in [CHAT.len(), 7, 100, 333] {
            let (a, b) = CHAT.as_bytes().split_at(cut.min(CHAT.len()));
            let body = stream_to_answer(Api::OpenAiChat, Api::OpenAiChat, &[a, b], 1_700)
                .expect("complete");
            let v = parse(&body);
            assert_eq!(v["object"], "chat.completion");
            assert_eq!(v["model"], "gpt-4o");
            assert_eq!(v["choices"][0]["message"]["content"], "Hello \"you\"");
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
            assert_eq!(
                v["usage"],
                json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                       "prompt_tokens_details": {"cached_tokens": 4}})
            );
        }
    }

    #[test]
    fn a_messages_stream_becomes_one_message_with_tool_use_and_usage() {
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me look.\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"weather\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"Paris\\\"}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":9}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
        let body = stream_to_answer(
            Api::AnthropicMessages,
            Api::AnthropicMessages,
            &[stream.as_bytes()],
            0,
        )
        .expect("complete");
        let v = parse(&body);
        assert_eq!(v["type"], "message", "{v}");
        assert_eq!(v["model"], "claude-x");
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(
            v["content"][0],
            json!({"type": "text", "text": "Let me look."})
        );
        assert_eq!(v["content"][1]["type"], "tool_use");
        assert_eq!(v["content"][1]["name"], "weather");
        assert_eq!(v["content"][1]["input"], json!({"city": "Paris"}));
        assert_eq!(v["usage"]["input_tokens"], 20);
        assert_eq!(v["usage"]["cache_read_input_tokens"], 5);
        assert_eq!(v["usage"]["output_tokens"], 9);
    }

    #[test]
    fn a_chat_stream_gathered_for_a_messages_caller_is_a_message() {
        let body = stream_to_answer(
            Api::OpenAiChat,
            Api::AnthropicMessages,
            &[CHAT.as_bytes()],
            0,
        )
        .expect("complete");
        let v = parse(&body);
        assert_eq!(v["type"], "message", "{v}");
        assert_eq!(v["content"][0]["text"], "Hello \"you\"");
        assert_eq!(v["usage"]["input_tokens"], 8);
        assert_eq!(v["usage"]["cache_read_input_tokens"], 4);
        assert_eq!(v["usage"]["output_tokens"], 3);
    }

    #[test]
    fn a_stream_cut_short_or_with_an_error_is_no_answer() {
        let cut = CHAT.split("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\"").next().unwrap();
        assert_eq!(
            stream_to_answer(Api::OpenAiChat, Api::OpenAiChat, &[cut.as_bytes()], 0),
            None
        );
        let error = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        assert_eq!(
            stream_to_answer(
                Api::AnthropicMessages,
                Api::AnthropicMessages,
                &[error.as_bytes()],
                0
            ),
            None
        );
    }
}

/// Whether a request that did not ask for a stream may be sent as one and its answer gathered
/// (docs/behaviour.md section 5): not with several choices (`n` above 1, Gemini's
/// `generationConfig.candidateCount`), log probabilities (`logprobs: true`, `top_logprobs`,
/// Gemini's `responseLogprobs`) or audio output (`modalities` naming `audio`, an `audio`
/// member, Gemini's `responseModalities` naming `AUDIO`), which a gathered answer would not
/// carry, nor a Responses request run in the `background` (answered at once, still queued).
pub fn streamable(body: &[u8]) -> bool {
    let [n, logprobs, top_logprobs, modalities, audio, background, include, config] =
        super::json::pick(
            body,
            [
                b"n",
                b"logprobs",
                b"top_logprobs",
                b"modalities",
                b"audio",
                b"background",
                b"include",
                b"generationConfig",
            ],
        );
    let [count, gemini_logprobs, gemini_modalities] = super::json::pick(
        config,
        [
            b"candidateCount",
            b"responseLogprobs",
            b"responseModalities",
        ],
    );
    let several = [n, count]
        .iter()
        .any(|n| super::json::number(n).is_some_and(|n| n > 1));
    !several
        && !names(modalities, b"\"audio\"")
        && !names(gemini_modalities, b"\"AUDIO\"")
        && !names(include, b"\"message.output_text.logprobs\"")
        && ![logprobs, gemini_logprobs, background].contains(&&b"true"[..])
        && (top_logprobs.is_empty() || top_logprobs == b"null")
        && (audio.is_empty() || audio == b"null")
}

/// Whether a list (as written) names a value: its text holds the value's JSON string.
#[inline(never)]
fn names(list: &[u8], name: &[u8]) -> bool {
    list.windows(name.len()).any(|w| w == name)
}

#[cfg(test)]
mod streamable_tests {
    use super::streamable;

    #[test]
    fn several_choices_log_probabilities_and_audio_go_as_they_are() {
        assert!(streamable(br#"{"model":"m","messages":[],"n":1}"#));
        assert!(streamable(
            br#"{"model":"m","logprobs":false,"audio":null}"#
        ));
        assert!(streamable(
            br#"{"model":"m","input":"hi","background":false,"include":["reasoning.encrypted_content"]}"#
        ));
        assert!(streamable(
            br#"{"contents":[],"generationConfig":{"candidateCount":1,"responseModalities":["TEXT"]}}"#
        ));
        for body in [
            r#"{"model":"m","n":2}"#,
            r#"{"model":"m","logprobs":true}"#,
            r#"{"model":"m","top_logprobs":3}"#,
            r#"{"model":"m","modalities":["text","audio"]}"#,
            r#"{"model":"m","audio":{"voice":"alloy","format":"wav"}}"#,
            r#"{"model":"m","input":"hi","background":true}"#,
            r#"{"model":"m","input":"hi","include":["message.output_text.logprobs"]}"#,
            r#"{"contents":[],"generationConfig":{"candidateCount":2}}"#,
            r#"{"contents":[],"generationConfig":{"responseLogprobs":true}}"#,
            r#"{"contents":[],"generationConfig":{"responseModalities":["TEXT","AUDIO"]}}"#,
        ] {
            assert!(!streamable(body.as_bytes()), "{body}");
        }
    }
}
