//! Bedrock's streaming answer (`application/vnd.amazon.eventstream`) unwrapped into
//! server-sent events, whatever the body chunk boundaries (docs/clouds.md): InvokeModel's into
//! the Anthropic Messages event stream a Messages caller (or a translator) reads, Converse's
//! into `event: <its event type>` / `data: <its payload>` for the Converse decoder
//! (`translate::converse`). This is the one place AWS's framing is read: everything after it
//! (translators, usage reader, failing-answer reader) reads SSE.
//!
//! A message is a 12-byte prelude (total length, headers length, both big-endian u32, then the
//! CRC32 of those 8 bytes), the headers (name length u8, name, value type u8, value), the
//! payload, and the CRC32 of everything before it. Both CRCs are checked: a damaged stream is
//! never passed on as if it were whole.
//!
//! * `:message-type: event`, `:event-type: chunk`: the payload is `{"bytes": base64}` holding
//!   one Anthropic event's JSON; it becomes `event: {its type}` / `data: {the JSON}`.
//! * `:message-type: event` of any other type whose payload is a JSON object (Converse's
//!   `messageStart`, `contentBlockDelta`, ..., `metadata`): `event: {the type}` / `data:
//!   {the payload}`.
//! * `:message-type: exception` (`:exception-type`, payload `{"message"}`) and
//!   `:message-type: error` (`:error-code`, `:error-message`): an Anthropic `event: error`,
//!   which the first-event check (`failing_answer::first_event`) reads like any provider's.
//! * Anything that cannot be read (a bad CRC, a length out of range, a chunk that is not
//!   base64 JSON) ends the output with an `event: error` of type `api_error`, and nothing after
//!   it is passed on; a stream that ends inside a message ends the same way ([`Unframer::finish`]).

use crate::rewrite;

/// The prelude: total length, headers length, prelude CRC.
const PRELUDE: usize = 12;
/// Prelude plus the message CRC: the smallest message.
const OVERHEAD: usize = PRELUDE + 4;
/// AWS's limit for one message (16 MiB); anything longer is a damaged length field.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// One stream's decoder: feed it the body chunks in order.
#[derive(Debug, Default)]
pub struct Unframer {
    /// The start of a message whose end has not arrived yet.
    pending: Vec<u8>,
    /// The stream was found damaged (or an error was written): nothing more is passed on.
    failed: bool,
}

impl Unframer {
    /// Appends the events of every complete message in `pending` + `chunk` to `out`, keeping
    /// the incomplete tail for the next chunk.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        // The common case: nothing pending, read the chunk in place.
        if self.pending.is_empty() {
            let used = self.read_messages(chunk, out);
            if !self.failed {
                let tail = chunk.get(used..).unwrap_or_default();
                self.pending.extend_from_slice(tail);
            }
            return;
        }
        self.pending.extend_from_slice(chunk);
        let mut pending = std::mem::take(&mut self.pending);
        let used = self.read_messages(&pending, out);
        if !self.failed {
            pending.drain(..used.min(pending.len()));
            self.pending = pending;
        }
    }

    /// The provider's stream ended: a message cut off by the end is an error.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.failed && !self.pending.is_empty() {
            self.fail("the event stream ended inside a message", out);
        }
        self.pending.clear();
    }

    /// Reads whole messages from the start of `buf`; returns how many bytes they took.
    fn read_messages(&mut self, buf: &[u8], out: &mut Vec<u8>) -> usize {
        let mut at = 0;
        while let Some(rest) = buf.get(at..) {
            match split_message(rest) {
                Ok(Some((message, len))) => {
                    at += len;
                    if let Err(why) = write_event(&message, out) {
                        self.fail(why, out);
                        return at;
                    }
                }
                Ok(None) => break,
                Err(why) => {
                    self.fail(why, out);
                    return at;
                }
            }
        }
        at
    }

    fn fail(&mut self, why: &str, out: &mut Vec<u8>) {
        self.failed = true;
        write_error(out, "api_error", why);
    }
}

/// One decoded message: the headers this module reads, and the payload.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Message<'a> {
    pub message_type: &'a [u8],
    pub event_type: &'a [u8],
    pub exception_type: &'a [u8],
    pub error_code: &'a [u8],
    pub error_message: &'a [u8],
    pub payload: &'a [u8],
}

/// The first message of `buf` and its length; `Ok(None)` when it is not complete yet.
pub fn split_message(buf: &[u8]) -> Result<Option<(Message<'_>, usize)>, &'static str> {
    let Some(prelude) = buf.get(..PRELUDE) else {
        return Ok(None);
    };
    let total = be_u32(prelude, 0) as usize;
    let headers_len = be_u32(prelude, 4) as usize;
    if crc32(prelude.get(..8).unwrap_or_default()) != be_u32(prelude, 8) {
        return Err("an event stream message's prelude failed its CRC check");
    }
    if !(OVERHEAD..=MAX_MESSAGE).contains(&total) || headers_len > total - OVERHEAD {
        return Err("an event stream message has impossible lengths");
    }
    let Some(whole) = buf.get(..total) else {
        return Ok(None);
    };
    let body_end = total - 4;
    if crc32(whole.get(..body_end).unwrap_or_default()) != be_u32(whole, body_end) {
        return Err("an event stream message failed its CRC check");
    }
    let headers = whole
        .get(PRELUDE..PRELUDE + headers_len)
        .ok_or("an event stream message has impossible lengths")?;
    let mut message = Message {
        payload: whole
            .get(PRELUDE + headers_len..body_end)
            .unwrap_or_default(),
        ..Message::default()
    };
    read_headers(headers, &mut message)?;
    Ok(Some((message, total)))
}

/// Reads the string headers this module uses; skips every other header by its type's size.
fn read_headers<'a>(mut h: &'a [u8], m: &mut Message<'a>) -> Result<(), &'static str> {
    const BAD: &str = "an event stream message has a malformed header";
    while let Some((&name_len, rest)) = h.split_first() {
        let name = rest.get(..name_len as usize).ok_or(BAD)?;
        let rest = rest.get(name_len as usize..).ok_or(BAD)?;
        let (&kind, rest) = rest.split_first().ok_or(BAD)?;
        let fixed = match kind {
            0 | 1 => 0,
            2 => 1,
            3 => 2,
            4 => 4,
            5 | 8 => 8,
            9 => 16,
            6 | 7 => {
                let len = rest.get(..2).ok_or(BAD)?;
                let len = u16::from_be_bytes([
                    len.first().copied().unwrap_or(0),
                    len.get(1).copied().unwrap_or(0),
                ]) as usize;
                let value = rest.get(2..2 + len).ok_or(BAD)?;
                if kind == 7 {
                    match name {
                        b":message-type" => m.message_type = value,
                        b":event-type" => m.event_type = value,
                        b":exception-type" => m.exception_type = value,
                        b":error-code" => m.error_code = value,
                        b":error-message" => m.error_message = value,
                        _ => {}
                    }
                }
                h = rest.get(2 + len..).ok_or(BAD)?;
                continue;
            }
            _ => return Err(BAD),
        };
        h = rest.get(fixed..).ok_or(BAD)?;
    }
    Ok(())
}

/// Writes the SSE event a message stands for.
fn write_event(m: &Message<'_>, out: &mut Vec<u8>) -> Result<(), &'static str> {
    match m.message_type {
        b"event" if m.event_type == b"chunk" => {
            let bytes = top_level_string(m.payload, "bytes")
                .ok_or("a Bedrock stream chunk is not the JSON object it should be")?;
            let json = decode_base64(unquote(bytes))
                .ok_or("a Bedrock stream chunk's bytes are not base64")?;
            let kind = top_level_string(&json, "type")
                .ok_or("a Bedrock stream chunk does not hold an Anthropic event")?;
            if !is_event_name(unquote(kind)) {
                return Err("a Bedrock stream chunk does not hold an Anthropic event");
            }
            put_sse(out, unquote(kind), &json);
            Ok(())
        }
        // Converse's events (`messageStart`, `contentBlockDelta`, ..., `metadata`): the payload
        // is the event's JSON, passed on under its type's name. A type written otherwise
        // is not Converse's or InvokeModel's, and is left out.
        b"event" if m.payload.starts_with(b"{") && is_event_name(m.event_type) => {
            put_sse(out, m.event_type, m.payload);
            Ok(())
        }
        b"event" => Ok(()),
        b"exception" => {
            let message = top_level_string(m.payload, "message").unwrap_or(b"\"\"");
            write_error_json(out, anthropic_error_type(m.exception_type), message);
            Ok(())
        }
        b"error" => {
            let message = String::from_utf8_lossy(m.error_message);
            write_error(out, anthropic_error_type(m.error_code), &message);
            Ok(())
        }
        _ => Err("an event stream message has an unknown message type"),
    }
}

/// `event: {name}` / `data: {json}` and the blank line: one SSE event, the form every stream
/// reader of the filter takes (the translators, the usage reader, the failing-answer reader).
fn put_sse(out: &mut Vec<u8>, name: &[u8], json: &[u8]) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name);
    out.extend_from_slice(b"\ndata: ");
    // A raw line break in JSON is whitespace (strings cannot hold one): keep the data on one
    // SSE line.
    out.extend(
        json.iter()
            .map(|&c| if c == b'\n' || c == b'\r' { b' ' } else { c }),
    );
    out.extend_from_slice(b"\n\n");
}

/// Whether an event type's name can stand on an SSE `event:` line as it is (letters, digits,
/// `_`, `.`, `-`: every Anthropic and Converse event type).
fn is_event_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// The raw token (quotes and escapes kept) of the top-level string member `name` of the JSON
/// object `json`; `None` when `json` is not an object or has no such string member (read with
/// the envelopes' member walker: no serde code for three small reads).
fn top_level_string<'a>(json: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let mut found = None;
    let _ = super::for_each_member(json, &mut |key, _, value| {
        let hit = value.first() == Some(&b'"') && rewrite::decoded_eq(key, name);
        if hit {
            found = Some(value);
        }
        hit
    });
    found
}

/// A string token without its quotes (base64 and Anthropic's event names hold no escapes).
fn unquote(token: &[u8]) -> &[u8] {
    token
        .strip_prefix(b"\"")
        .and_then(|t| t.strip_suffix(b"\""))
        .unwrap_or(token)
}

/// Bedrock's exception names and the Anthropic error types they become (which the classifier
/// and the Messages-to-Chat translator know); any other name is an `api_error`
/// (internalServerException, modelStreamErrorException, modelTimeoutException, ...).
const EXCEPTION_TYPES: [(&[u8], &str); 5] = [
    (b"throttlingexception", "rate_limit_error"),
    (b"validationexception", "invalid_request_error"),
    (b"accessdeniedexception", "permission_error"),
    (b"serviceunavailableexception", "overloaded_error"),
    (b"modelnotreadyexception", "overloaded_error"),
];

fn anthropic_error_type(exception: &[u8]) -> &'static str {
    EXCEPTION_TYPES
        .iter()
        .find(|(name, _)| exception.eq_ignore_ascii_case(name))
        .map_or("api_error", |(_, kind)| kind)
}

/// `event: error` with Anthropic's error object (`message`: a JSON string token).
fn write_error_json(out: &mut Vec<u8>, kind: &str, message: &[u8]) {
    out.extend_from_slice(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"message\":");
    out.extend_from_slice(message);
    out.extend_from_slice(b"}}\n\n");
}

/// `event: error` with a message of this module's own (or Bedrock's `:error-message`).
fn write_error(out: &mut Vec<u8>, kind: &str, message: &str) {
    let mut token = vec![b'"'];
    rewrite::push_escaped(&mut token, message);
    token.push(b'"');
    write_error_json(out, kind, &token);
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(bytes) = b.get(at..at + 4) {
        word.copy_from_slice(bytes);
    }
    u32::from_be_bytes(word)
}

/// CRC-32 (IEEE 802.3, the one zlib and the event stream use) from a 1 KiB table built at
/// compile time: a crate would bring a 16 KiB slice-by-16 table into the module for messages
/// of a few hundred bytes.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        let index = ((crc ^ b as u32) & 0xff) as usize;
        crc = CRC_TABLE.get(index).copied().unwrap_or(0) ^ (crc >> 8);
    }
    !crc
}

// Compile-time only: an index out of range would fail the build, not a request.
#[allow(clippy::indexing_slicing)]
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

/// Standard base64 (with padding, as AWS writes it); `None` on any other byte.
pub fn decode_base64(text: &[u8]) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let text = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for group in text.chunks(4) {
        let mut word = 0u32;
        for &c in group {
            word = (word << 6) | value(c)?;
        }
        match group.len() {
            4 => out.extend_from_slice(&word.to_be_bytes()[1..]),
            3 => out.extend_from_slice(&(word << 6).to_be_bytes()[1..3]),
            2 => out.push((word >> 4) as u8),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
#[cfg(not(target_arch = "wasm32"))] // proptest is a host-only dev-dependency
mod tests;
