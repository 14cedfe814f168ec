//! The status endpoint's answer (docs/behaviour.md section 10): every provider's health as JSON, read from the
//! shared health records, so one look tells a provider outage (breakers open, dead marks) from a
//! gateway outage (every provider healthy yet requests failing).
//!
//! ```json
//! {"now_ms": 1700000000000,
//!  "providers": [
//!   {"name": "primary", "cluster": "primary",
//!    "state": "open", "state_value": 1,
//!    "failures_in_window": 3, "failure_threshold": 3, "window_ms": 30000,
//!    "last_failure": {"class": "server_error", "at_ms": 1699999999000},
//!    "open_until_ms": 1700000059000, "probe_in_flight": false,
//!    "dead_until_ms": null,
//!    "dead_models": [{"model": "gpt-4o", "class": "model_not_found", "until_ms": 1700021600000}],
//!    "health": {"state": "failing", "state_value": 2, "attempts": 40, "failed": 31,
//!               "window_ms": 900000, "answered_last_5m": true, "last_answer_ms": 1699999990000},
//!    "budget": {"tokens": 2000000, "window_ms": 86400000, "spent": 128000, "left": 1872000,
//!               "exhausted": false, "resets_at_ms": 1700006400000},
//!    "tokens": {"window_ms": 900000, "input": 120000, "output": 8000, "cached_input": 64000},
//!    "rate_limited_ahead": {"skipped_until_ms": 1700000020000, "announced_at_ms": 1699999999000,
//!               "spent": "requests", "requests_remaining": 0, "tokens_remaining": 148000}}],
//!  "callers": [
//!   {"name": "team-a", "budget": {"tokens": 100000, "window_ms": 86400000, "spent": 100412,
//!               "left": 0, "exhausted": true, "resets_at_ms": 1700006400000}}]}
//! ```
//! With `fleet` configured, a last member `fleet` shows the fleet's store (docs/behaviour.md
//! section 15): `{"cluster", "domain", "state": "ok"|"unavailable"|"refused"|"unknown",
//! "since_ms", "last_sync_age_ms" (null: no answer yet), "budgets": [{"name", "tokens", "left",
//! "held" (tokens this Envoy spent and has not reported), "resets_at_ms"}]}`.
//! Times are milliseconds since the Unix epoch; `null` means "none". `state` is `closed`, `open`
//! or `half_open` (`state_value` 0, 1, 2: the `llm_failover_breaker_state` gauge). `health` is
//! the provider over the last 15 minutes (the current minute and the 14 before it): `healthy`
//! (under 10% of attempts failed, or fewer than 5 attempts), `degraded` (10% to under 50%),
//! `failing` (50% or more) or `idle` (no attempts) (`state_value` 0 to 3: the
//! `llm_failover_health_state` gauge); an answer is a success or a refusal of the caller's
//! request (`health::tally::counts`). A worker's successes show up to a second late.
//! `budget` is the provider's token budget (`null` without one, docs/behaviour.md section 15):
//! what its current window spent, what is left, and when the window rolls over (`exhausted`:
//! it is skipped until then).
//! `callers` (only when the file names callers) is each named caller's own token budget, in
//! the same form (`exhausted`: its requests are refused until `resets_at_ms`).
//! `tokens` is what the provider's answers cost over the same 15 minutes (docs/behaviour.md
//! section 15; `cached_input` is part of `input`), up to a second late as well.
//! `hedges` (only when a chain has `hedge_after`) counts the provider's attempts in hedged
//! races since this Envoy started: `{"won": 3, "lost": 12, "failed": 0}` (docs/behaviour.md
//! section 5, hedging).
//! `rate_limited_ahead` is the last announcement of a spent rate limit the provider's answers
//! made (`null`: none since this Envoy started; docs/behaviour.md section 4): when, which
//! dimension, what remained, and until when it is skipped (`null` once that passed).
//!
//! Cold code: [`render`] and what only it calls are `#[inline]`, compiled where
//! `roles::LocalAnswers::new` takes its address, which in the wasm module is the module crate
//! at opt-level "z" (BENCHMARKS.md "Module size").

use crate::announced::{Announced, SharedAnnouncements};
use crate::budget::{Budget, Budgets, Left};
use crate::config::{percent, Config, GroupPolicy};
use crate::health::{Health, HealthSnapshot, Recent, BUCKETS, BUCKET_MS};
use crate::host::SharedStore;
use crate::tokens::SharedTokens;
use crate::translate::json::Out;
use crate::usage::Usage;

/// Writes one provider's entry (members in the order the module's doc shows) but its last,
/// [`announced_status`], and leaves it open.
#[inline]
fn provider_status(
    out: &mut Out,
    name: &str,
    cluster: &str,
    config: &Config,
    s: HealthSnapshot,
    budget: Option<(&Budget, Left)>,
    used: Usage,
) {
    let opt = |out: &mut Out, n: Option<u64>| {
        match n {
            Some(n) => out.num(n),
            None => out.null(),
        };
    };
    out.open().key("name").str(name).key("cluster").str(cluster);
    out.key("state").str(s.state.as_str());
    out.key("state_value").num(s.state.metric_value().into());
    (out.key("failures_in_window")).num(s.failures_in_window.into());
    (out.key("failure_threshold")).num(config.breaker.failures.into());
    out.key("window_ms").num(config.breaker.window_ms);
    out.key("last_failure");
    match s.last_failure {
        Some((class, at_ms)) => {
            (out.open().key("class").str(class.as_str()))
                .key("at_ms")
                .num(at_ms)
                .close();
        }
        None => {
            out.null();
        }
    }
    opt(out.key("open_until_ms"), s.open_until_ms);
    out.key("probe_in_flight").bool(s.probe_in_flight);
    opt(out.key("dead_until_ms"), s.provider_dead_until_ms);
    out.key("dead_models").open_arr();
    for m in &s.dead_models {
        (out.open().key("model").str(&m.model))
            .key("class")
            .str(m.class.as_str())
            .key("until_ms")
            .num(m.until_ms)
            .close();
    }
    out.close_arr();
    recent_health(out.key("health"), s.recent);
    budget_status(out.key("budget"), budget);
    (out.key("tokens").open().key("window_ms"))
        .num(BUCKETS as u64 * BUCKET_MS)
        .key("input")
        .num(used.input)
        .key("output")
        .num(used.output)
        .key("cached_input")
        .num(used.cached_input)
        .close();
}

/// A provider's or a caller's token budget: what is left of it now (`null` without one).
#[inline]
fn budget_status(out: &mut Out, budget: Option<(&Budget, Left)>) {
    match budget {
        Some((b, left)) => {
            (out.open().key("tokens").num(b.tokens))
                .key("window_ms")
                .num(b.window_ms)
                .key("spent")
                .num(left.spent)
                .key("left")
                .num(left.tokens)
                .key("exhausted")
                .bool(left.exhausted())
                .key("resets_at_ms")
                .num(left.resets_at_ms)
                .close();
        }
        None => {
            out.null();
        }
    }
}

/// The provider's last announcement of a spent rate limit, and the end of its entry.
#[inline]
fn announced_status(out: &mut Out, ahead: Option<Announced>, now_ms: u64) {
    let opt = |out: &mut Out, n: Option<u64>| {
        match n {
            Some(n) => out.num(n),
            None => out.null(),
        };
    };
    out.key("rate_limited_ahead");
    match ahead {
        Some(a) => {
            out.open();
            opt(
                out.key("skipped_until_ms"),
                (a.until_ms > now_ms).then_some(a.until_ms),
            );
            (out.key("announced_at_ms").num(a.at_ms))
                .key("spent")
                .str(a.spent.as_str());
            opt(out.key("requests_remaining"), a.requests);
            opt(out.key("tokens_remaining"), a.tokens);
            out.close();
        }
        None => {
            out.null();
        }
    }
    out.close();
}

/// The fleet's store: its state, the last sync's age, and per budget counter what the fleet
/// has left and what this Envoy holds unreported.
#[inline]
fn fleet_status(out: &mut Out, f: &crate::config::Fleet, r: &crate::fleet::Report, now_ms: u64) {
    let sync = &r.sync;
    (out.open().key("cluster").str(&f.cluster))
        .key("domain")
        .str(&f.domain)
        .key("state")
        .str(sync.state.as_str())
        .key("since_ms")
        .num(sync.since_ms)
        .key("last_sync_age_ms");
    match sync.last_ok_ms {
        0 => out.null(),
        at => out.num(now_ms.saturating_sub(at)),
    };
    out.key("budgets").open_arr();
    for (c, left, held) in &r.budgets {
        (out.open().key("name").str(&c.name))
            .key("tokens")
            .num(c.budget.tokens)
            .key("left")
            .num(left.tokens)
            .key("held")
            .num(*held)
            .key("resets_at_ms")
            .num(left.resets_at_ms)
            .close();
    }
    out.close_arr().close();
}

/// Health over the last 15 minutes.
#[inline]
fn recent_health(out: &mut Out, r: Recent) {
    (out.open().key("state").str(r.state.as_str()))
        .key("state_value")
        .num(r.state.metric_value().into())
        .key("attempts")
        .num(r.attempts.into())
        .key("failed")
        .num(r.failed.into())
        .key("window_ms")
        .num(BUCKETS as u64 * BUCKET_MS)
        .key("answered_last_5m")
        .bool(r.answered_recently)
        .key("last_answer_ms");
    match r.last_answer_ms {
        Some(n) => out.num(n),
        None => out.null(),
    }
    .close();
}

/// The whole answer: one read of each provider's record, in configuration order.
/// (And of its token record and its announcement record, in the same shared data.)
#[inline]
pub fn render(
    config: &Config,
    health: &Health,
    budgets: &dyn Budgets,
    tokens: &SharedTokens,
    now_ms: u64,
) -> String {
    let mut out = Out::with_capacity(1024 * config.providers.len().max(1));
    out.open()
        .key("now_ms")
        .num(now_ms)
        .key("providers")
        .open_arr();
    let announcements = SharedAnnouncements {
        store: tokens.store,
    };
    let hedging = config.chains.iter().any(|c| c.hedge_after_ms.is_some());
    for p in &config.providers {
        let snapshot = health.snapshot(&p.name);
        let ahead = announcements.last(&p.name);
        let budget = (p.budget.as_ref()).map(|b| (b, budgets.left(&p.name, b)));
        let used = tokens.read(&p.name).recent(now_ms);
        provider_status(
            &mut out, &p.name, &p.cluster, config, snapshot, budget, used,
        );
        if hedging {
            hedge_status(out.key("hedges"), crate::hedge::read(tokens.store, &p.name));
        }
        announced_status(&mut out, ahead, now_ms);
    }
    out.close_arr();
    if !config.callers.is_empty() {
        out.key("callers").open_arr();
        for c in &config.callers {
            let budget = (c.budget.as_ref()).map(|b| (b, budgets.left(&c.counter, b)));
            out.open().key("name").str(&c.name);
            budget_status(out.key("budget"), budget);
            out.close();
        }
        out.close_arr();
    }
    if let Some(f) = &config.fleet {
        let clock = crate::host::FixedClock(now_ms);
        fleet_status(
            out.key("fleet"),
            f,
            &crate::fleet::report(config, tokens.store, &clock),
            now_ms,
        );
    }
    groups_status(&mut out, config, tokens.store);
    out.close();
    let mut text = pretty(&out.0);
    text.push('\n');
    text
}

/// A provider's hedged races (docs/behaviour.md section 5, hedging) since the Envoy started:
/// `{"won", "lost", "failed"}`; only with a hedging chain in the file.
#[inline]
fn hedge_status(out: &mut Out, counts: [u64; 3]) {
    out.open();
    for (outcome, n) in crate::hedge::Outcome::ALL.iter().zip(counts) {
        out.key(outcome.as_str()).num(n);
    }
    out.close();
}

/// The chains' groups (a member `null` when none): where each stands, how it picks, and each
/// member's share by weight, with its requests in flight for `least_busy`.
#[inline]
fn groups_status(out: &mut Out, config: &Config, store: &dyn SharedStore) {
    out.key("groups").open_arr();
    for chain in &config.chains {
        for g in &chain.groups {
            let position = chain.written_position(g.first);
            (out.open().key("chain").str(&chain.name))
                .key("position")
                .num(position as u64)
                .key("policy")
                .str(g.policy.as_str())
                .key("members")
                .open_arr();
            for (i, e) in chain
                .entries
                .get(g.members())
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                let name = config.provider(e.provider).map_or("", |p| p.name.as_str());
                out.open().key("provider").str(name).key("model");
                match &e.model {
                    Some(m) => out.str(m),
                    None => out.null(),
                };
                (out.key("weight")
                    .num(g.weights.get(i).copied().unwrap_or(0).into()))
                .key("share_percent")
                .raw(&percent(g.share_tenths(i)))
                .key("in_flight");
                if g.policy == GroupPolicy::LeastBusy {
                    out.num(crate::busy::in_flight(store, name).into());
                } else {
                    out.null();
                }
                out.close();
            }
            out.close_arr().close();
        }
    }
    out.close_arr();
}

/// Compact JSON (as [`Out`] writes it) indented as `serde_json::to_string_pretty` prints it:
/// two spaces a level, each member and element on its own line, `"name": value`, and `{}` or
/// `[]` for an empty object or array.
#[inline]
fn pretty(json: &[u8]) -> String {
    let mut out = Vec::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let line = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        out.resize(out.len() + 2 * depth, b' ');
    };
    let mut bytes = json.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        out.push(b);
        if in_string {
            (in_string, escaped) = (escaped || b != b'"', !escaped && b == b'\\');
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                if let Some(close) = bytes.next_if(|&c| c == b'}' || c == b']') {
                    out.push(close);
                } else {
                    depth += 1;
                    line(&mut out, depth);
                }
            }
            b'}' | b']' => {
                out.pop();
                depth = depth.saturating_sub(1);
                line(&mut out, depth);
                out.push(b);
            }
            b',' => line(&mut out, depth),
            b':' => out.push(b' '),
            _ => {}
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::SharedBudgets;
    use crate::classify::Class;
    use crate::health::Report;
    use crate::host::{Clock, ManualClock, MemoryStore};
    use serde_json::{json, Value};

    /// The endpoint's answer over `store` at `clock`'s time: health, budgets and tokens alike.
    fn render_at(config: &Config, store: &MemoryStore, clock: &ManualClock) -> String {
        let health = Health::new(store, clock, &config.breaker, &config.dead_marks);
        let budgets = SharedBudgets { store, clock };
        let tokens = SharedTokens { store, clock };
        render(config, &health, &budgets, &tokens, clock.now_ms())
    }

    fn status(config: &Config, store: &MemoryStore, clock: &ManualClock) -> Value {
        serde_json::from_str(&render_at(config, store, clock)).unwrap()
    }

    #[test]
    fn a_budget_says_what_is_left_and_when_its_window_rolls_over() {
        let config = Config::from_json(
            br#"{"providers":[{"name":"a","budget":{"tokens":100,"window":"10s"}},{"name":"b"}],
                "chains":[{"name":"main","providers":["a","b"]}]}"#,
            &|_| None,
        )
        .unwrap();
        let store = MemoryStore::default();
        let clock = ManualClock::at(1_234_000);
        let b = SharedBudgets {
            store: &store,
            clock: &clock,
        };
        b.spend("a", &config.providers[0].budget.unwrap(), 130);
        let v = status(&config, &store, &clock);
        assert_eq!(
            v["providers"][0]["budget"],
            json!({"tokens": 100, "window_ms": 10_000, "spent": 130, "left": 0,
                   "exhausted": true, "resets_at_ms": 1_240_000})
        );
        assert_eq!(v["providers"][1]["budget"], Value::Null);
        assert_eq!(v.get("callers"), None, "the file names no callers");
    }

    #[test]
    fn each_named_callers_budget_says_what_is_left() {
        let config = Config::from_json(
            br#"{"providers":[{"name":"a"}],"chains":[{"name":"main","providers":["a"]}],
                "caller_header":"x-team",
                "callers":[{"name":"team-a","budget":{"tokens":100,"window":"1m"}},{"name":"team-b"}]}"#,
            &|_| None,
        )
        .unwrap();
        let store = MemoryStore::default();
        let clock = ManualClock::at(90_000);
        let b = SharedBudgets {
            store: &store,
            clock: &clock,
        };
        b.spend("caller:team-a", &config.callers[0].budget.unwrap(), 30);
        let v = status(&config, &store, &clock);
        assert_eq!(
            v["callers"],
            json!([{"name": "team-a", "budget": {"tokens": 100, "window_ms": 60_000, "spent": 30,
                       "left": 70, "exhausted": false, "resets_at_ms": 120_000}},
                   {"name": "team-b", "budget": null}])
        );
    }

    #[test]
    fn reports_each_providers_tokens_over_fifteen_minutes() {
        let config = Config::from_json(
            br#"{"providers":[{"name":"a"},{"name":"b"}],"chains":[{"name":"main","providers":["a","b"]}]}"#,
            &|_| None,
        )
        .unwrap();
        let store = MemoryStore::default();
        let clock = ManualClock::at(BUCKET_MS * 100);
        let t = SharedTokens {
            store: &store,
            clock: &clock,
        };
        let used = Usage {
            input: 100,
            output: 20,
            cached_input: 60,
        };
        assert!(t.add("a", &used));
        clock.advance(BUCKET_MS * 3);
        assert!(t.add("a", &used));
        let v = status(&config, &store, &clock);
        assert_eq!(
            v["providers"][0]["tokens"],
            json!({"window_ms": 900_000, "input": 200, "output": 40, "cached_input": 120})
        );
        assert_eq!(v["providers"][1]["tokens"]["input"], 0);
        // Fifteen minutes after the first, only the second is left.
        clock.advance(BUCKET_MS * 12);
        let v = status(&config, &store, &clock);
        assert_eq!(v["providers"][0]["tokens"]["input"], 100);
    }

    #[test]
    fn reports_breaker_failures_and_dead_marks_per_provider() {
        let config = Config::from_json(
            br#"{"providers":[{"name":"a"},{"name":"b","cluster":"b_cluster"}],
                "chains":[{"name":"main","providers":["a","b"]}],
                "breaker":{"failures":2,"window":"30s","cooldown":"60s"}}"#,
            &|_| None,
        )
        .unwrap();
        let store = MemoryStore::default();
        let clock = ManualClock::at(1_000_000);
        let health = Health::new(&store, &clock, &config.breaker, &config.dead_marks);
        for p in &config.providers {
            health.ensure_record(&p.name);
        }
        health.report("a", "m", &Report::new(Class::ServerError, true));
        clock.advance(10);
        health.report("a", "m", &Report::new(Class::Overloaded, true));
        health.report("b", "gpt-x", &Report::new(Class::ModelNotFound, true));

        let v = status(&config, &store, &clock);
        assert_eq!(v["now_ms"], 1_000_010);
        let a = &v["providers"][0];
        assert_eq!(a["name"], "a");
        assert_eq!(a["state"], "open");
        assert_eq!(a["state_value"], 1);
        assert_eq!(a["failures_in_window"], 2);
        assert_eq!(a["failure_threshold"], 2);
        assert_eq!(a["last_failure"]["class"], "overloaded");
        assert_eq!(a["last_failure"]["at_ms"], 1_000_010);
        assert_eq!(a["open_until_ms"], 1_060_010);
        assert_eq!(a["probe_in_flight"], false);
        assert_eq!(a["dead_models"], json!([]));
        let b = &v["providers"][1];
        assert_eq!(b["cluster"], "b_cluster");
        assert_eq!(b["state"], "closed");
        assert_eq!(b["open_until_ms"], Value::Null);
        assert_eq!(b["dead_until_ms"], Value::Null);
        assert_eq!(b["last_failure"]["class"], "model_not_found");
        assert_eq!(
            b["dead_models"],
            json!([{"model": "gpt-x", "class": "model_not_found", "until_ms": 1_000_010 + 6 * 3_600_000}])
        );
        assert_eq!(
            a["health"],
            json!({"state": "healthy", "state_value": 0, "attempts": 2, "failed": 2,
                   "window_ms": 900_000, "answered_last_5m": false, "last_answer_ms": null})
        );
        // Three more failures and five answers: 5 of 10 failed.
        for _ in 0..3 {
            health.report("a", "m", &Report::new(Class::Timeout, true));
        }
        let mut held = crate::health::Pending::default();
        for _ in 0..5 {
            held.add(clock.now_ms());
        }
        assert!(health.add_answers("a", &held));
        let v = status(&config, &store, &clock);
        let h = &v["providers"][0]["health"];
        assert_eq!(
            (&h["state"], &h["state_value"]),
            (&json!("failing"), &json!(2))
        );
        assert_eq!((&h["attempts"], &h["failed"]), (&json!(10), &json!(5)));
        assert_eq!(h["answered_last_5m"], true);
        assert_eq!(h["last_answer_ms"], 1_000_010);
        assert_eq!(v["providers"][1]["health"]["state"], "healthy");
    }

    #[test]
    fn a_fresh_gateway_reports_every_provider_closed() {
        let config = Config::from_json(
            br#"{"providers":[{"name":"a"}],"chains":[{"name":"main","providers":["a"]}]}"#,
            &|_| None,
        )
        .unwrap();
        let store = MemoryStore::default();
        let clock = ManualClock::at(5);
        let text = render_at(&config, &store, &clock);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(
            text.find("\"name\"") < text.find("\"cluster\"")
                && text.find("\"cluster\"") < text.find("\"state\""),
            "fields keep their documented order: {text}"
        );
        assert_eq!(v["providers"][0]["state"], "closed");
        assert_eq!(v["providers"][0]["last_failure"], Value::Null);
        assert_eq!(v["providers"][0]["failures_in_window"], 0);
        assert_eq!(v["providers"][0]["health"]["state"], "idle");
    }

    #[test]
    fn indented_as_serde_json_prints_it() {
        // Members in sorted order, which a `Value` keeps: its pretty print is the oracle.
        for compact in [
            r#"{"a":1,"b":[],"c":{},"d":[{"e":null,"f":"x\"y\\","g":[1,2]},{}],"h":"{[,:]}"}"#,
            r#"{"now_ms":5,"providers":[]}"#,
            r#"[]"#,
            r#"{"a":{"b":{"c":[true,false,"\u0001é"]}}}"#,
        ] {
            let value: Value = serde_json::from_str(compact).unwrap();
            assert_eq!(
                pretty(compact.as_bytes()),
                serde_json::to_string_pretty(&value).unwrap(),
                "{compact}"
            );
        }
    }
}
