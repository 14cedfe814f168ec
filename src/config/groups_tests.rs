//! Chains with groups of equal entries: what loads, and what is refused naming the field.

use super::*;

fn load(chain_entries: &str) -> Result<Config, Vec<ConfigError>> {
    let json = format!(
        r#"{{"providers":[{{"name":"a"}},{{"name":"b"}},{{"name":"c"}},{{"name":"d"}}],
        "chains":[{{"name":"x","providers":{chain_entries}}}]}}"#
    );
    Config::from_json(json.as_bytes(), &|_| None)
}

fn problems(chain_entries: &str) -> Vec<(String, String)> {
    let errors = load(chain_entries).expect_err("refused");
    errors.into_iter().map(|e| (e.field, e.problem)).collect()
}

#[test]
fn a_group_flattens_into_consecutive_entries_with_its_weights() {
    let c =
        load(r#"["a",{"group":["b",{"provider":"c","model":"m2"}],"weights":[3,1]},"d"]"#).unwrap();
    let chain = &c.chains[0];
    assert_eq!(chain.main_len, 4);
    assert_eq!(
        chain.groups,
        vec![EntryGroup {
            first: 1,
            weights: vec![3, 1],
            policy: GroupPolicy::Weighted
        }]
    );
    assert_eq!(chain.entries[2].model.as_deref(), Some("m2"));
    let id = |i: usize| EntryId::new(i).unwrap();
    assert_eq!(
        (0..4).map(|i| chain.position(id(i))).collect::<Vec<_>>(),
        vec![0, 1, 1, 3]
    );
    assert_eq!(percent(chain.groups[0].share_tenths(0)), "75.0");
    assert_eq!(percent(chain.groups[0].share_tenths(1)), "25.0");
    // No weights: equal; least_busy.
    let c = load(r#"[{"group":["a","b","c"],"policy":"least_busy"}]"#).unwrap();
    assert_eq!(c.chains[0].groups[0].weights, vec![1, 1, 1]);
    assert_eq!(c.chains[0].groups[0].policy, GroupPolicy::LeastBusy);
}

#[test]
fn every_group_mistake_is_refused_naming_its_field_and_the_fix() {
    let cases: &[(&str, &str, &str)] = &[
        (
            r#"[{"group":["a"]}]"#,
            "chains[0].providers[0].group",
            "a group of one member",
        ),
        (
            r#"[{"group":["a","b"],"weights":[1,2,3]}]"#,
            "chains[0].providers[0].weights",
            "3 weights for 2 members: give one weight per member",
        ),
        (
            r#"[{"group":["a","b"],"weights":[1,0]}]"#,
            "chains[0].providers[0].weights[1]",
            "a weight of 0 never picks the member",
        ),
        (
            r#"["a",{"group":["b","a"]}]"#,
            "chains[0].providers[1].group[1]",
            "appears twice in this chain (group members included)",
        ),
        (
            r#"[{"group":["a","b"],"policy":"fastest"}]"#,
            "chains[0].providers[0].policy",
            "\"fastest\" is not a policy: use weighted or least_busy",
        ),
        (
            r#"[{"group":["a","b"],"policy":"least_busy","weights":[1,2]}]"#,
            "chains[0].providers[0].weights",
            "least_busy picks by requests in flight",
        ),
        (
            r#"[{"group":["a",{"group":["b","c"]}]}]"#,
            "chains[0].providers[0].group[1]",
            "groups do not nest",
        ),
        (
            r#"[{"group":["a","b"],"provider":"c"}]"#,
            "chains[0].providers[0]",
            "a group takes no provider",
        ),
        (
            r#"[{"provider":"a","weights":[1]}]"#,
            "chains[0].providers[0]",
            "weights and policy are a group's",
        ),
        (
            r#"[{"model":"m"}]"#,
            "chains[0].providers[0]",
            "missing field `provider`",
        ),
        (
            r#"[{"group":["a","nope"]}]"#,
            "chains[0].providers[0].group[1]",
            "unknown provider \"nope\"",
        ),
    ];
    for (entries, field, problem) in cases {
        let found = problems(entries);
        assert!(
            found.iter().any(|(f, p)| f == field && p.contains(problem)),
            "{entries}: {found:?}"
        );
    }
}

#[test]
fn a_group_in_an_alternative_list_is_refused() {
    let json = r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"c"}],
        "chains":[{"name":"x","providers":["a"],"context_window":[{"group":["b","c"]}]}]}"#;
    let errors = Config::from_json(json.as_bytes(), &|_| None).unwrap_err();
    assert_eq!(errors[0].field, "chains[0].context_window[0].group");
}

#[test]
fn a_chain_too_long_is_named_once_and_groups_count_their_members() {
    let entries = |provider: &str, n: usize| {
        (0..n)
            .map(|i| format!(r#"{{"provider":"{provider}","model":"m{i}"}}"#))
            .collect::<Vec<_>>()
            .join(",")
    };
    let too_long = |said: &[(String, String)]| {
        said.iter()
            .filter(|(_, p)| p.starts_with("at most 16 providers per chain"))
            .count()
    };
    let said = problems(&format!("[{}]", entries("a", 17)));
    assert_eq!(too_long(&said), 1, "{said:?}");
    // Ten positions, but a group of eight members makes seventeen entries.
    let grouped = format!("[{{\"group\":[{}]}},{}]", entries("b", 8), entries("a", 9));
    let said = problems(&grouped);
    assert_eq!(too_long(&said), 1, "{said:?}");
    assert!(said[0].1.contains("group members counted"), "{said:?}");
}
