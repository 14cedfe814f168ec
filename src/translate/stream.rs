//! A provider's event stream translated for a caller of another API, through the model: the
//! provider dialect's decoder reads its events into the model's ([`Decoder`]), the caller
//! dialect's encoder writes them ([`Encoder`]). Any of the four decoders meets any of the four
//! encoders, so a new dialect adds one arm to each, not one translator per pair.

use super::model::Event;
use super::{chat, converse, gemini, messages, responses, sse, Api, StreamContext};

/// A provider dialect's stream decoder into the model's events.
#[derive(Debug)]
pub enum Decoder {
    Messages(messages::Decoder),
    Chat(chat::Decoder),
    Gemini(gemini::Decoder),
    Responses(responses::Decoder),
    Converse(converse::Decoder),
}

impl Decoder {
    pub fn new(provider: Api) -> Decoder {
        match provider {
            Api::OpenAiChat => Decoder::Chat(chat::Decoder::default()),
            Api::Gemini => Decoder::Gemini(gemini::Decoder::default()),
            Api::OpenAiResponses => Decoder::Responses(responses::Decoder::default()),
            Api::AnthropicMessages => Decoder::Messages(messages::Decoder::default()),
            Api::Converse => Decoder::Converse(converse::Decoder::default()),
        }
    }

    #[inline(never)]
    pub fn push(&mut self, chunk: &[u8], end: bool, on: &mut dyn FnMut(Event<'_>)) {
        match self {
            Decoder::Messages(d) => d.push(chunk, end, on),
            Decoder::Chat(d) => d.push(chunk, end, on),
            Decoder::Gemini(d) => d.push(chunk, end, on),
            Decoder::Responses(d) => d.push(chunk, end, on),
            Decoder::Converse(d) => d.push(chunk, end, on),
        }
    }

    /// The stop reason came.
    pub fn stopped(&self) -> bool {
        match self {
            Decoder::Messages(d) => d.stopped(),
            Decoder::Chat(d) => d.stopped(),
            Decoder::Gemini(d) => d.stopped(),
            Decoder::Responses(d) => d.stopped(),
            Decoder::Converse(d) => d.stopped(),
        }
    }
}

/// A caller dialect's stream encoder out of the model's events.
#[derive(Debug)]
pub enum Encoder {
    Chat(chat::Encoder),
    Messages(messages::Encoder),
    Gemini(gemini::Encoder),
    Responses(responses::Encoder),
}

impl Encoder {
    /// `None` for an API no caller speaks (Converse).
    pub fn new(caller: Api, cx: StreamContext) -> Option<Encoder> {
        Some(match caller {
            Api::OpenAiChat => Encoder::Chat(chat::Encoder::new(cx)),
            Api::AnthropicMessages => Encoder::Messages(messages::Encoder::default()),
            Api::Gemini => Encoder::Gemini(gemini::Encoder::default()),
            Api::OpenAiResponses => Encoder::Responses(responses::Encoder::new(cx.created)),
            Api::Converse => return None,
        })
    }

    /// Writes what the caller gets for one event of the model's stream.
    pub fn event(&mut self, e: Event<'_>, out: &mut Vec<u8>) {
        match self {
            Encoder::Chat(c) => c.on(e, out),
            Encoder::Messages(c) => c.event(e, out),
            Encoder::Gemini(c) => c.event(e, out),
            Encoder::Responses(c) => c.event(e, out),
        }
    }

    /// The caller's stream ended properly: its end marker was written.
    pub fn finished(&self) -> bool {
        match self {
            Encoder::Chat(c) => c.finished(),
            Encoder::Messages(c) => c.finished,
            Encoder::Gemini(c) => c.finished,
            Encoder::Responses(c) => c.finished,
        }
    }

    /// The caller's stream ended: its end marker, or an error, was written.
    pub fn ended(&self) -> bool {
        match self {
            Encoder::Chat(c) => c.ended(),
            Encoder::Messages(c) => c.finished || c.failed,
            Encoder::Gemini(c) => c.finished || c.failed,
            Encoder::Responses(c) => c.finished || c.failed,
        }
    }

    /// Ends a stream cut short before its final event with an error in the caller's dialect,
    /// so its client raises (behaviour.md 5): Responses' typed `error` event (it numbers its
    /// events), the others' [`sse::cut_stream_event`].
    fn cut(&mut self, out: &mut Vec<u8>) {
        let caller = match self {
            Encoder::Responses(c) => return c.fail("server_error", sse::CUT_SHORT, out),
            Encoder::Chat(_) => Api::OpenAiChat,
            Encoder::Messages(_) => Api::AnthropicMessages,
            Encoder::Gemini(_) => Api::Gemini,
        };
        out.extend_from_slice(sse::cut_stream_event(caller));
    }
}

/// A provider's event stream translated to the caller's, event by event, whatever the chunk
/// boundaries (state carried across events and chunks).
#[derive(Debug)]
pub struct StreamTranslator(Box<(Decoder, Encoder)>);

impl StreamTranslator {
    /// `None` when the two APIs are the same (nothing to translate), or no caller speaks
    /// `caller`.
    pub fn new(provider: Api, caller: Api, cx: StreamContext) -> Option<StreamTranslator> {
        let encoder = Encoder::new(caller, cx).filter(|_| provider != caller)?;
        Some(StreamTranslator(Box::new((
            Decoder::new(provider),
            encoder,
        ))))
    }

    /// Feeds the next chunk of the provider's stream (`end`: it was the last) and appends what
    /// the caller gets to `out`: complete events only; a partial event waits for the next chunk.
    /// A stream that ends before its final event (and not with the provider's own error event)
    /// ends with an error event in the caller's dialect, so the caller's client raises
    /// (behaviour.md 5). Returns whether the answer came whole but its end marker is still owed: the
    /// stream's end (whichever callback brings it) writes it, so until then the caller's bytes
    /// are kept where the end can still be added to them.
    pub fn push(&mut self, chunk: &[u8], end: bool, out: &mut Vec<u8>) -> bool {
        let (decoder, encoder) = &mut *self.0;
        if !encoder.ended() {
            decoder.push(chunk, end, &mut |e| encoder.event(e, out));
        }
        if end && !encoder.ended() {
            encoder.cut(out);
        }
        decoder.stopped() && !encoder.ended()
    }

    /// The provider's stream reached its final event (`message_stop`, or OpenAI's last chunk
    /// with a `finish_reason` and `[DONE]`): the caller's end marker was written. At the end
    /// (`push` with `end`), a stream whose answer came whole is finished; one cut short before
    /// it gets an error event in the caller's dialect instead (behaviour.md 5), unless the provider's
    /// own error event already ended it.
    pub fn finished(&self) -> bool {
        self.0 .1.finished()
    }
}
