//! The file as YAML, and values shown in messages as the user wrote them.

use crate::diag::Diag;
use serde_yaml_ng::{Mapping, Value};

pub(super) fn parse_yaml(text: &str) -> Result<Mapping, Vec<Diag>> {
    // serde_yaml_ng's message already says where: "... at line 2 column 7, while parsing ...".
    let mut value: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| vec![Diag::error("", format!("not valid YAML: {e}"))])?;
    value
        .apply_merge()
        .map_err(|e| vec![Diag::error("", format!("YAML merge key (<<) problem: {e}"))])?;
    match value {
        Value::Mapping(m) => Ok(m),
        Value::Null => Err(vec![Diag::error(
            "",
            "the file is empty — it needs at least providers: and chains:",
        )]),
        _ => Err(vec![Diag::error(
            "",
            "the file must be a YAML mapping with providers: and chains: at the top",
        )]),
    }
}

pub(super) fn non_empty_string(
    v: &Value,
    field: &str,
    what: &str,
    errors: &mut Vec<Diag>,
) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        _ => {
            errors.push(Diag::error(
                field,
                format!("must be a non-empty string — {what}"),
            ));
            None
        }
    }
}

pub(super) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "nothing".into(),
        other => serde_json::to_string(other).unwrap_or_else(|_| "this value".into()),
    }
}

pub(super) fn show_key(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_else(|| show(v))
}
