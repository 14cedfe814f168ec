//! An answer's passage through the upstream role (docs/behaviour.md sections 3, 5 and 13), as
//! plain state over bytes: what its headers start (unwrapping Bedrock's event stream, holding,
//! gathering, watching a stream's end), and what each response callback makes of the buffer
//! Envoy holds: held and decided, gathered, translated for the caller, ended honestly. The glue
//! reads the buffer once per callback (through the `read` it passes), settles the attempt when
//! asked (`settle`), and applies the [`Step`] returned: at most one write.

use super::{
    answer_translation, gathered, gathers, hold, unframes, watch_end, AnswerTranslation, Attempt,
    Hold, Marker, ResponseHead, Translation,
};
use crate::classify::Class;
use crate::config::Config;
use crate::envelope::eventstream::Unframer;
use crate::failing_answer;
use crate::translate::{self, Api, StreamContext, StreamTranslator};
use crate::usage;

/// Reads `len` bytes of the buffer from `start` (the glue's one read of a callback).
pub type Read<'r> = &'r mut dyn FnMut(usize, usize) -> Vec<u8>;
/// Settles the attempt with a held answer's class and status (`true`: read the delay the answer
/// asked for); returns what it did with the retry marker and, when the answer goes to the
/// caller, the dialect its usage is read in ([`Passage::count_usage`]).
pub type Settle<'s> = &'s mut dyn FnMut(Class, u16, bool) -> (Marker, Option<usage::Dialect>);

/// The state of one attempt's answer, from its response headers on.
#[derive(Debug, Default)]
pub struct Passage {
    /// The attempt is translated (behaviour.md 13): its answer goes back in the caller's API.
    pub translation: Option<Translation>,
    /// An OpenAI caller asked for usage in its translated stream.
    pub include_usage: bool,
    /// Response headers came (the attempt no longer waits for its answer to start).
    pub answered: bool,
    /// The provider's answer carried a header named like the retry marker.
    pub provider_marker: bool,
    /// The response is held until the start of its body is read (behaviour.md 3).
    pub hold: Option<Hold>,
    /// Bytes of the buffer Envoy holds, as of the last body callback.
    pub held: usize,
    /// The response's status and whether it is an event stream (after unwrapping).
    status: u16,
    event_stream: bool,
    /// The request did not ask for a stream: this `200` stream is gathered into one JSON
    /// answer (behaviour.md 5).
    gather: Option<Gathering>,
    /// How the answer is translated for the caller, once it is known to go to the caller.
    answer: Option<Answering>,
    /// The stream's last bytes, while its end is watched for the final event (behaviour.md 5).
    watch: Option<Watch>,
    /// A Bedrock event stream being unwrapped into Anthropic SSE (behaviour.md 13).
    unframe: Option<Unframing>,
    /// The provider's answer was replaced by a whole one: the rest of its body never reaches
    /// the caller.
    replaced: bool,
    /// The usage of an answer that goes to the caller, read from the provider's own bytes as
    /// they pass (docs/behaviour.md section 15).
    usage: Option<usage::Reader>,
    /// The attempt asked the stream's usage for a caller that did not (docs/behaviour.md 15):
    /// what the provider added for it is taken out before the caller gets it.
    unasked: Option<usage::Unasked>,
}

/// An AWS event stream turned into SSE as it passes. While the answer is held (its first event
/// read, behaviour.md 3) Envoy keeps the body: the first `done` bytes of it are SSE already.
#[derive(Debug, Default)]
struct Unframing {
    unframer: Unframer,
    done: usize,
}

/// A gathered stream: its dialect, the caller's API and the bytes so far.
#[derive(Debug)]
struct Gathering {
    provider: Api,
    caller: Api,
    bytes: Vec<u8>,
}

/// A watched stream's last bytes, and its caller's API (the error event of a stream cut short
/// is in its dialect).
#[derive(Debug)]
struct Watch {
    tail: Vec<u8>,
    caller: Api,
}

/// A translated attempt's answer on its way to the caller.
#[derive(Debug)]
enum Answering {
    /// Buffered whole, then replaced (`translate::response`).
    Whole { status: u16 },
    /// Translated chunk by chunk. While its end marker is owed, the caller's bytes stay in
    /// the buffer (`kept` of them, translated already), where whichever callback ends the
    /// stream (the last body chunk or trailers) can still add the end to them.
    Stream {
        stream: StreamTranslator,
        kept: usize,
    },
}

/// What the answer's headers become when it is replaced or translated: `content-length` goes,
/// `:status` becomes `status` when there is one, `content-type` `application/json` when `json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerHead {
    pub status: Option<u16>,
    pub json: bool,
}

/// What the glue writes into the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Write {
    Keep,
    /// Replace the buffer's first `size` bytes (what the callback read) by these.
    Replace {
        size: usize,
        bytes: Vec<u8>,
    },
    /// Add these after the buffer's `size` bytes.
    Append {
        size: usize,
        bytes: &'static [u8],
    },
}

/// What one callback does: pause the answer (or, after a deadline, leave it paused) or let it
/// go, the headers to change, the one write.
#[derive(Debug, PartialEq, Eq)]
pub struct Step {
    pub pause: bool,
    pub head: Option<AnswerHead>,
    pub write: Write,
}

/// The buffer a callback works on: `size` bytes in Envoy, read at most once (`bytes`), written
/// at most once (`changed`).
struct Buffer<'r> {
    size: usize,
    bytes: Option<Vec<u8>>,
    changed: bool,
    read: Read<'r>,
}

impl Buffer<'_> {
    /// The first `len` bytes (all of them when the buffer was read whole already).
    fn get(&mut self, len: usize) -> &[u8] {
        let read = &mut self.read;
        self.bytes.get_or_insert_with(|| read(0, len))
    }

    fn set(&mut self, bytes: Vec<u8>) {
        self.bytes = Some(bytes);
        self.changed = true;
    }

    fn step(self, pause: bool, head: Option<AnswerHead>) -> Step {
        let write = match self.bytes.filter(|_| self.changed) {
            Some(bytes) => Write::Replace {
                size: self.size,
                bytes,
            },
            None => Write::Keep,
        };
        Step { pause, head, write }
    }
}

impl Passage {
    /// The answer's headers came (`head`, read from them): what its passage starts. Returns
    /// whether it is a Bedrock event stream unwrapped into SSE (then its headers say so).
    pub fn headers(
        &mut self,
        config: &Config,
        a: &Attempt<'_, '_>,
        head: &mut ResponseHead<'_>,
        end_of_stream: bool,
    ) -> bool {
        let unframe = unframes(a, head);
        if unframe {
            self.unframe = Some(Unframing::default());
            head.content_type = Some(b"text/event-stream");
        }
        self.status = head.status;
        self.event_stream = head
            .content_type
            .is_some_and(failing_answer::is_event_stream);
        self.provider_marker = head.marker;
        self.answered = true;
        self.gather = gathers(a, head).map(|(provider, caller)| Gathering {
            provider,
            caller,
            bytes: Vec::new(),
        });
        // A translated stream's end is its translator's, a gathered one's its gathering (not
        // watched here).
        let watched = (a.translation.is_none() && self.gather.is_none())
            .then(|| watch_end(a, head))
            .flatten();
        self.watch = watched.map(|caller| Watch {
            tail: Vec::new(),
            caller,
        });
        self.hold = hold(config, a, head, end_of_stream);
        self.unasked = (a.plan.ask_usage
            && a.translation.is_none()
            && head.status == 200
            && self.event_stream)
            .then(usage::Unasked::default);
        unframe
    }

    /// A translated attempt's answer that goes to the caller (not marked for a retry: a
    /// retried answer never reaches the caller) is translated back (behaviour.md 13): returns
    /// what its headers say instead of the provider's.
    pub fn start_answer(
        &mut self,
        status: u16,
        marker: Marker,
        created: u64,
    ) -> Option<AnswerHead> {
        let t = self.translation.filter(|_| marker != Marker::Set)?;
        match answer_translation(status, || self.event_stream) {
            AnswerTranslation::Whole { status } => {
                self.answer = Some(Answering::Whole { status });
                Some(AnswerHead {
                    status: None,
                    json: true,
                })
            }
            AnswerTranslation::Stream => {
                let cx = StreamContext {
                    created,
                    include_usage: self.include_usage,
                };
                self.answer = StreamTranslator::new(t.provider, t.caller, cx)
                    .map(|stream| Answering::Stream { stream, kept: 0 });
                Some(AnswerHead {
                    status: None,
                    json: false,
                })
            }
        }
    }

    /// A body callback (`body_size` bytes in the buffer; `created`: when the attempt started,
    /// in Unix seconds, for OpenAI answers).
    pub fn body(
        &mut self,
        body_size: usize,
        end: bool,
        created: u64,
        read: Read<'_>,
        settle: Settle<'_>,
    ) -> Step {
        let mut buf = Buffer {
            size: body_size,
            bytes: None,
            changed: false,
            read,
        };
        let plain = self.hold.is_none() && self.answer.is_none() && self.gather.is_none();
        if plain && self.watch.is_none() && self.unframe.is_none() && !self.replaced {
            // The answer as it is: nothing to do but read its usage (when it is read, and
            // take out what was asked for it).
            self.held = body_size;
            self.read_passing(&mut buf, end);
            return buf.step(false, None);
        }
        if self.replaced {
            buf.set(Vec::new());
            return buf.step(false, None);
        }
        if let Some(u) = &mut self.unframe {
            // The event-stream bytes after the SSE ones already there become the SSE events
            // they carry.
            let buffer = buf.get(body_size);
            let done = u.done.min(buffer.len());
            let (sse, raw) = buffer.split_at(done);
            let mut out = Vec::with_capacity(done + raw.len() + raw.len() / 2);
            out.extend_from_slice(sse);
            u.unframer.push(raw, &mut out);
            if end {
                u.unframer.finish(&mut out);
            }
            buf.set(out);
        }
        self.held = buf.bytes.as_ref().map_or(body_size, Vec::len);
        let gathering = self.gather.is_some();
        let (pause, head) = if let Some(hold) = self.hold {
            self.decide_held(hold, &mut buf, end, created, settle)
        } else if self.gather.is_some() {
            (self.gather_body(&mut buf, end, created), None)
        } else {
            (
                self.translate_answer(&mut buf, self.held, end, created),
                None,
            )
        };
        if !pause && !gathering {
            self.read_passing(&mut buf, end);
        }
        let end_event = if pause {
            None
        } else {
            self.watch_end(&mut buf, end)
        };
        if let Some(u) = &mut self.unframe {
            // Paused, Envoy keeps what is in the buffer now (a translated stream's kept bytes,
            // or the held answer); continued, it sends it on.
            u.done = match (pause, &self.answer) {
                (false, _) => 0,
                (true, Some(Answering::Stream { kept, .. })) if *kept > 0 => *kept,
                (true, _) => self.held,
            };
        }
        let mut step = buf.step(pause, head);
        if let Some(event) = end_event {
            match &mut step.write {
                Write::Replace { bytes, .. } => bytes.extend_from_slice(event),
                write => {
                    *write = Write::Append {
                        size: self.held,
                        bytes: event,
                    }
                }
            }
        }
        step
    }

    /// The stream ends with trailers (HTTP/2, chunked trailers): the end a body chunk with
    /// `end_of_stream` would bring. Envoy lets a filter write only into a body it holds, so a
    /// translated answer's end is written after the bytes kept for it.
    pub fn trailers(&mut self, created: u64, read: Read<'_>, settle: Settle<'_>) -> Step {
        // A whole answer is held whole; nothing kept of a stream: its end was written (or
        // cannot be: docs/behaviour.md). Without a translated answer nothing is read.
        let size = match (&self.answer, self.hold, &self.gather) {
            (Some(Answering::Stream { kept, .. }), None, None) => *kept,
            _ => self.held,
        };
        let mut buf = Buffer {
            size,
            bytes: None,
            changed: false,
            read,
        };
        let gathering = self.gather.is_some();
        let (pause, head) = if let Some(hold) = self.hold {
            let decided = self.decide_held(hold, &mut buf, true, created, settle);
            if !decided.0 && !gathering {
                // An untranslated answer held to its end goes on now, all of it.
                self.read_passing(&mut buf, true);
            }
            decided
        } else if self.gather.is_some() {
            (self.gather_body(&mut buf, true, created), None)
        } else if size > 0 {
            (self.translate_answer(&mut buf, size, true, created), None)
        } else {
            (false, None)
        };
        buf.step(pause, head)
    }

    /// Releases an answer held until a deadline decided it (first token, budget; settled with
    /// `marker`). Nothing of a translated attempt reaches the caller untranslated (behaviour.md
    /// 13): a stream's held events are translated now, in the buffer Envoy holds; a whole
    /// answer stays held until its end (the step pauses) and is translated then. An answer
    /// marked for the next provider never reaches the caller.
    pub fn release(&mut self, status: u16, marker: Marker, created: u64, read: Read<'_>) -> Step {
        self.hold = None;
        let head = self.start_answer(status, marker, created);
        let mut buf = Buffer {
            size: self.held,
            bytes: None,
            changed: false,
            read,
        };
        if matches!(self.answer, Some(Answering::Whole { .. })) {
            return buf.step(true, head); // its last body chunk releases it
        }
        if self.held > 0 {
            // (Nothing happens unless the answer is translated.)
            self.translate_answer(&mut buf, self.held, false, created);
            self.read_passing(&mut buf, false);
        }
        // Resumed, Envoy sends the buffer on: nothing is kept for the end any more.
        if let Some(Answering::Stream { kept, .. }) = &mut self.answer {
            *kept = 0;
        }
        buf.step(false, head)
    }

    /// The attempt settled and its answer goes to the caller: its usage is read in `dialect`
    /// (`None`: not read) as its bytes pass.
    pub fn count_usage(&mut self, dialect: Option<usage::Dialect>) {
        self.usage = dialect.map(|d| usage::Reader::new(d, self.event_stream));
    }

    /// The answer's last byte passed: the usage it reported, if it was read and reported any.
    pub fn finish_usage(&mut self) -> Option<usage::Usage> {
        self.usage.take()?.finish()
    }

    /// What of the buffer (`held` bytes) goes on to the caller as the provider wrote it (not
    /// translated, not replaced) is read for its usage: a JSON answer's last bytes only, a
    /// stream's all (kept in `buf` for the end watch: still one read). A stream whose usage
    /// was asked for the caller then loses what was added for it (`end`: its last chunk).
    fn read_passing(&mut self, buf: &mut Buffer<'_>, end: bool) {
        let size = self.held;
        let passes = size > 0 && self.answer.is_none() && !self.replaced;
        if let Some(u) = self.usage.as_mut().filter(|_| passes) {
            let from = u.wanted(size);
            if from > 0 {
                u.skip();
            }
            match &buf.bytes {
                Some(bytes) => u.push(bytes.get(from..).unwrap_or_default()),
                None if self.event_stream => u.push(buf.get(size)),
                None => u.push_owned((buf.read)(from, size - from)),
            }
        }
        if let Some(f) = self.unasked.as_mut().filter(|_| passes || end) {
            if let Some(out) = f.push(buf.get(size), end) {
                self.held = out.len();
                buf.set(out);
            }
        }
    }

    /// No output in time (the first-token timeout): nothing of this stream reaches the caller
    /// as it is.
    pub fn drop_watch(&mut self) {
        self.watch = None;
    }

    /// A held answer: decides once enough of its body is here, then releases it, with the
    /// retry marker when it falls over. Returns whether it stays paused, and its new headers.
    fn decide_held(
        &mut self,
        hold: Hold,
        buf: &mut Buffer<'_>,
        end: bool,
        created: u64,
        settle: Settle<'_>,
    ) -> (bool, Option<AnswerHead>) {
        let Some(len) = hold.read_now(self.held, end) else {
            return (true, None);
        };
        // What is decided next may need all of it: read it whole then (one read).
        let whole = self.translation.is_some() || self.watch.is_some() || self.gather.is_some();
        let body = buf.get(if whole { self.held } else { len });
        let body = body.get(..len).unwrap_or(body);
        let Some(decided) = hold.decide(body, end, self.translation, created) else {
            return (true, None);
        };
        if decided.class != Class::Ok {
            // It falls over or goes back as an error: no stream of it reaches the caller.
            self.watch = None;
        }
        let (marker, usage) = settle(decided.class, decided.status, decided.read_delay);
        self.count_usage(usage);
        self.hold = None;
        if let Some(answer) = decided.answer {
            // A whole translated answer, translated already; a retried one never reaches the
            // caller.
            if marker == Marker::Set {
                return (false, None);
            }
            if let Some(u) = &mut self.usage {
                u.push(buf.get(self.held)); // the provider's own answer, whole
            }
            let status = (answer.status != self.status).then_some(answer.status);
            buf.set(answer.body);
            self.replaced = true;
            return (false, Some(AnswerHead { status, json: true }));
        }
        if decided.class != Class::Ok || marker == Marker::Set {
            self.gather = None;
        } else if self.gather.is_some() {
            // Its headers go now (Envoy's per-try timer would end a held answer), saying what
            // comes at the end instead of the stream.
            let head = AnswerHead {
                status: None,
                json: true,
            };
            return (self.gather_body(buf, end, created), Some(head));
        }
        // Decided on the provider's own bytes; then translated for the caller, all of what
        // is held so far.
        let head = self.start_answer(decided.status, marker, created);
        (self.translate_answer(buf, self.held, end, created), head)
    }

    /// A gathered stream (its first output came in time): kept here to its end, nothing of it
    /// sent, then replaced by the caller's one JSON answer. A stream that ended before its
    /// answer's end gets the caller's error body (its `200` went with the headers).
    fn gather_body(&mut self, buf: &mut Buffer<'_>, end: bool, created: u64) -> bool {
        let Some(g) = self.gather.as_mut() else {
            return false;
        };
        let chunk = buf.get(self.held);
        g.bytes.extend_from_slice(chunk);
        if let Some(u) = &mut self.usage {
            u.push(chunk);
        }
        if !end {
            buf.set(Vec::new());
            return false;
        }
        if let Some(g) = self.gather.take() {
            buf.set(gathered(g.provider, g.caller, &g.bytes, created).body);
        }
        false
    }

    /// Translates what of the answer is buffered (`size` bytes) for the caller; returns
    /// whether the answer stays paused.
    fn translate_answer(
        &mut self,
        buf: &mut Buffer<'_>,
        size: usize,
        end: bool,
        created: u64,
    ) -> bool {
        let (Some(t), Some(answer)) = (self.translation, self.answer.as_mut()) else {
            return false;
        };
        if !end && matches!(answer, Answering::Whole { .. }) {
            // Until the whole answer is here: the router buffers it.
            return true;
        }
        let body = buf.get(size);
        if let Some(u) = &mut self.usage {
            // The provider's own bytes (a stream's first `kept` are the caller's already).
            let done = match answer {
                Answering::Stream { kept, .. } => (*kept).min(body.len()),
                Answering::Whole { .. } => 0,
            };
            u.push(body.get(done..).unwrap_or_default());
        }
        let (out, pause) = match answer {
            Answering::Whole { status } => {
                // Not held (an error, or holding is off): an unreadable answer's error goes as
                // it is, its status gone already.
                let out = translate::response(t.provider, t.caller, *status, body, created);
                (out.body, false)
            }
            Answering::Stream { stream, kept } => {
                // The first `kept` bytes are the caller's already (held for the end).
                let (done, chunk) = body.split_at((*kept).min(body.len()));
                let mut out = Vec::with_capacity(body.len() + chunk.len() / 2);
                out.extend_from_slice(done);
                let hold = stream.push(chunk, end, &mut out) && !end;
                *kept = if hold { out.len() } else { 0 };
                (out, hold)
            }
        };
        buf.set(out);
        pause
    }

    /// Keeps the stream's last bytes; at its end, what ends it honestly
    /// ([`failing_answer::honest_end`]).
    fn watch_end(&mut self, buf: &mut Buffer<'_>, end: bool) -> Option<&'static [u8]> {
        let w = self.watch.as_mut()?;
        let size = self.held;
        let len = size.min(failing_answer::STREAM_TAIL);
        if len > 0 {
            // From the buffer read already (whole, when a stream is watched), else its end.
            match &buf.bytes {
                Some(bytes) => w
                    .tail
                    .extend_from_slice(bytes.get(size - len..).unwrap_or_default()),
                None => w.tail.extend_from_slice(&(buf.read)(size - len, len)),
            }
            let excess = w.tail.len().saturating_sub(failing_answer::STREAM_TAIL);
            w.tail.drain(..excess);
        }
        if !end {
            return None;
        }
        let w = self.watch.take()?;
        failing_answer::honest_end(failing_answer::stream_complete(&w.tail), w.caller)
    }
}
