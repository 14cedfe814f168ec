//! A caller's request for a provider of another API, through the model: the caller's dialect
//! reads its request into the model (its parts pushed as they are read, the rest returned),
//! the provider's dialect writes it ([`Conversation`]). Any reader meets any writer, so a new
//! dialect adds one arm to each, not one function per pair.

use super::json::Obj;
use super::model::{Part, Request, Role};
use super::{
    chat, converse, field, gemini, messages, parse, responses, Api, RequestContext, Untranslatable,
};

type Checked<T> = Result<T, Untranslatable>;

/// The request body to send to a provider speaking `to`, from a caller speaking `from`.
#[inline(never)]
pub fn request(from: Api, to: Api, body: &[u8], cx: &RequestContext<'_>) -> Checked<Vec<u8>> {
    if from == to {
        return Ok(body.to_vec());
    }
    let req = parse(body)?;
    let mut conversation = Conversation::new(from, to, body.len());
    let head = read(from, to, cx, &req, &mut |role, part| {
        conversation.push(role, &part)
    })?;
    conversation.write(&head, cx)
}

/// Whether a caller's request can be sent to a provider speaking `to` (the same rules as
/// [`request`], without building the body): checked when planning, for cross-API entries only.
pub fn check(from: Api, to: Api, body: &[u8]) -> Checked<()> {
    let cx = RequestContext {
        model: "",
        default_max_tokens: 0,
        stream: false,
    };
    match to {
        _ if from == to => Ok(()),
        // The writers refuse what Responses (stop sequences) and Converse (images by URL)
        // cannot carry: the request is built.
        Api::OpenAiResponses | Api::Converse => request(from, to, body, &cx).map(drop),
        _ => read(from, to, &cx, &parse(body)?, &mut |_, _| ()).map(drop),
    }
}

/// The caller's request read by its dialect: its parts passed to `push`, the rest returned;
/// what `to` cannot carry refused.
fn read<'a>(
    from: Api,
    to: Api,
    cx: &RequestContext<'_>,
    req: &Obj<'a>,
    push: &mut dyn FnMut(Role, Part<'a>),
) -> Checked<Request<'a>> {
    match from {
        Api::OpenAiChat => chat::read_request(req, push),
        Api::AnthropicMessages => messages::read_request(req, to, push),
        Api::OpenAiResponses => responses::read_request(req, push),
        Api::Gemini => gemini::read_request(req, cx.stream, push),
        // No caller speaks Converse (`Api::of_path` never gives it).
        Api::Converse => Err(field("converse")),
    }
}

/// A provider dialect's request being written from the model's parts.
enum Conversation<'a> {
    Messages(messages::Conversation),
    Chat(chat::Conversation),
    Gemini(gemini::Conversation<'a>),
    Responses(responses::Conversation),
    Converse(converse::Conversation),
}

impl<'a> Conversation<'a> {
    fn new(from: Api, to: Api, body_len: usize) -> Conversation<'a> {
        match to {
            Api::AnthropicMessages => {
                Conversation::Messages(messages::Conversation::with_capacity(body_len + 64))
            }
            // A Messages caller's Chat request has strings where Chat takes them, as the
            // reference tests hold it (docs/translation.md "Layout").
            Api::OpenAiChat if from == Api::AnthropicMessages => {
                Conversation::Chat(chat::Conversation::compact(body_len + 256))
            }
            Api::OpenAiChat => Conversation::Chat(chat::Conversation::with_capacity(body_len + 64)),
            Api::Gemini => Conversation::Gemini(gemini::Conversation::with_capacity(body_len + 64)),
            Api::OpenAiResponses => {
                Conversation::Responses(responses::Conversation::with_capacity(body_len + 64))
            }
            Api::Converse => {
                Conversation::Converse(converse::Conversation::with_capacity(body_len + 64))
            }
        }
    }

    fn push(&mut self, role: Role, part: &Part<'a>) {
        match self {
            Conversation::Messages(c) => c.push(role, part),
            Conversation::Chat(c) => c.push(role, part),
            Conversation::Gemini(c) => c.push(role, part),
            Conversation::Responses(c) => c.push(role, part),
            Conversation::Converse(c) => c.push(role, part),
        }
    }

    /// The provider's request body (Responses' writer refuses stop sequences, Converse's
    /// images by URL).
    fn write(self, head: &Request<'_>, cx: &RequestContext<'_>) -> Checked<Vec<u8>> {
        Ok(match self {
            Conversation::Messages(c) => messages::request(c, head, cx),
            Conversation::Chat(c) => chat::request(c, head, cx),
            Conversation::Gemini(c) => gemini::request(c, head, cx.model),
            Conversation::Responses(c) => return responses::request(c, head, cx),
            Conversation::Converse(c) => return converse::request(c, head, cx),
        })
    }
}
