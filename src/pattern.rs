//! Name patterns (`*`, `prefix*` or an exact name) for models, paths and header names. Its own
//! module so that what uses patterns (configuration, header forwarding) need not import each
//! other.

/// A model name pattern: `*`, `prefix*` or an exact name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelPattern {
    Any,
    Prefix(String),
    Exact(String),
}

impl ModelPattern {
    pub fn parse(text: &str) -> ModelPattern {
        if text == "*" {
            ModelPattern::Any
        } else if let Some(prefix) = text.strip_suffix('*') {
            ModelPattern::Prefix(prefix.to_string())
        } else {
            ModelPattern::Exact(text.to_string())
        }
    }

    pub fn matches(&self, model: &str) -> bool {
        match self {
            ModelPattern::Any => true,
            ModelPattern::Prefix(p) => model.starts_with(p.as_str()),
            ModelPattern::Exact(e) => e == model,
        }
    }
}

pub fn any_matches(patterns: &[ModelPattern], model: &str) -> bool {
    patterns.iter().any(|p| p.matches(model))
}
