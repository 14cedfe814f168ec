//! Cross-checks on a valid configuration: things that load fine but cannot be what was meant.

use crate::diag::Diag;
use llm_failover::config::{Config, ModelPattern};
use llm_failover::pattern::covers;

pub fn cross_check(config: &Config) -> Vec<Diag> {
    let mut out = Vec::new();
    unused_providers(config, &mut out);
    shadowed_chains(config, &mut out);
    providers_outside_their_chain(config, &mut out);
    routes_of_the_rendered_gateway(config, &mut out);
    out
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
                        format!("chains[{j}].providers[{k}].model"),
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
                    format!("chains[{j}].providers[{k}]"),
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
