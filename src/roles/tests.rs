//! Glue-level tests without Envoy: a recording host plays Envoy's side of every call the roles
//! make (headers, filter state, shared data with CAS, metrics, local replies, the clock), and a
//! small router drives both roles through whole requests the way router mode does
//! (docs/internals.md "How attempts are carried"): slot properties pick each attempt's cluster, the retry marker (or a missing
//! response) makes the next attempt, one request header map is shared by every attempt.

use super::*;
use crate::classify::Class;
use crate::host::{Cas, MemoryStore};
use crate::metrics as names;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

const T0: u64 = 1_700_000_000_000;

// ---------------------------------------------------------------------------------------------
// The recording host.

/// What every stream shares: shared data, the clock, metrics.
#[derive(Default)]
struct World {
    store: MemoryStore,
    now: Cell<u64>,
    /// Metric id - 1 -> (name, value).
    metrics: RefCell<Vec<(String, u64)>>,
}

impl World {
    fn metric(&self, name: &str) -> u64 {
        self.metrics
            .borrow()
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }
    fn advance(&self, ms: u64) {
        self.now.set(self.now.get() + ms);
    }
}

type Headers = Vec<(String, Vec<u8>)>;
/// A local reply: status, headers, body.
type LocalReply = (u16, Vec<(String, String)>, Vec<u8>);

/// One HTTP stream as Envoy holds it.
#[derive(Default)]
struct Stream {
    request: RefCell<Headers>,
    response: RefCell<Headers>,
    request_body: RefCell<Vec<u8>>,
    response_body: RefCell<Vec<u8>>,
    properties: RefCell<HashMap<Vec<u8>, Vec<u8>>>,
    local_reply: RefCell<Option<LocalReply>>,
    route_cache_cleared: Cell<usize>,
    /// What `Host::resume` was called for (a timer's action).
    resumed: RefCell<Vec<Map>>,
}

#[derive(Clone)]
struct Recording {
    world: Rc<World>,
    stream: Rc<Stream>,
}

impl Recording {
    fn map(&self, map: Map) -> &RefCell<Headers> {
        match map {
            Map::Request => &self.stream.request,
            Map::Response => &self.stream.response,
        }
    }
    fn buffer(&self, map: Map) -> &RefCell<Vec<u8>> {
        match map {
            Map::Request => &self.stream.request_body,
            Map::Response => &self.stream.response_body,
        }
    }
    fn set_envoy_property(&self, path: &[u8], value: Option<&[u8]>) {
        let mut properties = self.stream.properties.borrow_mut();
        match value {
            Some(v) => properties.insert(path.to_vec(), v.to_vec()),
            None => properties.remove(path),
        };
    }
}

impl SharedStore for Recording {
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)> {
        self.world.store.get(key)
    }
    fn set(&self, key: &str, value: &[u8], cas: Option<Cas>) -> Result<(), crate::host::SetError> {
        self.world.store.set(key, value, cas)
    }
}

impl Clock for Recording {
    fn now_ms(&self) -> u64 {
        self.world.now.get()
    }
}

fn serialize(headers: &Headers) -> Vec<u8> {
    let mut out = (headers.len() as u32).to_le_bytes().to_vec();
    for (name, value) in headers {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(value);
        out.push(0);
    }
    out
}

impl Host for Recording {
    fn header(&self, map: Map, name: &str) -> Option<Vec<u8>> {
        let headers = self.map(map).borrow();
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
    fn header_map(&self, map: Map) -> Vec<u8> {
        serialize(&self.map(map).borrow())
    }
    fn set_header(&self, map: Map, name: &str, value: Option<&str>) {
        let mut headers = self.map(map).borrow_mut();
        headers.retain(|(n, _)| n != name);
        if let Some(v) = value {
            headers.push((name.to_string(), v.as_bytes().to_vec()));
        }
    }
    fn set_header_bytes(&self, map: Map, name: &str, value: Option<&[u8]>) {
        let mut headers = self.map(map).borrow_mut();
        headers.retain(|(n, _)| n != name);
        if let Some(v) = value {
            headers.push((name.to_string(), v.to_vec()));
        }
    }
    fn add_header_bytes(&self, map: Map, name: &str, value: &[u8]) {
        self.map(map)
            .borrow_mut()
            .push((name.to_string(), value.to_vec()));
    }
    fn property(&self, path: &[u8]) -> Option<Vec<u8>> {
        self.stream.properties.borrow().get(path).cloned()
    }
    fn set_property(&self, name: &str, value: &[u8]) {
        self.set_envoy_property(name.as_bytes(), Some(value));
    }
    fn body(&self, map: Map, size: usize) -> Option<Vec<u8>> {
        let body = self.buffer(map).borrow();
        Some(body.get(..size.min(body.len()))?.to_vec())
    }
    fn set_body(&self, map: Map, size: usize, value: &[u8]) {
        let mut body = self.buffer(map).borrow_mut();
        let size = size.min(body.len());
        body.splice(..size, value.iter().copied());
    }
    fn body_range(&self, map: Map, start: usize, len: usize) -> Option<Vec<u8>> {
        let body = self.buffer(map).borrow();
        let end = start.saturating_add(len).min(body.len());
        Some(body.get(start.min(end)..end)?.to_vec())
    }
    fn append_body(&self, map: Map, size: usize, value: &[u8]) {
        let mut body = self.buffer(map).borrow_mut();
        let size = size.min(body.len());
        body.splice(size..size, value.iter().copied());
    }
    fn resume(&self, map: Map) {
        self.stream.resumed.borrow_mut().push(map);
    }
    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: Option<&[u8]>) {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        *self.stream.local_reply.borrow_mut() =
            Some((status, headers, body.unwrap_or_default().to_vec()));
    }
    fn define_metric(&self, _kind: MetricKind, name: &str) -> Option<u32> {
        let mut metrics = self.world.metrics.borrow_mut();
        let index = match metrics.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                metrics.push((name.to_string(), 0));
                metrics.len() - 1
            }
        };
        u32::try_from(index + 1).ok()
    }
    fn increment_metric(&self, id: u32) {
        if let Some(m) = self.world.metrics.borrow_mut().get_mut(id as usize - 1) {
            m.1 += 1;
        }
    }
    fn add_metric(&self, id: u32, delta: u64) {
        if let Some(m) = self.world.metrics.borrow_mut().get_mut(id as usize - 1) {
            m.1 += delta;
        }
    }
    fn record_metric(&self, id: u32, value: u64) {
        if let Some(m) = self.world.metrics.borrow_mut().get_mut(id as usize - 1) {
            m.1 = value;
        }
    }
    fn clear_route_cache(&self) -> bool {
        self.stream
            .route_cache_cleared
            .set(self.stream.route_cache_cleared.get() + 1);
        true
    }
}

// ---------------------------------------------------------------------------------------------
// A router-mode Envoy around the two roles.

/// What a provider does with one attempt.
#[derive(Debug, Clone)]
enum Provider {
    Answer(u16, Vec<(&'static str, &'static str)>, &'static str),
    /// An answer whose body is not text (Bedrock's event stream).
    Bytes(u16, Vec<(&'static str, &'static str)>, Vec<u8>),
    /// Connection refused before any response (Envoy retries by itself).
    Refused,
    /// No response headers within the attempt timeout.
    Timeout,
    /// Answers with this status after this many milliseconds.
    After(u64, u16),
    /// A `200` answer whose body comes in these chunks, ended as `Ending` says.
    Chunks(Vec<(&'static str, &'static str)>, Vec<&'static str>, Ending),
}

/// How a chunked answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The last chunk carries the end of the stream.
    Body,
    /// Every chunk comes without it; trailers end the stream (HTTP/2, chunked trailers).
    Trailers,
    /// After the chunks nothing comes until the attempt's own deadline (a timer) passes.
    Timer,
}

/// The provider's answer head, as the router hands it to the upstream role.
fn set_response_head(host: &Recording, code: u16, headers: &[(&str, &str)]) {
    let mut response: Headers = vec![(":status".into(), code.to_string().into_bytes())];
    response.extend(
        headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())),
    );
    *host.stream.response.borrow_mut() = response;
}

/// The route retries on the marker's exact value, as the rendered policy matches it ("0" says
/// exhausted: no retry).
fn marked_for_retry(host: &Recording) -> bool {
    host.header(Map::Response, wire::RETRY_MARKER_HEADER)
        == Some(wire::RETRY_MARKER_RETRY.as_bytes().to_vec())
}

fn ok() -> Provider {
    Provider::Answer(200, vec![], r#"{"ok":true}"#)
}
fn status(code: u16) -> Provider {
    Provider::Answer(code, vec![], r#"{"error":{}}"#)
}

/// What one provider was sent.
#[derive(Debug, Clone)]
struct Sent {
    cluster: String,
    headers: Headers,
    body: Vec<u8>,
}

impl Sent {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Headers,
    body: Vec<u8>,
    /// The filter answered itself (no router involved).
    local: bool,
    sent: Vec<Sent>,
    /// The attempt log as access logs print it.
    log: Option<String>,
    /// The request's and the answer's model in filter state (`log_models`).
    models: [Option<String>; 2],
    /// The caller's name in filter state (`caller_header` with `callers`).
    caller: Option<String>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
    fn body_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
    fn clusters(&self) -> Vec<&str> {
        self.sent.iter().map(|s| s.cluster.as_str()).collect()
    }
}

struct Gateway {
    world: Rc<World>,
    config: Rc<Config>,
    /// The upstream role's configuration (the same unless a test makes the roles drift).
    up_config: Rc<Config>,
    down_metrics: Rc<Metrics>,
    up_metrics: Rc<Metrics>,
    /// Every attempt goes to the first attempt's cluster (a route without
    /// `refresh_cluster_on_retry`).
    sticky_cluster: bool,
    /// Grouping mode: attempt k reaches the group's (k + spill)-th sub-cluster, as an
    /// aggregate does when a sub-cluster has no healthy host (docs/older-envoys.md).
    spill: usize,
}

impl Gateway {
    fn new(json: &str) -> Gateway {
        let world = Rc::new(World::default());
        world.now.set(T0);
        let env = |name: &str| (name == "KEY_B").then(|| "sk-b".to_string());
        let config = Rc::new(Config::from_json(json.as_bytes(), &env).expect("valid config"));
        let root = Recording {
            world: Rc::clone(&world),
            stream: Rc::default(),
        };
        init_health_records(&config, &root);
        let down_metrics = Rc::new(Metrics::new(&config, &root));
        let up_metrics = Rc::new(Metrics::new(&config, &root));
        Gateway {
            world,
            up_config: Rc::clone(&config),
            config,
            down_metrics,
            up_metrics,
            sticky_cluster: false,
            spill: 0,
        }
    }

    fn metric(&self, name: &str) -> u64 {
        self.world.metric(name)
    }

    /// The upstream root's tick (what its worker held reaches the metrics and shared data).
    fn tick(&self) {
        let root = Recording {
            world: Rc::clone(&self.world),
            stream: Rc::default(),
        };
        self.up_metrics.flush_answers(&self.up_config, &root);
    }

    /// `llm_failover_tokens_total{provider, model}` by kind, after a tick.
    fn tokens(&self, provider: &str, model: &str) -> [u64; 3] {
        self.tick();
        crate::usage::Kind::ALL.map(|kind| self.metric(&names::tokens(provider, model, kind, None)))
    }

    fn chat(&self, model: &str, providers: &[Provider]) -> Response {
        let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
        self.request(&[], &body, providers)
    }

    /// One request through the downstream role, the router and the upstream role of each
    /// attempt. Attempt k is answered by `providers[k - 1]`.
    fn request(&self, extra: &[(&str, &str)], body: &str, providers: &[Provider]) -> Response {
        let host = Recording {
            world: Rc::clone(&self.world),
            stream: Rc::default(),
        };
        let mut down = match self.downstream(&host, extra, body) {
            Ok(down) => down,
            Err(local) => return *local,
        };
        let max_retries: usize = host
            .header(Map::Request, "x-envoy-max-retries")
            .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(1);
        // The router buffers the request body as the downstream role left it and replays that
        // to every attempt; what one attempt's upstream role rewrites stays with that attempt.
        let routed_body = host.stream.request_body.borrow().clone();
        let mut sent = Vec::new();
        let mut attempt = 0;
        let details = loop {
            attempt += 1;
            let k = if self.sticky_cluster { 1 } else { attempt };
            let (route_cluster, cluster) = self.route(&host, k);
            let Some(mut up) = self.send(&host, attempt, &route_cluster, &routed_body) else {
                break "upstream_local_reply";
            };
            sent.push(Sent {
                cluster,
                headers: host.stream.request.borrow().clone(),
                body: host.stream.request_body.borrow().clone(),
            });
            let retries_left = attempt <= max_retries;
            let answer = providers.get(attempt - 1).cloned().unwrap_or_else(ok);
            match self.answer(&host, &mut up, answer) {
                Ok(_) if marked_for_retry(&host) && retries_left => {}
                Ok(details) => break details,
                Err(_) if retries_left => {}
                Err(details) => {
                    let code = if details.contains("timeout") {
                        "504"
                    } else {
                        "503"
                    };
                    *host.stream.response.borrow_mut() =
                        vec![(":status".into(), code.as_bytes().to_vec())];
                    *host.stream.response_body.borrow_mut() = b"upstream connect error".to_vec();
                    break details;
                }
            }
        };
        host.set_envoy_property(
            b"upstream\0request_attempt_count",
            Some(&(attempt as u64).to_le_bytes()),
        );
        host.set_envoy_property(b"response\0code_details", Some(details.as_bytes()));
        down.on_response_headers();
        let len = host.stream.response_body.borrow().len();
        down.on_response_body(len, true);
        down.on_done();
        let status = status_code(&host, Map::Response);
        let headers = host.stream.response.borrow().clone();
        let body = host.stream.response_body.borrow().clone();
        Response {
            status,
            headers,
            body,
            local: false,
            sent,
            log: self.log(&host),
            models: self.models(&host),
            caller: text_property(&host, wire::CALLER_PROPERTY.as_bytes()),
        }
    }

    /// The caller's request through the downstream role: `Err` with its local reply when it
    /// answered the request itself.
    fn downstream(
        &self,
        host: &Recording,
        extra: &[(&str, &str)],
        body: &str,
    ) -> Result<Downstream<Recording>, Box<Response>> {
        let mut request: Headers = vec![
            (":method".into(), b"POST".to_vec()),
            (":path".into(), b"/v1/chat/completions".to_vec()),
            (":authority".into(), b"gateway.local".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
            ("content-length".into(), body.len().to_string().into_bytes()),
            ("authorization".into(), b"Bearer caller-key".to_vec()),
        ];
        for (k, v) in extra {
            request.retain(|(n, _)| n != k);
            request.push((k.to_string(), v.as_bytes().to_vec()));
        }
        *host.stream.request.borrow_mut() = request;
        *host.stream.request_body.borrow_mut() = body.as_bytes().to_vec();
        let mut down = Downstream::new(
            host.clone(),
            Rc::clone(&self.config),
            Rc::clone(&self.down_metrics),
            LocalAnswers::new(),
        );
        let mut flow = down.on_request_headers(body.is_empty());
        if flow == Flow::Pause && host.stream.local_reply.borrow().is_none() {
            flow = down.on_request_body(body.len(), true);
        }
        if let Some((status, headers, body)) = host.stream.local_reply.borrow_mut().take() {
            down.on_done();
            return Err(Box::new(Response {
                status,
                headers: headers
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect(),
                body,
                local: true,
                sent: Vec::new(),
                log: self.log(host),
                models: self.models(host),
                caller: text_property(host, wire::CALLER_PROPERTY.as_bytes()),
            }));
        }
        assert_eq!(flow, Flow::Continue, "the request goes on to the router");
        assert!(
            host.stream.route_cache_cleared.get() > 0,
            "route cache cleared"
        );
        Ok(down)
    }

    /// Attempt `attempt`'s request through its upstream role (on `route_cluster`): `None` when
    /// the role answered the attempt itself (that answer is then the response).
    fn send(
        &self,
        host: &Recording,
        attempt: usize,
        route_cluster: &str,
        routed_body: &[u8],
    ) -> Option<Upstream<Recording>> {
        host.set_header(
            Map::Request,
            wire::ATTEMPT_COUNT_HEADER,
            Some(&attempt.to_string()),
        );
        host.set_envoy_property(b"xds\0cluster_name", Some(route_cluster.as_bytes()));
        host.set_envoy_property(b"upstream\0transport_failure_reason", None);
        host.stream.response.borrow_mut().clear();
        host.stream.response_body.borrow_mut().clear();
        let mut up = Upstream::new(
            host.clone(),
            Rc::clone(&self.up_config),
            Rc::clone(&self.up_metrics),
        );
        *host.stream.request_body.borrow_mut() = routed_body.to_vec();
        let mut flow = up.on_request_headers(routed_body.is_empty());
        if flow == Flow::Pause && host.stream.local_reply.borrow().is_none() {
            flow = up.on_request_body(routed_body.len(), true);
        }
        if flow == Flow::Pause && host.stream.local_reply.borrow().is_none() {
            // An in-place retry waits out its back-off: the timer sends it.
            if let Some(at) = up.deadline() {
                self.world.now.set(at.max(self.world.now.get()));
                up.on_timer();
                if host
                    .stream
                    .resumed
                    .borrow_mut()
                    .drain(..)
                    .any(|m| m == Map::Request)
                {
                    flow = Flow::Continue;
                }
            }
        }
        if flow == Flow::Continue {
            return Some(up);
        }
        let Some((code, headers, body)) = host.stream.local_reply.borrow_mut().take() else {
            panic!("the upstream role paused the request without answering");
        };
        // The upstream role answered the attempt itself: that is the response.
        let mut response: Headers = vec![(":status".into(), code.to_string().into_bytes())];
        response.extend(headers.into_iter().map(|(k, v)| (k, v.into_bytes())));
        *host.stream.response.borrow_mut() = response;
        *host.stream.response_body.borrow_mut() = body;
        up.on_done();
        None
    }

    /// The provider's answer to one attempt through its upstream role: `Ok` with the code
    /// details when it answered, `Err` with them when no response came.
    fn answer(
        &self,
        host: &Recording,
        up: &mut Upstream<Recording>,
        mut answer: Provider,
    ) -> Result<&'static str, &'static str> {
        if let Provider::After(ms, code) = answer {
            self.world.advance(ms);
            answer = status(code);
        }
        let answer = match answer {
            Provider::Answer(code, headers, body) => {
                Provider::Bytes(code, headers, body.as_bytes().to_vec())
            }
            other => other,
        };
        match answer {
            Provider::After(..) | Provider::Answer(..) => {
                unreachable!("turned into bytes above")
            }
            Provider::Chunks(headers, chunks, ending) => {
                self.stream(host, up, &headers, &chunks, ending);
                Ok("via_upstream")
            }
            Provider::Bytes(code, headers, body) => {
                set_response_head(host, code, &headers);
                *host.stream.response_body.borrow_mut() = body.clone();
                let held = up.on_response_headers(body.is_empty()) == Flow::Pause;
                if held || !body.is_empty() {
                    // Held to read the start of the body (behaviour.md 3): the router buffers.
                    // Otherwise the body passes the filter as one chunk.
                    assert_eq!(up.on_response_body(body.len(), true), Flow::Continue);
                }
                up.on_done();
                Ok("via_upstream")
            }
            Provider::Refused => {
                host.set_envoy_property(
                    b"upstream\0transport_failure_reason",
                    Some(b"delayed_connect_error:_111"),
                );
                up.on_done();
                Err("upstream_reset_before_response_started{remote_connection_failure}")
            }
            Provider::Timeout => {
                self.world.advance(self.config.timeouts.attempt_ms);
                up.on_done();
                Err("upstream_per_try_timeout")
            }
        }
    }

    /// A `200` answer in `chunks` through the upstream role, ended as `ending` says; the
    /// response body is what went on to the caller.
    fn stream(
        &self,
        host: &Recording,
        up: &mut Upstream<Recording>,
        headers: &[(&str, &str)],
        chunks: &[&str],
        ending: Ending,
    ) {
        set_response_head(host, 200, headers);
        host.stream.response_body.borrow_mut().clear();
        host.stream.resumed.borrow_mut().clear();
        up.on_response_headers(false);
        // What went on to the caller. A chunk the role paused on stays in the buffer, and the
        // next callback sees it with the new chunk (as Envoy buffers it); what it continued
        // goes on.
        let mut delivered = Vec::new();
        let last = chunks.len();
        for (i, chunk) in chunks.iter().enumerate() {
            let end = ending == Ending::Body && i + 1 == last;
            host.stream
                .response_body
                .borrow_mut()
                .extend_from_slice(chunk.as_bytes());
            let len = host.stream.response_body.borrow().len();
            if up.on_response_body(len, end) == Flow::Continue {
                delivered.append(&mut host.stream.response_body.borrow_mut());
            }
        }
        match ending {
            Ending::Body => {}
            Ending::Trailers => {
                // The trailers release what is buffered after them.
                if up.on_response_trailers() == Flow::Continue {
                    delivered.append(&mut host.stream.response_body.borrow_mut());
                }
            }
            Ending::Timer => {
                let at = up.deadline().expect("a deadline");
                self.world.now.set(at.max(self.world.now.get()));
                up.on_timer();
                if host.stream.resumed.borrow().contains(&Map::Response) {
                    delivered.append(&mut host.stream.response_body.borrow_mut());
                }
            }
        }
        up.on_done();
        *host.stream.response_body.borrow_mut() = delivered;
    }

    /// The route's cluster for attempt `k` and the provider cluster the attempt reaches. Router
    /// mode: slot k's cluster. Grouping mode: the group the downstream role named; an aggregate
    /// sends attempt k to its k-th sub-cluster, whose host names its provider in metadata.
    fn route(&self, host: &Recording, k: usize) -> (String, String) {
        let text =
            |v: Option<Vec<u8>>| String::from_utf8(v.unwrap_or_default()).unwrap_or_default();
        if self.config.routing == crate::config::Routing::Slots {
            let slot = format!("{}{k}", wire::SLOT_PROPERTY_PREFIX);
            let cluster = text(Some(
                host.property(slot.as_bytes())
                    .expect("the matcher finds a slot"),
            ));
            return (cluster.clone(), cluster);
        }
        assert!(
            host.property(b"llm_failover.try1").is_none(),
            "no slots in grouping mode"
        );
        let group = text(host.property(wire::GROUP_PROPERTY.as_bytes()));
        let subs: Vec<String> = match group.strip_prefix(wire::GROUP_CLUSTER_PREFIX) {
            Some(rest) => rest
                .split(wire::GROUP_CLUSTER_SEPARATOR)
                .map(String::from)
                .collect(),
            None => vec![group.clone()],
        };
        let cluster = subs[(k - 1 + self.spill).min(subs.len() - 1)].clone();
        let provider = self.config.providers.iter().find(|p| p.cluster == cluster);
        host.set_envoy_property(
            wire::HOST_PROVIDER_PROPERTY,
            provider.map(|p| p.name.as_bytes()),
        );
        (group, cluster)
    }

    fn log(&self, host: &Recording) -> Option<String> {
        text_property(host, wire::ATTEMPTS_PROPERTY.as_bytes())
    }

    fn models(&self, host: &Recording) -> [Option<String>; 2] {
        [wire::REQUEST_MODEL_PROPERTY, wire::RESPONSE_MODEL_PROPERTY]
            .map(|p| text_property(host, p.as_bytes()))
    }
}

const THREE: &str = r#"{
    "providers": [
        {"name": "a", "cluster": "ca", "credential": {"header": "authorization", "value": "sk-a", "prefix": "Bearer "}},
        {"name": "b", "cluster": "cb", "credential": {"header": "x-api-key", "env": "KEY_B"},
         "headers": {"anthropic-version": "2023-06-01"}, "authority": "api.b.example", "path_prefix": "/b"},
        {"name": "c", "cluster": "cc", "credential": {"header": "api-key", "value": "sk-c"}}
    ],
    "chains": [
        {"name": "main", "models": ["gpt-*"], "providers": ["a", {"provider": "b", "model": "b-large"}, "c"]}
    ],
    "breaker": {"failures": 2, "window": "30s", "cooldown": "60s"},
    "status_path": "/llm-failover/status"
}"#;

fn with_chain_options(options: &str) -> String {
    THREE.replace(
        r#""providers": ["a", {"provider": "b", "model": "b-large"}, "c"]"#,
        &format!(r#""providers": ["a", {{"provider": "b", "model": "b-large"}}, "c"], {options}"#),
    )
}

fn attempts_metric(provider: &str, class: Class) -> String {
    names::attempts(provider, class)
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 6 and 7 on the success path.

#[test]
fn a_success_goes_to_the_first_provider_with_its_own_credential_only() {
    let gw = Gateway::new(THREE);
    let r = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["ca"]);
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("a"));
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("1"));
    assert_eq!(r.header(wire::FALLBACK_COUNT_HEADER), None);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), None);
    assert_eq!(r.header(wire::RETRY_MARKER_HEADER), None);
    let sent = &r.sent[0];
    // The caller's gateway key is replaced by the provider's own; no other provider's key.
    assert_eq!(sent.header("authorization"), Some("Bearer sk-a"));
    assert_eq!(sent.header("x-api-key"), None);
    assert_eq!(sent.header("api-key"), None);
    assert_eq!(
        sent.header(wire::MAX_RETRIES_HEADER),
        None,
        "consumed by the router"
    );
    assert_eq!(sent.header(":path"), Some("/v1/chat/completions"));
    assert_eq!(sent.body, br#"{"model":"gpt-4o","messages":[]}"#);
    assert_eq!(gw.metric(&attempts_metric("a", Class::Ok)), 1);
    assert_eq!(r.log.as_deref(), Some("a:ok:0ms"));
}

#[test]
fn the_models_reach_filter_state_only_with_log_models() {
    let some = |m: &str| Some(m.to_string());
    // Off (the default): nothing written, on a success or a failover.
    let gw = Gateway::new(THREE);
    assert_eq!(gw.chat("gpt-4o", &[ok()]).models, [None, None]);
    assert_eq!(gw.chat("gpt-4o", &[status(500), ok()]).models, [None, None]);
    // On: the request's model, and the model the answering attempt was sent (b's entry names
    // its own; a's and c's send the request's).
    let gw = Gateway::new(&THREE.replacen("{", r#"{"log_models": true,"#, 1));
    let r = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(r.models, [some("gpt-4o"), some("gpt-4o")]);
    let r = gw.chat("gpt-4o", &[status(500), ok()]);
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("b"));
    assert_eq!(r.models, [some("gpt-4o"), some("b-large")]);
    let r = gw.chat("gpt-4o", &[status(500), status(500), ok()]);
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("c"));
    assert_eq!(r.models, [some("gpt-4o"), some("gpt-4o")]);
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 3, 6, 7: failover, what each attempt carries, what the caller sees.

#[test]
fn a_server_error_falls_over_with_the_next_providers_rewrites() {
    let gw = Gateway::new(THREE);
    let r = gw.chat("gpt-4o", &[status(500), ok()]);
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["ca", "cb"]);
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("b"));
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("2"));
    assert_eq!(r.header(wire::FALLBACK_COUNT_HEADER), Some("1"));
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("server_error"));
    let b = &r.sent[1];
    assert_eq!(b.header("authorization"), None, "a's key never reaches b");
    assert_eq!(b.header("x-api-key"), Some("sk-b"));
    assert_eq!(b.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(b.header(":authority"), Some("api.b.example"));
    assert_eq!(b.header(":path"), Some("/b/v1/chat/completions"));
    assert_eq!(b.body, br#"{"model":"b-large","messages":[]}"#);
    assert_eq!(
        b.header("content-length"),
        Some(b.body.len().to_string().as_str())
    );
    assert_eq!(gw.metric(&names::fallbacks("a", "b")), 1);
    assert_eq!(gw.metric(&attempts_metric("a", Class::ServerError)), 1);
    assert_eq!(gw.metric(&attempts_metric("b", Class::Ok)), 1);
    let log = r.log.unwrap_or_default();
    assert!(
        log.starts_with("a:server_error:") && log.contains(",b:ok:"),
        "{log}"
    );
}

#[test]
fn a_third_attempt_restores_what_the_second_rewrote() {
    let gw = Gateway::new(THREE);
    let r = gw.chat("gpt-4o", &[status(503), status(429), ok()]);
    assert_eq!(r.clusters(), ["ca", "cb", "cc"]);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("rate_limited"));
    assert_eq!(r.header(wire::FALLBACK_COUNT_HEADER), Some("2"));
    let c = &r.sent[2];
    assert_eq!(c.header("api-key"), Some("sk-c"));
    assert_eq!(c.header("x-api-key"), None);
    assert_eq!(c.header("anthropic-version"), None);
    assert_eq!(c.header(":authority"), Some("gateway.local"));
    assert_eq!(c.header(":path"), Some("/v1/chat/completions"));
    // The body was rewritten for b; c gets the caller's model and the planned length back.
    let planned = br#"{"model":"gpt-4o","messages":[]}"#;
    assert_eq!(
        c.header("content-length"),
        Some(planned.len().to_string().as_str())
    );
}

#[test]
fn an_in_place_retry_is_no_fallback_for_the_header_or_the_metric() {
    let in_place = with_chain_options(r#""retry_in_place": {}"#);
    // A 500 once, then healthy: two attempts on a, no fallback.
    let gw = Gateway::new(&in_place);
    let r = gw.chat("gpt-4o", &[status(500), ok()]);
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["ca", "ca"]);
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("2"));
    assert_eq!(r.header(wire::FALLBACK_COUNT_HEADER), None);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), None);
    assert_eq!(gw.metric(&names::fallbacks("a", "a")), 0);
    assert_eq!(gw.metric(&names::fallbacks("a", "b")), 0);
    // Retried in place, then moved on: one fallback, for the failure that moved it.
    let gw = Gateway::new(&in_place);
    let r = gw.chat("gpt-4o", &[status(500), status(503), ok()]);
    assert_eq!(r.clusters(), ["ca", "ca", "cb"]);
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("3"));
    assert_eq!(r.header(wire::FALLBACK_COUNT_HEADER), Some("1"));
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("overloaded"));
    assert_eq!(gw.metric(&names::fallbacks("a", "b")), 1);
    // Moved on, then retried in place there: still one fallback, for a's failure.
    let gw = Gateway::new(&in_place);
    let r = gw.chat("gpt-4o", &[Provider::Timeout, status(500), ok()]);
    assert_eq!(r.clusters(), ["ca", "cb", "cb"]);
    assert_eq!(r.header(wire::FALLBACK_COUNT_HEADER), Some("1"));
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("timeout"));
    assert_eq!(gw.metric(&names::fallbacks("a", "b")), 1);
    assert_eq!(gw.metric(&names::fallbacks("b", "c")), 0);
}

#[test]
fn a_browsers_request_gets_the_gateways_headers_exposed() {
    let gw = Gateway::new(THREE);
    let exposed = "access-control-expose-headers";
    let all = "x-llm-provider, x-llm-attempts, x-llm-fallback-count, x-llm-fallback-reason";
    let body = r#"{"model":"gpt-4o","messages":[]}"#;
    let origin = ("origin", "https://app.example");
    let r = gw.request(&[origin], body, &[status(503), ok()]);
    assert_eq!(r.header(exposed), Some(all));
    // Merged with what the answer exposes already.
    let theirs = Provider::Answer(200, vec![(exposed, "x-request-id")], "{}");
    let r = gw.request(&[origin], body, &[theirs]);
    assert_eq!(
        r.header(exposed),
        Some(format!("x-request-id, {all}").as_str())
    );
    // No Origin: nothing added.
    let r = gw.chat("gpt-4o", &[status(503), ok()]);
    assert_eq!(r.header(exposed), None);
}

#[test]
fn an_answer_that_does_not_fall_over_is_the_answer() {
    let gw = Gateway::new(THREE);
    let r = gw.chat("gpt-4o", &[status(400), ok()]);
    assert_eq!(r.status, 400);
    assert_eq!(r.clusters(), ["ca"]);
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("a"));
    assert_eq!(gw.metric(&attempts_metric("a", Class::InvalidRequest)), 1);
}

#[test]
fn a_providers_own_retry_marker_cannot_make_the_gateway_fall_over() {
    let gw = Gateway::new(THREE);
    let forged = Provider::Answer(400, vec![(wire::RETRY_MARKER_HEADER, "1")], "{}");
    let r = gw.chat("gpt-4o", &[forged, ok()]);
    assert_eq!(r.status, 400);
    assert_eq!(r.clusters(), ["ca"]);
    assert_eq!(r.header(wire::RETRY_MARKER_HEADER), None);
}

#[test]
fn connection_failures_fall_over_and_name_their_class() {
    let gw = Gateway::new(THREE);
    let r = gw.chat("gpt-4o", &[Provider::Refused, Provider::Timeout, ok()]);
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["ca", "cb", "cc"]);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("timeout"));
    assert_eq!(gw.metric(&attempts_metric("a", Class::ConnectionError)), 1);
    assert_eq!(gw.metric(&attempts_metric("b", Class::Timeout)), 1);
    assert_eq!(gw.metric(&names::fallbacks("a", "b")), 1);
    assert_eq!(gw.metric(&names::fallbacks("b", "c")), 1);
}

#[test]
fn an_exhausted_chain_answers_the_last_failure_and_is_counted() {
    let gw = Gateway::new(THREE);
    let r = gw.chat("gpt-4o", &[status(500), status(502), status(503)]);
    assert_eq!(r.status, 503);
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("c"));
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("3"));
    assert_eq!(
        r.header(wire::RETRY_MARKER_HEADER),
        None,
        "never reaches the caller"
    );
    assert_eq!(gw.metric(&names::exhausted("main")), 1);
}

#[test]
fn fallbacks_exhausted_replaces_the_last_failure() {
    let gw = Gateway::new(&with_chain_options(r#""fallbacks_exhausted": true"#));
    let r = gw.chat("gpt-4o", &[status(500), status(500), status(500)]);
    assert_eq!(r.status, 503);
    assert_eq!(r.body_json()["error"]["code"], "fallbacks_exhausted");
    assert_eq!(r.header(wire::SHOULD_RETRY_HEADER), Some("true"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    // Also when the last attempt got no response at all (no marker to see).
    let refused = gw.chat("gpt-4o", &[status(500), status(500), Provider::Refused]);
    assert_eq!(refused.status, 503);
    assert_eq!(refused.body_json()["error"]["code"], "fallbacks_exhausted");
    assert_eq!(gw.metric(&names::exhausted("main")), 2);
}

#[test]
fn every_error_answer_says_whether_to_retry() {
    let gw = Gateway::new(THREE);
    // A provider's 400 does not fall over: passed through, with the gateway's advice over the
    // provider's own.
    let bad = Provider::Answer(400, vec![("x-should-retry", "true")], r#"{"error":{}}"#);
    let r = gw.chat("gpt-4o", &[bad]);
    assert_eq!((r.status, r.clusters()), (400, vec!["ca"]));
    assert_eq!(r.header(wire::SHOULD_RETRY_HEADER), Some("false"));
    // Statuses that do not fall over in this chain, passed through as they are.
    for (code, advice) in [(408, "true"), (422, "false"), (500, "true"), (503, "true")] {
        let gw = Gateway::new(&with_chain_options(r#""fallback_on": ["429"]"#));
        let r = gw.chat("gpt-4o", &[status(code)]);
        assert_eq!((r.status, r.clusters()), (code, vec!["ca"]), "{code}");
        assert_eq!(r.header(wire::SHOULD_RETRY_HEADER), Some(advice), "{code}");
    }
    // A success carries none, even when the provider sent one.
    let chatty = Provider::Answer(200, vec![("x-should-retry", "false")], r#"{"ok":true}"#);
    let r = gw.chat("gpt-4o", &[status(500), chatty]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header(wire::SHOULD_RETRY_HEADER),
        Some("false"),
        "the provider's own, untouched"
    );
    let r = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(r.header(wire::SHOULD_RETRY_HEADER), None);
}

#[test]
fn max_attempts_and_the_opt_out_header_cap_the_walk() {
    let gw = Gateway::new(&with_chain_options(r#""max_attempts": 2"#));
    let r = gw.chat("gpt-4o", &[status(500), status(500), ok()]);
    assert_eq!(r.clusters(), ["ca", "cb"]);
    assert_eq!(r.status, 500);
    let gw = Gateway::new(THREE);
    let body = r#"{"model":"gpt-4o"}"#;
    let r = gw.request(&[("x-llm-fallback", "off")], body, &[status(500), ok()]);
    assert_eq!(r.clusters(), ["ca"]);
    assert_eq!(r.status, 500);
    assert_eq!(r.sent[0].header("x-llm-fallback"), None);
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 2: planning, refusals and what callers cannot steer.

#[test]
fn get_slash_answers_serving_without_a_key_or_a_provider() {
    let gw = Gateway::new(THREE);
    let get = [(":method", "GET"), (":path", "/"), ("authorization", "")];
    let r = gw.request(&get, "", &[ok()]);
    assert!(r.local);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"serving\n"[..]));
    assert!(r.sent.is_empty(), "no provider contacted");
    let off =
        Gateway::new(&THREE.replace(r#""status_path""#, r#""liveness_path": "", "status_path""#));
    let r = off.request(&get, "", &[ok()]);
    assert_eq!(r.body_json()["error"]["code"], "route_not_found");
}

#[test]
fn refusals_contact_no_provider() {
    let gw = Gateway::new(THREE);
    let unknown = gw.chat("llama-3", &[]);
    assert!(unknown.local);
    assert_eq!(
        (
            unknown.status,
            unknown.body_json()["error"]["code"].as_str()
        ),
        (400, Some("model_not_recognized"))
    );
    assert_eq!(unknown.header(wire::SHOULD_RETRY_HEADER), Some("false"));
    let garbage = gw.request(&[], "not json", &[]);
    assert_eq!(
        (
            garbage.status,
            garbage.body_json()["error"]["code"].as_str()
        ),
        (400, Some("invalid_body"))
    );
    // A JSON body without a model is a request without a model: no chain here takes one.
    let no_model = gw.request(&[], r#"{"messages":[]}"#, &[]);
    assert_eq!(no_model.status, 404);
    assert_eq!(no_model.body_json()["error"]["code"], "route_not_found");
}

#[test]
fn callers_cannot_steer_routing_or_retries() {
    let gw = Gateway::new(THREE);
    let steering = [
        ("x-envoy-retry-on", "5xx"),
        ("x-envoy-max-retries", "10"),
        ("x-envoy-upstream-rq-timeout-ms", "1"),
    ];
    let body = r#"{"model":"gpt-4o","fallbacks":["evil"],"messages":[]}"#;
    let r = gw.request(&steering, body, &[ok()]);
    let sent = &r.sent[0];
    assert_eq!(sent.header("x-envoy-retry-on"), None);
    assert_eq!(sent.header("x-envoy-upstream-rq-timeout-ms"), None);
    assert_eq!(sent.body, br#"{"model":"gpt-4o","messages":[]}"#);
    assert_eq!(
        sent.header("content-length"),
        Some(sent.body.len().to_string().as_str())
    );
}

#[test]
fn an_unreadable_path_is_refused() {
    let gw = Gateway::new(THREE);
    let host = Recording {
        world: Rc::clone(&gw.world),
        stream: Rc::default(),
    };
    *host.stream.request.borrow_mut() = vec![(":path".into(), b"/caf\xe9".to_vec())];
    let mut down = Downstream::new(
        host.clone(),
        Rc::clone(&gw.config),
        Rc::clone(&gw.down_metrics),
        LocalAnswers::new(),
    );
    assert_eq!(down.on_request_headers(true), Flow::Pause);
    let reply = host.stream.local_reply.borrow().clone();
    assert_eq!(reply.map(|r| r.0), Some(400));
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 4: the breaker and dead marks, across requests.

#[test]
fn a_breaker_opens_skips_its_provider_probes_once_and_closes() {
    let gw = Gateway::new(THREE);
    // Two counted failures of a (the configured threshold) open its breaker.
    for _ in 0..2 {
        gw.chat("gpt-4o", &[status(500), ok()]);
    }
    let state = names::breaker_state("a");
    assert_eq!(gw.metric(&state), 1, "open");
    let skipped = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(skipped.clusters(), ["cb"]);
    assert_eq!(
        skipped.header(wire::FALLBACK_REASON_HEADER),
        Some("breaker_open")
    );
    assert_eq!(gw.metric(&names::skipped("a", "breaker_open")), 1);
    assert!(skipped
        .log
        .unwrap_or_default()
        .starts_with("a:skipped:breaker_open,b:ok:"));
    // After the cooldown exactly one request probes a; its success closes the breaker.
    gw.world.advance(60_000);
    let probe = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(probe.clusters(), ["ca"]);
    assert_eq!(gw.metric(&state), 0, "closed");
    let after = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(after.clusters(), ["ca"]);
}

#[test]
fn a_failed_probe_reopens_and_every_provider_open_is_circuit_open() {
    let gw = Gateway::new(THREE);
    for _ in 0..2 {
        gw.chat("gpt-4o", &[status(500), status(500), status(500)]);
    }
    let r = gw.chat("gpt-4o", &[]);
    assert!(r.local, "no provider contacted");
    assert_eq!(r.status, 503);
    assert_eq!(r.body_json()["error"]["code"], "circuit_open");
    assert_eq!(gw.metric(&names::skipped("c", "breaker_open")), 1);
    assert_eq!(
        r.log.as_deref(),
        Some("a:skipped:breaker_open,b:skipped:breaker_open,c:skipped:breaker_open")
    );
    gw.world.advance(60_000);
    let probe = gw.chat("gpt-4o", &[status(500), ok()]);
    assert_eq!(probe.clusters(), ["ca", "cb"]);
    assert_eq!(gw.metric(&names::breaker_state("a")), 1, "reopened");
}

/// Counted failures of provider `name` inside the breaker's window now.
fn failures_in_window(gw: &Gateway, name: &str) -> u32 {
    let clock = crate::host::FixedClock(gw.world.now.get());
    let c = &gw.config;
    let health = crate::health::Health::new(&gw.world.store, &clock, &c.breaker, &c.dead_marks);
    health.snapshot(name).failures_in_window
}

#[test]
fn a_request_counts_once_toward_the_breaker_however_often_it_was_tried_in_place() {
    // The breaker opens at 2 failures; every request fails twice on a (a retry in place).
    let gw = Gateway::new(&with_chain_options(r#""retry_in_place": {}"#));
    let first = gw.chat("gpt-4o", &[status(503), status(503), ok()]);
    assert_eq!(first.clusters(), ["ca", "ca", "cb"]);
    assert_eq!(failures_in_window(&gw, "a"), 1, "one request, one failure");
    assert_eq!(gw.metric(&names::breaker_state("a")), 0, "closed");
    // Both tries are attempts all the same.
    assert_eq!(gw.metric(&attempts_metric("a", Class::Overloaded)), 2);
    let second = gw.chat("gpt-4o", &[status(503), status(503), ok()]);
    assert_eq!(second.clusters(), ["ca", "ca", "cb"], "a is still tried");
    assert_eq!(
        gw.metric(&names::breaker_state("a")),
        1,
        "open after two requests"
    );
    let third = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(third.clusters(), ["cb"]);
    assert_eq!(
        third.header(wire::FALLBACK_REASON_HEADER),
        Some("breaker_open")
    );

    // The retry succeeds: the provider served the request, no failure counted.
    let gw = Gateway::new(&with_chain_options(r#""retry_in_place": {}"#));
    let r = gw.chat("gpt-4o", &[status(500), ok()]);
    assert_eq!(r.clusters(), ["ca", "ca"]);
    assert_eq!(failures_in_window(&gw, "a"), 0);
    // It fails differently: a 503, then a 429 (which counts for nothing by itself) or the
    // caller gone: the request failed there, once.
    let rate_limited = Provider::Answer(429, vec![("retry-after", "1")], "{}");
    gw.chat("gpt-4o", &[status(503), rate_limited, ok()]);
    assert_eq!(failures_in_window(&gw, "a"), 1);
    // A 503 then a connection error: once.
    gw.chat("gpt-4o", &[status(503), Provider::Refused, ok()]);
    assert_eq!(failures_in_window(&gw, "a"), 2);
    assert_eq!(gw.metric(&names::breaker_state("a")), 1);
    // A 429 retried in place, then a 429 again: nothing counted (neither counts).
    let gw = Gateway::new(&with_chain_options(r#""retry_in_place": {}"#));
    let rate_limited = || Provider::Answer(429, vec![("retry-after", "1")], "{}");
    let r = gw.chat("gpt-4o", &[rate_limited(), rate_limited(), ok()]);
    assert_eq!(r.clusters(), ["ca", "ca", "cb"]);
    assert_eq!(failures_in_window(&gw, "a"), 0);
}

#[test]
fn an_in_place_retry_decides_a_half_open_probe() {
    let gw = Gateway::new(&with_chain_options(r#""retry_in_place": {}"#));
    for _ in 0..2 {
        gw.chat("gpt-4o", &[status(503), status(503), ok()]);
    }
    assert_eq!(gw.metric(&names::breaker_state("a")), 1, "open");
    gw.world.advance(60_000);
    // The probe fails once, then its retry succeeds: the breaker closes.
    let probe = gw.chat("gpt-4o", &[status(503), ok()]);
    assert_eq!(probe.clusters(), ["ca", "ca"]);
    assert_eq!(gw.metric(&names::breaker_state("a")), 0, "closed");
    // Opened again; this probe fails twice: open again.
    for _ in 0..2 {
        gw.chat("gpt-4o", &[status(503), status(503), ok()]);
    }
    gw.world.advance(60_000);
    let probe = gw.chat("gpt-4o", &[status(503), status(503), ok()]);
    assert_eq!(probe.clusters(), ["ca", "ca", "cb"]);
    assert_eq!(gw.metric(&names::breaker_state("a")), 1, "reopened");
}

#[test]
fn a_missing_model_is_marked_dead_on_that_provider_only() {
    let gw = Gateway::new(THREE);
    let r = gw.chat("gpt-4o", &[status(404), ok()]);
    assert_eq!(
        r.header(wire::FALLBACK_REASON_HEADER),
        Some("model_not_found")
    );
    let next = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(next.clusters(), ["cb"]);
    assert_eq!(gw.metric(&names::skipped("a", "dead")), 1);
    let other = gw.chat("gpt-4o-mini", &[ok()]);
    assert_eq!(other.clusters(), ["ca"]);
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 5: the time budget.

#[test]
fn no_attempt_starts_past_the_budget() {
    let gw = Gateway::new(&THREE.replace(
        r#""status_path""#,
        r#""timeouts": {"attempt": "100s", "budget": "150s", "min_remaining": "10s"}, "status_path""#,
    ));
    // The first attempt times out after 100 s: b's 500 leaves 50 s, enough for c.
    let r = gw.chat("gpt-4o", &[Provider::Timeout, status(500), ok()]);
    assert_eq!(r.clusters(), ["ca", "cb", "cc"]);
    // A 500 after 141 s leaves 9 s, less than the 10 s an attempt needs: it is the answer.
    let gw = Gateway::new(&THREE.replace(
        r#""status_path""#,
        r#""timeouts": {"attempt": "145s", "budget": "150s", "min_remaining": "10s"}, "status_path""#,
    ));
    let r = gw.chat("gpt-4o", &[Provider::After(141_000, 500), ok()]);
    assert_eq!(r.clusters(), ["ca"], "a's 500 goes back to the caller");
    assert_eq!(r.status, 500);
    assert_eq!(r.header(wire::RETRY_MARKER_HEADER), None);
    assert_eq!(
        r.header(wire::SHOULD_RETRY_HEADER),
        Some("false"),
        "the budget is spent: a retry would have no more time"
    );
    assert_eq!(gw.metric(&names::skipped("b", "budget")), 1);
    assert_eq!(gw.metric(&names::skipped("c", "budget")), 1);
    assert_eq!(gw.metric(&names::fallbacks("a", "b")), 0);
    assert!(r
        .log
        .unwrap_or_default()
        .ends_with(",b:skipped:budget,c:skipped:budget"));
}

#[test]
fn an_attempt_envoy_starts_past_the_budget_never_reaches_its_provider() {
    let gw = Gateway::new(&THREE.replace(
        r#""status_path""#,
        r#""timeouts": {"attempt": "145s", "budget": "150s", "min_remaining": "10s"}, "status_path""#,
    ));
    // a times out after 145 s; Envoy retries a per-try timeout by itself, but 5 s are left.
    let r = gw.chat("gpt-4o", &[Provider::Timeout, ok()]);
    assert_eq!(r.clusters(), ["ca"], "b is never contacted");
    assert_eq!(r.status, 504);
    assert_eq!(r.body_json()["error"]["code"], "timeout");
    assert_eq!(r.header(wire::SHOULD_RETRY_HEADER), Some("false"));
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("1"));
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("a"));
    assert!(
        !r.headers
            .iter()
            .any(|(n, _)| n.starts_with("x-llm-failover")),
        "internal headers stay inside"
    );
    assert_eq!(gw.metric(&names::fallbacks("a", "b")), 0);
    assert_eq!(gw.metric(&names::skipped("b", "budget")), 1);
    assert_eq!(gw.metric(&names::exhausted("main")), 1);
    let log = r.log.unwrap_or_default();
    assert!(
        log.starts_with("a:timeout:145000ms,b:skipped:budget,c:skipped:budget"),
        "{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 10, through the downstream role.

#[test]
fn the_status_endpoint_answers_get_and_head_only() {
    let gw = Gateway::new(THREE);
    let get = gw.request(
        &[(":method", "GET"), (":path", "/llm-failover/status?x=1")],
        "",
        &[],
    );
    assert!(get.local);
    assert_eq!(get.status, 200);
    assert!(get.body_json()["providers"].is_array() || get.body_json().is_object());
    let post = gw.request(&[(":path", "/llm-failover/status")], "", &[]);
    assert_eq!(post.status, 405);
}

#[test]
fn successes_write_nothing_until_the_tick_then_the_status_counts_every_attempt() {
    let gw = Gateway::new(THREE);
    let root = Recording {
        world: Rc::clone(&gw.world),
        stream: Rc::default(),
    };
    let key = crate::wire::health_key("a");
    let cas = || gw.world.store.get(&key).map(|(_, cas)| cas);
    let before = cas();
    for _ in 0..6 {
        assert_eq!(gw.chat("gpt-4o", &[ok()]).status, 200);
    }
    assert_eq!(cas(), before, "the success path wrote nothing");
    let health = || {
        let r = gw.request(
            &[(":method", "GET"), (":path", "/llm-failover/status")],
            "",
            &[],
        );
        r.body_json()["providers"][0]["health"].clone()
    };
    assert_eq!(
        health()["state"],
        "idle",
        "held in the worker until the tick"
    );
    gw.up_metrics.flush_answers(&gw.up_config, &root);
    assert_ne!(cas(), before);
    let h = health();
    assert_eq!(
        (h["attempts"].as_u64(), h["failed"].as_u64()),
        (Some(6), Some(0))
    );
    assert_eq!(h["answered_last_5m"], true);
    // A failure writes at once, and carries what the worker held since.
    assert_eq!(gw.chat("gpt-4o", &[ok()]).status, 200);
    assert_eq!(gw.chat("gpt-4o", &[status(500), ok()]).status, 200);
    let h = health();
    assert_eq!(
        (h["attempts"].as_u64(), h["failed"].as_u64()),
        (Some(8), Some(1))
    );
    assert_eq!(h["state"], "degraded", "1 of 8 failed: 12.5%");
    gw.up_metrics.flush_answers(&gw.up_config, &root);
    let h = health();
    assert_eq!(h["attempts"].as_u64(), Some(8), "nothing counted twice");
    // The health gauge follows the tick's read.
    gw.down_metrics.refresh_breaker_states(&gw.config, &root);
    assert_eq!(gw.metric(&names::health_state("a")), 1);
    assert_eq!(gw.metric(&names::health_state("c")), 3, "idle");
}

/// The native build gathers its workers' writes to the shared records in one place and makes
/// them once a tick (`Metrics::after_request_gathered`, `SharedWrites`): a request's end
/// writes nothing; the gathered answers of two workers count once each when written.
#[test]
fn gathered_writes_reach_the_records_when_written() {
    let gw = Gateway::new(THREE);
    let written = || {
        let key = crate::wire::health_key("a");
        gw.world.store.get(&key).map(|(_, cas)| cas)
    };
    let before = written();
    for _ in 0..3 {
        assert_eq!(gw.chat("gpt-4o", &[ok()]).status, 200);
    }
    let root = Recording {
        world: Rc::clone(&gw.world),
        stream: Rc::default(),
    };
    // Another worker's metrics for the same configuration, with an answer of its own.
    let other = Metrics::new(&gw.up_config, &root);
    let a = gw
        .up_config
        .provider_ids()
        .next()
        .map(|(id, _)| id)
        .expect("a");
    assert_eq!(other.hold_answer(a, gw.world.now.get()), None);
    let mut writes = crate::roles::SharedWrites::new();
    assert!(writes.is_empty());
    gw.up_metrics
        .after_request_gathered(&gw.up_config, &root, &mut writes);
    other.after_request_gathered(&gw.up_config, &root, &mut writes);
    assert!(!writes.is_empty());
    assert_eq!(written(), before, "gathered, not written");
    let batch = writes.take();
    assert!(writes.is_empty(), "taken whole");
    batch.write(&gw.up_config, &root, &root);
    assert_ne!(written(), before, "written");
    let health = crate::roles::health(&gw.up_config, &root, &root);
    assert_eq!(
        health.snapshot("a").recent.attempts,
        4,
        "three answers and the other's"
    );
    gw.up_metrics.flush_answers(&gw.up_config, &root);
    assert_eq!(
        health.snapshot("a").recent.attempts,
        4,
        "nothing left in the worker to count twice"
    );
}

/// Two configurations on one worker (two listeners' filters, or both roles' filters), where the
/// host has no tick on its workers (the native build): each request's end writes what its
/// configuration's worker held, and reads that configuration's gauges once a second, timed per
/// configuration: one configuration's requests never hold back the other's gauges.
#[test]
fn each_configuration_on_a_tickless_worker_keeps_its_own_time() {
    let gw = Gateway::new(THREE);
    let root = Recording {
        world: Rc::clone(&gw.world),
        stream: Rc::default(),
    };
    let other = Config::from_json(
        br#"{"providers": [{"name": "z", "cluster": "cz", "credential": {"header": "api-key", "value": "sk-z"}}],
             "chains": [{"name": "zed", "models": ["z-*"], "providers": ["z"]}]}"#,
        &|_: &str| None,
    )
    .expect("valid config");
    init_health_records(&other, &root);
    let other_metrics = Metrics::new(&other, &root);
    gw.world.advance(TICK_MS);
    assert!(gw.down_metrics.after_request(&gw.config, &root));
    assert_eq!(
        gw.metric(&names::health_state("c")),
        3,
        "idle, read at once"
    );
    gw.world.advance(10);
    assert!(
        other_metrics.after_request(&other, &root),
        "the other configuration's gauges are due whatever the first one did"
    );
    assert_eq!(gw.metric(&names::health_state("z")), 3);
    assert!(
        !gw.down_metrics.after_request(&gw.config, &root),
        "a second has not passed"
    );
    gw.world.advance(TICK_MS - 10);
    assert!(gw.down_metrics.after_request(&gw.config, &root));
    assert!(
        !other_metrics.after_request(&other, &root),
        "10 ms short of its second"
    );
    // What a worker held is written at every request's end, due or not.
    let key = crate::wire::health_key("z");
    let before = gw.world.store.get(&key).map(|(_, cas)| cas);
    let z = other.provider_ids().next().map(|(id, _)| id).expect("z");
    assert_eq!(other_metrics.hold_answer(z, gw.world.now.get()), None);
    assert!(!other_metrics.after_request(&other, &root));
    assert_ne!(
        gw.world.store.get(&key).map(|(_, cas)| cas),
        before,
        "written"
    );
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 7: fail closed.

#[test]
fn an_attempt_sent_to_another_providers_cluster_is_refused_before_anything_is_attached() {
    let mut gw = Gateway::new(THREE);
    gw.sticky_cluster = true;
    let r = gw.chat("gpt-4o", &[status(500), ok()]);
    assert_eq!(r.clusters(), ["ca"], "b's attempt is never sent");
    assert_eq!(r.status, 502);
    assert_eq!(r.body_json()["error"]["code"], "misrouted_attempt");
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("1"));
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("a"));
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), None);
    assert_eq!(gw.metric(&attempts_metric("b", Class::Ok)), 0);
}

#[test]
fn a_plan_made_under_another_configuration_is_refused() {
    let mut gw = Gateway::new(THREE);
    let drifted = THREE.replace(r#""failures": 2"#, r#""failures": 3"#);
    gw.up_config =
        Rc::new(Config::from_json(drifted.as_bytes(), &|_| Some("k".into())).expect("valid"));
    let r = gw.chat("gpt-4o", &[ok()]);
    assert!(r.sent.is_empty(), "no provider contacted");
    assert_eq!(r.status, 502);
    assert_eq!(r.body_json()["error"]["code"], "config_mismatch");
    assert_eq!(r.header(wire::ATTEMPTS_HEADER), Some("0"));
    assert_eq!(r.header(wire::PROVIDER_HEADER), None);
}

#[test]
fn the_callers_gateway_credential_is_removed_before_routing() {
    let gw = Gateway::new(THREE);
    let r = gw.request(
        &[("x-api-key", "caller-key")],
        r#"{"model":"gpt-4o"}"#,
        &[ok()],
    );
    // Planned, so the router runs: the downstream role already removed both caller keys.
    assert_eq!(r.sent[0].header("x-api-key"), None);
    assert_eq!(r.sent[0].header("authorization"), Some("Bearer sk-a"));
}

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 3a: classes read from the answer's body.

#[test]
fn a_failing_answers_body_refines_its_class_before_deciding() {
    let gw = Gateway::new(THREE);
    let too_long = Provider::Answer(
        400,
        vec![("content-type", "application/json")],
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
    );
    let r = gw.chat("gpt-4o", &[too_long.clone(), ok()]);
    assert_eq!(
        r.clusters(),
        ["ca"],
        "without a list the prompt is the caller's problem"
    );
    assert_eq!(r.status, 400);
    // A chain whose fallback_on names the class falls over on it.
    let named = Gateway::new(&with_chain_options(
        r#""fallback_on": ["context_window_exceeded"]"#,
    ));
    let r = named.chat("gpt-4o", &[too_long, ok()]);
    assert_eq!(r.clusters(), ["ca", "cb"]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header(wire::FALLBACK_REASON_HEADER),
        Some("context_window_exceeded")
    );
    // A plain 400 is still the caller's answer.
    let plain = gw.chat("gpt-4o", &[status(400), ok()]);
    assert_eq!(plain.clusters(), ["ca"]);
}

#[test]
fn a_wrong_gemini_key_falls_over_as_a_setup_fault_and_marks_the_provider_dead() {
    // Google answers a wrong key 400 INVALID_ARGUMENT, reason API_KEY_INVALID.
    let wrong_key = Provider::Answer(
        400,
        vec![("content-type", "application/json")],
        r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}"#,
    );
    let gw = Gateway::new(&with_chain_options(
        r#""fallback_on": ["setup_fault", "server_error"]"#,
    ));
    let r = gw.chat("gpt-4o", &[wrong_key.clone(), ok()]);
    assert_eq!(r.clusters(), ["ca", "cb"]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("setup_fault"));
    assert_eq!(gw.metric(&attempts_metric("a", Class::SetupFault)), 1);
    // Dead for dead_marks.setup_fault: the next request skips it without an attempt.
    let r = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(r.clusters(), ["cb"]);
    // Without setup_fault in fallback_on the caller gets the 400, as it gets a 401.
    let gw = Gateway::new(THREE);
    let r = gw.chat("gpt-4o", &[wrong_key, ok()]);
    assert_eq!((r.clusters(), r.status), (vec!["ca"], 400));
    assert_eq!(gw.metric(&attempts_metric("a", Class::SetupFault)), 1);
}

#[test]
fn a_stream_whose_first_event_is_an_error_falls_over() {
    let gw = Gateway::new(THREE);
    let overloaded = Provider::Answer(
        200,
        vec![("content-type", "text/event-stream")],
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    let body = r#"{"model":"gpt-4o","stream":true,"messages":[]}"#;
    let r = gw.request(&[], body, &[overloaded, ok()]);
    assert_eq!(r.clusters(), ["ca", "cb"]);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("overloaded"));
    // A healthy stream is released as it is.
    let healthy = Provider::Answer(
        200,
        vec![("content-type", "text/event-stream")],
        "data: {\"choices\":[]}\n\ndata: [DONE]\n\n",
    );
    let r = gw.request(&[], body, &[healthy]);
    assert_eq!((r.status, r.clusters()), (200, vec!["ca"]));
    assert_eq!(r.body, b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n");
    // One that ends before its final event ends with an error frame (behaviour.md 5).
    let cut = Provider::Answer(
        200,
        vec![("content-type", "text/event-stream")],
        "data: {\"choices\":[]}\n\n",
    );
    let r = gw.request(&[], body, &[cut]);
    assert_eq!((r.status, r.clusters()), (200, vec!["ca"]));
    let expected = [
        &b"data: {\"choices\":[]}\n\n"[..],
        crate::failing_answer::cut_stream_event(crate::translate::Api::OpenAiChat),
    ]
    .concat();
    assert_eq!(r.body, expected);
}

#[test]
fn a_class_with_an_alternative_list_continues_the_walk_there() {
    let gw = Gateway::new(&THREE.replace(
        r#""providers": ["a", {"provider": "b", "model": "b-large"}, "c"]"#,
        r#""providers": ["a", {"provider": "b", "model": "b-large"}], "context_window": ["c"]"#,
    ));
    let too_long = Provider::Answer(
        400,
        vec![("content-type", "application/json")],
        r#"{"error":{"message":"maximum context length exceeded","code":"context_length_exceeded"}}"#,
    );
    let r = gw.chat("gpt-4o", &[too_long, ok()]);
    assert_eq!(
        r.clusters(),
        ["ca", "cc"],
        "b is not the larger-context entry"
    );
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("c"));
    assert_eq!(
        r.header(wire::FALLBACK_REASON_HEADER),
        Some("context_window_exceeded")
    );
    assert_eq!(gw.metric(&names::fallbacks("a", "c")), 1);
}

#[test]
fn a_walk_that_ends_with_room_left_for_a_list_is_not_retried_into_an_empty_slot() {
    // Envoy may make 3 attempts (2 planned + room for the list), but a 500 is not the list's
    // class: the chain is exhausted after b, whose answer the caller gets as it is.
    let gw = Gateway::new(&THREE.replace(
        r#""providers": ["a", {"provider": "b", "model": "b-large"}, "c"]"#,
        r#""providers": ["a", {"provider": "b", "model": "b-large"}], "context_window": ["c"]"#,
    ));
    let r = gw.chat("gpt-4o", &[status(500), status(502)]);
    assert_eq!((r.status, r.clusters()), (502, vec!["ca", "cb"]));
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("b"));
    assert_eq!(gw.metric(&names::exhausted("main")), 1);
}

#[test]
fn a_caller_header_that_is_a_gateway_credential_is_removed_before_routing() {
    let gw = Gateway::new(&THREE.replacen('{', r#"{"caller_header": "x-api-key","#, 1));
    let host = Recording {
        world: Rc::clone(&gw.world),
        stream: Rc::default(),
    };
    *host.stream.request.borrow_mut() = vec![
        (":path".into(), b"/v1/chat/completions".to_vec()),
        ("x-api-key".into(), b"team-key".to_vec()),
    ];
    let mut down = Downstream::new(
        host.clone(),
        Rc::clone(&gw.config),
        Rc::clone(&gw.down_metrics),
        LocalAnswers::new(),
    );
    assert_eq!(down.on_request_headers(false), Flow::Pause);
    assert_eq!(host.header(Map::Request, "x-api-key"), None);
}

// ---------------------------------------------------------------------------------------------
// Grouping mode (Envoy 1.36-1.38, docs/older-envoys.md): one cluster per provider order.

fn grouped(extra: &str) -> String {
    THREE.replacen('{', &format!(r#"{{"routing": "groups", {extra}"#), 1)
}

#[test]
fn grouping_mode_names_the_orders_cluster_and_each_attempt_gets_its_providers_key() {
    let gw = Gateway::new(&grouped(""));
    let r = gw.chat("gpt-4o", &[status(500), ok()]);
    assert_eq!(r.status, 200);
    assert_eq!(r.clusters(), ["ca", "cb"]);
    assert_eq!(r.header(wire::PROVIDER_HEADER), Some("b"));
    assert_eq!(r.sent[0].header("authorization"), Some("Bearer sk-a"));
    assert_eq!(r.sent[1].header("x-api-key"), Some("sk-b"));
    assert_eq!(r.sent[1].header("authorization"), None);
    // One attempt only: straight to the provider's own cluster.
    let r = gw.request(
        &[("x-llm-fallback", "off")],
        r#"{"model":"gpt-4o"}"#,
        &[ok()],
    );
    assert_eq!(r.clusters(), ["ca"]);
}

#[test]
fn grouping_mode_refuses_an_attempt_the_aggregate_spilled_to_the_next_provider() {
    let mut gw = Gateway::new(&grouped(""));
    gw.spill = 1;
    let r = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(r.status, 502);
    assert_eq!(r.body_json()["error"]["code"], "misrouted_attempt");
    assert!(r.sent.is_empty(), "nothing was sent with a's key to b");
}

#[test]
fn grouping_mode_answers_413_above_the_body_limit_itself() {
    let gw = Gateway::new(&grouped(r#""body_limit": 40,"#));
    let r = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(r.status, 200, "a body of 37 bytes passes");
    let r = gw.chat("gpt-4o-with-a-long-name", &[ok()]);
    assert!(r.local);
    assert_eq!(r.status, 413);
    assert_eq!(r.body_json()["error"]["code"], "body_too_large");
}

#[test]
fn without_held_answers_a_quota_body_is_not_read() {
    let quota = || {
        Provider::Answer(
            429,
            vec![],
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
        )
    };
    let gw = Gateway::new(&grouped(r#""hold_answers": false,"#));
    let r = gw.chat("gpt-4o", &[quota(), ok()]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header(wire::FALLBACK_REASON_HEADER), Some("rate_limited"));
    let gw = Gateway::new(&grouped(""));
    let r = gw.chat("gpt-4o", &[quota(), ok()]);
    assert_eq!(
        r.header(wire::FALLBACK_REASON_HEADER),
        Some("quota_exhausted")
    );
}

#[cfg(not(target_arch = "wasm32"))]
mod proptests;

mod translation;

mod refusals;

#[cfg(test)]
mod clouds;

mod announced;

mod callers;

mod groups;

// ---------------------------------------------------------------------------------------------
// docs/behaviour.md section 15: token budgets, through the downstream role.

#[test]
fn a_spent_budget_skips_its_provider_until_its_window_rolls_over() {
    let gw = Gateway::new(
        r#"{
        "providers": [
            {"name": "a", "cluster": "ca", "budget": {"tokens": 10, "window": "10s"}},
            {"name": "b", "cluster": "cb", "budget": {"tokens": 10, "window": "10s"}}
        ],
        "chains": [{"name": "main", "models": ["*"], "providers": ["a", "b"]}],
        "status_path": "/llm-failover/status"
    }"#,
    );
    let host = Recording {
        world: Rc::clone(&gw.world),
        stream: Rc::default(),
    };
    let spend = |provider: usize, input: u64, output: u64| {
        let usage = crate::usage::Usage {
            input,
            output,
            cached_input: 0,
        };
        let p = &gw.config.providers[provider];
        super::spend_budget(&host, p, None, &usage);
    };
    gw.world.advance(2_500);
    // 9 of a's 10 tokens: a is still tried.
    spend(0, 6, 3);
    assert_eq!(gw.chat("m", &[ok()]).clusters(), ["ca"]);
    // Its answer (already running) spends 9 more: a is skipped without an attempt.
    spend(0, 6, 3);
    let r = gw.chat("m", &[ok()]);
    assert_eq!(r.clusters(), ["cb"]);
    assert_eq!(
        r.header(wire::FALLBACK_REASON_HEADER),
        Some("budget_exhausted")
    );
    assert_eq!(gw.metric(&names::skipped("a", "budget_exhausted")), 1);
    assert!(
        (r.log.as_deref().unwrap_or_default()).starts_with("a:skipped:budget_exhausted,b:ok:"),
        "{:?}",
        r.log
    );
    // Every provider spent: 429 in the caller's dialect, Retry-After = the window's end.
    spend(1, 10, 0);
    for (path, error_type) in [
        ("/v1/chat/completions", "rate_limit_error"),
        ("/v1/messages", "rate_limit_error"),
    ] {
        let r = gw.request(&[(":path", path)], r#"{"model":"m","messages":[]}"#, &[]);
        assert!(r.local && r.sent.is_empty());
        assert_eq!(r.status, 429);
        let body = r.body_json();
        assert_eq!(body["error"]["code"], "budget_exhausted", "{body}");
        assert_eq!(body["error"]["type"], error_type, "{body}");
        assert_eq!(body["type"] == "error", path == "/v1/messages", "{body}");
        assert_eq!(r.header(wire::SHOULD_RETRY_HEADER), Some("true"));
        assert_eq!(r.header("retry-after"), Some("8"), "7.5 s left, rounded up");
        assert_eq!(
            r.log.as_deref(),
            Some("a:skipped:budget_exhausted,b:skipped:budget_exhausted")
        );
    }
    assert_eq!(gw.metric(&names::skipped("b", "budget_exhausted")), 2);
    // The status endpoint says what is left and when the window rolls over.
    let status = gw.request(
        &[(":method", "GET"), (":path", "/llm-failover/status")],
        "",
        &[],
    );
    let budget = &status.body_json()["providers"][0]["budget"];
    assert_eq!(
        (&budget["spent"], &budget["left"], &budget["exhausted"]),
        (&18.into(), &0.into(), &true.into())
    );
    assert_eq!(budget["resets_at_ms"], T0 + 10_000);
    // The window rolls over: a is back.
    gw.world.now.set(T0 + 10_000);
    assert_eq!(gw.chat("m", &[ok()]).clusters(), ["ca"]);
}

// ---------------------------------------------------------------------------------------------
// What each answer cost (docs/behaviour.md section 15).

#[test]
fn the_serving_providers_usage_is_counted_once_and_the_failed_ones_not_at_all() {
    let gw = Gateway::new(THREE);
    // The failed attempt's body reports usage too: it never counts.
    let failed = Provider::Answer(
        503,
        vec![],
        r#"{"error":{},"usage":{"prompt_tokens":50,"completion_tokens":50}}"#,
    );
    let served = Provider::Chunks(
        vec![("content-type", "application/json")],
        vec![
            r#"{"choices":[{"message":{"content":"{\"usage\":1}"}}],"us"#,
            r#"age":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_d"#,
            r#"etails":{"cached_tokens":8}}}"#,
        ],
        Ending::Body,
    );
    let r = gw.chat("gpt-4o", &[failed, served]);
    assert_eq!(r.clusters(), ["ca", "cb"]);
    assert_eq!(
        gw.metric(&names::tokens(
            "b",
            "b-large",
            crate::usage::Kind::Input,
            None
        )),
        0,
        "added by the tick"
    );
    assert_eq!(gw.tokens("b", "b-large"), [12, 3, 8]);
    assert_eq!(gw.tokens("a", "other"), [0, 0, 0]);
    assert_eq!(gw.tokens("a", "gpt-4o"), [0, 0, 0]);
    assert_eq!(
        r.log.as_deref(),
        Some("a:overloaded:0ms,b:ok:0ms:in=12/out=3/cached=8")
    );
    // A model only a pattern lets through counts as `other`; an answer without usage counts
    // nothing and leaves the log as it was.
    let r = gw.chat(
        "gpt-4o",
        &[Provider::Answer(
            200,
            vec![],
            r#"{"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
        )],
    );
    assert_eq!(gw.tokens("a", "other"), [1, 2, 0]);
    assert_eq!(r.log.as_deref(), Some("a:ok:0ms:in=1/out=2/cached=0"));
    let r = gw.chat("gpt-4o", &[ok()]);
    assert_eq!(r.log.as_deref(), Some("a:ok:0ms"));
    assert_eq!(gw.tokens("a", "other"), [1, 2, 0]);
}

#[test]
fn a_long_json_answer_is_read_at_its_end_only() {
    let gw = Gateway::new(THREE);
    let text = "x".repeat(3 * crate::usage::JSON_TAIL);
    let head: &'static str =
        Box::leak(format!(r#"{{"choices":[{{"message":{{"content":"{text}"#).into_boxed_str());
    let served = Provider::Chunks(
        vec![("content-type", "application/json")],
        vec![
            head,
            r#""}}],"usage":{"prompt_tokens":40,"completion_tokens":9}}"#,
        ],
        Ending::Body,
    );
    let r = gw.chat("gpt-4o", &[served]);
    assert_eq!(r.status, 200);
    assert_eq!(gw.tokens("a", "other"), [40, 9, 0]);
}

#[test]
fn a_streams_usage_counts_when_its_last_chunk_passes_by_body_or_trailers() {
    let chunks = vec![
        "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"compl",
        "etion_tokens\":2}}\n\ndata: [DONE]\n\n",
    ];
    for ending in [Ending::Body, Ending::Trailers] {
        let gw = Gateway::new(THREE);
        let stream = Provider::Chunks(
            vec![("content-type", "text/event-stream")],
            chunks.clone(),
            ending,
        );
        let body = r#"{"model":"gpt-4o","stream":true,"messages":[]}"#;
        let r = gw.request(&[], body, &[stream]);
        assert_eq!(r.status, 200);
        assert_eq!(gw.tokens("a", "other"), [7, 2, 0], "{ending:?}");
        assert_eq!(r.log.as_deref(), Some("a:ok:0ms:in=7/out=2/cached=0"));
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod bedrock_cost;

/// docs/behaviour.md section 15: an OpenAI Chat stream whose caller did not ask for its usage
/// is asked for it (`stream_options` merged), counted, and the caller gets the stream it would
/// have got without asking, byte for byte (the usage chunk and the `"usage":null` members out,
/// whatever the chunk boundaries).
#[test]
fn an_unasked_streams_usage_is_asked_for_counted_and_taken_out() {
    let asked = vec![
        "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\ndata: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"compl",
        "etion_tokens\":2}}\n\ndata: [DONE]\n\n",
    ];
    let unasked = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let stream = || {
        Provider::Chunks(
            vec![("content-type", "text/event-stream")],
            asked.clone(),
            Ending::Body,
        )
    };
    for (body, sent) in [
        (
            r#"{"model":"gpt-4o","stream":true,"messages":[]}"#,
            r#"{"stream_options":{"include_usage":true},"model":"gpt-4o","stream":true,"messages":[]}"#,
        ),
        (
            r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":false},"messages":[]}"#,
            r#"{"model":"gpt-4o","stream":true,"messages":[],"stream_options":{"include_obfuscation":false,"include_usage":true}}"#,
        ),
    ] {
        let gw = Gateway::new(THREE);
        let r = gw.request(&[], body, &[stream()]);
        assert_eq!(r.status, 200);
        assert_eq!(String::from_utf8_lossy(&r.sent[0].body), sent);
        assert_eq!(String::from_utf8_lossy(&r.body), unasked);
        assert_eq!(gw.tokens("a", "other"), [7, 2, 0]);
    }
    // The caller asked: its request and its stream as they are.
    let gw = Gateway::new(THREE);
    let body =
        r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#;
    let r = gw.request(&[], body, &[stream()]);
    assert_eq!(String::from_utf8_lossy(&r.sent[0].body), body);
    assert_eq!(String::from_utf8_lossy(&r.body), asked.concat());
    assert_eq!(gw.tokens("a", "other"), [7, 2, 0]);
    // Turned off: sent as it is (the provider then reports no usage: nothing counts).
    let off = THREE.replace(
        "\"status_path\"",
        "\"ask_stream_usage\": false, \"status_path\"",
    );
    let gw = Gateway::new(&off);
    let body = r#"{"model":"gpt-4o","stream":true,"messages":[]}"#;
    let r = gw.request(&[], body, &[stream()]);
    assert_eq!(String::from_utf8_lossy(&r.sent[0].body), body);
    assert_eq!(String::from_utf8_lossy(&r.body), asked.concat());
}
