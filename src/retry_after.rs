//! How long a provider asked us to stay away: `Retry-After` and the rate-limit reset headers
//! seen in the wild, turned into a delay in milliseconds from now.
//!
//! Every parser takes the current time (`now_ms`, Unix epoch milliseconds) so absolute times
//! become delays; a time in the past is a delay of 0. Garbage gives `None`, never a panic.
//! Delays are rounded up to the next millisecond (coming back early is the worse mistake).

use crate::duration::parse_decimal_ns;

/// Values at or above this are read as Unix epoch seconds, not as a number of seconds from now
/// (1e9 s is September 2001; nobody asks to wait 31 years).
const EPOCH_SECONDS_FROM: u64 = 1_000_000_000;
/// Values at or above this are read as Unix epoch milliseconds.
const EPOCH_MILLIS_FROM: u64 = 1_000_000_000_000;

const NS_PER_MS: u128 = 1_000_000;
const NS_PER_S: u128 = 1_000_000_000;

/// `Retry-After` (RFC 9110 10.2.3): delta-seconds (`120`) or an HTTP-date
/// (`Wed, 21 Oct 2015 07:28:00 GMT`, and the obsolete RFC 850 and asctime forms).
/// Leniently also accepts fractional seconds (`1.5`), which some providers send.
pub fn parse_retry_after(value: &str, now_ms: u64) -> Option<u64> {
    let value = value.trim();
    if let Some(ns) = parse_decimal_ns(value, NS_PER_S) {
        return Some(ns_to_ms_ceil(ns));
    }
    parse_http_date_ms(value).map(|at| at.saturating_sub(now_ms))
}

/// `retry-after-ms` (OpenAI, Azure): a number of milliseconds, possibly fractional.
pub fn parse_retry_after_ms(value: &str) -> Option<u64> {
    parse_decimal_ns(value.trim(), NS_PER_MS).map(ns_to_ms_ceil)
}

/// `X-RateLimit-Reset*`-style values:
/// - Go durations, as OpenAI sends them: `6m0s`, `1h2m3.5s`, `20ms`, `150us`, `0s`;
/// - RFC 3339 timestamps, as Anthropic's `anthropic-ratelimit-*-reset` sends them:
///   `2024-06-01T12:00:30Z`, `2024-06-01T14:00:30.25+02:00`;
/// - plain numbers: seconds from now, or Unix epoch seconds (>= 1e9), or Unix epoch
///   milliseconds (>= 1e12), as GitHub-style `X-RateLimit-Reset` sends them;
/// - HTTP-dates.
pub fn parse_rate_limit_reset(value: &str, now_ms: u64) -> Option<u64> {
    let value = value.trim();
    if let Some(ns) = parse_decimal_ns(value, NS_PER_S) {
        let whole_seconds = value.split('.').next().and_then(|s| s.parse::<u64>().ok());
        return Some(match whole_seconds {
            Some(v) if v >= EPOCH_MILLIS_FROM => v.saturating_sub(now_ms),
            Some(v) if v >= EPOCH_SECONDS_FROM => ns_to_ms_ceil(ns).saturating_sub(now_ms),
            _ => ns_to_ms_ceil(ns),
        });
    }
    if let Some(ns) = parse_go_duration_ns(value) {
        return Some(ns_to_ms_ceil(ns));
    }
    if let Some(at) = parse_rfc3339_ms(value) {
        return Some(at.saturating_sub(now_ms));
    }
    parse_http_date_ms(value).map(|at| at.saturating_sub(now_ms))
}

/// The delay a rate-limited (429) answer asks for, from its headers (names lowercase, as
/// Envoy gives them). `retry-after-ms`, then `Retry-After` win when present. Otherwise the
/// longest reset among the rate-limit dimensions that are spent: a `*-reset*` header counts
/// when its paired `*-remaining*` header is `0` or absent (OpenAI `x-ratelimit-reset-tokens`
/// pairs with `x-ratelimit-remaining-tokens`; Anthropic `anthropic-ratelimit-requests-reset`
/// with `anthropic-ratelimit-requests-remaining`; plain `x-ratelimit-reset` with
/// `x-ratelimit-remaining`). A dimension that still has room says nothing about this 429.
pub fn rate_limit_delay<'a, I>(headers: I, now_ms: u64) -> Option<u64>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
    I::IntoIter: Clone,
{
    let headers = headers.into_iter();
    let find = |name: &str| {
        headers
            .clone()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    if let Some(ms) = find("retry-after-ms").and_then(parse_retry_after_ms) {
        return Some(ms);
    }
    if let Some(ms) = find("retry-after").and_then(|v| parse_retry_after(v, now_ms)) {
        return Some(ms);
    }
    let mut longest: Option<u64> = None;
    for (name, value) in headers.clone() {
        let name = name.to_ascii_lowercase();
        let remaining = if let Some(dim) = name.strip_prefix("x-ratelimit-reset") {
            format!("x-ratelimit-remaining{dim}")
        } else if let Some(dim) = name
            .strip_prefix("anthropic-ratelimit-")
            .and_then(|n| n.strip_suffix("-reset"))
        {
            format!("anthropic-ratelimit-{dim}-remaining")
        } else {
            continue;
        };
        let spent = find(&remaining).map_or(true, nothing_left);
        if !spent {
            continue;
        }
        if let Some(ms) = parse_rate_limit_reset(value, now_ms) {
            longest = Some(longest.map_or(ms, |l| l.max(ms)));
        }
    }
    longest
}

fn ns_to_ms_ceil(ns: u128) -> u64 {
    u64::try_from(ns.div_ceil(NS_PER_MS)).unwrap_or(u64::MAX)
}

/// A `*-remaining*` header that says the dimension is spent: `0` (`0.0`) or negative.
fn nothing_left(remaining: &str) -> bool {
    let r = remaining.trim();
    match r.strip_prefix('-') {
        Some(negative) => parse_decimal_ns(negative, NS_PER_S).is_some(),
        None => parse_decimal_ns(r, NS_PER_S) == Some(0),
    }
}

/// Go's `time.Duration.String()` format: one or more `<decimal><unit>` with units
/// h, m, s, ms, us, µs, ns (e.g. `1h2m3.5s`). Negative durations are refused.
fn parse_go_duration_ns(s: &str) -> Option<u128> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if num_len == 0 {
            return None;
        }
        let (num, after) = rest.split_at(num_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "h" => 3600 * NS_PER_S,
            "m" => 60 * NS_PER_S,
            "s" => NS_PER_S,
            "ms" => NS_PER_MS,
            "us" | "µs" | "μs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        total = total.saturating_add(parse_decimal_ns(num, unit_ns)?);
        rest = next;
    }
    Some(total)
}

/// An HTTP-date (RFC 9110 5.6.7) as Unix epoch milliseconds, in the three forms a recipient
/// must accept: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850
/// (`Sunday, 06-Nov-94 08:49:37 GMT`; years 70-99 are 19xx, 00-69 20xx) and asctime
/// (`Sun Nov  6 08:49:37 1994`). Read as the `httpdate` crate reads them (the tests hold it to
/// that crate, its oracle): years 1970-9999, a real day of the month, the weekday the date's.
/// Its own few lines instead of the crate, which took 5 KB of the module for this one parse
/// (docs/internals.md "Dependencies").
fn parse_http_date_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if !b.is_ascii() {
        return None;
    }
    let at = |i: usize| b.get(i).copied().unwrap_or_default();
    let (weekday, date, time) = if b.len() == 29 && b.get(3..5) == Some(b", ") {
        // IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
        if at(7) != b' ' || at(11) != b' ' || at(16) != b' ' || b.get(25..) != Some(b" GMT") {
            return None;
        }
        let date = (digits(b, 12, 4)?, month(b, 8)?, digits(b, 5, 2)?);
        (b.get(..3)?, date, 17)
    } else if b.len() == 24 {
        // asctime: `Sun Nov  6 08:49:37 1994`.
        if at(3) != b' ' || at(7) != b' ' || at(10) != b' ' || at(19) != b' ' {
            return None;
        }
        let day = match at(8) {
            b' ' => digits(b, 9, 1)?,
            _ => digits(b, 8, 2)?,
        };
        (b.get(..3)?, (digits(b, 20, 4)?, month(b, 4)?, day), 11)
    } else {
        // RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT` (the byte after the year unchecked, as
        // httpdate leaves it).
        let name = WEEKDAYS.iter().find(|d| {
            b.strip_prefix(d.as_bytes())
                .is_some_and(|r| r.starts_with(b", ") && r.len() == 24)
        })?;
        let r = b.get(name.len() + 2..)?;
        if r.get(2) != Some(&b'-') || r.get(6) != Some(&b'-') || r.get(18..) != Some(b" GMT") {
            return None;
        }
        let yy = digits(r, 7, 2)?;
        let year = yy + if yy < 70 { 2000 } else { 1900 };
        let date = (year, month(r, 3)?, digits(r, 0, 2)?);
        (name.as_bytes().get(..3)?, date, name.len() + 12)
    };
    let (year, month, day) = date;
    let (hour, minute, second) = (
        digits(b, time, 2)?,
        digits(b, time + 3, 2)?,
        digits(b, time + 6, 2)?,
    );
    if at(time + 2) != b':' || at(time + 5) != b':' || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    if !(1970..=9999).contains(&year) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let named = WEEKDAYS
        .iter()
        .position(|d| d.as_bytes().get(..3) == Some(weekday))?;
    if usize::try_from((days + 3).rem_euclid(7)).ok()? != named {
        return None;
    }
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs).ok()?.checked_mul(1000)
}

/// The weekdays' names from Monday, as RFC 850 dates write them (IMF-fixdate and asctime write
/// their first three letters).
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `len` ASCII digits at `from`, as a number.
fn digits(b: &[u8], from: usize, len: usize) -> Option<i64> {
    let part = b.get(from..from.checked_add(len)?)?;
    part.iter().try_fold(0i64, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
    })
}

/// The month (1-12) whose three-letter English name is at `from` (`Jan` ... `Dec`).
fn month(b: &[u8], from: usize) -> Option<i64> {
    let name = b.get(from..from + 3)?;
    let names = b"JanFebMarAprMayJunJulAugSepOctNovDec";
    let index = names.chunks(3).position(|m| m == name)?;
    i64::try_from(index + 1).ok()
}

/// RFC 3339 date-time (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`; `t`/space separators and a
/// lowercase `z` accepted) as Unix epoch milliseconds, rounded up. Times before 1970 give None.
fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || !b.is_ascii() {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let at = |i: usize| b.get(i).copied().unwrap_or_default();
    if at(4) != b'-'
        || at(7) != b'-'
        || !matches!(at(10), b'T' | b't' | b' ')
        || at(13) != b':'
        || at(16) != b':'
    {
        return None;
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // 60 is a leap second; read it as the next second's start.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac_ns: i64 = 0;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let digits = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let mut scale = 1_000_000_000i64;
        for c in after_dot.bytes().take(digits.min(9)) {
            scale /= 10;
            frac_ns += i64::from(c - b'0') * scale;
        }
        rest = &after_dot[digits..];
    }
    let offset_s: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let ob = rest.as_bytes();
            if ob.len() != 6 || ob.get(3) != Some(&b':') {
                return None;
            }
            let sign = match ob.first().copied().unwrap_or_default() {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh: i64 = rest
                .get(1..3)
                .filter(|p| p.bytes().all(|c| c.is_ascii_digit()))?
                .parse()
                .ok()?;
            let om: i64 = rest
                .get(4..6)
                .filter(|p| p.bytes().all(|c| c.is_ascii_digit()))?
                .parse()
                .ok()?;
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    if secs < 0 {
        return None;
    }
    let ms = secs
        .checked_mul(1000)?
        .checked_add((frac_ns + 999_999) / 1_000_000)?;
    u64::try_from(ms).ok()
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remaining_header_is_spent_at_zero_or_below() {
        for spent in ["0", "0.0", " 0 ", "-1", "-0.5"] {
            assert!(nothing_left(spent), "{spent:?}");
        }
        for left in ["0.5", "4999", "1.0", "abc", "", "-", "1e3"] {
            assert!(!nothing_left(left), "{left:?}");
        }
    }

    /// 2015-10-21T07:28:00Z
    const NOW: u64 = 1_445_412_480_000;

    #[test]
    fn retry_after_delta_seconds() {
        assert_eq!(parse_retry_after("120", NOW), Some(120_000));
        assert_eq!(parse_retry_after(" 0 ", NOW), Some(0));
        assert_eq!(parse_retry_after("1.5", NOW), Some(1_500));
        assert_eq!(
            parse_retry_after("99999999999999999999999999999999999999999", NOW),
            Some(u64::MAX)
        );
    }

    #[test]
    fn retry_after_http_date_in_all_three_forms() {
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:30:00 GMT", NOW),
            Some(120_000)
        );
        assert_eq!(
            parse_retry_after("Wednesday, 21-Oct-15 07:30:00 GMT", NOW),
            Some(120_000)
        );
        assert_eq!(
            parse_retry_after("Wed Oct 21 07:30:00 2015", NOW),
            Some(120_000)
        );
        // In the past: no wait at all.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", NOW),
            Some(0)
        );
    }

    #[test]
    fn retry_after_garbage_is_none() {
        for v in [
            "",
            " ",
            "-1",
            "1e3",
            "soon",
            "1.",
            ".5",
            "1.5.2",
            "Wed, 32 Oct 2015 07:30:00 GMT",
            "6m0s",
            "\u{0}",
        ] {
            assert_eq!(parse_retry_after(v, NOW), None, "{v:?}");
        }
    }

    #[test]
    fn retry_after_ms() {
        assert_eq!(parse_retry_after_ms("250"), Some(250));
        assert_eq!(parse_retry_after_ms("0.4"), Some(1));
        assert_eq!(parse_retry_after_ms("x"), None);
    }

    #[test]
    fn reset_go_durations() {
        assert_eq!(parse_rate_limit_reset("6m0s", NOW), Some(360_000));
        assert_eq!(parse_rate_limit_reset("1h2m3.5s", NOW), Some(3_723_500));
        assert_eq!(parse_rate_limit_reset("20ms", NOW), Some(20));
        assert_eq!(parse_rate_limit_reset("1.25s", NOW), Some(1_250));
        assert_eq!(parse_rate_limit_reset("150us", NOW), Some(1));
        assert_eq!(parse_rate_limit_reset("150µs", NOW), Some(1));
        assert_eq!(parse_rate_limit_reset("999ns", NOW), Some(1));
        assert_eq!(parse_rate_limit_reset("0s", NOW), Some(0));
        assert_eq!(parse_rate_limit_reset("17h", NOW), Some(17 * 3_600_000));
    }

    #[test]
    fn reset_plain_seconds_and_epochs() {
        assert_eq!(parse_rate_limit_reset("30", NOW), Some(30_000));
        assert_eq!(parse_rate_limit_reset("2.5", NOW), Some(2_500));
        // Epoch seconds and milliseconds 90 s from now.
        assert_eq!(
            parse_rate_limit_reset(&(NOW / 1000 + 90).to_string(), NOW),
            Some(90_000)
        );
        assert_eq!(
            parse_rate_limit_reset(&(NOW + 90_500).to_string(), NOW),
            Some(90_500)
        );
        assert_eq!(
            parse_rate_limit_reset(&format!("{}.5", NOW / 1000 + 90), NOW),
            Some(90_500)
        );
        // An epoch in the past is no wait.
        assert_eq!(parse_rate_limit_reset("1000000000", NOW), Some(0));
    }

    #[test]
    fn reset_rfc3339() {
        assert_eq!(
            parse_rate_limit_reset("2015-10-21T07:28:30Z", NOW),
            Some(30_000)
        );
        assert_eq!(
            parse_rate_limit_reset("2015-10-21T07:28:30.25Z", NOW),
            Some(30_250)
        );
        assert_eq!(
            parse_rate_limit_reset("2015-10-21T09:28:30+02:00", NOW),
            Some(30_000)
        );
        assert_eq!(
            parse_rate_limit_reset("2015-10-21T02:28:30-05:00", NOW),
            Some(30_000)
        );
        assert_eq!(
            parse_rate_limit_reset("2015-10-21t07:28:30.123456789z", NOW),
            Some(30_124)
        );
        assert_eq!(
            parse_rate_limit_reset("2015-10-22T07:28:00Z", NOW),
            Some(86_400_000)
        );
        assert_eq!(parse_rate_limit_reset("2000-01-01T00:00:00Z", NOW), Some(0));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T00:00:00Z"),
            Some(1_709_164_800_000)
        );
    }

    #[test]
    fn reset_http_date() {
        assert_eq!(
            parse_rate_limit_reset("Wed, 21 Oct 2015 07:30:00 GMT", NOW),
            Some(120_000)
        );
    }

    #[test]
    fn reset_garbage_is_none() {
        for v in [
            "",
            "-1s",
            "1x",
            "m",
            "1h2",
            "h1",
            "1..2s",
            "s",
            "2015-10-21",
            "2015-13-21T07:28:30Z",
            "2023-02-29T00:00:00Z",
            "2015-10-21T24:00:00Z",
            "2015-10-21T07:28:30",
            "2015-10-21T07:28:30+2:00",
            "2015-10-21T07:28:30.Z",
            "1969-12-31T23:59:59Z",
            "२०१५-10-21T07:28:30Z",
            "NaN",
            "inf",
        ] {
            assert_eq!(parse_rate_limit_reset(v, NOW), None, "{v:?}");
        }
    }

    #[test]
    fn rate_limit_delay_prefers_retry_after_then_spent_dimensions() {
        let h = [
            ("retry-after", "7"),
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-remaining-requests", "0"),
        ];
        assert_eq!(rate_limit_delay(h.iter().copied(), NOW), Some(7_000));
        let h = [("retry-after-ms", "250"), ("retry-after", "7")];
        assert_eq!(rate_limit_delay(h.iter().copied(), NOW), Some(250));
        // OpenAI: the token budget is spent, the request budget is not.
        let h = [
            ("x-ratelimit-remaining-requests", "4999"),
            ("x-ratelimit-reset-requests", "12ms"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ];
        assert_eq!(rate_limit_delay(h.iter().copied(), NOW), Some(360_000));
        // Anthropic: a spent daily quota.
        let h = [
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2015-10-22T07:28:00Z"),
            ("anthropic-ratelimit-tokens-remaining", "100"),
            ("anthropic-ratelimit-tokens-reset", "2015-10-23T07:28:00Z"),
        ];
        assert_eq!(rate_limit_delay(h.iter().copied(), NOW), Some(86_400_000));
        // GitHub style, no remaining header: counts.
        let reset = (NOW / 1000 + 60).to_string();
        let h = [("X-RateLimit-Reset", reset.as_str())];
        assert_eq!(rate_limit_delay(h.iter().copied(), NOW), Some(60_000));
        let h = [
            ("content-type", "application/json"),
            ("retry-after", "later"),
        ];
        assert_eq!(rate_limit_delay(h.iter().copied(), NOW), None);
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// The oracle: the httpdate crate's reading, in Unix epoch milliseconds.
    fn httpdate_ms(s: &str) -> Option<u64> {
        let at = httpdate::parse_http_date(s).ok()?;
        let since = at.duration_since(std::time::UNIX_EPOCH).ok()?;
        u64::try_from(since.as_millis()).ok()
    }

    /// The edges, each as the oracle reads it: the first and last instants, two-digit years
    /// either side of 70, leap days, a day written with one digit, and near misses.
    #[test]
    fn http_date_edges_read_as_httpdate_reads_them() {
        for date in [
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "Wed, 31 Dec 1969 23:59:59 GMT",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "Thursday, 01-Jan-70 00:00:00 GMT",
            "Tuesday, 31-Dec-69 23:59:59 GMT",
            "Wednesday, 31-Dec-69 23:59:59 GMT",
            "Saturday, 01-Jan-00 00:00:00 GMT",
            "Tue, 29 Feb 2000 12:00:00 GMT",
            "Thu, 29 Feb 2001 12:00:00 GMT",
            "Thu, 29 Feb 2100 12:00:00 GMT",
            "Mon, 01 Mar 2100 12:00:00 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun Nov 06 08:49:37 1994",
            "Sun Nov 6  08:49:37 1994",
            "Sun Nov  0 08:49:37 1994",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sunday, 06-Nov-94x08:49:37 GMT",
            "Sunday,06-Nov-94 08:49:37 GMT ",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49:60 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "sun, 06 nov 1994 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT\u{e9}",
        ] {
            assert_eq!(parse_http_date_ms(date), httpdate_ms(date), "{date:?}");
        }
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in ".{0,40}", now in any::<u64>()) {
            let _ = parse_retry_after(&s, now);
            let _ = parse_retry_after_ms(&s);
            let _ = parse_rate_limit_reset(&s, now);
        }

        /// The HTTP-date parser reads what the httpdate crate reads, and nothing else: real
        /// instants (1970-9999, written by httpdate) in the three forms, with one field put
        /// out of place or range (the weekday wrong, 31 Feb, a 60th second, years either side
        /// of 1970 and 9999), and near misses (a byte changed).
        #[test]
        fn http_dates_read_as_httpdate_reads_them(
            secs in prop_oneof![
                0..253_402_300_800u64,
                0..3_200_000_000u64, // 1970-2071, the RFC 850 years
                253_402_200_000..253_402_300_800u64,
            ],
            form in 0..3usize,
            tweak in proptest::option::of((0..7usize, 0..10_001u32)),
            edit in proptest::option::of((0..32usize, proptest::char::range(' ', '~'))),
        ) {
            const DAYS: [&str; 8] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "Xyz"];
            const MONTHS: [&str; 13] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                "Dec", "Foo",
            ];
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            // `Sun, 06 Nov 1994 08:49:37 GMT`, taken apart.
            let imf = httpdate::fmt_http_date(at);
            let field = |from: usize, to: usize| imf.get(from..to).unwrap_or_default();
            let number = |from, to| field(from, to).parse::<u32>().unwrap_or_default();
            let mut weekday = DAYS.iter().position(|d| *d == field(0, 3)).unwrap_or(7);
            let mut month = MONTHS.iter().position(|m| *m == field(8, 11)).unwrap_or(12);
            let (mut day, mut year) = (number(5, 7), number(12, 16));
            let (mut hour, mut minute, mut second) = (number(17, 19), number(20, 22), number(23, 25));
            match tweak {
                Some((0, v)) => weekday = v as usize % 8,
                Some((1, v)) => day = v % 33,
                Some((2, v)) => month = v as usize % 13,
                Some((3, v)) => year = if v < 5000 { 1960 + v % 20 } else { 9990 + v % 11 },
                Some((4, v)) => hour = v % 25,
                Some((5, v)) => minute = v % 61,
                Some((_, v)) => second = v % 61,
                None => {}
            }
            let (d, m) = (DAYS[weekday], MONTHS[month]);
            let full = WEEKDAYS.get(weekday).copied().unwrap_or("Xyzday");
            let time = format!("{hour:02}:{minute:02}:{second:02}");
            let mut date = match form {
                0 => format!("{d}, {day:02} {m} {year:04} {time} GMT"),
                1 => format!("{full}, {day:02}-{m}-{:02} {time} GMT", year % 100),
                _ => format!("{d} {m} {day:>2} {time} {year:04}"),
            };
            // A near miss: one byte replaced.
            if let Some((at, c)) = edit.filter(|&(at, _)| at < date.len()) {
                date.replace_range(at..=at, c.encode_utf8(&mut [0; 4]));
            }
            let date = date.trim(); // as the callers trim
            prop_assert_eq!(parse_http_date_ms(date), httpdate_ms(date), "{:?}", date);
        }

        #[test]
        fn http_dates_of_any_text_read_as_httpdate_reads_them(
            s in "[A-Za-z0-9 ,:-]{20,32}|.{0,40}",
        ) {
            let s = s.trim();
            prop_assert_eq!(parse_http_date_ms(s), httpdate_ms(s), "{:?}", s);
        }

        #[test]
        fn parsers_never_panic_on_near_misses(s in "[0-9.:TZhmsuµn+ -]{0,32}", now in any::<u64>()) {
            let _ = parse_rate_limit_reset(&s, now);
        }
    }
}
