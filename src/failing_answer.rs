//! Reading a failing answer's body (docs/behaviour.md section 3a): recognition rules as data, one table per
//! error shape (a provider family's way of writing errors), and the pure functions that apply them.
//!
//! * [`refine`]: (status, first bytes of the body) -> class. Only statuses for which some rule
//!   exists are worth reading ([`refinable`]); anything no rule recognises keeps its status class.
//! * [`first_event`]: the start of a `200 text/event-stream` answer -> release it, wait for more,
//!   or fail over because its first event is an error.
//!
//! A rule looks at the string value of one JSON member (`"code"`, `"type"`, `"message"`, ...)
//! anywhere in the bytes read, which may be a truncated prefix of the body: no JSON parse is
//! needed, and a key quoted inside some other string (`\"code\"`) is never taken for a member.
//! Text rules compare ASCII case-insensitively, and an apostrophe in a rule matches `'`, the
//! typographic `’` and `‘`, and their `\u2019` / `\u2018` escapes (Azure writes "Azure OpenAI’s
//! content management policy").
//!
//! Every table was written from the provider's documented (or widely reported) error bodies;
//! the unit tests below hold each rule against such a body and against near misses.

use crate::bytes::find;
use crate::classify::{classify_status, Class};
use crate::rewrite::{decoded_eq, unescape};
use crate::translate::json;

/// How many bytes of a failing answer are read before deciding (docs/behaviour.md section 3: 4 KiB).
pub const BODY_PREFIX_LIMIT: usize = 4096;

/// A provider family's way of writing errors (its error shape): not an API dialect
/// (`translate::Api`), since several APIs share one (Azure OpenAI, vLLM, Gemini's OpenAI
/// endpoint speak Chat Completions with errors of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    OpenAi,
    AzureOpenAi,
    Anthropic,
    /// vLLM and SGLang's OpenAI-compatible servers.
    VllmSglang,
    /// Gemini's OpenAI-compatible endpoint (`generativelanguage.googleapis.com/v1beta/openai`).
    GeminiOpenAi,
    /// AWS Bedrock: the error's type in the `x-amzn-errortype` header, `{"message"}` as body.
    Bedrock,
}

impl ErrorShape {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorShape::OpenAi => "openai",
            ErrorShape::AzureOpenAi => "azure_openai",
            ErrorShape::Anthropic => "anthropic",
            ErrorShape::VllmSglang => "vllm_sglang",
            ErrorShape::GeminiOpenAi => "gemini_openai",
            ErrorShape::Bedrock => "bedrock",
        }
    }
}

/// How a rule compares a member's string value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// The whole value equals the text (ASCII case-insensitive).
    Is(&'static str),
    /// The value contains the text (ASCII case-insensitive, apostrophes as described above).
    Has(&'static str),
}

/// One recognition rule: when the answer's status is one of `statuses` (or the answer is an
/// error event inside a `200` stream) and a member named `key` has a string value passing
/// `test`, the attempt's class is `class`. A rule whose `key` is [`ERROR_TYPE_HEADER`] reads
/// that response header instead, whatever the status (`statuses` empty): its class is known
/// from the headers, without holding the answer for its body ([`header_class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub statuses: &'static [u16],
    pub key: &'static str,
    pub test: Test,
    pub class: Class,
}

const CONTEXT: &[u16] = &[400, 413];
const CONTENT: &[u16] = &[400];
const QUOTA: &[u16] = &[400, 402, 403, 429];

const fn rule(statuses: &'static [u16], key: &'static str, test: Test, class: Class) -> Rule {
    Rule {
        statuses,
        key,
        test,
        class,
    }
}

use Class::QuotaExhausted as QUOTA_EXHAUSTED;
use Class::{ContentFiltered as CONTENT_FILTERED, ContextWindowExceeded as CONTEXT_WINDOW};
use Test::{Has, Is};

/// OpenAI: `{"error": {"message", "type", "param", "code"}}`.
pub const OPENAI: &[Rule] = &[
    // 400 "This model's maximum context length is 8192 tokens. However, your messages
    // resulted in 8215 tokens...", code context_length_exceeded.
    rule(
        CONTEXT,
        "code",
        Is("context_length_exceeded"),
        CONTEXT_WINDOW,
    ),
    // 400 from the Responses API and reasoning models: "Your input exceeds the context window
    // of this model."
    rule(
        CONTEXT,
        "message",
        Has("exceeds the context window"),
        CONTEXT_WINDOW,
    ),
    // 400 "Your request was rejected as a result of our safety system."
    rule(
        CONTENT,
        "code",
        Is("content_policy_violation"),
        CONTENT_FILTERED,
    ),
    // 400 "Invalid prompt: your prompt was flagged as potentially violating our usage policy."
    rule(
        CONTENT,
        "message",
        Has("flagged as potentially violating our usage policy"),
        CONTENT_FILTERED,
    ),
    // 429 "You exceeded your current quota, please check your plan and billing details."
    rule(QUOTA, "code", Is("insufficient_quota"), QUOTA_EXHAUSTED),
    rule(QUOTA, "type", Is("insufficient_quota"), QUOTA_EXHAUSTED),
    rule(
        QUOTA,
        "code",
        Is("billing_hard_limit_reached"),
        QUOTA_EXHAUSTED,
    ),
];

/// Azure OpenAI: OpenAI's shape; its content filter answers 400 with code `content_filter`
/// (and `innererror.code` `ResponsibleAIPolicyViolation`).
pub const AZURE_OPENAI: &[Rule] = &[
    rule(CONTENT, "code", Is("content_filter"), CONTENT_FILTERED),
    rule(
        CONTENT,
        "code",
        Is("ResponsibleAIPolicyViolation"),
        CONTENT_FILTERED,
    ),
    // The message alone, as some gateways re-wrap the error without its code.
    rule(
        CONTENT,
        "message",
        Has("triggering Azure OpenAI's content management policy"),
        CONTENT_FILTERED,
    ),
    rule(
        CONTEXT,
        "code",
        Is("context_length_exceeded"),
        CONTEXT_WINDOW,
    ),
];

/// Anthropic: `{"type": "error", "error": {"type", "message"}}`.
pub const ANTHROPIC: &[Rule] = &[
    // 400 invalid_request_error "prompt is too long: 208310 tokens > 200000 maximum".
    rule(
        CONTEXT,
        "message",
        Has("prompt is too long"),
        CONTEXT_WINDOW,
    ),
    // 400 "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000".
    rule(
        CONTEXT,
        "message",
        Has("exceed context limit"),
        CONTEXT_WINDOW,
    ),
    // 400 invalid_request_error "Output blocked by content filtering policy".
    rule(
        CONTENT,
        "message",
        Has("blocked by content filtering policy"),
        CONTENT_FILTERED,
    ),
    // 402 billing_error; 400 "Your credit balance is too low to access the Anthropic API."
    rule(QUOTA, "type", Is("billing_error"), QUOTA_EXHAUSTED),
    rule(
        QUOTA,
        "message",
        Has("credit balance is too low"),
        QUOTA_EXHAUSTED,
    ),
    // 400 "You have reached your specified API usage limits."
    rule(
        QUOTA,
        "message",
        Has("reached your specified API usage limits"),
        QUOTA_EXHAUSTED,
    ),
];

/// vLLM (`{"object": "error", "message", "type": "BadRequestError", "code": 400}`, newer
/// versions wrap it in `"error"`) and SGLang (`{"object": "error", "message", ...}`).
pub const VLLM_SGLANG: &[Rule] = &[
    // vLLM: "This model's maximum context length is 4096 tokens. However, you requested 5000
    // tokens..."; SGLang: "Requested token count exceeds the model's maximum context length of
    // 4096 tokens."
    rule(
        CONTEXT,
        "message",
        Has("maximum context length"),
        CONTEXT_WINDOW,
    ),
    // SGLang: "The input (5000 tokens) is longer than the model's context length (4096 tokens)."
    rule(
        CONTEXT,
        "message",
        Has("longer than the model's context length"),
        CONTEXT_WINDOW,
    ),
    // vLLM: "The decoder prompt (length 5000) is longer than the maximum model length of 4096."
    rule(
        CONTEXT,
        "message",
        Has("longer than the maximum model length"),
        CONTEXT_WINDOW,
    ),
];

/// Google's error shape, on Gemini's native API and its OpenAI-compatible endpoint alike:
/// `{"error": {"code": 400, "message", "status", "details"}}`, sometimes as a one-element list.
/// Its 429 `RESOURCE_EXHAUSTED` is used for per-minute limits too, so only a per-day quota id
/// means the quota is spent. A wrong or expired key is a `400 INVALID_ARGUMENT`, not a 401:
/// the gateway's setup all the same (another provider can answer), told by its `ErrorInfo`
/// reason or its message.
pub const GEMINI_OPENAI: &[Rule] = &[
    // "API key not valid. Please pass a valid API key.", reason API_KEY_INVALID (an expired
    // key: "API key expired. Please renew the API key.", the same reason); the message alone
    // when a proxy re-wraps the error without its details.
    rule(CONTENT, "reason", Is("API_KEY_INVALID"), Class::SetupFault),
    rule(
        CONTENT,
        "message",
        Has("API key not valid"),
        Class::SetupFault,
    ),
    // "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
    rule(
        CONTEXT,
        "message",
        Has("exceeds the maximum number of tokens allowed"),
        CONTEXT_WINDOW,
    ),
    // "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
    rule(QUOTA, "quotaId", Has("PerDay"), QUOTA_EXHAUSTED),
];

/// The response header where AWS names an error's type:
/// `ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/`.
pub const ERROR_TYPE_HEADER: &str = "x-amzn-errortype";

const fn aws(error_type: &'static str, class: Class) -> Rule {
    rule(&[], ERROR_TYPE_HEADER, Has(error_type), class)
}

/// AWS Bedrock (InvokeModel's documented errors): the type in [`ERROR_TYPE_HEADER`], the body
/// `{"message": "..."}`. Rules for the types whose status would mislead: a `408` model timeout
/// is a timeout, not the caller's mistake; a `424` model error is the provider's; a `400` spent
/// quota is not the caller's fault, a `429` model still loading not a rate limit. The others'
/// statuses say it already (`ThrottlingException` 429, `ServiceUnavailableException` 503,
/// `ResourceNotFoundException` 404, `InternalServerException` 500). AWS's credential and
/// signature errors are the gateway's setup whatever their status (AWS documents some as 400,
/// some as 403): a key AWS does not know, a wrong secret or signature, an expired session
/// token, a key without access.
pub const BEDROCK: &[Rule] = &[
    // UnrecognizedClientException; InvalidSignatureException, SignatureDoesNotMatch,
    // IncompleteSignature; MissingAuthenticationToken, InvalidClientTokenId,
    // ExpiredTokenException (no other Bedrock type has these words); AccessDeniedException.
    aws("UnrecognizedClient", Class::SetupFault),
    aws("Signature", Class::SetupFault),
    aws("Token", Class::SetupFault),
    aws("AccessDenied", Class::SetupFault),
    aws("ServiceQuotaExceeded", QUOTA_EXHAUSTED),
    aws("ModelNotReady", Class::Overloaded),
    aws("ModelTimeout", Class::Timeout),
    aws("ModelError", Class::ServerError),
    // 400 ValidationException "Input is too long for requested model." (Claude's own "prompt
    // is too long" comes as Anthropic's, above).
    rule(
        CONTEXT,
        "message",
        Has("input is too long for requested model"),
        CONTEXT_WINDOW,
    ),
    // Converse's ValidationException for Llama and the other vendors' models ("This model's
    // maximum context length is ...") is vLLM's rule's, below.
    // 400 ValidationException "This request has been blocked by our content filters."
    rule(
        CONTENT,
        "message",
        Has("blocked by our content filters"),
        CONTENT_FILTERED,
    ),
];

/// Every dialect's table, in the order they are tried (the first matching rule wins).
pub const TABLES: &[(ErrorShape, &[Rule])] = &[
    (ErrorShape::Bedrock, BEDROCK),
    (ErrorShape::OpenAi, OPENAI),
    (ErrorShape::AzureOpenAi, AZURE_OPENAI),
    (ErrorShape::Anthropic, ANTHROPIC),
    (ErrorShape::VllmSglang, VLLM_SGLANG),
    (ErrorShape::GeminiOpenAi, GEMINI_OPENAI),
];

/// Is a failing answer with this status worth reading (some rule applies to it)?
pub fn refinable(status: u16) -> bool {
    TABLES
        .iter()
        .any(|(_, rules)| rules.iter().any(|r| r.statuses.contains(&status)))
}

/// The class of an answer with `status` whose body starts with `body` (at most
/// [`BODY_PREFIX_LIMIT`] bytes are looked at): a rule's class when one recognises it, else the
/// status's own class.
pub fn refine(status: u16, body: &[u8]) -> Class {
    match_rules(Some(status), body).unwrap_or_else(|| classify_status(status))
}

/// The class an answer's [`ERROR_TYPE_HEADER`] value names, from the rules that read it.
pub fn header_class(error_type: &[u8]) -> Option<Class> {
    TABLES
        .iter()
        .flat_map(|(_, rules)| rules.iter())
        .find(|r| r.key == ERROR_TYPE_HEADER && passes(error_type, r.test))
        .map(|r| r.class)
}

/// The first rule (in [`TABLES`] order) that recognises `body`. `status` `None` means an error
/// event inside a `200` stream, where every rule applies.
pub fn match_rules(status: Option<u16>, body: &[u8]) -> Option<Class> {
    let body = body.get(..BODY_PREFIX_LIMIT).unwrap_or(body);
    TABLES
        .iter()
        .flat_map(|(_, rules)| rules.iter())
        .filter(|r| status.map_or(true, |s| r.statuses.contains(&s)))
        .find(|r| string_values(body, r.key).any(|v| passes(v, r.test)))
        .map(|r| r.class)
}

fn passes(value: &[u8], test: Test) -> bool {
    match test {
        Test::Is(text) => value.eq_ignore_ascii_case(text.as_bytes()),
        Test::Has(text) => contains_text(value, text.as_bytes()),
    }
}

/// The raw (still escaped) string values of every member named `key` in `body`. A value cut off
/// by the end of `body` is returned up to there.
fn string_values<'a>(body: &'a [u8], key: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    let key = key.as_bytes();
    let mut from = 0;
    std::iter::from_fn(move || {
        while let Some(at) = find(body.get(from..)?, key).map(|i| i + from) {
            from = at + key.len();
            let quoted = at > 0
                && body.get(at - 1) == Some(&b'"')
                && body.get(at + key.len()) == Some(&b'"')
                && !(at > 1 && body.get(at - 2) == Some(&b'\\'));
            if !quoted {
                continue;
            }
            let mut i = skip_ws(body, at + key.len() + 1);
            if body.get(i) != Some(&b':') {
                continue;
            }
            i = skip_ws(body, i + 1);
            if body.get(i) != Some(&b'"') {
                continue;
            }
            let start = i + 1;
            let mut j = start;
            while let Some(&c) = body.get(j) {
                match c {
                    b'\\' => j += 2,
                    b'"' => break,
                    _ => j += 1,
                }
            }
            let end = j.min(body.len());
            from = end;
            return body.get(start..end);
        }
        None
    })
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// Whether `needle` is in `haystack`, searched from its end (where a stream's final event
/// is): its last byte, eight bytes at a time, then the rest of it there.
#[inline(never)]
fn in_tail(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&last, rest)) = needle.split_last() else {
        return true;
    };
    let mut end = haystack.len();
    while let Some(at) = haystack
        .get(..end)
        .and_then(|h| crate::bytes::rfind_byte(last, h))
    {
        if at >= rest.len() && haystack.get(at - rest.len()..at) == Some(rest) {
            return true;
        }
        end = at;
    }
    false
}

/// Spellings of an apostrophe in provider messages: typographic quotes raw and JSON-escaped.
const APOSTROPHES: [&[u8]; 5] = [
    b"'",
    "\u{2019}".as_bytes(),
    "\u{2018}".as_bytes(),
    b"\\u2019",
    b"\\u2018",
];

/// Does `hay` contain `needle` (ASCII case-insensitive; `'` in `needle` matches any spelling in
/// [`APOSTROPHES`])?
fn contains_text(hay: &[u8], needle: &[u8]) -> bool {
    (0..hay.len()).any(|start| matches_at(hay, start, needle))
}

fn matches_at(hay: &[u8], mut i: usize, needle: &[u8]) -> bool {
    for &n in needle {
        if n == b'\'' {
            let Some(len) = APOSTROPHES.iter().find_map(|a| {
                let got = hay.get(i..i + a.len())?;
                (got.eq_ignore_ascii_case(a)).then_some(a.len())
            }) else {
                return false;
            };
            i += len;
        } else {
            match hay.get(i) {
                Some(c) if c.eq_ignore_ascii_case(&n) => i += 1,
                _ => return false,
            }
        }
    }
    true
}

// ---------------------------------------------------------------------------------------------
// The first event of a 200 stream.

/// Whether a `content-type` value announces an event stream (`text/event-stream`, any case,
/// parameters allowed).
pub fn is_event_stream(content_type: &[u8]) -> bool {
    content_type
        .get(..17)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"text/event-stream"))
}

/// Whether a `content-type` value is one a model endpoint answers with: JSON (any `+json` or
/// `ndjson` included) or an event stream (SSE, or AWS's binary `vnd.amazon.eventstream`).
/// Anything else (`text/html`, `text/plain`) is a proxy's page, not the provider's answer.
pub fn is_readable(content_type: &[u8]) -> bool {
    const READABLE: [&[u8]; 3] = [b"json", b"event-stream", b"eventstream"];
    READABLE.iter().any(|needle| {
        content_type
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
    })
}

/// What to do with the start of a `200 text/event-stream` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStart {
    /// No complete event yet: keep holding (the caller bounds this by size and end of stream).
    NeedMore,
    /// The first event is not an error: release everything held, byte for byte.
    Healthy,
    /// The first event is an error: fail over like an answer of this class.
    Error(Class),
    /// A translated stream that opens with an event not of its API ([`first_event_of`]): it
    /// cannot be translated, a `server_error` (behaviour.md 16).
    Unreadable,
}

/// Decides on a held stream from the bytes received so far. Decides at the first complete
/// event (a blank line: two line ends in a row, each `\r\n`, `\n` or `\r`), never later: with `end_of_stream`, or once `held` reaches
/// [`BODY_PREFIX_LIMIT`], the bytes so far are judged as they are.
pub fn first_event(held: &[u8], end_of_stream: bool) -> StreamStart {
    let event = match event_end(held) {
        Some((end, _)) => held.get(..end).unwrap_or(held),
        None if end_of_stream || held.len() >= BODY_PREFIX_LIMIT => {
            held.get(..BODY_PREFIX_LIMIT).unwrap_or(held)
        }
        None => return StreamStart::NeedMore,
    };
    match error_event(event) {
        Some(class) => StreamStart::Error(class),
        None => StreamStart::Healthy,
    }
}

/// Decides on a held stream under a first-token timeout (behaviour.md 5): healthy at the first event
/// that carries output (text, reasoning, a tool call, a refusal, or the answer's end), an
/// error at an error event before it; events before any output (OpenAI's role chunk,
/// Anthropic's `message_start` and `ping`) keep it held. With `end_of_stream`, or once `held`
/// reaches [`BODY_PREFIX_LIMIT`], what is held is released.
pub fn first_output(held: &[u8], end_of_stream: bool) -> StreamStart {
    let mut rest = held.get(..BODY_PREFIX_LIMIT).unwrap_or(held);
    while let Some((event, after)) = next_event(rest) {
        if let Some(class) = error_event(event) {
            return StreamStart::Error(class);
        }
        if is_output(event) {
            return StreamStart::Healthy;
        }
        rest = after;
    }
    if end_of_stream || held.len() >= BODY_PREFIX_LIMIT {
        StreamStart::Healthy
    } else {
        StreamStart::NeedMore
    }
}

/// Decides on a held stream of a translated attempt (behaviour.md 16): as [`first_event`] (or,
/// `until_output`, as [`first_output`]), except that every event before the decision must be
/// an event of the provider's API (`of_api(name, data)`: `translate::is_stream_event`, so this
/// module stays below the translators that use its classes): the first one
/// that is not (and is no error) makes the stream [`StreamStart::Unreadable`], as does a
/// stream that ends with none. Comment-only events (`: keep-alive`) are skipped. Once `held`
/// reaches [`BODY_PREFIX_LIMIT`] without a decision, what is held is released.
pub fn first_event_of(
    of_api: impl Fn(&[u8], &[u8]) -> bool,
    held: &[u8],
    end_of_stream: bool,
    until_output: bool,
) -> StreamStart {
    let mut rest = held.get(..BODY_PREFIX_LIMIT).unwrap_or(held);
    let mut seen = false;
    loop {
        // At the end of the stream an event without its blank line is taken as it is.
        let (event, after) = match next_event(rest) {
            Some(split) => split,
            None if end_of_stream && !rest.is_empty() => (rest, &b""[..]),
            None => break,
        };
        rest = after;
        let Some((name, data)) = event_fields(event) else {
            continue;
        };
        if let Some(class) = error_event(event) {
            return StreamStart::Error(class);
        }
        if !of_api(name, data) {
            return StreamStart::Unreadable;
        }
        seen = true;
        if !until_output || is_output(event) {
            return StreamStart::Healthy;
        }
    }
    match (end_of_stream, seen) {
        (true, false) => StreamStart::Unreadable,
        (true, true) => StreamStart::Healthy,
        _ if held.len() >= BODY_PREFIX_LIMIT => StreamStart::Healthy,
        _ => StreamStart::NeedMore,
    }
}

/// An SSE event's `event:` name (empty when it has none) and its first `data:` payload;
/// `None` for an event of comments (or other fields) only.
fn event_fields(event: &[u8]) -> Option<(&[u8], &[u8])> {
    let (mut name, mut data) = (None, None);
    for line in lines(event) {
        if let Some(n) = field(line, b"event") {
            name = name.or(Some(n));
        } else if let Some(d) = field(line, b"data") {
            data = data.or(Some(d));
        }
    }
    match (name, data) {
        (None, None) => None,
        (name, data) => Some((name.unwrap_or_default(), data.unwrap_or_default())),
    }
}

/// How much of a stream's end [`stream_complete`] needs: the final chunk and a usage chunk
/// after it fit.
pub const STREAM_TAIL: usize = 1024;

/// Whether a stream's last bytes (`tail`, at most [`STREAM_TAIL`]) hold its final event:
/// `[DONE]`, Anthropic's `message_stop` (or a `stop_reason`), Converse's `messageStop`, the Responses API's
/// `response.completed` / `.incomplete` / `.failed`, an error event, or a chunk with a
/// `finish_reason` (Gemini's `finishReason`: its stream has no end marker). A stream that ended
/// without one was cut short (behaviour.md 5).
pub fn stream_complete(tail: &[u8]) -> bool {
    [
        &b"[DONE]"[..],
        b"message_stop",
        b"messageStop",
        b"response.completed",
        b"response.incomplete",
        b"response.failed",
        b"event: error",
        b"\"error\"",
    ]
    .iter()
    .any(|marker| in_tail(tail, marker))
        || has_text(tail, b"\"finish_reason\"")
        || has_text(tail, b"\"stop_reason\"")
        || has_text(tail, b"\"finishReason\"")
}

pub use crate::translate::sse::{cut_stream_event, honest_end};
use crate::translate::sse::{event_end, lines};

/// The first complete SSE event of `bytes` and what follows it.
fn next_event(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (end, sep) = event_end(bytes)?;
    Some((bytes.get(..end)?, bytes.get(end + sep..)?))
}

/// Whether a (non-error) SSE event carries output or ends the answer.
fn is_output(event: &[u8]) -> bool {
    let mut data_output = false;
    for line in lines(event) {
        if let Some(name) = field(line, b"event") {
            // Anthropic's, the Responses API's and Converse's named events: only these come
            // before output.
            return !matches!(
                name,
                b"message_start"
                    | b"ping"
                    | b"messageStart"
                    | b"response.created"
                    | b"response.in_progress"
                    | b"response.output_item.added"
                    | b"response.content_part.added"
            );
        }
        if let Some(data) = field(line, b"data") {
            const OUTPUT: [&[u8]; 7] = [
                b"\"content\"",
                b"\"reasoning_content\"",
                b"\"reasoning\"",
                b"\"refusal\"",
                b"\"text\"",
                b"\"finish_reason\"",
                b"\"delta\"",
            ];
            data_output |= data == b"[DONE]"
                || OUTPUT.iter().any(|key| has_text(data, key))
                || find(data, b"\"tool_calls\"").is_some();
        }
    }
    data_output
}

/// Whether JSON text has a member named `quoted_key` (quotes included) whose value is a
/// non-empty string (a cheap scan, not a parse: it runs only until a stream's first output).
#[inline(never)]
fn has_text(json: &[u8], quoted_key: &[u8]) -> bool {
    let mut rest = json;
    while let Some(at) = find(rest, quoted_key) {
        rest = rest.get(at + quoted_key.len()..).unwrap_or_default();
        let value = rest
            .trim_ascii_start()
            .strip_prefix(b":")
            .map(<[u8]>::trim_ascii_start)
            .unwrap_or_default();
        if value.starts_with(b"\"") && !value.starts_with(b"\"\"") {
            return true;
        }
    }
    false
}

/// The class of an SSE event that reports an error, `None` for any other event. An error is an
/// `event: error` line (Anthropic, OpenAI Responses) or `event: response.failed` (Responses), or
/// a `data:` line holding a JSON object with a top-level `error` member, `"object": "error"`
/// (OpenAI-style frames from vLLM, SGLang and gateways) or `"type": "response.failed"`.
/// Its class is what the dialect rules recognise in it, else `overloaded`.
fn error_event(event: &[u8]) -> Option<Class> {
    let mut is_error = false;
    for line in lines(event) {
        if let Some(name) = field(line, b"event") {
            // The Responses API's `response.failed` is its stream's error too.
            is_error |= name == b"error" || name == b"response.failed";
        } else if let Some(data) = field(line, b"data") {
            // Cheap test first: a healthy chunk almost never holds the quoted word.
            if find(data, b"\"error\"").is_some() && data_is_error(data) {
                is_error = true;
            }
        }
    }
    is_error.then(|| match_rules(None, event).unwrap_or(Class::Overloaded))
}

/// The value of an SSE field line `name: value` (one optional space after the colon).
fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(name)?.strip_prefix(b":")?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// Whether an SSE `data` payload is a JSON object with an `error` member, or whose `object` or
/// `type` member is the string `"error"` (or `"response.failed"`), as parsing it into a
/// `serde_json::Value` judges it: every escape decoded, a repeated member counted by its last
/// occurrence, and anything serde_json refuses is no error. Read with the translators' walker
/// (`translate::json`), which validates as serde_json does but for three things
/// [`serde_json_refuses`] checks: a serde_json reader here would be a second copy of its parser
/// in the module beside the configuration's (about 4 KB).
fn data_is_error(data: &[u8]) -> bool {
    let Some(object) = json::Obj::parse_bytes(data) else {
        return false;
    };
    let is_error_text =
        |value| json::str(value).is_some_and(|text| text == "error" || text == "response.failed");
    let (mut error, mut object_is, mut type_is) = (false, false, false);
    for &(name, value) in object.members() {
        if decoded_eq(name, "error") {
            error = true;
        } else if decoded_eq(name, "object") {
            object_is = is_error_text(value);
        } else if decoded_eq(name, "type") {
            type_is = is_error_text(value);
        }
    }
    (error || object_is || type_is) && !serde_json_refuses(data)
}

/// What serde_json (1.x, without its `float_roundtrip` feature) refuses in JSON text that the
/// walker accepts (`text` is otherwise valid JSON): nesting 128 deep (the walker allows 512),
/// an escape that is not a character (an unpaired surrogate, `"\ud800"`), and a number that
/// its arithmetic takes beyond `f64` (`1e400`).
#[inline(never)]
fn serde_json_refuses(text: &[u8]) -> bool {
    if text.contains(&b'\\')
        && std::str::from_utf8(text).map_or(true, |t| unescape(t, |_| true).is_err())
    {
        return true;
    }
    let (mut depth, mut at) = (0u32, 0);
    while let Some(&c) = text.get(at) {
        match c {
            b'[' | b'{' => {
                depth += 1;
                if depth >= 128 {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'"' => {
                at += 1;
                while let Some(&c) = text.get(at).filter(|&&c| c != b'"') {
                    at += if c == b'\\' { 2 } else { 1 };
                }
            }
            b'-' | b'0'..=b'9' => {
                let (len, out_of_range) = number_out_of_range(text.get(at..).unwrap_or_default());
                if out_of_range {
                    return true;
                }
                at += len.saturating_sub(1);
            }
            _ => {}
        }
        at += 1;
    }
    false
}

/// The valid JSON number that `text` starts with: its length, and whether serde_json's reader
/// refuses it as out of range. Its steps: the digits accumulate into a `u64` significand until
/// the next would overflow it (later integer digits count as powers of ten, later fraction
/// digits are dropped), the exponent is added (a positive one past `i32` is out of range
/// unless the significand is 0), and the significand as `f64` times the power of ten (from a
/// table up to 1e308; beyond it, out of range unless 0) must not be infinite.
fn number_out_of_range(text: &[u8]) -> (usize, bool) {
    let digit = |at: usize| {
        text.get(at)
            .filter(|c| c.is_ascii_digit())
            .map(|c| u64::from(c - b'0'))
    };
    let mut at = usize::from(text.first() == Some(&b'-'));
    let (mut significand, mut exponent, mut full) = (0u64, 0i32, false);
    while let Some(d) = digit(at) {
        match significand.checked_mul(10).and_then(|s| s.checked_add(d)) {
            Some(next) if !full => significand = next,
            _ => {
                full = true;
                exponent = exponent.wrapping_add(1);
            }
        }
        at += 1;
    }
    if text.get(at) == Some(&b'.') {
        at += 1;
        full = false;
        while let Some(d) = digit(at) {
            match significand.checked_mul(10).and_then(|s| s.checked_add(d)) {
                Some(next) if !full => {
                    significand = next;
                    exponent = exponent.wrapping_sub(1);
                }
                _ => full = true,
            }
            at += 1;
        }
    } else if !matches!(text.get(at), Some(b'e' | b'E')) {
        return (at, false); // an integer: a u64, an i64 or an f64, never out of range
    }
    if matches!(text.get(at), Some(b'e' | b'E')) {
        at += 1;
        let positive = text.get(at) != Some(&b'-');
        at += usize::from(matches!(text.get(at), Some(b'+' | b'-')));
        let mut exp = Some(0i32);
        while let Some(d) = digit(at) {
            exp = exp
                .and_then(|e| e.checked_mul(10))
                .and_then(|e| e.checked_add(d as i32));
            at += 1;
        }
        let Some(exp) = exp else {
            return (at, significand != 0 && positive);
        };
        exponent = if positive {
            exponent.saturating_add(exp)
        } else {
            exponent.saturating_sub(exp)
        };
    }
    // serde_json's powers of ten from 1e289 on: below it no `u64` reaches infinity.
    const POW10: [f64; 20] = [
        1e289, 1e290, 1e291, 1e292, 1e293, 1e294, 1e295, 1e296, 1e297, 1e298, 1e299, 1e300, 1e301,
        1e302, 1e303, 1e304, 1e305, 1e306, 1e307, 1e308,
    ];
    let out_of_range = match usize::try_from(exponent)
        .ok()
        .and_then(|e| e.checked_sub(289))
    {
        _ if significand == 0 => false,
        Some(i) => POW10
            .get(i)
            .map_or(true, |pow| (significand as f64 * pow).is_infinite()),
        None => false,
    };
    (at, out_of_range)
}

#[cfg(test)]
mod tests;
