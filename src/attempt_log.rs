//! The per-request record of the walk, kept in filter state so access logs can print it:
//! `primary:skipped:breaker_open,secondary:server_error:12ms,tertiary:ok:40ms`.
//! The downstream filter writes the skips when it plans; each attempt's upstream filter
//! appends its own entry.

/// Appends one attempt: provider, outcome class, duration in ms.
pub fn push_attempt(log: &mut String, provider: &str, outcome: &str, duration_ms: u64) {
    use std::fmt::Write;
    if !log.is_empty() {
        log.push(',');
    }
    let _ = write!(log, "{provider}:{outcome}:{duration_ms}ms");
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

/// The outcome class of attempt `n` (1-based), skipping the skip entries.
pub fn outcome_of_attempt(log: &str, n: usize) -> Option<&str> {
    let index = n.checked_sub(1)?;
    log.split(',')
        .filter_map(|entry| {
            let mut parts = entry.rsplitn(3, ':');
            let last = parts.next()?;
            let outcome = parts.next()?;
            (outcome != "skipped" && last.ends_with("ms")).then_some(outcome)
        })
        .nth(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_and_skips_read_back_in_order() {
        let mut log = String::new();
        push_skip(&mut log, "primary", "breaker_open");
        push_attempt(&mut log, "secondary", "server_error", 12);
        push_attempt(&mut log, "tertiary", "ok", 40);
        assert_eq!(
            log,
            "primary:skipped:breaker_open,secondary:server_error:12ms,tertiary:ok:40ms"
        );
        assert_eq!(outcome_of_attempt(&log, 1), Some("server_error"));
        assert_eq!(outcome_of_attempt(&log, 2), Some("ok"));
        assert_eq!(outcome_of_attempt(&log, 3), None);
        assert_eq!(outcome_of_attempt(&log, 0), None);
        assert_eq!(outcome_of_attempt("", 1), None);
    }
}
