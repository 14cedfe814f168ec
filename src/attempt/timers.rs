//! When the upstream role acts on an attempt by itself (docs/behaviour.md section 5), and what a
//! deadline that passed asks of it: Envoy's own timers are set once per request, these depend
//! on the attempt and on where its answer stands.

use super::{Deadlines, Hold};
use crate::classify::{classify_status, Class};

/// An attempt's deadlines ([`super::deadlines`]) and, for a retry in place, when it may be sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timers {
    pub deadlines: Deadlines,
    /// An in-place retry waits until then before it is sent.
    pub send_at: Option<u64>,
}

/// What the passing of a deadline asks ([`Timers::due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// A retry in place waited out its back-off: send it.
    pub send: bool,
    pub ends: Option<Ends>,
}

/// What a deadline ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ends {
    /// A held stream produced no output in time: a `timeout` (its status `200`), marked for
    /// the next provider like any other, the held answer released.
    FirstToken,
    /// The budget is spent while the answer is held: it goes to the caller as its status
    /// (this) says.
    TotalTimeHeld(u16),
    /// The budget ended while the attempt waited for its answer: a timeout, and the caller
    /// gets the budget's answer at once.
    TotalTimeWaiting,
}

impl Ends {
    /// A held answer's outcome, to settle before it is released: its class, status, and
    /// whether to read the delay it asked for; `None` when nothing was held.
    pub fn held_outcome(self) -> Option<(Class, u16, bool)> {
        match self {
            Ends::FirstToken => Some((Class::Timeout, 200, false)),
            Ends::TotalTimeHeld(status) => Some((classify_status(status), status, true)),
            Ends::TotalTimeWaiting => None,
        }
    }
}

impl Timers {
    /// The next time the attempt must act by itself, if any, given where its answer stands
    /// (`hold`; `settled`: its outcome is; `answered`: its response headers came).
    pub fn next(&self, hold: Option<Hold>, settled: bool, answered: bool) -> Option<u64> {
        let d = &self.deadlines;
        let waiting = !settled || hold.is_some();
        let first_token = d.first_token_at.filter(|_| hold == Some(Hold::FirstOutput));
        let budget = d
            .total_time_at
            .filter(|_| waiting && (!answered || hold.is_some()));
        [self.send_at, first_token, budget]
            .into_iter()
            .flatten()
            .min()
    }

    /// What is due at `now` (each deadline acts once).
    pub fn due(&mut self, now: u64, hold: Option<Hold>, settled: bool, answered: bool) -> Wake {
        let due = |at: Option<u64>| at.is_some_and(|at| at <= now);
        let send = due(self.send_at);
        if send {
            self.send_at = None;
        }
        let ends = if due(self.deadlines.first_token_at) && hold == Some(Hold::FirstOutput) {
            Some(Ends::FirstToken)
        } else if due(self.deadlines.total_time_at) {
            self.deadlines.total_time_at = None;
            match hold {
                Some(Hold::Body(status) | Hold::Answer(status)) => {
                    Some(Ends::TotalTimeHeld(status))
                }
                Some(Hold::Stream | Hold::FirstOutput) => Some(Ends::TotalTimeHeld(200)),
                None if !answered && !settled => Some(Ends::TotalTimeWaiting),
                None => None,
            }
        } else {
            None
        };
        Wake { send, ends }
    }
}
