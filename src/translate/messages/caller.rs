//! Anthropic Messages as a caller dialect of the internal model ([`super::super::model`]): its
//! request read into the model ([`read_request`]: [`head`], [`walk`]), and the model's stream events
//! written as Messages events ([`Encoder`]). The provider side is [`super`]; whole answers are
//! written through `assemble::whole`. docs/translation.md has the field tables.

use super::*;
use crate::translate::json::{put, Digits, EMPTY};
use crate::translate::model::{Choice, Tool};
use crate::translate::{field, Api};

type Checked<T> = Result<T, Untranslatable>;

/// The most stop sequences a provider of `to` takes (OpenAI 4, Gemini 5).
fn max_stops(to: Api) -> usize {
    if to == Api::Gemini {
        5
    } else {
        4
    }
}

/// The caller's request read into the model for a provider speaking `to`
/// (translate::request): its parts passed to `push`, the rest returned.
pub fn read_request<'a>(
    req: &Obj<'a>,
    to: Api,
    push: &mut dyn FnMut(Role, Part<'a>),
) -> Checked<Request<'a>> {
    let head = head(req, to)?;
    walk(req, push)?;
    Ok(head)
}

/// What of the request is not its conversation: what another dialect cannot carry is refused
/// (more stop sequences than `to` takes, MCP servers, a container, server tools); `thinking`
/// asks a Responses provider for its reasoning, else is dropped, as are
/// `service_tier` and `metadata` but its `user_id` (`top_k` too, by the writers of dialects
/// without it).
pub fn head<'a>(req: &Obj<'a>, to: Api) -> Checked<Request<'a>> {
    let stops = req.arr("stop_sequences").unwrap_or_default();
    if stops.len() > max_stops(to) {
        return Err(field("stop_sequences"));
    }
    let stops = (stops.into_iter())
        .map(|s| json::raw_str(s).ok_or(field("stop_sequences")))
        .collect::<Checked<Vec<_>>>()?;
    for unsupported in ["mcp_servers", "container"] {
        if req.has(unsupported) {
            return Err(field(unsupported));
        }
    }
    // Client tools become functions; server tools (web search, code execution, bash...) run
    // at Anthropic.
    let mut tools = Vec::new();
    for tool in req.arr("tools").unwrap_or_default() {
        let tool = json::obj(tool).ok_or(field("tools"))?;
        if tool.tag("type").is_some_and(|t| t != "custom") {
            return Err(field("tools"));
        }
        tools.push(Tool {
            name: tool.raw_str("name").ok_or(field("tools"))?,
            description: tool.raw_str("description"),
            schema: tool.get("input_schema"),
        });
    }
    let choice = match req.obj("tool_choice") {
        None => None,
        Some(choice) => {
            let (kind, name) = match choice.tag("type") {
                Some("auto") => ("\"auto\"", None),
                Some("any") => ("\"any\"", None),
                Some("none") => ("\"none\"", None),
                Some("tool") => (
                    "\"tool\"",
                    Some(choice.raw_str("name").ok_or(field("tool_choice"))?),
                ),
                _ => return Err(field("tool_choice")),
            };
            let serial = choice.bool("disable_parallel_tool_use") == Some(true);
            Some(Choice { kind, name, serial })
        }
    };
    Ok(Request {
        max_tokens: req.u64("max_tokens"),
        temperature: req.get("temperature"),
        top_p: req.get("top_p"),
        top_k: req.get("top_k"),
        stops,
        tools,
        choice,
        user: req.obj("metadata").and_then(|m| m.raw_str("user_id")),
        stream: req.bool("stream"),
        thinking: req.has("thinking"),
    })
}

/// Passes each part of the conversation to `push`, with its role: `system` first (a string or
/// text blocks), then the turns; a user turn's tool results before the rest of it (Chat wants
/// them right after the assistant's calls). Thinking blocks are dropped but those we wrote from
/// OpenAI's reasoning ([`openai_reasoning`]); documents,
/// server tool blocks and a last assistant turn (a prefill, which Messages continues where the
/// others answer after it) cannot be sent.
pub fn walk<'a>(req: &Obj<'a>, push: &mut dyn FnMut(Role, Part<'a>)) -> Checked<()> {
    if let Some(system) = req.get("system") {
        match json::raw_str(system) {
            Some(text) => push(Role::System, Part::Text(text)),
            None => {
                for block in json::arr(system).ok_or(field("system"))? {
                    let block = json::obj(block).filter(|b| b.tag("type") == Some("text"));
                    let text = block.and_then(|b| b.raw_str("text"));
                    push(Role::System, Part::Text(text.ok_or(field("system"))?));
                }
            }
        }
    }
    let mut assistant_last = false;
    for m in req.arr("messages").ok_or(field("messages"))? {
        let m = json::obj(m).ok_or(field("messages"))?;
        assistant_last = turn(&m, push)?;
    }
    if assistant_last {
        return Err(field("messages"));
    }
    Ok(())
}

/// One turn's parts (see [`walk`]); whether it was the assistant's.
fn turn<'a>(m: &Obj<'a>, push: &mut dyn FnMut(Role, Part<'a>)) -> Checked<bool> {
    let role = match m.tag("role") {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => return Err(field("messages.role")),
    };
    // An assistant's empty text is no part (Chat refuses an assistant message with neither
    // text nor calls).
    let kept = |text: &str| role == Role::User || text != EMPTY;
    let content = m.get("content").ok_or(field("messages.content"))?;
    if let Some(text) = json::raw_str(content) {
        if kept(text) {
            push(role, Part::Text(text));
        }
        return Ok(role == Role::Assistant);
    }
    let blocks = json::arr(content).ok_or(field("messages.content"))?;
    let blocks = (blocks.into_iter())
        .map(|b| json::obj(b).ok_or(field("messages.content")))
        .collect::<Checked<Vec<_>>>()?;
    if role == Role::User {
        for block in blocks
            .iter()
            .filter(|b| b.tag("type") == Some("tool_result"))
        {
            push(Role::User, tool_result(block)?);
        }
    }
    for block in &blocks {
        match (block.tag("type"), role) {
            (Some("text"), _) => {
                let text = block.raw_str("text").unwrap_or(EMPTY);
                if kept(text) {
                    push(role, Part::Text(text));
                }
            }
            (Some("image"), Role::User) => push(role, Part::Image(image(block)?)),
            (Some("tool_result"), Role::User) => {}
            (Some("tool_use"), Role::Assistant) => {
                let input = block.get("input").unwrap_or("{}");
                if json::obj(input).is_none() {
                    return Err(field("tool_use"));
                }
                push(
                    role,
                    Part::ToolCall {
                        id: block.str("id").ok_or(field("tool_use"))?,
                        name: block.raw_str("name").ok_or(field("tool_use"))?,
                        input: Cow::Borrowed(input),
                    },
                );
            }
            (Some("thinking" | "redacted_thinking"), _) => {
                if let Some(t) = openai_reasoning(block) {
                    push(role, Part::Thinking(t));
                }
            }
            (Some("document"), _) => return Err(field("document")),
            _ => return Err(field("messages.content")),
        }
    }
    Ok(role == Role::Assistant)
}

/// The reasoning a thinking block we wrote from OpenAI's reasoning item holds (its signature
/// `llm-failover:openai:<item id>:<encrypted_content>`). Anthropic's own thinking goes back to
/// Anthropic only, as it is (the same API): no part here.
#[inline(never)]
fn openai_reasoning<'a>(block: &Obj<'a>) -> Option<Thinking<'a>> {
    let signature = json::contents(block.raw_str("signature")?);
    let (item, signature) = signature.strip_prefix(OPENAI_SIGNED)?.split_once(':')?;
    Some(Thinking {
        text: block.raw_str("thinking").unwrap_or(EMPTY),
        signature,
        redacted: false,
        item,
    })
}

/// An image block as a data URI (base64 data) or its URL; a Files API source lives at
/// Anthropic.
fn image<'a>(block: &Obj<'a>) -> Checked<Cow<'a, str>> {
    let source = block.obj("source").ok_or(field("image"))?;
    match source.tag("type") {
        Some("base64") => match (source.str("media_type"), source.str("data")) {
            (Some(media_type), Some(data)) => Ok(Cow::Owned(common::data_uri(&media_type, &data))),
            _ => Err(field("image")),
        },
        Some("url") => source.str("url").ok_or(field("image")),
        _ => Err(field("image")),
    }
}

/// A `tool_result` block: its text (a string, or text blocks). `is_error` has no counterpart
/// and is dropped (the result's text says what failed).
fn tool_result<'a>(block: &Obj<'a>) -> Checked<Part<'a>> {
    let id = block.str("tool_use_id").ok_or(field("tool_use_id"))?;
    let (content, blocks) = match block.get("content") {
        None => (Vec::new(), false),
        Some(content) => match json::raw_str(content) {
            Some(text) => (vec![Cow::Borrowed(text)], false),
            None => {
                let mut texts = Vec::new();
                for b in json::arr(content).ok_or(field("tool_result.content"))? {
                    let b = json::obj(b).filter(|b| b.tag("type") == Some("text"));
                    let text = b.and_then(|b| b.raw_str("text"));
                    texts.push(Cow::Borrowed(text.ok_or(field("tool_result.content"))?));
                }
                (texts, true)
            }
        },
    };
    Ok(Part::ToolResult {
        id,
        content,
        blocks,
    })
}

/// The model's answer as a Messages answer: its thinking blocks first, its texts joined in one
/// text block (none when they are empty), each tool call a `tool_use` block (its id made valid, arguments that are no
/// object, cut short by the output limit, an empty input), usage with cache reads and writes.
pub fn write_answer(answer: &Answer<'_>) -> Vec<u8> {
    let mut out = Out::with_capacity(512);
    out.raw(r#"{"id":"#).raw(answer.id.unwrap_or(EMPTY));
    out.raw(r#""type":"message","role":"assistant","model":"#);
    out.raw(answer.model.unwrap_or(EMPTY)).raw(r#""content":["#);
    for output in &answer.output {
        if let Output::Thinking(t) = output {
            write_part(&mut out, &Part::Thinking(*t));
        }
    }
    let (texts, _) = answer.joined();
    if texts.len() > 2 {
        out.raw(r#"{"type":"text","text":"#).raw(&texts).close();
    }
    for output in &answer.output {
        if let Output::ToolCall {
            id,
            name,
            arguments,
        } = output
        {
            let id = json::unescape(id).unwrap_or_default();
            let arguments = json::unescape(arguments).unwrap_or_default();
            let input = common::tool_input(arguments).unwrap_or(Cow::Borrowed("{}"));
            out.raw(r#"{"type":"tool_use","id":"#)
                .str(&common::tool_id(&id));
            out.key("name").raw(name).key("input").raw(input.trim());
            out.close();
        }
    }
    out.close_arr().key("stop_reason").raw("\"");
    out.0.extend_from_slice(stop_reason(answer.stop));
    out.0.push(b'"');
    let u = &answer.usage;
    out.raw(r#""stop_sequence":null,"usage":{"input_tokens":"#)
        .num(u.input);
    out.key("cache_creation_input_tokens").num(u.cache_creation);
    out.key("cache_read_input_tokens").num(u.cache_read);
    out.key("output_tokens").num(u.output).close();
    out.close();
    out.0
}

/// A provider's error answer in Anthropic's shape: its message, its `error.type` following the
/// status.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let error = common::provider_error(body);
    let message = common::error_message(status, error.as_ref(), body);
    anthropic_error(status, &message)
}

/// Anthropic's error shape; its `error.type` follows the status.
pub fn anthropic_error(status: u16, message: &str) -> Vec<u8> {
    common::anthropic_error_body(common::error_type(status), message)
}

/// Anthropic's `stop_reason` for the model's stop.
fn stop_reason(stop: Stop) -> &'static [u8] {
    match stop {
        Stop::End => b"end_turn",
        Stop::MaxTokens => b"max_tokens",
        Stop::ToolUse => b"tool_use",
        Stop::Refusal => b"refusal",
    }
}

/// Anthropic's `error.type` for a provider's error type (OpenAI's or Anthropic's): the names
/// both APIs use (and Anthropic's `timeout_error`) are kept, the rest (`server_error`, none) is
/// `api_error`.
pub fn error_type(kind: Option<&str>) -> &'static str {
    match kind {
        Some("invalid_request_error") => "invalid_request_error",
        Some("authentication_error") => "authentication_error",
        Some("permission_error") => "permission_error",
        Some("not_found_error") => "not_found_error",
        Some("rate_limit_error" | "rate_limit_exceeded" | "requests" | "tokens") => {
            "rate_limit_error"
        }
        Some("overloaded_error") => "overloaded_error",
        Some("timeout_error") => "timeout_error",
        _ => "api_error",
    }
}

/// A tool call id Anthropic accepts, as a JSON string: the provider's as it is when valid,
/// else made valid ([`common::tool_id`], as the request readers do for the call's result),
/// else one of our own (`toolu_<block>`).
fn tool_id_json(id: &[u8], block: u64, out: &mut Vec<u8>) {
    let valid = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-';
    match RawStr::of(id).filter(|id| !id.is_empty()) {
        Some(id) if id.inner().iter().all(valid) => out.extend_from_slice(id.0),
        Some(id) => put(
            out,
            &[b"\"", common::tool_id(&id.value()).as_bytes(), b"\""],
        ),
        None => put(out, &[b"\"toolu_", Digits::of(block).get(), b"\""]),
    }
}

/// Writes one event: `event: <name>`, the `data` line, and the blank line.
fn event(out: &mut Vec<u8>, name: &[u8], data: &[&[u8]]) {
    put(out, &[b"event: ", name, b"\ndata: "]);
    put(out, data);
    out.extend_from_slice(b"\n\n");
}

/// The model's stream events written as Anthropic's: `message_start` (usage 0 until the end),
/// `content_block_start` / `content_block_delta` (`text_delta`, `input_json_delta`) /
/// `content_block_stop` for text and `tool_use` blocks (numbered from 0 in the caller's
/// stream), at the end `message_delta` (stop reason, usage) and `message_stop`; a provider's
/// error as an `error` event, nothing after it.
#[derive(Debug, Default)]
pub struct Encoder {
    started: bool,
    /// The provider's block index and the caller's, of the open block.
    open: Option<(u64, u64)>,
    /// How many blocks were started (the next one's index).
    blocks: u64,
    /// The open thinking block's signature prefix: [`OPENAI_SIGNED`], its item id and `:`.
    signed: Vec<u8>,
    stop: Option<Stop>,
    usage: Usage,
    /// `message_stop` was written: the caller's stream is complete.
    pub finished: bool,
    /// An error event was written: nothing more goes to the caller.
    pub failed: bool,
}

impl Encoder {
    /// Writes what the caller gets for one event of the provider's stream.
    pub fn event(&mut self, e: Event<'_>, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        match e {
            Event::Start { id, model } => self.start(id, model, out),
            Event::Thinking {
                index,
                text,
                signature,
            } => {
                if let Some((_, block)) = self.open.filter(|(i, _)| *i == index) {
                    let (kind, signed): (&[u8], &[u8]) = match signature {
                        true => (br#"signature_delta","signature":""#, &self.signed),
                        false => (br#"thinking_delta","thinking":""#, b""),
                    };
                    event(
                        out,
                        b"content_block_delta",
                        &[
                            br#"{"type":"content_block_delta","index":"#,
                            Digits::of(block).get(),
                            br#","delta":{"type":""#,
                            kind,
                            signed,
                            RawStr(text).inner(),
                            b"\"}}",
                        ],
                    );
                }
            }
            Event::BlockStart { index, block } => {
                self.block_start(index, block, out);
            }
            Event::Text { index, text } => {
                let block = self.block(index, out);
                event(
                    out,
                    b"content_block_delta",
                    &[
                        br#"{"type":"content_block_delta","index":"#,
                        Digits::of(block).get(),
                        br#","delta":{"type":"text_delta","text":"#,
                        text,
                        b"}}",
                    ],
                );
            }
            Event::Arguments { index, json } => {
                if let Some((_, block)) = self.open.filter(|(i, _)| *i == index) {
                    event(
                        out,
                        b"content_block_delta",
                        &[
                            br#"{"type":"content_block_delta","index":"#,
                            Digits::of(block).get(),
                            br#","delta":{"type":"input_json_delta","partial_json":"#,
                            json,
                            b"}}",
                        ],
                    );
                }
            }
            Event::BlockStop { index } => {
                if self.open.is_some_and(|(i, _)| i == index) {
                    self.close(out);
                }
            }
            Event::Stop(stop) => self.stop = Some(stop),
            Event::Usage(usage) => self.usage = usage,
            Event::End => self.end(out),
            Event::Error { kind, message } => {
                let message = message.unwrap_or("The provider's stream reported an error.");
                self.fail(error_type(kind), message, out);
            }
        }
    }

    fn start(&mut self, id: &[u8], model: &[u8], out: &mut Vec<u8>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        event(
            out,
            b"message_start",
            &[
                br#"{"type":"message_start","message":{"id":"#,
                RawStr::or_empty(RawStr::of(id)),
                br#","type":"message","role":"assistant","model":"#,
                RawStr::or_empty(RawStr::of(model)),
                br#","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#,
            ],
        );
    }

    /// The caller's block for the provider's block `index`: the open one, else a text block
    /// started for it (a provider that opens none before its text).
    fn block(&mut self, index: u64, out: &mut Vec<u8>) -> u64 {
        match self.open {
            Some((i, block)) if i == index => block,
            _ => self.block_start(index, Block::Text, out),
        }
    }

    /// Stops the open block and starts the next: its index in the caller's stream.
    fn block_start(&mut self, index: u64, kind: Block<'_>, out: &mut Vec<u8>) -> u64 {
        self.start(b"", b"", out);
        self.close(out);
        let block = self.blocks;
        self.blocks += 1;
        self.open = Some((index, block));
        let at = Digits::of(block);
        let content: &[u8] = match kind {
            Block::Text => br#"{"type":"text","text":""}}"#,
            Block::ToolCall { id, name } => {
                let mut data = Vec::with_capacity(id.len() + name.len() + 112);
                put(
                    &mut data,
                    &[
                        br#"{"type":"content_block_start","index":"#,
                        at.get(),
                        br#","content_block":{"type":"tool_use","id":"#,
                    ],
                );
                tool_id_json(id, block, &mut data);
                put(
                    &mut data,
                    &[
                        br#","name":"#,
                        RawStr::or_empty(RawStr::of(name)),
                        br#","input":{}}}"#,
                    ],
                );
                event(out, b"content_block_start", &[&data]);
                return block;
            }
            // Only OpenAI's reasoning reaches here (Anthropic's is the same API).
            Block::Thinking { item, .. } => {
                self.signed.clear();
                put(
                    &mut self.signed,
                    &[OPENAI_SIGNED.as_bytes(), RawStr(item).inner(), b":"],
                );
                br#"{"type":"thinking","thinking":"","signature":""}}"#
            }
        };
        event(
            out,
            b"content_block_start",
            &[
                br#"{"type":"content_block_start","index":"#,
                at.get(),
                br#","content_block":"#,
                content,
            ],
        );
        block
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((_, block)) = self.open.take() {
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

    /// The message's end: the open block stopped, `message_delta` with the stop reason and
    /// usage, `message_stop`.
    fn end(&mut self, out: &mut Vec<u8>) {
        self.start(b"", b"", out);
        self.close(out);
        let u = self.usage;
        event(
            out,
            b"message_delta",
            &[
                br#"{"type":"message_delta","delta":{"stop_reason":""#,
                stop_reason(self.stop.unwrap_or_default()),
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

    /// Ends the caller's stream with Anthropic's `error` event (its `type` one of Anthropic's).
    #[cold]
    #[inline(never)]
    pub fn fail(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        self.failed = true;
        event(
            out,
            b"error",
            &[&common::anthropic_error_body(kind, message)],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_gemini_cannot_carry_is_refused() {
        let user = r#""messages":[{"role":"user","content":"hi"}]"#;
        let refused = [
            (
                r#"{"stop_sequences":["a","b","c","d","e","f"],"#,
                "stop_sequences",
            ),
            (
                r#"{"tools":[{"type":"web_search_20250305","name":"web_search"}],"#,
                "tools",
            ),
            (r#"{"mcp_servers":[],"#, "mcp_servers"),
            (r#"{"tool_choice":{"type":"tool"},"#, "tool_choice"),
        ];
        for (start, member) in refused {
            let body = format!("{start}{user}}}");
            assert_eq!(
                crate::translate::check(Api::AnthropicMessages, Api::Gemini, body.as_bytes()),
                Err(field(member)),
                "{body}"
            );
        }
        let five = format!(r#"{{"stop_sequences":["a","b","c","d","e"],{user}}}"#);
        assert_eq!(
            crate::translate::check(Api::AnthropicMessages, Api::Gemini, five.as_bytes()),
            Ok(())
        );
        assert_eq!(
            crate::translate::check(Api::AnthropicMessages, Api::OpenAiChat, five.as_bytes()),
            Err(field("stop_sequences"))
        );
        let document = r#"{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]}]}"#;
        assert_eq!(
            crate::translate::check(Api::AnthropicMessages, Api::Gemini, document.as_bytes()),
            Err(field("document"))
        );
        let prefill =
            r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"{"}]}"#;
        assert_eq!(
            crate::translate::check(Api::AnthropicMessages, Api::Gemini, prefill.as_bytes()),
            Err(field("messages"))
        );
        assert_eq!(
            crate::translate::check(Api::AnthropicMessages, Api::Gemini, b"[]"),
            Err(Untranslatable::NotJson)
        );
    }
}
