//! Values as written in the file: sizes (`10MiB`), durations (`5s`), Envoy versions (`"1.38"`).

use super::yaml::show;
use crate::version::EnvoyVersion;
use llm_failover::duration::parse_duration_ms;
use serde_yaml_ng::Value;

/// Bytes as a number, or a size with a unit: "10MiB", "8MB", "512KiB", "1048576".
pub fn parse_size(v: &Value) -> Result<u64, String> {
    const HINT: &str = "write a number of bytes or a size such as \"10MiB\", \"8MB\", \"512KiB\"";
    let bytes = match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("{} is not a size — {HINT}", show(v)))?,
        Value::String(s) => {
            let t = s.trim();
            let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
            let (number, unit) = t.split_at(split);
            let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
                "" | "b" => 1,
                "k" | "kb" => 1_000,
                "ki" | "kib" => 1 << 10,
                "m" | "mb" => 1_000_000,
                "mi" | "mib" => 1 << 20,
                "g" | "gb" => 1_000_000_000,
                "gi" | "gib" => 1 << 30,
                _ => return Err(format!("{s:?} has an unknown unit — {HINT}")),
            };
            let n: u64 = number
                .parse()
                .map_err(|_| format!("{s:?} is not a size — {HINT}"))?;
            n.checked_mul(scale)
                .ok_or_else(|| format!("{s:?} is too large — at most 4GiB"))?
        }
        _ => return Err(format!("{} is not a size — {HINT}", show(v))),
    };
    if bytes == 0 {
        return Err(
            "must be more than 0 bytes — the request body is buffered for fallbacks".into(),
        );
    }
    if bytes > u64::from(u32::MAX) {
        return Err(
            "is larger than Envoy's buffer limits allow (4GiB) — use a smaller size".into(),
        );
    }
    Ok(bytes)
}

/// The filter's message for a duration with an unknown unit, when the text is several numbers
/// with units ("1m30s"): what to write instead, in one unit ("90s").
pub(super) fn one_unit_instead(problem: &str) -> Option<String> {
    let rest = problem.strip_prefix('"')?;
    let (text, tail) = rest.split_once('"')?;
    if !tail.starts_with(" has an unknown unit") {
        return None;
    }
    let mut total: u64 = 0;
    let mut parts = 0;
    let mut rest = text.trim();
    while !rest.is_empty() {
        // One number and its unit ("1m"), read by the filter's own parser.
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = rest[digits..]
            .find(|c: char| c.is_ascii_digit())
            .map_or(rest.len(), |n| digits + n);
        if digits == 0 || unit == digits {
            return None;
        }
        total = total.checked_add(parse_duration_ms(&rest[..unit]).ok()?)?;
        parts += 1;
        rest = &rest[unit..];
    }
    if parts < 2 {
        return None;
    }
    let one = [("h", 3_600_000), ("m", 60_000), ("s", 1000)]
        .iter()
        .find(|(_, scale)| total > 0 && total % scale == 0)
        .map_or_else(
            || format!("{total}ms"),
            |(u, scale)| format!("{}{u}", total / scale),
        );
    Some(format!(
        "{text:?} combines units: write one number with one unit, e.g. \"{one}\""
    ))
}

pub(super) fn duration_ms(v: &Value) -> Result<u64, String> {
    match v {
        Value::String(s) => parse_duration_ms(s).map_err(|e| one_unit_instead(&e).unwrap_or(e)),
        Value::Number(n) if n.as_f64() == Some(0.0) => Ok(0),
        Value::Number(n) => Err(llm_failover::duration::no_unit(&n.to_string())),
        other => Err(format!(
            "{} is not a duration — write e.g. \"5s\"",
            show(other)
        )),
    }
}

/// `envoy_version:` as written: a string, or a number YAML read from `1.38` (but `1.40` reads
/// as 1.4, so a number with one decimal is refused: quote it).
pub(super) fn parse_envoy_version(v: &Value) -> Result<EnvoyVersion, String> {
    match v {
        Value::String(s) => EnvoyVersion::parse(s),
        Value::Number(n) => {
            let text = n.to_string();
            if text
                .split_once('.')
                .is_some_and(|(_, minor)| minor.len() >= 2)
            {
                EnvoyVersion::parse(&text)
            } else {
                Err(format!(
                    "{text} is ambiguous (YAML reads 1.40 as the number 1.4) — quote it, e.g. envoy_version: \"1.40\""
                ))
            }
        }
        other => Err(format!(
            "{} is not a version — write e.g. envoy_version: \"1.38\"",
            show(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_units_get_one_unit_instead() {
        let said = |t: &str| one_unit_instead(&parse_duration_ms(t).unwrap_err());
        assert_eq!(
            said("1m30s").as_deref(),
            Some("\"1m30s\" combines units: write one number with one unit, e.g. \"90s\"")
        );
        assert_eq!(
            said("2h30m").as_deref(),
            Some("\"2h30m\" combines units: write one number with one unit, e.g. \"150m\"")
        );
        assert_eq!(
            said("1s500ms").as_deref(),
            Some("\"1s500ms\" combines units: write one number with one unit, e.g. \"1500ms\"")
        );
        assert_eq!(said("30x"), None);
        assert_eq!(said("1m30x"), None);
    }

    #[test]
    fn sizes_take_units() {
        let s = |t: &str| parse_size(&Value::String(t.into()));
        assert_eq!(s("10MiB"), Ok(10 << 20));
        assert_eq!(s("8MB"), Ok(8_000_000));
        assert_eq!(s("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_size(&Value::Number(1024.into())), Ok(1024));
        assert!(s("5GiB").is_err());
        assert!(s("0").is_err());
        assert!(s("ten").is_err());
        assert!(s("10 parsecs").is_err());
    }
}
