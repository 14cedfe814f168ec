//! Gemini's native API as a caller dialect: its request read into the internal model
//! ([`super::super::model`]), its answers, errors and streams written from it. The provider
//! side is [`super`]; docs/translation.md has the field table.

use super::*;

type Checked<T> = Result<T, Untranslatable>;

/// The model a Gemini caller names in its path (`.../models/{model}:generateContent`), and
/// whether it asked for a stream (`:streamGenerateContent`); `None`: not Gemini's endpoint.
pub fn path_model(path: &str) -> Option<(&str, bool)> {
    // No `:method` (every other API's path): one cheap test.
    crate::bytes::find_byte(b':', path.as_bytes())?;
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let (rest, method) = path.rsplit_once(':')?;
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        _ => return None,
    };
    let (_, model) = rest.rsplit_once("/models/")?;
    (!model.is_empty() && !model.contains('/')).then_some((model, stream))
}

/// A Gemini caller's `path` naming `model` instead of its own, and when `stream` asking for a
/// stream (`:streamGenerateContent?alt=sse`, the caller's query after it) if it asked for none
/// (a gathered attempt, docs/behaviour.md section 5); the rest kept (version, method, query).
/// `None` when nothing changes or it is not Gemini's endpoint.
pub fn with_model(path: &str, model: &str, stream: bool) -> Option<String> {
    let (now, streams) = path_model(path)?;
    let model = model.strip_prefix("models/").unwrap_or(model);
    let to_stream = stream && !streams;
    if now == model && !to_stream {
        return None;
    }
    let (bare, query) = path.split_once('?').unwrap_or((path, ""));
    let end = bare.rfind(':')?;
    let (head, tail) = (path.get(..end - now.len())?, path.get(end..)?);
    let mut out = String::with_capacity(path.len() + model.len() + 32);
    out.push_str(head);
    crate::translate::common::push_segment(&mut out, model, true);
    if to_stream {
        out.push_str(":streamGenerateContent?alt=sse");
        if !query.is_empty() {
            out.push('&');
            out.push_str(query);
        }
    } else {
        out.push_str(tail);
    }
    Some(out)
}

/// The caller's request read into the model (translate::request; `stream`: its path asks for
/// a stream): its parts passed to `push`, the rest returned.
pub fn read_request<'a>(
    req: &Obj<'a>,
    stream: bool,
    push: &mut dyn FnMut(Role, Part<'a>),
) -> Checked<Request<'a>> {
    let head = head(req, stream)?;
    walk(req, push)?;
    Ok(head)
}

/// `generationConfig`, `tools` and `toolConfig`: what another dialect cannot carry is refused
/// (a stored `cachedContent`, several candidates, JSON output, tools that run at Google);
/// `safetySettings` and `thinkingConfig` are dropped.
fn head<'a>(req: &Obj<'a>, stream: bool) -> Checked<Request<'a>> {
    if req.has("cachedContent") {
        return Err(field("cachedContent"));
    }
    let config = req.obj("generationConfig").unwrap_or_default();
    if config.u64("candidateCount").is_some_and(|n| n > 1) {
        return Err(field("generationConfig.candidateCount"));
    }
    let json_out = config
        .tag("responseMimeType")
        .is_some_and(|m| m != "text/plain");
    if json_out || config.has("responseSchema") || config.has("responseJsonSchema") {
        return Err(field("generationConfig.responseMimeType"));
    }
    let mut stops = Vec::new();
    for stop in config.arr("stopSequences").unwrap_or_default() {
        let stop = json::raw_str(stop).ok_or(field("generationConfig.stopSequences"))?;
        if json::str(stop).is_some_and(|s| s.trim().is_empty()) {
            return Err(field("generationConfig.stopSequences"));
        }
        stops.push(stop);
    }
    let mut tools = Vec::new();
    for tool in req.arr("tools").unwrap_or_default() {
        let tool = json::obj(tool).ok_or(field("tools"))?;
        // Only functions cross: Google Search, code execution and the others run at Google.
        let declarations = tool.arr("functionDeclarations").ok_or(field("tools"))?;
        for d in declarations {
            let d = json::obj(d).ok_or(field("tools"))?;
            tools.push(Tool {
                name: d.raw_str("name").ok_or(field("tools"))?,
                description: d.raw_str("description"),
                // google-genai writes this member's name in snake case (Google's parser takes
                // both).
                schema: (d.get("parametersJsonSchema"))
                    .or_else(|| d.get("parameters_json_schema"))
                    .or_else(|| d.get("parameters")),
            });
        }
    }
    let calling = req
        .obj("toolConfig")
        .and_then(|c| c.obj("functionCallingConfig"));
    let choice = match calling {
        None => None,
        Some(c) => {
            let names = c.arr("allowedFunctionNames").unwrap_or_default();
            let (kind, name) = match (c.tag("mode"), names.as_slice()) {
                (Some("NONE"), _) => ("\"none\"", None),
                (Some("ANY"), [name]) => ("\"tool\"", json::raw_str(name)),
                (Some("ANY"), []) => ("\"any\"", None),
                (Some("AUTO") | None, []) => ("\"auto\"", None),
                _ => return Err(field("toolConfig")),
            };
            Some(Choice {
                kind,
                name,
                serial: false,
            })
        }
    };
    Ok(Request {
        max_tokens: config.u64("maxOutputTokens"),
        temperature: config.get("temperature"),
        top_p: config.get("topP"),
        top_k: config.get("topK"),
        stops,
        tools,
        choice,
        user: None,
        stream: Some(stream),
        thinking: false,
    })
}

/// Passes each part of the conversation to `push`: `systemInstruction` first, then the turns
/// (`user` and `model`). A call without an `id` gets `call_<n>`, and the result that names its
/// function next gets the same id.
fn walk<'a>(req: &Obj<'a>, push: &mut dyn FnMut(Role, Part<'a>)) -> Checked<()> {
    if let Some(system) = req.obj("systemInstruction") {
        for p in system.arr("parts").unwrap_or_default() {
            let text = json::obj(p).and_then(|p| p.raw_str("text"));
            let text = text.ok_or(field("systemInstruction"))?;
            if text != EMPTY {
                push(Role::System, Part::Text(text));
            }
        }
    }
    let mut calls: Vec<(Cow<'a, str>, &'a str)> = Vec::new();
    let mut last = None;
    for c in req.arr("contents").ok_or(field("contents"))? {
        let c = json::obj(c).ok_or(field("contents"))?;
        let role = match c.tag("role") {
            Some("user") | None => Role::User,
            Some("model") => Role::Assistant,
            _ => return Err(field("contents.role")),
        };
        for p in c.arr("parts").ok_or(field("contents.parts"))? {
            let p = json::obj(p).ok_or(field("contents.parts"))?;
            if p.bool("thought") == Some(true) {
                continue; // thought summaries do not cross vendors
            }
            if let Some(text) = p.raw_str("text") {
                if text != EMPTY {
                    push(role, Part::Text(text));
                }
            } else if let Some(data) = p.obj("inlineData") {
                // google-genai writes these two members' names in snake case.
                let mime = data.str("mimeType").or_else(|| data.str("mime_type"));
                let bytes = data.str("data");
                let (Some(mime), Some(bytes)) = (mime, bytes) else {
                    return Err(field("inlineData"));
                };
                let url = common::data_uri(&mime, &bytes);
                common::image(&url)?;
                push(role, Part::Image(Cow::Owned(url)));
            } else if let Some(file) = p.obj("fileData") {
                let url = (file.str("fileUri").or_else(|| file.str("file_uri")))
                    .ok_or(field("fileData"))?;
                common::image(&url)?;
                push(role, Part::Image(url));
            } else if let Some(call) = p.obj("functionCall") {
                let name = call.raw_str("name").ok_or(field("functionCall"))?;
                let id = match call.str("id") {
                    Some(id) => common::valid_id(id),
                    None => {
                        let mut id = String::from("call_");
                        id.push_str(
                            std::str::from_utf8(Digits::of(calls.len() as u64).get())
                                .unwrap_or("0"),
                        );
                        Cow::Owned(id)
                    }
                };
                let args = call.get("args").unwrap_or("{}");
                if super::json::obj(args).is_none() {
                    return Err(field("functionCall.args"));
                }
                calls.push((id.clone(), name));
                push(
                    Role::Assistant,
                    Part::ToolCall {
                        id,
                        name,
                        input: Cow::Borrowed(args),
                    },
                );
            } else if let Some(result) = p.obj("functionResponse") {
                let name = result.raw_str("name").ok_or(field("functionResponse"))?;
                let id = match result.str("id") {
                    Some(id) => common::valid_id(id),
                    None => match calls.iter().position(|(_, n)| *n == name) {
                        Some(at) => calls.remove(at).0,
                        None => common::valid_id(json::str(name).unwrap_or_default()),
                    },
                };
                let response = result.get("response").unwrap_or("{}");
                push(
                    Role::User,
                    Part::ToolResult {
                        id,
                        content: vec![output(response)],
                        blocks: false,
                    },
                );
            } else {
                return Err(field("contents.parts")); // code execution, video metadata, ...
            }
        }
        last = Some(role);
    }
    // Messages continues a last assistant turn where Gemini answers after it.
    if last != Some(Role::User) {
        return Err(field("contents"));
    }
    Ok(())
}

/// A function's `response` as the text of its result: its one string member as it is (`{"result":
/// "18 C"}`, what the other direction writes), else the object's JSON text.
fn output(response: &str) -> Cow<'_, str> {
    let mut members = json::members(response.as_bytes());
    let one = match (members.next(), members.next()) {
        (Some((_, value)), None) => std::str::from_utf8(value).ok().and_then(json::raw_str),
        _ => None,
    };
    match one {
        Some(text) => Cow::Borrowed(text),
        None => {
            let mut text = Out::with_capacity(response.len() + 16);
            text.str(response);
            Cow::Owned(String::from_utf8(text.0).unwrap_or_default())
        }
    }
}

/// Gemini's `finishReason` for the model's stop.
fn finish(stop: Stop) -> &'static str {
    match stop {
        Stop::End | Stop::ToolUse => "\"STOP\"",
        Stop::MaxTokens => "\"MAX_TOKENS\"",
        Stop::Refusal => "\"SAFETY\"",
    }
}

/// `"usageMetadata":{...}`: the prompt's tokens with the cached ones among them.
fn write_usage(out: &mut Out, u: &Usage) {
    out.key("usageMetadata").open();
    out.key("promptTokenCount").num(u.prompt_tokens());
    // Gemini counts its thoughts apart from the candidates' tokens.
    out.key("candidatesTokenCount")
        .num(u.output.saturating_sub(u.reasoning));
    out.key("totalTokenCount").num(u.total_tokens());
    if u.cache_read > 0 {
        out.key("cachedContentTokenCount").num(u.cache_read);
    }
    if u.reasoning > 0 {
        out.key("thoughtsTokenCount").num(u.reasoning);
    }
    out.close();
}

/// A function call's part: `arguments` (a JSON string of an object's text) as `args`; the
/// answer's `first` call carries Google's placeholder signature ([`NO_SIGNATURE`]), so the
/// app's history can go back to Gemini 3, which refuses a step whose first call has none.
fn call_part(out: &mut Out, id: &str, name: &str, arguments: &str, first: bool) {
    let args = json::unescape(arguments).filter(|a| json::obj(a).is_some());
    out.raw(r#"{"functionCall":{"name":"#).raw(name).key("args");
    out.raw(args.as_deref().unwrap_or("{}"));
    if id.len() > 2 {
        out.key("id").raw(id);
    }
    out.close();
    if first {
        out.key("thoughtSignature").raw(NO_SIGNATURE);
    }
    out.close();
}

/// One `GenerateContentResponse` of the answer `a` (whole, or a stream's chunk).
pub fn write_answer(a: &Answer<'_>) -> Vec<u8> {
    let mut out = Out::with_capacity(256);
    out.raw(r#"{"candidates":[{"content":{"parts":["#);
    let mut first = true;
    for o in &a.output {
        match o {
            Output::Text(text) => {
                out.raw(r#"{"text":"#).raw(text).close();
            }
            Output::ToolCall {
                id,
                name,
                arguments,
            } => call_part(&mut out, id, name, arguments, std::mem::take(&mut first)),
            Output::Thinking(_) => {}
        }
    }
    out.close_arr().raw(r#""role":"model"}"#);
    out.key("finishReason")
        .raw(finish(a.stop))
        .key("index")
        .num(0);
    out.close().close_arr();
    write_usage(&mut out, &a.usage);
    out.key("modelVersion").raw(a.model.unwrap_or(EMPTY));
    out.key("responseId").raw(a.id.unwrap_or(EMPTY)).close();
    out.0
}

/// The HTTP statuses Google answers errors with, its status name for each and the error type
/// the other dialects give it ([`common::error_type`]): one table for a Gemini caller's error
/// answers (their status names) and its stream errors (another dialect's error type: their
/// status and name).
pub(crate) static STATUSES: [(u16, &str, &str); 8] = [
    (400, "INVALID_ARGUMENT", "invalid_request_error"),
    (401, "UNAUTHENTICATED", "authentication_error"),
    (403, "PERMISSION_DENIED", "permission_error"),
    (404, "NOT_FOUND", "not_found_error"),
    (429, "RESOURCE_EXHAUSTED", "rate_limit_error"),
    (500, "INTERNAL", "api_error"),
    (503, "UNAVAILABLE", "overloaded_error"),
    (504, "DEADLINE_EXCEEDED", "timeout_error"),
];

/// Google's status name for an HTTP status (`413` and `422` are invalid arguments, Anthropic's
/// `529` unavailable, the other statuses internal errors).
fn status_name(status: u16) -> &'static str {
    let status = match status {
        413 | 422 => 400,
        529 => 503,
        s => s,
    };
    (STATUSES.iter().find(|row| row.0 == status)).map_or("INTERNAL", |row| row.1)
}

/// The HTTP status of a provider's stream error for a Gemini caller: the one of its error type
/// read as Anthropic's ([`messages::error_type`]: OpenAI's `rate_limit_exceeded` is a rate
/// limit, `server_error` and the unknown an `api_error`).
fn error_status(kind: Option<&str>) -> u16 {
    let kind = messages::error_type(kind);
    (STATUSES.iter().find(|row| row.2 == kind)).map_or(500, |row| row.0)
}

/// Google's error body, `{"error": {"code", "message", "status"}}`, and with the gateway's
/// own `code` (its replies) an `ErrorInfo` detail whose `reason` it is.
pub fn error_body(status: u16, message: &str, code: Option<&str>) -> Vec<u8> {
    let mut out = Out::with_capacity(message.len() + 160);
    out.raw(r#"{"error":{"code":"#).num(u64::from(status));
    out.key("message").str(message);
    out.key("status").str(status_name(status));
    if let Some(code) = code {
        out.raw(r#""details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"#);
        out.str(code).raw(r#""domain":"llm-failover"}]"#);
    }
    out.close().close();
    out.0
}

/// A provider's error answer for a Gemini caller: Google's error body, the provider's message
/// kept.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let error = common::provider_error(body);
    error_body(
        status,
        &common::error_message(status, error.as_ref(), body),
        None,
    )
}

/// The error a Gemini caller gets for a `2xx` answer that is none of its provider's API.
pub fn unreadable() -> Vec<u8> {
    error_body(
        502,
        "The provider's answer could not be read as an answer of its API, so it could not be translated.",
        None,
    )
}

/// A JSON string as written, else `""`.
fn string_or_empty(v: &[u8]) -> &str {
    std::str::from_utf8(v)
        .ok()
        .filter(|v| v.starts_with('"'))
        .unwrap_or(EMPTY)
}

/// A function call being streamed: its block, id, name, and arguments so far (escaped).
type Call = (u64, Vec<u8>, Vec<u8>, Vec<u8>);

/// The model's stream events written as Gemini's stream: each text delta a chunk of its own,
/// each function call one chunk when its arguments are whole, and a last chunk with the
/// `finishReason` and `usageMetadata` (Google's `data: ...\r\n\r\n` lines, no end marker).
#[derive(Debug, Default)]
pub struct Encoder {
    id: Vec<u8>,
    model: Vec<u8>,
    /// The open function calls.
    calls: Vec<Call>,
    stop: Stop,
    usage: Usage,
    /// A function call was written.
    called: bool,
    pub finished: bool,
    pub failed: bool,
}

impl Encoder {
    /// One chunk whose parts (and, at the end, finish reason and usage) are written by `parts`.
    fn chunk(&self, out: &mut Vec<u8>, last: bool, parts: &dyn Fn(&mut Out)) {
        let mut c = Out::with_capacity(128);
        c.raw(r#"{"candidates":[{"content":{"parts":["#);
        parts(&mut c);
        c.close_arr().raw(r#""role":"model"}"#);
        if last {
            c.key("finishReason").raw(finish(self.stop));
        }
        c.key("index").num(0).close().close_arr();
        if last {
            write_usage(&mut c, &self.usage);
        }
        c.key("modelVersion").raw(string_or_empty(&self.model));
        c.key("responseId").raw(string_or_empty(&self.id)).close();
        put(out, &[b"data: ", &c.0, b"\r\n\r\n"]);
    }

    /// Writes what the caller gets for one event of the provider's stream.
    pub fn event(&mut self, e: Event<'_>, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        match e {
            Event::Start { id, model } => {
                self.id = id.to_vec();
                self.model = model.to_vec();
            }
            Event::BlockStart {
                index,
                block: Block::ToolCall { id, name },
            } => self
                .calls
                .push((index, id.to_vec(), name.to_vec(), Vec::new())),
            Event::Text { text, .. } => {
                let text = std::str::from_utf8(text).unwrap_or(EMPTY);
                self.chunk(out, false, &|c| {
                    c.raw(r#"{"text":"#).raw(text).close();
                });
            }
            Event::Arguments { index, json } => {
                if let Some(call) = self.calls.iter_mut().find(|c| c.0 == index) {
                    call.3.extend_from_slice(RawStr(json).inner());
                }
            }
            Event::BlockStop { index } => {
                let Some(at) = self.calls.iter().position(|c| c.0 == index) else {
                    return;
                };
                let (_, id, name, arguments) = self.calls.remove(at);
                let mut args = Vec::with_capacity(arguments.len() + 2);
                put(&mut args, &[b"\"", &arguments, b"\""]);
                let text = |v: &[u8]| std::str::from_utf8(v).unwrap_or(EMPTY).to_owned();
                let (id, name, args) = (text(&id), text(&name), text(&args));
                let first = !std::mem::replace(&mut self.called, true);
                self.chunk(out, false, &|c| call_part(c, &id, &name, &args, first));
            }
            Event::BlockStart { .. } | Event::Thinking { .. } => {}
            Event::Stop(stop) => self.stop = stop,
            Event::Usage(usage) => self.usage = usage,
            Event::End => {
                self.finished = true;
                self.chunk(out, true, &|c| {
                    c.raw(r#"{"text":""}"#);
                });
            }
            Event::Error { kind, message } => {
                self.fail(
                    error_status(kind),
                    message.unwrap_or("The provider's stream reported an error."),
                    out,
                );
            }
        }
    }

    /// Ends the caller's stream with Google's error as a chunk (`data: {"error": ...}`, which
    /// google-genai raises on).
    pub fn fail(&mut self, status: u16, message: &str, out: &mut Vec<u8>) {
        if self.finished || self.failed {
            return;
        }
        self.failed = true;
        put(
            out,
            &[b"data: ", &error_body(status, message, None), b"\r\n\r\n"],
        );
    }
}
