//! A provider's health over time (docs/behaviour.md section 10): attempts and failures in one-minute
//! buckets over the last [`BUCKETS`] minutes, and when it last answered, kept in the provider's
//! shared health record beside the breaker (so a failure's one write carries both).
//!
//! Successes from a provider with nothing else to record (the hot path) are not written one by
//! one: each worker counts them in a [`Pending`] and adds the count with one compare-and-swap
//! per provider per tick (about a second), per minute boundary, or folded into the next report
//! that writes the record anyway. Every count reaches the record exactly once (the add is a
//! compare-and-swap like every health update); it shows there up to a tick late.

use crate::classify::Class;

/// Width of a bucket (ms).
pub const BUCKET_MS: u64 = 60_000;
/// Buckets kept: the state covers the current minute and the 14 before it (15 minutes).
pub const BUCKETS: usize = 15;
/// "Answered recently": an answer in the last 5 minutes.
pub const ANSWERED_WINDOW_MS: u64 = 5 * 60_000;
/// Fewer attempts than this in the window read `healthy` whatever failed.
pub const MIN_ATTEMPTS: u32 = 5;
/// Bytes the tally takes in the record: last answer (8), then per bucket minute, attempts and
/// failed (3 x u32).
pub const TALLY_LEN: usize = 8 + BUCKETS * 12;

/// The minute `ms` falls in (minutes since the epoch; fits a u32 for 8000 years).
pub fn minute_of(ms: u64) -> u32 {
    u32::try_from(ms / BUCKET_MS).unwrap_or(u32::MAX)
}

/// What an attempt of this class says about its provider: counted as an attempt at all (a
/// caller who left says nothing), failed (the provider's fault), answered (it is up).
pub fn counts(class: Class) -> (bool, bool) {
    match class {
        Class::ClientDisconnect => (false, false),
        Class::ConnectionError
        | Class::Timeout
        | Class::RateLimited
        | Class::ServerError
        | Class::Overloaded
        | Class::ModelNotFound
        | Class::SetupFault
        | Class::QuotaExhausted => (true, true),
        // A success, or an answer to a request the provider rightly refused.
        Class::Ok
        | Class::InvalidRequest
        | Class::ContextWindowExceeded
        | Class::ContentFiltered => (true, false),
    }
}

/// One minute's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bucket {
    pub minute: u32,
    pub attempts: u32,
    pub failed: u32,
}

/// The health-over-time part of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// When the provider last answered (ms; 0 never).
    pub last_answer: u64,
    /// Bucket of minute m at index m % BUCKETS.
    pub buckets: [Bucket; BUCKETS],
}

impl Tally {
    /// Adds counts to `minute`'s bucket. Returns false (nothing added) when that bucket was
    /// already reused by a later minute (counts more than 15 minutes old).
    pub fn add(&mut self, minute: u32, attempts: u32, failed: u32) -> bool {
        let Some(b) = self.buckets.get_mut(minute as usize % BUCKETS) else {
            return false;
        };
        if b.minute > minute {
            return false;
        }
        if b.minute < minute {
            *b = Bucket {
                minute,
                ..Bucket::default()
            };
        }
        b.attempts = b.attempts.saturating_add(attempts);
        b.failed = b.failed.saturating_add(failed);
        true
    }

    /// Records one attempt of `class` at `now`. Returns whether anything changed.
    pub fn record(&mut self, now: u64, class: Class) -> bool {
        let (attempt, failed) = counts(class);
        if !attempt {
            return false;
        }
        if !failed {
            self.last_answer = self.last_answer.max(now);
        }
        self.add(minute_of(now), 1, u32::from(failed))
    }

    /// Adds a worker's pending answers. Returns whether anything changed.
    pub fn add_pending(&mut self, pending: &Pending) -> bool {
        if pending.answered == 0 {
            return false;
        }
        self.last_answer = self.last_answer.max(pending.last_ms);
        self.add(pending.minute, pending.answered, 0)
    }

    /// The window ending at `now`.
    pub fn recent(&self, now: u64) -> Recent {
        let current = minute_of(now);
        let first = current.saturating_sub(BUCKETS as u32 - 1);
        let (attempts, failed) = self
            .buckets
            .iter()
            .filter(|b| b.minute >= first && b.minute <= current && b.attempts > 0)
            .fold((0u32, 0u32), |(a, f), b| {
                (a.saturating_add(b.attempts), f.saturating_add(b.failed))
            });
        Recent {
            attempts,
            failed,
            state: HealthState::of(attempts, failed),
            last_answer_ms: (self.last_answer > 0).then_some(self.last_answer),
            answered_recently: self.last_answer > 0
                && now.saturating_sub(self.last_answer) < ANSWERED_WINDOW_MS,
        }
    }
}

/// A provider's state over the last 15 minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HealthState {
    /// Under 10% of attempts failed, or fewer than [`MIN_ATTEMPTS`] attempts.
    Healthy = 0,
    /// 10% to under 50% failed.
    Degraded = 1,
    /// 50% or more failed.
    Failing = 2,
    /// No attempts.
    Idle = 3,
}

impl HealthState {
    pub fn of(attempts: u32, failed: u32) -> HealthState {
        let (attempts, failed) = (u64::from(attempts), u64::from(failed));
        if attempts == 0 {
            HealthState::Idle
        } else if attempts < u64::from(MIN_ATTEMPTS) || failed * 10 < attempts {
            HealthState::Healthy
        } else if failed * 2 < attempts {
            HealthState::Degraded
        } else {
            HealthState::Failing
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Degraded => "degraded",
            HealthState::Failing => "failing",
            HealthState::Idle => "idle",
        }
    }

    /// Gauge value (`llm_failover_health_state`): 0 healthy, 1 degraded, 2 failing, 3 idle.
    pub fn metric_value(self) -> u8 {
        self as u8
    }
}

/// What the status endpoint shows of a provider's recent health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recent {
    /// Attempts and failed attempts over the last 15 minutes.
    pub attempts: u32,
    pub failed: u32,
    pub state: HealthState,
    pub last_answer_ms: Option<u64>,
    /// Answered in the last 5 minutes.
    pub answered_recently: bool,
}

/// Answers counted in one worker and not yet in shared data (one per provider).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pending {
    pub minute: u32,
    pub answered: u32,
    pub last_ms: u64,
}

impl Pending {
    /// Counts an answer at `now`. When `now` is in a later minute than the answers held, those
    /// are returned to be written first (their bucket must not take this minute's).
    pub fn add(&mut self, now: u64) -> Option<Pending> {
        let minute = minute_of(now);
        let earlier = (self.answered > 0 && self.minute != minute).then(|| self.take());
        if self.answered == 0 {
            self.minute = minute;
        }
        self.answered = self.answered.saturating_add(1);
        self.last_ms = self.last_ms.max(now);
        earlier
    }

    /// The answers held, leaving none.
    pub fn take(&mut self) -> Pending {
        std::mem::take(self)
    }

    pub fn is_empty(&self) -> bool {
        self.answered == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = BUCKET_MS;

    #[test]
    fn states_follow_the_failed_share_of_at_least_five_attempts() {
        for (attempts, failed, state) in [
            (0, 0, HealthState::Idle),
            (1, 1, HealthState::Healthy),
            (4, 4, HealthState::Healthy),
            (5, 0, HealthState::Healthy),
            (10, 0, HealthState::Healthy),
            (11, 1, HealthState::Healthy),
            (10, 1, HealthState::Degraded),
            (5, 1, HealthState::Degraded),
            (100, 49, HealthState::Degraded),
            (100, 50, HealthState::Failing),
            (5, 5, HealthState::Failing),
            (u32::MAX, u32::MAX, HealthState::Failing),
        ] {
            assert_eq!(
                HealthState::of(attempts, failed),
                state,
                "{attempts} {failed}"
            );
        }
    }

    #[test]
    fn the_window_is_the_current_minute_and_the_fourteen_before() {
        let t0 = 1_000 * M;
        let mut t = Tally::default();
        for i in 0..20u64 {
            assert!(t.record(t0 + i * M, Class::ServerError));
            assert!(t.record(t0 + i * M + 1, Class::Ok));
        }
        let r = t.recent(t0 + 19 * M + 5);
        assert_eq!((r.attempts, r.failed), (30, 15));
        assert_eq!(r.state, HealthState::Failing);
        // A minute later the oldest minute has left the window; 15 after the last, all of it.
        assert_eq!(t.recent(t0 + 20 * M).attempts, 28);
        let late = t.recent(t0 + 34 * M);
        assert_eq!((late.attempts, late.state), (0, HealthState::Idle));
        assert!(!late.answered_recently);
        assert_eq!(late.last_answer_ms, Some(t0 + 19 * M + 1));
    }

    #[test]
    fn answered_recently_means_an_answer_in_the_last_five_minutes() {
        let mut t = Tally::default();
        assert!(!t.recent(M).answered_recently);
        t.record(10 * M, Class::Timeout);
        assert!(
            !t.recent(10 * M).answered_recently,
            "a timeout is no answer"
        );
        t.record(10 * M, Class::InvalidRequest);
        assert!(t.recent(10 * M + ANSWERED_WINDOW_MS - 1).answered_recently);
        assert!(!t.recent(10 * M + ANSWERED_WINDOW_MS).answered_recently);
        assert!(!t.record(11 * M, Class::ClientDisconnect), "says nothing");
        assert_eq!(t.recent(11 * M).attempts, 2);
    }

    #[test]
    fn counts_older_than_their_bucket_are_dropped_not_misfiled() {
        let mut t = Tally::default();
        assert!(t.add(100, 3, 1));
        assert!(t.add(115, 1, 0), "reuses minute 100's bucket");
        assert!(!t.add(100, 5, 5), "minute 100 is gone");
        assert_eq!(t.recent(115 * M).attempts, 1);
    }

    #[test]
    fn pending_answers_hand_over_each_minute_once() {
        let mut p = Pending::default();
        assert!(p.is_empty());
        assert_eq!(p.add(5 * M), None);
        assert_eq!(p.add(5 * M + 7), None);
        let earlier = p.add(6 * M + 1);
        assert_eq!(
            earlier,
            Some(Pending {
                minute: 5,
                answered: 2,
                last_ms: 5 * M + 7
            })
        );
        let rest = p.take();
        assert_eq!(
            (rest.minute, rest.answered, rest.last_ms),
            (6, 1, 6 * M + 1)
        );
        assert!(p.is_empty());
        let mut t = Tally::default();
        assert!(t.add_pending(&earlier.unwrap_or_default()));
        assert!(t.add_pending(&rest));
        assert!(!t.add_pending(&p));
        let r = t.recent(6 * M + 2);
        assert_eq!(
            (r.attempts, r.failed, r.last_answer_ms),
            (3, 0, Some(6 * M + 1))
        );
    }
}
