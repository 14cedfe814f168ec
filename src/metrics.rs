//! Metric names (docs/behaviour.md section 8, **fixed**) and how their labels travel through Envoy.
//!
//! proxy-wasm metrics have a name and no labels. Envoy stores a metric defined by a wasm module
//! as `wasmcustom.<name>`, and its Prometheus output prints stats of that namespace without the
//! `envoy_` prefix. Labels come from Envoy's tag extraction (`stats_config.stats_tags`): each
//! label is written into the stat name as a `.<label>=<value>` segment, and one regex per label
//! (rendered into the bootstrap by the CLI from [`stats_tags`]) takes the segment out of the name
//! and makes it a tag. So the filter defines
//!
//! ```text
//! llm_failover_attempts_total.provider=primary.outcome=server_error
//! ```
//!
//! and `/stats/prometheus` prints
//!
//! ```text
//! llm_failover_attempts_total{provider="primary",outcome="server_error"} 1
//! ```
//!
//! # Label values
//! Values are provider and chain names (config tokens: letters, digits, `-`, `_`, `.`) and fixed
//! words (outcome classes, skip reasons). A value may contain dots: `=` marks where each label
//! starts and no value contains `=`, so every regex finds exactly one split. [`label_value`]
//! makes any other text safe (`=`, whitespace, control characters and a leading or trailing dot
//! become `_`; an empty value becomes `_`), so a name can never be mis-split; validated
//! configuration never needs it.
//!
//! This module is plain Rust (no proxy-wasm types): the glue defines each name once and caches
//! the metric id.

use crate::classify::Class;
use std::borrow::Cow;

/// Envoy's namespace for stats defined by wasm modules (stripped again by `/stats/prometheus`).
pub const ENVOY_NAMESPACE: &str = "wasmcustom";

/// `llm_failover_attempts_total{provider, outcome}`: every provider call, by outcome class
/// (`ok` or a class of docs/behaviour.md section 3).
pub const ATTEMPTS: &str = "llm_failover_attempts_total";
/// `llm_failover_fallbacks_total{from, to}`: an attempt that failed over to the next provider.
pub const FALLBACKS: &str = "llm_failover_fallbacks_total";
/// `llm_failover_skipped_total{provider, reason}`: a provider left out of a request's walk.
pub const SKIPPED: &str = "llm_failover_skipped_total";
/// `llm_failover_exhausted_total{chain}`: a request whose every planned attempt failed over.
pub const EXHAUSTED: &str = "llm_failover_exhausted_total";
/// `llm_failover_tokens_total{provider, model, kind, caller}`: tokens the answers callers got
/// cost, by the provider that served them, its model (`tokens_model`), kind (`input`,
/// `output`, `cached_input`; `usage::Kind`) and, when the file names callers, the caller (a
/// named one, `other`; no label without a caller: `Config::team_label`). Failed attempts
/// count nothing.
pub const TOKENS: &str = "llm_failover_tokens_total";
/// `llm_failover_hedges_total{provider, outcome}`: attempts of hedged requests that raced
/// (docs/behaviour.md section 5, hedging), by how each ended: `won` (its answer went to the
/// caller), `lost` (the other's did first: reset), `failed`.
pub const HEDGES: &str = "llm_failover_hedges_total";
/// `llm_failover_breaker_state{provider}` gauge: 0 closed, 1 open, 2 half-open.
pub const BREAKER_STATE: &str = "llm_failover_breaker_state";

/// `llm_failover_health_state{provider}` gauge: the provider's state over the last 15 minutes
/// (docs/behaviour.md section 10): 0 healthy, 1 degraded, 2 failing, 3 idle.
pub const HEALTH_STATE: &str = "llm_failover_health_state";
/// `llm_failover_fleet_sync_total{result}`: the fleet's syncs with its store (docs/behaviour.md
/// section 15), by how they ended: `ok`, `unavailable`, `refused` (the store does not know the
/// domain).
pub const FLEET_SYNC: &str = "llm_failover_fleet_sync_total";
/// Every metric, for docs and tests.
pub const ALL: [&str; 9] = [
    ATTEMPTS,
    FALLBACKS,
    SKIPPED,
    TOKENS,
    EXHAUSTED,
    HEDGES,
    BREAKER_STATE,
    HEALTH_STATE,
    FLEET_SYNC,
];

/// Label names (Envoy tag names; a tag name can appear only once in a bootstrap).
pub const PROVIDER: &str = "provider";
pub const OUTCOME: &str = "outcome";
pub const FROM: &str = "from";
pub const TO: &str = "to";
pub const REASON: &str = "reason";
pub const CHAIN: &str = "chain";
pub const MODEL: &str = "model";
pub const KIND: &str = "kind";
pub const CALLER: &str = "caller";
pub const RESULT: &str = "result";

/// `skipped_total` reasons (docs/behaviour.md section 8).
pub const REASON_BREAKER_OPEN: &str = "breaker_open";
pub const REASON_DEAD: &str = "dead";
pub const REASON_MODEL: &str = "model";
pub const REASON_BUDGET: &str = "budget";

/// A label value made safe to carry in a stat name (see the module docs). Borrows when the
/// value is already safe, which every validated name is.
pub fn label_value(value: &str) -> Cow<'_, str> {
    let bad = |c: char| c == '=' || c.is_whitespace() || c.is_control();
    let safe = !value.is_empty()
        && !value.starts_with('.')
        && !value.ends_with('.')
        && !value.contains(bad);
    if safe {
        return Cow::Borrowed(value);
    }
    if value.is_empty() {
        return Cow::Borrowed("_");
    }
    let last = value.chars().count() - 1;
    Cow::Owned(
        value
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if bad(c) || (c == '.' && (i == 0 || i == last)) {
                    '_'
                } else {
                    c
                }
            })
            .collect(),
    )
}

fn name(metric: &str, labels: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(metric.len() + 48);
    out.push_str(metric);
    for (label, value) in labels {
        out.push('.');
        out.push_str(label);
        out.push('=');
        out.push_str(&label_value(value));
    }
    out
}

/// `llm_failover_fleet_sync_total.result=<result>`
pub fn fleet_sync(result: &str) -> String {
    name(FLEET_SYNC, &[(RESULT, result)])
}

/// `llm_failover_attempts_total.provider=<p>.outcome=<class>`
pub fn attempts(provider: &str, outcome: Class) -> String {
    name(
        ATTEMPTS,
        &[(PROVIDER, provider), (OUTCOME, outcome.as_str())],
    )
}

/// `llm_failover_fallbacks_total.from=<p>.to=<q>`
pub fn fallbacks(from: &str, to: &str) -> String {
    name(FALLBACKS, &[(FROM, from), (TO, to)])
}

/// `llm_failover_hedges_total.provider=<p>.outcome=<won|lost|failed>`
pub fn hedges(provider: &str, outcome: crate::hedge::Outcome) -> String {
    name(HEDGES, &[(PROVIDER, provider), (OUTCOME, outcome.as_str())])
}

/// `llm_failover_skipped_total.provider=<p>.reason=<reason>`
pub fn skipped(provider: &str, reason: &str) -> String {
    name(SKIPPED, &[(PROVIDER, provider), (REASON, reason)])
}

/// `llm_failover_tokens_total.provider=<p>.model=<m>.kind=<kind>[.caller=<c>]`
pub fn tokens(
    provider: &str,
    model: &str,
    kind: crate::usage::Kind,
    caller: Option<&str>,
) -> String {
    let labels = [(PROVIDER, provider), (MODEL, model), (KIND, kind.as_str())];
    match caller {
        None => name(TOKENS, &labels),
        Some(caller) => {
            let [p, m, k] = labels;
            name(TOKENS, &[p, m, k, (CALLER, caller)])
        }
    }
}

/// `llm_failover_exhausted_total.chain=<c>`
pub fn exhausted(chain: &str) -> String {
    name(EXHAUSTED, &[(CHAIN, chain)])
}

/// `llm_failover_breaker_state.provider=<p>`
pub fn breaker_state(provider: &str) -> String {
    name(BREAKER_STATE, &[(PROVIDER, provider)])
}

/// `llm_failover_health_state.provider=<p>`
pub fn health_state(provider: &str) -> String {
    name(HEALTH_STATE, &[(PROVIDER, provider)])
}

/// Tag of the rule that, on Envoy 1.36-1.38, takes `cluster.` off the filter's stat names (the
/// cluster name after it is taken off by Envoy's own `envoy.cluster_name` tag). Its value is
/// always empty, which Prometheus treats as no label.
pub const SCOPE: &str = "llm_failover_scope";

/// On Envoy 1.36-1.38, wasm metrics live in the stats scope of the cluster whose upstream filter
/// created the VM: `cluster.<name>.wasmcustom.<metric>...` (docs/older-envoys.md). This optional
/// prefix lets the same rules match there.
const CLUSTER_SCOPE: &str = r"(?:cluster\.[^=]*?\.)?";

/// One `stats_config.stats_tags` entry: Envoy removes the regex's first capture group from the
/// stat name and uses the second as the tag's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagRule {
    pub tag: &'static str,
    pub regex: String,
}

/// The tag extraction rules that turn the names above into labelled Prometheus metrics; the
/// CLI renders them into every bootstrap. Regexes see the full stat name (with `wasmcustom.`)
/// and use only syntax that Envoy's std::regex (ECMAScript) and RE2 both accept.
pub fn stats_tags() -> Vec<TagRule> {
    rules(ENVOY_NAMESPACE.to_string())
}

/// [`stats_tags`] for Envoy 1.36-1.38, where the metrics are `cluster.<name>.wasmcustom.*`
/// (the plain names still match): every rule takes the optional cluster prefix, and one more
/// rule ([`SCOPE`]) takes `cluster.` out of the name, so `/stats/prometheus` prints the same
/// names and labels, plus Envoy's `envoy_cluster_name` and an empty `llm_failover_scope`.
/// Istio names a cluster's stats `<name>;` and its `cluster_name` tag takes `.<name>;` out:
/// there the rule also takes the `.` after the `;` (`cluster.<name>;.wasmcustom...`).
pub fn cluster_scoped_stats_tags() -> Vec<TagRule> {
    let ns = ENVOY_NAMESPACE;
    let mut out = vec![TagRule {
        tag: SCOPE,
        regex: format!(r"^(cluster\.(?:[^=;]*;\.)?)()(?:[^=;]*?\.)?{ns}\.llm_failover_"),
    }];
    out.extend(rules(format!("{CLUSTER_SCOPE}{ns}")));
    out
}

/// The label rules, for stat names that start with `ns` (a regex).
fn rules(ns: String) -> Vec<TagRule> {
    let rule = |tag, regex: String| TagRule { tag, regex };
    // The token metric's optional last label.
    let caller = format!(r"(?:\.{CALLER}=[^=]+)?");
    vec![
        // Provider: the first label of five metrics, followed by at most one fixed-word label,
        // or by a model, a kind and maybe a caller.
        rule(
            PROVIDER,
            format!(
                r"^{ns}\.(?:{ATTEMPTS}|{SKIPPED}|{BREAKER_STATE}|{HEALTH_STATE}|{TOKENS}|{HEDGES})(\.{PROVIDER}=([^=]+?))(?:\.(?:{OUTCOME}|{REASON})=[a-z_]+|\.{MODEL}=[^=]+\.{KIND}=[a-z_]+{caller})?$"
            ),
        ),
        rule(
            MODEL,
            format!(
                r"^{ns}\.{TOKENS}\.{PROVIDER}=[^=]+(\.{MODEL}=([^=]+))\.{KIND}=[a-z_]+{caller}$"
            ),
        ),
        rule(
            KIND,
            format!(
                r"^{ns}\.{TOKENS}\.{PROVIDER}=[^=]+\.{MODEL}=[^=]+(\.{KIND}=([a-z_]+)){caller}$"
            ),
        ),
        rule(
            CALLER,
            format!(
                r"^{ns}\.{TOKENS}\.{PROVIDER}=[^=]+\.{MODEL}=[^=]+\.{KIND}=[a-z_]+(\.{CALLER}=([^=]+))$"
            ),
        ),
        rule(
            OUTCOME,
            format!(r"^{ns}\.(?:{ATTEMPTS}|{HEDGES})\.{PROVIDER}=[^=]+(\.{OUTCOME}=([a-z_]+))$"),
        ),
        rule(
            REASON,
            format!(r"^{ns}\.{SKIPPED}\.{PROVIDER}=[^=]+(\.{REASON}=([a-z_]+))$"),
        ),
        rule(
            FROM,
            format!(r"^{ns}\.{FALLBACKS}(\.{FROM}=([^=]+))\.{TO}=[^=]+$"),
        ),
        rule(
            TO,
            format!(r"^{ns}\.{FALLBACKS}\.{FROM}=[^=]+(\.{TO}=([^=]+))$"),
        ),
        rule(CHAIN, format!(r"^{ns}\.{EXHAUSTED}(\.{CHAIN}=([^=]+))$")),
        rule(
            RESULT,
            format!(r"^{ns}\.{FLEET_SYNC}(\.{RESULT}=([a-z_]+))$"),
        ),
    ]
}

/// How the regexes of [`stats_tags`] split a stat name (without `wasmcustom.`): the metric and
/// its labels in order; `None` for a name that is not ours. Tests use it to check that every
/// name round-trips; it follows the same rule as the regexes (a label starts at `.<word>=`, and
/// a value runs to the dot before the next `=`).
pub fn parse(stat: &str) -> Option<(&str, Vec<(&str, &str)>)> {
    let metric = ALL.into_iter().find(|m| {
        stat.strip_prefix(m)
            .is_some_and(|rest| rest.starts_with('.'))
    })?;
    let mut rest = &stat[metric.len()..];
    let mut labels = Vec::new();
    while let Some(after_dot) = rest.strip_prefix('.') {
        let eq = after_dot.find('=')?;
        let label = &after_dot[..eq];
        let value_and_more = &after_dot[eq + 1..];
        // The value ends at the last dot before the next '=' (or at the end).
        let end = match value_and_more.find('=') {
            Some(next_eq) => value_and_more[..next_eq].rfind('.')?,
            None => value_and_more.len(),
        };
        labels.push((label, &value_and_more[..end]));
        rest = &value_and_more[end..];
    }
    rest.is_empty().then_some((metric, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_scheme() {
        assert_eq!(
            attempts("primary", Class::ServerError),
            "llm_failover_attempts_total.provider=primary.outcome=server_error"
        );
        assert_eq!(
            attempts("primary", Class::Ok),
            "llm_failover_attempts_total.provider=primary.outcome=ok"
        );
        assert_eq!(
            fallbacks("primary", "secondary"),
            "llm_failover_fallbacks_total.from=primary.to=secondary"
        );
        assert_eq!(
            skipped("primary", REASON_BREAKER_OPEN),
            "llm_failover_skipped_total.provider=primary.reason=breaker_open"
        );
        assert_eq!(
            exhausted("default"),
            "llm_failover_exhausted_total.chain=default"
        );
        assert_eq!(
            breaker_state("primary"),
            "llm_failover_breaker_state.provider=primary"
        );
        assert_eq!(
            tokens("primary", "gpt-4.1", crate::usage::Kind::CachedInput, None),
            "llm_failover_tokens_total.provider=primary.model=gpt-4.1.kind=cached_input"
        );
        assert_eq!(
            tokens("p", "m", crate::usage::Kind::Output, Some("team-a")),
            "llm_failover_tokens_total.provider=p.model=m.kind=output.caller=team-a"
        );
        assert_eq!(
            parse(&tokens("p", "m", crate::usage::Kind::Input, Some("a.b@c"))),
            Some((
                TOKENS,
                vec![
                    ("provider", "p"),
                    ("model", "m"),
                    ("kind", "input"),
                    ("caller", "a.b@c")
                ]
            ))
        );
        assert_eq!(
            parse(&tokens(
                "eu.a",
                "claude-3.5.model",
                crate::usage::Kind::Input,
                None
            )),
            Some((
                TOKENS,
                vec![
                    ("provider", "eu.a"),
                    ("model", "claude-3.5.model"),
                    ("kind", "input")
                ]
            ))
        );
    }

    #[test]
    fn dotted_names_keep_their_dots_and_split_in_one_way_only() {
        let n = fallbacks("eu.to.x", "us.to");
        assert_eq!(n, "llm_failover_fallbacks_total.from=eu.to.x.to=us.to");
        assert_eq!(
            parse(&n),
            Some((FALLBACKS, vec![("from", "eu.to.x"), ("to", "us.to")]))
        );
        let n = attempts("a.outcome.b", Class::Timeout);
        assert_eq!(
            parse(&n),
            Some((
                ATTEMPTS,
                vec![("provider", "a.outcome.b"), ("outcome", "timeout")]
            ))
        );
    }

    #[test]
    fn unsafe_values_are_escaped_so_names_never_mis_split() {
        assert_eq!(label_value("primary"), "primary");
        assert!(matches!(label_value("openai.eu-1_x"), Cow::Borrowed(_)));
        assert_eq!(label_value("a=b"), "a_b");
        assert_eq!(label_value("a b\n"), "a_b_");
        assert_eq!(label_value(".a."), "_a_");
        assert_eq!(label_value(""), "_");
        assert_eq!(label_value("é=ü"), "é_ü");
        let n = fallbacks("x=y", "z");
        assert_eq!(
            parse(&n),
            Some((FALLBACKS, vec![("from", "x_y"), ("to", "z")]))
        );
    }

    #[test]
    fn every_class_and_reason_is_a_fixed_word_the_regexes_accept() {
        let word =
            |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        for class in Class::ALL {
            assert!(word(class.as_str()), "{}", class.as_str());
        }
        for reason in [
            REASON_BREAKER_OPEN,
            REASON_DEAD,
            REASON_MODEL,
            REASON_BUDGET,
        ] {
            assert!(word(reason));
        }
        for (i, reason) in crate::plan::SkipReason::ALL.into_iter().enumerate() {
            assert!(word(reason.as_str()));
            assert_eq!(reason.index(), i, "ALL is in index order");
        }
    }

    #[test]
    fn one_rule_per_label_and_each_names_its_metric() {
        let rules = stats_tags();
        let mut tags: Vec<&str> = rules.iter().map(|r| r.tag).collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), rules.len(), "Envoy refuses a tag name twice");
        assert_eq!(
            tags,
            vec![CALLER, CHAIN, FROM, KIND, MODEL, OUTCOME, PROVIDER, REASON, RESULT, TO],
            "one rule per label"
        );
        for r in &rules {
            assert!(r.regex.starts_with(r"^wasmcustom\."), "{}", r.regex);
            assert!(r.regex.contains("llm_failover_"), "{}", r.regex);
            assert!(r.regex.ends_with('$'), "{}", r.regex);
            // Exactly two capture groups: the part removed from the name, then the value.
            assert_eq!(
                r.regex.matches('(').count() - r.regex.matches("(?:").count(),
                2,
                "{}",
                r.regex
            );
        }
    }

    #[test]
    fn cluster_scoped_rules_add_the_scope_rule_and_the_optional_prefix() {
        let plain = stats_tags();
        let scoped = cluster_scoped_stats_tags();
        assert_eq!(scoped.len(), plain.len() + 1);
        assert_eq!(scoped[0].tag, SCOPE);
        for (p, s) in plain.iter().zip(&scoped[1..]) {
            assert_eq!(p.tag, s.tag);
            assert_eq!(
                s.regex,
                p.regex.replacen('^', &format!("^{CLUSTER_SCOPE}"), 1)
            );
        }
    }

    #[test]
    fn parse_refuses_what_is_not_ours() {
        assert_eq!(parse("cluster.primary.upstream_rq"), None);
        assert_eq!(parse("llm_failover_attempts_totalx.provider=a"), None);
        assert_eq!(parse("llm_failover_attempts_total.provider"), None);
    }
}
