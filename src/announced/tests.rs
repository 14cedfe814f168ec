use super::*;
use crate::host::{ManualClock, MemoryStore};

/// 2024-06-01T12:00:00Z
const NOW: u64 = 1_717_243_200_000;
const CAP: u64 = 60_000;

/// One answer's headers and how long they skip the provider.
type Row<'a> = (&'a [(&'a str, &'a str)], Option<u64>);

fn read_pairs(pairs: &[(&str, &str)], reserve: u64) -> Option<Announced> {
    read(
        pairs.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())),
        NOW,
        reserve,
        CAP,
    )
}

/// How long each answer's headers skip the provider (`None`: not at all).
fn skip(pairs: &[(&str, &str)]) -> Option<u64> {
    read_pairs(pairs, 0).map(|a| a.until_ms - NOW)
}

#[test]
fn openai_and_azure_durations() {
    let table: &[Row] = &[
        (
            &[
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "1s"),
            ],
            Some(1_000),
        ),
        (
            &[
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "20ms"),
            ],
            Some(20),
        ),
        (
            &[
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "1h2m3.5s"),
            ],
            Some(CAP),
        ),
        (
            &[
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "6m0s"),
            ],
            Some(CAP),
        ),
        // Both spent: the later reset.
        (
            &[
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "2s"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "7.5s"),
            ],
            Some(7_500),
        ),
        // Room left in both: nothing.
        (
            &[
                ("x-ratelimit-limit-requests", "60"),
                ("x-ratelimit-remaining-requests", "59"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-remaining-tokens", "149984"),
                ("x-ratelimit-reset-tokens", "6ms"),
            ],
            None,
        ),
        // Azure's seconds as plain numbers go through the same reset parser.
        (
            &[
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "12"),
            ],
            Some(12_000),
        ),
    ];
    for (pairs, want) in table {
        assert_eq!(skip(pairs), *want, "{pairs:?}");
    }
}

#[test]
fn anthropic_rfc3339_times() {
    let table: &[Row] = &[
        (
            &[
                ("anthropic-ratelimit-requests-remaining", "0"),
                ("anthropic-ratelimit-requests-reset", "2024-06-01T12:00:30Z"),
            ],
            Some(30_000),
        ),
        (
            &[
                ("anthropic-ratelimit-input-tokens-remaining", "0"),
                (
                    "anthropic-ratelimit-input-tokens-reset",
                    "2024-06-01T14:00:05.25+02:00",
                ),
            ],
            Some(5_250),
        ),
        (
            &[
                ("anthropic-ratelimit-output-tokens-remaining", "0"),
                (
                    "anthropic-ratelimit-output-tokens-reset",
                    "2024-06-01T12:00:02Z",
                ),
                ("anthropic-ratelimit-tokens-remaining", "0"),
                ("anthropic-ratelimit-tokens-reset", "2024-06-01T12:00:09Z"),
            ],
            Some(9_000),
        ),
        (
            &[
                ("anthropic-ratelimit-requests-remaining", "49"),
                ("anthropic-ratelimit-requests-reset", "2024-06-01T12:00:30Z"),
            ],
            None,
        ),
    ];
    for (pairs, want) in table {
        assert_eq!(skip(pairs), *want, "{pairs:?}");
    }
}

#[test]
fn bad_headers_change_nothing_or_are_capped() {
    let bad: &[&[(&str, &str)]] = &[
        // Absent.
        &[],
        &[("x-ratelimit-remaining-requests", "0")],
        &[("x-ratelimit-reset-requests", "5s")],
        // Malformed remaining.
        &[
            ("x-ratelimit-remaining-requests", "zero"),
            ("x-ratelimit-reset-requests", "5s"),
        ],
        &[
            ("x-ratelimit-remaining-requests", ""),
            ("x-ratelimit-reset-requests", "5s"),
        ],
        &[
            ("x-ratelimit-remaining-requests", "0.0"),
            ("x-ratelimit-reset-requests", "5s"),
        ],
        // Negative remaining or reset.
        &[
            ("x-ratelimit-remaining-requests", "-1"),
            ("x-ratelimit-reset-requests", "5s"),
        ],
        &[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "-5s"),
        ],
        // Malformed reset.
        &[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "soon"),
        ],
        &[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "5 parsecs"),
        ],
        &[
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2024-13-01T12:00:30Z"),
        ],
        // A reset in the past, or of zero.
        &[
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2024-06-01T11:00:00Z"),
        ],
        &[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "0s"),
        ],
        // A dimension nobody announces, or the two families crossed.
        &[
            ("x-ratelimit-remaining-widgets", "0"),
            ("x-ratelimit-reset-widgets", "5s"),
        ],
        &[
            ("x-ratelimit-remaining-requests", "0"),
            ("anthropic-ratelimit-requests-reset", "2024-06-01T12:00:30Z"),
        ],
        // Not UTF-8.
        &[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "5\u{fffd}s"),
        ],
    ];
    for pairs in bad {
        assert_eq!(skip(pairs), None, "{pairs:?}");
    }
    // Absurd: a reset a year away is the cap.
    let year = [
        ("anthropic-ratelimit-requests-remaining", "0"),
        ("anthropic-ratelimit-requests-reset", "2025-06-01T12:00:00Z"),
    ];
    assert_eq!(skip(&year), Some(CAP));
    let huge = [
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "99999999999999999999h"),
    ];
    assert_eq!(skip(&huge), Some(CAP));
    // A cap of 0 turns skipping off.
    let pairs = [
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "5s"),
    ];
    let bytes = pairs.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes()));
    assert_eq!(read(bytes, NOW, 0, 0), None);
}

#[test]
fn a_reserve_skips_a_provider_with_fewer_tokens_left() {
    let pairs = [
        ("x-ratelimit-remaining-requests", "40"),
        ("x-ratelimit-reset-requests", "1s"),
        ("x-ratelimit-remaining-tokens", "900"),
        ("x-ratelimit-reset-tokens", "3s"),
    ];
    assert_eq!(read_pairs(&pairs, 0), None);
    assert_eq!(read_pairs(&pairs, 900), None);
    let announced = read_pairs(&pairs, 1_000).expect("under the reserve");
    assert_eq!(
        announced,
        Announced {
            until_ms: NOW + 3_000,
            at_ms: NOW,
            requests: Some(40),
            tokens: Some(900),
            spent: Dimension::Tokens,
        }
    );
    // The reserve is tokens only: requests stay at "none left".
    let requests = [
        ("x-ratelimit-remaining-requests", "3"),
        ("x-ratelimit-reset-requests", "1s"),
    ];
    assert_eq!(read_pairs(&requests, 1_000), None);
}

#[test]
fn the_header_test_knows_both_families_only() {
    for name in [
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-tokens",
        "anthropic-ratelimit-tokens-reset",
    ] {
        assert!(is_rate_limit_header(name.as_bytes()), "{name}");
    }
    for name in [
        "retry-after",
        "x-request-id",
        "anthropic-version",
        "content-type",
    ] {
        assert!(!is_rate_limit_header(name.as_bytes()), "{name}");
    }
}

#[test]
fn the_skip_is_kept_in_the_health_record_the_later_end_winning() {
    use crate::health::{Admission, Health};
    let config = crate::config::Config::from_json(
        br#"{"providers":[{"name":"p"},{"name":"q"}],"chains":[{"name":"c","providers":["p","q"]}]}"#,
        &|_| None,
    )
    .unwrap();
    let store = MemoryStore::default();
    let clock = ManualClock::at(NOW);
    let health = Health::new(&store, &clock, &config.breaker, &config.dead_marks);
    let shared = SharedAnnouncements { store: &store };
    // Without a health record (configure time makes one) nothing is skipped.
    assert!(!health.skip_ahead("p", NOW + 1_000));
    health.ensure_record("p");
    let available = |h: &Health| matches!(h.admit("p", "m", 1), Admission::Available { .. });
    assert!(available(&health));
    assert_eq!(shared.last("p"), None);
    let long = read_pairs(
        &[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "20s"),
        ],
        0,
    )
    .expect("spent");
    assert!(health.skip_ahead("p", long.until_ms) && shared.note("p", &long));
    let short = Announced {
        until_ms: NOW + 5_000,
        ..long
    };
    assert!(
        !health.skip_ahead("p", short.until_ms),
        "an earlier end does not shorten it"
    );
    assert!(!shared.note("p", &short));
    assert_eq!(
        health.admit("p", "m", 1),
        Admission::RateLimitedAhead {
            until_ms: NOW + 20_000
        }
    );
    assert!(
        matches!(health.admit("q", "m", 1), Admission::Available { .. }),
        "per provider"
    );
    assert_eq!(shared.last("p"), Some(long));
    // A failure reported meanwhile keeps the skip (the record is rewritten whole).
    health.report(
        "p",
        "m",
        &crate::health::Report::new(crate::classify::Class::Timeout, true),
    );
    assert!(!available(&health));
    clock.advance(20_000);
    assert!(available(&health), "back at its reset");
    assert!(health.skip_ahead("p", NOW + 25_000));
    assert!(!available(&health));
    store.set("llm_failover.ahead.r", b"junk", None).unwrap();
    assert_eq!(shared.last("r"), None);
}

/// Host only: proptest is not built for wasm32.
#[cfg(not(target_arch = "wasm32"))]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any header values: never a panic, and a skip never longer than the cap nor in the past.
        #[test]
        fn any_values_give_a_bounded_skip(
            remaining in "\\PC{0,24}",
            reset in "\\PC{0,40}",
            tokens in "[0-9-]{0,6}",
            token_reset in "[0-9hms.:TZ+-]{0,30}",
            now in 0u64..4_000_000_000_000,
            reserve in 0u64..1_000_000,
            cap in 0u64..3_600_000,
        ) {
            for (a, b) in [
                ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
                ("anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"),
            ] {
                let pairs = [
                    (a.as_bytes(), remaining.as_bytes()),
                    (b.as_bytes(), reset.as_bytes()),
                    (&b"x-ratelimit-remaining-tokens"[..], tokens.as_bytes()),
                    (&b"x-ratelimit-reset-tokens"[..], token_reset.as_bytes()),
                ];
                if let Some(found) = read(pairs, now, reserve, cap) {
                    prop_assert!(found.until_ms > now);
                    prop_assert!(found.until_ms - now <= cap);
                    prop_assert_eq!(decode(&encode(&found)), Some(found));
                }
            }
        }

        /// A well-formed empty announcement always skips, for its reset or the cap.
        #[test]
        fn an_empty_quota_skips_until_its_reset(ms in 1u64..10_000_000) {
            let reset = format!("{ms}ms");
            let pairs = [
                (&b"x-ratelimit-remaining-tokens"[..], &b"0"[..]),
                (&b"x-ratelimit-reset-tokens"[..], reset.as_bytes()),
            ];
            let found = read(pairs, NOW, 0, CAP).map(|a| a.until_ms - NOW);
            prop_assert_eq!(found, Some(ms.min(CAP)));
        }
    }
}
