//! The filter's configuration messages in the file's own terms: "did you mean" for unknown
//! fields and provider names, types in words ("a whole number", not `u32`), and no position in
//! the JSON the filter reads (the message is located in the YAML file instead).

use super::{PROVIDER_RENDERER_KEYS, RENDERER_KEYS};

/// One message of the filter's configuration code, as the person editing the file should read
/// it. `providers` are the provider names the file defines.
pub(super) fn in_users_terms(field: &str, problem: &str, providers: &[&str]) -> String {
    let problem = without_json_position(problem);
    if problem.starts_with("unknown field `") {
        return explain_unknown_field(field, problem);
    }
    if let Some(field) = problem
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        return format!("missing field `{field}` — add {field}: ...");
    }
    if let Some(better) = unknown_provider(problem, providers) {
        return better;
    }
    if let Some(better) = super::values::one_unit_instead(problem) {
        return better;
    }
    types_in_words(problem).unwrap_or_else(|| problem.to_string())
}

/// serde_json ends its messages with " at line 1 column 917": a place in the JSON text, which
/// the user never sees.
fn without_json_position(problem: &str) -> &str {
    let Some(i) = problem.rfind(" at line ") else {
        return problem;
    };
    let tail = &problem[i + " at line ".len()..];
    let is_position = tail
        .split_once(" column ")
        .is_some_and(|(l, c)| is_number(l) && is_number(c));
    if is_position {
        &problem[..i]
    } else {
        problem
    }
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `unknown provider "azur": ...` gets the nearest provider name the file defines.
fn unknown_provider(problem: &str, providers: &[&str]) -> Option<String> {
    let rest = problem.strip_prefix("unknown provider \"")?;
    let (name, _) = rest.split_once('"')?;
    let best = providers
        .iter()
        .filter(|p| edit_distance(name, p) <= 2)
        .min_by_key(|p| edit_distance(name, p))?;
    Some(format!(
        "unknown provider {name:?} — did you mean {best:?}?"
    ))
}

/// serde's `invalid type: string "three", expected u32` as `"three" is not a whole number`.
fn types_in_words(problem: &str) -> Option<String> {
    let (kind, rest) = problem.split_once(": ")?;
    if kind != "invalid type" && kind != "invalid value" {
        return None;
    }
    let (found, expected) = rest.rsplit_once(", expected ")?;
    let found = value_in_words(found);
    let unsigned = ["u8", "u16", "u32", "u64", "usize"].contains(&expected);
    let expected = match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" => {
            "a whole number"
        }
        "f32" | "f64" => "a number",
        "a sequence" => "a list",
        "a boolean" => "true or false",
        "a map" => "a mapping",
        e if e.starts_with("struct ") => "a mapping",
        e => e,
    };
    if unsigned && kind == "invalid value" {
        return Some(format!(
            "{found} is not {expected} of 0 or more — write 0 or more"
        ));
    }
    Some(format!(
        "{found} is not {expected} — {}",
        type_fix(&found, expected)
    ))
}

/// What to write instead of `found` (as [`value_in_words`] shows it) where `expected` (in
/// words) belongs.
fn type_fix(found: &str, expected: &str) -> String {
    let text = found
        .strip_prefix('"')
        .and_then(|f| f.strip_suffix('"'))
        .filter(|_| found.len() >= 2);
    match (expected, text) {
        ("a whole number", Some(t)) if is_number(t) => format!("write it without quotes: {t}"),
        ("a whole number", Some(t)) => match thousands(t) {
            Some(n) => format!("write the number itself: {n}"),
            None => "write it in digits, without quotes or units".to_string(),
        },
        ("a whole number" | "a number", None) => "write it in digits".to_string(),
        ("true or false", _) => {
            "write true or false, without quotes (YAML reads yes, no, on and off as text)"
                .to_string()
        }
        ("a list", Some(t)) => format!("write a list: [{t:?}]"),
        ("a list", None) => "write a list: [a, b]".to_string(),
        ("a string", _) if found.starts_with(|c: char| c.is_ascii_digit()) => {
            format!("quote it: \"{found}\"")
        }
        ("a string", _) => "write it as text".to_string(),
        ("a mapping", _) => "write a mapping: {field: value}".to_string(),
        (e, _) if e.starts_with("a provider's name") => {
            "write a provider's name, or {provider: NAME, model: MODEL}".to_string()
        }
        (e, _) => format!("write {e}"),
    }
}

/// `200k` as 200000, `1m` as 1000000: a size the file wrote with a unit where a count belongs.
fn thousands(text: &str) -> Option<u64> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, scale) = match (lower.strip_suffix('k'), lower.strip_suffix('m')) {
        (Some(digits), _) => (digits, 1_000),
        (_, Some(digits)) => (digits, 1_000_000),
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// serde's description of the value found (`serde::de::Unexpected`), as the file shows it.
fn value_in_words(found: &str) -> String {
    for prefix in [
        "string ",
        "integer ",
        "floating point ",
        "boolean ",
        "character ",
    ] {
        if let Some(v) = found.strip_prefix(prefix) {
            return v.trim_matches('`').to_string();
        }
    }
    match found {
        "sequence" => "a list".into(),
        "map" => "a mapping".into(),
        "unit value" | "null" => "nothing".into(),
        other => other.to_string(),
    }
}

/// serde's "unknown field `x`, expected one of ..." becomes a suggestion; at the top level and
/// in providers the renderer's own fields are offered too.
fn explain_unknown_field(field: &str, problem: &str) -> String {
    let Some(rest) = problem.strip_prefix("unknown field `") else {
        return problem.to_string();
    };
    let Some((name, expected)) = rest.split_once('`') else {
        return problem.to_string();
    };
    let mut candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let top_level = !field.contains(['.', '[']);
    let in_provider = field.starts_with("providers[") && field.matches('.').count() == 1;
    if top_level {
        candidates.extend(RENDERER_KEYS);
    } else if in_provider {
        candidates.extend(PROVIDER_RENDERER_KEYS);
    }
    candidates.retain(|c| *c != "role");
    unknown_field(name, &candidates)
}

/// The message for a field that is not one of `candidates`: the closest one when it is a typo
/// away, else the whole list (every block of the file says it the same way).
pub(crate) fn unknown_field(name: &str, candidates: &[&str]) -> String {
    if let Some(best) = candidates
        .iter()
        .filter(|c| edit_distance(name, c) <= 2)
        .min_by_key(|c| edit_distance(name, c))
    {
        return format!("unknown field `{name}` — did you mean `{best}`?");
    }
    if candidates.is_empty() {
        return format!("unknown field `{name}` — remove it");
    }
    format!(
        "unknown field `{name}` — expected one of {}",
        candidates
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = Vec::with_capacity(b.len() + 1);
        cur.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            let replace = prev.get(j).map_or(usize::MAX, |d| d + cost);
            let delete = prev.get(j + 1).map_or(usize::MAX, |u| u + 1);
            let insert = cur.last().map_or(usize::MAX, |l| l + 1);
            cur.push(replace.min(delete).min(insert));
        }
        prev = cur;
    }
    prev.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_read_in_the_files_terms() {
        let t = |p: &str| in_users_terms("x", p, &["openai", "azure"]);
        assert_eq!(
            t("invalid type: string \"three\", expected u32 at line 1 column 701"),
            "\"three\" is not a whole number — write it in digits, without quotes or units"
        );
        assert_eq!(
            t("invalid type: string \"gpt\", expected a sequence at line 1 column 45"),
            "\"gpt\" is not a list — write a list: [\"gpt\"]"
        );
        assert_eq!(
            t("invalid value: integer `-1`, expected u32"),
            "-1 is not a whole number of 0 or more — write 0 or more"
        );
        assert_eq!(
            t("invalid type: map, expected a string"),
            "a mapping is not a string — write it as text"
        );
        assert_eq!(
            t("invalid type: string \"200k\", expected u64"),
            "\"200k\" is not a whole number — write the number itself: 200000"
        );
        assert_eq!(
            t("invalid type: string \"200000\", expected u64"),
            "\"200000\" is not a whole number — write it without quotes: 200000"
        );
        assert_eq!(
            t("invalid type: string \"yes\", expected a boolean"),
            "\"yes\" is not true or false — write true or false, without quotes (YAML reads yes, no, on and off as text)"
        );
        assert_eq!(
            t("unknown provider \"azur\": define it under providers or fix the name"),
            "unknown provider \"azur\" — did you mean \"azure\"?"
        );
        assert_eq!(
            t("unknown provider \"zzz\": define it under providers or fix the name"),
            "unknown provider \"zzz\": define it under providers or fix the name"
        );
        assert_eq!(
            t("\"1m30s\" combines units at line 1 column 9"),
            "\"1m30s\" combines units"
        );
        assert_eq!(t("ends at line seven"), "ends at line seven");
    }

    #[test]
    fn unknown_fields_get_suggestions_including_renderer_fields() {
        let m = explain_unknown_field(
            "lisen",
            "unknown field `lisen`, expected one of `role`, `providers`, `chains`",
        );
        assert_eq!(m, "unknown field `lisen` — did you mean `listen`?");
        let m = explain_unknown_field(
            "providers[0].endpiont",
            "unknown field `endpiont`, expected one of `name`, `models`",
        );
        assert_eq!(m, "unknown field `endpiont` — did you mean `endpoint`?");
        let m = explain_unknown_field(
            "chains[0].zzz",
            "unknown field `zzz`, expected one of `name`, `models`",
        );
        assert_eq!(m, "unknown field `zzz` — expected one of `name`, `models`");
    }
}
