//! `${VAR}` and `${VAR:-default}` substitution in the failover file's text, before YAML parsing.
//!
//! - `${VAR}`: the variable's value (it may be empty); an error naming it when it is unset.
//! - `${VAR:-default}`: the value, or `default` when the variable is unset or empty.
//! - `$${` writes a literal `${`.
//! - Lines whose first non-blank character is `#` (YAML comments) are left alone, so a
//!   commented-out line never needs its variables.
//!
//! Values are pasted into the text as they are: quote the placeholder in YAML
//! (`"${KEY}"`) when a value may contain `:`, `#` or leading spaces.

use crate::diag::Diag;

/// Substitutes every placeholder; returns every problem at once (one per placeholder).
pub fn substitute(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, Vec<Diag>> {
    let mut out = String::with_capacity(text.len());
    let mut errors = Vec::new();
    for (index, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_start().starts_with('#') {
            out.push_str(line);
            continue;
        }
        let line_no = index + 1;
        let mut rest = line;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix("$${") {
                out.push_str("${");
                rest = after;
                continue;
            }
            let Some(reference) = tail.strip_prefix("${") else {
                out.push('$');
                rest = &tail[1..];
                continue;
            };
            let Some(close) = reference.find('}') else {
                errors.push(Diag::error(
                    "",
                    format!("line {line_no}: \"${{\" is not closed — write ${{VAR}} or ${{VAR:-default}} (or $${{ for a literal \"${{\")"),
                ));
                rest = "";
                break;
            };
            let body = &reference[..close];
            let (name, default) = match body.find(":-") {
                Some(i) => (&body[..i], Some(&body[i + 2..])),
                None => (body, None),
            };
            if !is_var_name(name) {
                errors.push(Diag::error(
                    "",
                    format!("line {line_no}: \"${{{body}}}\" is not a variable reference — write ${{VAR}} or ${{VAR:-default}} with VAR made of letters, digits and '_'"),
                ));
            } else {
                match (env(name), default) {
                    (Some(v), Some(d)) if v.is_empty() => out.push_str(d),
                    (Some(v), _) => out.push_str(&v),
                    (None, Some(d)) => out.push_str(d),
                    (None, None) => errors.push(Diag::error(
                        "",
                        format!("line {line_no}: environment variable {name} is not set — export {name}, or write ${{{name}:-default}}"),
                    )),
                }
            }
            rest = &reference[close + 1..];
        }
        out.push_str(rest);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn is_var_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PORT" => Some("18101".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn replaces_set_variables_and_defaults() {
        let out = substitute(
            "a: ${PORT}\nb: ${NOPE:-7}\nc: ${EMPTY:-x}\nd: '${EMPTY}'\n",
            &env,
        )
        .unwrap();
        assert_eq!(out, "a: 18101\nb: 7\nc: x\nd: ''\n");
    }

    #[test]
    fn set_variables_win_over_defaults_and_defaults_may_be_empty() {
        assert_eq!(substitute("${PORT:-1}|${NOPE:-}", &env).unwrap(), "18101|");
    }

    #[test]
    fn unset_variables_are_named_with_their_line() {
        let e = substitute("a: 1\nb: ${MISSING}\nc: ${ALSO_MISSING}\n", &env).unwrap_err();
        assert_eq!(e.len(), 2);
        assert!(
            e[0].problem
                .starts_with("line 2: environment variable MISSING is not set"),
            "{e:?}"
        );
        assert!(e[1].problem.contains("ALSO_MISSING"), "{e:?}");
    }

    #[test]
    fn comments_dollars_and_escapes_are_left_alone() {
        let out = substitute("# uses ${MISSING}\nprice: $5\nlit: $${NOT_A_VAR}\n", &env).unwrap();
        assert_eq!(out, "# uses ${MISSING}\nprice: $5\nlit: ${NOT_A_VAR}\n");
    }

    #[test]
    fn malformed_references_are_errors_not_panics() {
        assert!(substitute("a: ${", &env).is_err());
        assert!(substitute("a: ${1BAD}", &env).is_err());
        assert!(substitute("a: ${}", &env).is_err());
        assert!(substitute("ünï: ${PORT} ${", &env).is_err());
    }
}
