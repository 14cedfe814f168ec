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
//!   carries the answer's usage. Gemini's native API writes `usageMetadata` into its JSON
//!   answer and into every stream chunk (cumulative: the last one counts).
//! - Only a stream line that begins with `data:` and has the dialect's usage member holding an
//!   object is read; a chunk is searched for the member's name (eight bytes at a time), not
//!   split into lines, and nothing of it is copied but a line a chunk boundary cuts.
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
//! `gen_ai.usage.input_tokens` and `output_tokens`. Gemini: `input` is `promptTokenCount`
//! (cached content included), `cached_input` `cachedContentTokenCount`, `output`
//! `candidatesTokenCount` + `thoughtsTokenCount` (its thinking, as OpenAI's
//! `completion_tokens` include the reasoning tokens).

use crate::bytes::{find_byte, find_pair, rfind_byte};
use crate::rewrite::Scanner;
use crate::translate::json::{self, Obj};
use crate::translate::sse::{last_line_start, line_end};

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
    /// Gemini's native API (`usageMetadata`, on the JSON answer and on every stream chunk:
    /// cumulative, the last one wins).
    Gemini,
    /// Bedrock's Converse API (`usage` with `inputTokens`, `outputTokens`,
    /// `cacheReadInputTokens`, `cacheWriteInputTokens`: the JSON answer's, and the stream's
    /// `metadata` event's once unwrapped). Counted as Anthropic's: the cache's reads and
    /// writes apart from `inputTokens`.
    Converse,
}

impl Dialect {
    /// The dialect of an answer to an untranslated request on `path`.
    pub fn of_path(path: &str) -> Dialect {
        let path = path
            .bytes()
            .position(|b| b == b'?')
            .and_then(|end| path.get(..end))
            .unwrap_or(path);
        if path.ends_with("/messages") {
            Dialect::AnthropicMessages
        } else if path.ends_with("/responses") {
            Dialect::OpenAiResponses
        } else if path.ends_with("enerateContent") && crate::translate::Api::of_path(path).is_some()
        {
            Dialect::Gemini
        } else {
            Dialect::OpenAiChat
        }
    }

    /// The member that holds its usage object, quotes included.
    fn key(self) -> &'static [u8] {
        match self {
            Dialect::Gemini => b"\"usageMetadata\"",
            _ => b"\"usage\"",
        }
    }

    /// Where a usage object's member `name` goes.
    fn slot(self, name: &[u8]) -> Option<Slot> {
        use Dialect::{
            AnthropicMessages as Messages, Gemini, OpenAiChat as Chat, OpenAiResponses as Responses,
        };
        Some(match (self, name) {
            (Chat, b"prompt_tokens") | (Responses | Messages, b"input_tokens") => Slot::Input,
            (Chat, b"completion_tokens") | (Responses | Messages, b"output_tokens") => Slot::Output,
            (Chat, b"prompt_tokens_details") | (Responses, b"input_tokens_details") => {
                Slot::Details
            }
            (Messages, b"cache_read_input_tokens") | (Gemini, b"cachedContentTokenCount") => {
                Slot::CacheRead
            }
            (Messages, b"cache_creation_input_tokens") => Slot::MoreInput,
            (Gemini, b"promptTokenCount") => Slot::Input,
            (Gemini, b"candidatesTokenCount") => Slot::Output,
            (Gemini, b"thoughtsTokenCount") => Slot::MoreOutput,
            (Dialect::Converse, b"inputTokens") => Slot::Input,
            (Dialect::Converse, b"outputTokens") => Slot::Output,
            (Dialect::Converse, b"cacheReadInputTokens") => Slot::CacheRead,
            (Dialect::Converse, b"cacheWriteInputTokens") => Slot::MoreInput,
            _ => return None,
        })
    }

    pub fn of_api(api: crate::translate::Api) -> Dialect {
        match api {
            crate::translate::Api::OpenAiChat => Dialect::OpenAiChat,
            crate::translate::Api::AnthropicMessages => Dialect::AnthropicMessages,
            crate::translate::Api::OpenAiResponses => Dialect::OpenAiResponses,
            crate::translate::Api::Gemini => Dialect::Gemini,
            crate::translate::Api::Converse => Dialect::Converse,
        }
    }
}

/// Where a member of a usage object goes in [`Fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Input,
    Output,
    CacheRead,
    MoreInput,
    MoreOutput,
    /// An object holding the cached input count (`cached_tokens`).
    Details,
}

/// The usage fields as a dialect names them; each `None` until reported. A later report
/// replaces only the fields it carries (Anthropic's `message_delta` is cumulative and may
/// carry only `output_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Fields {
    input: Option<u64>,
    output: Option<u64>,
    cache_read: Option<u64>,
    /// Input reported apart from `input`, not cached (Anthropic's cache writes).
    more_input: Option<u64>,
    /// Output reported apart from `output` (Gemini's thoughts).
    more_output: Option<u64>,
}

impl Fields {
    fn any(&self) -> bool {
        self.input.is_some()
            || self.output.is_some()
            || self.cache_read.is_some()
            || self.more_input.is_some()
            || self.more_output.is_some()
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
        take(&mut self.more_input, later.more_input);
        take(&mut self.more_output, later.more_output);
    }

    /// A count member's value (`Slot::Details` is read by the caller).
    fn set(&mut self, slot: Slot, n: Option<u64>) {
        match slot {
            Slot::Input => self.input = n,
            Slot::Output => self.output = n,
            Slot::CacheRead => self.cache_read = n,
            Slot::MoreInput => self.more_input = n,
            Slot::MoreOutput => self.more_output = n,
            Slot::Details => {}
        }
    }

    /// The usage object at the start of `usage` in `dialect`'s names, read in one pass, and
    /// its length (`None`: it is not one whole object).
    #[inline(never)]
    fn read(dialect: Dialect, usage: &[u8]) -> (Fields, Option<usize>) {
        let mut fields = Fields::default();
        let mut members = json::members(usage);
        for (name, value) in members.by_ref() {
            match dialect.slot(name) {
                Some(Slot::Details) => {
                    let [cached] = json::pick(value, [b"cached_tokens"]);
                    fields.cache_read = json::number(cached);
                }
                Some(slot) => fields.set(slot, json::number(value)),
                None => {}
            }
        }
        (fields, members.end())
    }

    #[inline(never)]
    fn usage(&self, dialect: Dialect) -> Usage {
        let at = |n: Option<u64>| n.unwrap_or(0);
        let (input, output, cached_input) = (at(self.input), at(self.output), at(self.cache_read));
        let (more_input, more_output) = (at(self.more_input), at(self.more_output));
        match dialect {
            // Cached tokens are counted inside the prompt's.
            Dialect::OpenAiChat | Dialect::OpenAiResponses => Usage {
                input,
                output,
                cached_input: cached_input.min(input),
            },
            // Reported apart: the input is the three together.
            Dialect::AnthropicMessages | Dialect::Converse => Usage {
                input: input
                    .saturating_add(cached_input)
                    .saturating_add(more_input),
                output,
                cached_input,
            },
            // The cached content is counted inside the prompt's; the thoughts are output (as
            // OpenAI's completion tokens include the reasoning ones, and as the translators
            // write them).
            Dialect::Gemini => Usage {
                input,
                output: output.saturating_add(more_output),
                cached_input: cached_input.min(input),
            },
        }
    }
}

/// The usage object an event of `dialect`'s stream carries, if any.
#[inline(never)]
fn event_usage<'a>(dialect: Dialect, event: &Obj<'a>) -> Option<&'a str> {
    match dialect {
        // Converse's `metadata` event (unwrapped: its payload is the data).
        Dialect::OpenAiChat | Dialect::Converse => event.get("usage"),
        Dialect::Gemini => event.get("usageMetadata"),
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
            How::Stream(lines) => lines.push(bytes, dialect.key(), |line| {
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
                let rest = lines.rest(dialect.key());
                if let Some(later) = rest.and_then(|line| stream_line(dialect, line)) {
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
    let name = dialect.key();
    let mut end = tail.len();
    // From the end, each place the key's rare fifth byte (`g`) is, then the key around it.
    while let Some(g) = rfind_byte(b'g', tail.get(..end)?) {
        end = g;
        let at = g.checked_sub(KEY_G)?; // no key starts before the first byte
        if tail.get(at..at + name.len()) != Some(name) || at > 0 && tail.get(at - 1) == Some(&b'\\')
        {
            continue;
        }
        if let Some(fields) = member_at(dialect, tail, at) {
            return Some(fields);
        }
    }
    None
}

/// The usage object of the member whose name (`dialect`'s usage key) starts at `at` in `doc`,
/// when it holds an object after which `doc` only closes its outermost object (so it is a
/// member of that object).
fn member_at(dialect: Dialect, doc: &[u8], at: usize) -> Option<Fields> {
    let mut s = Scanner::new(doc);
    s.i = at + dialect.key().len();
    s.skip_ws();
    if s.peek() != Some(b':') {
        return None;
    }
    s.i += 1;
    s.skip_ws();
    if s.peek() != Some(b'{') {
        return None;
    }
    // One walk reads the object's members and finds where it ends: the flat object the
    // providers write, else the JSON reader's walk.
    let object = doc.get(s.i..)?;
    let (fields, len) = match read_flat(dialect, object) {
        Some((fields, len)) => (fields, Some(len)),
        None => Fields::read(dialect, object),
    };
    s.i += len?;
    closes_the_document(&mut s).then_some(fields)
}

/// The usage object at the start of `b` when it is as flat as the providers write it (member
/// names without escapes; values unsigned integers, `null` or such an object, one level
/// deep), read in one cheap pass: its fields and its length. `None` for anything else, which
/// the JSON reader's walk reads ([`Fields::read`]).
fn read_flat(dialect: Dialect, b: &[u8]) -> Option<(Fields, usize)> {
    let mut f = Fields::default();
    let len = flat_object(b, 0, &mut |name, value, n| match dialect.slot(name) {
        Some(Slot::Details) => {
            flat_object(value, 1, &mut |name, _, n| {
                if name == b"cached_tokens" {
                    f.cache_read = n;
                }
            });
        }
        Some(slot) => f.set(slot, n),
        None => {}
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
                    n = n.and_then(|n| decimal(n, *d));
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

/// `n` with the decimal digit `d` after it, `None` past `u64::MAX` (a comparison, not a
/// checked multiplication: that is a 128-bit product in wasm).
fn decimal(n: u64, d: u8) -> Option<u64> {
    const MOST: u64 = u64::MAX / 10;
    let d = u64::from(d - b'0');
    (n < MOST || n == MOST && d <= u64::MAX % 10).then(|| n * 10 + d)
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

/// The usage fields of one stream line (without its line end) that begins with `data:` and
/// has the dialect's usage member holding an object ([`Lines`] hands on no other).
#[inline(never)]
fn stream_line(dialect: Dialect, line: &[u8]) -> Option<Fields> {
    let data = line.strip_prefix(b"data:")?;
    // OpenAI's and Gemini's usage member is the event's own, written last: read in place, as
    // a JSON answer's is, without reading the rest of the event.
    if matches!(dialect, Dialect::OpenAiChat | Dialect::Gemini) {
        if let Some(fields) = json_usage(dialect, data) {
            return Some(fields);
        }
    }
    let event = Obj::parse_bytes(data)?;
    let usage = event_usage(dialect, &event)?;
    Some(Fields::read(dialect, usage.as_bytes()).0)
}

/// Where the first member named `key` (quotes included) holding an object (`"usage": {`) is in
/// `hay`: OpenAI writes `"usage":null` into every chunk of a stream that asked for usage, and
/// only its last chunk's is an object, so the lines worth parsing are found without parsing
/// the others. A string's text cannot hold it (its quotes are escaped).
#[inline(never)]
fn usage_member(key: &[u8], hay: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = find_key(key, hay, from) {
        if holds_object(hay.get(at + key.len()..).unwrap_or_default()) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Whether what follows a member's name (`after`) makes it hold an object: `:` and `{`.
fn holds_object(after: &[u8]) -> bool {
    let mut after = after.iter();
    let mut next = || after.find(|b| !b.is_ascii_whitespace()).copied();
    next() == Some(b':') && next() == Some(b'{')
}

/// Where a usage key's (`"usage"`, `"usageMetadata"`) `g` is in it.
const KEY_G: usize = 4;

/// Where `key` (a usage key: `"usage"`, `"usageMetadata"`) next is in `hay`, from `from`: its
/// rare pair `ag` (fourth and fifth bytes) is looked for eight places at a time
/// ([`find_pair`]), then the key around it.
fn find_key(key: &[u8], hay: &[u8], from: usize) -> Option<usize> {
    let mut i = from + KEY_G - 1;
    while let Some(n) = find_pair(b'a', b'g', hay.get(i..)?) {
        let at = i + n + 1 - KEY_G;
        if hay.get(at..at + key.len()) == Some(key) {
            return Some(at);
        }
        i += n + 1;
    }
    None
}

/// An event stream's lines, carried across chunks: only lines that begin with `data:` and
/// hold the dialect's usage member ([`usage_member`]) are handed on (without their line end).
/// A chunk is searched for the usage key, not split into lines; only a line a chunk boundary
/// cuts is copied (carried to the next chunk). Line ends are found as every reader of an event
/// stream finds them (`translate::sse`: `\n`, `\r\n` or a lone `\r`).
#[derive(Debug, Default)]
struct Lines {
    /// The start of a line the last chunk cut.
    carry: Vec<u8>,
    /// The line being carried grew past [`MAX_LINE`]: the rest of it is skipped.
    skipping: bool,
}

impl Lines {
    #[inline(never)]
    fn push(&mut self, bytes: &[u8], key: &[u8], mut line: impl FnMut(&[u8])) {
        let mut rest = bytes;
        if !self.carry.is_empty() || self.skipping {
            // The carried line ends at the first line end of this chunk.
            let Some((end, len)) = line_end(rest) else {
                self.keep(rest);
                return;
            };
            let (head, tail) = (
                rest.get(..end).unwrap_or_default(),
                rest.get(end + len..).unwrap_or_default(),
            );
            if !self.skipping && self.carry.len() + head.len() <= MAX_LINE {
                self.carry.extend_from_slice(head);
                Self::one(&self.carry, key, &mut line);
            }
            self.carry.clear();
            self.skipping = false;
            rest = tail;
        }
        // `from`: where the search goes on; `done`: the end of the last line handed on.
        let (mut from, mut done) = (0, 0);
        while let Some(at) = find_key(key, rest, from) {
            from = at + key.len();
            if !holds_object(rest.get(from..).unwrap_or_default()) {
                // `"usage":null`, in every chunk of an OpenAI stream that asked for usage (or
                // a name the chunk's end cuts from its value: its line is carried whole, below).
                continue;
            }
            // Its line starts after the last line end before it.
            let start = done + rest.get(done..at).map_or(0, last_line_start);
            let Some((n, len)) = rest.get(at..).and_then(line_end) else {
                // Its line is cut by the chunk's end: it waits for the rest.
                self.keep(rest.get(start..).unwrap_or_default());
                return;
            };
            let l = rest.get(start..at + n).unwrap_or_default();
            if l.starts_with(b"data:") {
                line(l);
            }
            (from, done) = (at + n + len, at + n + len);
        }
        // The last line, when the chunk's end cuts it, waits for its end.
        let rest = rest.get(done..).unwrap_or_default();
        self.keep(rest.get(last_line_start(rest)..).unwrap_or_default());
    }

    /// Hands on one whole line (without its line end) when it is worth reading.
    fn one(l: &[u8], key: &[u8], line: &mut impl FnMut(&[u8])) {
        if l.starts_with(b"data:") && usage_member(key, l).is_some() {
            line(l);
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
    fn rest(&self, key: &[u8]) -> Option<&[u8]> {
        let rest = &self.carry[..];
        (!self.skipping && rest.starts_with(b"data:") && usage_member(key, rest).is_some())
            .then_some(rest)
    }
}

/// A line without its line end (`\n`, `\r\n`).
fn trim_line_end(l: &[u8]) -> &[u8] {
    let l = l.strip_suffix(b"\n").unwrap_or(l);
    l.strip_suffix(b"\r").unwrap_or(l)
}

/// An OpenAI Chat stream the filter asked usage of (`stream_options.include_usage`) for a
/// caller that did not (docs/behaviour.md section 15): gives the caller the bytes it would have
/// got without asking, as they pass. Asked, OpenAI adds `"usage":null` to every chunk and a
/// last chunk with `choices: []` and the usage; this takes the member out of every chunk and
/// leaves the usage chunk out (with its blank line), after [`Reader`] read it from the same
/// bytes. A line a chunk boundary cuts waits for its end (held back from the caller).
#[derive(Debug, Default)]
pub struct Unasked {
    /// The start of a line the last chunk cut.
    carry: Vec<u8>,
    /// The usage chunk was left out: its blank line goes too.
    dropped: bool,
}

impl Unasked {
    /// The caller's bytes for the next `chunk` of the provider's stream (`end`: the last);
    /// `None`: the chunk goes as it is (no usage member in it, no line cut).
    #[inline(never)]
    pub fn push(&mut self, chunk: &[u8], end: bool) -> Option<Vec<u8>> {
        const KEY: &[u8] = b"\"usage\"";
        let whole = chunk.last().map_or(true, |&b| b == b'\n') || end;
        if self.carry.is_empty() && !self.dropped && whole && find_key(KEY, chunk, 0).is_none() {
            return None;
        }
        let joined;
        let bytes = if self.carry.is_empty() {
            chunk
        } else {
            self.carry.extend_from_slice(chunk);
            joined = std::mem::take(&mut self.carry);
            &joined[..]
        };
        // The line the chunk's end cuts waits for its end (one too long to be a usage chunk
        // goes on as it is).
        let mut lines = bytes;
        if !end {
            let cut = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |n| n + 1);
            if let Some((head, tail)) = bytes.split_at_checked(cut) {
                if tail.len() <= MAX_LINE {
                    self.carry = tail.to_vec();
                    lines = head;
                }
            }
        }
        let mut out = Vec::with_capacity(lines.len());
        while !lines.is_empty() {
            let n = find_byte(b'\n', lines).map_or(lines.len(), |n| n + 1);
            let (line, rest) = lines.split_at(n);
            self.line(line, &mut out);
            lines = rest;
        }
        Some(out)
    }

    /// One line, its line end included.
    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        const KEY: &[u8] = b"\"usage\"";
        let text = trim_line_end(line);
        if std::mem::take(&mut self.dropped) && text.is_empty() {
            return; // the left-out chunk's blank line
        }
        if !text.starts_with(b"data:") || find_key(KEY, text, 0).is_none() {
            out.extend_from_slice(line);
        } else if usage_member(KEY, text).is_some() && no_choices(text) {
            // The usage chunk (its `choices` empty): the caller did not ask for it.
            self.dropped = true;
        } else {
            // `"usage":null` (as OpenAI writes it, or with spaces): the member and its comma go.
            match null_usage_member(line) {
                Some(span) => {
                    out.extend_from_slice(line.get(..span.start).unwrap_or_default());
                    out.extend_from_slice(line.get(span.end..).unwrap_or_default());
                }
                None => out.extend_from_slice(line),
            }
        }
    }
}

/// A `data:` line's chunk has `choices` and it is empty (OpenAI's usage chunk). A chunk with a
/// usage object beside its choices, or without any, is the provider's own: it goes on.
fn no_choices(text: &[u8]) -> bool {
    use crate::translate::json;
    let [choices] = json::pick(text.get(5..).unwrap_or_default(), [b"choices"]);
    choices.first() == Some(&b'[') && json::elements(choices).next().is_none()
}

/// Where `,"usage":null` (or `"usage":null,` when first) is in a chunk's line, spaces allowed.
fn null_usage_member(line: &[u8]) -> Option<std::ops::Range<usize>> {
    let at = find_key(b"\"usage\"", line, 0)?;
    let ws = |i: usize| line.get(i).is_some_and(u8::is_ascii_whitespace);
    let mut end = at + b"\"usage\"".len();
    while ws(end) {
        end += 1;
    }
    if line.get(end) != Some(&b':') {
        return None;
    }
    end += 1;
    while ws(end) {
        end += 1;
    }
    if line.get(end..end + 4) != Some(b"null") {
        return None;
    }
    end += 4;
    // A comma before it (a later member), else after it (the first member).
    let mut start = at;
    while start > 0 && ws(start - 1) {
        start -= 1;
    }
    if start > 0 && line.get(start - 1) == Some(&b',') {
        return Some(start - 1..end);
    }
    while ws(end) {
        end += 1;
    }
    (line.get(end) == Some(&b',')).then_some(at..end + 1)
}

#[cfg(test)]
mod byte_tests {
    /// A digit appended is the checked arithmetic's result, to `u64::MAX` and past it.
    #[test]
    fn a_decimal_digit_appended_is_checked_arithmetic() {
        let most = u64::MAX / 10;
        for n in [0, 1, 7, most - 1, most, most + 1, u64::MAX / 2, u64::MAX] {
            for d in b'0'..=b'9' {
                let checked = n
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(d - b'0')));
                assert_eq!(super::decimal(n, d), checked, "{n} {d}");
            }
        }
    }
}

#[cfg(test)]
mod unasked_tests {
    use super::*;

    fn filter(stream: &str, cuts: &[usize]) -> String {
        let bytes = stream.as_bytes();
        let mut f = Unasked::default();
        let mut out = Vec::new();
        let mut last = 0;
        for &cut in cuts.iter().chain([&bytes.len()]) {
            let cut = cut.clamp(last, bytes.len());
            let chunk = &bytes[last..cut];
            match f.push(chunk, cut == bytes.len()) {
                Some(o) => out.extend_from_slice(&o),
                None => out.extend_from_slice(chunk),
            }
            last = cut;
        }
        String::from_utf8(out).unwrap()
    }

    const ASKED: &str = concat!(
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \\\"usage\\\":null\"}}],\"usage\":null}\n\n",
        "data: {\"usage\": null, \"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12}}\n\n",
        "data: [DONE]\n\n"
    );
    const UNASKED: &str = concat!(
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \\\"usage\\\":null\"}}]}\n\n",
        "data: { \"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );

    #[test]
    fn the_caller_gets_the_stream_it_would_have_got_without_asking() {
        for cut in 0..=ASKED.len() {
            assert_eq!(filter(ASKED, &[cut]), UNASKED, "cut at {cut}");
        }
        let crlf = ASKED.replace('\n', "\r\n");
        assert_eq!(filter(&crlf, &[40, 41, 200]), UNASKED.replace('\n', "\r\n"));
        // Usage read from the same bytes still counts it.
        let mut r = Reader::new(Dialect::OpenAiChat, true);
        r.push(ASKED.as_bytes());
        assert_eq!(r.finish().map(|u| u.output), Some(12));
        // A stream without usage passes unchanged, and whole chunks without it untouched.
        let plain = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
        assert_eq!(filter(plain, &[5]), plain);
        // A usage object the provider sends with its choices, or in a chunk without any, is
        // its own: it goes on as it is.
        let own = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"error\":0}}\n\n",
            "data: [DONE]\n\n"
        );
        assert_eq!(filter(own, &[30]), own);
        assert_eq!(Unasked::default().push(plain.as_bytes(), false), None);
    }

    // Host only: proptest is not built for wasm32.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn any_chunk_boundaries_give_the_unasked_stream(
            cuts in proptest::collection::vec(0usize..400, 0..8),
        ) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            proptest::prop_assert_eq!(filter(ASKED, &cuts), UNASKED);
        }
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
    fn converse_usage_is_in_the_json_and_in_the_metadata_event() {
        // The cache's reads and writes come apart from inputTokens: the input is the three.
        let json = r#"{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":"t","name":"f","input":{"usage":{"inputTokens":999}}}}]}},"stopReason":"tool_use","usage":{"inputTokens":21,"outputTokens":9,"totalTokens":1530,"cacheReadInputTokens":1400,"cacheWriteInputTokens":100},"metrics":{"latencyMs":412}}"#;
        assert_eq!(read(Dialect::Converse, false, json), usage(1521, 9, 1400));
        // The stream unwrapped from its AWS framing: the metadata event's usage.
        let stream = concat!(
            "event: messageStart\ndata: {\"role\":\"assistant\"}\n\n",
            "event: contentBlockDelta\ndata: {\"contentBlockIndex\":0,\"delta\":{\"text\":\"\\\"usage\\\": 5\"}}\n\n",
            "event: messageStop\ndata: {\"stopReason\":\"end_turn\"}\n\n",
            "event: metadata\ndata: {\"usage\":{\"inputTokens\":7,\"outputTokens\":2,\"totalTokens\":9,\"cacheReadInputTokens\":3},\"metrics\":{\"latencyMs\":1}}\n\n",
        );
        assert_eq!(read(Dialect::Converse, true, stream), usage(10, 2, 3));
        assert_eq!(
            Dialect::of_api(crate::translate::Api::Converse),
            Dialect::Converse
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

    fn worth(line: &[u8]) -> bool {
        usage_member(b"\"usage\"", line).is_some()
    }

    #[test]
    fn only_a_usage_object_is_worth_parsing() {
        assert!(worth(
            br#"data: {"choices":[],"usage":{"prompt_tokens":1}}"#
        ));
        assert!(worth(br#"data: {"usage" :  {"prompt_tokens":1}}"#));
        assert!(!worth(br#"data: {"choices":[{"delta":{}}],"usage":null}"#));
        // A `"usage"` that is a string's text, not a member, is not one either.
        assert!(!worth(br#"data: {"delta":{"content":"\"usage\" is"}}"#));
        assert!(worth(
            br#"data: {"usage":null,"x":{"usage":{"input_tokens":1}}}"#
        ));
    }

    #[test]
    fn gemini_json_counts_thoughts_as_output_and_cached_content_inside_the_prompt() {
        let answer = concat!(
            "{\n  \"candidates\": [{\"content\": {\"parts\": [{\"text\": \"a \\\"usageMetadata\\\": {}\"},",
            " {\"functionCall\": {\"name\": \"f\", \"args\": {\"usageMetadata\": {\"promptTokenCount\": 9}}}}],",
            " \"role\": \"model\"}, \"finishReason\": \"STOP\", \"index\": 0}],\n",
            "  \"usageMetadata\": {\n    \"promptTokenCount\": 120,\n    \"candidatesTokenCount\": 18,\n",
            "    \"totalTokenCount\": 160,\n    \"cachedContentTokenCount\": 100,\n    \"thoughtsTokenCount\": 22,\n",
            "    \"promptTokensDetails\": [{\"modality\": \"TEXT\", \"tokenCount\": 120}]\n  },\n",
            "  \"modelVersion\": \"gemini-2.5-flash\",\n  \"responseId\": \"mAitaLmkHPPlz7IPvtfUqQ4\"\n}\n"
        );
        assert_eq!(read(Dialect::Gemini, false, answer), usage(120, 40, 100));
        let plain = r#"{"candidates":[],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":2,"totalTokenCount":12}}"#;
        assert_eq!(read(Dialect::Gemini, false, plain), usage(10, 2, 0));
        // OpenAI's names are not Gemini's.
        let openai = r#"{"usage":{"prompt_tokens":1,"completion_tokens":2}}"#;
        assert_eq!(read(Dialect::Gemini, false, openai), None);
    }

    #[test]
    fn gemini_stream_takes_the_last_cumulative_usage_metadata() {
        let stream = concat!(
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Let me check\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 120,\"candidatesTokenCount\": 3,\"totalTokenCount\": 123},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r\"}\r\n\r\n",
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"thought\": true, \"text\": \"\\\"usageMetadata\\\": {\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 120,\"candidatesTokenCount\": 9,\"totalTokenCount\": 129},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r\"}\r\n\r\n",
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 120,\"candidatesTokenCount\": 18,\"totalTokenCount\": 160,\"cachedContentTokenCount\": 100,\"thoughtsTokenCount\": 22,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 120}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r\"}\r\n\r\n",
        );
        assert_eq!(read(Dialect::Gemini, true, stream), usage(120, 40, 100));
        assert_eq!(
            read(Dialect::Gemini, true, &stream.replace("\r\n", "\n")),
            usage(120, 40, 100)
        );
    }

    #[test]
    fn gemini_paths_name_their_dialect() {
        assert_eq!(
            Dialect::of_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
            Dialect::Gemini
        );
        assert_eq!(
            Dialect::of_path("/v1beta/models/gemini-2.5-flash:generateContent"),
            Dialect::Gemini
        );
        assert_eq!(
            Dialect::of_api(crate::translate::Api::Gemini),
            Dialect::Gemini
        );
    }

    #[test]
    fn the_key_search_finds_what_a_plain_search_finds() {
        let hay = b"xx\"usage\" \"usag\"usageMetadata\" g g \"usage\"".repeat(3);
        for key in [&b"\"usage\""[..], b"\"usageMetadata\""] {
            for from in 0..hay.len() {
                let plain = (from..hay.len()).find(|&i| hay.get(i..i + key.len()) == Some(key));
                assert_eq!(find_key(key, &hay, from), plain, "from {from}");
            }
        }
        for len in 0..20 {
            let mut hay = vec![b'a'; len];
            assert_eq!(find_byte(b'\n', &hay), None);
            for at in 0..len {
                hay.fill(b'a');
                hay[at] = b'\n';
                hay.push(b'\n');
                assert_eq!(find_byte(b'\n', &hay), Some(at));
                hay.pop();
            }
        }
        // A byte next to a match (0x0b after 0x0a) is not one (the word test's edge).
        assert_eq!(find_byte(b'\x0b', b"aaaa\n\x0baa"), Some(5));
        assert_eq!(
            find_byte(b'\n', b"\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\n"),
            Some(9)
        );
    }

    /// Streams of every dialect with the events that carry usage, among others.
    fn dialect_streams() -> Vec<(Dialect, String, Option<Usage>)> {
        let openai = concat!(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\\"usage\\\":{\"}}],\"usage\":null}\n\n",
            "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
            "data: [DONE]\n\n"
        );
        let anthropic = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n",
            "event: content_block_delta\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n",
            "event: message_delta\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n",
            "event: message_stop\n",
            "data: {\"type\":\"message_stop\"}\n\n"
        );
        let responses = concat!(
            "event: response.created\n",
            "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n",
            "event: response.completed\n",
            "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[],\"usage\":{\"input_tokens\":11,\"output_tokens\":5,\"input_tokens_details\":{\"cached_tokens\":2}}}}\n\n",
        );
        let gemini = concat!(
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"hi\"}]}}],\"usageMetadata\":{\"promptTokenCount\":7,\"candidatesTokenCount\":1}}\n\n",
            "data: {\"candidates\":[{\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":7,\"candidatesTokenCount\":3,\"thoughtsTokenCount\":2},\"modelVersion\":\"g\"}\n\n",
        );
        vec![
            (Dialect::OpenAiChat, openai.to_string(), usage(9, 12, 4)),
            (
                Dialect::AnthropicMessages,
                anthropic.to_string(),
                usage(125, 15, 100),
            ),
            (
                Dialect::OpenAiResponses,
                responses.to_string(),
                usage(11, 5, 2),
            ),
            (Dialect::Gemini, gemini.to_string(), usage(7, 5, 0)),
        ]
    }

    // Host only: proptest is not built for wasm32.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        /// A stream cut anywhere, into any number of chunks (the usage events split at any
        /// byte, a line over three chunks, empty chunks), its lines ending in LF, CRLF or CR,
        /// counts what it counts whole: no usage event is lost, none read twice.
        #[test]
        fn usage_survives_any_chunk_boundaries(
            which in 0usize..4,
            line_end in 0usize..3,
            cuts in proptest::collection::vec(0usize..2000, 0..12),
        ) {
            let (dialect, stream, expected) = dialect_streams().swap_remove(which);
            let stream = stream.replace('\n', LINE_ENDS[line_end]);
            let bytes = stream.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut r = Reader::new(dialect, true);
            let mut last = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                r.push(&bytes[last..cut]);
                last = cut;
            }
            proptest::prop_assert_eq!(r.finish(), expected);
        }
    }

    /// The line ends an event stream may use (the event-stream format).
    const LINE_ENDS: [&str; 3] = ["\n", "\r\n", "\r"];

    #[test]
    fn every_dialect_stream_survives_every_cut() {
        let streams = dialect_streams()
            .into_iter()
            .flat_map(|(dialect, stream, usage)| {
                LINE_ENDS.map(|end| (dialect, stream.replace('\n', end), usage))
            });
        for (dialect, stream, expected) in streams {
            assert_eq!(
                read(dialect, true, &stream),
                expected,
                "{dialect:?} {stream:?}"
            );
            // Three chunks: every pair of cuts.
            let bytes = stream.as_bytes();
            for a in 0..=bytes.len() {
                for b in (a..=bytes.len()).step_by(7) {
                    let mut r = Reader::new(dialect, true);
                    r.push(&bytes[..a]);
                    r.push(&bytes[a..b]);
                    r.push(&bytes[b..]);
                    assert_eq!(r.finish(), expected, "{dialect:?} cut at {a}, {b}");
                }
            }
        }
    }
}
