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

/// Every name `q` matches, `p` matches too.
pub fn covers(p: &ModelPattern, q: &ModelPattern) -> bool {
    match (p, q) {
        (ModelPattern::Any, _) => true,
        (ModelPattern::Prefix(a), ModelPattern::Prefix(b)) => b.starts_with(a.as_str()),
        (ModelPattern::Prefix(a), ModelPattern::Exact(e)) => e.starts_with(a.as_str()),
        (ModelPattern::Exact(a), ModelPattern::Exact(b)) => a == b,
        _ => false,
    }
}

pub fn any_matches(patterns: &[ModelPattern], model: &str) -> bool {
    patterns.iter().any(|p| p.matches(model))
}
