use super::*;
use crate::rewrite::Content;
use crate::translate::Api;
use std::cell::RefCell;
use std::collections::HashMap;

/// Health double: a fixed gate per provider, recording which providers were read.
#[derive(Default)]
struct FakeHealth {
    gates: HashMap<ProviderId, Admission>,
    reads: RefCell<Vec<ProviderId>>,
    /// Budgets spent (by provider name), with when their window rolls over.
    spent: HashMap<&'static str, u64>,
    /// Providers (by index) whose answers announced an empty rate limit, with until when.
    ahead: HashMap<usize, u64>,
}

impl crate::budget::Budgets for FakeHealth {
    fn left(&self, provider: &str, budget: &crate::budget::Budget) -> crate::budget::Left {
        let resets_at_ms = self.spent.get(provider).copied().unwrap_or(1);
        let spent = if self.spent.contains_key(provider) {
            budget.tokens
        } else {
            0
        };
        crate::budget::Left {
            spent,
            tokens: budget.tokens - spent,
            resets_at_ms,
        }
    }

    fn spend(&self, _provider: &str, _budget: &crate::budget::Budget, _tokens: u64) {}
}

impl Gatekeeper for FakeHealth {
    fn budgets(&self) -> Option<&dyn crate::budget::Budgets> {
        Some(self)
    }

    fn gate(&self, provider: ProviderId, _model: &str) -> Admission {
        self.reads.borrow_mut().push(provider);
        if let Some(&until_ms) = self.ahead.get(&provider.index()) {
            return Admission::RateLimitedAhead { until_ms };
        }
        self.gates
            .get(&provider)
            .copied()
            .unwrap_or(Admission::Available {
                pristine: true,
                probe: false,
            })
    }
}

fn config(json: &str) -> Config {
    Config::from_json(json.as_bytes(), &|_| None).expect("test config is valid")
}

const THREE: &str = r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"c"},{"name":"d"}],
    "chains":[{"name":"main","providers":["a","b","c","d"]}]}"#;

fn entries(plan: &Plan) -> Vec<usize> {
    plan.slots.iter().map(|s| s.entry.index()).collect()
}

fn ids(list: &[EntryId]) -> Vec<usize> {
    list.iter().map(|e| e.index()).collect()
}

fn skips(skipped: &[(EntryId, SkipReason)]) -> Vec<(usize, SkipReason)> {
    skipped.iter().map(|(e, r)| (e.index(), *r)).collect()
}

fn reads(health: &FakeHealth) -> Vec<usize> {
    health.reads.borrow().iter().map(|p| p.index()).collect()
}

fn facts(model: &str) -> RequestFacts<'_> {
    RequestFacts {
        model,
        ..Default::default()
    }
}

#[test]
fn a_spent_budget_skips_its_provider_without_an_attempt_or_reading_its_health() {
    let c = config(
        r#"{"providers":[{"name":"a","budget":{"tokens":10,"window":"10s"}},
            {"name":"b","budget":{"tokens":10,"window":"10s"}},{"name":"c"}],
        "chains":[{"name":"main","models":["m"],"providers":["a","b"]},
            {"name":"other","models":["n"],"providers":["a","c"]}]}"#,
    );
    let mut health = FakeHealth::default();
    health.spent.insert("a", 9_000);
    let p = plan(&c, &facts("m"), &health).unwrap();
    assert_eq!(entries(&p), vec![1]);
    assert_eq!(skips(&p.skipped), vec![(0, SkipReason::BudgetExhausted)]);
    assert_eq!(reads(&health), vec![1]);
    // Every one spent: 429, back when the earliest window rolls over.
    health.spent.insert("b", 4_000);
    let refusal = plan_or_refuse(&c, &facts("m"), &health).unwrap_err();
    assert_eq!(
        (
            refusal.reply.status,
            refusal.reply.code,
            refusal.reply.should_retry
        ),
        (429, "budget_exhausted", true)
    );
    assert_eq!(refusal.retry_at_ms, Some(4_000));
    assert_eq!(refusal.skipped.len(), 2);
    // Spent and open together: the breakers' answer.
    health.spent.remove("b");
    health.gates.insert(1u8.into(), Admission::BreakerOpen);
    let refusal = plan_or_refuse(&c, &facts("m"), &health).unwrap_err();
    assert_eq!(
        (refusal.reply.code, refusal.retry_at_ms),
        ("circuit_open", None)
    );
    // Another chain with the spent provider goes on to one without a budget.
    assert_eq!(entries(&plan(&c, &facts("n"), &health).unwrap()), vec![1]);
}

#[test]
fn a_caller_whose_budget_is_spent_is_refused_before_any_provider_is_read() {
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"b","budget":{"tokens":10,"window":"10s"}}],
        "chains":[{"name":"main","providers":["a","b"]}],"caller_header":"x-team",
        "callers":[{"name":"team-a","budget":{"tokens":100,"window":"24h"}},{"name":"team-b"}]}"#,
    );
    let mut health = FakeHealth::default();
    health.spent.insert("caller:team-a", 86_400_000);
    let as_caller = |caller| RequestFacts {
        model: "m",
        caller,
        ..Default::default()
    };
    let refusal = plan_or_refuse(&c, &as_caller(Some("team-a")), &health).unwrap_err();
    assert_eq!(
        (
            refusal.reply.status,
            refusal.reply.code,
            refusal.reply.should_retry
        ),
        (429, "budget_exhausted", true)
    );
    assert!(
        refusal.reply.message.contains("\"team-a\""),
        "{}",
        refusal.reply.message
    );
    assert_eq!(
        refusal.retry_at_ms,
        Some(86_400_000),
        "when its window rolls over"
    );
    assert_eq!(refusal.chain, Some(ChainId::FIRST));
    assert!(refusal.skipped.is_empty(), "no provider was looked at");
    assert!(reads(&health).is_empty());
    // Another caller, a caller without a budget, an unnamed one and none are planned as usual.
    for caller in [Some("team-b"), Some("team-c"), None] {
        assert_eq!(
            entries(&plan(&c, &as_caller(caller), &health).unwrap()),
            vec![0, 1]
        );
    }
    // A provider budget spent too: still the caller's refusal (nothing else is read).
    health.spent.insert("b", 5_000);
    let refusal = plan_or_refuse(&c, &as_caller(Some("team-a")), &health).unwrap_err();
    assert_eq!(refusal.retry_at_ms, Some(86_400_000));
    // Without run-time state (explain) nothing is spent.
    struct Blind;
    impl Gatekeeper for Blind {
        fn gate(&self, _: ProviderId, _: &str) -> Admission {
            Admission::Available {
                pristine: true,
                probe: false,
            }
        }
    }
    assert!(plan(&c, &as_caller(Some("team-a")), &Blind).is_ok());
}

#[test]
fn an_announced_empty_rate_limit_skips_its_provider_until_its_reset() {
    let c = config(THREE);
    let mut health = FakeHealth::default();
    health.ahead.insert(0, 20_000);
    let p = plan(&c, &facts("m"), &health).unwrap();
    assert_eq!(entries(&p), vec![1, 2, 3], "no attempt, not even last");
    assert_eq!(skips(&p.skipped), vec![(0, SkipReason::RateLimitedAhead)]);
    assert_eq!(
        p.skip_before_start(&c.chains[0]),
        Some("rate_limited_ahead")
    );
    // Announced and open before the first planned one: the breakers' reason.
    health.gates.insert(1u8.into(), Admission::BreakerOpen);
    let p = plan(&c, &facts("m"), &health).unwrap();
    assert_eq!(p.skip_before_start(&c.chains[0]), Some("breaker_open"));
    // Every one announced: 429 rate_limited_ahead, back at the earliest reset.
    for (index, until) in [(1, 9_000), (2, 30_000), (3, 12_000)] {
        health.ahead.insert(index, until);
    }
    health.gates.clear();
    let refusal = plan_or_refuse(&c, &facts("m"), &health).unwrap_err();
    assert_eq!(
        (
            refusal.reply.status,
            refusal.reply.code,
            refusal.retry_at_ms
        ),
        (429, "rate_limited_ahead", Some(9_000))
    );
    assert_eq!(refusal.skipped.len(), 4);
}

#[test]
fn caps_the_walk_at_max_attempts_and_reads_no_further() {
    let c = config(THREE);
    let health = FakeHealth::default();
    let p = plan(&c, &facts("m"), &health).unwrap();
    assert_eq!(entries(&p), vec![0, 1, 2]);
    assert_eq!(reads(&health), vec![0, 1, 2]);
}

#[test]
fn opt_out_header_limits_to_the_first_provider() {
    let c = config(THREE);
    let p = plan(
        &c,
        &RequestFacts {
            no_fallback: true,
            ..facts("m")
        },
        &FakeHealth::default(),
    )
    .unwrap();
    assert_eq!(entries(&p), vec![0]);
}

#[test]
fn open_breakers_and_dead_marks_spend_no_attempt() {
    let c = config(THREE);
    let mut health = FakeHealth::default();
    health.gates.insert(0.into(), Admission::BreakerOpen);
    health.gates.insert(1.into(), Admission::Dead);
    let p = plan(&c, &facts("m"), &health).unwrap();
    assert_eq!(entries(&p), vec![2, 3]);
    assert_eq!(
        skips(&p.skipped),
        vec![(0, SkipReason::BreakerOpen), (1, SkipReason::Dead)]
    );
    assert!(p.skip_before_start(&c.chains[0]).is_some());
}

#[test]
fn try_last_moves_open_providers_to_the_end() {
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"c"}],
        "chains":[{"name":"main","providers":["a","b","c"],"try_last":true}]}"#,
    );
    let mut health = FakeHealth::default();
    health.gates.insert(0.into(), Admission::BreakerOpen);
    let p = plan(&c, &facts("m"), &health).unwrap();
    assert_eq!(entries(&p), vec![1, 2, 0]);
}

#[test]
fn every_provider_open_is_circuit_open() {
    let c = config(THREE);
    let mut health = FakeHealth::default();
    for id in 0u8..4 {
        health.gates.insert(id.into(), Admission::BreakerOpen);
    }
    let err = plan(&c, &facts("m"), &health).unwrap_err();
    assert_eq!((err.status, err.code), (503, "circuit_open"));
    let refusal = plan_or_refuse(&c, &facts("m"), &health).unwrap_err();
    assert_eq!(refusal.chain.map(ChainId::index), Some(0));
    assert_eq!(
        skips(&refusal.skipped),
        (0..4)
            .map(|e| (e, SkipReason::BreakerOpen))
            .collect::<Vec<_>>(),
        "every skipped provider is kept for the metrics"
    );
}

#[test]
fn unknown_model_is_model_not_recognized() {
    let c = config(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"gpt","models":["gpt-*"],"providers":["a"]}]}"#,
    );
    let err = plan(&c, &facts("claude-3"), &FakeHealth::default()).unwrap_err();
    assert_eq!((err.status, err.code), (400, "model_not_recognized"));
    assert!(err.message.contains("claude-3"));
}

#[test]
fn providers_that_cannot_serve_the_model_are_dropped() {
    let c = config(
        r#"{"providers":[{"name":"openai","models":["gpt-*"]},{"name":"anthropic","models":["claude-*"]},
        {"name":"bedrock","models":["claude-*"]}],
        "chains":[{"name":"all","providers":["openai","anthropic","bedrock"]}]}"#,
    );
    let p = plan(&c, &facts("claude-sonnet"), &FakeHealth::default()).unwrap();
    assert_eq!(entries(&p), vec![1, 2]);
    assert_eq!(skips(&p.skipped), vec![(0, SkipReason::Model)]);
    assert!(
        p.skip_before_start(&c.chains[0]).is_none(),
        "a model skip is not a breaker fallback"
    );
    let err = plan(&c, &facts("llama"), &FakeHealth::default()).unwrap_err();
    assert_eq!((err.status, err.code), (400, "model_not_allowed"));
    assert!(err.message.contains("llama"));
}

#[test]
fn a_rewritten_model_decides_eligibility() {
    let c = config(
        r#"{"providers":[{"name":"openai","models":["gpt-*"]},{"name":"anthropic","models":["claude-*"]}],
        "chains":[{"name":"all","providers":["openai",{"provider":"anthropic","model":"claude-sonnet"}]}]}"#,
    );
    let p = plan(&c, &facts("gpt-4o"), &FakeHealth::default()).unwrap();
    assert_eq!(entries(&p), vec![0, 1]);
}

#[test]
fn callers_only_reach_the_providers_they_may_use() {
    let c = config(
        r#"{"caller_header":"x-team","providers":[{"name":"a","callers":["team-a"]},{"name":"b"}],
        "chains":[{"name":"main","providers":["a","b"]}]}"#,
    );
    let p = plan(
        &c,
        &RequestFacts {
            caller: Some("team-b"),
            ..facts("m")
        },
        &FakeHealth::default(),
    )
    .unwrap();
    assert_eq!(entries(&p), vec![1]);
    let p = plan(
        &c,
        &RequestFacts {
            caller: Some("team-a"),
            ..facts("m")
        },
        &FakeHealth::default(),
    )
    .unwrap();
    assert_eq!(entries(&p), vec![0, 1]);
    let p = plan(&c, &facts("m"), &FakeHealth::default()).unwrap();
    assert_eq!(
        entries(&p),
        vec![1],
        "no caller identity: restricted providers are out"
    );
}

#[test]
fn chains_are_chosen_by_route_then_model() {
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"b"},{"name":"c"}],
        "chains":[{"name":"batch","routes":["batch"],"providers":["c"]},
                  {"name":"gpt","models":["gpt-*"],"providers":["a"]},
                  {"name":"rest","providers":["b"]}]}"#,
    );
    let pick = |model, route| {
        select_chain(
            &c,
            &RequestFacts {
                model,
                route,
                ..Default::default()
            },
        )
        .map(|(i, _)| i.index())
    };
    assert_eq!(pick("gpt-4o", Some("batch")), Some(0));
    assert_eq!(pick("gpt-4o", Some("chat")), Some(1));
    assert_eq!(pick("llama", None), Some(2));
}

#[test]
fn chains_are_limited_to_their_paths() {
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"b"}],
        "chains":[{"name":"embed","paths":["/v1/embeddings"],"providers":["b"]},
                  {"name":"chat","paths":["/v1/chat/*","/v1/responses"],"providers":["a"]}]}"#,
    );
    let pick = |path| {
        select_chain(
            &c,
            &RequestFacts {
                model: "m",
                path: Some(path),
                ..Default::default()
            },
        )
        .map(|(_, c)| c.name.as_str())
    };
    assert_eq!(pick("/v1/embeddings"), Some("embed"));
    assert_eq!(pick("/v1/chat/completions?x=1"), Some("chat"));
    assert_eq!(pick("/v1/responses"), Some("chat"));
    assert_eq!(pick("/v1/audio/speech"), None);
}

#[test]
fn a_request_without_a_model_that_no_chain_takes_is_a_404() {
    let c = config(
        r#"{"providers":[{"name":"a"}],"chains":[{"name":"gpt","models":["gpt-*"],"providers":["a"]}]}"#,
    );
    let f = RequestFacts {
        path: Some("/v1/files"),
        ..Default::default()
    };
    let err = plan(&c, &f, &FakeHealth::default()).unwrap_err();
    assert_eq!((err.status, err.code), (404, "route_not_found"));
    assert!(err.message.contains("/v1/files"), "{}", err.message);
}

#[test]
fn a_request_without_a_model_goes_to_one_provider() {
    let c = config(THREE);
    let mut health = FakeHealth::default();
    health.gates.insert(0.into(), Admission::BreakerOpen);
    let p = plan(&c, &facts(""), &health).unwrap();
    assert_eq!(
        entries(&p),
        vec![1],
        "the first provider that can take it, no fallback"
    );
}

#[test]
fn the_callers_own_chain_wins_over_a_generic_one_in_full() {
    let c = config(
        r#"{"caller_header":"x-team","providers":[{"name":"a"},{"name":"b"},{"name":"c"}],
        "chains":[{"name":"generic","providers":["a","b"]},
                  {"name":"team-a","callers":["team-a"],"providers":["c"],"max_attempts":1},
                  {"name":"team-b","callers":["team-b","team-x"],"models":["gpt-*"],"providers":["b"]}]}"#,
    );
    let pick = |caller, model| {
        select_chain(
            &c,
            &RequestFacts {
                model,
                caller,
                ..Default::default()
            },
        )
        .map(|(_, c)| c.name.as_str())
    };
    assert_eq!(pick(Some("team-a"), "gpt-4o"), Some("team-a"));
    assert_eq!(pick(Some("team-x"), "gpt-4o"), Some("team-b"));
    assert_eq!(
        pick(Some("team-x"), "claude"),
        Some("generic"),
        "team-b's chain does not serve the model"
    );
    assert_eq!(pick(Some("team-z"), "gpt-4o"), Some("generic"));
    assert_eq!(pick(None, "gpt-4o"), Some("generic"));
    let p = plan(
        &c,
        &RequestFacts {
            model: "m",
            caller: Some("team-a"),
            ..Default::default()
        },
        &FakeHealth::default(),
    )
    .unwrap();
    assert_eq!(
        (p.chain.index(), entries(&p)),
        (1, vec![0]),
        "no merging with the generic chain"
    );
}

#[test]
fn the_first_generic_chain_wins_when_no_chain_names_the_caller() {
    let c = config(
        r#"{"caller_header":"x-team","providers":[{"name":"a"},{"name":"b"},{"name":"c"}],
        "chains":[{"name":"team-a","callers":["team-a"],"providers":["c"]},
                  {"name":"first","providers":["a"]},
                  {"name":"second","providers":["b"]}]}"#,
    );
    for caller in [None, Some("team-z")] {
        let facts = RequestFacts {
            model: "m",
            caller,
            ..Default::default()
        };
        let chosen = select_chain(&c, &facts).map(|(_, c)| c.name.as_str());
        assert_eq!(chosen, Some("first"), "{caller:?}");
    }
}

const LISTS: &str = r#"{"caller_header":"x-team","providers":[{"name":"a"},{"name":"b"},
    {"name":"big"},{"name":"huge"},{"name":"safe"},{"name":"private","callers":["x"]}],
    "chains":[{"name":"main","providers":["a","b"],"max_attempts":3,
      "context_window":["big","private","huge"],"content_policy":["safe"]}]}"#;

fn record_of<'a>(plan: &'a Plan, chain: &Chain) -> Walk<'a> {
    Walk {
        slots: &plan.slots,
        limit: plan.attempt_limit(chain),
        context_window: &plan.context_window,
        content_policy: &plan.content_policy,
        model: "m",
    }
}

#[test]
fn lists_are_planned_by_model_and_caller_and_widen_the_attempt_limit() {
    let c = config(LISTS);
    let chain = &c.chains[0];
    let p = plan(&c, &facts("m"), &FakeHealth::default()).unwrap();
    assert_eq!(entries(&p), vec![0, 1]);
    assert_eq!(
        ids(&p.context_window),
        vec![2, 4],
        "the caller may not use `private`"
    );
    assert_eq!(ids(&p.content_policy), vec![5]);
    assert_eq!(p.attempt_limit(chain), 3, "within max_attempts");
    let alone = plan(
        &c,
        &RequestFacts {
            no_fallback: true,
            ..facts("m")
        },
        &FakeHealth::default(),
    )
    .unwrap();
    assert_eq!(
        alone.attempt_limit(chain),
        1,
        "x-llm-fallback: off keeps one attempt"
    );
    // A chain without lists allows exactly its slots, as before.
    let plain = config(THREE);
    let p = plan(&plain, &facts("m"), &FakeHealth::default()).unwrap();
    assert_eq!(p.attempt_limit(&plain.chains[0]), 3);
    assert!(p.context_window.is_empty() && p.content_policy.is_empty());
}

#[test]
fn reroute_continues_with_the_list_instead_of_the_next_entry() {
    let c = config(LISTS);
    let chain = &c.chains[0];
    let open = FakeHealth::default();
    let p = plan(&c, &facts("m"), &open).unwrap();
    let record = record_of(&p, chain);
    let walk = reroute(&c, chain, &record, 1, Class::ContextWindowExceeded, &open).unwrap();
    assert_eq!(
        walk.iter().map(|s| s.entry.index()).collect::<Vec<_>>(),
        vec![0, 2, 4]
    );
    let walk = reroute(&c, chain, &record, 1, Class::ContentFiltered, &open).unwrap();
    assert_eq!(
        walk.iter().map(|s| s.entry.index()).collect::<Vec<_>>(),
        vec![0, 5]
    );
    // Classes without a list do not reroute.
    assert_eq!(
        reroute(&c, chain, &record, 1, Class::Overloaded, &open),
        None
    );
    // Health decides: a closed-off list entry is passed over.
    let mut closed = FakeHealth::default();
    closed.gates.insert(2.into(), Admission::BreakerOpen);
    let walk = reroute(&c, chain, &record, 1, Class::ContextWindowExceeded, &closed).unwrap();
    assert_eq!(
        walk.iter().map(|s| s.entry.index()).collect::<Vec<_>>(),
        vec![0, 4]
    );
}

#[test]
fn reroute_skips_a_list_entry_whose_budget_is_spent_as_planning_does() {
    // `big` has a budget and it is spent: planning would never try it, nor may a reroute.
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"big","budget":{"tokens":10,"window":"24h"}},
            {"name":"huge"}],
        "chains":[{"name":"main","providers":["a"],"max_attempts":3,
          "context_window":["big","huge"]}]}"#,
    );
    let chain = &c.chains[0];
    let mut health = FakeHealth::default();
    let p = plan(&c, &facts("m"), &health).unwrap();
    let record = record_of(&p, chain);
    health.spent.insert("big", 86_400_000);
    let walk = reroute(&c, chain, &record, 1, Class::ContextWindowExceeded, &health).unwrap();
    assert_eq!(
        walk.iter().map(|s| s.entry.index()).collect::<Vec<_>>(),
        vec![0, 2],
        "the spent `big` is passed over for `huge`"
    );
    assert_eq!(
        reads(&health),
        vec![0, 2],
        "the spent provider's health is not read"
    );
}

#[test]
fn reroute_inside_a_list_moves_on_and_respects_the_limit() {
    let c = config(
        r#"{"providers":[{"name":"a"},{"name":"big"},{"name":"huge"}],
        "chains":[{"name":"main","providers":["a"],"max_attempts":2,
          "context_window":["a","big","huge"]}]}"#,
    );
    let chain = &c.chains[0];
    let p = plan(&c, &facts("m"), &FakeHealth::default()).unwrap();
    assert_eq!(
        p.attempt_limit(chain),
        2,
        "one provider plus room for the list"
    );
    let record = record_of(&p, chain);
    let open = FakeHealth::default();
    // `a` with the same model was tried already: skipped in the list; the limit keeps one.
    let walk = reroute(&c, chain, &record, 1, Class::ContextWindowExceeded, &open).unwrap();
    assert_eq!(
        walk.iter().map(|s| s.entry.index()).collect::<Vec<_>>(),
        vec![0, 2]
    );
    // Failing the same way inside the list: the limit is reached, nothing follows.
    let second = Walk {
        slots: &walk,
        ..record
    };
    let walk = reroute(&c, chain, &second, 2, Class::ContextWindowExceeded, &open).unwrap();
    assert_eq!(walk.len(), 2);
}

const XV: &str = r#"{"providers":[{"name":"o","api":"openai"},{"name":"a","api":"anthropic"},
    {"name":"small"},{"name":"big"}],
    "chains":[{"name":"main","max_attempts":4,"providers":[
      {"provider":"small","capabilities":{"vision":false,"tools":false}},
      {"provider":"o","capabilities":{"vision":false}},
      {"provider":"a","model":"claude","capabilities":{"tools":false}},
      {"provider":"big","capabilities":{"context_window":100}}],
      "context_window":[{"provider":"big","model":"huge","capabilities":{"vision":false}}]}]}"#;

fn xv(content: Content) -> RequestFacts<'static> {
    RequestFacts {
        model: "m",
        path: Some("/v1/chat/completions"),
        api: Some(Api::OpenAiChat),
        content,
        ..Default::default()
    }
}

#[test]
fn entries_that_cannot_take_the_request_are_skipped_never_the_first() {
    let c = config(XV);
    let health = FakeHealth::default();
    let images = xv(Content {
        images: true,
        text_bytes: 1000,
        ..Default::default()
    });
    let p = plan(&c, &images, &health).unwrap();
    assert_eq!(entries(&p), vec![0, 2], "the first entry takes it anyway");
    assert_eq!(
        skips(&p.skipped),
        vec![
            (1, SkipReason::CapabilityVision),
            (3, SkipReason::CapabilityContext)
        ]
    );
    assert!(
        p.skip_before_start(&c.chains[0]).is_none(),
        "a content skip is no breaker fallback"
    );
    assert!(
        p.context_window.is_empty(),
        "a list entry without vision is not a candidate"
    );
    assert_eq!(reads(&health), vec![2, 1], "skipped entries read no health");
    let tools = xv(Content {
        tools: true,
        ..Default::default()
    });
    let p = plan(&c, &tools, &FakeHealth::default()).unwrap();
    assert_eq!(entries(&p), vec![0, 1, 3]);
    assert_eq!(skips(&p.skipped), vec![(2, SkipReason::CapabilityTools)]);
    assert_eq!(ids(&p.context_window), vec![4]);
    // A plain request goes everywhere, as before.
    let p = plan(&c, &xv(Content::default()), &FakeHealth::default()).unwrap();
    assert_eq!(entries(&p), vec![0, 1, 2, 3]);
    assert!(p.skipped.is_empty());
}

#[test]
fn an_open_first_entry_is_still_the_first_the_others_are_checked() {
    let c = config(XV);
    let mut health = FakeHealth::default();
    health.gates.insert(2.into(), Admission::BreakerOpen);
    let images = xv(Content {
        images: true,
        ..Default::default()
    });
    let p = plan(&c, &images, &health).unwrap();
    assert_eq!(entries(&p), vec![2, 3]);
    assert_eq!(
        skips(&p.skipped),
        vec![
            (0, SkipReason::BreakerOpen),
            (1, SkipReason::CapabilityVision)
        ]
    );
}

#[test]
fn another_api_without_a_translation_is_content_incompatible() {
    let c = config(XV);
    let embeddings = RequestFacts {
        path: Some("/v1/embeddings"),
        api: None,
        ..xv(Content::default())
    };
    let p = plan(&c, &embeddings, &FakeHealth::default()).unwrap();
    assert_eq!(
        entries(&p),
        vec![0, 1, 3],
        "undeclared providers pass through, an `openai` one takes OpenAI's endpoints"
    );
    assert_eq!(
        skips(&p.skipped),
        vec![(2, SkipReason::ContentIncompatible)]
    );
    // A Responses request goes to the `openai` entry as it is (it was skipped too), and is
    // translated for the Anthropic one.
    let responses = RequestFacts {
        path: Some("/v1/responses"),
        api: Some(Api::OpenAiResponses),
        body: br#"{"model":"m","input":"hi"}"#,
        ..embeddings
    };
    let p = plan(&c, &responses, &FakeHealth::default()).unwrap();
    assert_eq!(entries(&p), vec![0, 1, 2, 3]);
}

/// `same_residency` where the file cannot decide: the first entry serves `gpt-*` only.
const RESIDENT: &str = r#"{"providers":[{"name":"us1","models":["gpt-*"],"residency":"us"},
    {"name":"eu1","residency":"eu"},{"name":"us2","residency":"us"},
    {"name":"eu2","residency":"eu"},{"name":"gemini","api":"gemini",
     "path_prefix":"/v1/projects/p/locations/europe-west4/endpoints/openapi"}],
    "chains":[{"name":"main","same_residency":true,"max_attempts":5,
      "providers":["us1","eu1","us2","eu2","gemini"],
      "context_window":["eu2","us2"]}]}"#;

#[test]
fn same_residency_keeps_the_walk_in_the_first_entrys_residency() {
    let c = config(RESIDENT);
    let facts = |model| RequestFacts {
        model,
        path: Some("/v1/chat/completions"),
        api: Some(Api::OpenAiChat),
        ..Default::default()
    };
    let health = FakeHealth::default();
    let p = plan(&c, &facts("gpt-4o"), &health).unwrap();
    assert_eq!(entries(&p), vec![0, 2], "us1, then us2");
    assert_eq!(
        skips(&p.skipped),
        vec![
            (1, SkipReason::Residency),
            (3, SkipReason::Residency),
            (4, SkipReason::Residency)
        ]
    );
    assert_eq!(
        reads(&health),
        vec![0, 2],
        "a skipped entry's health is not read"
    );
    assert_eq!(ids(&p.context_window), vec![6], "the list's us2 only");
    // us1 does not serve the model: eu1 is the request's first entry, Gemini on Vertex
    // AI in europe-west4 is in its residency.
    let p = plan(&c, &facts("mistral"), &FakeHealth::default()).unwrap();
    assert_eq!(entries(&p), vec![1, 3, 4]);
    assert_eq!(
        skips(&p.skipped),
        vec![(0, SkipReason::Model), (2, SkipReason::Residency)]
    );
    assert_eq!(ids(&p.context_window), vec![5]);
    // An open first entry is still the request's first: the walk stays in its residency.
    let mut health = FakeHealth::default();
    health.gates.insert(0.into(), Admission::BreakerOpen);
    let p = plan(&c, &facts("gpt-4o"), &health).unwrap();
    assert_eq!(entries(&p), vec![2]);
    // Without same_residency nothing is skipped for it.
    let c = config(&RESIDENT.replace(r#""same_residency":true,"#, ""));
    let p = plan(&c, &facts("gpt-4o"), &FakeHealth::default()).unwrap();
    assert_eq!(entries(&p), vec![0, 1, 2, 3, 4]);
}

#[test]
fn reroute_without_a_list_or_candidates_is_none() {
    let c = config(THREE);
    let p = plan(&c, &facts("m"), &FakeHealth::default()).unwrap();
    let record = record_of(&p, &c.chains[0]);
    assert_eq!(
        reroute(
            &c,
            &c.chains[0],
            &record,
            1,
            Class::ContextWindowExceeded,
            &FakeHealth::default()
        ),
        None
    );
}
