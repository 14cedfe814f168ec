//! Grouping clusters: how requests fail over on Envoy 1.36-1.38 (docs/older-envoys.md).
//!
//! Those Envoys resolve a route's cluster once per request (no `refresh_cluster_on_retry`), so
//! the order of providers is fixed when the request is routed. The renderer writes one
//! aggregate cluster per provider order the planner can produce, its sub-clusters the
//! providers' clusters in that order; the route's retry priority (`previous_priorities`) sends
//! attempt k to the k-th. The downstream filter names the order's cluster in filter state
//! ([`route_cluster`], `wire::GROUP_PROPERTY`) and the route's matcher picks it.
//!
//! # Which orders exist, and how many
//! The planner keeps chain order, drops entries (model, caller, open breaker, dead mark) and
//! stops at `max_attempts`; with `try_last` the dropped-for-health entries follow, again in chain
//! order. So a plan is a sequence of distinct chain entries of length 1..=max_attempts with no
//! descent in chain order (at most one with `try_last`), a group's members standing at one
//! position in any order among themselves (`Walk`), and every such sequence can happen
//! (make the others not serve the model, and the `try_last` tail open). One-attempt plans go
//! straight to the provider's cluster; every longer order is a group. A chain of n entries
//! makes, without groups, sum(C(n, k), k = 2..=max_attempts) groups (n = 3, 3 attempts: 4; with
//! `try_last`: 11; n = 5, 3 attempts: 20), deduplicated across chains; a group's members add
//! their orders among themselves. Above [`MAX_GROUPS`] rendering is refused.

use crate::config::{Chain, ChainEntry, Config, ConfigError, ProviderId};
use crate::plan::Slot;
use crate::wire;
use std::collections::BTreeSet;

/// Most grouping clusters the renderer writes. Each is a cluster with its own copy of the
/// upstream filter's configuration in every worker: past this, shorten chains, lower
/// `max_attempts`, or drop `try_last`.
pub const MAX_GROUPS: usize = 100;

/// One grouping cluster: its name and its sub-clusters, in attempt order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub clusters: Vec<String>,
}

/// The grouping cluster's name for providers' clusters in this order.
pub fn group_name<'a>(clusters: impl IntoIterator<Item = &'a str>) -> String {
    let mut name = String::with_capacity(64);
    name.push_str(wire::GROUP_CLUSTER_PREFIX);
    for (i, c) in clusters.into_iter().enumerate() {
        if i > 0 {
            name.push(wire::GROUP_CLUSTER_SEPARATOR);
        }
        name.push_str(c);
    }
    name
}

/// The cluster the route must send a request planned as `slots` (in `chain`) to: the
/// provider's own cluster for one attempt, else the grouping cluster of the order.
pub fn route_cluster(config: &Config, chain: &Chain, slots: &[Slot]) -> String {
    let cluster = |s: &Slot| {
        chain
            .entry(s.entry)
            .and_then(|e| config.provider(e.provider))
            .map_or("", |p| p.cluster.as_str())
    };
    match slots {
        [one] => cluster(one).to_string(),
        _ => group_name(slots.iter().map(cluster)),
    }
}

/// Provider orders (two providers or more) the planner can produce for `chain`, added to
/// `out`; stops once `out` holds more than `limit`.
fn chain_orders(chain: &Chain, limit: usize, out: &mut BTreeSet<Vec<ProviderId>>) {
    let entries = chain.main_entries();
    let max_len = chain.max_attempts.min(entries.len());
    let descents = usize::from(chain.try_last);
    let mut seq: Vec<usize> = Vec::with_capacity(max_len);
    let mut used = vec![false; entries.len()];
    // A group's members stand at one position: the planner tries them in any order.
    let positions: Vec<usize> = (chain.main_ids())
        .map(|(id, _)| chain.position(id))
        .collect();
    let walk_in = Walk {
        entries,
        positions: &positions,
        max_len,
    };
    walk_in.walk(descents, &mut seq, &mut used, limit, out);
}

/// What the order walk reads: the chain's own entries, where each stands, the longest order.
struct Walk<'a> {
    entries: &'a [ChainEntry],
    positions: &'a [usize],
    max_len: usize,
}

impl Walk<'_> {
    fn walk(
        &self,
        descents_left: usize,
        seq: &mut Vec<usize>,
        used: &mut [bool],
        limit: usize,
        out: &mut BTreeSet<Vec<ProviderId>>,
    ) {
        let entries = self.entries;
        if seq.len() >= 2 {
            out.insert(
                seq.iter()
                    .filter_map(|&e| entries.get(e).map(|x| x.provider))
                    .collect(),
            );
        }
        if seq.len() == self.max_len || out.len() > limit {
            return;
        }
        let position = |i: usize| self.positions.get(i).copied().unwrap_or(i);
        for next in 0..entries.len() {
            if used.get(next).copied().unwrap_or(true) {
                continue;
            }
            let descent = seq
                .last()
                .is_some_and(|&last| position(next) < position(last));
            if descent && descents_left == 0 {
                continue;
            }
            set(used, next, true);
            seq.push(next);
            self.walk(descents_left - usize::from(descent), seq, used, limit, out);
            seq.pop();
            set(used, next, false);
            if out.len() > limit {
                return;
            }
        }
    }
}

fn set(used: &mut [bool], i: usize, value: bool) {
    if let Some(u) = used.get_mut(i) {
        *u = value;
    }
}

fn provider_name(config: &Config, p: ProviderId) -> &str {
    config.provider(p).map_or("", |p| p.name.as_str())
}

/// Every grouping cluster `config` needs, or why grouping mode cannot serve it (one problem
/// per error, naming the field).
pub fn groups(config: &Config) -> Result<Vec<Group>, Vec<ConfigError>> {
    let mut errors = Vec::new();
    // A host's metadata names one provider: two providers on one cluster cannot be told apart.
    for (i, p) in config.providers.iter().enumerate() {
        if let Some(first) = config
            .providers
            .iter()
            .take(i)
            .find(|o| o.cluster == p.cluster)
        {
            errors.push(ConfigError {
                field: format!("providers[{i}].cluster"),
                problem: format!(
                    "cluster {:?} is also provider {:?}'s: on Envoy before 1.39 (grouping clusters) \
                     each provider needs its own cluster, because the upstream filter tells \
                     providers apart by their hosts",
                    p.cluster, first.name
                ),
            });
        }
    }
    for (c, chain) in config.chains.iter().enumerate() {
        if chain.has_lists() {
            // Switching lists rewrites the next slots after routing; the group is fixed by then.
            errors.push(ConfigError {
                field: format!("chains[{c}]"),
                problem: "alternative lists (context_window, content_policy) need Envoy 1.39 or \
                          later: on older Envoys the providers of a request are fixed when it is \
                          routed — remove the lists (those classes then fall over to the next \
                          provider or go back to the caller)"
                    .to_string(),
            });
        }
        if chain.retry_in_place.is_some() {
            // A retry in place inserts the same provider again after routing: same reason.
            errors.push(ConfigError {
                field: format!("chains[{c}].retry_in_place"),
                problem: "in-place retry needs Envoy 1.39 or later: on older Envoys the \
                          providers of a request are fixed when it is routed — remove it (a \
                          failed attempt then falls over to the next provider at once)"
                    .to_string(),
            });
        }
        if chain.hedge_after_ms.is_some() {
            // Hedging is carried by router mode's composite clusters (docs/internals.md,
            // hedging); grouping mode's attempts never reach them.
            errors.push(ConfigError {
                field: format!("chains[{c}].hedge_after"),
                problem: "hedging needs Envoy 1.39 or later (router mode, where the hedge \
                          reaches the next provider through a composite cluster; grouping \
                          mode does not carry it) — remove it (a slow provider is then waited \
                          for until first_token or the attempt timeout)"
                    .to_string(),
            });
        }
        let main = chain.main_entries();
        if chain.max_attempts.min(main.len()) < 2 {
            continue;
        }
        for (i, e) in main.iter().enumerate() {
            if main.iter().take(i).any(|o| o.provider == e.provider) {
                errors.push(ConfigError {
                    field: format!("chains[{c}].{}", chain.entry_field(i)),
                    problem: format!(
                        "provider {:?} is listed twice: on Envoy before 1.39 one request cannot \
                         reach the same provider twice (a grouping cluster lists each cluster \
                         once) — keep one entry, or use max_attempts: 1",
                        provider_name(config, e.provider)
                    ),
                });
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut orders = BTreeSet::new();
    for (c, chain) in config.chains.iter().enumerate() {
        chain_orders(chain, MAX_GROUPS, &mut orders);
        if orders.len() > MAX_GROUPS {
            return Err(vec![ConfigError {
                field: format!("chains[{c}]"),
                problem: format!(
                    "needs more than {MAX_GROUPS} grouping clusters with the chains before it \
                     (Envoy before 1.39 needs one per provider order a request can take) — \
                     lower max_attempts, shorten the chains, or drop try_last"
                ),
            }]);
        }
    }
    Ok(orders
        .into_iter()
        .map(|order| {
            let clusters: Vec<String> = order
                .iter()
                .filter_map(|&p| config.provider(p).map(|p| p.cluster.clone()))
                .collect();
            Group {
                name: group_name(clusters.iter().map(String::as_str)),
                clusters,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Admission;
    use crate::plan::{plan_or_refuse, Gatekeeper, RequestFacts};

    fn config(chains: &str) -> Config {
        let json = format!(
            r#"{{"providers": [{{"name": "a"}}, {{"name": "b"}}, {{"name": "c"}},
                {{"name": "d", "models": ["gpt-*"]}}, {{"name": "e"}}],
                "chains": {chains}}}"#
        );
        Config::from_json(json.as_bytes(), &|_| None).unwrap()
    }

    /// Health double: provider i's gate is bit i of `open` (open breaker) or available.
    struct Gates(u32);

    /// [`Gates`] drawing `.1` for group picks.
    struct Drawn(u32, std::cell::Cell<u64>);

    impl Gatekeeper for Drawn {
        fn gate(&self, provider: ProviderId, model: &str) -> Admission {
            Gates(self.0).gate(provider, model)
        }
        fn draw(&self) -> u64 {
            let mut s = self.1.get();
            let r = crate::pick::next(&mut s);
            self.1.set(s);
            r
        }
    }

    #[test]
    fn a_group_of_three_then_one_provider_makes_twenty_one_orders() {
        let c = config(r#"[{"name": "x", "providers": [{"group": ["a", "b", "c"]}, "d"]}]"#);
        // 6 + 3 pairs, 6 + 6 triples: the members in any order, d only last.
        assert_eq!(groups(&c).unwrap().len(), 21);
    }

    #[test]
    fn a_group_s_members_in_any_order_route_to_rendered_clusters() {
        for try_last in [false, true] {
            let c = config(&format!(
                r#"[{{"name": "x", "providers": ["a", {{"group": ["b", "c", "e"], "weights": [2, 1, 1]}}],
                     "max_attempts": 3, "try_last": {try_last}}}]"#
            ));
            let rendered: Vec<String> = groups(&c).unwrap().into_iter().map(|g| g.name).collect();
            // b, c, e in any order after a: 3 + 6 pairs, 6 + 6 triples (a first or not).
            let health = Drawn(0, std::cell::Cell::new(1));
            let mut seen = std::collections::BTreeSet::new();
            for open in 0..(1u32 << 5) {
                let health = Drawn(open, std::cell::Cell::new(health.draw()));
                for _ in 0..20 {
                    let facts = RequestFacts {
                        model: "m",
                        ..Default::default()
                    };
                    let Ok(plan) = plan_or_refuse(&c, &facts, &health) else {
                        continue;
                    };
                    let chain = c.chain(plan.chain).unwrap();
                    if plan.slots.len() > 1 {
                        let target = route_cluster(&c, chain, &plan.slots);
                        assert!(rendered.contains(&target), "{target} not rendered");
                        seen.insert(target);
                    }
                }
            }
            assert!(seen.contains("llm_failover~e~c~b"), "{seen:?}");
            assert!(seen.len() >= 12, "{seen:?}");
        }
    }

    impl Gatekeeper for Gates {
        fn gate(&self, provider: ProviderId, _model: &str) -> Admission {
            if self.0 & (1 << provider.index()) != 0 {
                Admission::BreakerOpen
            } else {
                Admission::Available {
                    pristine: true,
                    probe: false,
                }
            }
        }
    }

    fn names(groups: &[Group]) -> Vec<String> {
        groups.iter().map(|g| g.name.clone()).collect()
    }

    #[test]
    fn a_three_provider_chain_makes_four_groups_and_eleven_with_try_last() {
        let c = config(r#"[{"name": "x", "providers": ["a", "b", "c"]}]"#);
        let g = groups(&c).unwrap();
        assert_eq!(
            names(&g),
            vec![
                "llm_failover~a~b",
                "llm_failover~a~b~c",
                "llm_failover~a~c",
                "llm_failover~b~c"
            ]
        );
        assert_eq!(g[1].clusters, vec!["a", "b", "c"]);
        let c = config(r#"[{"name": "x", "providers": ["a", "b", "c"], "try_last": true}]"#);
        let g = groups(&c).unwrap();
        assert_eq!(g.len(), 11);
        assert!(!names(&g).contains(&"llm_failover~c~b~a".to_string()));
        let c = config(r#"[{"name": "x", "providers": ["a", "b", "c", "d", "e"]}]"#);
        assert_eq!(groups(&c).unwrap().len(), 10 + 10);
    }

    #[test]
    fn orders_are_shared_across_chains_and_single_attempts_need_none() {
        let c = config(
            r#"[{"name": "x", "models": ["gpt-*"], "providers": ["a", "b"]},
                {"name": "y", "providers": ["a", "b", "c"], "max_attempts": 2},
                {"name": "z", "providers": ["c", "a"], "max_attempts": 1}]"#,
        );
        let g = groups(&c).unwrap();
        assert_eq!(
            names(&g),
            vec!["llm_failover~a~b", "llm_failover~a~c", "llm_failover~b~c"]
        );
    }

    #[test]
    fn every_plan_the_planner_makes_routes_to_a_rendered_cluster() {
        // Every health combination and model, with and without try_last and the opt-out.
        for try_last in [false, true] {
            let c = config(&format!(
                r#"[{{"name": "x", "providers": ["a", "b", {{"provider": "d", "model": "gpt-4o"}}, "c", "e"],
                     "max_attempts": 3, "try_last": {try_last}}}]"#
            ));
            let rendered: Vec<String> = groups(&c).unwrap().into_iter().map(|g| g.name).collect();
            let mut seen = 0;
            for open in 0..(1u32 << 5) {
                for model in ["gpt-4o", "claude"] {
                    for no_fallback in [false, true] {
                        let facts = RequestFacts {
                            model,
                            no_fallback,
                            ..Default::default()
                        };
                        let Ok(plan) = plan_or_refuse(&c, &facts, &Gates(open)) else {
                            continue;
                        };
                        let chain = c.chain(plan.chain).unwrap();
                        let target = route_cluster(&c, chain, &plan.slots);
                        if plan.slots.len() == 1 {
                            let p = chain.entry(plan.slots[0].entry).unwrap().provider;
                            assert_eq!(target, c.provider(p).unwrap().cluster);
                        } else {
                            assert!(rendered.contains(&target), "{target} not rendered");
                            seen += 1;
                        }
                    }
                }
            }
            assert!(seen > 0);
        }
    }

    #[test]
    fn too_many_orders_are_refused_naming_the_limit() {
        let c = config(
            r#"[{"name": "x", "providers": ["a", "b", "c", "d", "e"], "max_attempts": 5, "try_last": true}]"#,
        );
        let e = groups(&c).unwrap_err();
        assert_eq!(e[0].field, "chains[0]");
        assert!(e[0].problem.contains("more than 100 grouping clusters"));
    }

    #[test]
    fn alternative_lists_are_refused_and_only_main_entries_make_orders() {
        let c = config(r#"[{"name": "x", "providers": ["a", "b"], "context_window": ["c"]}]"#);
        let e = groups(&c).unwrap_err();
        assert_eq!(e[0].field, "chains[0]");
        assert!(
            e[0].problem.contains("alternative lists"),
            "{}",
            e[0].problem
        );
    }

    #[test]
    fn shared_clusters_and_repeated_providers_are_refused() {
        let json = r#"{"providers": [{"name": "a"}, {"name": "b", "cluster": "a"}],
                       "chains": [{"name": "x", "providers": ["a", "b", {"provider": "a", "model": "m"}]}]}"#;
        let c = Config::from_json(json.as_bytes(), &|_| None).unwrap();
        let e = groups(&c).unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["providers[1].cluster", "chains[0].providers[2]"]
        );
        // One attempt per request: a repeat can never be reached twice.
        let json = r#"{"providers": [{"name": "a"}],
                       "chains": [{"name": "x", "max_attempts": 1, "providers": ["a", {"provider": "a", "model": "m"}]}]}"#;
        let c = Config::from_json(json.as_bytes(), &|_| None).unwrap();
        assert_eq!(groups(&c).unwrap(), vec![]);
    }
}
