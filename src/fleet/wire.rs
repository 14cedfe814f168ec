//! The rate-limit service's two messages in protobuf bytes, written and read by hand (the
//! generated types would bring a protobuf runtime into the module): `RateLimitRequest` out,
//! `RateLimitResponse` in (Envoy's `api/envoy/service/ratelimit/v3/rls.proto`; field numbers in
//! docs/internals.md "The fleet's store"). Golden bytes from the proto's own encoder hold both
//! (`tests`).

use crate::config::WindowUnit;

/// One descriptor of a request: its entries, the limit it carries (the service's limit
/// override, so the failover file stays the one place limits are written) and what this
/// replica adds to its counter (0: read only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor<'a> {
    pub key: &'a str,
    pub value: &'a str,
    pub limit: u32,
    pub unit: WindowUnit,
    pub hits: u64,
}

/// One descriptor's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// `OK` 1, `OVER_LIMIT` 2.
    pub code: u32,
    /// The limit the service applied, when it applied one: absent, the service does not know
    /// the request's domain (it counted nothing).
    pub limit: Option<u32>,
    /// What is left of the limit (0 once it is reached).
    pub remaining: u32,
    /// When the counter's window ends, from now (ms).
    pub reset_ms: u64,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field: tag, length, then what `body` writes.
fn nested(out: &mut Vec<u8>, field: u8, body: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    body(&mut inner);
    out.push(field << 3 | 2);
    varint(out, inner.len() as u64);
    out.extend_from_slice(&inner);
}

fn bytes_field(out: &mut Vec<u8>, field: u8, value: &[u8]) {
    nested(out, field, |o| o.extend_from_slice(value));
}

fn varint_field(out: &mut Vec<u8>, field: u8, value: u64) {
    if value != 0 {
        out.push(field << 3);
        varint(out, value);
    }
}

/// `RateLimitRequest { domain, descriptors }` (no request-level `hits_addend`: each descriptor
/// carries its own, 0 included, which the service reads as "check only").
pub fn encode_request(domain: &str, descriptors: &[Descriptor]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + descriptors.len() * 48);
    bytes_field(&mut out, 1, domain.as_bytes());
    for d in descriptors {
        nested(&mut out, 2, |o| {
            nested(o, 1, |e| {
                bytes_field(e, 1, d.key.as_bytes());
                bytes_field(e, 2, d.value.as_bytes());
            });
            nested(o, 2, |l| {
                varint_field(l, 1, u64::from(d.limit));
                varint_field(l, 2, d.unit as u64);
            });
            // google.protobuf.UInt64Value: present even when 0.
            nested(o, 3, |h| varint_field(h, 1, d.hits));
        });
    }
    out
}

/// A protobuf reader over one message's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

enum Value<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.bytes.split_first()?;
            self.bytes = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    /// The next field: (number, value); `None` at the end; `Some(Err)` on bad bytes.
    fn field(&mut self) -> Option<Result<(u64, Value<'a>), ()>> {
        if self.bytes.is_empty() {
            return None;
        }
        let next = (|| {
            let tag = self.varint()?;
            let value = match tag & 7 {
                0 => Value::Int(self.varint()?),
                1 => Value::Bytes(self.take(8)?),
                2 => {
                    let len = usize::try_from(self.varint()?).ok()?;
                    Value::Bytes(self.take(len)?)
                }
                5 => Value::Bytes(self.take(4)?),
                _ => return None,
            };
            Some((tag >> 3, value))
        })();
        Some(next.ok_or(()))
    }

    /// Calls `each` with every field; `None` when the bytes do not parse.
    fn each(bytes: &'a [u8], mut each: impl FnMut(u64, Value<'a>)) -> Option<()> {
        let mut r = Reader { bytes };
        while let Some(field) = r.field() {
            let (n, v) = field.ok()?;
            each(n, v);
        }
        Some(())
    }
}

/// `RateLimitResponse`'s per-descriptor statuses, in the request's order; `None` when the bytes
/// are not such a message.
pub fn decode_response(bytes: &[u8]) -> Option<Vec<Status>> {
    let mut statuses = Vec::new();
    let mut ok = true;
    Reader::each(bytes, |n, v| {
        if let (2, Value::Bytes(b)) = (n, v) {
            match decode_status(b) {
                Some(s) => statuses.push(s),
                None => ok = false,
            }
        }
    })?;
    ok.then_some(statuses)
}

fn decode_status(bytes: &[u8]) -> Option<Status> {
    let mut s = Status::default();
    let mut ok = true;
    Reader::each(bytes, |n, v| match (n, v) {
        (1, Value::Int(code)) => s.code = code as u32,
        (2, Value::Bytes(limit)) => {
            let mut per_unit = 0;
            ok &= Reader::each(limit, |n, v| {
                if let (1, Value::Int(r)) = (n, v) {
                    per_unit = r as u32;
                }
            })
            .is_some();
            s.limit = Some(per_unit);
        }
        (3, Value::Int(r)) => s.remaining = r as u32,
        (4, Value::Bytes(d)) => {
            let (mut secs, mut nanos) = (0u64, 0u64);
            ok &= Reader::each(d, |n, v| match (n, v) {
                (1, Value::Int(x)) => secs = x,
                (2, Value::Int(x)) => nanos = x,
                _ => {}
            })
            .is_some();
            s.reset_ms = secs.saturating_mul(1000).saturating_add(nanos / 1_000_000);
        }
        _ => {}
    })?;
    ok.then_some(s)
}

/// The call's `:path` when it goes as a plain HTTP/2 request (the native build, which has no
/// gRPC client: `native/src/fleet.rs`): `/<service>/<method>`.
pub const GRPC_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The largest answer [`GrpcAnswer`] keeps (one status per descriptor: a few dozen bytes each).
const MAX_ANSWER: usize = 1 << 20;

/// `message` as gRPC puts it on the wire: one uncompressed frame (a 0 flag byte, the length
/// as a big-endian u32, the message).
pub fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// A gRPC call's answer as it comes back over HTTP/2 ([`grpc_frame`], [`GRPC_PATH`]): fed the
/// response's headers, body and trailers as they come, it says whether the call succeeded
/// (`:status` 200 and `grpc-status` 0, in the trailers or, for an answer without a message,
/// in the headers) and gives its message, which the sync reads as the wasm build reads a gRPC
/// client's answer.
#[derive(Debug, Default)]
pub struct GrpcAnswer {
    http_status: Option<u32>,
    grpc_status: Option<u32>,
    body: Vec<u8>,
    too_long: bool,
}

impl GrpcAnswer {
    /// One header or trailer.
    pub fn header(&mut self, name: &[u8], value: &[u8]) {
        let number = || std::str::from_utf8(value).ok()?.trim().parse().ok();
        match name {
            b":status" => self.http_status = number(),
            b"grpc-status" => self.grpc_status = Some(number().unwrap_or(u32::MAX)),
            _ => {}
        }
    }

    /// One piece of the body.
    pub fn data(&mut self, chunk: &[u8]) {
        if self.body.len() + chunk.len() > MAX_ANSWER {
            self.too_long = true;
        } else {
            self.body.extend_from_slice(chunk);
        }
    }

    /// The response message when the call succeeded with exactly one uncompressed one; else
    /// why not (for the debug log).
    pub fn message(&self) -> Result<&[u8], String> {
        match (self.http_status, self.grpc_status) {
            (Some(200), Some(0)) => {}
            (Some(200), Some(s)) => return Err(format!("gRPC status {s}")),
            (Some(200), None) => return Err("no grpc-status".into()),
            (s, _) => return Err(format!("HTTP status {}", s.unwrap_or(0))),
        }
        let frame = (self.body.split_first())
            .filter(|(flag, _)| **flag == 0 && !self.too_long)
            .and_then(|(_, rest)| rest.split_first_chunk::<4>())
            .filter(|(len, message)| u32::from_be_bytes(**len) as usize == message.len());
        frame
            .map(|(_, message)| message)
            .ok_or_else(|| format!("not one gRPC frame ({} bytes)", self.body.len()))
    }
}

#[cfg(test)]
mod tests;
