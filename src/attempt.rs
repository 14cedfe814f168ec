//! One attempt's decisions in the upstream role (docs/behaviour.md section 3, 4, 5 and 7), as pure functions
//! over facts: what to change on the request for attempt k, and, given its outcome, what to
//! report, whether to mark the answer for a retry, which fallback and budget skips to count, and
//! what to log. The glue reads the facts from Envoy and applies the results.
//!
//! Envoy shares one request header map across attempts, so every attempt overwrites whatever an
//! earlier attempt set (credentials, authority, path, content-length) instead of assuming it sees
//! the caller's original headers.

use crate::attempt_log;
use crate::classify::{classify_no_response, Class, NoResponse};
use crate::config::{Chain, ChainEntry, Config, Provider};
use crate::destination::{self, Refusal};
use crate::dialects::{self, StreamStart, BODY_PREFIX_LIMIT};
use crate::entry_settings::{self, EntrySettings};
use crate::envelope::Envelope;
use crate::handoff::{PlanRecord, PlanText, PlanView};
use crate::health::{Admission, Health};
use crate::health::{InPlace, Report};
use crate::ids::{EntryId, ProviderId};
use crate::pattern::ModelPattern;
use crate::plan::{self, Walk};
use crate::plan::{SkipReason, Slot};
use crate::reply::Reply;
use crate::rewrite;
use crate::translate::{self, Api};
use std::borrow::Cow;

/// What this attempt is: its number, the plan it belongs to, and the chain entry it serves.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'c, 'p> {
    /// 1-based, as Envoy counts (`x-envoy-attempt-count`).
    pub number: usize,
    pub plan: PlanView<'p>,
    pub slot: Slot,
    pub chain: &'c Chain,
    pub entry: &'c ChainEntry,
    pub provider_id: ProviderId,
    pub provider: &'c Provider,
    /// The attempt is sent in another API than the caller's (behaviour.md 13).
    pub translation: Option<Translation>,
}

/// An attempt translated for its provider: the request from the caller's API to the
/// provider's, the answer back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    pub caller: Api,
    pub provider: Api,
}

/// Attempt `number` of the plan read from filter state (`None`: it was there but unreadable),
/// or why it must be refused before anything is attached to it (docs/behaviour.md section 7, fail closed):
/// a plan from another configuration, an attempt the plan has no slot for (Envoy retrying past
/// the plan: the header map still holds the last provider's key), or entries this
/// configuration does not have.
pub fn admit<'c, 'p>(
    config: &'c Config,
    plan: Option<&'p PlanText>,
    number: usize,
) -> Result<Attempt<'c, 'p>, Refusal> {
    let running = config.fingerprint;
    let Some(plan) = plan.map(PlanText::view) else {
        return Err(Refusal::ConfigMismatch {
            planned: None,
            running,
        });
    };
    destination::check_config(Some(plan.config), running)?;
    if plan.slot(number).is_none() {
        // Past a walk that had room for an alternative list it did not take: the walk is over.
        let chain = config.chain(plan.chain);
        return Err(match chain {
            Some(c) if number > plan.len() && number <= plan.limit() => Refusal::WalkEnded {
                attempt: number,
                chain: c.name.clone(),
            },
            _ => Refusal::Unplanned { attempt: number },
        });
    }
    resolve(config, plan, number).ok_or(Refusal::ConfigMismatch {
        planned: Some(plan.config),
        running,
    })
}

/// Attempt `number` of `plan` under `config`; `None` when the plan has no such attempt or names
/// entries this configuration does not have. Inlined where the upstream role asks (each of its
/// callbacks does): out of line, as it was once it grew, a same-API request ran more
/// instructions (BENCHMARKS.md "Module size: room for the fourth wave").
#[inline]
pub fn resolve<'c, 'p>(
    config: &'c Config,
    plan: PlanView<'p>,
    number: usize,
) -> Option<Attempt<'c, 'p>> {
    let slot = plan.slot(number)?;
    let chain = config.chain(plan.chain)?;
    if !plan.slots().all(|s| chain.entry(s.entry).is_some()) {
        return None;
    }
    let entry = chain.entry(slot.entry)?;
    let provider = config.provider(entry.provider)?;
    // The plan names the caller's API only when its chain crosses APIs: same-API attempts
    // stop at this comparison.
    let translation = plan.caller_api.and_then(|caller| {
        let to = provider.translates(Some(caller), "")?;
        Some(Translation {
            caller,
            provider: to,
        })
    });
    Some(Attempt {
        number,
        plan,
        slot,
        chain,
        entry,
        provider_id: entry.provider,
        provider,
        translation,
    })
}

impl<'c, 'p> Attempt<'c, 'p> {
    /// The model this provider is sent (the chain entry's, else the one the caller asked for).
    pub fn model(&self) -> &'p str
    where
        'c: 'p,
    {
        self.entry.model.as_deref().unwrap_or(self.plan.model)
    }

    /// The attempt log already has entries (skips, or earlier attempts) to append to.
    pub fn log_started(&self) -> bool {
        self.plan.log_started || self.number > 1
    }

    /// The `model` label of the tokens this attempt's answer cost (docs/behaviour.md section
    /// 15): the model sent to the provider when configuration names it (the chain entry's
    /// `model`, or a model the chain or the provider lists by its name), else `other`, so that
    /// callers cannot grow the metric's label set by naming models a pattern lets through.
    pub fn usage_model(&self) -> &'p str
    where
        'c: 'p,
    {
        let model = self.model();
        let named = |patterns: &[ModelPattern]| {
            patterns
                .iter()
                .any(|p| matches!(p, ModelPattern::Exact(m) if m == model))
        };
        if self.entry.model.is_some() || named(&self.chain.models) || named(&self.provider.models) {
            model
        } else {
            OTHER_MODEL
        }
    }

    /// How the provider reports this attempt's usage: in its own dialect (a translated
    /// attempt's), else in the caller's, by the path called.
    /// `None`: a dialect whose usage is not read (Gemini's native API).
    pub fn usage_dialect(&self) -> Option<crate::usage::Dialect> {
        match self.translation {
            Some(t) => crate::usage::Dialect::of_api(t.provider),
            None => Some(crate::usage::Dialect::of_path(self.plan.path)),
        }
    }
}

/// The `model` label of tokens from a model no configuration names (see
/// [`Attempt::usage_model`]).
pub const OTHER_MODEL: &str = "other";

// ---------------------------------------------------------------------------------------------
// The request side.

/// What happens to the request body of this attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEdit<'a> {
    /// Forward it as it is.
    Keep,
    /// An earlier attempt may have rewritten the body and its length: restore the planned length.
    RestoreLength(u64),
    /// Hold the headers until the whole body is here, then write this model into it
    /// ([`rewrite_body`]) and set the new length.
    RewriteModel(&'a str),
    /// The same, with the entry's request settings written in too (the model when it
    /// rewrites one): [`rewrite_body`].
    Rewrite {
        model: Option<&'a str>,
        settings: SettingsEdit,
    },
    /// Hold the headers until the whole body is here, then translate it for the provider's
    /// API ([`translate_body`]) and set the new length.
    Translate(Translation),
    /// Hold the headers until the whole body is here, then put it in the provider's envelope
    /// ([`envelope_body`]: Bedrock's and Vertex's version field instead of `model`) and set
    /// the new length.
    Envelope(Envelope),
}

/// Everything attempt k changes on its request, in the order to apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestEdits<'a> {
    /// Removed first: every provider's credential and extra headers, and the caller's.
    pub clear: &'a [String],
    /// Then, when providers take different caller headers: put back this provider's share of
    /// them (`handoff::FORWARD`, applied with `config::forward::HeaderPolicy::attempt_edits`).
    pub forwarded: bool,
    /// Then set: this provider's own.
    pub set: &'a [(String, String)],
    /// New `:authority`, if any.
    pub authority: Option<&'a str>,
    /// New `:path`, if any.
    pub path: Option<Cow<'a, str>>,
    /// Remove `x-envoy-max-retries` (the router consumed it before the first attempt).
    pub drop_max_retries: bool,
    pub body: BodyEdit<'a>,
}

/// What to change on the request of attempt `a` (`end_of_stream`: the request has no body).
pub fn request_edits<'a>(
    config: &'a Config,
    a: &Attempt<'a, 'a>,
    end_of_stream: bool,
) -> RequestEdits<'a> {
    let later = a.number > 1;
    let authority = match &a.provider.authority {
        Some(authority) => Some(authority.as_str()),
        None if later => Some(a.plan.authority),
        None => None,
    };
    let path = provider_path(
        a.provider,
        a.translation.map(|t| t.provider),
        a.plan.path,
        a.model(),
        a.plan.stream,
    )
    .or_else(|| later.then_some(Cow::Borrowed(a.plan.path)));
    let has_body = a.plan.body_len > 0 && !end_of_stream;
    let envelope = a.provider.envelope.filter(|e| e.edits_body() && has_body);
    let rewrite_to = a
        .entry
        .model
        .as_deref()
        .filter(|m| *m != a.plan.model && has_body);
    // A translated attempt to an envelope's provider: translated, then put in the envelope
    // (the upstream role does both in one pause).
    let settings = settings_edit(a).filter(|_| has_body);
    let body = match (a.translation, envelope, rewrite_to, settings) {
        (Some(t), _, _, _) if has_body => BodyEdit::Translate(t),
        (_, Some(envelope), _, _) => BodyEdit::Envelope(envelope),
        (_, _, model, Some(settings)) => BodyEdit::Rewrite { model, settings },
        (_, _, Some(model), None) => BodyEdit::RewriteModel(model),
        _ if later => BodyEdit::RestoreLength(a.plan.body_len),
        _ => BodyEdit::Keep,
    };
    RequestEdits {
        clear: &config.cleared_headers,
        forwarded: !config.forwarding.uniform(),
        set: &a.provider.set_headers,
        authority,
        path,
        drop_max_retries: a.number == 1,
        body,
    }
}

/// The `:path` an attempt to `provider` goes out on, for a caller's request on `caller_path`
/// translated to `translated_to` (if at all), sending `model`, streamed or not; `None`: the
/// caller's path as it is. The upstream role sends it ([`request_edits`]) and `explain` prints
/// it: one place says where an attempt goes.
pub fn provider_path<'a>(
    provider: &Provider,
    translated_to: Option<Api>,
    caller_path: &'a str,
    model: &str,
    stream: bool,
) -> Option<Cow<'a, str>> {
    let prefix = provider.path_prefix.as_deref();
    // The provider API's endpoint when translated (the caller's query is for the caller's API).
    let endpoint = translated_to.map(Api::endpoint);
    match (provider.envelope, endpoint, prefix) {
        (Some(envelope), _, _) => Some(Cow::Owned(envelope.path(
            prefix,
            endpoint.unwrap_or(caller_path),
            model,
            stream,
        ))),
        (None, Some(endpoint), _) => {
            Some(Cow::Owned(format!("{}{endpoint}", prefix.unwrap_or(""))))
        }
        (None, None, Some(prefix)) => Some(Cow::Owned(format!("{prefix}{caller_path}"))),
        (None, None, None) => None,
    }
}

/// A chain entry's request settings and the API (dialect) of the body they are written into.
pub type SettingsEdit = (Api, EntrySettings);

/// What attempt `a`'s entry sends besides the model (`effort`, `max_tokens`), in the dialect
/// the provider gets: the translated API's, else the caller's (from its path). `None` when the
/// entry sets nothing, or for an endpoint that takes neither (embeddings).
pub fn settings_edit(a: &Attempt<'_, '_>) -> Option<SettingsEdit> {
    let settings = EntrySettings {
        stream: a.plan.gather,
        ..a.entry.settings
    };
    if settings.is_empty() {
        return None;
    }
    let dialect = match a.translation {
        Some(t) => t.provider,
        None => Api::of_path(a.plan.path)?,
    };
    Some((dialect, settings))
}

/// The body to send with `model` written in (and the entry's `settings`, when it has some):
/// `(new body, None when unchanged; content length)`. A body that is not a JSON object is
/// forwarded as it is. Without settings only the model's bytes change.
pub fn rewrite_body(
    body: &[u8],
    model: Option<&str>,
    settings: Option<&SettingsEdit>,
) -> (Option<Vec<u8>>, usize) {
    let rewritten = model.and_then(|model| {
        let scan = rewrite::scan_top_level(body).ok()?;
        rewrite::rewrite(body, &scan, Some(model), false)
    });
    let new_body = match settings {
        None => rewritten,
        Some((dialect, settings)) => {
            let base = rewritten.as_deref().unwrap_or(body);
            entry_settings::apply(base, *dialect, settings).or(rewritten)
        }
    };
    let len = new_body.as_ref().map_or(body.len(), Vec::len);
    (new_body, len)
}

/// The caller's body translated for attempt `a`'s provider (the entry's model written in, the
/// provider's `max_tokens` where Messages needs one), or the `400` the caller gets when it
/// cannot be (only the first entry can get here: planning skips the others, behaviour.md 2.4).
pub fn translate_body(a: &Attempt<'_, '_>, t: Translation, body: &[u8]) -> Result<Vec<u8>, Reply> {
    let cx = translate::RequestContext {
        model: a.entry.model.as_deref().unwrap_or(a.plan.model),
        default_max_tokens: a.provider.max_tokens,
        stream: a.plan.stream,
    };
    let translated = translate::request(t.caller, t.provider, body, &cx).map_err(|why| {
        let what = match why {
            translate::Untranslatable::NotJson => "the body is not a JSON object",
            translate::Untranslatable::Field(field) => field,
        };
        Reply::untranslatable(&a.provider.name, t.provider.as_str(), what)
    })?;
    // The entry's settings, in the provider's dialect (the translation re-wrote the body
    // already: this pays only for entries that set some).
    Ok(match settings_edit(a) {
        Some((dialect, settings)) => {
            entry_settings::apply(&translated, dialect, &settings).unwrap_or(translated)
        }
        None => translated,
    })
}

/// How a translated attempt's answer goes back to the caller (behaviour.md 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerTranslation {
    /// Held whole, then replaced by `translate::response` (its length changes: no
    /// `content-length`; JSON whatever the provider sent).
    Whole { status: u16 },
    /// A `200` event stream: each chunk through a `translate::StreamTranslator`.
    Stream,
}

/// How the answer of translated attempt `t` with `status` goes back to the caller;
/// `event_stream` reads whether it is an event stream.
pub fn answer_translation(status: u16, event_stream: impl FnOnce() -> bool) -> AnswerTranslation {
    if status == 200 && event_stream() {
        AnswerTranslation::Stream
    } else {
        AnswerTranslation::Whole { status }
    }
}

/// Translated attempt `t`'s whole `2xx` answer (`status`, `body`), decided (behaviour.md 16): a
/// `server_error` when it is no answer of the provider's API (the caller, if it gets it, gets
/// a `502` in its own API: [`UNREADABLE_STATUS`]), else a success, translated.
fn whole_answer(t: Translation, status: u16, body: &[u8], created: u64) -> Decided {
    let translated = translate::response(t.provider, t.caller, status, body, created);
    let (class, to_caller) = if translated.unreadable {
        (Class::ServerError, UNREADABLE_STATUS)
    } else {
        (Class::Ok, status)
    };
    Decided {
        class,
        status,
        read_delay: translated.unreadable,
        answer: Some(WholeAnswer {
            status: to_caller,
            body: translated.body,
        }),
    }
}

/// The body to send in `envelope` (`beta`: the caller's `anthropic-beta` header), the
/// entry's `settings` written in first: `(new body, None when unchanged; content length)`.
pub fn envelope_body(
    body: &[u8],
    envelope: Envelope,
    beta: Option<&str>,
    settings: Option<&SettingsEdit>,
) -> (Option<Vec<u8>>, usize) {
    let edited = settings.and_then(|(dialect, s)| entry_settings::apply(body, *dialect, s));
    let base = edited.as_deref().unwrap_or(body);
    let new_body = envelope.body(base, beta).or(edited);
    let len = new_body.as_ref().map_or(body.len(), Vec::len);
    (new_body, len)
}

/// An attempt Envoy started by itself (after a refused connection, a reset or a per-try
/// timeout) with less than `min_remaining` of the budget left: it never reaches its provider
/// (docs/behaviour.md section 5). Nothing is attached and no health is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastBudget {
    /// The answer instead: the last attempt's failure.
    pub reply: Reply,
    /// This attempt's provider and every later planned one: skips for budget.
    pub skipped: Vec<ProviderId>,
}

/// Whether attempt `a`, starting at `now_ms`, must be refused for the time budget.
/// `last_class` reads the previous attempt's recorded class (`handoff::Outcomes`); it is called
/// only for a refusal.
pub fn past_budget(
    config: &Config,
    a: &Attempt<'_, '_>,
    now_ms: u64,
    last_class: impl FnOnce() -> Option<Class>,
) -> Option<PastBudget> {
    let spent = now_ms.saturating_sub(a.plan.start_ms);
    if a.number <= 1 || config.timeouts.room_for_attempt(spent) {
        return None;
    }
    let previous = a.number - 1;
    let last_provider = a
        .plan
        .slot(previous)
        .and_then(|s| a.chain.entry(s.entry))
        .and_then(|e| config.provider(e.provider))
        .map_or("", |p| p.name.as_str());
    let skipped = a
        .plan
        .slots()
        .skip(previous)
        .filter_map(|s| a.chain.entry(s.entry))
        .map(|e| e.provider)
        .collect();
    let reply = Reply::budget_spent(
        last_provider,
        last_class().unwrap_or(Class::Timeout),
        config.timeouts.budget_ms,
    );
    Some(PastBudget { reply, skipped })
}

/// When the upstream role must act on an attempt by itself (behaviour.md 5): Envoy's own timers are
/// set once per request, these depend on the attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deadlines {
    /// A streamed attempt with no output by then falls over as a `timeout`.
    pub first_token_at: Option<u64>,
    /// The budget ends before Envoy would stop waiting for this attempt's answer: the caller
    /// gets the budget's answer then.
    pub budget_at: Option<u64>,
}

/// The deadlines of attempt `a`, started at `start_ms`.
pub fn deadlines(config: &Config, a: &Attempt<'_, '_>, start_ms: u64) -> Deadlines {
    let t = &config.timeouts;
    let stream = a.plan.stream;
    let budget_end = a.plan.start_ms.saturating_add(t.budget_ms);
    let envoy_gives_up = start_ms.saturating_add(t.headers_wait_ms(stream));
    Deadlines {
        first_token_at: t.first_token(stream).map(|ms| start_ms.saturating_add(ms)),
        budget_at: (t.budget_ms > 0 && budget_end < envoy_gives_up).then_some(budget_end),
    }
}

/// Attempt `a` is still waiting for its answer when the budget ends: the caller gets the
/// budget's answer naming this provider's timeout, and the later planned providers are skips
/// for budget.
pub fn budget_ended(config: &Config, a: &Attempt<'_, '_>) -> PastBudget {
    let skipped = a
        .plan
        .slots()
        .skip(a.number)
        .filter_map(|s| a.chain.entry(s.entry))
        .map(|e| e.provider)
        .collect();
    PastBudget {
        reply: Reply::budget_spent(&a.provider.name, Class::Timeout, config.timeouts.budget_ms),
        skipped,
    }
}

impl PastBudget {
    /// Appends the budget skips to the access log's attempt record.
    pub fn write_log(&self, config: &Config, log: &mut String) {
        for &skipped in &self.skipped {
            if let Some(p) = config.provider(skipped) {
                attempt_log::push_skip(log, &p.name, SkipReason::Budget.as_str());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The response side.

/// What an attempt's answer (or its absence) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub class: Class,
    /// The response status; `None` when no response headers came.
    pub status: Option<u16>,
    /// The delay the answer asked for (see [`delay_source`]).
    pub retry_after_ms: Option<u64>,
    /// For an in-place retry ([`is_retry_in_place`]), the class the try before it failed with
    /// (`handoff::Outcomes`, read only for a retry): the request counts once toward the
    /// breaker (behaviour.md 16).
    pub first_try: Option<Class>,
}

/// Which response headers tell how long a failing provider wants to be left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelaySource {
    /// Read nothing (successes, and classes no delay applies to).
    Nothing,
    /// `Retry-After` and the `X-RateLimit-Reset*` family (`retry_after::rate_limit_delay`).
    RateLimitHeaders,
    /// `Retry-After` alone (`retry_after::parse_retry_after`).
    RetryAfter,
}

pub fn delay_source(class: Class) -> DelaySource {
    match class {
        Class::RateLimited | Class::QuotaExhausted => DelaySource::RateLimitHeaders,
        Class::Overloaded | Class::ServerError => DelaySource::RetryAfter,
        _ => DelaySource::Nothing,
    }
}

/// The class of an attempt that ended without response headers, from what Envoy says about it
/// (`stream`: the request asked for a stream; its wait may be the first-token timeout).
pub fn no_response_class(
    config: &Config,
    stream: bool,
    transport_failure: bool,
    client_gone: bool,
    elapsed_ms: u64,
) -> Class {
    classify_no_response(&NoResponse {
        transport_failure,
        client_gone,
        elapsed_ms,
        attempt_timeout_ms: config.timeouts.headers_wait_ms(stream),
        stall_timeout_ms: config.timeouts.stall_ms,
    })
}

/// What to do with the retry marker response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// No response headers to mark.
    Untouched,
    /// Set it to `wire::RETRY_MARKER_RETRY`: the route's retry policy moves the request to the
    /// next planned provider.
    Set,
    /// Set it to "0": the answer falls over but no attempt is left (the route does not retry;
    /// the downstream role reads the chain as exhausted).
    Exhausted,
    /// Remove it: only the gateway marks answers, never a provider.
    Remove,
}

impl Marker {
    /// The header's value, or `None` to remove it; `Untouched` is not applied at all.
    pub fn value(self) -> Option<&'static str> {
        match self {
            Marker::Set => Some(crate::wire::RETRY_MARKER_RETRY),
            Marker::Exhausted => Some("0"),
            Marker::Untouched | Marker::Remove => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Holding an answer to read the start of its body (behaviour.md 3).

/// Why a response is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// A failing answer with this status whose body may refine its class.
    Body(u16),
    /// A `200` event stream, until its first complete event.
    Stream,
    /// A `200` event stream under a first-token timeout, until its first output
    /// ([`dialects::first_output`]); the timeout fires while it is held.
    FirstOutput,
    /// A translated attempt's whole `2xx` answer with this status, until its end: whether it
    /// is an answer of the provider's API decides its class (behaviour.md 16). The router buffers it
    /// whole for its translation in any case.
    Answer(u16),
}

/// What the upstream role reads of an answer's headers, from one read of the whole map (one
/// hostcall, where reading the status and removing a provider's marker took two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead<'m> {
    pub status: u16,
    pub content_type: Option<&'m [u8]>,
    /// The answer has no body: it ended with its headers, or says `content-length: 0`.
    pub empty: bool,
    /// The provider sent a header named like the gateway's retry marker (it must go).
    pub marker: bool,
    /// The class AWS's error type names (`dialects::header_class`), known without reading the
    /// body (behaviour.md 3).
    pub by_type: Option<Class>,
}

impl<'m> ResponseHead<'m> {
    /// Reads a serialized header map (`header_pairs` layout); `end_of_stream`: no body follows.
    pub fn read(map: &'m [u8], end_of_stream: bool) -> Self {
        let mut head = ResponseHead {
            status: 0,
            content_type: None,
            empty: end_of_stream,
            marker: false,
            by_type: None,
        };
        for (name, value) in crate::header_pairs::HeaderPairs::new(map) {
            match name {
                b":status" => {
                    head.status = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                }
                b"content-type" => head.content_type = Some(value),
                b"content-length" => head.empty |= value == b"0",
                b"x-amzn-errortype" => head.by_type = dialects::header_class(value),
                _ if name == crate::wire::RETRY_MARKER_HEADER.as_bytes() => head.marker = true,
                _ => {}
            }
        }
        head
    }

    /// The class the status line and headers give attempt `a`'s answer: a `200` that is empty
    /// or not what a model endpoint answers with (an HTML page from a proxy in front of the
    /// provider) is a `server_error` (behaviour.md 3); requests without a model (other GETs) may get
    /// any content.
    pub fn class(&self, a: &Attempt<'_, '_>) -> Class {
        if let Some(class) = self.by_type.filter(|_| self.status >= 400) {
            return class;
        }
        let class = crate::classify::classify_status(self.status);
        let unreadable = self.status == 200
            && !a.plan.model.is_empty()
            && (self.empty || self.content_type.is_some_and(|t| !dialects::is_readable(t)));
        if unreadable {
            Class::ServerError
        } else {
            class
        }
    }
}

/// Whether the end of attempt `a`'s answer is watched for its final event (behaviour.md 5: a stream
/// cut short must not look complete): a streamed request's `200` event stream. `Some(true)`
/// when the caller speaks Anthropic Messages (the error event is then theirs).
pub fn watch_end(a: &Attempt<'_, '_>, head: &ResponseHead<'_>) -> Option<bool> {
    let event_stream = head.content_type.is_some_and(dialects::is_event_stream);
    (a.plan.stream && head.status == 200 && event_stream).then(|| {
        let path = a.plan.path.split('?').next().unwrap_or_default();
        path.ends_with("/messages")
    })
}

/// Whether to hold an answer to read the start of its body. A streamed request's `200` event
/// stream is held until its first event; a failing answer whose body may refine its class,
/// until the start of its body. Never when the configuration turns holding off (Envoy 1.36
/// crashes retrying a held answer: the renderer turns it off there).
pub fn hold(
    config: &Config,
    a: &Attempt<'_, '_>,
    head: &ResponseHead<'_>,
    end_of_stream: bool,
) -> Option<Hold> {
    if end_of_stream || !config.hold_answers {
        return None;
    }
    let event_stream = head.content_type.is_some_and(dialects::is_event_stream);
    let whole = a.translation.is_some() && (200..300).contains(&head.status);
    if whole && answer_translation(head.status, || event_stream) != AnswerTranslation::Stream {
        return Some(Hold::Answer(head.status));
    }
    if head.status == 200 {
        let first_token = config.timeouts.first_token(a.plan.stream).is_some();
        (a.plan.stream && event_stream).then_some(if first_token {
            Hold::FirstOutput
        } else {
            Hold::Stream
        })
    } else {
        let refinable = dialects::refinable(head.status) && head.by_type.is_none();
        refinable.then_some(Hold::Body(head.status))
    }
}

/// A gathered attempt's answer that is a `200` event stream (docs/behaviour.md section 5): the
/// provider's API (the stream's dialect) and the caller's, whose JSON answer it becomes.
pub fn gathers(a: &Attempt<'_, '_>, head: &ResponseHead<'_>) -> Option<(Api, Api)> {
    // Every answer asks: the plan's flag first, the content type only for a gathered request.
    if !a.plan.gather
        || head.status != 200
        || !head.content_type.is_some_and(dialects::is_event_stream)
    {
        return None;
    }
    let caller = (a.translation.map(|t| t.caller)).or_else(|| Api::of_path(a.plan.path))?;
    Some((a.translation.map_or(caller, |t| t.provider), caller))
}

/// The caller's one JSON answer from a gathered stream (`body`, all of it, in `provider`'s
/// dialect): `502` with the caller's error when the stream did not end with its answer.
pub fn gathered(provider: Api, caller: Api, body: &[u8], created: u64) -> WholeAnswer {
    match translate::assemble::stream_to_answer(provider, caller, &[body], created) {
        Some(body) => WholeAnswer { status: 200, body },
        None => WholeAnswer {
            status: UNREADABLE_STATUS,
            body: translate::unreadable(provider, caller),
        },
    }
}

/// Whether attempt `a`'s answer is an AWS event stream to unwrap into SSE: a `200` stream of a
/// Bedrock provider (`content_type` read only then).
pub fn unframes(
    a: &Attempt<'_, '_>,
    status: u16,
    content_type: impl FnOnce() -> Option<Vec<u8>>,
) -> bool {
    status == 200
        && a.plan.stream
        && a.provider
            .envelope
            .as_ref()
            .is_some_and(|e| e.event_stream())
        && content_type().is_some_and(|v| {
            (v.get(..AWS_EVENT_STREAM.len()))
                .is_some_and(|p| p.eq_ignore_ascii_case(AWS_EVENT_STREAM))
        })
}

/// The content type of Bedrock's streamed answers.
const AWS_EVENT_STREAM: &[u8] = b"application/vnd.amazon.eventstream";

/// What a held answer's body decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub class: Class,
    pub status: u16,
    /// Read the delay the answer asked for (see [`delay_source`]).
    pub read_delay: bool,
    /// A whole translated answer ([`Hold::Answer`]), translated already: what the caller gets
    /// when it goes to the caller.
    pub answer: Option<WholeAnswer>,
}

/// A translated attempt's whole answer for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeAnswer {
    /// `502` when the provider's answer was no answer of its API (the caller never gets a
    /// success holding an error, behaviour.md 16); else the provider's.
    pub status: u16,
    /// In the caller's API: the answer, or the error saying it could not be translated.
    pub body: Vec<u8>,
}

/// The status a caller gets for a translated answer that could not be read.
pub const UNREADABLE_STATUS: u16 = 502;

impl Hold {
    /// How many bytes of the held body (`held` so far) to read now; `None` to wait for more
    /// (the start of a failing body, bounded by [`BODY_PREFIX_LIMIT`]). Until then the router
    /// buffers the answer; Envoy's per-try timers still run, so a body that never comes ends
    /// as a timeout.
    pub fn read_now(self, held: usize, end_of_stream: bool) -> Option<usize> {
        let enough = end_of_stream || held >= BODY_PREFIX_LIMIT;
        match self {
            // The whole answer, at its end.
            Hold::Answer(_) => end_of_stream.then_some(held),
            Hold::Body(_) if !enough => None,
            _ => Some(held.min(BODY_PREFIX_LIMIT)),
        }
    }

    /// What the start of the body (for [`Hold::Answer`], the whole body) says; `None` to keep
    /// holding (a stream's first event is not complete yet). `translation`: the attempt's, if
    /// translated; its streams must open with events of the provider's API, and its whole
    /// answers are translated here (`created`: for an OpenAI caller's answer). A translated
    /// answer that is no answer of its API is a `server_error` (behaviour.md 16).
    pub fn decide(
        self,
        body: &[u8],
        end_of_stream: bool,
        translation: Option<Translation>,
        created: u64,
    ) -> Option<Decided> {
        let start = match self {
            Hold::Body(status) => {
                return Some(Decided {
                    class: dialects::refine(status, body),
                    status,
                    read_delay: true,
                    answer: None,
                })
            }
            Hold::Answer(status) => {
                return translation.map(|t| whole_answer(t, status, body, created))
            }
            Hold::Stream | Hold::FirstOutput => {
                let until_output = self == Hold::FirstOutput;
                match (translation, until_output) {
                    (Some(t), _) => dialects::first_event_of(
                        |name, data| translate::is_stream_event(t.provider, name, data),
                        body,
                        end_of_stream,
                        until_output,
                    ),
                    (None, false) => dialects::first_event(body, end_of_stream),
                    (None, true) => dialects::first_output(body, end_of_stream),
                }
            }
        };
        let class = match start {
            StreamStart::NeedMore => return None,
            StreamStart::Healthy => Class::Ok,
            StreamStart::Error(class) => class,
            StreamStart::Unreadable => {
                // Nothing of it reached the caller: if it goes to the caller, it goes as the
                // error a whole answer that could not be read gets.
                let t = translation?;
                return Some(Decided {
                    class: Class::ServerError,
                    status: 200,
                    read_delay: false,
                    answer: Some(WholeAnswer {
                        status: UNREADABLE_STATUS,
                        body: translate::unreadable(t.provider, t.caller),
                    }),
                });
            }
        };
        Some(Decided {
            class,
            status: 200,
            read_delay: false,
            answer: None,
        })
    }
}

/// Everything an attempt's outcome leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement<'a> {
    pub provider: ProviderId,
    pub class: Class,
    /// The class falls over in this chain and the time budget allows another attempt.
    pub falls_over: bool,
    pub marker: Marker,
    /// `llm_failover_fallbacks_total{from, to}` to count, when the request moves on.
    pub fallback: Option<(ProviderId, ProviderId)>,
    /// The health report to make (for this model), or `None` when it would change nothing
    /// (a success from a provider with nothing recorded: the hot path writes nothing).
    pub report: Option<(&'a str, Report)>,
    /// Planned providers that will not be tried because the budget is spent (`budget` skips).
    pub budget_skips: Vec<ProviderId>,
    pub duration_ms: u64,
    /// The walk moved to an alternative list (behaviour.md 3), or takes this provider again (in-place
    /// retry, behaviour.md 5): publish it before the router retries ([`rerouted_slots`],
    /// [`rerouted_plan`]).
    pub reroute: Option<Vec<Slot>>,
    /// An in-place retry: how long the next attempt waits before it is sent
    /// (`wire::RETRY_AT_PROPERTY` holds when it may go).
    pub retry_in_place_after_ms: Option<u64>,
}

/// Settles attempt `a` given its outcome, the time now and when the attempt started. `gate`
/// admits an alternative list's entry (health, read only when the walk moves to a list; see
/// [`health_gate`]).
pub fn settle<'a>(
    config: &Config,
    a: &Attempt<'a, 'a>,
    outcome: Outcome,
    now_ms: u64,
    attempt_start_ms: u64,
    gate: &mut dyn FnMut(EntryId) -> Option<Slot>,
) -> Settlement<'a> {
    let Outcome {
        class,
        status,
        retry_after_ms,
        first_try,
    } = outcome;
    let mut falls_over = a.chain.fallback_on.falls_over(class, status);
    let mut budget_skips = Vec::new();
    let room = config
        .timeouts
        .room_for_attempt(now_ms.saturating_sub(a.plan.start_ms));
    // A class with an alternative list continues the walk there (behaviour.md 3).
    let reroute = if falls_over && room && a.chain.has_lists() {
        let (context_window, content_policy) = a.plan.lists();
        let walk = Walk {
            slots: a.plan.slot_list(),
            limit: a.plan.limit(),
            context_window: &context_window,
            content_policy: &content_policy,
        };
        plan::reroute(a.chain, &walk, a.number, class, gate)
    } else {
        None
    };
    // Otherwise the same provider once more, after a short wait (behaviour.md 5).
    let in_place = match &reroute {
        None if falls_over && room => retry_in_place(config, a, class, retry_after_ms),
        _ => None,
    };
    let reroute = match in_place {
        Some(_) => Some(in_place_walk(a)),
        None => reroute,
    };
    // Providers of the attempts after this one, along the (possibly rerouted) walk.
    let walk = reroute.as_deref().unwrap_or(a.plan.slot_list());
    let later = || {
        walk.get(a.number..)
            .unwrap_or_default()
            .iter()
            .filter_map(|s| a.chain.entry(s.entry))
            .map(|e| e.provider)
    };
    if falls_over && !room {
        falls_over = false;
        if status.is_some() {
            // Without the marker no later slot is tried: each is skipped for budget.
            budget_skips = later().collect();
        }
    }
    let next = a.number < a.plan.limit() && later().next().is_some();
    let marker = match (status, falls_over) {
        (None, _) => Marker::Untouched,
        (Some(_), true) if next => Marker::Set,
        (Some(_), true) => Marker::Exhausted,
        (Some(_), false) => Marker::Remove,
    };
    // Without response headers Envoy retries by itself (connect-failure, reset, per-try
    // timeout: see docs/features.md, "Known limits"), so count what happens, not what the chain says.
    // (When the budget is spent Envoy's own retry is refused as it starts: [`past_budget`].)
    let moves_on = falls_over || (status.is_none() && class != Class::ClientDisconnect && room);
    // A retry in place is no fallback: the request stays with this provider.
    let fallback = if moves_on && plan::is_fallback(walk, a.number + 1) {
        later().next().map(|next| (a.provider_id, next))
    } else {
        None
    };
    let unchanged = class == Class::Ok && a.slot.pristine && !a.slot.probe;
    // A request counts once toward the breaker however often it was tried in place (behaviour.md 16):
    // a try retried next waits for its retry, which counts for both.
    let in_place_report = match (in_place, first_try) {
        (Some(_), _) => InPlace::Retried,
        (None, Some(first)) if is_retry_in_place(a) => InPlace::After(first),
        _ => InPlace::No,
    };
    let report = (!unchanged).then(|| {
        (
            a.model(),
            Report {
                class,
                falls_over,
                retry_after_ms,
                in_place: in_place_report,
            },
        )
    });
    Settlement {
        provider: a.provider_id,
        class,
        falls_over,
        marker,
        fallback,
        report,
        budget_skips,
        duration_ms: now_ms.saturating_sub(attempt_start_ms),
        reroute,
        retry_in_place_after_ms: in_place,
    }
}

/// Whether attempt `a`, failed with `class`, is retried on the same provider, and after how
/// long (behaviour.md 5): only where its chain asks, once per provider, within the attempt limit; for
/// connection errors, server errors and overload after the chain's back-off; for a 429 only
/// when its `Retry-After` asks for no more than the chain allows, after that wait. Timeouts,
/// setup faults and classes read from the body move on at once.
pub fn retry_in_place(
    config: &Config,
    a: &Attempt<'_, '_>,
    class: Class,
    retry_after_ms: Option<u64>,
) -> Option<u64> {
    let policy = a.chain.retry_in_place?;
    if config.routing != crate::config::Routing::Slots
        || is_retry_in_place(a)
        || a.number >= a.plan.limit()
    {
        return None;
    }
    let wait = match class {
        Class::ConnectionError | Class::ServerError | Class::Overloaded => Some(policy.back_off_ms),
        Class::RateLimited => retry_after_ms.filter(|&ms| ms <= policy.max_retry_after_ms),
        _ => None,
    };
    // Envoy's per-try timer runs while the retry waits: a wait that leaves the retry less than
    // half its time for an answer is not worth taking (move on instead).
    let answer_wait = config.timeouts.headers_wait_ms(a.plan.stream);
    wait.filter(|&ms| ms.saturating_mul(2) < answer_wait)
}

/// Attempt `a` is itself a retry in place: the attempt before it went to the same entry.
pub fn is_retry_in_place(a: &Attempt<'_, '_>) -> bool {
    a.number > 1 && !plan::is_fallback(a.plan.slot_list(), a.number)
}

/// The walk with attempt `a`'s slot inserted again right after it, within the attempt limit
/// (a later provider may drop off the end: the retry counts toward `max_attempts`).
fn in_place_walk(a: &Attempt<'_, '_>) -> Vec<Slot> {
    let slots = a.plan.slot_list();
    let mut walk = Vec::with_capacity(slots.len() + 1);
    walk.extend(slots.iter().take(a.number).copied());
    walk.push(Slot {
        entry: a.slot.entry,
        // It failed just now: its success must be reported (and it probes nothing).
        pristine: false,
        probe: false,
    });
    walk.extend(slots.iter().skip(a.number).copied());
    walk.truncate(a.plan.limit());
    walk
}

/// Admits an alternative list's entry for attempt `a`'s request by its provider's health.
pub fn health_gate<'h>(
    config: &'h Config,
    a: &'h Attempt<'h, 'h>,
    health: &'h Health<'h>,
) -> impl FnMut(EntryId) -> Option<Slot> + 'h {
    move |e: EntryId| {
        let entry = a.chain.entry(e)?;
        let model = entry.model.as_deref().unwrap_or(a.plan.model);
        let name = &config.provider(entry.provider)?.name;
        match health.admit(name, model, config.timeouts.attempt_ms) {
            Admission::Available { pristine, probe } => Some(Slot {
                entry: e,
                pristine,
                probe,
            }),
            Admission::BreakerOpen | Admission::Dead => None,
        }
    }
}

/// The slot properties to rewrite for a rerouted walk, from attempt `a` on: the route's matcher
/// reads the next attempts' clusters there. Slots past the new walk are emptied, so no stale
/// cluster is reached.
pub fn rerouted_slots<'c, 'w>(
    config: &'c Config,
    a: &Attempt<'c, '_>,
    walk: &'w [Slot],
) -> impl Iterator<Item = (&'static str, &'c str)> + 'w
where
    'c: 'w,
{
    let (first, end) = (a.number, a.plan.limit());
    let chain = a.chain;
    crate::wire::SLOT_PROPERTIES
        .iter()
        .enumerate()
        .take(end)
        .skip(first)
        .map(move |(k, property)| {
            let cluster = walk
                .get(k)
                .and_then(|s| chain.entry(s.entry))
                .and_then(|e| config.provider(e.provider))
                .map_or("", |p| p.cluster.as_str());
            (*property, cluster)
        })
}

/// The plan record with the rerouted walk, for the next attempts (and the downstream role).
pub fn rerouted_plan(a: &Attempt<'_, '_>, walk: &[Slot]) -> String {
    let (context_window, content_policy) = a.plan.lists();
    let p = a.plan;
    PlanRecord {
        config: p.config,
        chain: p.chain,
        start_ms: p.start_ms,
        body_len: p.body_len,
        log_started: p.log_started,
        stream: p.stream,
        caller_api: p.caller_api,
        gather: p.gather,
        slots: walk,
        limit: u8::try_from(p.limit()).unwrap_or(u8::MAX),
        context_window: &context_window,
        content_policy: &content_policy,
        path: p.path,
        authority: p.authority,
        model: p.model,
    }
    .encode()
}

impl Settlement<'_> {
    /// Appends this attempt, then its budget skips, to the access log's attempt record.
    pub fn write_log(&self, config: &Config, log: &mut String) {
        let name = |id: ProviderId| config.provider(id).map_or("", |p| p.name.as_str());
        attempt_log::push_attempt(
            log,
            name(self.provider),
            self.class.as_str(),
            self.duration_ms,
        );
        for &skipped in &self.budget_skips {
            attempt_log::push_skip(log, name(skipped), SkipReason::Budget.as_str());
        }
    }

    /// Whether the downstream role may need this attempt's class back (only failures are
    /// recorded in `handoff::OUTCOMES`: a fallback reason, or an exhausted chain's last class).
    pub fn records_outcome(&self) -> bool {
        self.class != Class::Ok
    }
}

#[cfg(test)]
mod tests;
