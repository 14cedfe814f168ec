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
