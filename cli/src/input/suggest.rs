//! "Did you mean": unknown fields answered with the nearest field the file may have there.

use super::{PROVIDER_RENDERER_KEYS, RENDERER_KEYS};

/// serde's "unknown field `x`, expected one of ..." becomes a suggestion; at the top level and
/// in providers the renderer's own fields are offered too.
pub(super) fn explain_unknown_field(field: &str, problem: &str) -> String {
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
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

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
