//! The response side of an attempt: what its answer's headers and the start of its body say
//! (docs/behaviour.md sections 3, 5, 13 and 16), and how a translated answer goes back.

use super::{Attempt, Translation};
use crate::classify::{classify_no_response, Class, NoResponse};
use crate::config::Config;
use crate::failing_answer::{self, StreamStart, BODY_PREFIX_LIMIT};
use crate::header_pairs::HeaderPairs;
use crate::retry_after;
use crate::translate::{self, Api};

/// How a translated attempt's answer goes back to the caller (behaviour.md 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerTranslation {
    /// Held whole, then replaced by `translate::response` (its length changes: no
    /// `content-length`; JSON whatever the provider sent).
    Whole { status: u16 },
    /// A `200` event stream: each chunk through a `translate::StreamTranslator`.
    Stream,
}

/// How the answer of translated attempt `t` with `status` goes back to the caller;
/// `event_stream` reads whether it is an event stream.
pub fn answer_translation(status: u16, event_stream: impl FnOnce() -> bool) -> AnswerTranslation {
    if status == 200 && event_stream() {
        AnswerTranslation::Stream
    } else {
        AnswerTranslation::Whole { status }
    }
}

/// Translated attempt `t`'s whole `2xx` answer (`status`, `body`), decided (behaviour.md 16): a
/// `server_error` when it is no answer of the provider's API (the caller, if it gets it, gets
/// a `502` in its own API: [`UNREADABLE_STATUS`]), else a success, translated.
fn whole_answer(t: Translation, status: u16, body: &[u8], created: u64) -> Decided {
    let translated = translate::response(t.provider, t.caller, status, body, created);
    let (class, to_caller) = if translated.unreadable {
        (Class::ServerError, UNREADABLE_STATUS)
    } else {
        (Class::Ok, status)
    };
    Decided {
        class,
        status,
        read_delay: translated.unreadable,
        answer: Some(WholeAnswer {
            status: to_caller,
            body: translated.body,
        }),
    }
}
/// What an attempt's answer (or its absence) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub class: Class,
    /// The response status; `None` when no response headers came.
    pub status: Option<u16>,
    /// The delay the answer asked for (see [`delay_source`]).
    pub retry_after_ms: Option<u64>,
    /// For an in-place retry ([`is_retry_in_place`]), the class the try before it failed with
    /// (`handoff::Outcomes`, read only for a retry): the request counts once toward the
    /// breaker (behaviour.md 16).
    pub first_try: Option<Class>,
}

/// Which response headers tell how long a failing provider wants to be left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelaySource {
    /// Read nothing (successes, and classes no delay applies to).
    Nothing,
    /// `Retry-After` and the `X-RateLimit-Reset*` family (`retry_after::rate_limit_delay`).
    RateLimitHeaders,
    /// `Retry-After` alone (`retry_after::parse_retry_after`).
    RetryAfter,
}

pub fn delay_source(class: Class) -> DelaySource {
    match class {
        Class::RateLimited | Class::QuotaExhausted => DelaySource::RateLimitHeaders,
        Class::Overloaded | Class::ServerError => DelaySource::RetryAfter,
        _ => DelaySource::Nothing,
    }
}

/// The delay a failing answer asked for, read from the headers `source` names
/// ([`delay_source`]; `now_ms`: for `Retry-After` dates and resets): `map` reads the whole
/// response header map (`header_pairs` layout), `retry_after` the `Retry-After` header.
pub fn requested_delay(
    source: DelaySource,
    now_ms: u64,
    map: impl FnOnce() -> Vec<u8>,
    retry_after: impl FnOnce() -> Option<Vec<u8>>,
) -> Option<u64> {
    match source {
        DelaySource::Nothing => None,
        DelaySource::RateLimitHeaders => {
            // A provider's header values may hold any bytes: skip what is not text.
            let map = map();
            let headers = HeaderPairs::new(&map).into_iter().filter_map(|(k, v)| {
                Some((std::str::from_utf8(k).ok()?, std::str::from_utf8(v).ok()?))
            });
            retry_after::rate_limit_delay(headers, now_ms)
        }
        DelaySource::RetryAfter => retry_after()
            .and_then(|v| retry_after::parse_retry_after(std::str::from_utf8(&v).ok()?, now_ms)),
    }
}

/// The class of an attempt that ended without response headers, from what Envoy says about it
/// (`stream`: the request asked for a stream; its wait may be the first-token timeout).
pub fn no_response_class(
    config: &Config,
    stream: bool,
    transport_failure: bool,
    client_gone: bool,
    elapsed_ms: u64,
) -> Class {
    classify_no_response(&NoResponse {
        transport_failure,
        client_gone,
        elapsed_ms,
        attempt_timeout_ms: config.timeouts.headers_wait_ms(stream),
        stall_timeout_ms: config.timeouts.stall_ms,
    })
}

/// What to do with the retry marker response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// No response headers to mark.
    Untouched,
    /// Set it to `wire::RETRY_MARKER_RETRY`: the route's retry policy moves the request to the
    /// next planned provider.
    Set,
    /// Set it to "0": the answer falls over but no attempt is left (the route does not retry;
    /// the downstream role reads the chain as exhausted).
    Exhausted,
    /// Remove it: only the gateway marks answers, never a provider.
    Remove,
}

impl Marker {
    /// The header's value, or `None` to remove it; `Untouched` is not applied at all.
    pub fn value(self) -> Option<&'static str> {
        match self {
            Marker::Set => Some(crate::wire::RETRY_MARKER_RETRY),
            Marker::Exhausted => Some("0"),
            Marker::Untouched | Marker::Remove => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Holding an answer to read the start of its body (behaviour.md 3).

/// Why a response is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// A failing answer with this status whose body may refine its class.
    Body(u16),
    /// A `200` event stream, until its first complete event.
    Stream,
    /// A `200` event stream under a first-token timeout, until its first output
    /// ([`failing_answer::first_output`]); the timeout fires while it is held.
    FirstOutput,
    /// A translated attempt's whole `2xx` answer with this status, until its end: whether it
    /// is an answer of the provider's API decides its class (behaviour.md 16). The router buffers it
    /// whole for its translation in any case.
    Answer(u16),
}

/// What the upstream role reads of an answer's headers, from one read of the whole map (one
/// hostcall, where reading the status and removing a provider's marker took two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead<'m> {
    pub status: u16,
    pub content_type: Option<&'m [u8]>,
    /// The answer has no body: it ended with its headers, or says `content-length: 0`.
    pub empty: bool,
    /// The provider sent a header named like the gateway's retry marker (it must go).
    pub marker: bool,
    /// The class AWS's error type names (`failing_answer::header_class`), known without reading the
    /// body (behaviour.md 3).
    pub by_type: Option<Class>,
    /// It carries rate-limit headers a provider announces its quota with
    /// (`announced::is_rate_limit_header`): read them (`announced::read`).
    pub rate_limits: bool,
}

impl<'m> ResponseHead<'m> {
    /// Reads a serialized header map (`header_pairs` layout); `end_of_stream`: no body follows.
    pub fn read(map: &'m [u8], end_of_stream: bool) -> Self {
        let mut head = ResponseHead {
            status: 0,
            content_type: None,
            empty: end_of_stream,
            marker: false,
            by_type: None,
            rate_limits: false,
        };
        for (name, value) in crate::header_pairs::HeaderPairs::new(map) {
            match name {
                b":status" => {
                    head.status = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                }
                b"content-type" => head.content_type = Some(value),
                b"content-length" => head.empty |= value == b"0",
                b"x-amzn-errortype" => head.by_type = failing_answer::header_class(value),
                _ if name == crate::wire::RETRY_MARKER_HEADER.as_bytes() => head.marker = true,
                _ => head.rate_limits |= crate::announced::is_rate_limit_header(name),
            }
        }
        head
    }

    /// The class the status line and headers give attempt `a`'s answer: a `200` that is empty
    /// or not what a model endpoint answers with (an HTML page from a proxy in front of the
    /// provider) is a `server_error` (behaviour.md 3); requests without a model (other GETs) may get
    /// any content.
    pub fn class(&self, a: &Attempt<'_, '_>) -> Class {
        if let Some(class) = self.by_type.filter(|_| self.status >= 400) {
            return class;
        }
        let class = crate::classify::classify_status(self.status);
        let unreadable = self.status == 200
            && !a.plan.model.is_empty()
            && (self.empty
                || self
                    .content_type
                    .is_some_and(|t| !failing_answer::is_readable(t)));
        if unreadable {
            Class::ServerError
        } else {
            class
        }
    }
}

/// Whether the end of attempt `a`'s answer is watched for its final event (behaviour.md 5: a stream
/// cut short must not look complete): a streamed request's `200` event stream, with the API its
/// caller speaks (the error event of a stream cut short is in its dialect; Chat's for an
/// endpoint no translation knows).
pub fn watch_end(a: &Attempt<'_, '_>, head: &ResponseHead<'_>) -> Option<Api> {
    let event_stream = head
        .content_type
        .is_some_and(failing_answer::is_event_stream);
    (a.plan.stream && head.status == 200 && event_stream)
        .then(|| Api::of_path(a.plan.path).unwrap_or_default())
}

/// Whether to hold an answer to read the start of its body. A streamed request's `200` event
/// stream is held until its first event; a failing answer whose body may refine its class,
/// until the start of its body. Never when the configuration turns holding off (Envoy 1.36
/// crashes retrying a held answer: the renderer turns it off there).
pub fn hold(
    config: &Config,
    a: &Attempt<'_, '_>,
    head: &ResponseHead<'_>,
    end_of_stream: bool,
) -> Option<Hold> {
    if end_of_stream || !config.hold_answers {
        return None;
    }
    let event_stream = head
        .content_type
        .is_some_and(failing_answer::is_event_stream);
    let whole = a.translation.is_some() && (200..300).contains(&head.status);
    if whole && answer_translation(head.status, || event_stream) != AnswerTranslation::Stream {
        return Some(Hold::Answer(head.status));
    }
    if head.status == 200 {
        let first_token = config.timeouts.first_token(a.plan.stream).is_some();
        (a.plan.stream && event_stream).then_some(if first_token {
            Hold::FirstOutput
        } else {
            Hold::Stream
        })
    } else {
        let refinable = failing_answer::refinable(head.status) && head.by_type.is_none();
        refinable.then_some(Hold::Body(head.status))
    }
}

/// A gathered attempt's answer that is a `200` event stream (docs/behaviour.md section 5): the
/// provider's API (the stream's dialect) and the caller's, whose JSON answer it becomes.
pub fn gathers(a: &Attempt<'_, '_>, head: &ResponseHead<'_>) -> Option<(Api, Api)> {
    // Every answer asks: the plan's flag first, the content type only for a gathered request.
    if !a.plan.gather
        || head.status != 200
        || !head
            .content_type
            .is_some_and(failing_answer::is_event_stream)
    {
        return None;
    }
    let caller = (a.translation.map(|t| t.caller)).or_else(|| Api::of_path(a.plan.path))?;
    Some((a.translation.map_or(caller, |t| t.provider), caller))
}

/// The caller's one JSON answer from a gathered stream (`body`, all of it, in `provider`'s
/// dialect): `502` with the caller's error when the stream did not end with its answer.
pub fn gathered(provider: Api, caller: Api, body: &[u8], created: u64) -> WholeAnswer {
    match translate::assemble::stream_to_answer(provider, caller, &[body], created) {
        Some(body) => WholeAnswer { status: 200, body },
        None => WholeAnswer {
            status: UNREADABLE_STATUS,
            body: translate::unreadable(provider, caller),
        },
    }
}

/// Whether attempt `a`'s answer (`head`) is an AWS event stream to unwrap into SSE: a `200`
/// stream of a Bedrock provider.
pub fn unframes(a: &Attempt<'_, '_>, head: &ResponseHead<'_>) -> bool {
    head.status == 200
        && a.plan.stream
        && a.provider.envelope.is_some_and(|e| e.event_stream())
        && head.content_type.is_some_and(|v| {
            (v.get(..AWS_EVENT_STREAM.len()))
                .is_some_and(|p| p.eq_ignore_ascii_case(AWS_EVENT_STREAM))
        })
}

/// The content type of Bedrock's streamed answers.
const AWS_EVENT_STREAM: &[u8] = b"application/vnd.amazon.eventstream";

/// What a held answer's body decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub class: Class,
    pub status: u16,
    /// Read the delay the answer asked for (see [`delay_source`]).
    pub read_delay: bool,
    /// A whole translated answer ([`Hold::Answer`]), translated already: what the caller gets
    /// when it goes to the caller.
    pub answer: Option<WholeAnswer>,
}

/// A translated attempt's whole answer for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeAnswer {
    /// `502` when the provider's answer was no answer of its API (the caller never gets a
    /// success holding an error, behaviour.md 16); else the provider's.
    pub status: u16,
    /// In the caller's API: the answer, or the error saying it could not be translated.
    pub body: Vec<u8>,
}

/// The status a caller gets for a translated answer that could not be read.
pub const UNREADABLE_STATUS: u16 = 502;

impl Hold {
    /// How many bytes of the held body (`held` so far) to read now; `None` to wait for more
    /// (the start of a failing body, bounded by [`BODY_PREFIX_LIMIT`]). Until then the router
    /// buffers the answer; Envoy's per-try timers still run, so a body that never comes ends
    /// as a timeout.
    pub fn read_now(self, held: usize, end_of_stream: bool) -> Option<usize> {
        let enough = end_of_stream || held >= BODY_PREFIX_LIMIT;
        match self {
            // The whole answer, at its end.
            Hold::Answer(_) => end_of_stream.then_some(held),
            Hold::Body(_) if !enough => None,
            _ => Some(held.min(BODY_PREFIX_LIMIT)),
        }
    }

    /// What the start of the body (for [`Hold::Answer`], the whole body) says; `None` to keep
    /// holding (a stream's first event is not complete yet). `translation`: the attempt's, if
    /// translated; its streams must open with events of the provider's API, and its whole
    /// answers are translated here (`created`: for an OpenAI caller's answer). A translated
    /// answer that is no answer of its API is a `server_error` (behaviour.md 16).
    pub fn decide(
        self,
        body: &[u8],
        end_of_stream: bool,
        translation: Option<Translation>,
        created: u64,
    ) -> Option<Decided> {
        let start = match self {
            Hold::Body(status) => {
                return Some(Decided {
                    class: failing_answer::refine(status, body),
                    status,
                    read_delay: true,
                    answer: None,
                })
            }
            Hold::Answer(status) => {
                return translation.map(|t| whole_answer(t, status, body, created))
            }
            Hold::Stream | Hold::FirstOutput => {
                let until_output = self == Hold::FirstOutput;
                match (translation, until_output) {
                    (Some(t), _) => failing_answer::first_event_of(
                        |name, data| translate::is_stream_event(t.provider, name, data),
                        body,
                        end_of_stream,
                        until_output,
                    ),
                    (None, false) => failing_answer::first_event(body, end_of_stream),
                    (None, true) => failing_answer::first_output(body, end_of_stream),
                }
            }
        };
        let class = match start {
            StreamStart::NeedMore => return None,
            StreamStart::Healthy => Class::Ok,
            StreamStart::Error(class) => class,
            StreamStart::Unreadable => {
                // Nothing of it reached the caller: if it goes to the caller, it goes as the
                // error a whole answer that could not be read gets.
                let t = translation?;
                return Some(Decided {
                    class: Class::ServerError,
                    status: 200,
                    read_delay: false,
                    answer: Some(WholeAnswer {
                        status: UNREADABLE_STATUS,
                        body: translate::unreadable(t.provider, t.caller),
                    }),
                });
            }
        };
        Some(Decided {
            class,
            status: 200,
            read_delay: false,
            answer: None,
        })
    }
}
