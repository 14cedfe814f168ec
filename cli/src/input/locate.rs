//! Where a field is in the user's file: `chains[1].max_attempts` to line 12, column 19 of the
//! YAML as written (after `${VAR}` substitution, which keeps lines), so every message can point
//! into the file rather than into the JSON the filter reads.

use crate::diag::Diag;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// What the walk raises when it reaches the field: serde_yaml_ng marks it with the position of
/// the value being read.
const FOUND: &str = "llm-failover: found";

#[derive(Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// `chains[1].providers[0]` as steps; `None` for text that is no field path.
fn steps(field: &str) -> Option<Vec<Step>> {
    let mut out = Vec::new();
    for part in field.split('.') {
        let (key, mut rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            out.push(Step::Key(key.to_string()));
        }
        while !rest.is_empty() {
            let (index, after) = rest.split_once(']')?;
            out.push(Step::Index(index.parse().ok()?));
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    Some(out)
}

/// Line and column (from 1) of `field`'s value in `text`, or of the nearest enclosing field that
/// is there (a missing field is reported where it belongs).
pub fn position(text: &str, field: &str) -> Option<(usize, usize)> {
    let steps = steps(field)?;
    (1..=steps.len())
        .rev()
        .find_map(|n| steps.get(..n).and_then(|s| find(text, s)))
}

fn find(text: &str, steps: &[Step]) -> Option<(usize, usize)> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match Walk(steps).deserialize(de) {
        Err(e) if e.to_string().contains(FOUND) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

/// Gives each message whose field is in `text` its position there.
pub fn locate_all(text: &str, diags: &mut [Diag]) {
    for d in diags
        .iter_mut()
        .filter(|d| d.at.is_none() && !d.field.is_empty())
    {
        d.at = position(text, &d.field);
    }
}

/// Follows the steps through the document; raises [`FOUND`] on the value at the end.
struct Walk<'s>(&'s [Step]);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Walk<'_> {
    fn scalar<E: de::Error>(self) -> Result<(), E> {
        if self.0.is_empty() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Step::Key(wanted), rest)) = self.0.split_first() else {
            return self.scalar();
        };
        while let Some(key) = map.next_key::<serde_yaml_ng::Value>()? {
            let name = match &key {
                serde_yaml_ng::Value::String(s) => s.clone(),
                other => serde_yaml_ng::to_string(other)
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            };
            if &name == wanted {
                return map.next_value_seed(Walk(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Step::Index(wanted), rest)) = self.0.split_first() else {
            return self.scalar();
        };
        let mut i = 0;
        loop {
            if i == *wanted {
                return seq.next_element_seed(Walk(rest)).map(|_| ());
            }
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# a comment\nproviders:\n  - name: a\n    endpoint: x\n  - {name: b, models: [gpt-4o, o3]}\nchains:\n  - name: c\n    max_attempts: three\n";

    #[test]
    fn fields_are_found_where_the_file_has_them() {
        assert_eq!(position(FILE, "providers[0].endpoint"), Some((4, 15)));
        assert_eq!(position(FILE, "providers[1].models[1]"), Some((5, 32)));
        assert_eq!(position(FILE, "chains[0].max_attempts"), Some((8, 19)));
        assert_eq!(position(FILE, "chains[0]"), Some((7, 5)));
        // Missing: the nearest enclosing field.
        assert_eq!(position(FILE, "chains[0].fallback_on[2]"), Some((7, 5)));
        assert_eq!(position(FILE, "breaker.window"), None);
    }

    #[test]
    fn paths_parse_into_steps() {
        assert_eq!(
            steps("chains[1].providers[0][2].x"),
            Some(vec![
                Step::Key("chains".into()),
                Step::Index(1),
                Step::Key("providers".into()),
                Step::Index(0),
                Step::Index(2),
                Step::Key("x".into()),
            ])
        );
        assert_eq!(steps("a[x]"), None);
    }
}
