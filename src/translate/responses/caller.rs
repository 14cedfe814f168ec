//! OpenAI's Responses API (`POST /v1/responses`) as a caller dialect of the internal model
//! ([`crate::translate::model`]): its request read into the model ([`read_request`]), an answer
//! written from the model ([`write_answer`]), and the model's stream events written as Responses'
//! typed events ([`Encoder`]). Its errors are OpenAI's (`{"error": {...}}`).
//! docs/translation.md has the field table.

use crate::translate::common;
use crate::translate::json::{self, put, Digits, Obj, Out, RawStr, EMPTY};
use crate::translate::model::{
    Answer, Block, Choice, Event, Output, Part, Request, Role, Stop, Thinking, Tool, Usage,
};
use crate::translate::Untranslatable;

type Checked<T> = core::result::Result<T, Untranslatable>;

use crate::translate::field;

/// The caller's request read into the model (translate::request): its parts passed to `push`,
/// the rest returned.
pub fn read_request<'a>(
    req: &Obj<'a>,
    push: &mut dyn FnMut(Role, Part<'a>),
) -> Checked<Request<'a>> {
    let head = head(req)?;
    walk(req, push)?;
    Ok(head)
}

/// The request-wide members: what another dialect cannot carry is refused (dropping it would
/// change the answer); `store`, `metadata`, `reasoning`, `include`, `truncation`,
/// `service_tier` and `prompt_cache_key` are dropped (they do not change this answer).
fn head<'a>(req: &Obj<'a>) -> Checked<Request<'a>> {
    for state in ["previous_response_id", "conversation", "prompt"] {
        if req.get(state).is_some_and(|v| v != "null") {
            return Err(field(state));
        }
    }
    if req.bool("background") == Some(true) {
        return Err(field("background"));
    }
    if req.u64("top_logprobs").is_some_and(|n| n > 0) {
        return Err(field("top_logprobs"));
    }
    if req.has("max_tool_calls") {
        return Err(field("max_tool_calls"));
    }
    let format = req.obj("text").and_then(|t| t.obj("format"));
    if format
        .and_then(|f| f.tag("type"))
        .is_some_and(|t| t != "text")
    {
        return Err(field("text.format"));
    }
    let mut tools = Vec::new();
    for tool in req.arr("tools").unwrap_or_default() {
        // Only function tools cross; OpenAI's built-in tools (web search, file search, code
        // interpreter, ...) run on OpenAI.
        let tool = json::obj(tool).filter(|t| t.tag("type") == Some("function"));
        let tool = tool.ok_or(field("tools"))?;
        tools.push(Tool {
            name: tool.raw_str("name").ok_or(field("tools"))?,
            description: tool.raw_str("description"),
            schema: tool.get("parameters").filter(|p| *p != "null"),
        });
    }
    let choice = tool_choice(req)?;
    Ok(Request {
        max_tokens: req.u64("max_output_tokens"),
        temperature: req.get("temperature").filter(|t| *t != "null"),
        top_p: req.get("top_p").filter(|t| *t != "null"),
        top_k: None,
        stops: Vec::new(),
        tools,
        choice,
        user: req
            .raw_str("safety_identifier")
            .or_else(|| req.raw_str("user")),
        stream: req.bool("stream"),
        thinking: false,
    })
}

/// `tool_choice` (a named function: `{type: function, name}`) and `parallel_tool_calls: false`
/// in the model's terms.
fn tool_choice<'a>(req: &Obj<'a>) -> Checked<Option<Choice<'a>>> {
    crate::translate::chat::tool_choice_named(req, |c| c.raw_str("name"))
}

/// Passes each part of the conversation to `push`, with its role: `instructions` first, then
/// the `input` (a string is one user message).
fn walk<'a>(req: &Obj<'a>, push: &mut dyn FnMut(Role, Part<'a>)) -> Checked<()> {
    if let Some(instructions) = req.raw_str("instructions").filter(|t| *t != EMPTY) {
        push(Role::System, Part::Text(instructions));
    }
    let input = req.get("input").ok_or(field("input"))?;
    if let Some(text) = json::raw_str(input) {
        if text == EMPTY {
            return Err(field("input"));
        }
        push(Role::User, Part::Text(text));
        return Ok(());
    }
    let mut last = None;
    let mut counted = |role, part| {
        if role != Role::System {
            last = Some(role);
        }
        push(role, part);
    };
    for item in json::arr(input).ok_or(field("input"))? {
        let item = json::obj(item).ok_or(field("input"))?;
        self::item(&item, &mut counted)?;
    }
    // Messages continues a last assistant turn (a prefill) where Responses answers after it,
    // and refuses a conversation without turns.
    if last != Some(Role::User) {
        return Err(field("input"));
    }
    Ok(())
}

/// One input item: a message (with or without `type: message`), a function call or its
/// output; a reasoning item of ours ([`ours`]) is the thinking it came from, any other is
/// dropped (another vendor cannot read it); references to items a provider stored, and
/// built-in tools' calls, cannot be sent elsewhere.
fn item<'a>(item: &Obj<'a>, push: &mut dyn FnMut(Role, Part<'a>)) -> Checked<()> {
    match item.tag("type") {
        None | Some("message") => message(item, push),
        Some("function_call") => {
            let arguments = item.str("arguments").unwrap_or_default();
            push(
                Role::Assistant,
                Part::ToolCall {
                    id: common::valid_id(item.str("call_id").ok_or(field("input.call_id"))?),
                    name: item.raw_str("name").ok_or(field("input.name"))?,
                    input: common::tool_input(arguments)?,
                },
            );
            Ok(())
        }
        Some("function_call_output") => {
            let id = common::valid_id(item.str("call_id").ok_or(field("input.call_id"))?);
            let output = item.get("output").ok_or(field("input.output"))?;
            let (content, blocks) = match json::raw_str(output) {
                Some(text) => (
                    Vec::from_iter((text != EMPTY).then_some(text.into())),
                    false,
                ),
                None => {
                    let mut texts = Vec::new();
                    for p in json::arr(output).ok_or(field("input.output"))? {
                        let p = json::obj(p).filter(|p| p.tag("type") == Some("input_text"));
                        let p = p.ok_or(field("input.output"))?;
                        texts.extend(p.raw_str("text").filter(|t| *t != EMPTY).map(Into::into));
                    }
                    (texts, true)
                }
            };
            push(
                Role::User,
                Part::ToolResult {
                    id,
                    content,
                    blocks,
                },
            );
            Ok(())
        }
        Some("reasoning") => {
            if let Some(thinking) = ours(item) {
                push(Role::Assistant, Part::Thinking(thinking));
            }
            Ok(())
        }
        Some("item_reference") => Err(field("input.item_reference")),
        Some(_) => Err(field("input.type")),
    }
}

/// The `encrypted_content` prefixes of the reasoning items written from Anthropic's thinking
/// blocks (docs/translation.md "Reasoning"): the signature, or a redacted block's data, follows.
const SIGNED: &str = "llm-failover:anthropic:";
const REDACTED: &str = "llm-failover:anthropic-redacted:";

/// The thinking block a reasoning item of ours was written from: its summary's text and the
/// signature (or redacted data) after our prefix. OpenAI's own reasoning goes back to OpenAI
/// only, as it is (the same API): no part here.
pub(super) fn ours<'a>(item: &Obj<'a>) -> Option<Thinking<'a>> {
    let content = item.raw_str("encrypted_content")?.get(1..)?;
    let (rest, redacted) = match content.strip_prefix(SIGNED) {
        Some(rest) => (rest, false),
        None => (content.strip_prefix(REDACTED)?, true),
    };
    Some(Thinking {
        text: summary(item),
        signature: rest.get(..rest.len().saturating_sub(1)).unwrap_or_default(),
        redacted,
        item: "",
    })
}

/// A reasoning item's first summary text (a JSON string, `""` when it has none).
pub(crate) fn summary<'a>(item: &Obj<'a>) -> &'a str {
    let summary = item.arr("summary").unwrap_or_default();
    let text = summary.first().and_then(|p| json::obj(p)?.raw_str("text"));
    text.unwrap_or(EMPTY)
}

/// A reasoning item written from the model's thinking: `id` (a JSON string) for Anthropic's,
/// whose signature (or redacted data) follows our prefix in `encrypted_content`; OpenAI's
/// keeps its own id and encrypted content (a gathered stream of a Responses provider, a
/// Messages caller's thinking block going back to one).
pub(crate) fn reasoning_item(out: &mut Vec<u8>, id: &[u8], t: &Thinking<'_>) {
    let (item, sig) = (t.item.as_bytes(), t.signature.as_bytes());
    reasoning(out, id, item, t.text.as_bytes(), sig, t.redacted);
}

/// [`reasoning_item`]'s writer (`text` a JSON string; `sig`: the signature's, data's or
/// encrypted content's contents).
#[inline(never)]
fn reasoning(out: &mut Vec<u8>, id: &[u8], item: &[u8], text: &[u8], sig: &[u8], redacted: bool) {
    let (prefix, quote) = match (item, redacted) {
        ([], false) => (SIGNED, &b""[..]),
        ([], true) => (REDACTED, &b""[..]),
        _ => ("", &b"\""[..]),
    };
    put(
        out,
        &[
            br#"{"id":"#,
            quote,
            id,
            item,
            quote,
            br#","type":"reasoning","summary":"#,
        ],
    );
    match text == EMPTY.as_bytes() {
        true => put(out, &[b"[]"]),
        false => put(out, &[br#"[{"type":"summary_text","text":"#, text, b"}]"]),
    }
    put(
        out,
        &[br#","encrypted_content":""#, prefix.as_bytes(), sig, b"\"}"],
    );
}

fn message<'a>(m: &Obj<'a>, push: &mut dyn FnMut(Role, Part<'a>)) -> Checked<()> {
    let role = match m.tag("role") {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => return Err(field("input.role")),
    };
    let content = m.get("content").ok_or(field("input.content"))?;
    if let Some(text) = json::raw_str(content) {
        // Messages refuses empty text blocks.
        if text != EMPTY {
            push(role, Part::Text(text));
        }
        return Ok(());
    }
    for p in json::arr(content).ok_or(field("input.content"))? {
        let p = json::obj(p).ok_or(field("input.content"))?;
        let text = |key| p.raw_str(key).filter(|t| *t != EMPTY).map(Part::Text);
        let part = match (p.tag("type"), role) {
            (Some("input_text" | "output_text"), _) => text("text"),
            (Some("refusal"), Role::Assistant) => text("refusal"),
            (Some("input_image"), Role::User) => {
                if p.has("file_id") && p.get("file_id") != Some("null") {
                    return Err(field("file_id"));
                }
                let url = p.str("image_url").ok_or(field("input_image"))?;
                common::image(&url)?;
                Some(Part::Image(url))
            }
            (Some("input_file"), _) => return Err(field("input_file")),
            (Some("input_audio"), _) => return Err(field("input_audio")),
            _ => return Err(field("input.content")),
        };
        if let Some(part) = part {
            push(role, part);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Answers.

/// Writes `"<prefix><id without its own prefix>"` from an id as a JSON string (`"msg_01A"`
/// with `resp_` is `"resp_01A"`): ids of the caller's dialect derived from the provider's.
fn derived_id(out: &mut Vec<u8>, prefix: &[u8], id: &[u8]) {
    let inner = RawStr(id).inner();
    let rest = match inner.iter().position(|&b| b == b'_') {
        Some(at) if at < 6 => inner.get(at + 1..).unwrap_or(inner),
        _ => inner,
    };
    put(out, &[b"\"", prefix, rest, b"\""]);
}

/// The `status` and `incomplete_details` members for a stop reason.
fn status(stop: Stop) -> &'static [u8] {
    match stop {
        Stop::MaxTokens => {
            br#""status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}"#
        }
        Stop::Refusal => {
            br#""status":"incomplete","incomplete_details":{"reason":"content_filter"}"#
        }
        Stop::End | Stop::ToolUse => br#""status":"completed","incomplete_details":null"#,
    }
}

/// Responses' `usage`: `input_tokens` counts every input token (cached ones among them, as
/// `input_tokens_details.cached_tokens`).
fn write_usage(out: &mut Vec<u8>, u: &Usage) {
    put(
        out,
        &[
            br#""usage":{"input_tokens":"#,
            Digits::of(u.prompt_tokens()).get(),
            br#","input_tokens_details":{"cached_tokens":"#,
            Digits::of(u.cache_read).get(),
            br#"},"output_tokens":"#,
            Digits::of(u.output).get(),
            br#","output_tokens_details":{"reasoning_tokens":"#,
            Digits::of(u.reasoning).get(),
            br#"},"total_tokens":"#,
            Digits::of(u.total_tokens()).get(),
            b"}",
        ],
    );
}

/// The start of a `response` object: `{"id":…,"object":"response","created_at":…,` then the
/// status members, `"model":…,`.
fn response_head(out: &mut Vec<u8>, id: &[u8], created: u64, status: &[u8], model: &[u8]) {
    out.extend_from_slice(br#"{"id":"#);
    derived_id(out, b"resp_", id);
    put(
        out,
        &[
            br#","object":"response","created_at":"#,
            Digits::of(created).get(),
            b",",
            status,
            br#","error":null,"model":"#,
            model,
            b",",
        ],
    );
}

/// The members every `response` object ends with, after its `output`.
const RESPONSE_TAIL: &[u8] = br#""parallel_tool_calls":true,"tool_choice":"auto","tools":[],"#;

/// A message output item holding one `output_text` (`text` a JSON string).
fn message_item(out: &mut Vec<u8>, id: &[u8], status: &[u8], text: Option<&[u8]>) {
    put(out, &[br#"{"id":"#, id, br#","type":"message","status":""#]);
    put(out, &[status, br#"","role":"assistant","content":["#]);
    if let Some(text) = text {
        put(
            out,
            &[
                br#"{"type":"output_text","annotations":[],"text":"#,
                text,
                b"}",
            ],
        );
    }
    out.extend_from_slice(b"]}");
}

/// A function call output item (`call_id`, `name` and `arguments` JSON strings).
fn call_item(out: &mut Vec<u8>, call_id: &[u8], name: &[u8], arguments: &[u8], status: &[u8]) {
    out.extend_from_slice(br#"{"id":"#);
    derived_id(out, b"fc_", call_id);
    put(
        out,
        &[
            br#","type":"function_call","status":""#,
            status,
            br#"","arguments":"#,
            arguments,
            br#","call_id":"#,
            call_id,
            br#","name":"#,
            name,
            b"}",
        ],
    );
}

/// A message (`msg_`) or reasoning (`rs_`) item's id: the prefix and the provider's answer id,
/// numbered after the first.
fn item_id(out: &mut Vec<u8>, prefix: &[u8], answer_id: &[u8], k: usize) {
    derived_id(out, prefix, answer_id);
    if k > 0 {
        out.pop();
        put(out, &[b"_", Digits::of(k as u64).get(), b"\""]);
    }
}

/// The Responses answer for an answer read into the model. `created`: Unix seconds.
pub fn write_answer(answer: &Answer<'_>, created: u64) -> Vec<u8> {
    let id = answer.id.unwrap_or("\"msg\"").as_bytes();
    let mut out = Vec::with_capacity(512);
    response_head(
        &mut out,
        id,
        created,
        status(answer.stop),
        answer.model.unwrap_or(EMPTY).as_bytes(),
    );
    out.extend_from_slice(br#""output":["#);
    for (k, output) in answer.output.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        match output {
            Output::Text(text) => {
                let mut msg = Vec::with_capacity(id.len() + 4);
                item_id(&mut msg, b"msg_", id, k);
                message_item(&mut out, &msg, b"completed", Some(text.as_bytes()));
            }
            Output::Thinking(t) => {
                // OpenAI's own (a gathered stream of a Responses provider) keeps its id.
                let mut rs = Vec::with_capacity(id.len() + 4);
                if t.item.is_empty() {
                    item_id(&mut rs, b"rs_", id, k);
                }
                reasoning_item(&mut out, &rs, t);
            }
            Output::ToolCall {
                id,
                name,
                arguments,
            } => {
                let arguments = arguments.as_bytes();
                call_item(
                    &mut out,
                    id.as_bytes(),
                    name.as_bytes(),
                    arguments,
                    b"completed",
                );
            }
        }
    }
    out.extend_from_slice(b"],");
    out.extend_from_slice(RESPONSE_TAIL);
    write_usage(&mut out, &answer.usage);
    out.push(b'}');
    out
}

// ---------------------------------------------------------------------------------------------
// Streams.

/// One output item of the stream being written.
#[derive(Debug)]
struct Item {
    /// The provider's block index.
    block: u64,
    /// Its item id (a JSON string).
    id: Vec<u8>,
    /// A function call's call id and name (JSON strings); empty for a message.
    call: Option<(Vec<u8>, Vec<u8>)>,
    /// The text or arguments so far, escapes as written (between the quotes).
    text: Vec<u8>,
    /// A reasoning item's signature (or redacted data) so far, as `text`, and whether it is
    /// redacted; `None` for the others.
    signature: Option<(Vec<u8>, bool)>,
}

impl Item {
    /// How its text streams: a message's, a reasoning item's summary; `None` for a function
    /// call's arguments and a redacted reasoning item (no text).
    fn texts(&self) -> Option<&'static Texts> {
        match (&self.call, &self.signature) {
            (None, None) => Some(&MESSAGE),
            (None, Some((_, false))) => Some(&SUMMARY),
            _ => None,
        }
    }
}

/// The events and members of a message's text and of a reasoning item's summary, which
/// stream alike.
struct Texts {
    delta: &'static [u8],
    done: &'static [u8],
    part_added: &'static [u8],
    part_done: &'static [u8],
    /// The text's index member.
    index: &'static [u8],
    /// The part's members up to its text.
    part: &'static [u8],
    /// What a delta and the done event end with.
    tail: &'static [u8],
}

const MESSAGE: Texts = Texts {
    delta: b"response.output_text.delta",
    done: b"response.output_text.done",
    part_added: b"response.content_part.added",
    part_done: b"response.content_part.done",
    index: br#","content_index":0"#,
    part: br#","part":{"type":"output_text","annotations":[],"text":"#,
    tail: br#","logprobs":[]"#,
};

const SUMMARY: Texts = Texts {
    delta: b"response.reasoning_summary_text.delta",
    done: b"response.reasoning_summary_text.done",
    part_added: b"response.reasoning_summary_part.added",
    part_done: b"response.reasoning_summary_part.done",
    index: br#","summary_index":0"#,
    part: br#","part":{"type":"summary_text","text":"#,
    tail: b"",
};

/// The model's stream events written as the Responses API's typed events, each `event: <type>`
/// and `data: {"type": <type>, "sequence_number": n, ...}`, in OpenAI's order.
#[derive(Debug, Default)]
pub struct Encoder {
    created: u64,
    sequence: u64,
    /// The answer's id and model as JSON strings.
    id: Vec<u8>,
    model: Vec<u8>,
    items: Vec<Item>,
    /// The finished output items, comma separated, for the last event.
    done: Vec<u8>,
    stop: Stop,
    usage: Usage,
    started: bool,
    /// `response.completed` (or `response.incomplete`) was written.
    pub finished: bool,
    /// An error event was written: nothing more goes to the caller.
    pub failed: bool,
}

impl Encoder {
    pub fn new(created: u64) -> Encoder {
        Encoder {
            created,
            id: b"\"msg\"".to_vec(),
            model: EMPTY.as_bytes().to_vec(),
            ..Encoder::default()
        }
    }

    /// Starts an event: `event: <kind>` and `data: {"type":<kind>,"sequence_number":n,`.
    fn open(&mut self, out: &mut Vec<u8>, kind: &[u8]) {
        put(
            out,
            &[
                b"event: ",
                kind,
                b"\ndata: {\"type\":\"",
                kind,
                b"\",\"sequence_number\":",
                Digits::of(self.sequence).get(),
                b",",
            ],
        );
        self.sequence += 1;
    }

    /// An event whose data holds the whole `response` in this state.
    fn response_event(&mut self, out: &mut Vec<u8>, kind: &[u8], status: &[u8], output: bool) {
        self.open(out, kind);
        out.extend_from_slice(br#""response":"#);
        response_head(out, &self.id, self.created, status, &self.model);
        out.extend_from_slice(br#""output":["#);
        if output {
            out.extend_from_slice(&self.done);
        }
        out.extend_from_slice(b"],");
        out.extend_from_slice(RESPONSE_TAIL);
        write_usage(out, &self.usage);
        out.extend_from_slice(b"}}\n\n");
    }

    /// Writes what the caller gets for one event of the provider's stream.
    pub fn event(&mut self, e: Event<'_>, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        match e {
            Event::Start { id, model } => {
                if RawStr::of(id).is_some() {
                    self.id = id.to_vec();
                }
                if RawStr::of(model).is_some() {
                    self.model = model.to_vec();
                }
                self.start(out);
            }
            Event::BlockStart { index, block } => {
                self.start(out);
                self.block_start(index, block, out);
            }
            Event::Text { index, text } | Event::Arguments { index, json: text } => {
                self.delta(index, text, false, out);
            }
            Event::Thinking {
                index,
                text,
                signature,
            } => self.delta(index, text, signature, out),
            Event::BlockStop { index } => self.block_stop(index, out),
            Event::Stop(stop) => self.stop = stop,
            Event::Usage(usage) => self.usage = usage,
            Event::End => {
                self.start(out);
                self.finished = true;
                let (kind, status): (&[u8], _) = match self.stop {
                    Stop::MaxTokens | Stop::Refusal => (b"response.incomplete", status(self.stop)),
                    _ => (b"response.completed", status(Stop::End)),
                };
                self.response_event(out, kind, status, true);
            }
            Event::Error { kind, message } => {
                let message = message.unwrap_or("The provider's stream reported an error.");
                self.fail(kind.unwrap_or("api_error"), message, out);
            }
        }
    }

    /// `response.created` and `response.in_progress`, once.
    fn start(&mut self, out: &mut Vec<u8>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let status = br#""status":"in_progress","incomplete_details":null"#;
        self.response_event(out, b"response.created", status, false);
        self.response_event(out, b"response.in_progress", status, false);
    }

    fn output_index(&self, k: usize) -> Digits {
        Digits::of(k as u64)
    }

    fn block_start(&mut self, block: u64, kind: Block<'_>, out: &mut Vec<u8>) {
        let k = self.items.len();
        let index = self.output_index(k);
        let mut id = Vec::with_capacity(self.id.len() + 8);
        let mut signature = None;
        let call = match kind {
            Block::Text => {
                item_id(&mut id, b"msg_", &self.id, k);
                None
            }
            Block::Thinking { redacted, .. } => {
                item_id(&mut id, b"rs_", &self.id, k);
                let redacted = RawStr::of(redacted).map(RawStr::inner);
                signature = Some((redacted.unwrap_or_default().to_vec(), redacted.is_some()));
                None
            }
            Block::ToolCall { id: call_id, name } => {
                derived_id(&mut id, b"fc_", RawStr::or_empty(RawStr::of(call_id)));
                Some((
                    RawStr::or_empty(RawStr::of(call_id)).to_vec(),
                    RawStr::or_empty(RawStr::of(name)).to_vec(),
                ))
            }
        };
        self.open(out, b"response.output_item.added");
        put(out, &[br#""output_index":"#, index.get(), br#","item":"#]);
        match (&call, &signature) {
            (Some((call_id, name)), _) => {
                call_item(out, call_id, name, EMPTY.as_bytes(), b"in_progress")
            }
            (None, Some(_)) => put(
                out,
                &[br#"{"id":"#, &id, br#","type":"reasoning","summary":[]}"#],
            ),
            (None, None) => message_item(out, &id, b"in_progress", None),
        }
        out.extend_from_slice(b"}\n\n");
        let item = Item {
            block,
            id,
            call,
            text: Vec::new(),
            signature,
        };
        if let Some(texts) = item.texts() {
            self.open(out, texts.part_added);
            self.part_members(out, &item.id, index.get(), texts.index);
            put(out, &[texts.part, b"\"\"}}\n\n"]);
        }
        self.items.push(item);
    }

    /// `"item_id":…,"output_index":…` and the text's index (`texts.index`).
    fn part_members(&self, out: &mut Vec<u8>, id: &[u8], index: &[u8], texts: &[u8]) {
        put(
            out,
            &[br#""item_id":"#, id, br#","output_index":"#, index, texts],
        );
    }

    /// More text, arguments or (`signature`) a thinking block's signature, which is kept for
    /// the item's end.
    fn delta(&mut self, block: u64, text: &[u8], signature: bool, out: &mut Vec<u8>) {
        let Some(k) = self.items.iter().position(|i| i.block == block) else {
            return;
        };
        let index = self.output_index(k);
        let Some(item) = self.items.get_mut(k) else {
            return;
        };
        match &mut item.signature {
            Some((signed, false)) if signature => {
                return signed.extend_from_slice(RawStr(text).inner());
            }
            Some((_, true)) => return,
            _ if signature => return,
            _ => {}
        }
        item.text.extend_from_slice(RawStr(text).inner());
        let texts = item.texts();
        let kind = texts.map_or(b"response.function_call_arguments.delta".as_slice(), |t| {
            t.delta
        });
        let id = std::mem::take(&mut item.id);
        self.open(out, kind);
        let (members, tail) = texts.map_or((b"".as_slice(), b"".as_slice()), |t| (t.index, t.tail));
        self.part_members(out, &id, index.get(), members);
        put(out, &[br#","delta":"#, text, tail, b"}\n\n"]);
        if let Some(item) = self.items.get_mut(k) {
            item.id = id;
        }
    }

    fn block_stop(&mut self, block: u64, out: &mut Vec<u8>) {
        let Some(k) = self.items.iter().position(|i| i.block == block) else {
            return;
        };
        let Some(item) = self.items.get_mut(k) else {
            return;
        };
        let texts = item.texts();
        let id = std::mem::take(&mut item.id);
        let call = item.call.take();
        let signature = item.signature.take();
        let mut text = Vec::with_capacity(item.text.len() + 2);
        put(&mut text, &[b"\"", &item.text, b"\""]);
        let index = self.output_index(k);
        let mut done = Vec::with_capacity(text.len() + 128);
        if let Some(t) = texts {
            self.open(out, t.done);
            self.part_members(out, &id, index.get(), t.index);
            put(out, &[br#","text":"#, &text, t.tail, b"}\n\n"]);
            self.open(out, t.part_done);
            self.part_members(out, &id, index.get(), t.index);
            put(out, &[t.part, &text, b"}}\n\n"]);
        }
        match (&call, signature) {
            (_, Some((signature, redacted))) => {
                reasoning(&mut done, &id, b"", &text, &signature, redacted);
            }
            (None, None) => message_item(&mut done, &id, b"completed", Some(&text)),
            (Some((call_id, name)), None) => {
                self.open(out, b"response.function_call_arguments.done");
                self.part_members(out, &id, index.get(), b"");
                put(out, &[br#","arguments":"#, &text, b"}\n\n"]);
                call_item(&mut done, call_id, name, &text, b"completed");
            }
        }
        self.open(out, b"response.output_item.done");
        put(
            out,
            &[
                br#""output_index":"#,
                index.get(),
                br#","item":"#,
                &done,
                b"}\n\n",
            ],
        );
        if !self.done.is_empty() {
            self.done.push(b',');
        }
        self.done.extend_from_slice(&done);
    }

    /// Ends the caller's stream with an error event (`event: error`, Responses' `type`,
    /// `code`, `message`, `param` and `sequence_number`, and an `error` object, which OpenAI's
    /// SDKs raise on): the provider's error event, or a stream cut short.
    pub fn fail(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        self.failed = true;
        self.open(out, b"error");
        let mut body = Out::with_capacity(message.len() * 2 + 64);
        body.raw(r#""code":"#).str(kind).key("message").str(message);
        body.raw(r#""param":null,"error":{"type":"#).str(kind);
        body.key("message").str(message).close().close();
        out.extend_from_slice(&body.0);
        out.extend_from_slice(b"\n\n");
    }
}
