//! Translation between the APIs callers and providers speak (docs/behaviour.md section 13): OpenAI Chat
//! Completions, Anthropic Messages, OpenAI Responses and Gemini's native API, any to any, as
//! pure functions over bytes. The upstream role applies what they return; nothing here knows of
//! proxy-wasm.
//!
//! One module per dialect, reading and writing against one internal model ([`model`]): each
//! reads its caller's request into it and writes the model's answers, stream events and errors
//! in its shape ([`chat`], [`messages`], [`responses`], [`gemini`], their `caller` parts), and
//! writes a provider's request from it and reads that provider's answers and streams into it.
//! No pair of dialects has code of its own.
//!
//! Same-API attempts never reach this module (behaviour.md 13: they pay nothing for it).

pub mod assemble;
pub mod chat;
pub mod common;
pub mod converse;
pub mod entry_settings;
#[cfg(test)]
mod fixtures;
pub mod gemini;
pub(crate) mod json;
pub mod messages;
pub mod model;
mod request;
pub mod responses;
pub(crate) mod sse;
pub mod stream;

pub use request::{check, request};
pub use stream::StreamTranslator;

/// An API (wire dialect) a caller calls or a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Api {
    /// OpenAI Chat Completions (`/v1/chat/completions`), also spoken by Azure OpenAI, vLLM,
    /// SGLang and Gemini's OpenAI endpoint.
    #[default]
    OpenAiChat,
    /// Anthropic Messages (`/v1/messages`).
    AnthropicMessages,
    /// OpenAI Responses (`/v1/responses`): a caller dialect (providers declaring `api: openai`
    /// speak it as it is), and a provider dialect (`api: openai_responses`, models served only
    /// through it).
    OpenAiResponses,
    /// Gemini's native API (`models/{model}:generateContent`): a provider dialect
    /// (`api: gemini_native`, on Google AI and on Vertex AI).
    Gemini,
    /// Amazon Bedrock's Converse API (`/model/{modelId}/converse`): a provider dialect only
    /// (`api: bedrock_converse`); no caller speaks it ([`Api::of_path`] never gives it).
    Converse,
}

impl Api {
    /// The name configuration uses (`api: openai | anthropic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAiChat => "openai",
            Api::AnthropicMessages => "anthropic",
            Api::OpenAiResponses => "openai_responses",
            Api::Gemini => "gemini_native",
            Api::Converse => "bedrock_converse",
        }
    }

    /// Whether callers speak this API (every one but Converse, a provider dialect only).
    pub fn is_caller(self) -> bool {
        match self {
            Api::OpenAiChat | Api::AnthropicMessages | Api::OpenAiResponses | Api::Gemini => true,
            Api::Converse => false,
        }
    }

    pub fn parse(name: &str) -> Option<Api> {
        match name {
            "openai" => Some(Api::OpenAiChat),
            "anthropic" => Some(Api::AnthropicMessages),
            "openai_responses" => Some(Api::OpenAiResponses),
            _ => None,
        }
    }

    /// The API a caller speaks, from the path it called (a query is ignored; any prefix before
    /// the endpoint is allowed). `None` for every other endpoint (embeddings, completions,
    /// models): those are never translated.
    pub fn of_path(path: &str) -> Option<Api> {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        if path.ends_with("/chat/completions") {
            Some(Api::OpenAiChat)
        } else if path.ends_with("/messages") {
            Some(Api::AnthropicMessages)
        } else if path.ends_with("/responses") {
            Some(Api::OpenAiResponses)
        } else if gemini::path_model(path).is_some() {
            Some(Api::Gemini)
        } else {
            None
        }
    }

    /// The endpoint a caller called that no translation exists for but a provider of this
    /// API's family serves as it is (same bytes, `model` rewritten): OpenAI's embeddings and
    /// legacy completions for [`Api::OpenAiChat`] providers.
    pub fn family_endpoint(path: &str) -> Option<FamilyEndpoint> {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        if path.ends_with("/embeddings") {
            Some(FamilyEndpoint::Embeddings)
        } else if path.ends_with("/completions") && !path.ends_with("/chat/completions") {
            Some(FamilyEndpoint::Completions)
        } else {
            None
        }
    }

    /// The path an attempt in this API goes to (before the provider's `path_prefix`).
    pub fn endpoint(self) -> &'static str {
        match self {
            Api::OpenAiChat => "/v1/chat/completions",
            Api::AnthropicMessages => "/v1/messages",
            Api::OpenAiResponses => "/v1/responses",
            // Their envelopes write the path (the model is in it).
            Api::Gemini => "/v1beta/models",
            Api::Converse => "/model",
        }
    }
}

/// An OpenAI endpoint besides Chat Completions, served as it is by providers declaring
/// `api: openai` (see `config::Provider::translates` for which envelopes serve which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyEndpoint {
    /// `/v1/responses`.
    Responses,
    /// `/v1/embeddings`.
    Embeddings,
    /// `/v1/completions` (legacy text completions).
    Completions,
}

/// What a translated request needs besides the caller's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestContext<'a> {
    /// The model to write into the translated body (the chain entry's, else the caller's).
    pub model: &'a str,
    /// `max_tokens` for a Messages provider when the caller's request sets none (Messages
    /// requires it; the provider's configured default).
    pub default_max_tokens: u32,
    /// The caller asked for a stream (read for a Gemini caller, whose path says it).
    pub stream: bool,
}

/// Why a request cannot be sent to a provider of another API (behaviour.md 2.4: the entry is skipped
/// as `content_incompatible` before the first attempt, never discovered after sending).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untranslatable {
    /// The body is not a JSON object.
    NotJson,
    /// The request uses this field (or value) in a way the target API cannot carry, and
    /// dropping it would change the answer.
    Field(&'static str),
}

impl Untranslatable {
    /// What the `400 untranslatable_request` names (`Reply::untranslatable`).
    pub fn what(self) -> &'static str {
        match self {
            Untranslatable::NotJson => "the body is not a JSON object",
            Untranslatable::Field(field) => field,
        }
    }
}

/// The reason for a field the target cannot carry.
pub(crate) fn field(name: &'static str) -> Untranslatable {
    Untranslatable::Field(name)
}

/// A caller's body as a JSON object.
pub(crate) fn parse(body: &[u8]) -> Result<json::Obj<'_>, Untranslatable> {
    json::Obj::parse_bytes(body).ok_or(Untranslatable::NotJson)
}

/// A whole answer translated for the caller ([`response`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    /// What the caller gets: the answer or error in its API.
    pub body: Vec<u8>,
    /// The provider's `2xx` body is not an answer of its API (not JSON, or not a Messages
    /// answer / Chat completion): `body` is an error saying so, never a success (behaviour.md 16).
    pub unreadable: bool,
}

/// A whole (not streamed) answer of a provider speaking `provider`, in the `caller`'s API.
/// `status` is the provider's: 2xx bodies are answers, other bodies are errors (always given
/// back in the caller's error shape, even when they are not JSON). `created` (Unix seconds) is
/// the time an OpenAI answer reports (Anthropic's answers carry none).
pub fn response(provider: Api, caller: Api, status: u16, body: &[u8], created: u64) -> Translated {
    let (body, unreadable) = if provider == caller {
        (body.to_vec(), false)
    } else if !(200..300).contains(&status) {
        (caller_error(provider, caller, status, body), false)
    } else {
        match answer(provider, caller, body, created) {
            Some(answer) => (answer, false),
            None => (self::unreadable(provider, caller), true),
        }
    };
    Translated { body, unreadable }
}

/// A provider's `2xx` answer read into the model by its dialect and written by the caller's
/// (`None`: no answer of the provider's dialect). Gemini's answer is one stream chunk, read as
/// its events and gathered.
#[inline(never)]
fn answer(provider: Api, caller: Api, body: &[u8], created: u64) -> Option<Vec<u8>> {
    let answer = match provider {
        Api::Gemini => {
            let mut c = assemble::Collected::default();
            let read = gemini::answer(body, &mut |e| c.on(e));
            return read
                .then(|| assemble::whole(caller, &mut c, created))
                .flatten();
        }
        Api::OpenAiChat => chat::answer(body),
        Api::OpenAiResponses => responses::answer(body),
        Api::AnthropicMessages => messages::answer(body),
        Api::Converse => converse::answer(body),
    }?;
    Some(match caller {
        // A Chat caller's answers from Messages always had `"logprobs": null`.
        Api::OpenAiChat => chat::write_answer(&answer, created, provider == Api::AnthropicMessages),
        Api::OpenAiResponses | Api::AnthropicMessages | Api::Gemini | Api::Converse => {
            assemble::write(caller, &answer, created)
        }
    })
}

/// A provider's error answer in the caller's shape, its message (and for OpenAI's shape its
/// type) kept; a Responses provider's OpenAI error body is a Chat caller's as it is.
fn caller_error(provider: Api, caller: Api, status: u16, body: &[u8]) -> Vec<u8> {
    match caller {
        Api::AnthropicMessages => messages::error(status, body),
        Api::Gemini => gemini::error(status, body),
        Api::OpenAiChat
            if provider == Api::OpenAiResponses
                && json::pick(body, [b"error"])[0].starts_with(b"{") =>
        {
            body.to_vec()
        }
        Api::OpenAiChat | Api::OpenAiResponses => chat::error(status, body),
        // No caller speaks Converse: AWS's own shape, for completeness.
        Api::Converse => body.to_vec(),
    }
}

/// The error (in the `caller`'s API) a caller gets instead of a `2xx` answer of a provider
/// speaking `provider` that is no answer of that API.
pub fn unreadable(provider: Api, caller: Api) -> Vec<u8> {
    match (provider, caller) {
        (_, Api::Gemini) => gemini::unreadable(),
        (_, Api::Converse) => converse::error_body(GENERIC_UNREADABLE),
        (Api::Converse, Api::AnthropicMessages) => {
            messages::anthropic_error(502, CONVERSE_UNREADABLE)
        }
        (Api::Converse, _) => common::openai_error_body("api_error", None, CONVERSE_UNREADABLE),
        (Api::Gemini, Api::AnthropicMessages) => messages::anthropic_error(502, GEMINI_UNREADABLE),
        (Api::Gemini, _) => common::openai_error_body("api_error", None, GEMINI_UNREADABLE),
        (Api::OpenAiResponses, Api::AnthropicMessages) => {
            messages::anthropic_error(502, RESPONSES_UNREADABLE)
        }
        (Api::OpenAiResponses, _) => {
            common::openai_error_body("api_error", None, RESPONSES_UNREADABLE)
        }
        (Api::OpenAiChat, Api::OpenAiResponses) => {
            common::openai_error_body("api_error", None, CHAT_UNREADABLE)
        }
        (_, Api::OpenAiResponses) => {
            common::openai_error_body("api_error", None, MESSAGES_UNREADABLE)
        }
        (Api::AnthropicMessages, _) => {
            common::openai_error_body("api_error", None, MESSAGES_UNREADABLE)
        }
        (Api::OpenAiChat, _) => common::anthropic_error_body("api_error", CHAT_UNREADABLE),
    }
}

pub(crate) const MESSAGES_UNREADABLE: &str =
    "The provider's answer is not an Anthropic Messages answer and could not be translated.";

pub(crate) const CHAT_UNREADABLE: &str =
    "The provider's answer is not an OpenAI Chat Completions answer and could not be translated.";

const RESPONSES_UNREADABLE: &str =
    "The provider's answer is not an OpenAI Responses answer and could not be translated.";

const CONVERSE_UNREADABLE: &str =
    "The provider's answer is not a Bedrock Converse answer and could not be translated.";

const GENERIC_UNREADABLE: &str = "The provider's answer could not be translated.";

const GEMINI_UNREADABLE: &str =
    "The provider's answer is not a Gemini generateContent answer and could not be translated.";

/// Whether one SSE event of a provider's stream (its `event:` name, empty when it had none,
/// and one `data:` payload) is an event of `api`'s stream: for Anthropic Messages a JSON object
/// with a string `type` (`message_start`, `ping`, ...; an event named `error` is one too), for
/// OpenAI Chat a chunk (a JSON object with `choices` or `usage`, or whose `object` is
/// `chat.completion.chunk`) or `[DONE]`. A stream whose first event is none of these cannot be
/// translated (behaviour.md 16). Unknown event types of the right shape pass: the translators skip
/// them, as the APIs ask.
pub fn is_stream_event(api: Api, name: &[u8], data: &[u8]) -> bool {
    match api {
        // Responses' typed events carry their `type` too.
        Api::AnthropicMessages | Api::OpenAiResponses => {
            let [kind] = json::pick(data, [b"type"]);
            name == b"error" || json::RawStr::of(kind).is_some_and(|k| !k.is_empty())
        }
        Api::Gemini => gemini::is_response(data),
        Api::Converse => converse::is_stream_event(name, data),
        Api::OpenAiChat => {
            if data == b"[DONE]" {
                return true;
            }
            let [choices, usage, object] = json::pick(data, [b"choices", b"usage", b"object"]);
            choices.starts_with(b"[")
                || usage.starts_with(b"{")
                || object.starts_with(br#""chat.completion"#)
        }
    }
}

/// An error body in `api`'s shape (the gateway's own replies to a caller of that API):
/// OpenAI `{"error": {"message", "type", "code"}}`, Anthropic `{"type": "error", "error":
/// {"type", "message"}}`.
pub fn error_body(api: Api, status: u16, kind: &str, code: &str, message: &str) -> Vec<u8> {
    match api {
        Api::OpenAiChat | Api::OpenAiResponses => {
            common::openai_error_body(kind, Some(code), message)
        }
        Api::Gemini => gemini::error_body(status, message, Some(code)),
        Api::AnthropicMessages => messages::anthropic_error(status, message),
        Api::Converse => converse::error_body(message),
    }
}

/// What a stream translator needs besides the provider's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamContext {
    /// Unix seconds, for the `created` member of an OpenAI caller's chunks (Anthropic's events
    /// carry no time): when the attempt started.
    pub created: u64,
    /// An OpenAI caller asked for usage (`stream_options.include_usage: true`, see
    /// [`wants_stream_usage`]): its stream ends with a chunk holding `choices: []` and `usage`,
    /// as OpenAI sends it. Unasked, that chunk is left out, as OpenAI does (a client reading
    /// `choices[0]` of every chunk would fail on it). Anthropic callers always get usage.
    pub include_usage: bool,
}

/// Whether an OpenAI Chat caller's request body asks for usage in its stream
/// (`"stream_options": {"include_usage": true}`). For [`StreamContext::include_usage`].
pub fn wants_stream_usage(body: &[u8]) -> bool {
    chat::wants_usage(body)
}
