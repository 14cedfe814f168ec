//! Durations as people write them in config: "250ms", "30s", "5m", "6h", or a bare number of
//! seconds. Stored as milliseconds.

/// What every duration message ends with: the one form allowed.
const ONE_UNIT: &str = "write one number with one unit (ms, s, m or h), e.g. \"30s\"";

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
    let Some(scale) = unit_ms(unit.trim()) else {
        // "1m30s": say what to write instead.
        return Err(match combined_ms(t) {
            Some(ms) => format!(
                "{text:?} combines units: write one number with one unit, e.g. \"{}\"",
                in_one_unit(ms)
            ),
            None => format!("{text:?} has an unknown unit: {ONE_UNIT}"),
        });
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: {ONE_UNIT}"))?;
    let ms = value * scale;
    if !ms.is_finite() || ms > 1e15 {
        return Err(format!("duration {text:?} is too large"));
    }
    Ok(ms.round() as u64)
}

fn split_number(t: &str) -> (&str, &str) {
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    t.split_at(split)
}

fn unit_ms(unit: &str) -> Option<f64> {
    match unit {
        "ms" => Some(1.0),
        "" | "s" => Some(1000.0),
        "m" => Some(60_000.0),
        "h" => Some(3_600_000.0),
        _ => None,
    }
}

/// "1m30s" as milliseconds, when it is a run of whole numbers with units.
fn combined_ms(t: &str) -> Option<u64> {
    let mut rest = t;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let (number, after) = split_number(rest);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let n: u64 = number.parse().ok()?;
        let scale = unit_ms(unit).filter(|_| !unit.is_empty())? as u64;
        total = total.checked_add(n.checked_mul(scale)?)?;
        rest = next;
    }
    Some(total)
}

/// The largest unit that writes `ms` exactly: 90000 -> "90s", 9000000 -> "150m".
fn in_one_unit(ms: u64) -> String {
    for (unit, scale) in [("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms % scale == 0 && ms > 0 {
            return format!("{}{unit}", ms / scale);
        }
    }
    format!("{ms}ms")
}

/// Accepts either a string ("30s") or a number of seconds in serde input.
pub(crate) mod serde_duration {
    use serde::de::{Deserializer, Error, Visitor};
    use std::fmt;

    struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a duration such as \"30s\" or a number of seconds")
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<u64, E> {
            super::parse_duration_ms(v).map_err(E::custom)
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<u64, E> {
            v.checked_mul(1000)
                .ok_or_else(|| E::custom("duration is too large"))
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v)
                .map_err(|_| E::custom("a duration cannot be negative"))
                .and_then(|s| self.visit_u64(s))
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<u64, E> {
            if v.is_finite() && (0.0..1e12).contains(&v) {
                Ok((v * 1000.0).round() as u64)
            } else {
                Err(E::custom(
                    "a duration must be a non-negative number of seconds",
                ))
            }
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration_ms;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("1.5s"), Ok(1_500));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("6h"), Ok(21_600_000));
        assert_eq!(parse_duration_ms("12"), Ok(12_000));
    }

    #[test]
    fn says_what_to_write_instead() {
        assert_eq!(
            parse_duration_ms("1m30s").unwrap_err(),
            "\"1m30s\" combines units: write one number with one unit, e.g. \"90s\""
        );
        assert_eq!(
            parse_duration_ms("2h30m").unwrap_err(),
            "\"2h30m\" combines units: write one number with one unit, e.g. \"150m\""
        );
        assert_eq!(
            parse_duration_ms("-5s").unwrap_err(),
            "\"-5s\" is negative: a duration is positive; write one number with one unit (ms, s, m or h), e.g. \"30s\""
        );
        assert_eq!(
            parse_duration_ms("30x").unwrap_err(),
            "\"30x\" has an unknown unit: write one number with one unit (ms, s, m or h), e.g. \"30s\""
        );
        assert_eq!(
            parse_duration_ms("soon").unwrap_err(),
            "\"soon\" is not a duration: write one number with one unit (ms, s, m or h), e.g. \"30s\""
        );
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
