//! The per-request record of the walk, kept in filter state so access logs can print it:
//! `primary:skipped:breaker_open,secondary:server_error:12ms,tertiary:ok:40ms`.
//! The downstream role writes the skips when it plans; each attempt's upstream role appends its
//! own entry. Output only: no role reads it back (the typed records are in `handoff`).

/// Appends one attempt: provider, outcome class, duration in ms.
pub fn push_attempt(log: &mut String, provider: &str, outcome: &str, duration_ms: u64) {
    use std::fmt::Write;
    if !log.is_empty() {
        log.push(',');
    }
    let _ = write!(log, "{provider}:{outcome}:{duration_ms}ms");
}

/// Adds what the last attempt's answer cost to its entry (docs/behaviour.md section 15):
/// `tertiary:ok:40ms:in=1200/out=34/cached=1024` (input tokens, cached ones included; output
/// tokens; cached input tokens).
pub fn push_usage(log: &mut String, usage: &crate::usage::Usage) {
    for (label, n) in [
        (":in=", usage.input),
        ("/out=", usage.output),
        ("/cached=", usage.cached_input),
    ] {
        log.push_str(label);
        let digits = crate::translate::json::Digits::of(n);
        log.push_str(std::str::from_utf8(digits.get()).unwrap_or_default());
    }
}

/// Appends a provider left out before any attempt, with the reason.
pub fn push_skip(log: &mut String, provider: &str, reason: &str) {
    if !log.is_empty() {
        log.push(',');
    }
    log.push_str(provider);
    log.push_str(":skipped:");
    log.push_str(reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_and_skips_are_written_in_order() {
        let mut log = String::new();
        push_skip(&mut log, "primary", "breaker_open");
        push_attempt(&mut log, "secondary", "server_error", 12);
        push_attempt(&mut log, "tertiary", "ok", 40);
        assert_eq!(
            log,
            "primary:skipped:breaker_open,secondary:server_error:12ms,tertiary:ok:40ms"
        );
        push_usage(
            &mut log,
            &crate::usage::Usage {
                input: 1200,
                output: 34,
                cached_input: 1024,
            },
        );
        assert!(log.ends_with(",tertiary:ok:40ms:in=1200/out=34/cached=1024"));
    }
}
