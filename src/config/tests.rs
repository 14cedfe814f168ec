//! Unit tests of the configuration (they also run compiled to wasm).

use super::*;
use crate::classify::Class;

fn no_env(_: &str) -> Option<String> {
    None
}

fn load(json: &str) -> Result<Config, Vec<ConfigError>> {
    Config::from_json(json.as_bytes(), &no_env)
}

fn errors_of(json: &str) -> Vec<String> {
    load(json)
        .expect_err("config should be refused")
        .iter()
        .map(|e| e.to_string())
        .collect()
}

const MINIMAL: &str = r#"{"providers":[{"name":"a"},{"name":"b","models":["gpt-*"]}],
    "chains":[{"name":"main","providers":["a","b"]}]}"#;

#[test]
fn minimal_config_gets_the_spec_defaults() {
    let c = load(MINIMAL).unwrap();
    assert_eq!(c.role, Role::Downstream);
    assert_eq!(c.chains[0].max_attempts, 3);
    assert_eq!(
        c.breaker,
        BreakerPolicy {
            failures: 10,
            window_ms: 30_000,
            cooldown_ms: 60_000,
            max_cooldown_ms: 300_000,
            fleet_failures: 0,
            fleet_window_ms: 60_000
        }
    );
    assert_eq!(c.dead_marks.model_not_found_ms, 6 * 3_600_000);
    assert_eq!(c.dead_marks.setup_fault_ms, 3_600_000);
    assert_eq!(c.timeouts.attempt_ms, 120_000);
    assert_eq!(c.timeouts.total_time_ms, 300_000);
    assert_eq!(c.opt_out_header, "x-llm-fallback");
    assert_eq!(c.providers[0].cluster, "a");
    assert!(c.chains[0]
        .fallback_on
        .falls_over(Class::ServerError, Some(500)));
    assert!(!c.chains[0]
        .fallback_on
        .falls_over(Class::SetupFault, Some(401)));
}

#[test]
fn unknown_provider_in_chain_is_named() {
    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a","azur"]}]}"#,
    );
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("chains[0].providers[1]: unknown provider \"azur\""),
        "{e:?}"
    );
}

#[test]
fn duplicate_provider_and_model_in_a_chain_is_refused_but_two_models_are_fine() {
    let e =
        errors_of(r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a","a"]}]}"#);
    assert!(
        e[0].starts_with("chains[0].providers[1]:") && e[0].contains("twice"),
        "{e:?}"
    );
    let ok = load(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":[{"provider":"a","model":"x"},{"provider":"a","model":"y"}]}]}"#,
    );
    assert_eq!(ok.unwrap().chains[0].entries.len(), 2);
}

#[test]
fn empty_chain_and_zero_attempts_are_refused() {
    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":[],"max_attempts":0}]}"#,
    );
    assert!(
        e.iter()
            .any(|m| m.starts_with("chains[0].providers: empty chain")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|m| m.starts_with("chains[0].max_attempts:")),
        "{e:?}"
    );
}

#[test]
fn bad_durations_name_the_field() {
    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}],"breaker":{"window":"30 parsecs"}}"#,
    );
    assert!(e[0].starts_with("breaker.window:"), "{e:?}");
    let ok = load(r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}],"breaker":{"window":"10s","cooldown":"5s","max_cooldown":"2m","failures":3}}"#).unwrap();
    assert_eq!(
        ok.breaker,
        BreakerPolicy {
            failures: 3,
            window_ms: 10_000,
            cooldown_ms: 5_000,
            max_cooldown_ms: 120_000,
            fleet_failures: 0,
            fleet_window_ms: 60_000
        }
    );
}

#[test]
fn failure_classes_and_statuses_are_checked() {
    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"],"fallback_on":["server_eror",700,400,"invalid_request","client_disconnect"]}]}"#,
    );
    assert_eq!(e.len(), 5, "{e:?}");
    assert!(
        e[0].starts_with("chains[0].fallback_on[0]: unknown failure class"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("chains[0].fallback_on[1]: status 700 is outside 100-599"),
        "{e:?}"
    );
    assert!(e[2].starts_with("chains[0].fallback_on[2]:"), "{e:?}");
    let ok = load(r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"],"fallback_on":[402,429,"5xx"]}]}"#).unwrap();
    let set = &ok.chains[0].fallback_on;
    assert!(set.falls_over(Class::SetupFault, Some(402)));
    assert!(!set.falls_over(Class::SetupFault, Some(401)));
    assert!(set.falls_over(Class::Overloaded, Some(503)));
    assert!(!set.falls_over(Class::Timeout, None));
}

#[test]
fn alternative_lists_follow_the_chain_entries_and_turn_their_class_on() {
    let c = load(
        r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"big"}],
        "chains":[{"name":"c","providers":["a","b"],
          "context_window":[{"provider":"big","model":"long"},"a"],
          "content_policy":["b"]}]}"#,
    )
    .unwrap();
    let chain = &c.chains[0];
    assert_eq!(chain.main_len, 2);
    assert_eq!(chain.main_entries().len(), 2);
    let ids = |list: &[crate::ids::EntryId]| list.iter().map(|e| e.index()).collect::<Vec<_>>();
    assert_eq!(ids(&chain.context_window), vec![2, 3]);
    assert_eq!(ids(&chain.content_policy), vec![4]);
    assert_eq!(chain.entries[2].model.as_deref(), Some("long"));
    assert_eq!(ids(chain.list(AltList::ContentPolicy)), &[4]);
    assert!(chain.has_lists());
    assert!(chain
        .fallback_on
        .falls_over(Class::ContentFiltered, Some(400)));
    assert!(chain
        .fallback_on
        .falls_over(Class::ContextWindowExceeded, Some(400)));
    // Without lists both go back to the caller.
    let plain = load(MINIMAL).unwrap();
    assert!(!plain.chains[0].has_lists());
    assert!(!plain.chains[0]
        .fallback_on
        .falls_over(Class::ContextWindowExceeded, Some(400)));
    assert!(!plain.chains[0]
        .fallback_on
        .falls_over(Class::ContentFiltered, Some(400)));
    assert_eq!(plain.dead_marks.quota_exhausted_ms, 3_600_000);
    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"],
        "context_window":["nope","a","a"]}]}"#,
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("chains[0].context_window[0]: unknown provider"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("chains[0].context_window[2]:") && e[1].contains("twice in this list"),
        "{e:?}"
    );
}

#[test]
fn unknown_fields_are_refused_with_their_path() {
    let e = errors_of(
        r#"{"providers":[{"name":"a","modles":["x"]}],"chains":[{"name":"c","providers":["a"]}]}"#,
    );
    assert!(
        e[0].starts_with("providers[0].modles: unknown field"),
        "{e:?}"
    );
}

/// A parse error's one problem: `(field, problem up to " at line")`.
fn parse_error(json: &str) -> (String, String) {
    let e = load(json).expect_err("config should be refused");
    assert_eq!(e.len(), 1, "{e:?}");
    let problem = e[0].problem.split(" at line").next().unwrap_or_default();
    (e[0].field.clone(), problem.to_string())
}

#[test]
fn parse_errors_name_the_field() {
    let chain = r#""chains":[{"name":"c","providers":["a"]}]"#;
    let cases = [
        // A value of the wrong type: the value.
        (
            format!(r#"{{"providers":[{{"name":"a","models":"gpt"}}],{chain}}}"#),
            "providers[0].models",
            "invalid type: string \"gpt\", expected a sequence",
        ),
        (
            format!(r#"{{"providers":[{{"name":"a"}}],{chain},"breaker":{{"window":"soon"}}}}"#),
            "breaker.window",
            "\"soon\" is not a duration: write one number with one unit (ms, s, m, h or d), e.g. \"30s\"",
        ),
        // A missing field: the object.
        (
            format!(r#"{{"providers":[{{"cluster":"x"}}],{chain}}}"#),
            "providers[0]",
            "missing field `name`",
        ),
        (
            r#"{"providers":[]}"#.to_string(),
            "",
            "missing field `chains`",
        ),
        // A chain entry that is neither a name nor {provider, model}: the entry.
        (
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a",5,"a"]}]}"#
                .to_string(),
            "chains[0].providers[1]",
            "invalid type: integer `5`, expected a provider's name or a mapping {provider, model, capabilities, effort, max_tokens} or {group, weights, policy}",
        ),
        (
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a",["a"]]}]}"#
                .to_string(),
            "chains[0].providers[1]",
            "invalid type: sequence, expected a provider's name or a mapping {provider, model, capabilities, effort, max_tokens} or {group, weights, policy}",
        ),
        // Inside an entry: the field itself, never "no model" or "capable".
        (
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a",{"provider":"a","modle":"m"}]}]}"#
                .to_string(),
            "chains[0].providers[1].modle",
            "unknown field `modle`, expected one of `provider`, `model`, `capabilities`, `effort`, `max_tokens`, `group`, `weights`, `policy`",
        ),
        (
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":[{"provider":"a","capabilities":{"context_window":"200k"}}]}]}"#
                .to_string(),
            "chains[0].providers[0].capabilities.context_window",
            "invalid type: string \"200k\", expected u64",
        ),
        (
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"],"context_window":[{"provider":"a","capabilites":{}}]}]}"#
                .to_string(),
            "chains[0].context_window[0].capabilites",
            "unknown field `capabilites`, expected one of `provider`, `model`, `capabilities`, `effort`, `max_tokens`, `group`, `weights`, `policy`",
        ),
        (
            r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":[{"model":"m"}]}]}"#
                .to_string(),
            "chains[0].providers[0]",
            "missing field `provider`",
        ),
        // Not JSON: the innermost value where it stops being JSON (an object, where a member
        // name belongs: serde_path_to_error printed `providers[0].?`).
        (
            r#"{"providers":[{"name":"a""#.to_string(),
            "providers[0]",
            "EOF while parsing an object",
        ),
        (
            r#"{"providers":[{"name":tru}]}"#.to_string(),
            "providers[0].name",
            "expected ident",
        ),
        (
            "5".to_string(),
            "",
            "invalid type: integer `5`, expected struct RawConfig",
        ),
    ];
    for (json, field, problem) in cases {
        assert_eq!(
            parse_error(&json),
            (field.to_string(), problem.to_string()),
            "{json}"
        );
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["x"],"max_attempts":0},{"name":"d","providers":[]}]}"#,
    );
    assert_eq!(e.len(), 3, "{e:?}");
}

#[test]
fn credentials_come_from_value_or_environment() {
    let env = |k: &str| (k == "KEY_B").then(|| "sk-b".to_string());
    let c = Config::from_json(
        br#"{"providers":[{"name":"a","credential":{"header":"Authorization","value":"sk-a","prefix":"Bearer "}},
            {"name":"b","credential":{"header":"x-api-key","env":"KEY_B"},"headers":{"Anthropic-Version":"2023-06-01"}}],
            "chains":[{"name":"c","providers":["a","b"]}]}"#,
        &env,
    )
    .unwrap();
    assert_eq!(
        c.providers[0].set_headers,
        vec![("authorization".to_string(), "Bearer sk-a".to_string())]
    );
    assert_eq!(
        c.providers[1].set_headers[0],
        ("x-api-key".to_string(), "sk-b".to_string())
    );
    assert_eq!(
        c.providers[1].set_headers[1],
        ("anthropic-version".to_string(), "2023-06-01".to_string())
    );
    for h in ["authorization", "x-api-key", "api-key", "anthropic-version"] {
        assert!(c.cleared_headers.iter().any(|x| x == h), "{h}");
    }
    let e = errors_of(
        r#"{"providers":[{"name":"a","credential":{"header":"x-api-key","env":"MISSING"}}],"chains":[{"name":"c","providers":["a"]}]}"#,
    );
    assert!(
        e[0].starts_with("providers[0].credential.env: environment variable MISSING is not set in Envoy's environment: export it before starting Envoy"),
        "{e:?}"
    );
}

#[test]
fn model_patterns_match_exact_prefix_and_any() {
    assert!(ModelPattern::parse("*").matches("anything"));
    assert!(ModelPattern::parse("gpt-*").matches("gpt-4o"));
    assert!(!ModelPattern::parse("gpt-*").matches("claude-3"));
    assert!(ModelPattern::parse("gpt-4o").matches("gpt-4o"));
    assert!(!ModelPattern::parse("gpt-4o").matches("gpt-4o-mini"));
}

#[test]
fn not_json_is_refused_not_panicking() {
    assert!(load("").is_err());
    assert!(load("[]").is_err());
    assert!(load("{\"providers\":").is_err());
}

#[test]
fn chain_paths_and_callers_are_checked() {
    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","paths":["v1/chat"],"callers":["team-a"],"providers":["a"]}]}"#,
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("chains[0].paths[0]: \"v1/chat\" must start with '/'"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("chains[0].callers: set caller_header"),
        "{e:?}"
    );
    let ok = load(
        r#"{"caller_header":"x-team","providers":[{"name":"a"}],"chains":[{"name":"c","paths":["/v1/*"],"callers":["team-a"],"providers":["a"]}]}"#,
    )
    .unwrap();
    assert!(ok.caller_chains);
    assert_eq!(ok.chains[0].paths, vec![ModelPattern::parse("/v1/*")]);
}

#[test]
fn no_attempt_starts_with_less_than_min_remaining_of_the_budget() {
    let t = Timeouts {
        attempt_ms: 1000,
        stall_ms: 0,
        total_time_ms: 2500,
        min_remaining_ms: 1000,
        first_token_ms: 0,
    };
    assert!(t.room_for_attempt(0));
    assert!(t.room_for_attempt(1500), "exactly min_remaining left");
    assert!(!t.room_for_attempt(1501));
    assert!(!t.room_for_attempt(u64::MAX));
    let none = Timeouts {
        total_time_ms: 0,
        ..t
    };
    assert!(
        none.room_for_attempt(u64::MAX),
        "a budget of 0 is no budget"
    );
}

#[test]
fn forward_headers_take_names_patterns_or_all() {
    let c = load(
        r#"{"providers":[{"name":"a","forward_headers":["X-Tenant","x-org-*"]},{"name":"b","forward_headers":"all"},{"name":"c"}],
        "chains":[{"name":"main","providers":["a","b","c"]}]}"#,
    )
    .unwrap();
    let allows = |p: u8, name: &[u8]| c.forwarding.allows(&c.providers, p.into(), name);
    assert!(allows(0, b"x-tenant") && allows(0, b"x-org-id"));
    assert!(allows(1, b"cookie") && !allows(2, b"cookie"));
    assert!(
        !allows(1, b"authorization"),
        "the caller's gateway key never goes on"
    );
    let e = errors_of(
        r#"{"providers":[{"name":"a","forward_headers":"everything"},{"name":"b","forward_headers":["bad header",":path"]}],
        "chains":[{"name":"main","providers":["a","b"]}]}"#,
    );
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e[0].starts_with("providers[0].forward_headers: \"everything\""),
        "{e:?}"
    );
    assert!(e[1].starts_with("providers[1].forward_headers[0]"), "{e:?}");
    assert!(e[2].starts_with("providers[1].forward_headers[1]"), "{e:?}");
}

#[test]
fn chains_past_what_a_chain_id_holds_are_refused() {
    let chains: Vec<String> = (0..257)
        .map(|i| format!(r#"{{"name":"c{i}","providers":["a"]}}"#))
        .collect();
    let json = format!(
        r#"{{"providers":[{{"name":"a"}}],"chains":[{}]}}"#,
        chains.join(",")
    );
    let errors = load(&json).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.field == "chains" && e.problem.contains("at most 256")),
        "{errors:?}"
    );
    let fits = (0..256)
        .map(|i| format!(r#"{{"name":"c{i}","providers":["a"]}}"#))
        .collect::<Vec<_>>()
        .join(",");
    assert!(load(&format!(
        r#"{{"providers":[{{"name":"a"}}],"chains":[{fits}]}}"#
    ))
    .is_ok());
}

#[test]
fn a_provider_budget_is_read_and_refused_when_empty() {
    let c = Config::from_json(
        br#"{"providers":[{"name":"a","budget":{"tokens":2000000,"window":"24h"}},{"name":"b"}],
            "chains":[{"name":"c","providers":["a","b"]}]}"#,
        &|_| None,
    )
    .unwrap();
    assert_eq!(
        c.providers[0].budget,
        Some(crate::config::Budget {
            tokens: 2_000_000,
            window_ms: 86_400_000
        })
    );
    assert_eq!(c.providers[1].budget, None);
    let e = errors_of(
        r#"{"providers":[{"name":"a","budget":{"tokens":0,"window":"0s"}}],
            "chains":[{"name":"c","providers":["a"]}]}"#,
    );
    assert!(
        e.iter()
            .any(|p| p.starts_with("providers[0].budget.tokens: must be above 0")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|p| p.starts_with("providers[0].budget.window: must be above 0")),
        "{e:?}"
    );
}

#[test]
fn callers_are_read_with_their_budgets_and_refused_with_the_fix() {
    let c = load(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}],
            "caller_header":"x-team",
            "callers":[{"name":"team-a","budget":{"tokens":100000,"window":"24h"}},
                       {"name":"alice@example.com"}]}"#,
    )
    .unwrap();
    assert_eq!(
        c.callers[0],
        Caller {
            name: "team-a".into(),
            budget: Some(Budget {
                tokens: 100_000,
                window_ms: 86_400_000
            }),
            counter: "caller:team-a".into(),
        }
    );
    assert_eq!(c.callers[1].budget, None);
    assert_eq!(c.team(Some("team-a")), Team::Known(0));
    assert_eq!(c.team(Some("alice@example.com")), Team::Known(1));
    assert_eq!(c.team(Some("team-z")), Team::Other);
    assert_eq!(c.team(None), Team::None);
    assert_eq!(
        [Team::Known(0), Team::Other, Team::None].map(|t| c.team_label(t)),
        [Some("team-a"), Some("other"), None]
    );
    // No callers named: nobody is told apart, whatever the header says.
    let plain = load(r#"{"caller_header":"x-team","providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}]}"#).unwrap();
    assert_eq!(plain.team(Some("team-a")), Team::None);

    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}],
            "callers":[{"name":"team-a","budget":{"tokens":0,"window":"24h"}},
                       {"name":"team-a"},{"name":"other"},{"name":"a b"},{"name":""},
                       {"name":"b","budget":{"tokens":5,"window":0}}]}"#,
    );
    assert_eq!(
        e,
        [
            "callers: callers are told apart by caller_header: set it (the request header your auth filter sets)",
            "callers[0].budget.tokens: must be above 0 (omit budget for none)",
            "callers[1].name: caller \"team-a\" is already defined at callers[0]: names must be unique",
            "callers[2].name: \"other\" is the label of callers the file does not name: rename this caller",
            "callers[3].name: \"a b\" is not a caller name: write the caller_header value (printable, no spaces or '=', no '.' first or last)",
            "callers[4].name: \"\" is not a caller name: write the caller_header value (printable, no spaces or '=', no '.' first or last)",
            "callers[5].budget.window: must be above 0 (e.g. 24h)",
        ]
    );
    let missing = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}],
            "caller_header":"x-team","callers":[{"budget":{"tokens":5,"window":"1h"}}]}"#,
    );
    assert!(missing[0].contains("missing field `name`"), "{missing:?}");
}

#[test]
fn provider_api_max_tokens_and_the_default_anthropic_version() {
    let c = load(
        r#"{"providers":[{"name":"o","api":"openai"},{"name":"a","api":"anthropic","max_tokens":1024},
        {"name":"v","api":"anthropic","headers":{"Anthropic-Version":"2024-01-01"}},{"name":"plain"}],
        "chains":[{"name":"main","providers":["o","a","v","plain"]}]}"#,
    )
    .unwrap();
    use crate::translate::Api;
    let apis: Vec<_> = c.providers.iter().map(|p| p.api).collect();
    assert_eq!(
        apis,
        vec![
            Some(Api::OpenAiChat),
            Some(Api::AnthropicMessages),
            Some(Api::AnthropicMessages),
            None
        ]
    );
    assert_eq!(c.providers[1].max_tokens, 1024);
    assert_eq!(c.providers[0].max_tokens, 4096, "the default");
    let version = |i: usize| {
        c.providers[i]
            .set_headers
            .iter()
            .filter(|(n, _)| n == "anthropic-version")
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(version(1), vec!["2023-06-01"], "set when not configured");
    assert_eq!(version(2), vec!["2024-01-01"], "the provider's own wins");
    assert!(version(0).is_empty() && version(3).is_empty());
    assert!(
        c.cleared_headers.iter().any(|h| h == "anthropic-version"),
        "cleared for the next attempt like any provider header"
    );
    // An undeclared provider translates nothing; a declared one only for the other API.
    assert_eq!(
        c.providers[3].translates(Some(Api::AnthropicMessages), "/v1/x"),
        None
    );
    assert_eq!(
        c.providers[1].translates(Some(Api::OpenAiChat), "/v1/x"),
        Some(Api::AnthropicMessages)
    );
    assert_eq!(
        c.providers[1].translates(Some(Api::AnthropicMessages), "/v1/x"),
        None
    );
    assert_eq!(
        c.providers[0].translates(None, "/v1/x"),
        Some(Api::OpenAiChat),
        "an endpoint without translation"
    );
}

#[test]
fn chain_entry_capabilities_are_read_and_checked() {
    let c = load(
        r#"{"providers":[{"name":"a"},{"name":"b"}],
        "chains":[{"name":"main","providers":["a",
          {"provider":"b","model":"m","capabilities":{"vision":false,"tools":true,"context_window":200000}}]}]}"#,
    )
    .unwrap();
    let caps = c.chains[0].entries[1].capabilities;
    assert_eq!(
        (caps.vision, caps.tools, caps.context_window),
        (Some(false), Some(true), Some(200_000))
    );
    assert_eq!(c.chains[0].entries[0].capabilities, Capabilities::default());
    let e = errors_of(
        r#"{"providers":[{"name":"a","api":"palm","max_tokens":0},{"name":"b"}],
        "chains":[{"name":"main","providers":["a",{"provider":"b","capabilities":{"context_window":0}}]}]}"#,
    );
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e[0].starts_with("providers[0].api: \"palm\" is not an API"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("providers[0].max_tokens: must be above 0"),
        "{e:?}"
    );
    assert!(
        e[2].starts_with("chains[0].providers[1].capabilities.context_window: must be"),
        "{e:?}"
    );
    // A misspelt capability is refused, not ignored.
    let e = errors_of(
        r#"{"providers":[{"name":"b"}],
        "chains":[{"name":"main","providers":[{"provider":"b","capabilities":{"vison":false}}]}]}"#,
    );
    assert!(e[0].starts_with("chains[0].providers[0]"), "{e:?}");
    // The same provider and model twice is a duplicate whatever the capabilities say.
    let e = errors_of(
        r#"{"providers":[{"name":"b"}],
        "chains":[{"name":"main","providers":["b",{"provider":"b","capabilities":{"vision":false}}]}]}"#,
    );
    assert!(e[0].contains("appears twice"), "{e:?}");
}

#[test]
fn an_openai_provider_does_not_take_the_callers_anthropic_headers() {
    let c = load(
        r#"{"providers":[{"name":"o","api":"openai"},{"name":"a","api":"anthropic"}],
        "chains":[{"name":"main","providers":["o","a"]}]}"#,
    )
    .unwrap();
    assert!(!c.forwarding.uniform());
    assert_eq!(
        c.forwarding.verdict(&c.providers, b"anthropic-beta"),
        crate::config::forward::Verdict::PerProvider
    );
    assert_eq!(
        c.forwarding.verdict(&c.providers, b"openai-organization"),
        crate::config::forward::Verdict::Keep
    );
}

#[test]
fn retry_in_place_and_the_first_token_timeout_are_read_with_their_defaults() {
    let c = load(
        r#"{"providers":[{"name":"a"}],"timeouts":{"first_token":"3s"},
            "chains":[{"name":"x","providers":["a"],"retry_in_place":{}},
                      {"name":"y","providers":["a"],"retry_in_place":{"back_off":"1s","max_retry_after":"5s"}},
                      {"name":"z","providers":["a"]}]}"#,
    )
    .unwrap();
    let policy = |i: usize| {
        c.chains[i]
            .retry_in_place
            .map(|p| (p.back_off_ms, p.max_retry_after_ms))
    };
    assert_eq!(policy(0), Some((500, 2_000)));
    assert_eq!(policy(1), Some((1_000, 5_000)));
    assert_eq!(policy(2), None, "off by default");
    assert_eq!(c.timeouts.first_token(true), Some(3_000));
    assert_eq!(c.timeouts.first_token(false), None);
    assert_eq!(load(MINIMAL).unwrap().timeouts.first_token(true), None);
    let e = errors_of(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"x","providers":["a"],"retry_in_place":{"backoff":"1s"}}]}"#,
    );
    assert!(e[0].contains("retry_in_place"), "{e:?}");
}

/// `providers` (JSON objects) and one chain `c` of one `entry`, loaded.
fn one_chain(providers: &str, entry: &str) -> Result<Config, Vec<ConfigError>> {
    Config::from_json(
        format!(r#"{{"providers":[{providers}],"chains":[{{"name":"c","providers":[{entry}]}}]}}"#)
            .as_bytes(),
        &|_| None,
    )
}

/// A cloud whose model names are its own gets the caller's model only when the file says so
/// (the provider lists the names callers may ask for): an entry naming no model is refused
/// otherwise, in Envoy as in the CLI.
#[test]
fn a_cloud_entry_without_its_model_is_refused_unless_the_provider_lists_its_models() {
    let config = one_chain;
    for (api, prefix, says) in [
        (
            "azure_openai",
            r#","path_prefix":"/openai?api-version=2024-10-21""#,
            "is Azure OpenAI: name the deployment",
        ),
        ("azure_openai", "", "is Azure OpenAI: name the deployment"),
        ("bedrock", "", "is Bedrock: name the model id"),
        ("bedrock_converse", "", "is Bedrock: name the model id"),
        (
            "vertex",
            r#","path_prefix":"/v1/projects/p/locations/r""#,
            "is Vertex AI: name the model",
        ),
    ] {
        let p = format!(r#"{{"name":"x","api":"{api}"{prefix}}}"#);
        let e = config(&p, r#""x""#).unwrap_err();
        assert_eq!(e.len(), 1, "{api}: {e:?}");
        assert_eq!(e[0].field, "chains[0].providers[0]");
        assert!(e[0].problem.contains(says), "{api}: {}", e[0].problem);
        assert!(
            e[0].problem.contains("{provider: x, model: "),
            "{}",
            e[0].problem
        );
        assert!(
            config(&p, r#"{"provider":"x","model":"m"}"#).is_ok(),
            "{api}"
        );
        let listed = format!(r#"{{"name":"x","api":"{api}","models":["gpt-4o-prod"]{prefix}}}"#);
        assert!(config(&listed, r#""x""#).is_ok(), "{api}: listed models");
    }
    // Gemini's models are the caller's to name, as OpenAI's are.
    assert!(config(r#"{"name":"g","api":"gemini"}"#, r#""g""#).is_ok());
    let native = load(
        r#"{"providers":[{"name":"g","api":"gemini_native"}],"chains":[{"name":"c","providers":["g"]}]}"#,
    )
    .unwrap();
    let g = &native.providers[0];
    use crate::{envelope::Envelope, translate::Api};
    assert_eq!(
        (g.api, g.envelope),
        (Some(Api::Gemini), Some(Envelope::GeminiNative))
    );
    // A Chat caller is translated for it, a Gemini caller would not be.
    assert_eq!(
        g.translates(Some(Api::OpenAiChat), "/v1/chat/completions"),
        Some(Api::Gemini)
    );
    assert_eq!(
        g.translates(Some(Api::Gemini), "/v1beta/models/m:generateContent"),
        None
    );
}

#[test]
fn bedrock_converse_is_signed_as_bedrock_and_every_caller_is_translated_for_it() {
    use crate::{envelope::Envelope, translate::Api};
    let config = one_chain;
    let chain = r#"{"provider":"b","model":"meta.llama3-3-70b-instruct-v1:0","max_tokens":300}"#;
    let c = config(r#"{"name":"b","api":"bedrock_converse"}"#, chain).unwrap();
    let b = &c.providers[0];
    assert_eq!(
        (b.api, b.envelope),
        (Some(Api::Converse), Some(Envelope::BedrockConverse))
    );
    for caller in [
        Api::OpenAiChat,
        Api::AnthropicMessages,
        Api::OpenAiResponses,
        Api::Gemini,
    ] {
        assert_eq!(b.translates(Some(caller), ""), Some(Api::Converse));
    }
    // Envoy's signing headers never reach the next provider.
    assert!(
        c.cleared_headers.iter().any(|h| h == "x-amz-date"),
        "{:?}",
        c.cleared_headers
    );
    // A reasoning effort has no Converse terms common to its models: refused.
    let effort = r#"{"provider":"b","model":"m","effort":"low"}"#;
    let e = config(r#"{"name":"b","api":"bedrock_converse"}"#, effort).unwrap_err();
    assert_eq!(e[0].field, "chains[0].providers[0].effort");
    assert!(
        e[0].problem.contains("bedrock_converse"),
        "{}",
        e[0].problem
    );
}

#[test]
fn a_gemini_callers_path_names_the_entrys_model_on_a_provider_without_api() {
    let c = load(
        r#"{"providers":[{"name":"g"},{"name":"p","path_prefix":"/gw"}],
        "chains":[{"name":"c","providers":["g","p"]}]}"#,
    )
    .unwrap();
    let path = |i: usize, p, model| {
        crate::attempt::provider_path(&c.providers[i], None, p, model, false)
            .map(std::borrow::Cow::into_owned)
    };
    let stream = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    assert_eq!(
        path(0, stream, "gemini-2.5-pro").as_deref(),
        Some("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse")
    );
    assert_eq!(
        path(
            1,
            "/v1/models/gemini-2.5-flash:generateContent",
            "models/gemini-3-pro"
        )
        .as_deref(),
        Some("/gw/v1/models/gemini-3-pro:generateContent")
    );
    // The path's own model, another API's path: as they are (with the prefix).
    assert_eq!(path(0, stream, "gemini-2.5-flash"), None);
    assert_eq!(path(0, "/v1/chat/completions", "gemini-2.5-pro"), None);
    assert_eq!(
        path(1, "/v1/chat/completions", "x").as_deref(),
        Some("/gw/v1/chat/completions")
    );
}

#[test]
fn a_gathered_gemini_callers_path_asks_for_a_stream_on_a_provider_without_api() {
    // A `:generateContent` request gathered under a first-token timeout (behaviour.md 5) is
    // sent as `:streamGenerateContent?alt=sse`, the caller's query after it.
    let c = load(
        r#"{"providers":[{"name":"g"},{"name":"p","path_prefix":"/gw"}],
        "chains":[{"name":"c","providers":["g","p"]}]}"#,
    )
    .unwrap();
    let path = |i: usize, p, model, stream| {
        crate::attempt::provider_path(&c.providers[i], None, p, model, stream)
            .map(std::borrow::Cow::into_owned)
    };
    let json = "/v1beta/models/gemini-2.5-flash:generateContent";
    assert_eq!(
        path(0, json, "gemini-2.5-flash", true).as_deref(),
        Some("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    );
    assert_eq!(
        path(
            1,
            "/v1beta/models/gemini-2.5-flash:generateContent?x=1",
            "gemini-2.5-pro",
            true
        )
        .as_deref(),
        Some("/gw/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&x=1")
    );
    // Not gathered: as it was.
    assert_eq!(path(0, json, "gemini-2.5-flash", false), None);
    // A stream already: as it is.
    let stream = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    assert_eq!(path(0, stream, "gemini-2.5-flash", true), None);
}

#[test]
fn api_openai_responses_is_a_provider_that_speaks_only_responses() {
    use crate::translate::Api;
    let c = load(
        r#"{"providers":[{"name":"r","api":"openai_responses"},
        {"name":"az","api":"openai_responses","path_prefix":"/openai","authority":"me.openai.azure.com"}],
        "chains":[{"name":"c","providers":["r","az"]}]}"#,
    )
    .unwrap();
    let r = &c.providers[0];
    assert_eq!((r.api, r.envelope), (Some(Api::OpenAiResponses), None));
    // Chat, Messages and Gemini callers are translated for it; a Responses caller is not.
    for caller in [Api::OpenAiChat, Api::AnthropicMessages, Api::Gemini] {
        assert_eq!(r.translates(Some(caller), "/x"), Some(Api::OpenAiResponses));
    }
    assert_eq!(
        r.translates(Some(Api::OpenAiResponses), "/v1/responses"),
        None
    );
    // Embeddings and completions are not Responses: such an entry is skipped.
    assert_eq!(
        r.translates(None, "/v1/embeddings"),
        Some(Api::OpenAiResponses)
    );
    // Azure OpenAI's v1 API: /openai/v1/responses.
    let az = &c.providers[1];
    let path = |caller, p| {
        crate::attempt::provider_path(az, az.translates(Some(caller), p), p, "gpt-5-pro", false)
            .map(std::borrow::Cow::into_owned)
    };
    assert_eq!(
        path(Api::OpenAiChat, "/v1/chat/completions").as_deref(),
        Some("/openai/v1/responses")
    );
    assert_eq!(
        path(Api::OpenAiResponses, "/v1/responses").as_deref(),
        Some("/openai/v1/responses")
    );
    // It takes no anthropic-* header of a translated Messages caller.
    assert_eq!(
        r.forward,
        crate::config::forward::Forward::for_api(Some(Api::OpenAiChat))
    );
    assert_ne!(r.forward, crate::config::forward::Forward::for_api(None));
}

#[test]
fn residency_is_declared_or_follows_a_clouds_region() {
    let c = load(
        r#"{"providers":[{"name":"a","residency":"eu"},{"name":"b"},
        {"name":"v","api":"vertex","path_prefix":"/v1/projects/p/locations/us-east5"},
        {"name":"g","api":"gemini","path_prefix":"/v1/projects/p/locations/global/endpoints/openapi"},
        {"name":"br","api":"bedrock","authority":"bedrock-runtime.ap-northeast-1.amazonaws.com"}],
        "chains":[{"name":"main","providers":["a","b",{"provider":"v","model":"m"},"g",
          {"provider":"br","model":"m"}]}]}"#,
    )
    .unwrap();
    let names: Vec<_> = (c.providers.iter())
        .map(|p| p.residency.map(|r| r.as_str()))
        .collect();
    assert_eq!(
        names,
        [Some("eu"), None, Some("us"), Some("global"), Some("apac")]
    );
    let e = errors_of(
        r#"{"providers":[{"name":"a","residency":"europe"},
        {"name":"v","api":"vertex","path_prefix":"/v1/projects/p/locations/us-east5","residency":"eu"}],
        "chains":[{"name":"main","providers":["a",{"provider":"v","model":"m"}]}]}"#,
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with(
            "providers[0].residency: \"europe\" is not a residency: use us, eu, apac, global"
        ),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("providers[1].residency: \"eu\", but its region is in \"us\""),
        "{e:?}"
    );
}

#[test]
fn same_residency_is_refused_where_the_file_decides_it() {
    // The first entry takes every request: an entry elsewhere would never be used, and one
    // without a residency never matches.
    let e = errors_of(
        r#"{"providers":[{"name":"a","residency":"us"},{"name":"b","residency":"eu"},
        {"name":"c"},{"name":"d","residency":"us"}],
        "chains":[{"name":"main","same_residency":true,"providers":["a","b","c","d"],
        "context_window":["b"]}]}"#,
    );
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].starts_with("chains[0].providers[1]: provider \"b\" is in \"eu\", the chain's first entry (which takes every request) in \"us\""), "{e:?}");
    assert!(
        e[1].starts_with("chains[0].providers[2]: provider \"c\" has no residency"),
        "{e:?}"
    );
    assert!(
        e[2].starts_with("chains[0].context_window[0]: provider \"b\" is in \"eu\""),
        "{e:?}"
    );
    // The first entry serves some models only (or some callers): decided per request.
    for first in [
        r#"{"name":"a","residency":"us","models":["gpt-*"]}"#,
        r#"{"name":"a","residency":"us","callers":["team"]}"#,
    ] {
        let json = format!(
            r#"{{"caller_header":"x-team","providers":[{first},{{"name":"b","residency":"eu"}}],
            "chains":[{{"name":"main","same_residency":true,"providers":["a","b"]}}]}}"#
        );
        assert!(load(&json).is_ok(), "{first}");
    }
    // A chain whose models the first entry's cover; an entry model it serves.
    for chain in [
        r#""models":["gpt-4*"],"providers":["a","b"]"#,
        r#""providers":[{"provider":"a","model":"gpt-4o"},"b"]"#,
    ] {
        let json = format!(
            r#"{{"providers":[{{"name":"a","residency":"us","models":["gpt-*"]}},{{"name":"b","residency":"eu"}}],
            "chains":[{{"name":"main","same_residency":true,{chain}}}]}}"#
        );
        let e = errors_of(&json);
        assert!(
            e[0].starts_with("chains[0].providers[1]:"),
            "{chain}: {e:?}"
        );
    }
    // Without same_residency the same chain is fine.
    assert!(load(
        r#"{"providers":[{"name":"a","residency":"us"},{"name":"b","residency":"eu"},{"name":"c"}],
        "chains":[{"name":"main","providers":["a","b","c"]}]}"#
    )
    .is_ok());
}

#[test]
fn an_entrys_effort_and_max_tokens_are_checked_with_their_field() {
    let c = load(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"main","providers":[
        {"provider":"a","effort":"minimal","max_tokens":100}]}]}"#,
    )
    .unwrap();
    let s = c.chains[0].entries[0].settings;
    assert_eq!(s.effort.map(|e| e.as_str()), Some("minimal"));
    assert_eq!(s.max_tokens, Some(100));
    assert!(load(MINIMAL).unwrap().chains[0].entries[0]
        .settings
        .is_empty());
    let e = errors_of(
        r#"{"providers":[{"name":"a"},{"name":"b"}],"chains":[{"name":"main","providers":["a",
        {"provider":"b","effort":"extreme","max_tokens":0}],
        "context_window":[{"provider":"b","model":"big","effort":"HIGH"}]}]}"#,
    );
    assert_eq!(
        e,
        [
            "chains[0].providers[1].effort: \"extreme\" is not an effort: use minimal, low, medium, high",
            "chains[0].providers[1].max_tokens: must be above 0 (omit it to send the caller's)",
            "chains[0].context_window[0].effort: \"HIGH\" is not an effort: use minimal, low, medium, high",
        ]
    );
}

#[test]
fn the_fleet_refuses_windows_the_store_does_not_count_in() {
    let load = |extra: &str, window: &str| {
        let json = format!(
            r#"{{"providers":[{{"name":"a","budget":{{"tokens":100,"window":"{window}"}}}}],
                "chains":[{{"name":"c","providers":["a"]}}]{extra}}}"#
        );
        Config::from_json(json.as_bytes(), &|_| None)
    };
    // Without the store any window does.
    assert!(load("", "90m").is_ok());
    let fleet = r#","fleet":{"address":"127.0.0.1:8081"}"#;
    let errors = load(fleet, "90m").unwrap_err();
    assert_eq!(errors[0].field, "providers[0].budget.window");
    assert_eq!(
        errors[0].problem,
        "90m is not a window the fleet's store counts in: with `fleet` on, use 1s, 1m, 1h, 24h, 7d, 30d (the service's month) or 365d (its year)"
    );
    // A caller's budget the same.
    let callers = r#","caller_header":"x-team","callers":[{"name":"t","budget":{"tokens":5,"window":"90m"}}]"#;
    let errors = load(&format!("{fleet}{callers}"), "1h").unwrap_err();
    assert_eq!(errors[0].field, "callers[0].budget.window");
    assert!(
        errors[0].problem.starts_with("90m is not a window"),
        "{errors:?}"
    );
    assert!(load(callers, "1h").is_ok());
    for window in ["1s", "1m", "1h", "24h", "7d", "30d", "365d"] {
        let config = load(fleet, window).unwrap();
        let f = config.fleet.unwrap();
        assert_eq!(
            (
                f.cluster.as_str(),
                f.domain.as_str(),
                f.sync_ms,
                f.timeout_ms,
                f.closed
            ),
            ("llm_failover_fleet", "llm-failover", 1000, 200, false)
        );
    }
    let errors = load(
        r#","fleet":{"sync":"1s","timeout":"2s","on_unavailable":"maybe","domain":"a b"},"breaker":{"fleet_failures":3,"fleet_window":"2m"}"#,
        "1m",
    )
    .unwrap_err();
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "breaker.fleet_window",
            "fleet.address",
            "fleet.domain",
            "fleet.timeout",
            "fleet.on_unavailable"
        ]
    );
    let errors = load(r#","breaker":{"fleet_failures":3}"#, "1m").unwrap_err();
    assert_eq!(errors[0].field, "breaker.fleet_failures");
}
