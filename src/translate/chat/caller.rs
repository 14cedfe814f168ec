//! OpenAI Chat Completions as a caller dialect of the internal model ([`super::super::model`]):
//! its request read into the model ([`read_request`]: `head` and `walk`, the rules every provider
//! dialect's writer gets the request by), the model's answer written as a Chat completion
//! ([`write_answer`]) and its stream events as Chat chunks ([`Encoder`]). The provider side is
//! [`super`]. docs/translation.md has the field tables.
//!
//! `translate::check` and the writers run the same rules: `head` and `walk` decide, a writer
//! writes what `walk` passes it and `check` drops it (no body is built).
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

use crate::translate::common::{self, openai_error_body};
use crate::translate::common::{image, tool_input, valid_id};
use crate::translate::json::{self, pick, put, Digits, Obj, Out, Raw, RawStr, EMPTY};
use crate::translate::model::{
    Answer, Block, Choice, Event, Output, Part, Request, Role, Stop, Tool, Usage,
};
use crate::translate::{field, StreamContext, Untranslatable};

type Result<T> = core::result::Result<T, Untranslatable>;

/// The caller's request read into the model (translate::request): its parts passed to `push`,
/// the rest returned; what the other dialects cannot carry refused.
pub fn read_request<'a>(
    req: &Obj<'a>,
    push: &mut dyn FnMut(Role, Part<'a>),
) -> Result<Request<'a>> {
    let head = head(req)?;
    walk(req, push)?;
    Ok(Request {
        max_tokens: req
            .u64("max_completion_tokens")
            .or_else(|| req.u64("max_tokens")),
        temperature: req.get("temperature"),
        top_p: req.get("top_p"),
        top_k: None,
        stops: head.stops,
        tools: head.tools,
        choice: head.choice,
        user: req.raw_str("user"),
        stream: req.bool("stream"),
        thinking: false,
    })
}

/// What of a request is not its messages: checked, and kept as written for the writers.
struct Head<'a> {
    tools: Vec<Tool<'a>>,
    choice: Option<Choice<'a>>,
    /// `stop` as JSON strings.
    stops: Vec<&'a str>,
}

/// The request-wide rules: what Messages cannot carry (dropping it would change the answer).
fn head<'a>(req: &Obj<'a>) -> Result<Head<'a>> {
    if req.u64("n").is_some_and(|n| n > 1) {
        return Err(field("n"));
    }
    if req.bool("logprobs") == Some(true) {
        return Err(field("logprobs"));
    }
    if req
        .obj("response_format")
        .and_then(|f| f.tag("type"))
        .is_some_and(|t| t != "text")
    {
        return Err(field("response_format"));
    }
    let audio = |m: &Raw<'_>| json::str(m).as_deref() == Some("audio");
    if req.has("audio") || req.arr("modalities").unwrap_or_default().iter().any(audio) {
        return Err(field("audio"));
    }
    if req.obj("logit_bias").is_some_and(|b| !b.is_empty()) {
        return Err(field("logit_bias"));
    }
    if req.has("functions") || req.has("function_call") {
        return Err(field("functions"));
    }
    if req.has("web_search_options") {
        return Err(field("web_search_options"));
    }
    let mut tools = Vec::new();
    for tool in req.arr("tools").unwrap_or_default() {
        let tool = json::obj(tool).filter(|t| t.tag("type") == Some("function"));
        let f = tool.and_then(|t| t.obj("function")).ok_or(field("tools"))?;
        tools.push(Tool {
            name: f.raw_str("name").ok_or(field("tools"))?,
            description: f.raw_str("description"),
            schema: f.get("parameters"),
        });
    }
    Ok(Head {
        tools,
        choice: tool_choice(req)?,
        stops: stops(req)?,
    })
}

/// `tool_choice` and `parallel_tool_calls: false` as Messages' `tool_choice`.
fn tool_choice<'a>(req: &Obj<'a>) -> Result<Option<Choice<'a>>> {
    tool_choice_named(req, |c| c.obj("function").and_then(|f| f.raw_str("name")))
}

/// OpenAI's `tool_choice` (`auto`, `none`, `required` or a named function, the function's
/// name read by `name` from the object) and `parallel_tool_calls: false` in the model's terms.
pub(crate) fn tool_choice_named<'a>(
    req: &Obj<'a>,
    name: fn(&Obj<'a>) -> Option<&'a str>,
) -> Result<Option<Choice<'a>>> {
    let given = req.get("tool_choice");
    let (kind, name) = match given {
        None => ("\"auto\"", None),
        Some(choice) => match json::str(choice).as_deref() {
            Some("auto") => ("\"auto\"", None),
            Some("none") => ("\"none\"", None),
            Some("required") => ("\"any\"", None),
            Some(_) => return Err(field("tool_choice")),
            None => {
                let named = json::obj(choice)
                    .filter(|c| c.tag("type") == Some("function"))
                    .and_then(|c| name(&c))
                    .ok_or(field("tool_choice"))?;
                ("\"tool\"", Some(named))
            }
        },
    };
    let serial = req.bool("parallel_tool_calls") == Some(false) && kind != "\"none\"";
    if given.is_none() && !serial {
        return Ok(None);
    }
    Ok(Some(Choice { kind, name, serial }))
}

/// `stop` as `stop_sequences`. Empty strings stop nothing and are dropped; Messages refuses a
/// stop sequence of only whitespace (`"\n"` is a common one), which cannot be dropped.
fn stops<'a>(req: &Obj<'a>) -> Result<Vec<&'a str>> {
    let Some(stop) = req.get("stop") else {
        return Ok(Vec::new());
    };
    let stops = match json::raw_str(stop) {
        Some(_) => vec![stop],
        None => json::arr(stop).ok_or(field("stop"))?,
    };
    let mut out = Vec::with_capacity(stops.len());
    for stop in stops {
        let value = json::str(stop).ok_or(field("stop"))?;
        if value.is_empty() {
            continue;
        }
        if value.trim().is_empty() {
            return Err(field("stop"));
        }
        out.push(stop);
    }
    Ok(out)
}

/// Passes each Messages block of the conversation to `push`, with where it goes.
fn walk<'a>(req: &Obj<'a>, push: &mut dyn FnMut(Role, Part<'a>)) -> Result<()> {
    let mut last = None;
    let mut turns = false;
    let mut counted = |role, block| {
        turns |= role != Role::System;
        push(role, block);
    };
    for m in req.arr("messages").ok_or(field("messages"))? {
        let m = json::obj(m).ok_or(field("messages"))?;
        last = Some(message(&m, &mut counted)?);
    }
    // Messages continues a last assistant turn (a prefill) where Chat answers after it, and
    // refuses a conversation of system messages only, which Chat answers.
    if last == Some(Role::Assistant) || !turns {
        return Err(field("messages"));
    }
    Ok(())
}

fn message<'a>(m: &Obj<'a>, push: &mut dyn FnMut(Role, Part<'a>)) -> Result<Role> {
    let role = match m.tag("role") {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => {
            push(Role::User, tool_result(m)?);
            return Ok(Role::User);
        }
        _ => return Err(field("messages.role")),
    };
    if let Some(content) = m.get("content") {
        if let Some(text) = json::raw_str(content) {
            // Messages refuses empty text blocks.
            if text != EMPTY {
                push(role, Part::Text(text));
            }
        } else {
            for p in json::arr(content).ok_or(field("messages.content"))? {
                if let Some(block) = part(p, role)? {
                    push(role, block);
                }
            }
        }
    }
    if role == Role::Assistant {
        // A refusal in the history is what the assistant said.
        if let Some(refusal) = m.raw_str("refusal").filter(|r| *r != EMPTY) {
            push(role, Part::Text(refusal));
        }
        for call in m.arr("tool_calls").unwrap_or_default() {
            push(role, tool_use(call)?);
        }
    }
    Ok(role)
}

/// One content part: text anywhere, images from users, refusals from the assistant. Empty
/// text is dropped.
fn part<'a>(p: Raw<'a>, role: Role) -> Result<Option<Part<'a>>> {
    let p = json::obj(p).ok_or(field("messages.content"))?;
    let text = |key| Ok(p.raw_str(key).filter(|t| *t != EMPTY).map(Part::Text));
    match (p.tag("type"), role) {
        (Some("text"), _) => text("text"),
        (Some("refusal"), Role::Assistant) => text("refusal"),
        (Some("image_url"), Role::User) => {
            let url = p
                .obj("image_url")
                .and_then(|i| i.str("url"))
                .unwrap_or_default();
            image(&url)?;
            Ok(Some(Part::Image(url)))
        }
        (Some("input_audio"), _) => Err(field("input_audio")),
        (Some("file"), _) => Err(field("file")),
        _ => Err(field("messages.content")),
    }
}

fn tool_use(call: Raw<'_>) -> Result<Part<'_>> {
    let call = json::obj(call).ok_or(field("tool_calls"))?;
    if call.tag("type").is_some_and(|t| t != "function") {
        return Err(field("tool_calls"));
    }
    let f = call.obj("function").ok_or(field("tool_calls"))?;
    Ok(Part::ToolCall {
        id: valid_id(call.str("id").unwrap_or_default()),
        name: f.raw_str("name").ok_or(field("tool_calls"))?,
        input: tool_input(f.str("arguments").unwrap_or_default())?,
    })
}

/// A `role: tool` message as a `tool_result` block (its id made valid like the call's).
fn tool_result<'a>(m: &Obj<'a>) -> Result<Part<'a>> {
    let id = valid_id(m.str("tool_call_id").ok_or(field("tool_call_id"))?);
    let (content, blocks) = match m.get("content") {
        None => (Vec::new(), false),
        Some(content) => match json::raw_str(content) {
            Some(text) => (
                Vec::from_iter((text != EMPTY).then_some(text.into())),
                false,
            ),
            None => {
                let mut texts = Vec::new();
                for p in json::arr(content).ok_or(field("messages.content"))? {
                    let p = json::obj(p).filter(|p| p.tag("type") == Some("text"));
                    let p = p.ok_or(field("messages.content"))?;
                    texts.extend(p.raw_str("text").filter(|t| *t != EMPTY).map(Into::into));
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

/// The model's answer as a Chat completion (`object: chat.completion`): its texts joined as
/// the message's `content` (`null` when it has only tool calls), its calls as `tool_calls`,
/// a refusal's text as `refusal` (`content` `null`), usage with cached tokens. `logprobs`
/// writes the choice's `"logprobs": null` (as a Messages provider's answers always had it).
pub fn write_answer(answer: &Answer<'_>, created: u64, logprobs: bool) -> Vec<u8> {
    let mut out = Out::with_capacity(512);
    out.raw(r#"{"id":"#)
        .raw(answer.id.unwrap_or("\"chatcmpl-gateway\""));
    out.raw(r#""object":"chat.completion","created":"#)
        .num(created);
    out.key("model").raw(answer.model.unwrap_or(EMPTY));
    out.raw(r#""choices":[{"index":0,"message":{"role":"assistant","content":"#);
    let (texts, calls) = answer.joined();
    let refused = answer.stop == Stop::Refusal;
    let said = texts.len() > 2;
    if refused || (!said && calls) {
        out.null();
    } else {
        out.raw(&texts);
    }
    if refused && said {
        out.key("refusal").raw(&texts);
    }
    if calls {
        out.key("tool_calls").open_arr();
        for output in &answer.output {
            if let Output::ToolCall {
                id,
                name,
                arguments,
            } = output
            {
                out.raw(r#"{"id":"#).raw(id);
                out.raw(r#""type":"function","function":{"name":"#)
                    .raw(name);
                out.key("arguments").raw(arguments).close().close();
            }
        }
        out.close_arr();
    }
    out.close();
    if logprobs {
        out.key("logprobs").null();
    }
    out.key("finish_reason").str(answer.stop.finish_reason());
    out.close().close_arr();
    write_usage(&mut out, &answer.usage);
    out.close();
    out.0
}

/// OpenAI's `usage` member (a JSON answer's and a stream's last chunk's).
/// `cache_creation_input_tokens` is not OpenAI's (it reports no cache writes): written when a
/// provider reported some, so nothing counted is lost; `completion_tokens_details.
/// reasoning_tokens` when the provider said how many output tokens were thinking.
fn write_usage(out: &mut Out, u: &Usage) {
    out.raw(r#""usage":{"prompt_tokens":"#)
        .num(u.prompt_tokens());
    out.key("completion_tokens").num(u.output);
    out.key("total_tokens").num(u.total_tokens());
    out.raw(r#""prompt_tokens_details":{"cached_tokens":"#);
    out.num(u.cache_read);
    if u.cache_creation > 0 {
        out.key("cache_creation_input_tokens").num(u.cache_creation);
    }
    out.close();
    if u.reasoning > 0 {
        out.key("completion_tokens_details").open();
        out.key("reasoning_tokens").num(u.reasoning);
        out.close();
    }
    out.close();
}

/// A provider's error answer in OpenAI's shape: its message and type when it gave them.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let error = common::provider_error(body);
    let kind = error
        .as_ref()
        .and_then(|e| e.kind.as_deref())
        .unwrap_or(common::error_type(status));
    let message = common::error_message(status, error.as_ref(), body);
    openai_error_body(kind, None, &message)
}

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

    /// `[DONE]` was written.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The stream ended properly: `[DONE]`, or the provider's own error, written.
    pub fn ended(&self) -> bool {
        self.finished || self.failed
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
            Event::BlockStart { .. } | Event::BlockStop { .. } | Event::Thinking { .. } => {}
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
        let mut usage = Out::with_capacity(192);
        write_usage(&mut usage, &self.usage);
        put(
            out,
            &[
                b"data: ",
                &self.head,
                br#""choices":[],"#,
                &usage.0,
                b"}\n\n",
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
