//! Messages for the person editing a failover file: `FILE:LINE:COLUMN: field.path: problem —
//! fix` (the position in the file as written, when the field is there).

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
    /// Line and column (from 1) in the file as written (`input::locate`).
    pub at: Option<(usize, usize)>,
}

impl Diag {
    pub fn error(field: impl Into<String>, problem: impl Into<String>) -> Diag {
        Diag {
            level: Level::Error,
            field: field.into(),
            problem: problem.into(),
            at: None,
        }
    }

    pub fn warning(field: impl Into<String>, problem: impl Into<String>) -> Diag {
        Diag {
            level: Level::Warning,
            field: field.into(),
            problem: problem.into(),
            at: None,
        }
    }

    pub fn is_error(&self) -> bool {
        self.level == Level::Error
    }

    /// The same message, found at `line`, `column` of the file.
    pub fn at(mut self, line: usize, column: usize) -> Diag {
        self.at = Some((line, column));
        self
    }

    /// The line printed to the user: `FILE[:LINE:COLUMN]: [warning: ]field.path: problem`.
    pub fn render(&self, file: &str) -> String {
        match self.at {
            Some((line, column)) => format!("{file}:{line}:{column}: {self}"),
            None => format!("{file}: {self}"),
        }
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
