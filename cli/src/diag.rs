//! Messages for the person editing a failover file: `FILE: field.path: problem — fix`.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warning,
}

/// One problem found in a failover file, located by its field path (`providers[1].endpoint`);
/// an empty path means the file as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diag {
    pub level: Level,
    pub field: String,
    pub problem: String,
}

impl Diag {
    pub fn error(field: impl Into<String>, problem: impl Into<String>) -> Diag {
        Diag {
            level: Level::Error,
            field: field.into(),
            problem: problem.into(),
        }
    }

    pub fn warning(field: impl Into<String>, problem: impl Into<String>) -> Diag {
        Diag {
            level: Level::Warning,
            field: field.into(),
            problem: problem.into(),
        }
    }

    pub fn is_error(&self) -> bool {
        self.level == Level::Error
    }

    /// The line printed to the user: `FILE: [warning: ]field.path: problem`.
    pub fn render(&self, file: &str) -> String {
        format!("{file}: {self}")
    }
}

impl fmt::Display for Diag {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.level == Level::Warning {
            f.write_str("warning: ")?;
        }
        if self.field.is_empty() {
            f.write_str(&self.problem)
        } else {
            write!(f, "{}: {}", self.field, self.problem)
        }
    }
}
