//! Building one request's chain before its first attempt (docs/behaviour.md section 2). The form the plan
//! travels in to every attempt is `handoff::PlanRecord`.

use crate::budget::Budgets;
use crate::classify::Class;
use crate::config::{any_matches, AltList, Chain, ChainEntry, Config, Provider, Team};
use crate::eligible;
pub use crate::eligible::{RequestFacts, SkipReason};
use crate::health::Admission;
use crate::ids::{ChainId, EntryId, ProviderId};
use crate::reply::Reply;

/// Reads (and for half-open breakers, claims) provider health; implemented over shared data.
pub trait Gatekeeper {
    fn gate(&self, provider: ProviderId, model: &str) -> Admission;
    /// Where providers' token budgets are counted (`budget::Budgets`); `None`: none is read
    /// (`explain`, which knows no run-time state).
    fn budgets(&self) -> Option<&dyn Budgets> {
        None
    }
    /// A random number for this request's group picks (`pick::order`); 0 where none is drawn
    /// (`explain`: the weights' first member order).
    fn draw(&self) -> u64 {
        0
    }
    /// Requests in flight to `provider` across every worker, for `least_busy` groups.
    fn in_flight(&self, _provider: ProviderId) -> u32 {
        0
    }
}

/// One planned attempt: which chain entry, and what the health read said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The chain entry this attempt uses.
    pub entry: EntryId,
    pub pristine: bool,
    pub probe: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub chain: ChainId,
    pub slots: Vec<Slot>,
    /// Entries left out before the first attempt, in chain order.
    pub skipped: Vec<(EntryId, SkipReason)>,
    /// Entries of the chain's `context_window` list this request may use (model and caller
    /// checked; health is read only if the walk goes there).
    pub context_window: Vec<EntryId>,
    /// The same for the `content_policy` list.
    pub content_policy: Vec<EntryId>,
    /// The caller's team (`caller_header` among the named callers), found once.
    pub team: Team,
}

impl Plan {
    /// Attempts Envoy may make for this request (`x-envoy-max-retries` + 1): the planned slots,
    /// or, when the request may switch to an alternative list, room for the longest list
    /// after the last slot, within `max_attempts`.
    pub fn attempt_limit(&self, chain: &Chain) -> usize {
        let longest = self.context_window.len().max(self.content_policy.len());
        // With in-place retry each planned provider may be tried twice (behaviour.md 5).
        let retries = if chain.retry_in_place.is_some() {
            self.slots.len()
        } else {
            0
        };
        if longest == 0 && retries == 0 {
            return self.slots.len();
        }
        (self.slots.len() + longest + retries)
            .min(chain.max_attempts)
            .max(self.slots.len())
    }

    /// When this request's second attempt starts beside its first (ms; behaviour.md 5,
    /// hedging): its chain's `hedge_after`, for a plan of two slots.
    pub fn hedge_after(&self, chain: &Chain) -> Option<u64> {
        chain.hedge_after_ms.filter(|_| self.slots.len() == 2)
    }

    /// The provider planned for attempt `attempt` (1-based, as Envoy counts).
    pub fn slot(&self, attempt: usize) -> Option<&Slot> {
        slot_for_attempt(&self.slots, attempt)
    }

    /// When the first planned provider is not the chain's first eligible one because an open
    /// breaker, a dead mark, a spent budget or an announced empty rate limit moved it: its
    /// `x-llm-fallback-reason`, `budget_exhausted` (`rate_limited_ahead`) when only spent
    /// budgets (announcements) moved it, else `breaker_open`. A group member left out while
    /// another member of its group serves moved nothing: the position served.
    pub fn skip_before_start(&self, chain: &Chain) -> Option<&'static str> {
        let start = chain.position(self.slots.first()?.entry);
        let mut before = (self.skipped.iter())
            .filter(|(e, r)| *r != SkipReason::Model && chain.position(*e) < start)
            .map(|(_, r)| *r);
        let first = before.next()?;
        let waits = matches!(
            first,
            SkipReason::BudgetExhausted | SkipReason::RateLimitedAhead
        );
        Some(if waits && before.all(|r| r == first) {
            first.as_str()
        } else {
            "breaker_open"
        })
    }
}

/// A request planning refused: the reply, and the chain entries it left out on the way (the
/// `circuit_open` case skips every provider; metrics count those skips).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reply: Reply,
    /// The chain that matched, if one did.
    pub chain: Option<ChainId>,
    pub skipped: Vec<(EntryId, SkipReason)>,
    /// When to come back (ms since the epoch): a `budget_exhausted` or `rate_limited_ahead`
    /// refusal's earliest window end or reset (`Retry-After`).
    pub retry_at_ms: Option<u64>,
}

impl Refusal {
    fn bare(reply: Reply) -> Refusal {
        Refusal {
            reply,
            chain: None,
            skipped: Vec::new(),
            retry_at_ms: None,
        }
    }
}

/// Chooses the chain for a request and the providers it may try, in order.
pub fn plan(config: &Config, facts: &RequestFacts, health: &dyn Gatekeeper) -> Result<Plan, Reply> {
    plan_or_refuse(config, facts, health).map_err(|r| r.reply)
}

/// [`plan`], keeping what a refusal skipped.
pub fn plan_or_refuse(
    config: &Config,
    facts: &RequestFacts,
    health: &dyn Gatekeeper,
) -> Result<Plan, Refusal> {
    let (chain_index, chain) = chain_for(config, facts)?;
    let team = config.team(facts.caller);
    if let Some(refusal) = caller_spent(config, chain_index, team, health) {
        return Err(refusal);
    }
    // A request without a model (a GET for a stored object, say) goes to the first provider
    // that can take it: another provider would not know what it asks about (behaviour.md 12).
    let limit = if facts.no_fallback || facts.model.is_empty() {
        1
    } else if chain.hedge_after_ms.is_some() {
        // A hedged request is its two racing attempts (behaviour.md 5, hedging).
        chain.max_attempts.min(2)
    } else {
        chain.max_attempts
    };
    let mut slots = Vec::with_capacity(limit.min(chain.entries.len()));
    let mut skipped = Vec::new();
    let mut deferred = Vec::new();
    let mut serving = 0usize;
    // The earliest window end or announced reset of the providers found spent.
    let mut back: Option<u64> = None;

    // The provider of the first entry that serves the model: never skipped for what the
    // request carries (behaviour.md 2.4).
    let mut first = None;
    let checked = eligible::Checked::default();
    for (index, entry) in walk_order(chain, health) {
        let Some(provider) = config.provider(entry.provider) else {
            continue;
        };
        // Full: later providers serving the model are neither read nor counted as skipped.
        let full = slots.len() >= limit;
        let reason = if full {
            (!eligible::serves(provider, entry, facts)).then_some(SkipReason::Model)
        } else {
            eligible::skip_reason(config, chain, entry, facts, first, &checked)
        };
        if let Some(reason) = reason {
            skipped.push((index, reason));
            continue;
        }
        serving += 1;
        if full {
            break;
        }
        let sent_model = entry.model.as_deref().unwrap_or(facts.model);
        if first.is_none() {
            if let Some(reply) = eligible::first_entry_refusal(provider, facts, &checked) {
                return Err(Refusal {
                    reply,
                    chain: Some(chain_index),
                    skipped,
                    retry_at_ms: None,
                });
            }
            first = Some(entry.provider);
        }
        let admission = match admit(provider, entry.provider, sent_model, health) {
            Ok(admission) => admission,
            Err((reason, at)) => {
                // Spent: never tried, not even last; back when its window rolls over (its
                // announced reset).
                skipped.push((index, reason));
                back = Some(back.map_or(at, |b| b.min(at)));
                continue;
            }
        };
        match admission {
            Admission::Available { pristine, probe } => slots.push(Slot {
                entry: index,
                pristine,
                probe,
            }),
            Admission::BreakerOpen => skip_or_defer(
                chain,
                index,
                SkipReason::BreakerOpen,
                &mut skipped,
                &mut deferred,
            ),
            Admission::Dead => {
                skip_or_defer(chain, index, SkipReason::Dead, &mut skipped, &mut deferred)
            }
            // `admit` returned it as an `Err`.
            Admission::RateLimitedAhead { .. } => {}
        }
    }
    if serving == 0 {
        return Err(Refusal {
            reply: Reply::model_not_allowed(facts.model, &chain.name),
            chain: Some(chain_index),
            skipped,
            retry_at_ms: None,
        });
    }
    for entry in deferred {
        if slots.len() >= limit {
            break;
        }
        slots.push(Slot {
            entry,
            pristine: false,
            probe: false,
        });
    }
    if slots.is_empty() {
        return Err(nothing_left(chain, chain_index, skipped, back));
    }
    let usable = |list: &[EntryId]| -> Vec<EntryId> {
        if facts.no_fallback {
            return Vec::new();
        }
        list.iter()
            .copied()
            .filter(|&e| {
                chain.entry(e).is_some_and(|entry| {
                    eligible::skip_reason(config, chain, entry, facts, first, &checked).is_none()
                })
            })
            .collect()
    };
    Ok(Plan {
        chain: chain_index,
        slots,
        skipped,
        context_window: usable(&chain.context_window),
        content_policy: usable(&chain.content_policy),
        team,
    })
}

/// The request's chain ([`select_chain`]), or the refusal when no chain serves it or the one
/// that does has no provider.
fn chain_for<'c>(
    config: &'c Config,
    facts: &RequestFacts,
) -> Result<(ChainId, &'c Chain), Refusal> {
    let Some((chain_index, chain)) = select_chain(config, facts) else {
        // A request that names no model (a GET, a body without one) asked for an endpoint this
        // gateway does not serve: say that, not that "" is an unknown model.
        return Err(Refusal::bare(if facts.model.is_empty() {
            Reply::route_not_found(facts.path.unwrap_or("/"))
        } else {
            Reply::model_not_recognized(facts.model)
        }));
    };
    if chain.entries.is_empty() {
        return Err(Refusal::bare(Reply::no_provider_configured(&chain.name)));
    }
    Ok((chain_index, chain))
}

/// The refusal of a caller whose own token budget is spent (docs/behaviour.md section 15):
/// before any provider is looked at (every one is spent for it), back when its window rolls
/// over. Reads nothing when the file names no callers.
fn caller_spent(
    config: &Config,
    chain: ChainId,
    team: Team,
    health: &dyn Gatekeeper,
) -> Option<Refusal> {
    let caller = config.caller(team)?;
    let left = health
        .budgets()?
        .left(&caller.counter, caller.budget.as_ref()?);
    left.exhausted().then(|| Refusal {
        reply: Reply::caller_budget_exhausted(&caller.name),
        chain: Some(chain),
        skipped: Vec::new(),
        retry_at_ms: Some(left.resets_at_ms),
    })
}

/// The chain's own entries in the order this request considers them: chain order, each group's
/// members in the order `pick::order` draws for it (behaviour.md 2.10). A chain without groups
/// draws nothing.
fn walk_order<'a>(
    chain: &'a Chain,
    health: &'a dyn Gatekeeper,
) -> impl Iterator<Item = (EntryId, &'a ChainEntry)> + 'a {
    let mut next = 0usize;
    let mut group: Option<(usize, crate::pick::Order, usize)> = None;
    std::iter::from_fn(move || loop {
        if let Some((first, order, k)) = &mut group {
            match order.members().get(*k) {
                Some(&m) => {
                    *k += 1;
                    return with_entry(chain, *first + usize::from(m));
                }
                None => group = None,
            }
        }
        if next >= chain.main_len {
            return None;
        }
        let here = next;
        let Some(g) = chain.groups.iter().find(|g| g.first == here) else {
            next += 1;
            return with_entry(chain, here);
        };
        next = g.members().end;
        let busy =
            |i: usize| (chain.entries.get(g.first + i)).map_or(0, |e| health.in_flight(e.provider));
        group = Some((g.first, crate::pick::order(g, health.draw(), busy), 0));
    })
}

/// The chain's entry at `index`, with its id.
fn with_entry(chain: &Chain, index: usize) -> Option<(EntryId, &ChainEntry)> {
    let id = EntryId::new(index)?;
    Some((id, chain.entry(id)?))
}

/// The refusal when planning left no provider: every one spent its budget (or announced its
/// rate limit spent) is a 429 saying when to come back (`back`: the earliest); some spent and
/// the others open or dead, the breakers' answer.
fn nothing_left(
    chain: &Chain,
    chain_index: ChainId,
    skipped: Vec<(EntryId, SkipReason)>,
    back: Option<u64>,
) -> Refusal {
    let all_spent =
        !(skipped.iter()).any(|(_, r)| matches!(r, SkipReason::BreakerOpen | SkipReason::Dead));
    let announced = (skipped.iter()).any(|(_, r)| *r == SkipReason::RateLimitedAhead);
    let (reply, retry_at_ms) = match back {
        Some(at) if all_spent && announced => (Reply::rate_limited_ahead(&chain.name), Some(at)),
        Some(at) if all_spent => (Reply::budget_exhausted(&chain.name), Some(at)),
        _ => (Reply::circuit_open(&chain.name), None),
    };
    Refusal {
        reply,
        chain: Some(chain_index),
        skipped,
        retry_at_ms,
    }
}

/// Whether planning may pick `provider` (id `id`, sent `model`) now: `Err` with the reason and
/// when it comes back when its token budget is spent (when its window rolls over) or its last
/// answer announced an empty rate limit (its reset, kept in its health record; never tried,
/// not even last), else what its health says (read only when the budget is not spent). The one check behind every provider planning picks:
/// the chain's entries before the first attempt ([`plan_or_refuse`]) and an alternative list's
/// on a reroute ([`reroute`]).
fn admit(
    provider: &Provider,
    id: ProviderId,
    model: &str,
    health: &dyn Gatekeeper,
) -> Result<Admission, (SkipReason, u64)> {
    if let (Some(budget), Some(budgets)) = (&provider.budget, health.budgets()) {
        let left = budgets.left(&provider.name, budget);
        if left.exhausted() {
            return Err((SkipReason::BudgetExhausted, left.resets_at_ms));
        }
    }
    match health.gate(id, model) {
        Admission::RateLimitedAhead { until_ms } => Err((SkipReason::RateLimitedAhead, until_ms)),
        admission => Ok(admission),
    }
}

/// After attempt `number` (1-based) ended with `class`: the walk from then on, when the class
/// sends it to one of the chain's alternative lists (behaviour.md 3). The attempts made so far are
/// kept; then come the list's entries this request may use (`record`'s candidates) that no
/// earlier attempt used with the same provider and model, admitted as the chain's are (budget,
/// then health: [`admit`]), up to the record's attempt limit. Walking a list and failing the
/// same way again moves on within that list. `None` when the class has no list in this chain
/// or the request none to use.
pub fn reroute(
    config: &Config,
    chain: &Chain,
    record: &Walk,
    number: usize,
    class: Class,
    health: &dyn Gatekeeper,
) -> Option<Vec<Slot>> {
    let list = AltList::for_class(class)?;
    let candidates = record.list(list);
    if chain.list(list).is_empty() || candidates.is_empty() {
        return None;
    }
    let tried = record.slots.get(..number).unwrap_or(record.slots);
    let entry = |e: EntryId| chain.entry(e);
    let mut walk: Vec<Slot> = tried.to_vec();
    for &candidate in candidates.iter() {
        if walk.len() >= record.limit() {
            break;
        }
        let used = walk.iter().any(|s| entry(s.entry) == entry(candidate));
        let Some((e, provider)) = (entry(candidate).filter(|_| !used))
            .and_then(|e| Some((e, config.provider(e.provider)?)))
        else {
            continue;
        };
        let model = e.model.as_deref().unwrap_or(record.model);
        if let Ok(Admission::Available { pristine, probe }) =
            admit(provider, e.provider, model, health)
        {
            walk.push(Slot {
                entry: candidate,
                pristine,
                probe,
            });
        }
    }
    Some(walk)
}

/// Slot of attempt `attempt`, counted from 1 as Envoy's `x-envoy-attempt-count` does.
pub fn slot_for_attempt(slots: &[Slot], attempt: usize) -> Option<&Slot> {
    attempt.checked_sub(1).and_then(|i| slots.get(i))
}

/// Whether attempt `attempt` (1-based) of a walk is a fallback: it takes another chain entry
/// than the attempt before it. An in-place retry (behaviour.md 5) takes the same entry again and is
/// no fallback. The one definition behind `x-llm-fallback-count`, the fallback metric and the
/// in-place retry's own test.
pub fn is_fallback(slots: &[Slot], attempt: usize) -> bool {
    let pair = attempt.checked_sub(2).and_then(|i| slots.get(i..i + 2));
    matches!(pair, Some([before, this]) if before.entry != this.entry)
}

/// How many of a walk's first `attempts` attempts are fallbacks ([`is_fallback`]), and the
/// last of them (0 when none).
#[inline(never)]
pub fn fallbacks(slots: &[Slot], attempts: usize) -> (usize, usize) {
    let mut found = (0, 0);
    for attempt in 2..=attempts {
        if is_fallback(slots, attempt) {
            found = (found.0 + 1, attempt);
        }
    }
    found
}

fn skip_or_defer(
    chain: &Chain,
    entry: EntryId,
    reason: SkipReason,
    skipped: &mut Vec<(EntryId, SkipReason)>,
    deferred: &mut Vec<EntryId>,
) {
    skipped.push((entry, reason));
    if chain.try_last {
        deferred.push(entry);
    }
}

/// The chain for a request: among the chains whose routes, paths and model patterns match it,
/// the first that names the request's caller, else the first that names no caller. A chain
/// naming other callers never matches. The chosen chain applies in full (no merging).
pub fn select_chain<'c>(config: &'c Config, facts: &RequestFacts) -> Option<(ChainId, &'c Chain)> {
    let path = facts.path.map(|p| p.split_once('?').map_or(p, |(p, _)| p));
    let mut generic = None;
    for (i, c) in config.chain_ids() {
        let fits = (c.routes.is_empty()
            || facts.route.is_some_and(|r| c.routes.iter().any(|x| x == r)))
            && (c.paths.is_empty() || path.is_some_and(|p| any_matches(&c.paths, p)))
            && any_matches(&c.models, facts.model);
        if !fits {
            continue;
        }
        if c.callers.is_empty() {
            if !config.caller_chains {
                // No chain names callers: the first match is the answer.
                return Some((i, c));
            }
            generic = generic.or(Some((i, c)));
        } else if facts
            .caller
            .is_some_and(|caller| c.callers.iter().any(|x| x == caller))
        {
            return Some((i, c));
        }
    }
    generic
}

/// What rerouting needs from a request's plan as the attempts see it (`handoff::PlanView`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk<'a> {
    /// The walk so far (attempt n uses `slots[n - 1]`).
    pub slots: &'a [Slot],
    /// Attempts Envoy may make for this request ([`Plan::attempt_limit`]).
    pub limit: usize,
    /// Candidates of the chain's alternative lists ([`Plan::context_window`]).
    pub context_window: &'a [EntryId],
    pub content_policy: &'a [EntryId],
    /// The request's model (sent to an entry that names none).
    pub model: &'a str,
}

impl Walk<'_> {
    /// Attempts Envoy may make for this request.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The candidates of one alternative list.
    pub fn list(&self, list: AltList) -> &[EntryId] {
        match list {
            AltList::ContextWindow => self.context_window,
            AltList::ContentPolicy => self.content_policy,
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod groups_tests;
