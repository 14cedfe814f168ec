//! Cross-checks on a valid configuration: things that load fine but cannot be what was meant.

use crate::diag::Diag;
use llm_failover::config::{Config, ModelPattern, Provider};
use llm_failover::envelope::Envelope;
use llm_failover::pattern::covers;

pub fn cross_check(config: &Config) -> Vec<Diag> {
    let mut out = Vec::new();
    unused_providers(config, &mut out);
    shadowed_chains(config, &mut out);
    providers_outside_their_chain(config, &mut out);
    routes_of_the_rendered_gateway(config, &mut out);
    gemini_credentials(config, &mut out);
    gemini_entries_without_a_model(config, &mut out);
    out
}

/// Google AI's native Gemini API takes its key in `x-goog-api-key`; as `Authorization: Bearer`
/// it is refused (that header takes an OAuth access token there, and a Vertex AI one on
/// Vertex, whose path_prefix names the project).
fn gemini_credentials(config: &Config, out: &mut Vec<Diag>) {
    for (id, p) in config.provider_ids() {
        let google_ai = p.envelope == Some(Envelope::GeminiNative)
            && !(p.path_prefix.as_deref())
                .is_some_and(|prefix| prefix.starts_with("/v1/projects/"));
        let bearer = (p.set_headers.first()).is_some_and(|(name, value)| {
            name.eq_ignore_ascii_case("authorization") && value.starts_with("Bearer ")
        });
        if google_ai && p.credential && bearer {
            out.push(Diag::warning(
                format!("providers[{id}].credential"),
                format!(
                    "provider {:?} (api: gemini_native on Google AI) sends its key as Authorization: Bearer, which Google AI refuses for an API key — write credential: {{header: x-goog-api-key, env: GEMINI_API_KEY}} (Bearer is for an OAuth access token)",
                    p.name
                ),
            ));
        }
    }
}

/// A Gemini entry without `model` sends the caller's model name: in a chain whose patterns
/// take other vendors' names (`gpt-*`, `*`), a request for `gpt-4o` would reach Gemini as
/// `gpt-4o`, which it does not serve.
fn gemini_entries_without_a_model(config: &Config, out: &mut Vec<Diag>) {
    for (j, chain) in config.chains.iter().enumerate() {
        for (k, entry) in chain.main_entries().iter().enumerate() {
            let Some(p) = config.provider(entry.provider) else {
                continue;
            };
            if entry.model.is_some() || !is_gemini(p) {
                continue;
            }
            let foreign = chain.models.iter().find(|m| {
                !pattern_text(m).trim_matches('"').starts_with("gemini")
                    && p.models.iter().any(|pm| overlap(m, pm))
            });
            if let Some(m) = foreign {
                out.push(Diag::warning(
                    format!("chains[{j}].providers[{k}]"),
                    format!(
                        "chain {:?} takes models {}, and this entry sends provider {:?} (Gemini) the caller's model name as it is (a request for gpt-4o would reach Gemini as gpt-4o) — give the entry a model: (e.g. {{provider: {}, model: gemini-2.5-flash}}) or limit the provider's models to Gemini's",
                        chain.name,
                        pattern_text(m),
                        p.name,
                        p.name
                    ),
                ));
            }
        }
    }
}

fn is_gemini(p: &Provider) -> bool {
    matches!(p.envelope, Some(Envelope::Gemini | Envelope::GeminiNative))
}

/// The rendered gateway has one route, named `llm_failover`; a chain limited to other routes
/// only matches once the pieces are merged into a configuration that has them.
fn routes_of_the_rendered_gateway(config: &Config, out: &mut Vec<Diag>) {
    for (j, chain) in config.chains.iter().enumerate() {
        if !chain.routes.is_empty() && !chain.routes.iter().any(|r| r == crate::names::NAME) {
            out.push(Diag::warning(
                format!("chains[{j}].routes"),
                format!(
                    "the rendered gateway has a single route named {:?}, so chain {:?} never matches there — add {:?} to routes, or use --pieces and name your routes to match",
                    crate::names::NAME,
                    chain.name,
                    crate::names::NAME
                ),
            ));
        }
    }
}

fn unused_providers(config: &Config, out: &mut Vec<Diag>) {
    for (id, p) in config.provider_ids() {
        if !config
            .chains
            .iter()
            .any(|c| c.entries.iter().any(|e| e.provider == id))
        {
            out.push(Diag::warning(
                format!("providers[{id}]"),
                format!(
                    "provider {:?} is not used by any chain — add it to a chain or remove it",
                    p.name
                ),
            ));
        }
    }
}

/// Chains are tried in order and the first whose models, routes and paths match is used, a
/// chain naming the caller before one naming nobody: a later chain's model pattern that an
/// earlier chain already covers for every request the later one could take never selects it.
fn shadowed_chains(config: &Config, out: &mut Vec<Diag>) {
    for (j, later) in config.chains.iter().enumerate() {
        let earlier: Vec<_> = config
            .chains
            .iter()
            .take(j)
            .filter(|c| routes_cover(&c.routes, &later.routes))
            .filter(|c| paths_cover(&c.paths, &later.paths))
            .filter(|c| callers_cover(&c.callers, &later.callers))
            .collect();
        let shadowed: Vec<(usize, &str)> = later
            .models
            .iter()
            .enumerate()
            .filter_map(|(k, m)| {
                earlier
                    .iter()
                    .find(|c| c.models.iter().any(|p| covers(p, m)))
                    .map(|c| (k, c.name.as_str()))
            })
            .collect();
        if shadowed.is_empty() {
            continue;
        }
        if shadowed.len() == later.models.len() {
            let by: Vec<&str> = dedup(shadowed.iter().map(|s| s.1));
            out.push(Diag::warning(
                format!("chains[{j}].models"),
                format!(
                    "chain {:?} can never match: every model it lists is matched first by chain {} for the same routes, paths and callers — move it before, narrow the earlier chain's models, or give it routes",
                    later.name,
                    by.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
                ),
            ));
        } else {
            for (k, by) in shadowed {
                out.push(Diag::warning(
                    format!("chains[{j}].models[{k}]"),
                    format!(
                        "{} is matched first by chain {by:?} for the same routes, paths and callers, so it never selects chain {:?} — remove it or move this chain before {by:?}",
                        later.models.get(k).map(pattern_text).unwrap_or_default(),
                        later.name
                    ),
                ));
            }
        }
    }
}

/// A chain entry whose provider declares no model the chain serves is always skipped; a chain
/// whose every entry is skipped can never serve a request (an error: a misspelt model pattern).
fn providers_outside_their_chain(config: &Config, out: &mut Vec<Diag>) {
    for (j, chain) in config.chains.iter().enumerate() {
        let entries = chain.main_entries();
        let mut skipped = 0;
        for (k, entry) in entries.iter().enumerate() {
            let Some(p) = config.provider(entry.provider) else {
                continue;
            };
            if let Some(model) = &entry.model {
                if !p.models.iter().any(|pm| pm.matches(model)) {
                    skipped += 1;
                    out.push(Diag::warning(
                        format!("chains[{j}].{}.model", chain.entry_field(k)),
                        format!(
                            "provider {:?} does not list {model:?} in its models, so this entry is always skipped — add it to the provider's models or fix the name",
                            p.name
                        ),
                    ));
                }
                continue;
            }
            let serves_some = chain
                .models
                .iter()
                .any(|m| p.models.iter().any(|pm| overlap(m, pm)));
            if !serves_some {
                skipped += 1;
                out.push(Diag::warning(
                    format!("chains[{j}].{}", chain.entry_field(k)),
                    format!(
                        "provider {:?} serves none of chain {:?}'s models, so it is always skipped — fix its models, or give this entry a model: to send instead",
                        p.name, chain.name
                    ),
                ));
            }
        }
        if skipped > 0 && skipped == entries.len() {
            out.push(Diag::error(
                format!("chains[{j}]"),
                format!(
                    "chain {:?} can never serve a request: every provider in it is skipped for its models (see the warnings above) — fix the model names in the chain or its providers",
                    chain.name
                ),
            ));
        }
    }
}

fn routes_cover(earlier: &[String], later: &[String]) -> bool {
    earlier.is_empty() || (!later.is_empty() && later.iter().all(|r| earlier.contains(r)))
}

/// Every path the later chain takes, the earlier one takes too.
fn paths_cover(earlier: &[ModelPattern], later: &[ModelPattern]) -> bool {
    earlier.is_empty()
        || (!later.is_empty() && later.iter().all(|l| earlier.iter().any(|e| covers(e, l))))
}

/// A chain naming callers wins over one naming nobody, whatever their order: only a chain of the
/// same kind that takes every caller of the later one comes first for all its requests.
fn callers_cover(earlier: &[String], later: &[String]) -> bool {
    if earlier.is_empty() || later.is_empty() {
        return earlier.is_empty() && later.is_empty();
    }
    later.iter().all(|c| earlier.contains(c))
}

/// Some model matches both.
pub fn overlap(p: &ModelPattern, q: &ModelPattern) -> bool {
    covers(p, q)
        || covers(q, p)
        || matches!((p, q), (ModelPattern::Prefix(a), ModelPattern::Prefix(b)) if a.starts_with(b.as_str()) || b.starts_with(a.as_str()))
}

fn pattern_text(p: &ModelPattern) -> String {
    match p {
        ModelPattern::Any => "\"*\"".into(),
        ModelPattern::Prefix(s) => format!("\"{s}*\""),
        ModelPattern::Exact(s) => format!("{s:?}"),
    }
}

fn dedup<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> ModelPattern {
        ModelPattern::parse(s)
    }

    fn warnings(yaml_json: &str) -> Vec<String> {
        let config = Config::from_json(yaml_json.as_bytes(), &|_| Some("k".into())).expect("valid");
        cross_check(&config)
            .into_iter()
            .map(|d| format!("{}: {}", d.field, d.problem))
            .collect()
    }

    #[test]
    fn a_google_ai_gemini_key_sent_as_bearer_is_named() {
        let bearer = r#"{"providers":[{"name":"g","api":"gemini_native","models":["gemini-*"],
            "credential":{"header":"authorization","prefix":"Bearer ","env":"K"}}],
            "chains":[{"name":"c","models":["gemini-*"],"providers":["g"]}]}"#;
        let w = warnings(bearer);
        assert!(
            w.len() == 1 && w[0].starts_with("providers[0].credential: provider \"g\" (api: gemini_native on Google AI) sends its key as Authorization: Bearer"),
            "{w:?}"
        );
        // x-goog-api-key, Vertex AI's token, and Gemini's OpenAI endpoint (which takes Bearer) pass.
        for fine in [
            bearer.replace(
                r#""header":"authorization","prefix":"Bearer ""#,
                r#""header":"x-goog-api-key""#,
            ),
            bearer.replace(
                r#""api":"gemini_native","#,
                r#""api":"gemini_native","path_prefix":"/v1/projects/p/locations/us-central1","#,
            ),
            bearer.replace("gemini_native", "gemini"),
        ] {
            assert_eq!(warnings(&fine), Vec::<String>::new(), "{fine}");
        }
    }

    #[test]
    fn a_gemini_entry_without_a_model_in_a_chain_of_other_vendors_names_is_named() {
        let gpt = r#"{"providers":[{"name":"openai"},{"name":"g","api":"gemini_native",
            "credential":{"header":"x-goog-api-key","env":"K"}}],
            "chains":[{"name":"gpt","models":["gpt-*"],"providers":["openai","g"]}]}"#;
        let w = warnings(gpt);
        assert!(
            w.len() == 1 && w[0].starts_with("chains[0].providers[1]: chain \"gpt\" takes models \"gpt-*\", and this entry sends provider \"g\" (Gemini) the caller's model name"),
            "{w:?}"
        );
        // With a model, in a chain of Gemini's names, or a provider limited to them: fine.
        for fine in [
            gpt.replace(
                r#""openai","g"]"#,
                r#""openai",{"provider":"g","model":"gemini-2.5-flash"}]"#,
            ),
            gpt.replace(r#""models":["gpt-*"]"#, r#""models":["gemini-*"]"#),
        ] {
            assert_eq!(warnings(&fine), Vec::<String>::new(), "{fine}");
        }
    }

    #[test]
    fn coverage_and_overlap_of_patterns() {
        assert!(covers(&p("*"), &p("gpt-4o")));
        assert!(covers(&p("gpt-*"), &p("gpt-4*")));
        assert!(covers(&p("gpt-*"), &p("gpt-4o")));
        assert!(!covers(&p("gpt-4*"), &p("gpt-*")));
        assert!(!covers(&p("gpt-4o"), &p("gpt-*")));
        assert!(overlap(&p("gpt-4*"), &p("gpt-*")));
        assert!(!overlap(&p("claude-*"), &p("gpt-*")));
        assert!(!overlap(&p("gpt-4o"), &p("gpt-4o-mini")));
    }
}
