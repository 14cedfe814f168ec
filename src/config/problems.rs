//! Collecting configuration problems, each scoped to the field path it is about (docs/behaviour.md section
//! 9: one log line per problem, naming the field).

use std::fmt;

/// One configuration problem: where it is and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "{}: {}", self.field, self.problem)
        }
    }
}

/// Every problem found so far, in the order found.
#[derive(Debug, Default)]
pub struct Problems {
    list: Vec<ConfigError>,
}

impl Problems {
    /// Problems under `path` (e.g. `"providers[0]"`; `""` for the top level).
    #[inline]
    pub fn at(&mut self, path: impl Into<String>) -> At<'_> {
        At {
            problems: self,
            path: path.into(),
        }
    }

    /// Problems of a top-level field.
    #[inline]
    pub fn field(&mut self, field: &str, problem: impl Into<String>) {
        self.at("").field(field, problem);
    }

    /// `Ok(value)` when nothing was found, else every problem.
    #[inline]
    pub fn into_result<T>(self, value: impl FnOnce() -> T) -> Result<T, Vec<ConfigError>> {
        if self.list.is_empty() {
            Ok(value())
        } else {
            Err(self.list)
        }
    }
}

/// The problems of one place in the configuration.
pub struct At<'p> {
    problems: &'p mut Problems,
    path: String,
}

impl At<'_> {
    /// A problem with `field` of this place (`"name"`, `"credential.env"`, `"providers[1]"`).
    #[inline]
    pub fn field(&mut self, field: &str, problem: impl Into<String>) {
        let field = self.join(field);
        self.push(field, problem.into());
    }

    #[inline]
    fn join(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    #[inline]
    fn push(&mut self, field: String, problem: String) {
        self.problems.list.push(ConfigError { field, problem });
    }
}

/// A name users give providers and chains: letters, digits, `-`, `_`, `.`; at most 128 bytes.
#[inline]
pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A lowercase HTTP header name (pseudo-headers' `:` allowed; callers refuse them where needed).
#[inline]
pub fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.:".contains(&b))
}
