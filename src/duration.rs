//! Durations as people write them in config: "250ms", "30s", "5m", "6h": one number, one unit.
//! A number without its unit is refused (is `window: 24` hours or seconds?), but for `0`, which
//! is zero in every unit. Stored as milliseconds.

/// What every duration message ends with: the one form allowed.
const ONE_UNIT: &str = "write one number with one unit (ms, s, m, h or d), e.g. \"30s\"";

/// Parses a human duration into milliseconds; the error says what was expected.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!(
            "{text:?} is negative: a duration is positive; {ONE_UNIT}"
        ));
    }
    let (number, unit) = split_number(t);
    if number.is_empty() {
        return Err(format!("{text:?} is not a duration: {ONE_UNIT}"));
    }
    // Zero is zero in every unit, however it is written ("0", "0.0").
    if unit.trim().is_empty() && number.bytes().any(|b| b != b'0' && b != b'.') {
        return Err(no_unit(number));
    }
    // ("1m30s" lands here too; the CLI says which one unit to write instead.)
    let Some(scale) = unit_ns(unit.trim()) else {
        return Err(format!("{text:?} has an unknown unit: {ONE_UNIT}"));
    };
    let ns = parse_decimal_ns(number, scale)
        .ok_or_else(|| format!("{text:?} is not a duration: {ONE_UNIT}"))?;
    let ms = ns.saturating_add(NS_PER_MS / 2) / NS_PER_MS;
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_MS => Ok(ms),
        _ => Err(format!("duration {text:?} is too large")),
    }
}

/// A duration as configuration writes it, in the largest unit that holds it whole (`24h`,
/// `15m`, `2s`, `1500ms`): what [`parse_duration_ms`] reads back to the same milliseconds. The
/// one form `explain` prints every duration in.
pub fn display_ms(ms: u64) -> String {
    let (n, unit) = match ms {
        0 => (0, "s"),
        _ if ms % 3_600_000 == 0 => (ms / 3_600_000, "h"),
        _ if ms % 60_000 == 0 => (ms / 60_000, "m"),
        _ if ms % 1_000 == 0 => (ms / 1_000, "s"),
        _ => (ms, "ms"),
    };
    format!("{n}{unit}")
}

const NS_PER_MS: u128 = 1_000_000;
/// About 31,700 years: past it a duration is a typo.
const MAX_MS: u64 = 1_000_000_000_000_000;

/// A number written without its unit: the message names the two readings people mean.
pub fn no_unit(number: &str) -> String {
    format!("{number} has no unit: write \"{number}s\" for seconds, \"{number}h\" for hours (ms, s, m, h or d)")
}

fn split_number(t: &str) -> (&str, &str) {
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    t.split_at(split)
}

/// Nanoseconds per unit.
fn unit_ns(unit: &str) -> Option<u128> {
    match unit {
        "ms" => Some(NS_PER_MS),
        // A bare number reaches here only as 0 ([`parse_duration_ms`]).
        "" | "s" => Some(1_000 * NS_PER_MS),
        "m" => Some(60_000 * NS_PER_MS),
        "h" => Some(3_600_000 * NS_PER_MS),
        "d" => Some(86_400_000 * NS_PER_MS),
        _ => None,
    }
}

/// A non-negative decimal number (`12`, `1.5`, `.5` is refused) times `unit_ns`, in ns.
/// Saturates instead of overflowing; digits past the ninth decimal are ignored. Durations in
/// config and providers' rate-limit headers both read through it: exact, and std's `f64`
/// parsing would add 18 KB to the module (BENCHMARKS.md "Module size").
pub(crate) fn parse_decimal_ns(s: &str, unit_ns: u128) -> Option<u128> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns: u128 = 0;
    for b in int.bytes() {
        ns = ns.saturating_mul(10).saturating_add(u128::from(b - b'0'));
    }
    ns = ns.saturating_mul(unit_ns);
    if let Some(frac) = frac {
        if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut scale = unit_ns;
        for b in frac.bytes().take(9) {
            scale /= 10;
            ns = ns.saturating_add(u128::from(b - b'0').saturating_mul(scale));
        }
    }
    Some(ns)
}

/// Reads a duration from serde input: a string ("30s"); a number only when it is 0 (a bare
/// number has no unit: refused, [`no_unit`]).
pub(crate) mod serde_duration {
    use serde::de::{Deserializer, Error, Visitor};
    use std::fmt;

    struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a duration such as \"30s\"")
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<u64, E> {
            super::parse_duration_ms(v).map_err(E::custom)
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<u64, E> {
            match v {
                0 => Ok(0),
                _ => Err(E::custom(super::no_unit(&v.to_string()))),
            }
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v)
                .map_err(|_| E::custom("a duration cannot be negative"))
                .and_then(|s| self.visit_u64(s))
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<u64, E> {
            // (Not formatted: std's float printing would add kilobytes to the module.)
            if v == 0.0 {
                return Ok(0);
            }
            Err(E::custom(
                "a number has no unit: write it with one, e.g. \"1.5s\" (ms, s, m, h or d)",
            ))
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::{display_ms, parse_duration_ms};

    #[test]
    fn a_duration_is_shown_in_the_largest_whole_unit_and_reads_back_the_same() {
        for (ms, shown) in [
            (86_400_000, "24h"),
            (3_600_000, "1h"),
            (900_000, "15m"),
            (90_000, "90s"),
            (2_000, "2s"),
            (1_500, "1500ms"),
            (200, "200ms"),
            (0, "0s"),
        ] {
            assert_eq!(display_ms(ms), shown);
            assert_eq!(parse_duration_ms(shown), Ok(ms), "{shown} reads back");
        }
    }

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("1.5s"), Ok(1_500));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("6h"), Ok(21_600_000));
        // A bare number has no unit (seconds or hours?): refused, but for 0.
        assert_eq!(
            parse_duration_ms("24").unwrap_err(),
            "24 has no unit: write \"24s\" for seconds, \"24h\" for hours (ms, s, m, h or d)"
        );
        assert_eq!(parse_duration_ms("0"), Ok(0));
        assert_eq!(parse_duration_ms("0.0"), Ok(0));
        assert_eq!(parse_duration_ms("00.000"), Ok(0));
        assert!(parse_duration_ms(".").is_err());
        assert!(parse_duration_ms("0.5").is_err());
    }

    #[test]
    fn says_what_to_write_instead() {
        assert_eq!(
            parse_duration_ms("1m30s").unwrap_err(),
            "\"1m30s\" has an unknown unit: write one number with one unit (ms, s, m, h or d), e.g. \"30s\""
        );
        assert_eq!(
            parse_duration_ms("-5s").unwrap_err(),
            "\"-5s\" is negative: a duration is positive; write one number with one unit (ms, s, m, h or d), e.g. \"30s\""
        );
        assert_eq!(
            parse_duration_ms("30x").unwrap_err(),
            "\"30x\" has an unknown unit: write one number with one unit (ms, s, m, h or d), e.g. \"30s\""
        );
        assert_eq!(
            parse_duration_ms("soon").unwrap_err(),
            "\"soon\" is not a duration: write one number with one unit (ms, s, m, h or d), e.g. \"30s\""
        );
    }

    #[test]
    fn reads_decimals_exactly_and_rounds_half_up_to_the_millisecond() {
        assert_eq!(parse_duration_ms("0.0015s"), Ok(2));
        assert_eq!(parse_duration_ms("0.0014s"), Ok(1));
        assert_eq!(parse_duration_ms("2.5ms"), Ok(3));
        assert_eq!(parse_duration_ms("0.1h"), Ok(360_000));
        assert_eq!(
            parse_duration_ms("1000000000000s"),
            Ok(1_000_000_000_000_000)
        );
        assert!(parse_duration_ms("1000000000001s").is_err());
        assert!(parse_duration_ms("99999999999999999999999999999999999999999h").is_err());
        // One number as written: digits with an optional fraction.
        for bad in [".5s", "5.s", "1.2.3s", "."] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_garbage_with_a_hint() {
        for bad in ["", "s", "30x", "-3s", "1e999s", "3 days"] {
            let err = parse_duration_ms(bad).expect_err(bad);
            assert!(
                err.contains("duration") || err.contains("unit"),
                "{bad}: {err}"
            );
        }
    }
}
