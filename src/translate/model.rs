//! The one internal model of a conversation, an answer and a stream that the dialects read into
//! and write from (docs/translation.md "Layout"): a caller's dialect reads its request into
//! [`Request`] and a stream of [`Part`]s with their [`Role`], the provider's dialect writes
//! them; the provider's answer is read into an [`Answer`] (whole) or a sequence of [`Event`]s
//! (streamed), which the caller's dialect writes. Adding a dialect adds one reader and one
//! writer of these, not one translator per pair.
//!
//! Text, names and ids are kept as the JSON strings they were written as (escapes included),
//! so most of a body is copied, never unescaped and escaped again.

use std::borrow::Cow;

/// Where a part of the conversation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The instructions (system and developer messages, wherever a dialect puts them).
    System,
    User,
    Assistant,
}

/// One part of a turn, its pieces as written where they can be copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part<'a> {
    /// A JSON string.
    Text(&'a str),
    /// A data URI or an http(s) URL.
    Image(Cow<'a, str>),
    /// The assistant called a function.
    ToolCall {
        /// Valid in the provider's dialect.
        id: Cow<'a, str>,
        /// A JSON string.
        name: &'a str,
        /// A JSON object's text.
        input: Cow<'a, str>,
    },
    /// A function's result, answering the call with this id.
    ToolResult {
        id: Cow<'a, str>,
        /// JSON strings: one as the content, several as text blocks.
        content: Vec<Cow<'a, str>>,
        /// The caller sent its result as a list of parts.
        blocks: bool,
    },
    /// Reasoning the model showed in an earlier turn, sent back to the vendor that made it.
    Thinking(Thinking<'a>),
}

/// Reasoning the model showed (Anthropic's thinking blocks, OpenAI's reasoning items), with
/// what its vendor needs back to continue from it (docs/translation.md "Reasoning").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thinking<'a> {
    /// Its text, a JSON string (`""` when redacted; an OpenAI reasoning item's first summary
    /// text).
    pub text: &'a str,
    /// Opaque to all but its vendor, a JSON string's contents (escapes as written):
    /// Anthropic's `signature`, a redacted block's `data`, or OpenAI's `encrypted_content`.
    pub signature: &'a str,
    /// Anthropic's `redacted_thinking` (`signature` is its `data`).
    pub redacted: bool,
    /// OpenAI's reasoning item id (a JSON string's contents) when the reasoning is OpenAI's;
    /// empty for Anthropic's.
    pub item: &'a str,
}

/// The prefix of the `signature` a Messages caller gets for OpenAI's reasoning:
/// `llm-failover:openai:<item id>:<encrypted_content>` (docs/translation.md "Reasoning").
pub const OPENAI_SIGNED: &str = "llm-failover:openai:";

/// How every signature and encrypted content we wrap another vendor's reasoning in begins, as
/// a JSON string (`llm-failover:anthropic:`, `llm-failover:anthropic-redacted:`,
/// [`OPENAI_SIGNED`]).
const WRAPPED: &[u8] = b"\"llm-failover:";

/// A same-API body of a Messages or Responses caller (`api`) without the reasoning we wrapped
/// for it from the other vendor's, which neither vendor reads back (docs/translation.md
/// "Reasoning"): a Messages caller's `thinking` blocks whose `signature`, and a Responses
/// caller's `reasoning` input items whose `encrypted_content`, begins with our prefix. An
/// array that loses one is written again with the rest (commas between, its whitespace gone);
/// every other byte is copied. A Messages request that still enables thinking while its last
/// assistant turn now calls tools without starting with thinking, which Anthropic refuses, has
/// its `thinking` disabled (`entry_settings::calls_without_thinking`). `None` when the body
/// carries none (one search for the prefix decides, without a walk).
#[inline(never)]
pub fn unwrap_reasoning(body: &[u8], api: super::Api) -> Option<Vec<u8>> {
    use super::json::{pick, put};
    crate::bytes::find(body, WRAPPED)?;
    let messages = api == super::Api::AnthropicMessages;
    let (list, kind, key): (&[u8], &[u8], &[u8]) = match messages {
        true => (b"messages", b"\"thinking\"", b"signature"),
        false => (b"input", b"\"reasoning\"", b"encrypted_content"),
    };
    let mut out = Vec::with_capacity(body.len());
    let mut copied = 0;
    let [list] = pick(body, [list]);
    theirs(&mut out, body, &mut copied, list, [kind, key], messages);
    put(&mut out, &[body.get(copied..).filter(|_| copied > 0)?]);
    let [thinking] = pick(&out, [b"thinking"]);
    if messages
        && !thinking.is_empty()
        && crate::translate::entry_settings::calls_without_thinking(&out)
    {
        let mut o = Vec::new();
        let at = offset(&out, thinking);
        let (head, tail) = (out.get(..at)?, out.get(at + thinking.len()..)?);
        put(&mut o, &[head, br#"{"type":"disabled"}"#, tail]);
        return Some(o);
    }
    Some(out)
}

/// [`unwrap_reasoning`]'s step for one array of `body`: when an element of it is ours (its
/// `type` is `kind`, its `key` a string with our prefix), the body from `copied` up to the
/// array and the array without those elements are written to `out` (`copied` moves past it);
/// otherwise nothing. `nested`: `array` is Messages' `messages`, whose elements' `content`
/// arrays are the ones to step.
#[inline(never)]
fn theirs(
    out: &mut Vec<u8>,
    body: &[u8],
    copied: &mut usize,
    array: &[u8],
    [kind, key]: [&[u8]; 2],
    nested: bool,
) {
    use super::json::{elements, pick, put};
    if nested {
        for m in elements(array) {
            let [content] = pick(m, [b"content"]);
            theirs(out, body, copied, content, [kind, key], false);
        }
        return;
    }
    let (mark, mut dropped, mut comma) = (out.len(), false, &b""[..]);
    let at = offset(body, array);
    put(out, &[body.get(*copied..at).unwrap_or_default(), b"["]);
    for e in elements(array) {
        let [t, s] = pick(e, [b"type", key]);
        if t == kind && s.starts_with(WRAPPED) {
            dropped = true;
        } else {
            put(out, &[comma, e]);
            comma = b",";
        }
    }
    if !dropped {
        return out.truncate(mark);
    }
    out.push(b']');
    *copied = at + array.len();
}

/// Where `part`, a slice of `text`, begins in it.
fn offset(text: &[u8], part: &[u8]) -> usize {
    (part.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize)
}

impl Thinking<'_> {
    /// The one provider dialect this reasoning goes back to, the one rule for every pair:
    /// Anthropic's thinking to Messages providers (Anthropic, Bedrock, Vertex AI), OpenAI's
    /// reasoning to Responses providers; the others' writers write neither.
    pub fn goes_to(&self) -> super::Api {
        match self.item.is_empty() {
            true => super::Api::AnthropicMessages,
            false => super::Api::OpenAiResponses,
        }
    }
}

/// What of a request is not its conversation, as the model knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request<'a> {
    /// The most output tokens (`None`: the provider's default).
    pub max_tokens: Option<u64>,
    /// As written (a JSON number), on OpenAI's 0-2 scale.
    pub temperature: Option<&'a str>,
    pub top_p: Option<&'a str>,
    /// Sampling from the `k` likeliest tokens (Messages' `top_k`, Gemini's `topK`; Chat and
    /// Responses have none), as written.
    pub top_k: Option<&'a str>,
    /// Stop sequences as JSON strings.
    pub stops: Vec<&'a str>,
    pub tools: Vec<Tool<'a>>,
    pub choice: Option<Choice<'a>>,
    /// The end user's id (a JSON string).
    pub user: Option<&'a str>,
    pub stream: Option<bool>,
    /// The caller asked to be shown the model's reasoning (it sent Messages' `thinking`).
    pub thinking: bool,
}

/// A function tool, its members as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    /// A JSON Schema object's text.
    pub schema: Option<&'a str>,
}

/// Which tools the model may call: Messages' `tool_choice` terms (its type as JSON, the tool's
/// name, `disable_parallel_tool_use`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice<'a> {
    pub kind: &'static str,
    pub name: Option<&'a str>,
    pub serial: bool,
}

/// Why an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stop {
    /// The model finished its turn (or matched a stop sequence).
    #[default]
    End,
    /// It reached the output limit.
    MaxTokens,
    /// It called tools and waits for their results.
    ToolUse,
    /// The provider's safety system stopped it.
    Refusal,
}

impl Stop {
    /// From Anthropic's `stop_reason`.
    pub fn of_messages(reason: &[u8]) -> Stop {
        match reason {
            b"max_tokens" | b"model_context_window_exceeded" => Stop::MaxTokens,
            b"tool_use" => Stop::ToolUse,
            b"refusal" => Stop::Refusal,
            _ => Stop::End,
        }
    }
}

impl Stop {
    /// OpenAI Chat's `finish_reason`.
    pub fn finish_reason(self) -> &'static str {
        match self {
            Stop::End => "stop",
            Stop::MaxTokens => "length",
            Stop::ToolUse => "tool_calls",
            Stop::Refusal => "content_filter",
        }
    }
}

/// A whole answer: its id and model (JSON strings as written), its output in order, why it
/// ended and what it counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer<'a> {
    pub id: Option<&'a str>,
    pub model: Option<&'a str>,
    pub output: Vec<Output<'a>>,
    pub stop: Stop,
    pub usage: Usage,
}

impl Answer<'_> {
    /// The answer's texts as one JSON string (pieces joined as written: escapes stay whole),
    /// and whether it has tool calls.
    pub fn joined(&self) -> (String, bool) {
        let mut texts = String::from("\"");
        let mut calls = false;
        for output in &self.output {
            match output {
                Output::Text(text) => texts.push_str(super::json::contents(text)),
                Output::ToolCall { .. } => calls = true,
                Output::Thinking(_) => {}
            }
        }
        texts.push('"');
        (texts, calls)
    }
}

/// One piece of an answer's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<'a> {
    /// A JSON string.
    Text(&'a str),
    /// A function call: its id, its name and its arguments (the JSON text of an object) as
    /// JSON strings.
    ToolCall {
        id: &'a str,
        name: &'a str,
        arguments: Cow<'a, str>,
    },
    Thinking(Thinking<'a>),
}

/// What a block of a streamed answer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block<'a> {
    Text,
    /// A function call: its id and name as JSON strings.
    ToolCall {
        id: &'a [u8],
        name: &'a [u8],
    },
    /// Reasoning (its text and signature come as [`Event::Thinking`]); a redacted block's
    /// data as a JSON string (empty for one that is not redacted); OpenAI's item id as a JSON
    /// string (empty for Anthropic's thinking).
    Thinking {
        redacted: &'a [u8],
        item: &'a [u8],
    },
}

/// One event of a streamed answer, as a provider's dialect reads it and a caller's writes it.
/// Text and argument pieces are JSON strings as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The answer starts: its id and model (JSON strings, empty when unknown).
    Start { id: &'a [u8], model: &'a [u8] },
    /// Block `index` of the answer starts.
    BlockStart { index: u64, block: Block<'a> },
    /// More text of a text block.
    Text { index: u64, text: &'a [u8] },
    /// More of a function call's arguments (a piece of JSON text, as a JSON string).
    Arguments { index: u64, json: &'a [u8] },
    /// More of a thinking block: its text, or (`signature`) its signature, a JSON string.
    Thinking {
        index: u64,
        text: &'a [u8],
        signature: bool,
    },
    /// Block `index` is complete.
    BlockStop { index: u64 },
    /// Why the answer stopped.
    Stop(Stop),
    /// What the answer counted so far (the last one wins).
    Usage(Usage),
    /// The answer is complete.
    End,
    /// The provider reported an error: its type and message, when it gave them.
    Error {
        kind: Option<&'a str>,
        message: Option<&'a str>,
    },
}

/// Token usage, counted the Anthropic way: `input` excludes the cached tokens, which are
/// counted apart (read from the cache, written to it). OpenAI's `prompt_tokens` includes
/// them; its `prompt_tokens_details.cached_tokens` are the tokens read from the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
    /// Part of `output`: the tokens the model spent thinking, when its provider says
    /// (Gemini's `thoughtsTokenCount`, OpenAI's `reasoning_tokens`).
    pub reasoning: u64,
}

impl Usage {
    /// From OpenAI's fields: `prompt_tokens` (cached included), `completion_tokens`,
    /// `prompt_tokens_details.cached_tokens` and, when a gateway reported it,
    /// `prompt_tokens_details.cache_creation_input_tokens`.
    pub fn from_openai(prompt: u64, completion: u64, cached: u64, cache_creation: u64) -> Usage {
        Usage {
            input: prompt.saturating_sub(cached).saturating_sub(cache_creation),
            output: completion,
            cache_read: cached,
            cache_creation,
            reasoning: 0,
        }
    }

    /// With `reasoning` of the output tokens spent thinking.
    pub fn with_reasoning(self, reasoning: u64) -> Usage {
        Usage { reasoning, ..self }
    }

    /// OpenAI's `prompt_tokens`: every input token, cached or not.
    pub fn prompt_tokens(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_creation)
    }

    /// OpenAI's `total_tokens`.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens().saturating_add(self.output)
    }
}

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn openai_prompt_tokens_include_the_cached_ones() {
        let u = Usage::from_openai(2006, 300, 1920, 0);
        assert_eq!(
            u,
            Usage {
                input: 86,
                output: 300,
                cache_read: 1920,
                cache_creation: 0,
                reasoning: 0
            }
        );
        assert_eq!((u.prompt_tokens(), u.total_tokens()), (2006, 2306));
        let anthropic = Usage {
            input: 10,
            output: 5,
            cache_read: 100,
            cache_creation: 50,
            reasoning: 0,
        };
        assert_eq!(anthropic.prompt_tokens(), 160);
        assert_eq!(Usage::from_openai(160, 5, 100, 50), anthropic);
        // A provider reporting more cached than prompt tokens does not wrap around.
        assert_eq!(Usage::from_openai(5, 1, 10, 0).input, 0);
    }
}

#[cfg(test)]
mod unwrap_tests {
    use super::unwrap_reasoning;
    use crate::translate::Api;

    fn unwrap(body: &str, api: Api) -> Option<String> {
        let out = unwrap_reasoning(body.as_bytes(), api)?;
        serde_json::from_slice::<serde_json::Value>(&out).expect("still JSON");
        Some(String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_same_api_messages_body_loses_the_thinking_we_wrapped_and_nothing_else() {
        let m = Api::AnthropicMessages;
        // Ours first, in the middle and last of a content array (its commas with it);
        // Anthropic's own thinking, a text naming our prefix and other turns kept as written.
        let body = concat!(
            r#"{"model":"claude","thinking":{"type":"enabled","budget_tokens":1024},"messages":["#,
            r#"{"role":"user","content":"say \"llm-failover:openai:x\""},"#,
            r#"{"role":"assistant","content":[ {"type":"thinking","thinking":"a","signature":"llm-failover:openai:rs_1:gAAA"} , {"type":"text","text":"llm-failover:"},"#,
            r#"{"type":"thinking","thinking":"b","signature":"llm-failover:openai:rs_2:gBBB"},{"type":"text","text":"t"},"#,
            r#"{"type":"thinking","thinking":"c","signature":"llm-failover:openai:rs_3:gCCC"}]},"#,
            r#"{"role":"user","content":[{"type":"text","text":"next"}]},"#,
            r#"{"role":"assistant", "content": [{"type":"thinking","thinking":"d","signature":"EqQBCgIYAh"},{"type":"text","text":"u"}]},"#,
            r#"{"role":"user","content":"go on"}]}"#
        );
        assert_eq!(
            unwrap(body, m).as_deref(),
            Some(concat!(
                r#"{"model":"claude","thinking":{"type":"enabled","budget_tokens":1024},"messages":["#,
                r#"{"role":"user","content":"say \"llm-failover:openai:x\""},"#,
                r#"{"role":"assistant","content":[{"type":"text","text":"llm-failover:"},{"type":"text","text":"t"}]},"#,
                r#"{"role":"user","content":[{"type":"text","text":"next"}]},"#,
                r#"{"role":"assistant", "content": [{"type":"thinking","thinking":"d","signature":"EqQBCgIYAh"},{"type":"text","text":"u"}]},"#,
                r#"{"role":"user","content":"go on"}]}"#
            ))
        );
        // Two of ours in a row, and a content array of ours alone.
        assert_eq!(
            unwrap(
                concat!(
                    r#"{"messages":[{"role":"assistant","content":[{"type":"thinking","signature":"llm-failover:openai:a:b"},"#,
                    r#"{"type":"thinking","signature":"llm-failover:openai:c:d"},{"type":"text","text":"x"}]},"#,
                    r#"{"role":"assistant","content":[{"type":"thinking","signature":"llm-failover:openai:e:f"}]}]}"#
                ),
                m
            )
            .as_deref(),
            Some(r#"{"messages":[{"role":"assistant","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":[]}]}"#)
        );
        // The prefix only where nothing is ours (a text, Anthropic's signature), or nowhere: no copy.
        for body in [
            r#"{"messages":[{"role":"assistant","content":[{"type":"text","text":"llm-failover:openai:x"}]}]}"#,
            r#"{"messages":[{"role":"assistant","content":[{"type":"thinking","signature":"x llm-failover:"}]}]}"#,
            r#"{"messages":[{"role":"user","content":"llm-failover:"}]}"#,
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
        ] {
            assert_eq!(unwrap(body, m), None, "{body}");
        }
    }

    #[test]
    fn a_tool_turn_that_loses_our_thinking_has_thinking_disabled() {
        // Anthropic refuses a tool loop whose last assistant turn does not start with thinking
        // while thinking is enabled: the request goes with thinking disabled.
        let body = concat!(
            r#"{"model":"claude","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":["#,
            r#"{"role":"user","content":"Weather?"},"#,
            r#"{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"llm-failover:openai:rs_1:gAAA"},"#,
            r#"{"type":"tool_use","id":"call_1","name":"w","input":{}}]},"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"18 C"}]}]}"#
        );
        assert_eq!(
            unwrap(body, Api::AnthropicMessages).as_deref(),
            Some(concat!(
                r#"{"model":"claude","max_tokens":2048,"thinking":{"type":"disabled"},"messages":["#,
                r#"{"role":"user","content":"Weather?"},"#,
                r#"{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"w","input":{}}]},"#,
                r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"18 C"}]}]}"#
            ))
        );
    }

    #[test]
    fn a_same_api_responses_body_loses_the_reasoning_items_we_wrapped_and_nothing_else() {
        let r = Api::OpenAiResponses;
        let body = concat!(
            r#"{"model":"gpt-5","input":[{"role":"user","content":"llm-failover:"},"#,
            r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"llm-failover:anthropic:EqQB"},"#,
            r#"{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"llm-failover:anthropic-redacted:EmwK"},"#,
            r#"{"type":"reasoning","id":"rs_3","summary":[],"encrypted_content":"gAAAAABo"},"#,
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},"#,
            r#"{"type":"reasoning","id":"rs_4","summary":[],"encrypted_content":"llm-failover:anthropic:Eq"}],"store":false}"#
        );
        assert_eq!(
            unwrap(body, r).as_deref(),
            Some(concat!(
                r#"{"model":"gpt-5","input":[{"role":"user","content":"llm-failover:"},"#,
                r#"{"type":"reasoning","id":"rs_3","summary":[],"encrypted_content":"gAAAAABo"},"#,
                r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}],"store":false}"#
            ))
        );
        // A Messages block in a Responses body is not a reasoning item; a string input has none.
        for body in [
            r#"{"input":[{"type":"thinking","signature":"llm-failover:openai:a:b"}]}"#,
            r#"{"input":"llm-failover:anthropic:x"}"#,
        ] {
            assert_eq!(unwrap(body, r), None, "{body}");
        }
    }
}
