//! The downstream role's request-side decisions (docs/behaviour.md section 2), as pure functions over facts:
//! what each request header means, whether the request is for the status endpoint, what the
//! body asks for, and, once planned, everything to publish for the route and the attempts.

use crate::config::{Config, Routing};
use crate::group;
use crate::handoff::PlanRecord;
use crate::ids::{ChainId, EntryId, ProviderId};
use crate::models;
use crate::plan::{Plan, Refusal, SkipReason};
use crate::reply::Reply;
use crate::rewrite::Content;
use crate::rewrite::{self, BodyScan};
use crate::translate::Api;
use crate::{attempt_log, wire};
use std::borrow::Cow;

/// What a request header is to the downstream role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestHeader {
    /// `:path`, `:authority`: kept for attempts that must restore them (values must be UTF-8).
    Path,
    Authority,
    Method,
    /// Envoy honours these from "internal" callers (loopback included): never from ours
    /// (behaviour.md 2.6). Remove.
    Steering,
    /// The opt-out header (behaviour.md 2.5): read with [`opts_out`], then remove.
    OptOut,
    /// The caller's identity (`caller_header`): an undecodable one is no identity. `remove`:
    /// it is also a gateway credential header.
    Caller {
        remove: bool,
    },
    /// The caller's own gateway credential: removed before routing, so no attempt carries it
    /// even where the upstream role is missing (docs/behaviour.md section 7).
    GatewayCredential,
    /// `origin`: a browser's request, whose answer lists the gateway's headers in
    /// `access-control-expose-headers` (behaviour.md 16). Otherwise a header like any other.
    Origin,
    /// Anything else: left alone.
    Other,
}

/// Where Google's SDKs send the key.
const GEMINI_KEY_HEADER: &[u8] = b"x-goog-api-key";

pub fn request_header(config: &Config, name: &[u8]) -> RequestHeader {
    match name {
        b":path" => RequestHeader::Path,
        b":authority" => RequestHeader::Authority,
        b":method" => RequestHeader::Method,
        b"origin" => RequestHeader::Origin,
        _ if wire::ENVOY_STEERING_HEADERS
            .iter()
            .any(|h| h.as_bytes() == name) =>
        {
            RequestHeader::Steering
        }
        _ if name == config.opt_out_header.as_bytes() => RequestHeader::OptOut,
        _ => {
            // A Gemini caller's key (google-genai sends it there) is its gateway key too. Not
            // in the list every attempt clears: removed here, once, when a caller sends it.
            let credential = name == GEMINI_KEY_HEADER
                || config
                    .gateway_credential_headers
                    .iter()
                    .any(|h| h.as_bytes() == name);
            if config.caller_header.as_deref().map(str::as_bytes) == Some(name) {
                RequestHeader::Caller { remove: credential }
            } else if credential {
                RequestHeader::GatewayCredential
            } else {
                RequestHeader::Other
            }
        }
    }
}

/// The opt-out header's value limits the request to its first provider.
pub fn opts_out(value: &[u8]) -> bool {
    value.eq_ignore_ascii_case(b"off")
}

/// The request could not be read well enough to route it.
pub fn unreadable_request() -> Reply {
    Reply::invalid_request("the request's :path or :authority is not valid UTF-8")
}

/// The `413` for a body larger than `body_limit` (set for Envoy < 1.39, whose route buffers a
/// retried body up to twice the limit); `None` when the body fits or there is no limit.
pub fn body_too_large(config: &Config, body_size: usize) -> Option<Reply> {
    let limit = config.body_limit.filter(|l| body_size as u64 > *l)?;
    Some(Reply::body_too_large(limit as usize))
}

/// How the status endpoint (docs/behaviour.md section 10) answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusRequest {
    /// Not for the status endpoint (or it is off).
    No,
    /// `405`: the endpoint answers GET and HEAD only.
    MethodNotAllowed,
    /// `200` with the health JSON; without the body for HEAD.
    Report { with_body: bool },
}

pub fn status_request(config: &Config, path: &str, method: &str) -> StatusRequest {
    let Some(status_path) = &config.status_path else {
        return StatusRequest::No;
    };
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if path != status_path {
        return StatusRequest::No;
    }
    match method {
        "GET" => StatusRequest::Report { with_body: true },
        "HEAD" => StatusRequest::Report { with_body: false },
        _ => StatusRequest::MethodNotAllowed,
    }
}

/// Whether a request is for the liveness answer (docs/behaviour.md section 10: `200 serving` from the
/// filter, no key, no provider), and whether to send its body (GET; HEAD gets none). Only GET
/// and HEAD on `liveness_path` (the query ignored), and only on the gateway's own route
/// (`route` reads the request's route name; read only for such a request): no route at all
/// (Envoy would answer 404), a name in `wire::GATEWAY_ROUTE_NAMES`, or one a chain's `routes`
/// names. A route the user configured for that path goes on as if the filter were not there.
pub fn liveness_request(
    config: &Config,
    path: &str,
    method: &str,
    route: impl FnOnce() -> Option<String>,
) -> Option<bool> {
    let liveness = config.liveness_path.as_deref()?;
    if path.split_once('?').map_or(path, |(p, _)| p) != liveness {
        return None;
    }
    let with_body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return None,
    };
    let ours = match route().filter(|r| !r.is_empty()) {
        None => true,
        Some(r) => {
            crate::wire::GATEWAY_ROUTE_NAMES.contains(&r.as_str())
                || config.chains.iter().any(|c| c.routes.contains(&r))
        }
    };
    ours.then_some(with_body)
}

/// The liveness answer's body.
pub const LIVENESS_BODY: &[u8] = b"serving\n";

/// Whether this request is for `models_path` or one of its models (GET or HEAD), and whether
/// to send the answer's body; the answer is built only then ([`models::answer`]).
pub fn models_request(config: &Config, path: &str, method: &str) -> Option<bool> {
    if method != "GET" && method != "HEAD" {
        return None;
    }
    models::asked(config, path).then_some(method == "GET")
}

/// The chain's name for access logs (filter state), when the configuration has more than one.
pub fn chain_log(config: &Config, chain: ChainId) -> Option<&str> {
    if config.chains.len() > 1 {
        config.chain(chain).map(|c| c.name.as_str())
    } else {
        None
    }
}

/// What the request body asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestBody<'b> {
    /// The requested model ("" for a request without a body or without a `model`; a Gemini
    /// caller's from its path).
    pub model: Cow<'b, str>,
    scan: Option<BodyScan>,
    /// A Gemini caller's path asks for a stream (`:streamGenerateContent`).
    path_stream: bool,
    /// `stream_options.include_usage` is `true`.
    stream_usage: bool,
}

/// What a request asks for: its body's, and for a Gemini caller its path's model and stream
/// (`/v1beta/models/{model}:streamGenerateContent`, behaviour.md 14).
pub fn read_request<'b>(path: &str, body: &'b [u8]) -> Result<RequestBody<'b>, Reply> {
    let mut request = read_body(body)?;
    if let Some((model, stream)) = crate::translate::gemini::path_model(path) {
        request.model = Cow::Owned(model.to_string());
        request.path_stream = stream;
    }
    Ok(request)
}

/// A Gemini caller's path without its `key=` query parameter (the caller's key for the
/// gateway, which no provider may see, behaviour.md 7); `None` when it has none.
pub fn without_key(path: &str) -> Option<String> {
    crate::bytes::find_byte(b'?', path.as_bytes())?; // no query: one cheap test
    let (base, query) = path.split_once('?')?;
    if !query.split('&').any(|p| p.starts_with("key=")) || Api::of_path(base) != Some(Api::Gemini) {
        return None;
    }
    let mut clean = String::with_capacity(path.len());
    clean.push_str(base);
    for (k, param) in query
        .split('&')
        .filter(|p| !p.starts_with("key="))
        .enumerate()
    {
        clean.push(if k == 0 { '?' } else { '&' });
        clean.push_str(param);
    }
    Some(clean)
}

/// Reads the requested model from the body (empty: no body); a reply when it cannot be used.
pub fn read_body(body: &[u8]) -> Result<RequestBody<'_>, Reply> {
    if body.is_empty() {
        return Ok(RequestBody {
            model: Cow::Borrowed(""),
            scan: None,
            path_stream: false,
            stream_usage: false,
        });
    }
    let scan = rewrite::scan_top_level(body).map_err(|e| Reply::invalid_body(&e.to_string()))?;
    let model = match rewrite::model_value(body, &scan) {
        Ok(Some(model)) => model,
        // A JSON request that names no model is planned like a GET: a chain that takes
        // model-less requests, else 404 route_not_found (behaviour.md 12).
        Ok(None) => Cow::Borrowed(""),
        Err(e) => return Err(Reply::invalid_body(&e.to_string())),
    };
    if model.chars().any(char::is_control) {
        return Err(Reply::invalid_body(
            "the model name contains control characters",
        ));
    }
    let options = scan.stream_options.and_then(|s| body.get(s.start..s.end));
    let stream_usage =
        options.is_some_and(|o| crate::translate::json::pick(o, [b"include_usage"]) == [b"true"]);
    Ok(RequestBody {
        model,
        scan: Some(scan),
        path_stream: false,
        stream_usage,
    })
}

impl RequestBody<'_> {
    /// The caller asked for a stream (`"stream": true`).
    pub fn stream(&self) -> bool {
        self.path_stream || self.scan.as_ref().is_some_and(|s| s.stream)
    }

    /// The caller asked for its stream's usage (`stream_options.include_usage: true`).
    pub fn stream_usage(&self) -> bool {
        self.stream_usage
    }

    /// The body has a top-level `stream_options` member (whatever it holds).
    pub fn has_stream_options(&self) -> bool {
        self.scan
            .as_ref()
            .is_some_and(|s| s.stream_options.is_some())
    }

    /// What the body carries that some chain entries cannot take (behaviour.md 2.4).
    pub fn content(&self) -> Content {
        self.scan.as_ref().map(|s| s.content).unwrap_or_default()
    }

    /// The body without a client-sent `fallbacks` field (behaviour.md 2.6), or `None` when it has none.
    pub fn without_fallbacks(&self, body: &[u8]) -> Option<Vec<u8>> {
        rewrite::rewrite(body, self.scan.as_ref()?, None, true)
    }
}

/// Whether planning needs the route's name (some chain is limited to routes).
pub fn needs_route(config: &Config) -> bool {
    config.chains.iter().any(|c| !c.routes.is_empty())
}

/// The chain entries left out that `llm_failover_skipped_total` counts, as (provider, reason).
/// With `try_last` an open or dead provider moved to the end of the walk is not skipped: it is
/// still planned.
pub fn counted_skips<'a>(
    config: &'a Config,
    chain: ChainId,
    skipped: &'a [(EntryId, SkipReason)],
    plan: Option<&'a Plan>,
) -> impl Iterator<Item = (ProviderId, SkipReason)> + 'a {
    let chain = config.chain(chain);
    skipped
        .iter()
        .filter(move |(entry, _)| !plan.is_some_and(|p| p.slots.iter().any(|s| s.entry == *entry)))
        .filter_map(move |(entry, reason)| Some((chain?.entry(*entry)?.provider, *reason)))
}

/// The skips a refused request counts and logs: only when every provider was open, dead or
/// spent (`circuit_open`, `budget_exhausted`, `rate_limited_ahead`); a caller asking for a model no provider serves is not a skip worth counting.
pub fn refusal_skips(refusal: &Refusal) -> Option<(ChainId, &[(EntryId, SkipReason)])> {
    match (refusal.chain, refusal.reply.code) {
        (Some(chain), "circuit_open" | "budget_exhausted" | "rate_limited_ahead") => {
            Some((chain, &refusal.skipped))
        }
        _ => None,
    }
}

/// The attempt log's start (filter state, printed by access logs): the entries planning left
/// out. `None` when there are none (the first attempt then starts the log).
pub fn skip_log(
    config: &Config,
    chain: ChainId,
    skipped: &[(EntryId, SkipReason)],
) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    let chain = config.chain(chain)?;
    let mut log = String::new();
    for (entry, reason) in skipped {
        if let Some(provider) = chain
            .entry(*entry)
            .and_then(|e| config.provider(e.provider))
        {
            attempt_log::push_skip(&mut log, &provider.name, reason.as_str());
        }
    }
    Some(log)
}

/// What the route reads to send the request's attempts, handed to `set` as (property, value):
/// in router mode one slot property per attempt ([`slot_clusters`]); in grouping mode (Envoy <
/// 1.39, routing once per request) the grouping cluster of the plan's provider order
/// (`group::route_cluster`).
pub fn route_properties(config: &Config, plan: &Plan, mut set: impl FnMut(&'static str, &str)) {
    if config.routing == Routing::Groups {
        if let Some(chain) = config.chain(plan.chain) {
            set(
                wire::GROUP_PROPERTY,
                &group::route_cluster(config, chain, &plan.slots),
            );
        }
    } else {
        let pair = hedge_pair(config, plan);
        for (property, cluster) in slot_clusters(config, plan) {
            match &pair {
                // Attempt 1 of a hedged request goes to its pair's composite cluster, whose
                // second sub-cluster takes the hedge (docs/internals.md, hedging).
                Some(pair) if property == wire::SLOT_PROPERTIES[0] => set(property, pair),
                _ => set(property, cluster),
            }
        }
    }
}

/// When a request's second attempt starts beside its first (behaviour.md 5, hedging), ms.
pub fn hedge_after(config: &Config, plan: &Plan) -> Option<u64> {
    config.chain(plan.chain).and_then(|c| plan.hedge_after(c))
}

/// The composite cluster a hedged request's first attempt goes to (`wire::hedge_cluster`);
/// `None` when it is not hedged or both slots are one cluster.
pub fn hedge_pair(config: &Config, plan: &Plan) -> Option<String> {
    hedge_after(config, plan)?;
    let mut clusters = slot_clusters(config, plan).map(|(_, cluster)| cluster);
    let (first, second) = (clusters.next()?, clusters.next()?);
    wire::hedge_cluster(first, second)
}

/// The filter-state slot properties the route's matcher reads: (property, cluster) per attempt.
pub fn slot_clusters<'a>(
    config: &'a Config,
    plan: &'a Plan,
) -> impl Iterator<Item = (&'static str, &'a str)> + 'a {
    let chain = config.chain(plan.chain);
    plan.slots
        .iter()
        .zip(wire::SLOT_PROPERTIES)
        .filter_map(move |(slot, property)| {
            let entry = chain?.entry(slot.entry)?;
            Some((property, config.provider(entry.provider)?.cluster.as_str()))
        })
}

/// What the request tells every attempt (see [`crate::handoff`]).
pub struct Published<'a> {
    pub plan: &'a Plan,
    pub stream: bool,
    /// Each attempt is streamed from the provider and gathered ([`gathers`]).
    pub gather: bool,
    /// Same-API attempts ask the stream's usage for the caller ([`asks_usage`]).
    pub ask_usage: bool,
    /// The body has a top-level `stream_options` ([`RequestBody::has_stream_options`]).
    pub stream_options: bool,
    pub start_ms: u64,
    pub body_len: usize,
    pub path: &'a str,
    pub authority: &'a str,
    pub model: &'a str,
    /// The caller's API (from its path).
    pub api: Option<Api>,
    /// The request's caller (`Config::team`).
    pub team: crate::config::Team,
}

/// Whether a request that did not ask for a stream is streamed from each provider and its
/// answer gathered into one JSON answer (docs/behaviour.md section 5): with a first-token
/// timeout, for a caller of any of the four APIs (not embeddings or legacy completions), where
/// the upstream role may hold answers (not on Envoy 1.36), unless it asks for what a gathered
/// answer would not carry (`translate::assemble::streamable`).
pub fn gathers(config: &Config, api: Option<Api>, stream: bool, body: &[u8]) -> bool {
    !stream
        && config.timeouts.first_token_ms > 0
        && config.hold_answers
        && api.is_some()
        && crate::translate::assemble::streamable(body)
}

/// Whether each same-API attempt of an OpenAI Chat stream whose caller did not ask for its
/// usage asks the provider for it, and takes the usage chunk out of the caller's stream
/// (`ask_stream_usage`, docs/behaviour.md section 15). A translated attempt gets its usage from
/// its provider anyway.
pub fn asks_usage(config: &Config, api: Option<Api>, request: &RequestBody<'_>) -> bool {
    config.ask_stream_usage
        && api == Some(Api::OpenAiChat)
        && request.stream()
        && !request.stream_usage()
}

impl<'a> Published<'a> {
    pub fn record(&self, config: &Config) -> PlanRecord<'a> {
        // The limit is written only where it may exceed the planned slots.
        let lists = self
            .chain(config)
            .is_some_and(|c| c.has_lists() || c.retry_in_place.is_some())
            .then(|| self.attempt_limit(config));
        PlanRecord {
            config: config.fingerprint,
            chain: self.plan.chain,
            team: self.team,
            start_ms: self.start_ms,
            body_len: self.body_len as u64,
            log_started: !self.plan.skipped.is_empty(),
            stream: self.stream || self.gather,
            gather: self.gather,
            ask_usage: self.ask_usage,
            stream_options: self.stream_options,
            caller_api: self.api.filter(|_| self.crosses_apis(config)),
            slots: &self.plan.slots,
            limit: lists.map_or(0, |l| u8::try_from(l).unwrap_or(u8::MAX)),
            context_window: &self.plan.context_window,
            content_policy: &self.plan.content_policy,
            path: self.path,
            authority: self.authority,
            model: self.model,
        }
    }

    /// Some entry of the chain speaks another API than the caller: its attempts are
    /// translated, and the upstream role must know the caller's API.
    fn crosses_apis(&self, config: &Config) -> bool {
        self.chain(config).is_some_and(|chain| {
            chain.entries.iter().any(|e| {
                config
                    .provider(e.provider)
                    .is_some_and(|p| p.translates(self.api, self.path).is_some())
            })
        })
    }

    fn chain<'c>(&self, config: &'c Config) -> Option<&'c crate::config::Chain> {
        config.chain(self.plan.chain)
    }

    /// Attempts Envoy may make: the planned slots, or room for an alternative list.
    fn attempt_limit(&self, config: &Config) -> usize {
        self.chain(config)
            .map_or(self.plan.slots.len(), |c| self.plan.attempt_limit(c))
    }

    /// `x-envoy-max-retries`: one retry per attempt Envoy may make after the first.
    pub fn max_retries(&self, config: &Config) -> usize {
        self.attempt_limit(config).saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Slot;

    #[test]
    fn a_callers_stream_usage_ask_is_its_top_level_stream_options_include_usage() {
        let asks = |body: &str| read_body(body.as_bytes()).map(|r| r.stream_usage()).ok();
        let head = r#"{"model":"m","stream":true"#;
        assert_eq!(
            asks(&format!(
                r#"{head},"stream_options":{{"include_usage":true}}}}"#
            )),
            Some(true)
        );
        assert_eq!(
            asks(&format!(
                r#"{head},"stream_options":{{"x":1, "include_usage" : true }}}}"#
            )),
            Some(true)
        );
        assert_eq!(
            asks(&format!(
                r#"{head},"stream_options":{{"include_usage":false}}}}"#
            )),
            Some(false)
        );
        assert_eq!(asks(&format!("{head}}}")), Some(false));
        // Only the top-level member.
        assert_eq!(
            asks(&format!(
                r#"{head},"metadata":{{"stream_options":{{"include_usage":true}}}}}}"#
            )),
            Some(false)
        );
    }

    fn config(extra: &str) -> Config {
        let json = format!(
            r#"{{{extra}"providers":[{{"name":"a","cluster":"ca"}},{{"name":"b","cluster":"cb"}}],
            "chains":[{{"name":"main","providers":["a","b"]}}]}}"#
        );
        Config::from_json(json.as_bytes(), &|_| None).expect("valid config")
    }

    #[test]
    fn a_request_of_any_of_the_four_apis_not_streamed_is_gathered_under_first_token() {
        let on = config(r#""timeouts":{"first_token":"1s"},"#);
        let body = br#"{"model":"m","input":"hi"}"#;
        for api in [
            Api::OpenAiChat,
            Api::AnthropicMessages,
            Api::OpenAiResponses,
            Api::Gemini,
        ] {
            assert!(gathers(&on, Some(api), false, body), "{api:?}");
            // A stream is a stream already; without the timeout nothing changes.
            assert!(!gathers(&on, Some(api), true, body), "{api:?}");
            assert!(!gathers(&config(""), Some(api), false, body), "{api:?}");
        }
        // Embeddings and legacy completions never are; what a gathered answer cannot carry
        // goes as it is.
        assert!(!gathers(&on, None, false, body));
        let several = br#"{"contents":[],"generationConfig":{"candidateCount":3}}"#;
        assert!(!gathers(&on, Some(Api::Gemini), false, several));
    }

    #[test]
    fn liveness_answers_get_and_head_on_its_path_on_the_gateways_route_only() {
        let c = config("");
        let none = || None;
        assert_eq!(liveness_request(&c, "/", "GET", none), Some(true));
        assert_eq!(liveness_request(&c, "/?probe=1", "HEAD", none), Some(false));
        assert_eq!(liveness_request(&c, "/", "POST", none), None);
        assert_eq!(
            liveness_request(&c, "/v1/chat/completions", "GET", none),
            None
        );
        for ours in ["llm_failover", "llm-failover", ""] {
            assert_eq!(
                liveness_request(&c, "/", "GET", || Some(ours.into())),
                Some(true),
                "{ours}"
            );
        }
        // A route the user configured for "/" (their web app) is not shadowed.
        assert_eq!(
            liveness_request(&c, "/", "GET", || Some("web".into())),
            None
        );
        // Unless a chain says it serves that route.
        let json = r#"{"providers":[{"name":"a","cluster":"ca"}],
            "chains":[{"name":"web","routes":["web"],"providers":["a"]}]}"#;
        let c = Config::from_json(json.as_bytes(), &|_| None).expect("valid config");
        assert_eq!(
            liveness_request(&c, "/", "GET", || Some("web".into())),
            Some(true)
        );
    }

    #[test]
    fn the_liveness_path_moves_turns_off_and_yields_to_a_chains_paths() {
        let moved = config(r#""liveness_path":"/healthz","#);
        assert_eq!(
            liveness_request(&moved, "/healthz", "GET", || None),
            Some(true)
        );
        assert_eq!(liveness_request(&moved, "/", "GET", || None), None);
        let off = config(r#""liveness_path":"","#);
        assert_eq!(liveness_request(&off, "/", "GET", || None), None);
        for paths in [r#"["/"]"#, r#"["/*"]"#, r#"["*"]"#] {
            let json = format!(
                r#"{{"providers":[{{"name":"a","cluster":"ca"}}],
                "chains":[{{"name":"root","paths":{paths},"providers":["a"]}}]}}"#
            );
            let c = Config::from_json(json.as_bytes(), &|_| None).expect("valid config");
            assert_eq!(liveness_request(&c, "/", "GET", || None), None, "{paths}");
        }
        let json = r#"{"providers":[{"name":"a","cluster":"ca"}],
            "chains":[{"name":"chat","paths":["/v1/*"],"providers":["a"]}]}"#;
        let c = Config::from_json(json.as_bytes(), &|_| None).expect("valid config");
        assert_eq!(liveness_request(&c, "/", "GET", || None), Some(true));
        let bad = br#"{"liveness_path":"healthz","providers":[{"name":"a"}],"chains":[{"name":"m","providers":["a"]}]}"#;
        let problems = Config::from_json(bad, &|_| None).err().unwrap_or_default();
        assert!(
            problems
                .iter()
                .any(|p| p.to_string().contains("liveness_path")),
            "{problems:?}"
        );
    }

    fn plan(entries: &[u8]) -> Plan {
        Plan {
            chain: ChainId::FIRST,
            slots: entries
                .iter()
                .map(|&e| Slot {
                    entry: e.into(),
                    pristine: true,
                    probe: false,
                })
                .collect(),
            skipped: Vec::new(),
            context_window: Vec::new(),
            content_policy: Vec::new(),
            team: Default::default(),
        }
    }

    #[test]
    fn a_caller_header_that_is_also_a_gateway_credential_is_removed() {
        let c = config(r#""caller_header":"X-Api-Key","#);
        assert_eq!(
            request_header(&c, b"x-api-key"),
            RequestHeader::Caller { remove: true }
        );
        assert_eq!(
            request_header(&c, b"authorization"),
            RequestHeader::GatewayCredential
        );
        let own = config(r#""caller_header":"x-team","#);
        assert_eq!(
            request_header(&own, b"x-team"),
            RequestHeader::Caller { remove: false }
        );
        assert_eq!(
            request_header(&own, b"x-llm-fallback"),
            RequestHeader::OptOut
        );
        assert_eq!(request_header(&own, b"x-other"), RequestHeader::Other);
    }

    #[test]
    fn a_body_past_the_limit_is_a_413_and_no_limit_takes_any() {
        let limited = config(r#""body_limit":10,"#);
        assert_eq!(body_too_large(&limited, 10), None);
        let reply = body_too_large(&limited, 11).expect("too large");
        assert_eq!((reply.status, reply.code), (413, "body_too_large"));
        assert!(reply.message.contains("10 bytes"), "{}", reply.message);
        assert_eq!(body_too_large(&config(""), usize::MAX), None);
    }

    #[test]
    fn router_mode_publishes_a_slot_per_attempt_and_grouping_mode_one_group() {
        let published = |config: &Config, entries: &[u8]| {
            let mut out = Vec::new();
            route_properties(config, &plan(entries), |p, v| out.push((p, v.to_string())));
            out
        };
        assert_eq!(
            published(&config(""), &[1, 0]),
            vec![
                (wire::SLOT_PROPERTIES[0], "cb".to_string()),
                (wire::SLOT_PROPERTIES[1], "ca".to_string())
            ]
        );
        let grouped = config(r#""routing":"groups","#);
        let two = plan(&[1, 0]);
        assert_eq!(
            published(&grouped, &[1, 0]),
            vec![(
                wire::GROUP_PROPERTY,
                group::route_cluster(&grouped, &grouped.chains[0], &two.slots)
            )]
        );
        // One attempt goes to the provider's own cluster, in either mode.
        assert_eq!(
            published(&grouped, &[1]),
            vec![(wire::GROUP_PROPERTY, "cb".to_string())]
        );
    }
}

#[cfg(test)]
mod gemini_tests {
    use super::*;

    #[test]
    fn a_gemini_callers_key_in_the_query_is_removed_and_its_path_names_the_model() {
        let p = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=gw-key";
        assert_eq!(
            without_key(p).as_deref(),
            Some("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
        );
        assert_eq!(
            without_key("/v1beta/models/m:generateContent?key=k").as_deref(),
            Some("/v1beta/models/m:generateContent")
        );
        // Only Gemini's endpoint: another API's query is the caller's own.
        assert_eq!(without_key("/v1/chat/completions?key=k"), None);
        assert_eq!(without_key("/v1beta/models/m:generateContent"), None);
        let r = read_request(p, br#"{"contents":[]}"#).unwrap();
        assert_eq!((r.model.as_ref(), r.stream()), ("gemini-2.5-flash", true));
        let r = read_request("/v1/chat/completions", br#"{"model":"gpt-4o"}"#).unwrap();
        assert_eq!((r.model.as_ref(), r.stream()), ("gpt-4o", false));
    }
}

#[cfg(test)]
mod gemini_key_tests {
    use super::*;

    #[test]
    fn a_gemini_callers_key_header_is_a_gateway_credential_whatever_the_list() {
        let config = Config::from_json(
            br#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}],"gateway_credential_headers":["x-gw"]}"#,
            &|_| None,
        )
        .unwrap();
        assert_eq!(
            request_header(&config, b"x-goog-api-key"),
            RequestHeader::GatewayCredential
        );
        assert_eq!(
            request_header(&config, b"x-gw"),
            RequestHeader::GatewayCredential
        );
        assert_eq!(request_header(&config, b"x-api-key"), RequestHeader::Other);
    }
}
