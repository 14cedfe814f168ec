//! Golden bytes from protobuf's own encoder: `tests/integration/ratelimit_client.py` builds the
//! messages from the proto's field numbers, and printed these with
//! `encode("llm-failover", [Descriptor([("budget","openai")], 60000, "DAY", 1234),
//! Descriptor([("budget","caller:team-a")], 5000000, "MONTH", 0),
//! Descriptor([("failures","anthropic")], 20, "WEEK", 3)]).hex()` and a `RateLimitResponse`
//! with the three statuses below `.SerializeToString().hex()`.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const REQUEST: &str = "0a0c6c6c6d2d6661696c6f766572121f0a100a0662756467657412066f70656e6169120608e0d40310041a0308d20912240a170a06627564676574120d63616c6c65723a7465616d2d61120708c096b10210051a0012210a150a086661696c757265731209616e7468726f7069631204081410071a020803";

const RESPONSE: &str = "080212190801120608e0d4031004188ecb03220908901c1080cab5ee01120c08021204081410072202083b12020801";

#[test]
fn a_request_is_the_bytes_protobuf_writes() {
    let d = |key, value, limit, unit, hits| Descriptor {
        key,
        value,
        limit,
        unit,
        hits,
    };
    let bytes = encode_request(
        "llm-failover",
        &[
            d("budget", "openai", 60_000, WindowUnit::Day, 1234),
            // hits 0 is sent (an empty UInt64Value): the service reads it as "check only".
            d("budget", "caller:team-a", 5_000_000, WindowUnit::Month, 0),
            d("failures", "anthropic", 20, WindowUnit::Week, 3),
        ],
    );
    assert_eq!(bytes, hex(REQUEST));
}

#[test]
fn a_response_reads_as_protobuf_wrote_it() {
    let statuses = decode_response(&hex(RESPONSE)).unwrap();
    assert_eq!(
        statuses,
        vec![
            Status {
                code: 1,
                limit: Some(60_000),
                remaining: 58_766,
                reset_ms: 3_600_500,
            },
            Status {
                code: 2,
                limit: Some(20),
                remaining: 0,
                reset_ms: 59_000,
            },
            // An unknown domain: OK, no current limit, nothing left.
            Status {
                code: 1,
                limit: None,
                remaining: 0,
                reset_ms: 0,
            },
        ]
    );
}

#[test]
fn broken_bytes_read_as_nothing() {
    let good = hex(RESPONSE);
    for cut in 1..good.len() {
        // Every truncation either fails or reads a prefix; none panics.
        let _ = decode_response(&good[..cut]);
    }
    assert_eq!(decode_response(&[0x12, 0x05, 0x08]), None);
    assert_eq!(decode_response(&[0xff; 12]), None);
    assert_eq!(decode_response(&[]), Some(vec![]));
}

#[test]
fn the_grpc_path_is_the_service_and_method() {
    assert_eq!(
        GRPC_PATH,
        format!("/{}/{}", crate::fleet::SERVICE, crate::fleet::METHOD)
    );
}

fn answer(headers: &[(&str, &str)], body: &[u8], trailers: &[(&str, &str)]) -> GrpcAnswer {
    let mut a = GrpcAnswer::default();
    for (k, v) in headers {
        a.header(k.as_bytes(), v.as_bytes());
    }
    // In two pieces, as HTTP/2 data frames may split it.
    let (first, second) = body.split_at(body.len() / 2);
    a.data(first);
    a.data(second);
    for (k, v) in trailers {
        a.header(k.as_bytes(), v.as_bytes());
    }
    a
}

#[test]
fn a_grpc_answer_is_its_one_frame_with_status_0() {
    let message = hex(RESPONSE);
    let framed = grpc_frame(&message);
    assert_eq!(framed[..5], [0, 0, 0, 0, message.len() as u8]);
    let ok = answer(
        &[(":status", "200"), ("content-type", "application/grpc")],
        &framed,
        &[("grpc-status", "0")],
    );
    assert_eq!(ok.message(), Ok(message.as_slice()));
    // An empty message is a frame too (a response with no statuses).
    assert_eq!(
        answer(
            &[(":status", "200")],
            &grpc_frame(&[]),
            &[("grpc-status", "0")]
        )
        .message(),
        Ok(&[][..])
    );
}

#[test]
fn a_failed_or_broken_grpc_answer_has_no_message() {
    let framed = grpc_frame(&hex(RESPONSE));
    let fails = |a: GrpcAnswer| a.message().unwrap_err();
    // Trailers-only: the status in the headers, no body.
    let unavailable = answer(&[(":status", "200"), ("grpc-status", "14")], &[], &[]);
    assert_eq!(fails(unavailable), "gRPC status 14");
    // A message, then an error in the trailers: the message is not the answer.
    let late = answer(&[(":status", "200")], &framed, &[("grpc-status", "13")]);
    assert_eq!(fails(late), "gRPC status 13");
    assert_eq!(
        fails(answer(&[(":status", "200")], &framed, &[])),
        "no grpc-status"
    );
    assert_eq!(
        fails(answer(&[(":status", "503")], &[], &[])),
        "HTTP status 503"
    );
    assert_eq!(fails(answer(&[], &[], &[])), "HTTP status 0");
    let ok = [(":status", "200")];
    let trailers = [("grpc-status", "0")];
    // Cut short, a byte too many, two frames, compressed, garbage status.
    assert!(answer(&ok, &framed[..framed.len() - 1], &trailers)
        .message()
        .is_err());
    let mut long = framed.clone();
    long.push(0);
    assert!(answer(&ok, &long, &trailers).message().is_err());
    assert!(
        answer(&ok, &[framed.clone(), framed.clone()].concat(), &trailers)
            .message()
            .is_err()
    );
    let mut compressed = framed.clone();
    compressed[0] = 1;
    assert!(answer(&ok, &compressed, &trailers).message().is_err());
    assert!(answer(&ok, &[0, 0, 0], &trailers).message().is_err());
    assert_eq!(
        fails(answer(&ok, &framed, &[("grpc-status", "zero")])),
        format!("gRPC status {}", u32::MAX)
    );
    // Past the largest answer kept.
    let mut huge = answer(&ok, &framed, &trailers);
    huge.data(&vec![0; MAX_ANSWER]);
    assert!(huge.message().is_err());
}
