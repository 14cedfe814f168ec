//! Validating `callers` (callers known by name, each with its token budget, if any) and the
//! token budgets providers and callers share (`budget: {tokens, window}`).

use super::problems::{At, Problems};
use super::raw::{RawBudget, RawCaller};
use super::{caller_counter, Budget, Caller, MAX_CALLERS, OTHER_CALLER};
use std::collections::BTreeMap;

/// A `budget` (a provider's or a caller's): both numbers above 0.
#[inline]
pub fn budget(raw: Option<&RawBudget>, at: &mut At) -> Option<Budget> {
    let b = raw?;
    if b.tokens == 0 {
        at.field("budget.tokens", "must be above 0 (omit budget for none)");
    }
    if b.window == 0 {
        at.field("budget.window", "must be above 0 (e.g. 24h)");
    }
    (b.tokens > 0 && b.window > 0).then_some(Budget {
        tokens: b.tokens,
        window_ms: b.window,
    })
}

/// A caller's name as the `caller` label shows it unchanged (`metrics::label_value` would
/// change anything else): printable ASCII without spaces or `=`, no `.` first or last, at
/// most 128 bytes.
#[inline]
fn is_caller_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && !s.ends_with('.')
        && s.bytes().all(|b| b.is_ascii_graphic() && b != b'=')
}

/// The validated callers. They are told apart by `caller_header`, which must be set.
#[inline]
pub fn validate(
    raw: &[RawCaller],
    caller_header: Option<&str>,
    problems: &mut Problems,
) -> Vec<Caller> {
    if raw.is_empty() {
        return Vec::new();
    }
    if caller_header.is_none() {
        problems.field(
            "callers",
            "callers are told apart by caller_header: set it (the request header your auth filter sets)",
        );
    }
    if raw.len() > MAX_CALLERS {
        problems.field(
            "callers",
            format!("at most {MAX_CALLERS} callers are supported"),
        );
    }
    let mut seen = BTreeMap::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, c) in raw.iter().enumerate() {
        let mut at = problems.at(format!("callers[{i}]"));
        if !is_caller_name(&c.name) {
            at.field(
                "name",
                format!(
                    "{:?} is not a caller name: write the caller_header value (printable, no spaces or '=', no '.' first or last)",
                    c.name
                ),
            );
        } else if c.name == OTHER_CALLER {
            at.field(
                "name",
                format!("{OTHER_CALLER:?} is the label of callers the file does not name: rename this caller"),
            );
        }
        if let Some(first) = seen.insert(c.name.as_str(), i) {
            at.field(
                "name",
                format!(
                    "caller {:?} is already defined at callers[{first}]: names must be unique",
                    c.name
                ),
            );
        }
        out.push(Caller {
            name: c.name.clone(),
            budget: budget(c.budget.as_ref(), &mut at),
            counter: caller_counter(&c.name),
        });
    }
    out
}
