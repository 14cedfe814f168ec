//! What an answer cost (docs/behaviour.md section 15): the token usage a provider reports, read
//! from its own bytes in its own dialect as they pass, whatever the chunk boundaries.
//!
//! The glue (`roles::counting`) feeds [`Reader::push`] the bytes of the answer the caller
//! gets (in the provider's dialect: before any translation, after a Bedrock event stream is
//! unwrapped), as much of each chunk as [`Reader::wanted`] asks for, and asks
//! [`Reader::finish`] when the last chunk has passed. Nothing here knows proxy-wasm.
//!
//! - **JSON answers**: the providers write the usage member last (or followed by a few short
//!   members), so only the answer's last [`JSON_TAIL`] bytes are kept, across chunks, and read
//!   at its end: the last `"usage":{...}` member after which the document only closes its
//!   outermost object (its remaining members, the closing brace, the end), so a `usage` key
//!   nested in a tool call's input is not the answer's, nor one in a string. Read with the one
//!   JSON reader (`translate::json`, the request scanner's tokenizer).
//! - **Event streams**: only `data:` lines that contain `"usage"` are read (a delta's text
//!   cannot: its quotes are escaped); a line cut by a chunk boundary is carried to the next.
//!   OpenAI's last chunk carries the usage; Anthropic's `message_start` carries the input
//!   (and cache) counts and each `message_delta` the cumulative counts so far: a later value
//!   replaces an earlier one, deltas are never summed. OpenAI Responses' `response.completed`
//!   carries the answer's usage.
//!
//! # What the counts mean
//! `input` is every prompt token the provider read, whatever its rate: OpenAI's
//! `prompt_tokens` (cached ones included), Anthropic's `input_tokens` +
//! `cache_read_input_tokens` + `cache_creation_input_tokens` (Anthropic reports the three
//! apart). `cached_input` is the part of `input` read from the provider's cache (OpenAI's
//! `prompt_tokens_details.cached_tokens`, Anthropic's `cache_read_input_tokens`): it is
//! already inside `input`, never to be added to it. Tokens written to Anthropic's cache
//! (`cache_creation_input_tokens`) are input, not cached input. `output` is the completion's
//! tokens (`completion_tokens`, `output_tokens`). These are the OpenTelemetry GenAI meanings of
//! `gen_ai.usage.input_tokens` and `output_tokens`.

use crate::rewrite::Scanner;
use crate::translate::json::{self, Obj};

/// The tokens one answer cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    /// Part of `input`.
    pub cached_input: u64,
}

impl Usage {
    /// Every token the answer cost (input and output).
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cached_input = self.cached_input.saturating_add(other.cached_input);
    }

    /// The counts by kind, as the metric's `kind` label names them (**fixed** words).
    pub fn kinds(&self) -> [(Kind, u64); 3] {
        [
            (Kind::Input, self.input),
            (Kind::Output, self.output),
            (Kind::CachedInput, self.cached_input),
        ]
    }
}

/// The `kind` label of `llm_failover_tokens_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Input,
    Output,
    CachedInput,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Input, Kind::Output, Kind::CachedInput];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Input => "input",
            Kind::Output => "output",
            Kind::CachedInput => "cached_input",
        }
    }
}

/// How a provider's answer reports usage: one arm per provider dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI Chat Completions (and what speaks it: Azure OpenAI, vLLM, Gemini's OpenAI
    /// endpoint), also legacy completions and embeddings (`prompt_tokens`).
    OpenAiChat,
    /// Anthropic Messages (also Claude on Bedrock and Vertex).
    AnthropicMessages,
    /// OpenAI Responses (`input_tokens`, `output_tokens`, `input_tokens_details`).
    OpenAiResponses,
}

impl Dialect {
    /// The dialect of an answer to an untranslated request on `path`.
    pub fn of_path(path: &str) -> Dialect {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        if path.ends_with("/messages") {
            Dialect::AnthropicMessages
        } else if path.ends_with("/responses") {
            Dialect::OpenAiResponses
        } else {
            Dialect::OpenAiChat
        }
    }

    /// Its usage object's names of the input and output counts and of the object that holds
    /// the cached input count (Anthropic: none; it reports cache reads apart).
    fn names(self) -> (&'static [u8], &'static [u8], &'static [u8]) {
        match self {
            Dialect::OpenAiChat => (
                b"prompt_tokens",
                b"completion_tokens",
                b"prompt_tokens_details",
            ),
            Dialect::OpenAiResponses => {
                (b"input_tokens", b"output_tokens", b"input_tokens_details")
            }
            Dialect::AnthropicMessages => (b"input_tokens", b"output_tokens", b"-"),
        }
    }

    /// `None` for Gemini's native API (its `usageMetadata` is not read here yet).
    pub fn of_api(api: crate::translate::Api) -> Option<Dialect> {
        match api {
            crate::translate::Api::OpenAiChat => Some(Dialect::OpenAiChat),
            crate::translate::Api::AnthropicMessages => Some(Dialect::AnthropicMessages),
            crate::translate::Api::OpenAiResponses => Some(Dialect::OpenAiResponses),
            crate::translate::Api::Gemini => None,
        }
    }
}

/// The usage fields as a dialect names them; each `None` until reported. A later report
/// replaces only the fields it carries (Anthropic's `message_delta` is cumulative and may
/// carry only `output_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Fields {
    input: Option<u64>,
    output: Option<u64>,
    cache_read: Option<u64>,
    cache_creation: Option<u64>,
}

impl Fields {
    fn any(&self) -> bool {
        self.input.is_some()
            || self.output.is_some()
            || self.cache_read.is_some()
            || self.cache_creation.is_some()
    }

    fn merge(&mut self, later: Fields) {
        let take = |mine: &mut Option<u64>, theirs: Option<u64>| {
            if theirs.is_some() {
                *mine = theirs;
            }
        };
        take(&mut self.input, later.input);
        take(&mut self.output, later.output);
        take(&mut self.cache_read, later.cache_read);
        take(&mut self.cache_creation, later.cache_creation);
    }

    /// The usage object at the start of `usage` in `dialect`'s names, read in one pass, and
    /// its length (`None`: it is not one whole object).
    #[inline(never)]
    fn read(dialect: Dialect, usage: &[u8]) -> (Fields, Option<usize>) {
        let (input, output, details) = dialect.names();
        let anthropic = dialect == Dialect::AnthropicMessages;
        let mut fields = Fields::default();
        let mut members = json::members(usage);
        for (name, value) in members.by_ref() {
            let n = json::number(value);
            if name == input {
                fields.input = n;
            } else if name == output {
                fields.output = n;
            } else if name == details {
                let [cached] = json::pick(value, [b"cached_tokens"]);
                fields.cache_read = json::number(cached);
            } else if anthropic && name == b"cache_read_input_tokens" {
                fields.cache_read = n;
            } else if anthropic && name == b"cache_creation_input_tokens" {
                fields.cache_creation = n;
            }
        }
        (fields, members.end())
    }

    #[inline(never)]
    fn usage(&self, dialect: Dialect) -> Usage {
        let (input, output) = (self.input.unwrap_or(0), self.output.unwrap_or(0));
        let cached_input = self.cache_read.unwrap_or(0);
        match dialect {
            // Cached tokens are counted inside the prompt's.
            Dialect::OpenAiChat | Dialect::OpenAiResponses => Usage {
                input,
                output,
                cached_input: cached_input.min(input),
            },
            // Reported apart: the input is the three together.
            Dialect::AnthropicMessages => Usage {
                input: input
                    .saturating_add(cached_input)
                    .saturating_add(self.cache_creation.unwrap_or(0)),
                output,
                cached_input,
            },
        }
    }
}

/// The usage object an event of `dialect`'s stream carries, if any.
#[inline(never)]
fn event_usage<'a>(dialect: Dialect, event: &Obj<'a>) -> Option<&'a str> {
    match dialect {
        Dialect::OpenAiChat => event.get("usage"),
        Dialect::AnthropicMessages => match event.tag("type")? {
            "message_start" => event.obj("message")?.get("usage"),
            "message_delta" => event.get("usage"),
            _ => None,
        },
        Dialect::OpenAiResponses => match event.tag("type")? {
            "response.completed" | "response.incomplete" => event.obj("response")?.get("usage"),
            _ => None,
        },
    }
}

/// Bytes of a JSON answer's end kept to read its usage from (the providers write the usage
/// member last, or followed by a few short members).
pub const JSON_TAIL: usize = 4096;
/// Longest stream line carried across chunks (bytes); a longer line is not read (usage events
/// are a few hundred bytes; a Responses `response.completed` repeats the whole answer).
pub const MAX_LINE: usize = 256 * 1024;

/// Reads one answer's usage from its bytes as they pass.
#[derive(Debug)]
pub struct Reader {
    dialect: Dialect,
    fields: Fields,
    how: How,
}

#[derive(Debug)]
enum How {
    /// A JSON answer's last bytes (at most [`JSON_TAIL`]).
    Json(Vec<u8>),
    Stream(Lines),
}

impl Reader {
    /// A reader for an answer in `dialect`, an event stream or one JSON document.
    #[inline(never)]
    pub fn new(dialect: Dialect, stream: bool) -> Reader {
        Reader {
            dialect,
            fields: Fields::default(),
            how: if stream {
                How::Stream(Lines::default())
            } else {
                How::Json(Vec::new())
            },
        }
    }

    /// Which bytes of the next chunk (`len` long) to read and [`push`](Reader::push): the
    /// range from the returned offset to its end. A JSON answer's usage is at its end, so
    /// only its last [`JSON_TAIL`] bytes are wanted; a stream's every line may hold usage.
    pub fn wanted(&self, len: usize) -> usize {
        match self.how {
            How::Json(_) => len.saturating_sub(JSON_TAIL),
            How::Stream(_) => 0,
        }
    }

    /// The next bytes of the answer (right after the last ones pushed).
    #[inline(never)]
    pub fn push(&mut self, bytes: &[u8]) {
        let dialect = self.dialect;
        let fields = &mut self.fields;
        match &mut self.how {
            How::Json(tail) => {
                tail.extend_from_slice(bytes);
                let excess = tail.len().saturating_sub(JSON_TAIL);
                if excess > 0 {
                    tail.drain(..excess);
                }
            }
            How::Stream(lines) => lines.push(bytes, |line| {
                if let Some(later) = stream_line(dialect, line) {
                    fields.merge(later);
                }
            }),
        }
    }

    /// Like [`push`](Reader::push), taking bytes the caller owns (a JSON answer's first
    /// read is kept as it is, not copied).
    pub fn push_owned(&mut self, bytes: Vec<u8>) {
        match &mut self.how {
            How::Json(tail) if tail.is_empty() && bytes.len() <= JSON_TAIL => *tail = bytes,
            _ => self.push(&bytes),
        }
    }

    /// Bytes of the answer went by unread (the start of a chunk [`wanted`](Reader::wanted)
    /// left out): what is kept does not join what comes next.
    pub fn skip(&mut self) {
        match &mut self.how {
            How::Json(tail) => tail.clear(),
            How::Stream(lines) => {
                lines.carry.clear();
                lines.skipping = true;
            }
        }
    }

    /// The answer's usage once its last byte has passed; `None` when it reported none.
    #[inline(never)]
    pub fn finish(&mut self) -> Option<Usage> {
        let dialect = self.dialect;
        match &mut self.how {
            How::Json(tail) => {
                self.fields.merge(json_usage(dialect, tail)?);
            }
            How::Stream(lines) => {
                // A last event with no newline after it still counts.
                if let Some(later) = lines.rest().and_then(|line| stream_line(dialect, line)) {
                    self.fields.merge(later);
                }
            }
        }
        self.fields.any().then(|| self.fields.usage(dialect))
    }
}

/// The top-level `usage` object of a JSON answer, from the answer's last bytes (`tail`): the
/// last `"usage":{...}` member after which the document only closes its outermost object
/// (its remaining members read as such, then the closing brace and the end), so a `usage` key
/// nested in a tool call's input is not the answer's, nor is one in a string (its quotes are
/// escaped).
#[inline(never)]
fn json_usage(dialect: Dialect, tail: &[u8]) -> Option<Fields> {
    const NAME: &[u8] = b"\"usage\"";
    let mut end = tail.len();
    while let Some(at) = tail.get(..end)?.iter().rposition(|&b| b == b'"') {
        end = at;
        if tail.get(at..at + NAME.len()) != Some(NAME) || at > 0 && tail.get(at - 1) == Some(&b'\\')
        {
            continue;
        }
        let mut s = Scanner::new(tail);
        s.i = at + NAME.len();
        s.skip_ws();
        if s.peek() != Some(b':') {
            continue;
        }
        s.i += 1;
        s.skip_ws();
        if s.peek() != Some(b'{') {
            continue;
        }
        // One walk reads the object's members and finds where it ends: the flat object the
        // providers write, else the JSON reader's walk.
        let object = tail.get(s.i..)?;
        let (fields, len) = match read_flat(dialect, object) {
            Some((fields, len)) => (fields, Some(len)),
            None => Fields::read(dialect, object),
        };
        let Some(len) = len else { continue };
        s.i += len;
        if closes_the_document(&mut s) {
            return Some(fields);
        }
    }
    None
}

/// The usage object at the start of `b` when it is as flat as the providers write it (member
/// names without escapes; values unsigned integers, `null` or such an object, one level
/// deep), read in one cheap pass: its fields and its length. `None` for anything else, which
/// the JSON reader's walk reads ([`Fields::read`]).
fn read_flat(dialect: Dialect, b: &[u8]) -> Option<(Fields, usize)> {
    let anthropic = dialect == Dialect::AnthropicMessages;
    let mut f = Fields::default();
    let len = flat_object(b, 0, &mut |name, value, n| match name {
        b"prompt_tokens" | b"input_tokens" => f.input = n,
        b"completion_tokens" | b"output_tokens" => f.output = n,
        b"prompt_tokens_details" | b"input_tokens_details" if !anthropic => {
            flat_object(value, 1, &mut |name, _, n| {
                if name == b"cached_tokens" {
                    f.cache_read = n;
                }
            });
        }
        b"cache_read_input_tokens" if anthropic => f.cache_read = n,
        b"cache_creation_input_tokens" if anthropic => f.cache_creation = n,
        _ => {}
    })?;
    Some((f, len))
}

/// Walks the flat object at the start of `b` (see [`read_flat`]; `depth` 0 or 1), handing
/// each member's name, value and its number (when it is one) on; returns its length.
#[inline(never)]
fn flat_object<'a>(
    b: &'a [u8],
    depth: u8,
    member: &mut dyn FnMut(&'a [u8], &'a [u8], Option<u64>),
) -> Option<usize> {
    let ws = |mut i: usize| {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
            i += 1;
        }
        i
    };
    if b.first() != Some(&b'{') {
        return None;
    }
    let mut i = 1;
    let mut first = true;
    for _ in 0..b.len() {
        i = ws(i);
        if b.get(i) == Some(&b'}') {
            return Some(i + 1);
        }
        if !first {
            if b.get(i) != Some(&b',') {
                return None;
            }
            i = ws(i + 1);
        }
        first = false;
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let start = i + 1;
        let len = b
            .get(start..)?
            .iter()
            .position(|&c| c == b'"' || c == b'\\')?;
        let name = b.get(start..start + len)?;
        if b.get(start + len) != Some(&b'"') {
            return None;
        }
        i = ws(start + len + 1);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = ws(i + 1);
        let at = i;
        let mut number = None;
        match b.get(i)? {
            b'0'..=b'9' => {
                let mut n: Option<u64> = Some(0);
                while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
                    n = n.and_then(|n| n.checked_mul(10)?.checked_add(u64::from(d - b'0')));
                    i += 1;
                }
                number = n;
            }
            b'n' if b.get(i..i + 4) == Some(b"null") => i += 4,
            b'{' if depth == 0 => i += flat_object(b.get(i..)?, 1, &mut |_, _, _| {})?,
            _ => return None,
        }
        member(name, b.get(at..i)?, number);
    }
    None
}

/// Whether what follows a member of the outermost object is only its later members, its
/// closing brace and the end.
fn closes_the_document(s: &mut Scanner<'_>) -> bool {
    // The usage member is the last one (how the providers write it): the closing brace.
    if let Some(rest) = s.b.get(s.i..) {
        let rest = rest.trim_ascii();
        if rest == b"}" {
            return true;
        }
    }
    for _ in 0..s.b.len() {
        s.skip_ws();
        match s.peek() {
            Some(b'}') => {
                s.i += 1;
                s.skip_ws();
                return s.peek().is_none();
            }
            Some(b',') => {
                s.i += 1;
                s.skip_ws();
                if s.string().is_err() {
                    return false;
                }
                s.skip_ws();
                if s.peek() != Some(b':') {
                    return false;
                }
                s.i += 1;
                s.skip_ws();
                if s.value().is_err() {
                    return false;
                }
            }
            _ => return false,
        }
    }
    false
}

/// The usage fields of one stream line, when it is a `data:` line with usage.
#[inline(never)]
fn stream_line(dialect: Dialect, line: &[u8]) -> Option<Fields> {
    let data = line.strip_prefix(b"data:")?;
    let event = Obj::parse_bytes(data)?;
    let usage = event_usage(dialect, &event)?;
    Some(Fields::read(dialect, usage.as_bytes()).0)
}

/// Whether `hay` has a `"usage"` member holding an object (`"usage": {`): OpenAI writes
/// `"usage":null` into every chunk of a stream that asked for usage, and only its last chunk's
/// is an object, so the lines worth parsing are found without parsing the others.
#[inline(never)]
fn mentions_usage(hay: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"\"usage\"";
    let mut from = 0;
    while let Some(at) = hay
        .get(from..)
        .and_then(|rest| rest.iter().position(|&b| b == b'"'))
    {
        let at = from + at;
        if hay.get(at..at + NEEDLE.len()) == Some(NEEDLE) {
            let mut after = hay.get(at + NEEDLE.len()..).unwrap_or_default().iter();
            let mut next = || after.find(|b| !b.is_ascii_whitespace()).copied();
            if next() == Some(b':') && next() == Some(b'{') {
                return true;
            }
        }
        from = at + 1;
    }
    false
}

/// An event stream's lines, carried across chunks; only lines that mention usage are handed
/// on (without their line end).
#[derive(Debug, Default)]
struct Lines {
    /// The start of a line the last chunk cut.
    carry: Vec<u8>,
    /// The line being carried grew past [`MAX_LINE`]: the rest of it is skipped.
    skipping: bool,
}

impl Lines {
    #[inline(never)]
    fn push(&mut self, bytes: &[u8], mut line: impl FnMut(&[u8])) {
        let Some(last_newline) = bytes.iter().rposition(|&b| b == b'\n') else {
            self.keep(bytes);
            return;
        };
        let (complete, rest) = bytes.split_at(last_newline + 1);
        let mut complete = complete;
        if !self.carry.is_empty() || self.skipping {
            // The carried line ends at the first newline of this chunk.
            let end = complete.iter().position(|&b| b == b'\n').unwrap_or(0);
            let (head, tail) = complete.split_at(end + 1);
            if !self.skipping {
                self.carry.extend_from_slice(head);
                let carried = std::mem::take(&mut self.carry);
                Self::each(&carried, &mut line);
                self.carry = carried;
            }
            self.carry.clear();
            self.skipping = false;
            complete = tail;
        }
        Self::each(complete, &mut line);
        self.keep(rest);
    }

    /// Hands on the lines of `complete` (whole lines) that mention usage.
    fn each(complete: &[u8], line: &mut impl FnMut(&[u8])) {
        for l in complete.split(|&b| b == b'\n') {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            if l.starts_with(b"data:") && mentions_usage(l) {
                line(l);
            }
        }
    }

    fn keep(&mut self, part: &[u8]) {
        if self.skipping || part.is_empty() {
            return;
        }
        if self.carry.len() + part.len() > MAX_LINE {
            self.carry.clear();
            self.skipping = true;
            return;
        }
        self.carry.extend_from_slice(part);
    }

    /// The line left without a newline at the end of the stream.
    fn rest(&self) -> Option<&[u8]> {
        let rest = self.carry.strip_suffix(b"\r").unwrap_or(&self.carry);
        (!self.skipping && !rest.is_empty() && mentions_usage(rest)).then_some(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `answer` cut at every byte (two chunks), then in one piece; all must agree.
    fn read(dialect: Dialect, stream: bool, answer: &str) -> Option<Usage> {
        let bytes = answer.as_bytes();
        let mut whole = Reader::new(dialect, stream);
        whole.push(bytes);
        let expected = whole.finish();
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            let mut r = Reader::new(dialect, stream);
            r.push(a);
            r.push(b);
            assert_eq!(r.finish(), expected, "cut at {cut} of {answer}");
        }
        // And byte by byte.
        let mut r = Reader::new(dialect, stream);
        for b in bytes {
            r.push(std::slice::from_ref(b));
        }
        assert_eq!(r.finish(), expected, "byte by byte: {answer}");
        expected
    }

    fn usage(input: u64, output: u64, cached_input: u64) -> Option<Usage> {
        Some(Usage {
            input,
            output,
            cached_input,
        })
    }

    #[test]
    fn openai_chat_json() {
        let answer = r#"{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"a \"usage\": {\"prompt_tokens\": 99} b"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"completion_tokens":34,"total_tokens":1234,"prompt_tokens_details":{"cached_tokens":1024}},"system_fingerprint":"x"}"#;
        assert_eq!(
            read(Dialect::OpenAiChat, false, answer),
            usage(1200, 34, 1024)
        );
        let plain =
            r#"{ "choices" : [], "usage" : { "prompt_tokens" : 10 , "completion_tokens" : 1 } }"#;
        assert_eq!(read(Dialect::OpenAiChat, false, plain), usage(10, 1, 0));
        // Embeddings: prompt tokens only.
        let embeddings =
            r#"{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        assert_eq!(read(Dialect::OpenAiChat, false, embeddings), usage(8, 0, 0));
    }

    #[test]
    fn json_without_usage_or_with_null_usage_reports_none() {
        for answer in [
            r#"{"choices":[{"message":{"content":"hi"}}]}"#,
            r#"{"choices":[],"usage":null}"#,
            r#"{"usage":{}}"#,
            "not json",
            "",
        ] {
            assert_eq!(read(Dialect::OpenAiChat, false, answer), None, "{answer}");
        }
    }

    #[test]
    fn a_nested_usage_member_is_not_the_answers() {
        // Anthropic's tool input is an object: its own "usage" key is not the answer's.
        let answer = r#"{"content":[{"type":"tool_use","input":{"usage":{"input_tokens":999,"output_tokens":999}}}],"usage":{"input_tokens":5,"output_tokens":7}}"#;
        assert_eq!(
            read(Dialect::AnthropicMessages, false, answer),
            usage(5, 7, 0)
        );
        let only_nested =
            r#"{"content":[{"type":"tool_use","input":{"usage":{"input_tokens":999}}}]}"#;
        assert_eq!(read(Dialect::AnthropicMessages, false, only_nested), None);
        // Usage first, content after.
        let first =
            r#"{"usage":{"input_tokens":3,"output_tokens":4},"content":[{"input":{"usage":1}}]}"#;
        assert_eq!(
            read(Dialect::AnthropicMessages, false, first),
            usage(3, 4, 0)
        );
    }

    #[test]
    fn anthropic_json_counts_cache_reads_and_writes_as_input_once() {
        let answer = r#"{"id":"msg","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":20,"cache_creation_input_tokens":300,"cache_read_input_tokens":4000,"output_tokens":50}}"#;
        assert_eq!(
            read(Dialect::AnthropicMessages, false, answer),
            usage(4320, 50, 4000)
        );
    }

    #[test]
    fn openai_stream_reads_the_last_chunk_with_usage() {
        let stream = concat!(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"usage\\\"\"}}],\"usage\":null}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
            "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
            "data: [DONE]\n\n"
        );
        assert_eq!(read(Dialect::OpenAiChat, true, stream), usage(9, 12, 4));
        let crlf = stream.replace('\n', "\r\n");
        assert_eq!(read(Dialect::OpenAiChat, true, &crlf), usage(9, 12, 4));
        let unasked = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(read(Dialect::OpenAiChat, true, unasked), None);
        // A last event without its newline still counts.
        let cut = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}";
        assert_eq!(read(Dialect::OpenAiChat, true, cut), usage(1, 2, 0));
    }

    #[test]
    fn anthropic_stream_takes_message_start_then_the_last_cumulative_delta() {
        let stream = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":0,\"output_tokens\":1}}}\n\n",
            "event: content_block_delta\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\\\"usage\\\"\"}}\n\n",
            "event: message_delta\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null},\"usage\":{\"output_tokens\":10}}\n\n",
            "event: message_delta\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n",
            "event: message_stop\n",
            "data: {\"type\":\"message_stop\"}\n\n"
        );
        // Cumulative: 15, not 1 + 10 + 15.
        assert_eq!(
            read(Dialect::AnthropicMessages, true, stream),
            usage(125, 15, 100)
        );
        // A delta that repeats the input (newer API versions) replaces it.
        let with_input = concat!(
            "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
            "data: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":30,\"output_tokens\":7}}\n\n",
        );
        assert_eq!(
            read(Dialect::AnthropicMessages, true, with_input),
            usage(30, 7, 0)
        );
    }

    #[test]
    fn responses_usage_is_in_the_json_and_in_response_completed() {
        let json = r#"{"id":"resp","object":"response","output":[],"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":3},"output_tokens":5,"total_tokens":16}}"#;
        assert_eq!(read(Dialect::OpenAiResponses, false, json), usage(11, 5, 3));
        let stream = concat!(
            "event: response.created\n",
            "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n",
            "event: response.completed\n",
            "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":11,\"output_tokens\":5}}}\n\n",
        );
        assert_eq!(
            read(Dialect::OpenAiResponses, true, stream),
            usage(11, 5, 0)
        );
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_and_the_next_is_read() {
        let long = "x".repeat(MAX_LINE + 10);
        let mut r = Reader::new(Dialect::OpenAiChat, true);
        r.push(b"data: {\"usage\":{\"prompt_tokens\":1,");
        r.push(long.as_bytes());
        r.push(b"}}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3}}\n\n");
        assert_eq!(r.finish(), usage(2, 3, 0));
    }

    #[test]
    fn paths_name_their_dialect() {
        assert_eq!(Dialect::of_path("/v1/messages"), Dialect::AnthropicMessages);
        assert_eq!(
            Dialect::of_path("/v1/responses?x=1"),
            Dialect::OpenAiResponses
        );
        assert_eq!(
            Dialect::of_path("/v1/chat/completions"),
            Dialect::OpenAiChat
        );
        assert_eq!(Dialect::of_path("/v1/embeddings"), Dialect::OpenAiChat);
    }

    #[test]
    fn only_a_usage_object_is_worth_parsing() {
        assert!(mentions_usage(
            br#"data: {"choices":[],"usage":{"prompt_tokens":1}}"#
        ));
        assert!(mentions_usage(br#"data: {"usage" :  {"prompt_tokens":1}}"#));
        assert!(!mentions_usage(
            br#"data: {"choices":[{"delta":{}}],"usage":null}"#
        ));
        // A `"usage"` that is a string's text, not a member, is not one either.
        assert!(!mentions_usage(
            br#"data: {"delta":{"content":"\"usage\" is"}}"#
        ));
        assert!(mentions_usage(
            br#"data: {"usage":null,"x":{"usage":{"input_tokens":1}}}"#
        ));
    }
}
