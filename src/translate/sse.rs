//! A provider's event stream framed: the one place its lines and events are found, for the
//! stream translators ([`Reader`]), the usage reader ([`line_end`], [`last_line_start`]) and the
//! failing-answer reader ([`event_end`], [`lines`]); AWS's binary event stream is unwrapped into
//! this form first (`envelope::eventstream`).
//!
//! Server-sent events read chunk by chunk: lines end in `\n`, `\r\n` or `\r` (a line end may be
//! split between chunks), a blank line ends an event, `data:` lines join with `\n`, `:` lines
//! are comments, `event:` names the event, and other fields (`id`, `retry`) are ignored (the
//! WHATWG event-stream format).
//!
//! Each byte is looked at once: a chunk's complete lines are handled in place, only a line cut
//! by the chunk's end is copied (to wait for its rest), and an event's name and data are kept
//! in buffers reused from event to event. Events go to a `dyn` callback: one reader in the
//! module for every dialect's decoder (each one's own closure type would copy it, about 4 KB
//! each).

use super::{model, Api};

/// One event: its `event:` name (empty when it had none) and its data lines joined by `\n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    pub name: &'a [u8],
    pub data: &'a [u8],
}

/// The reader's state between chunks.
#[derive(Debug, Default)]
pub struct Reader {
    /// The start of a line cut by the end of the previous chunk.
    line: Vec<u8>,
    /// The event being read: its name and data so far.
    name: Vec<u8>,
    data: Vec<u8>,
    /// A `data:` line was read for this event (even an empty one).
    has_data: bool,
    /// The previous chunk ended in `\r`: a `\n` starting this one belongs to that line end.
    after_cr: bool,
}

/// Where a provider's stream stands: what every dialect's decoder keeps beside its own state.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ends {
    /// The stop reason came: a stream that ends without its end marker is still complete.
    pub stopped: bool,
    /// The stream's end (or an error) came: nothing more is read.
    pub done: bool,
}

/// A provider dialect's stream state between events: what [`Reader::decode`] feeds.
pub trait Decode {
    /// Reads one event, passing the model's events it makes to `on`.
    fn event(&mut self, e: Event<'_>, on: &mut dyn FnMut(model::Event<'_>));
    fn ends(&mut self) -> &mut Ends;
}

impl Reader {
    /// Reads the next chunk of a provider's stream (`end`: the last) into `state`, passing the
    /// model's events to `on`; a stream whose stop reason came is complete without its end
    /// marker (docs/behaviour.md, section 5). One body for every dialect's decoder.
    pub fn decode(
        &mut self,
        state: &mut dyn Decode,
        chunk: &[u8],
        end: bool,
        on: &mut dyn FnMut(model::Event<'_>),
    ) {
        let mut on_event = |e: Event<'_>| {
            if !state.ends().done {
                state.event(e, on);
            }
        };
        self.feed(chunk, &mut on_event);
        if end {
            self.finish(&mut on_event);
            let ends = state.ends();
            if ends.stopped && !ends.done {
                ends.done = true;
                on(model::Event::End);
            }
        }
    }

    /// Reads `chunk`, calling `on_event` for each event it completes, in order.
    pub fn feed(&mut self, chunk: &[u8], on_event: &mut dyn FnMut(Event<'_>)) {
        let mut rest = chunk;
        // An empty chunk (Envoy passes them) leaves a `\r` at the last one's end waiting for
        // its `\n`.
        if rest.is_empty() {
            return;
        }
        if std::mem::take(&mut self.after_cr) {
            rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        }
        while let Some(at) = crate::bytes::find_line_end(rest) {
            let (line, tail) = rest.split_at(at);
            rest = match tail.split_first() {
                Some((b'\r', after)) if after.is_empty() => {
                    self.after_cr = true;
                    after
                }
                Some((b'\r', after)) => after.strip_prefix(b"\n").unwrap_or(after),
                Some((_, after)) => after,
                None => tail,
            };
            if self.line.is_empty() {
                self.line_done(line, on_event);
            } else {
                let mut whole = std::mem::take(&mut self.line);
                whole.extend_from_slice(line);
                self.line_done(&whole, on_event);
                whole.clear();
                self.line = whole;
            }
        }
        self.line.extend_from_slice(rest);
    }

    /// The stream ended: a last line without its line end, and an event without its blank
    /// line, are taken as they are (a provider's last `data: [DONE]` sometimes lacks them).
    pub fn finish(&mut self, on_event: &mut dyn FnMut(Event<'_>)) {
        if !self.line.is_empty() {
            let whole = std::mem::take(&mut self.line);
            self.line_done(&whole, on_event);
        }
        self.line_done(b"", on_event);
    }

    fn line_done(&mut self, line: &[u8], on_event: &mut dyn FnMut(Event<'_>)) {
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                on_event(Event {
                    name: &self.name,
                    data: &self.data,
                });
            }
            self.name.clear();
            self.data.clear();
            return;
        }
        let (field, value) = match line.iter().position(|&c| c == b':') {
            Some(0) => return, // a comment
            Some(at) => {
                let (field, value) = line.split_at(at);
                let value = value.get(1..).unwrap_or_default();
                (field, value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.name.clear();
                self.name.extend_from_slice(value);
            }
            _ => {}
        }
    }
}

/// Where the first line of `bytes` ends: the line end's start and its length (`\r\n` 2, `\n` or a
/// lone `\r` 1). A `\r` that ends `bytes` counts alone: a `\n` the next chunk starts with begins
/// an empty line, which a reader of lines (not events) can take as it is.
pub(crate) fn line_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let at = crate::bytes::find_line_end(bytes)?;
    let crlf = bytes.get(at) == Some(&b'\r') && bytes.get(at + 1) == Some(&b'\n');
    Some((at, if crlf { 2 } else { 1 }))
}

/// Where the last line of `bytes` starts: right after its last line end (`\n` or `\r`), 0 when
/// it has none.
pub(crate) fn last_line_start(bytes: &[u8]) -> usize {
    crate::bytes::rfind_line_end(bytes).map_or(0, |n| n + 1)
}

/// Where the first event of `bytes` ends and how long its blank line is: two line ends in a row,
/// each `\r\n`, `\n` or a lone `\r` (the event-stream format, as [`Reader`] reads it).
/// The common stream, `\n` line ends only, is found by one search.
pub(crate) fn event_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let plain = crate::bytes::find(bytes, b"\n\n");
    let before = bytes.get(..plain.unwrap_or(bytes.len())).unwrap_or(bytes);
    if crate::bytes::find_byte(b'\r', before).is_none() {
        return plain.map(|at| (at, 2));
    }
    // Line by line: an empty line right after a line end ends the event; `ended` is where the
    // previous line's end starts.
    let (mut at, mut ended) = (0, None);
    loop {
        let (n, len) = line_end(bytes.get(at..)?)?;
        if let (0, Some(start)) = (n, ended) {
            return Some((start, at + len - start));
        }
        ended = Some(at + n);
        at += n + len;
    }
}

/// The lines of an event, whatever its line ends (`\r\n`, `\n`, `\r`; the empty pieces
/// between a `\r` and its `\n` are no field).
pub(crate) fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    event.split(|&c| c == b'\n' || c == b'\r')
}

/// What ends a stream honestly at its end (behaviour.md 5), the one place this is decided for
/// every stream the caller gets (watched as it is, or translated): nothing after a `complete`
/// one; after one cut short, [`cut_stream_event`] in the caller's dialect.
pub fn honest_end(complete: bool, caller: Api) -> Option<&'static [u8]> {
    (!complete).then(|| cut_stream_event(caller))
}

/// What the error that ends a stream cut short says.
pub const CUT_SHORT: &str = "the provider's stream ended before its final event";

/// The event that ends a stream cut short, in the caller's dialect, so its client raises an
/// error instead of taking a truncated answer for a complete one (behaviour.md 5): Anthropic's
/// `event: error` for Messages callers, Google's error as a chunk for Gemini callers
/// (google-genai raises its `ServerError`), an OpenAI-style error frame for the others.
pub fn cut_stream_event(caller: Api) -> &'static [u8] {
    match caller {
        Api::AnthropicMessages => b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the provider's stream ended before its final event\"}}\n\n",
        Api::Gemini => b"data: {\"error\":{\"code\":502,\"message\":\"the provider's stream ended before its final event\",\"status\":\"INTERNAL\"}}\r\n\r\n",
        // Converse is no caller dialect; listed so a new API is placed here by hand.
        Api::OpenAiChat | Api::OpenAiResponses | Api::Converse => b"data: {\"error\":{\"message\":\"the provider's stream ended before its final event\",\"type\":\"server_error\",\"code\":\"stream_cut_short\"}}\n\n",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let mut reader = Reader::default();
        let mut got = Vec::new();
        let mut on_event = |e: Event<'_>| {
            got.push((
                String::from_utf8_lossy(e.name).into_owned(),
                String::from_utf8_lossy(e.data).into_owned(),
            ))
        };
        for chunk in chunks {
            reader.feed(chunk, &mut on_event);
        }
        reader.finish(&mut on_event);
        got
    }

    fn pair(name: &str, data: &str) -> (String, String) {
        (name.to_string(), data.to_string())
    }

    #[test]
    fn events_end_at_blank_lines_with_any_line_end() {
        let want = vec![pair("a", "1"), pair("", "2"), pair("c", "3")];
        assert_eq!(
            events(&[b"event: a\ndata: 1\n\ndata: 2\n\nevent: c\ndata: 3\n\n"]),
            want
        );
        assert_eq!(
            events(&[b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\nevent: c\r\ndata: 3\r\n\r\n"]),
            want
        );
        assert_eq!(
            events(&[b"event: a\rdata: 1\r\rdata: 2\r\revent: c\rdata:3\r\r"]),
            want
        );
    }

    /// `event_end` line by line finds what a byte-by-byte reading of the format finds, for
    /// every text of up to 8 bytes of `a`, `\r` and `\n`.
    #[test]
    fn the_event_end_is_the_first_blank_line() {
        fn by_bytes(b: &[u8]) -> Option<(usize, usize)> {
            let (mut i, mut ended) = (0, None);
            while let Some(&c) = b.get(i) {
                let len = match c {
                    b'\r' if b.get(i + 1) == Some(&b'\n') => 2,
                    b'\r' | b'\n' => 1,
                    _ => {
                        ended = None;
                        i += 1;
                        continue;
                    }
                };
                if let Some(start) = ended {
                    return Some((start, i + len - start));
                }
                ended = Some(i);
                i += len;
            }
            None
        }
        for len in 0..=8u32 {
            for n in 0..3usize.pow(len) {
                let text: Vec<u8> = (0..len).map(|k| b"a\r\n"[n / 3usize.pow(k) % 3]).collect();
                assert_eq!(event_end(&text), by_bytes(&text), "{text:?}");
            }
        }
    }

    #[test]
    fn a_crlf_split_between_chunks_is_one_line_end() {
        assert_eq!(
            events(&[b"event: a\r", b"\ndata: 1\r", b"\ndata: 2\r\n\r", b"\n"]),
            vec![pair("a", "1\n2")]
        );
        // An empty chunk between the two halves changes nothing.
        assert_eq!(
            events(&[
                b"event: a\r",
                b"",
                b"\ndata: 1\r",
                b"",
                b"",
                b"\n\r",
                b"",
                b"\n"
            ]),
            vec![pair("a", "1")]
        );
    }

    #[test]
    fn data_lines_join_comments_and_other_fields_are_skipped() {
        assert_eq!(
            events(&[b": ping\nid: 7\nretry: 10\nevent: x\ndata: {\"a\":\ndata:1}\n\n"]),
            vec![pair("x", "{\"a\":\n1}")]
        );
        // Only the first space after the colon is dropped; a field without colon is a name.
        assert_eq!(events(&[b"data:  two\ndata\n\n"]), vec![pair("", " two\n")]);
    }

    #[test]
    fn an_event_without_data_is_not_dispatched() {
        assert_eq!(
            events(&[b"event: ping\n\n: keep-alive\n\n\n\ndata: x\n\n"]),
            vec![pair("", "x")]
        );
    }

    #[test]
    fn a_line_split_anywhere_waits_for_its_rest() {
        assert_eq!(
            events(&[
                b"eve",
                b"nt: message_st",
                b"op\nda",
                b"ta: {}",
                b"\n",
                b"\n"
            ]),
            vec![pair("message_stop", "{}")]
        );
    }

    #[test]
    fn the_end_completes_a_last_event_without_its_blank_line() {
        assert_eq!(
            events(&[b"data: 1\n\ndata: [DONE]"]),
            vec![pair("", "1"), pair("", "[DONE]")]
        );
        assert_eq!(events(&[b"data: [DONE]\n"]), vec![pair("", "[DONE]")]);
    }
}
