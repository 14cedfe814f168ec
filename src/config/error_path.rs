//! The field path of a configuration parse error (docs/behaviour.md section 9: every problem names its
//! field), found after the fact. `Config::from_json` parses with plain serde_json; only when that
//! fails does [`of`] walk the text up to the error's line and column with the request-body
//! scanner's tokens (`crate::rewrite::Scanner`), keeping each open object's member name and each
//! array's index. (Tracking the path during the parse, as serde_path_to_error does, doubled the
//! module's generic serde code for every configuration type: about 24 KB.)
//!
//! The path is read off where serde_json leaves its position: after a misspelt member's name
//! (the path names the member), after a value of the wrong type or before the `[`/`{` it
//! refused (the value), after the `}` of an object that lacks a field (the object), at the first
//! byte that is not JSON (the innermost value there). A differential test (`tests.rs`) holds the
//! paths to serde_path_to_error's over thousands of broken configurations; the one deliberate
//! difference (docs/observability.md, "Per-request log": configuration errors): a syntax error where a member name belongs names
//! the object (`providers[0]`), where serde_path_to_error printed `providers[0].?`.

use crate::rewrite::{unescape, Scanner};
use serde_json::error::Category;

/// One open array or object and its current element or member.
struct Frame {
    object: bool,
    /// The current member's name (objects) once read.
    key: Option<String>,
    /// The current element's index (arrays).
    index: usize,
}

/// What the innermost open container (or the top level) expects next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A member name, or the object's end.
    Name,
    /// The `:` after a member name.
    Colon,
    /// A value (first in an array: or its end).
    Value,
    /// `,` or the container's end (at the top level: nothing).
    Next,
}

/// Why the walk stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// At the error's position, between tokens.
    At,
    /// The text ends.
    End,
    /// A byte that cannot come here.
    Bad,
    /// Inside a token (a member name when `true`).
    InToken(bool),
}

/// Where the walk to the error stopped.
struct Walk {
    stop: Stop,
    /// The containers open there, outermost first.
    open: Vec<Frame>,
    /// What was to come next.
    expect: Expect,
    /// The container the last token closed (its last member is where some errors are).
    closed: Option<Frame>,
    /// The byte there.
    at: Option<u8>,
}

/// The path serde_path_to_error would name for `err` from parsing `json` (`""`: the top level).
#[inline]
pub(super) fn of(json: &[u8], err: &serde_json::Error) -> String {
    let offset = byte_offset(json, err.line(), err.column());
    let syntax = err.classify() != Category::Data;
    path_at(&walk(json, offset), &err.to_string(), syntax)
}

/// Walks `json` as serde_json reads it, up to `offset` (or a byte that cannot come there).
fn walk(json: &[u8], offset: usize) -> Walk {
    let mut s = Scanner::new(json);
    let mut open: Vec<Frame> = Vec::new();
    let mut expect = Expect::Value;
    // The container the last token closed (its last member is where some errors are).
    let mut closed: Option<Frame> = None;
    let stop = loop {
        s.skip_ws();
        let Some(c) = s.peek() else {
            break Stop::End;
        };
        if s.i >= offset {
            break Stop::At;
        }
        let top = open.last_mut();
        let first = top
            .as_ref()
            .is_some_and(|f| f.index == 0 && f.key.is_none());
        let object = top.as_ref().map(|f| f.object);
        closed = None;
        match (expect, c, object) {
            (Expect::Name, b'"', _) => {
                let start = s.i + 1;
                if s.string().is_err() || s.i > offset {
                    break Stop::InToken(true);
                }
                let raw = s.b.get(start..s.i - 1).unwrap_or_default();
                let raw = String::from_utf8_lossy(raw);
                let mut name = String::new();
                if unescape(&raw, |c| {
                    name.push(c);
                    true
                })
                .is_err()
                {
                    name = raw.into_owned();
                }
                if let Some(f) = open.last_mut() {
                    f.key = Some(name);
                }
                expect = Expect::Colon;
                continue;
            }
            (Expect::Colon, b':', _) => expect = Expect::Value,
            (Expect::Value, b'{' | b'[', _) => {
                open.push(Frame {
                    object: c == b'{',
                    key: None,
                    index: 0,
                });
                s.i += 1;
                expect = if c == b'{' {
                    Expect::Name
                } else {
                    Expect::Value
                };
                continue;
            }
            (Expect::Name, b'}', Some(true)) | (Expect::Value, b']', Some(false)) => {
                if !first {
                    break Stop::Bad; // a trailing comma
                }
                closed = open.pop();
                expect = Expect::Next;
            }
            (Expect::Next, b'}', Some(true)) | (Expect::Next, b']', Some(false)) => {
                closed = open.pop();
                expect = Expect::Next;
            }
            (Expect::Next, b',', Some(object)) => {
                if let Some(f) = open.last_mut() {
                    f.index += 1;
                }
                expect = if object { Expect::Name } else { Expect::Value };
            }
            (Expect::Value, _, _) => {
                // A string, number or literal (containers were taken above).
                let token = s.value();
                // `01`: serde_json stops inside the number.
                let more_digits = c != b'"' && s.peek().is_some_and(|c| c.is_ascii_digit());
                if token.is_err() || s.i > offset || more_digits {
                    break Stop::InToken(false);
                }
                expect = Expect::Next;
                continue;
            }
            _ => break Stop::Bad,
        }
        s.i += 1;
    };
    let at = s.peek();
    Walk {
        stop,
        open,
        expect,
        closed,
        at,
    }
}

/// The path of the error from where the walk stopped.
fn path_at(w: &Walk, message: &str, syntax: bool) -> String {
    let mut path = String::new();
    let Some((innermost, outer)) = w.open.split_last() else {
        return path;
    };
    for f in outer {
        push(&mut path, f, f.index);
    }
    // Errors serde_json places only once the enclosing container is done: after its `,` (an
    // array's: the element before it) or after its end (its last member).
    let late = ["data did not match any variant", "unknown variant"]
        .iter()
        .any(|m| message.starts_with(m));
    let member = match (w.stop, w.expect) {
        (Stop::InToken(name), _) => !name,
        (_, Expect::Name) => false,
        (Stop::End | Stop::Bad, Expect::Colon | Expect::Next) if syntax => false,
        (Stop::End | Stop::Bad, Expect::Value) if syntax => {
            innermost.object || (w.stop == Stop::Bad && w.at != Some(b']'))
        }
        (_, Expect::Colon) => !late && !message.starts_with("duplicate field"),
        (_, Expect::Value) if !innermost.object && innermost.index == 0 => {
            // Right after `[`: an element refused before it was read, or the array refused
            // as a whole (by a type read with `deserialize_any`, or an enum).
            // A chain entry (read with `deserialize_any`) refused for being a sequence is
            // refused after its `[`: the array just opened is the entry itself.
            (w.at == Some(b'[')
                && message.starts_with("invalid type: sequence,")
                && !message.contains(super::raw::ENTRY_EXPECTED))
                || (w.at == Some(b'{') && message.starts_with("invalid type: map,"))
        }
        _ => true,
    };
    let mut index = innermost.index;
    if late && !innermost.object && w.expect == Expect::Value && w.closed.is_none() {
        index = index.saturating_sub(1);
    }
    if member {
        push(&mut path, innermost, index);
    }
    // The one untagged enum read as an object's member, not as an array's element: a container
    // that closed inside that object is the refused value itself, not its parent.
    let whole = innermost.object
        && message.starts_with("data did not match any variant of untagged enum RawForward ");
    if let (true, false, Some(closed)) = (late && member, whole, &w.closed) {
        push(&mut path, closed, closed.index);
    }
    path
}

#[inline]
fn push(path: &mut String, f: &Frame, index: usize) {
    if !f.object {
        path.push_str(&format!("[{index}]"));
    } else if let Some(key) = &f.key {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    }
}

/// serde_json's line (1-based; 0: no position) and column (bytes since the line's start) as a
/// byte offset into `json`.
#[inline]
fn byte_offset(json: &[u8], line: usize, column: usize) -> usize {
    let line_start = match line {
        0 => return 0,
        1 => 0,
        _ => json
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .nth(line - 2)
            .map_or(json.len(), |(i, _)| i + 1),
    };
    line_start + column
}

#[cfg(all(test, not(target_arch = "wasm32")))]
pub(super) mod tests;
