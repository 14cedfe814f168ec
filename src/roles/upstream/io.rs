//! What the upstream role does through Envoy ([`Io`]): reads the response body, applies the
//! attempt's header edits, answers an attempt past the time budget, and settles an attempt
//! (applies what `attempt::settle` decides: marker header, metrics, breaker report, attempt
//! log, outcome record).

use super::super::counting::Counting;
use super::super::{send_reply, text_property, Host, Map, SharedGatekeeper};
use super::{Current, Io};
use crate::announced;
use crate::attempt::{self, DelaySource, Marker, Outcome};
use crate::classify::Class;
use crate::config::Provider;
use crate::handoff::{self, Outcomes, Refused};
use crate::host::FixedClock;
use crate::ids::ProviderId;
use crate::plan::SkipReason;
use crate::translate::Api;
use crate::wire;

impl<H: Host> Io<H> {
    /// An attempt to `provider` started (`up`) or its stream ended: its requests in flight
    /// (`busy`, for `least_busy` groups).
    pub(super) fn count_in_flight(&self, provider: crate::ids::ProviderId, up: bool) {
        if let Some(p) = self.config.provider(provider) {
            crate::busy::count(&self.host, &p.name, up);
        }
    }

    /// `len` bytes of the response body from `at`.
    pub(super) fn read(&self, at: usize, len: usize) -> Vec<u8> {
        (self.host)
            .body_range(Map::Response, at, len)
            .unwrap_or_default()
    }

    /// Applies attempt `provider`'s header edits; returns the caller's headers the downstream
    /// role kept aside for some providers (`handoff::FORWARD`), when read.
    pub(super) fn edit_headers(
        &self,
        edits: &attempt::RequestEdits<'_>,
        provider: ProviderId,
    ) -> Option<Vec<u8>> {
        let (host, config) = (&self.host, &*self.config);
        for header in edits.clear {
            host.set_header(Map::Request, header, None);
        }
        let kept = (edits.forwarded)
            .then(|| host.property(handoff::FORWARD.as_bytes()))
            .flatten();
        for edit in (kept.iter()).flat_map(|k| {
            config
                .forwarding
                .attempt_edits(&config.providers, provider, k)
        }) {
            match (edit.value, edit.append) {
                (Some(value), true) => host.add_header_bytes(Map::Request, edit.name, value),
                (value, _) => host.set_header_bytes(Map::Request, edit.name, value),
            }
        }
        for (name, value) in edits.set {
            host.set_header(Map::Request, name, Some(value));
        }
        if let Some(authority) = edits.authority {
            host.set_header(Map::Request, ":authority", Some(authority));
        }
        if let Some(path) = &edits.path {
            host.set_header(Map::Request, ":path", Some(path));
        }
        if edits.drop_max_retries {
            host.set_header(Map::Request, wire::MAX_RETRIES_HEADER, None);
        }
        kept
    }

    /// Answers an attempt the time budget does not cover with the budget's answer: its
    /// provider (or the later ones) are skips for budget.
    pub(super) fn answer_total_time(&self, ended: &attempt::PastTotalTime, caller: Option<Api>) {
        let (host, config) = (&self.host, &*self.config);
        for &skipped in &ended.skipped {
            self.metrics
                .skipped(host, config, skipped, SkipReason::TotalTime);
        }
        self.log(true, |log| ended.write_log(config, log));
        host.set_property(handoff::REFUSED, &Refused::TotalTime.encode());
        send_reply(host, &ended.reply, caller);
    }

    /// Attempt `number` of a hedged request is a hedge (the first still runs,
    /// `hedge::is_hedge`): says so to the first attempt (`handoff::HEDGED`).
    pub(super) fn starts_hedge(&self, number: usize) -> bool {
        let host = &self.host;
        let first_recorded = number == 2
            && host
                .property(handoff::OUTCOMES.as_bytes())
                .is_some_and(|b| Outcomes::new(&b).of(1).is_some());
        let hedge = crate::hedge::is_hedge(number, first_recorded);
        if hedge {
            host.set_property(handoff::HEDGED, b"1");
        }
        hedge
    }

    /// An attempt of a hedged request that ended without an answer because the other one's
    /// went to the caller (Envoy reset it): settled as lost, for no breaker (behaviour.md 5,
    /// hedging). `false` for any other attempt, which settles as usual.
    pub(super) fn lost_race(&self, current: &Current) -> bool {
        let config = &*self.config;
        let Some(a) = current.attempt(config).filter(attempt::Attempt::hedged) else {
            return false;
        };
        let host = &self.host;
        let answered = (host.property(handoff::ANSWERED.as_bytes()))
            .and_then(|b| crate::hedge::parse_answered(&b));
        if !crate::hedge::lost(current.number, answered) {
            return false;
        }
        let lost = crate::hedge::Outcome::Lost;
        self.metrics.hedge(host, config, a.provider_id, lost);
        crate::hedge::count(host, host, &a.provider.name, lost);
        if a.slot.probe {
            // Its half-open probe told nothing: the next request may probe.
            let clock = FixedClock(host.now_ms());
            let gatekeeper = SharedGatekeeper::new(host, config, &self.metrics, &clock);
            gatekeeper.health().release_probe(&a.provider.name);
        }
        let elapsed = host.now_ms().saturating_sub(current.start_ms);
        self.log(true, |log| {
            crate::attempt_log::push_attempt(
                log,
                &a.provider.name,
                crate::hedge::Outcome::LOST_LOG,
                elapsed,
            )
        });
        true
    }

    /// A hedged request's attempt settled: whether its answer goes to the caller
    /// (`handoff::ANSWERED`, read by the other attempt and the downstream role) and, when it
    /// raced, `llm_failover_hedges_total`.
    fn settle_hedged(&self, current: &Current, a: &attempt::Attempt<'_, '_>, answers: bool) {
        let host = &self.host;
        if answers {
            let number = current.number.to_string();
            host.set_property(handoff::ANSWERED, number.as_bytes());
        }
        let raced = current.hedge
            || (current.number == 1 && host.property(handoff::HEDGED.as_bytes()).is_some());
        if raced {
            let outcome = crate::hedge::settled_outcome(answers);
            self.metrics
                .hedge(host, &self.config, a.provider_id, outcome);
            crate::hedge::count(host, host, &a.provider.name, outcome);
        }
    }

    /// Adds to the access log's attempt record (`started`: it has entries already).
    pub(super) fn log(&self, started: bool, write: impl FnOnce(&mut String)) {
        let mut log = self.log_so_far(started);
        write(&mut log);
        self.host
            .set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
    }

    /// The access log's attempt record so far (`started`: it has entries already).
    pub(super) fn log_so_far(&self, started: bool) -> String {
        match started {
            true => text_property(&self.host, wire::ATTEMPTS_PROPERTY.as_bytes()),
            // Room for the entry and, when it serves, its tokens (`Counting::finish`).
            false => None,
        }
        .unwrap_or_else(|| String::with_capacity(64))
    }

    /// Reads the rate limits an answer announces (its header map, `map`) and, when one is
    /// spent, skips `provider` until its reset (`announced`; docs/behaviour.md section 4).
    #[inline(never)]
    pub(super) fn note_announcement(&self, map: &[u8], provider: &Provider) {
        let (host, config) = (&self.host, &*self.config);
        let now = host.now_ms();
        let cap = config.dead_marks.rate_limited_ahead_ms;
        let headers = crate::header_pairs::HeaderPairs::new(map);
        let Some(found) = announced::read(headers, now, provider.reserve_tokens, cap) else {
            return;
        };
        let clock = FixedClock(now);
        // Planning reads the skip's end in the health record it reads anyway; the status
        // endpoint the announcement.
        let skipped =
            super::super::health(config, host, &clock).skip_ahead(&provider.name, found.until_ms);
        let shared = announced::SharedAnnouncements { store: host };
        if skipped {
            shared.note(&provider.name, &found);
        }
    }

    /// Settles attempt `current` the first time only (`settled`): applies what
    /// `attempt::settle` decides (`provider_marker`: the provider's answer carried a header
    /// named like the retry marker; `delay`: read the delay it asked for). Returns what it did
    /// with the retry marker and, when the answer goes to the caller, its [`Counting`] (the
    /// attempt log is then written when the answer ends, with its tokens).
    #[inline(never)]
    pub(super) fn settle(
        &self,
        settled: &mut bool,
        current: Option<&Current>,
        provider_marker: bool,
        class: Class,
        status: Option<u16>,
        delay: bool,
    ) -> (Marker, Option<Counting>) {
        let (host, config, metrics) = (&self.host, &*self.config, &*self.metrics);
        let first = !std::mem::replace(settled, true);
        let Some((current, a)) =
            (current.filter(|_| first)).and_then(|c| Some((c, c.attempt(config)?)))
        else {
            return (Marker::Untouched, None);
        };
        let source = attempt::delay_source(class);
        let map = || host.header_map(Map::Response);
        let retry_after = || host.header(Map::Response, "retry-after");
        let retry_after_ms = (delay && source != DelaySource::Nothing)
            .then(|| attempt::requested_delay(source, host.now_ms(), map, retry_after))
            .flatten();
        let now = host.now_ms();
        // An in-place retry's first try: the request counts once toward the breaker.
        let first_try = attempt::is_retry_in_place(&a)
            .then(|| host.property(handoff::OUTCOMES.as_bytes()))
            .flatten()
            .and_then(|bytes| Outcomes::new(&bytes).of(current.number - 1));
        let outcome = Outcome {
            class,
            status,
            retry_after_ms,
            first_try,
        };
        let clock = FixedClock(now);
        let gatekeeper = SharedGatekeeper::new(host, config, metrics, &clock);
        let settled = attempt::settle(config, &a, outcome, now, current.start_ms, &gatekeeper);
        let health = gatekeeper.health();
        metrics.attempt(host, config, settled.provider, class);
        if let Some(walk) = &settled.reroute {
            // Published before the router retries: the matcher reads the next clusters from
            // the slot properties, the next upstream role its slot from the plan.
            for (property, cluster) in attempt::rerouted_slots(config, &a, walk) {
                host.set_property(property, cluster.as_bytes());
            }
            let record = attempt::rerouted_plan(&a, walk);
            host.set_property(handoff::PLAN, record.as_bytes());
        }
        if let Some(wait) = settled.retry_in_place_after_ms {
            let at = now.saturating_add(wait).to_string();
            host.set_property(handoff::RETRY_AT, at.as_bytes());
        }
        if let Some(value) = settled.marker_header(provider_marker) {
            // The route's retry policy retries answers marked "1"; a provider's own copy goes.
            host.set_header(Map::Response, wire::RETRY_MARKER_HEADER, value);
        }
        if let Some((from, to)) = settled.fallback {
            metrics.fallback(host, config, from, to);
            // Debug, not info: during an outage this would be a log line per request,
            // exactly when the gateway is busiest; metrics and access logs carry it.
            log::debug!(
                "{} answered {}; falling over to {}",
                a.provider.name,
                class.as_str(),
                config.provider(to).map_or("", |p| p.name.as_str())
            );
        }
        if let Some((model, report)) = &settled.report {
            // The answers this worker holds for the provider ride along in the same write.
            let held = metrics.take_answers(settled.provider);
            let effect = health.report_with(&a.provider.name, model, report, &held);
            metrics.breaker_state(host, settled.provider, effect.state);
            if effect.counted && config.breaker.fleet_failures > 0 {
                crate::fleet::count_failure(host, host, &a.provider.name);
            }
            log::debug!("{} {} -> {:?}", a.provider.name, class.as_str(), effect);
        } else if let Some(earlier) = metrics.hold_answer(settled.provider, now) {
            // A success that changes nothing but the tally: held, written once a minute at most
            // from here (the tick writes the rest).
            health.add_answers(&a.provider.name, &earlier);
        }
        for &skipped in &settled.time_skips {
            metrics.skipped(host, config, skipped, SkipReason::TotalTime);
        }
        let hedged = a.hedged();
        if hedged {
            let answers = crate::hedge::answers(status, settled.marker == Marker::Set);
            self.settle_hedged(current, &a, answers);
        }
        if settled.records_outcome() {
            let previous =
                (current.number > 1).then(|| host.property(handoff::OUTCOMES.as_bytes()));
            let record =
                Outcomes::new(&previous.flatten().unwrap_or_default()).with(current.number, class);
            host.set_property(handoff::OUTCOMES, &record);
        }
        let mut log = self.log_so_far(a.log_started());
        let own = log.len();
        settled.write_log(config, &mut log);
        let dialect = (class == Class::Ok).then(|| a.usage_dialect());
        match (dialect, settled.marker) {
            // Its answer goes to the caller: what it cost is read as it passes.
            (Some(dialect), marker) if marker != Marker::Set => {
                let team = a.plan.team;
                let slot =
                    metrics.token_slot(host, config, settled.provider, a.usage_model(), team);
                let mut counting = Counting::new(dialect, log, slot, settled.provider, team);
                if hedged {
                    // The loser's entry may join the log before this answer ends.
                    counting.merge_from(own);
                }
                (marker, Some(counting))
            }
            (_, marker) => {
                host.set_property(wire::ATTEMPTS_PROPERTY, log.as_bytes());
                (marker, None)
            }
        }
    }
}
