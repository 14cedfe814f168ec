//! Gemini's native API (`models/{model}:generateContent`, `:streamGenerateContent?alt=sse`) as
//! a provider dialect of the internal model ([`super::model`]): a request written from the
//! model ([`Conversation`], [`request`]), and its answers read into the model's events
//! ([`Decoder`]: a stream of `GenerateContentResponse` chunks; a JSON answer is one such
//! chunk, [`answer`]). The model is in the path (the envelope writes it), not in the body;
//! errors are Google's `{"error": {"code", "message", "status"}}`. docs/translation.md has the
//! field table.

use std::borrow::Cow;

use super::common;
use super::json::{self, elements, number, pick, put, Digits, Obj, Out, RawStr, EMPTY};
use super::model::{Answer, Block, Choice, Event, Output, Part, Request, Role, Stop, Tool, Usage};
use super::sse::{self, Reader};
use super::{field, messages, Untranslatable};

#[cfg(test)]
mod tests;

/// The body of a same-API attempt (a Chat, Messages or Responses request to a provider that is
/// not Gemini's) with its tool call ids unsigned ([`common::unsigned`]): every string value of an `id`,
/// `call_id`, `tool_call_id` or `tool_use_id` member that carries a [`common::SIGNATURE`] loses it
/// (the call and its result alike, wherever they are); every other byte is copied. `None`
/// when the body carries none (one search for [`common::SIGNATURE`] decides, without a walk). The
/// body is JSON already checked (`rewrite::scan_top_level`): the walk only steps over strings.
#[inline(never)]
pub fn unsign_ids(body: &[u8]) -> Option<Vec<u8>> {
    const IDS: [&[u8]; 4] = [
        b"\"id\"",
        b"\"call_id\"",
        b"\"tool_call_id\"",
        b"\"tool_use_id\"",
    ];
    signed(body)?;
    let mut out = Vec::with_capacity(body.len());
    // `id`: the last string was a member name of IDS, and its colon came (a string's escapes
    // are stepped over two bytes at a time: no quote inside one ends it).
    let (mut i, mut copied, mut id, mut last) = (0, 0, false, &b""[..]);
    while let Some(&c) = body.get(i) {
        i += 1;
        match c {
            b'"' => {
                let start = i - 1;
                while let Some(&c) = body.get(i) {
                    i += if c == b'\\' { 2 } else { 1 };
                    if c == b'"' {
                        break;
                    }
                }
                last = body.get(start..i).unwrap_or_default();
                if let Some(cut) = signed(last).filter(|_| id) {
                    put(&mut out, &[body.get(copied..start + cut)?]);
                    copied = i - 1;
                }
                id = false;
            }
            b':' => id = IDS.contains(&last),
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => id = false,
        }
    }
    put(&mut out, &[body.get(copied..).filter(|_| copied > 0)?]);
    Some(out)
}

/// Where [`common::SIGNATURE`] is in `text`, if it is.
fn signed(text: &[u8]) -> Option<usize> {
    crate::bytes::find(text, common::SIGNATURE.as_bytes())
}

/// The `thoughtSignature` Google documents for a call Gemini did not make (another vendor's,
/// or written by hand): Gemini 3 refuses a step of the current turn whose first `functionCall`
/// part has no signature, and takes this one in its place.
pub const NO_SIGNATURE: &str = "\"skip_thought_signature_validator\"";

/// Whether Google checks the thought signatures of a request to `model`: Gemini 3's models and
/// whatever comes after them do; the 1.x and 2.x generations never did. A name of neither (an
/// alias such as `gemini-flash-latest`, a tuned model) counts as checked: a model that checks
/// refuses a step without it, and it is what Google documents for a call it did not sign.
pub fn checks_signatures(model: &str) -> bool {
    let generation = model.strip_prefix("gemini-").and_then(|m| m.bytes().next());
    !matches!(generation, Some(b'1' | b'2'))
}

/// The conversation as Gemini writes it: `systemInstruction`'s parts, and `contents` (one
/// turn per run of parts of one role, `user` or `model`).
pub struct Conversation<'a> {
    system: Out,
    turns: Out,
    open: Option<Role>,
    /// The open `model` turn (a step) has a `functionCall` part already.
    called: bool,
    /// The function calls so far (their ids and names as JSON strings): a result names its
    /// function, which Chat and Messages give by the call's id only.
    calls: Vec<(Cow<'a, str>, &'a str)>,
    /// Where the current turn starts in `turns`: at the last `user` text or image (Google's
    /// "current turn": the steps since the user last wrote; a function's result begins none).
    current: usize,
    /// Where a step's first call without a signature ends in `turns`: a step of the current
    /// turn gets Google's placeholder there ([`NO_SIGNATURE`], [`request`]).
    unsigned: Vec<usize>,
}

impl<'a> Conversation<'a> {
    pub fn with_capacity(n: usize) -> Conversation<'a> {
        Conversation {
            system: Out::default(),
            turns: Out::with_capacity(n),
            open: None,
            called: false,
            calls: Vec::new(),
            current: 0,
            unsigned: Vec::new(),
        }
    }

    /// Adds the next part of the conversation.
    pub fn push(&mut self, role: Role, part: &Part<'a>) {
        // Another vendor's reasoning: Gemini cannot read it.
        if role == Role::System || matches!(part, Part::Thinking(_)) {
            return self.write(Role::System, part);
        }
        if self.open != Some(role) {
            if self.open.is_some() {
                self.turns.close_arr().close();
            }
            let name = if role == Role::User {
                r#"{"role":"user","parts":["#
            } else {
                r#"{"role":"model","parts":["#
            };
            self.turns.raw(name);
            self.open = Some(role);
            self.called = false;
        }
        self.write(role, part);
    }

    fn write(&mut self, role: Role, part: &Part<'a>) {
        if role == Role::User && matches!(part, Part::Text(_) | Part::Image(_)) {
            self.current = self.turns.0.len();
        }
        let out = if role == Role::System {
            &mut self.system
        } else {
            &mut self.turns
        };
        match part {
            Part::Text(text) => {
                out.raw(r#"{"text":"#).raw(text);
            }
            Part::Image(url) => match common::split_data_uri(url) {
                Some((media_type, data)) => {
                    out.raw(r#"{"inlineData":{"mimeType":"#).str(media_type);
                    out.key("data").str(data).close();
                }
                None => {
                    out.raw(r#"{"fileData":{"fileUri":"#).str(url).close();
                }
            },
            Part::ToolCall { id, name, input } => {
                out.raw(r#"{"functionCall":{"name":"#).raw(name);
                out.key("args").raw(input.trim()).close();
                // The signature Gemini gave the call, in the id it gave the caller; a step's
                // first call without one (another vendor's) may need Google's placeholder.
                match id.split_once(common::SIGNATURE) {
                    Some((_, signature)) => {
                        out.key("thoughtSignature").str(signature);
                    }
                    None if !self.called => self.unsigned.push(out.0.len()),
                    None => {}
                }
                self.called = true;
                self.calls.push((id.clone(), name));
            }
            Part::Thinking(_) => return,
            Part::ToolResult {
                id,
                content,
                blocks,
            } => {
                out.raw(r#"{"functionResponse":{"name":"#);
                match self.calls.iter().rev().find(|(call, _)| call == id) {
                    Some((_, name)) => out.raw(name),
                    None => out.str(id),
                };
                out.raw(r#""response":{"result":"#);
                match (content.as_slice(), blocks) {
                    ([], _) => {
                        out.raw(super::json::EMPTY);
                    }
                    ([text], false) => {
                        out.raw(text);
                    }
                    (texts, _) => {
                        out.open_arr();
                        for text in texts {
                            out.raw(text);
                        }
                        out.close_arr();
                    }
                }
                out.close().close();
            }
        }
        out.close();
    }
}

/// The `generateContent` request to `model`: the conversation and the rest of the request (no
/// `model` and no `stream`: both are in the path). Google's placeholder signature goes on the
/// first unsigned call of each step of the current turn only (the turns before it are not
/// checked), and only for a model that checks ([`checks_signatures`]).
pub fn request(mut conversation: Conversation<'_>, req: &Request<'_>, model: &str) -> Vec<u8> {
    let (system, turns) = (&conversation.system, &mut conversation.turns);
    if conversation.open.is_some() {
        turns.close_arr().close();
    }
    let mut out = Out::with_capacity(turns.0.len() + system.0.len() + 256);
    out.raw(r#"{"contents":["#);
    let mut from = 0;
    if checks_signatures(model) {
        for &at in conversation
            .unsigned
            .iter()
            .filter(|&&at| at > conversation.current)
        {
            let before = turns.0.get(from..at).unwrap_or_default();
            put(
                &mut out.0,
                &[before, b",\"thoughtSignature\":", NO_SIGNATURE.as_bytes()],
            );
            from = at;
        }
    }
    out.0
        .extend_from_slice(turns.0.get(from..).unwrap_or_default());
    out.close_arr();
    if !system.0.is_empty() {
        out.raw(r#""systemInstruction":{"parts":["#)
            .0
            .extend_from_slice(&system.0);
        out.close_arr().close();
    }
    if !req.tools.is_empty() {
        out.raw(r#""tools":[{"functionDeclarations":["#);
        for tool in &req.tools {
            out.open().key("name").raw(tool.name);
            if let Some(description) = tool.description {
                out.key("description").raw(description);
            }
            // JSON Schema as written (`parameters` takes only Google's OpenAPI subset).
            if let Some(schema) = tool.schema {
                out.key("parametersJsonSchema").raw(schema);
            }
            out.close();
        }
        out.close_arr().close().close_arr();
        if let Some(choice) = &req.choice {
            let mode = match choice.kind {
                "\"none\"" => "\"NONE\"",
                "\"any\"" | "\"tool\"" => "\"ANY\"",
                _ => "\"AUTO\"",
            };
            out.raw(r#""toolConfig":{"functionCallingConfig":{"mode":"#)
                .raw(mode);
            if let Some(name) = choice.name {
                out.key("allowedFunctionNames").open_arr().raw(name);
                out.close_arr();
            }
            out.close().close();
        }
    }
    let config = req.max_tokens.is_some()
        || req.temperature.is_some()
        || req.top_p.is_some()
        || req.top_k.is_some()
        || !req.stops.is_empty();
    if config {
        out.key("generationConfig").open();
        common::Sampling {
            max_tokens: "maxOutputTokens",
            top_p: "topP",
            top_k: Some("topK"),
            stop: Some("stopSequences"),
        }
        .write(&mut out, req);
        out.close();
    }
    out.close();
    out.0
}

/// The model's stop reason for Gemini's `finishReason` (`called`: the answer called
/// functions, which Gemini ends with `STOP`). Its safety and policy stops are refusals.
fn stop(reason: &[u8], called: bool) -> Stop {
    match reason {
        b"MAX_TOKENS" => Stop::MaxTokens,
        b"SAFETY"
        | b"RECITATION"
        | b"BLOCKLIST"
        | b"PROHIBITED_CONTENT"
        | b"SPII"
        | b"IMAGE_SAFETY" => Stop::Refusal,
        _ if called => Stop::ToolUse,
        _ => Stop::End,
    }
}

/// `usageMetadata`: `promptTokenCount` counts the cached tokens too
/// (`cachedContentTokenCount`); the output is the candidates' and the thoughts' tokens, the
/// thoughts' its reasoning.
#[inline(never)]
fn usage_of(usage: &[u8]) -> Usage {
    let [prompt, output, cached, thoughts] = pick(
        usage,
        [
            b"promptTokenCount",
            b"candidatesTokenCount",
            b"cachedContentTokenCount",
            b"thoughtsTokenCount",
        ],
    );
    let n = |v| number(v).unwrap_or(0);
    Usage::from_openai(
        n(prompt),
        n(output).saturating_add(n(thoughts)),
        n(cached),
        0,
    )
    .with_reasoning(n(thoughts))
}

/// Whether a JSON object is a `GenerateContentResponse` (or Google's error).
pub fn is_response(data: &[u8]) -> bool {
    let [candidates, usage, feedback, error] = pick(
        data,
        [b"candidates", b"usageMetadata", b"promptFeedback", b"error"],
    );
    candidates.starts_with(b"[")
        || usage.starts_with(b"{")
        || feedback.starts_with(b"{")
        || error.starts_with(b"{")
}

/// A whole answer (`generateContent`'s JSON) read into the model's events, from its start to
/// its end (`false`: not a Gemini answer, nothing was passed).
pub fn answer(body: &[u8], on: &mut dyn FnMut(Event<'_>)) -> bool {
    if !is_response(body) || pick(body, [b"error"])[0].starts_with(b"{") {
        return false;
    }
    let mut state = State::default();
    state.chunk(body, on);
    state.stop_block(on);
    if !state.ends.stopped {
        on(Event::Stop(state.stop));
    }
    on(Event::End);
    true
}

/// A Gemini stream (`data:` lines, each a whole `GenerateContentResponse`) read into the
/// model's events, whatever the chunk boundaries. It has no end marker: the stream's end,
/// after a `finishReason`, is the answer's end.
#[derive(Debug, Default)]
pub struct Decoder {
    sse: Reader,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    started: bool,
    /// The open text block's index.
    text: Option<u64>,
    blocks: u64,
    calls: u64,
    stop: Stop,
    ends: sse::Ends,
}

impl Decoder {
    /// The finish reason came.
    pub fn stopped(&self) -> bool {
        self.state.ends.stopped
    }

    /// Reads the next chunk (`end`: the last), passing each event to `on`.
    pub fn push(&mut self, chunk: &[u8], end: bool, on: &mut dyn FnMut(Event<'_>)) {
        self.sse.decode(&mut self.state, chunk, end, on);
    }
}

impl sse::Decode for State {
    fn ends(&mut self) -> &mut sse::Ends {
        &mut self.ends
    }

    fn event(&mut self, e: sse::Event<'_>, on: &mut dyn FnMut(Event<'_>)) {
        self.chunk(e.data, on);
    }
}

impl State {
    /// One `GenerateContentResponse`: its first candidate's parts (thoughts skipped), its
    /// finish reason, its usage (each chunk's is the total so far), a blocked prompt, or an
    /// error.
    fn chunk(&mut self, data: &[u8], on: &mut dyn FnMut(Event<'_>)) {
        let [candidates, usage, feedback, error, id, model] = pick(
            data,
            [
                b"candidates",
                b"usageMetadata",
                b"promptFeedback",
                b"error",
                b"responseId",
                b"modelVersion",
            ],
        );
        if error.starts_with(b"{") {
            self.ends.done = true;
            let error = common::provider_error(data).unwrap_or_default();
            return on(Event::Error {
                kind: error.kind.as_deref(),
                message: error.message.as_deref(),
            });
        }
        if !std::mem::replace(&mut self.started, true) {
            on(Event::Start { id, model });
        }
        let mut reason = None;
        if let Some(candidate) = elements(candidates).next() {
            let [content, finish] = pick(candidate, [b"content", b"finishReason"]);
            for part in elements(pick(content, [b"parts"])[0]) {
                let [text, call, thought, signature] = pick(
                    part,
                    [b"text", b"functionCall", b"thought", b"thoughtSignature"],
                );
                if thought == b"true" {
                    continue;
                }
                if let Some(text) = RawStr::of(text).filter(|t| !t.is_empty()) {
                    let index = match self.text {
                        Some(index) => index,
                        None => self.start(Block::Text, on),
                    };
                    self.text = Some(index);
                    on(Event::Text {
                        index,
                        text: text.0,
                    });
                } else if call.starts_with(b"{") {
                    self.call(call, signature, id, on);
                }
            }
            reason = RawStr::of(finish).map(|r| r.inner());
        }
        let [blocked] = pick(feedback, [b"blockReason"]);
        if RawStr::of(blocked).is_some() {
            reason = Some(b"SAFETY");
        }
        if usage.starts_with(b"{") {
            on(Event::Usage(usage_of(usage)));
        }
        if let Some(reason) = reason.filter(|_| !self.ends.stopped) {
            self.stop_block(on);
            self.ends.stopped = true;
            self.stop = stop(reason, self.calls > 0);
            on(Event::Stop(self.stop));
        }
    }

    /// A function call (whole in one part): a block of its own. Gemini's calls have no id
    /// unless it gives one: one is made of the answer's id and the call's number. The part's
    /// `thoughtSignature` (Gemini 3 wants it back with the call) travels in the id the caller
    /// gets, after [`common::SIGNATURE`], in base64url (valid in every dialect's ids; Google's JSON
    /// parser takes base64url for bytes).
    #[inline(never)]
    fn call(
        &mut self,
        call: &[u8],
        signature: &[u8],
        response_id: &[u8],
        on: &mut dyn FnMut(Event<'_>),
    ) {
        let [name, args, id] = pick(call, [b"name", b"args", b"id"]);
        let signature = RawStr::of(signature).map_or(&b""[..], RawStr::inner);
        let mut made = Vec::new();
        let id = match RawStr::of(id) {
            Some(id) if signature.is_empty() => id.0,
            given => {
                made.push(b'"');
                match given {
                    Some(id) => made.extend_from_slice(id.inner()),
                    None => {
                        let answer = RawStr(response_id).inner();
                        let answer =
                            common::tool_id(std::str::from_utf8(answer).unwrap_or_default());
                        let k = Digits::of(self.calls);
                        put(&mut made, &[b"call_", answer.as_bytes(), b"_", k.get()]);
                    }
                }
                if !signature.is_empty() {
                    made.extend_from_slice(common::SIGNATURE.as_bytes());
                    made.extend(signature.iter().filter(|&&b| b != b'=').map(|&b| match b {
                        b'+' => b'-',
                        b'/' => b'_',
                        b => b,
                    }));
                }
                made.push(b'"');
                &made
            }
        };
        self.calls += 1;
        let index = self.start(Block::ToolCall { id, name }, on);
        let args = std::str::from_utf8(args)
            .ok()
            .filter(|a| a.starts_with('{'));
        let mut json = Out::with_capacity(args.map_or(4, str::len) + 8);
        json.str(args.unwrap_or("{}"));
        on(Event::Arguments {
            index,
            json: &json.0,
        });
        on(Event::BlockStop { index });
    }

    /// Stops the open block and starts the next: its index.
    fn start(&mut self, block: Block<'_>, on: &mut dyn FnMut(Event<'_>)) -> u64 {
        self.stop_block(on);
        let index = self.blocks;
        self.blocks += 1;
        on(Event::BlockStart { index, block });
        index
    }

    fn stop_block(&mut self, on: &mut dyn FnMut(Event<'_>)) {
        if let Some(index) = self.text.take() {
            on(Event::BlockStop { index });
        }
    }
}

mod caller;
pub use caller::*;
