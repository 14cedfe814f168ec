//! What happened to one attempt (docs/behaviour.md section 3), decided from what the filter can see in
//! Envoy: the response status, or, when no response came, Envoy's transport failure reason,
//! its downstream-disconnect flag and how long the attempt lasted.

/// The outcome class of an attempt. `as_str` names are public (metrics, headers, logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Class {
    Ok = 0,
    ConnectionError = 1,
    Timeout = 2,
    RateLimited = 3,
    ServerError = 4,
    Overloaded = 5,
    ModelNotFound = 6,
    SetupFault = 7,
    InvalidRequest = 8,
    ClientDisconnect = 9,
    /// A 400/413 whose error says the prompt is too long for the model (behaviour.md 3).
    ContextWindowExceeded = 10,
    /// A 400 whose error is the provider's safety refusal (behaviour.md 3).
    ContentFiltered = 11,
    /// A 429/402/403 (or Anthropic's 400) whose error says the account is out of credit.
    QuotaExhausted = 12,
}

impl Class {
    /// Every class, in discriminant order (`from_u8` indexes it; health records store the byte).
    pub const ALL: [Class; 13] = [
        Class::Ok,
        Class::ConnectionError,
        Class::Timeout,
        Class::RateLimited,
        Class::ServerError,
        Class::Overloaded,
        Class::ModelNotFound,
        Class::SetupFault,
        Class::InvalidRequest,
        Class::ClientDisconnect,
        Class::ContextWindowExceeded,
        Class::ContentFiltered,
        Class::QuotaExhausted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::ConnectionError => "connection_error",
            Class::Timeout => "timeout",
            Class::RateLimited => "rate_limited",
            Class::ServerError => "server_error",
            Class::Overloaded => "overloaded",
            Class::ModelNotFound => "model_not_found",
            Class::SetupFault => "setup_fault",
            Class::InvalidRequest => "invalid_request",
            Class::ClientDisconnect => "client_disconnect",
            Class::ContextWindowExceeded => "context_window_exceeded",
            Class::ContentFiltered => "content_filtered",
            Class::QuotaExhausted => "quota_exhausted",
        }
    }

    pub fn parse(name: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.as_str() == name)
    }

    pub fn from_u8(v: u8) -> Option<Class> {
        Class::ALL.get(usize::from(v)).copied()
    }

    /// Classes that count toward a provider's breaker (behaviour.md 3, last column).
    pub fn counts_toward_breaker(self) -> bool {
        matches!(
            self,
            Class::ConnectionError | Class::Timeout | Class::ServerError | Class::Overloaded
        )
    }

    /// `invalid_request` and `client_disconnect` may never fall over, whatever config says.
    pub fn may_fall_over(self) -> bool {
        !matches!(
            self,
            Class::Ok | Class::InvalidRequest | Class::ClientDisconnect
        )
    }

    /// Classes that fall over unless a chain says otherwise. `context_window_exceeded` and
    /// `content_filtered` fall over only to a chain's `context_window` / `content_policy` list
    /// (config adds them then), or when `fallback_on` names them: without one, a prompt too long
    /// for the model is the request's problem and a refusal is an answer (behaviour.md 3).
    pub fn falls_over_by_default(self) -> bool {
        self.may_fall_over()
            && !matches!(
                self,
                Class::SetupFault | Class::ContentFiltered | Class::ContextWindowExceeded
            )
    }

    /// Every class name, comma separated (for error messages).
    pub fn names_that_may_fall_over() -> String {
        let names: Vec<&str> = Class::ALL
            .into_iter()
            .filter(|c| c.may_fall_over())
            .map(Class::as_str)
            .collect();
        names.join(", ")
    }
}

/// The class of an attempt that got response headers with this status.
pub fn classify_status(status: u16) -> Class {
    match status {
        200..=399 => Class::Ok,
        429 => Class::RateLimited,
        404 => Class::ModelNotFound,
        401..=403 => Class::SetupFault,
        503 | 529 => Class::Overloaded,
        500..=599 => Class::ServerError,
        // 400, 413, 422 and every other 4xx (and nonsense statuses) are the caller's problem.
        _ => Class::InvalidRequest,
    }
}

/// What Envoy tells an upstream filter about an attempt that ended without response headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoResponse {
    /// `upstream.transport_failure_reason` was set: the connection could not be made.
    pub transport_failure: bool,
    /// The downstream stream carries Envoy's `DC` response flag: the caller went away.
    pub client_gone: bool,
    /// Time from the attempt's start to its end.
    pub elapsed_ms: u64,
    /// The attempt timeout (Envoy's `per_try_timeout`) and stall timeout
    /// (`per_try_idle_timeout`, 0 = off) the route was rendered with.
    pub attempt_timeout_ms: u64,
    pub stall_timeout_ms: u64,
}

/// Envoy fires its per-try timers a little early or late; within this much counts as the timer.
const TIMER_SLACK_MS: u64 = 50;

/// The class of an attempt that ended without response headers. Envoy gives the same signal
/// for a per-try timeout and for a connection reset or closed before the answer, so the
/// elapsed time tells them apart: only a timer firing ends an attempt at its timeout.
pub fn classify_no_response(n: &NoResponse) -> Class {
    let reached = |limit: u64| limit > 0 && n.elapsed_ms + TIMER_SLACK_MS >= limit;
    if n.client_gone {
        Class::ClientDisconnect
    } else if n.transport_failure {
        Class::ConnectionError
    } else if reached(n.attempt_timeout_ms) || reached(n.stall_timeout_ms) {
        Class::Timeout
    } else {
        Class::ConnectionError
    }
}

/// Which outcomes move a request down its chain: classes plus explicit status codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverSet {
    classes: u16,
    /// Bit per status code 100..=599 that falls over regardless of its class.
    statuses: [u64; 8],
}

impl Default for FailoverSet {
    fn default() -> Self {
        let mut set = FailoverSet::empty();
        for class in Class::ALL {
            if class.falls_over_by_default() {
                set.add_class(class);
            }
        }
        set
    }
}

impl FailoverSet {
    pub fn empty() -> Self {
        FailoverSet {
            classes: 0,
            statuses: [0; 8],
        }
    }

    /// Adds a class; classes that may never fall over are ignored (config refuses them first).
    pub fn add_class(&mut self, class: Class) {
        if class.may_fall_over() {
            self.classes |= 1 << class as u16;
        }
    }

    /// Adds one status code (100..=599). Codes of the invalid-request class are refused.
    pub fn add_status(&mut self, status: u16) -> Result<(), String> {
        if !(100..=599).contains(&status) {
            return Err(format!(
                "status {status} is outside 100-599: write a status such as 503, or \"5xx\""
            ));
        }
        if classify_status(status) == Class::InvalidRequest || classify_status(status) == Class::Ok
        {
            return Err(format!(
                "status {status} can never fall over: it means the request itself is wrong (or succeeded); remove it from fallback_on"
            ));
        }
        let bit = usize::from(status - 100);
        if let Some(word) = self.statuses.get_mut(bit / 64) {
            *word |= 1 << (bit % 64);
        }
        Ok(())
    }

    /// Adds a class of status such as "5xx" or "4xx" (only its codes that may fall over).
    pub fn add_status_range(&mut self, hundreds: u16) {
        for status in hundreds * 100..hundreds * 100 + 100 {
            let _ = self.add_status(status);
        }
    }

    pub fn has_class(&self, class: Class) -> bool {
        self.classes & (1 << class as u16) != 0
    }

    fn has_status(&self, status: u16) -> bool {
        if !(100..=599).contains(&status) {
            return false;
        }
        let bit = usize::from(status - 100);
        self.statuses
            .get(bit / 64)
            .is_some_and(|word| word & (1 << (bit % 64)) != 0)
    }

    /// Does this outcome move the request to the next provider?
    pub fn falls_over(&self, class: Class, status: Option<u16>) -> bool {
        class.may_fall_over()
            && (self.has_class(class) || status.is_some_and(|s| self.has_status(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_the_spec_classes() {
        assert_eq!(classify_status(200), Class::Ok);
        assert_eq!(classify_status(429), Class::RateLimited);
        for s in [500, 502, 504, 599] {
            assert_eq!(classify_status(s), Class::ServerError, "{s}");
        }
        for s in [503, 529] {
            assert_eq!(classify_status(s), Class::Overloaded, "{s}");
        }
        assert_eq!(classify_status(404), Class::ModelNotFound);
        for s in [401, 402, 403] {
            assert_eq!(classify_status(s), Class::SetupFault, "{s}");
        }
        for s in [400, 413, 422, 409, 418] {
            assert_eq!(classify_status(s), Class::InvalidRequest, "{s}");
        }
    }

    #[test]
    fn no_response_is_connection_error_timeout_or_disconnect() {
        let base = NoResponse {
            attempt_timeout_ms: 1_000,
            ..Default::default()
        };
        let refused = NoResponse {
            transport_failure: true,
            elapsed_ms: 2,
            ..base
        };
        assert_eq!(classify_no_response(&refused), Class::ConnectionError);
        let reset_early = NoResponse {
            elapsed_ms: 30,
            ..base
        };
        assert_eq!(classify_no_response(&reset_early), Class::ConnectionError);
        let timed_out = NoResponse {
            elapsed_ms: 998,
            ..base
        };
        assert_eq!(classify_no_response(&timed_out), Class::Timeout);
        let stalled = NoResponse {
            elapsed_ms: 300,
            stall_timeout_ms: 300,
            ..base
        };
        assert_eq!(classify_no_response(&stalled), Class::Timeout);
        let gone = NoResponse {
            client_gone: true,
            transport_failure: true,
            elapsed_ms: 1_000,
            ..base
        };
        assert_eq!(classify_no_response(&gone), Class::ClientDisconnect);
    }

    #[test]
    fn default_set_falls_over_on_transient_failures_only() {
        let set = FailoverSet::default();
        for c in [
            Class::ConnectionError,
            Class::Timeout,
            Class::RateLimited,
            Class::ServerError,
            Class::Overloaded,
            Class::ModelNotFound,
            Class::QuotaExhausted,
        ] {
            assert!(set.falls_over(c, None), "{c:?}");
        }
        for c in [
            Class::Ok,
            Class::SetupFault,
            Class::ContextWindowExceeded,
            Class::ContentFiltered,
            Class::InvalidRequest,
            Class::ClientDisconnect,
        ] {
            assert!(!set.falls_over(c, None), "{c:?}");
        }
    }

    #[test]
    fn explicit_statuses_fall_over_but_invalid_requests_never_do() {
        let mut set = FailoverSet::empty();
        set.add_status(402).unwrap();
        assert!(set.falls_over(Class::SetupFault, Some(402)));
        assert!(!set.falls_over(Class::SetupFault, Some(401)));
        assert!(set.add_status(400).is_err());
        assert!(set.add_status(600).is_err());
        set.add_class(Class::InvalidRequest);
        set.add_class(Class::ClientDisconnect);
        assert!(!set.falls_over(Class::InvalidRequest, Some(400)));
        assert!(!set.falls_over(Class::ClientDisconnect, None));
        set.add_status_range(4);
        assert!(set.falls_over(Class::RateLimited, Some(429)));
        assert!(!set.falls_over(Class::InvalidRequest, Some(422)));
    }

    #[test]
    fn body_classes_never_count_toward_the_breaker() {
        for c in [
            Class::ContextWindowExceeded,
            Class::ContentFiltered,
            Class::QuotaExhausted,
        ] {
            assert!(!c.counts_toward_breaker(), "{c:?}");
            assert!(c.may_fall_over(), "{c:?}");
        }
        assert!(Class::names_that_may_fall_over().contains("content_filtered"));
        assert!(!Class::names_that_may_fall_over().contains("invalid_request"));
    }

    #[test]
    fn class_names_round_trip() {
        for (i, c) in Class::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i, "ALL is in discriminant order");
            assert_eq!(Class::parse(c.as_str()), Some(c));
            assert_eq!(Class::from_u8(c as u8), Some(c));
        }
        assert_eq!(Class::parse("nope"), None);
    }
}
