//! The file as YAML, and values shown in messages as the user wrote them.

use crate::diag::Diag;
use serde_yaml_ng::{Mapping, Value};

pub(super) fn parse_yaml(text: &str) -> Result<Mapping, Vec<Diag>> {
    let mut value: Value =
        serde_yaml_ng::from_str(text).map_err(|e| vec![syntax_error(text, &e)])?;
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

/// The parser's message, placed at its line and column, with what to check: a tab where YAML
/// wants spaces, or the indentation and the closing of quotes and brackets.
fn syntax_error(text: &str, e: &serde_yaml_ng::Error) -> Diag {
    let what = without_positions(&e.to_string());
    let Some(at) = e.location() else {
        return Diag::error("", format!("not valid YAML: {what}"));
    };
    let (line, column) = (at.line(), at.column());
    let source = text.lines().nth(line.saturating_sub(1)).unwrap_or("");
    let indent = &source[..source.len() - source.trim_start().len()];
    let problem = if what.contains("tab") || indent.contains('\t') {
        format!(
            "not valid YAML: line {line} is indented with a tab — YAML indents with spaces only: replace the tab with spaces"
        )
    } else {
        format!(
            "not valid YAML: {what} — check the indentation of line {line} and the lines above it (the fields of one mapping start in one column; list items start with \"- \" under their key) and that every quote and bracket is closed"
        )
    };
    Diag::error("", problem).at(line, column)
}

/// The parser's text without its " at line 3 column 4" (the message is placed there instead).
fn without_positions(message: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(i) = rest.find(" at line ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + " at line ".len()..];
        let digits = |s: &str| s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let n = digits(after);
        let tail = after[n..].strip_prefix(" column ").filter(|_| n > 0);
        match tail {
            Some(t) => rest = &t[digits(t)..],
            None => {
                out.push_str(" at line ");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_say_where_and_what_to_check() {
        let e = parse_yaml("providers:\n  - name: a\n   endpoint: x\n- b\n").unwrap_err();
        assert_eq!(e[0].at, Some((3, 4)));
        assert_eq!(
            e[0].problem,
            "not valid YAML: did not find expected '-' indicator, while parsing a block collection — check the indentation of line 3 and the lines above it (the fields of one mapping start in one column; list items start with \"- \" under their key) and that every quote and bracket is closed"
        );
        let e = parse_yaml("providers:\n  - name: a\n\tendpoint: x\n").unwrap_err();
        assert_eq!(
            e[0].problem,
            "not valid YAML: line 3 is indented with a tab — YAML indents with spaces only: replace the tab with spaces"
        );
        assert_eq!(e[0].at.map(|a| a.0), Some(3));
    }
}
