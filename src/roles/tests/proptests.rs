//! Nothing panics the VM: arbitrary configurations, header maps, bodies, filter-state
//! properties and provider answers fed through both roles on the recording host, across several
//! attempts that share one request header map. A panic here would take a worker's wasm VM down
//! in Envoy; proptest reports the smallest input that does it.

use super::*;
use proptest::prelude::*;

const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

/// A valid configuration of 1-4 providers and 1-2 chains, with the knobs that change what the
/// roles do: forward rules, status path, budget, attempt limits, exhausted answers.
fn configuration() -> impl Strategy<Value = String> {
    let provider = (0..3usize, 0..3usize, any::<bool>());
    let chain = (
        proptest::collection::vec(0..4usize, 1..5),
        1..5u32,
        any::<bool>(),
    );
    (
        proptest::collection::vec(provider, 1..5),
        proptest::collection::vec(chain, 1..3),
        prop_oneof![Just(0u64), Just(3_000), Just(10_000)],
        any::<bool>(),
    )
        .prop_map(|(providers, chains, budget, status)| {
            let n = providers.len();
            let providers: Vec<_> = providers
                .iter()
                .enumerate()
                .map(|(i, (cred, forward, gpt_only))| {
                    let mut p = serde_json::json!({
                        "name": format!("p{i}"),
                        "credential": {"header": CREDENTIAL_HEADERS[*cred], "value": format!("sk-{i}")},
                        "models": if *gpt_only { serde_json::json!(["gpt-*"]) } else { serde_json::json!(["*"]) },
                    });
                    match forward {
                        1 => p["forward_headers"] = serde_json::json!(["x-tenant", "x-b3-*"]),
                        2 => p["forward_headers"] = serde_json::json!("all"),
                        _ => {}
                    }
                    p
                })
                .collect();
            let chains: Vec<_> = chains
                .iter()
                .enumerate()
                .map(|(i, (entries, max_attempts, exhausted))| {
                    let mut names: Vec<String> = Vec::new();
                    for e in entries {
                        let name = format!("p{}", e % n);
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                    serde_json::json!({"name": format!("c{i}"), "providers": names,
                        "max_attempts": max_attempts, "fallbacks_exhausted": exhausted})
                })
                .collect();
            let mut config = serde_json::json!({
                "providers": providers, "chains": chains,
                "timeouts": {"attempt": "1s", "budget": format!("{budget}ms"), "min_remaining": if budget == 0 { "0s" } else { "1s" }},
            });
            if status {
                config["status_path"] = serde_json::json!("/status");
            }
            config.to_string()
        })
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            ":method",
            ":path",
            ":authority",
            "content-length",
            "content-type",
            "authorization",
            "x-api-key",
            "cookie",
            "x-tenant",
            "x-b3-traceid",
            "x-llm-fallback",
            "x-llm-failover-retry",
            "x-llm-failover-budget",
            "x-envoy-attempt-count",
            "x-envoy-max-retries",
            "x-request-id",
            "retry-after",
            "x-ratelimit-reset-requests",
            "anthropic-version",
        ])
        .prop_map(str::to_string),
        "[a-z][a-z0-9-]{0,12}",
    ]
}

fn header_map() -> impl Strategy<Value = Headers> {
    proptest::collection::vec(
        (header_name(), proptest::collection::vec(any::<u8>(), 0..24)),
        0..12,
    )
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..96),
        (".{0,16}", any::<bool>(), ".{0,12}").prop_map(|(model, stream, extra)| {
            serde_json::json!({"model": model, "stream": stream, "messages": [], "x": extra})
                .to_string()
                .into_bytes()
        }),
        Just(br#"{"model":"gpt-4o","model":"x","fallbacks":["p1"]}"#.to_vec()),
    ]
}

/// What the router and the provider do on one attempt.
#[derive(Debug, Clone)]
struct Turn {
    /// The attempt count header as Envoy (or a forger) writes it.
    attempt_header: Option<Vec<u8>>,
    /// Which cluster Envoy says the attempt is on: the planned slot's, or some other bytes.
    cluster: Option<Vec<u8>>,
    /// Replaces the plan in filter state with these bytes.
    plan: Option<Vec<u8>>,
    /// `None`: no response headers (refused, reset, timed out).
    status: Option<Vec<u8>>,
    headers: Headers,
    body: Vec<u8>,
    elapsed_ms: u64,
    flags: Option<Vec<u8>>,
}

fn turn() -> impl Strategy<Value = Turn> {
    let bytes = |n| proptest::collection::vec(any::<u8>(), 0..n);
    (
        prop::option::weighted(0.2, bytes(4)),
        prop::option::weighted(0.2, bytes(8)),
        prop::option::weighted(0.1, bytes(64)),
        prop::option::weighted(
            0.85,
            prop_oneof![
                prop::sample::select(vec![200u16, 400, 401, 404, 413, 429, 500, 503, 529])
                    .prop_map(|s| s.to_string().into_bytes()),
                bytes(4),
            ],
        ),
        header_map(),
        body(),
        0..3_000u64,
        prop::option::weighted(0.2, bytes(9)),
    )
        .prop_map(
            |(attempt_header, cluster, plan, status, headers, body, elapsed_ms, flags)| Turn {
                attempt_header,
                cluster,
                plan,
                status,
                headers,
                body,
                elapsed_ms,
                flags,
            },
        )
}

/// One request through both roles, whatever the inputs: not panicking is the property. Returns
/// the attempts that reached a provider (what the driver itself is checked with).
fn drive(config_json: &str, request: Headers, body: Vec<u8>, turns: Vec<Turn>) -> usize {
    let mut reached = 0;
    let Ok(config) = Config::from_json(config_json.as_bytes(), &|_| None) else {
        return reached;
    };
    let world = Rc::new(World::default());
    world.now.set(T0);
    let root = Recording {
        world: Rc::clone(&world),
        stream: Rc::default(),
    };
    let config = Rc::new(config);
    init_health_records(&config, &root);
    let metrics = Rc::new(Metrics::new(&config, &root));
    let host = Recording {
        world: Rc::clone(&world),
        stream: Rc::default(),
    };
    *host.stream.request.borrow_mut() = request;
    *host.stream.request_body.borrow_mut() = body.clone();
    let mut down = Downstream::new(
        host.clone(),
        Rc::clone(&config),
        Rc::clone(&metrics),
        LocalAnswers::new(),
    );
    let mut flow = down.on_request_headers(body.is_empty());
    if flow == Flow::Pause && host.stream.local_reply.borrow().is_none() && !body.is_empty() {
        let half = body.len() / 2;
        down.on_request_body(half, false);
        flow = down.on_request_body(body.len(), true);
    }
    if flow == Flow::Continue && host.stream.local_reply.borrow().is_none() {
        let routed = host.stream.request_body.borrow().clone();
        for (i, t) in turns.into_iter().enumerate() {
            let attempt = i + 1;
            let header = t
                .attempt_header
                .unwrap_or_else(|| attempt.to_string().into_bytes());
            host.set_header_bytes(Map::Request, wire::ATTEMPT_COUNT_HEADER, Some(&header));
            let slot = format!("{}{attempt}", wire::SLOT_PROPERTY_PREFIX);
            let cluster = t
                .cluster
                .or_else(|| host.property(slot.as_bytes()))
                .unwrap_or_default();
            host.set_envoy_property(wire::CLUSTER_NAME_PROPERTY, Some(&cluster));
            if let Some(plan) = &t.plan {
                host.set_property(crate::handoff::PLAN, plan);
            }
            host.set_envoy_property(b"response\0flags", t.flags.as_deref());
            host.stream.response.borrow_mut().clear();
            *host.stream.request_body.borrow_mut() = routed.clone();
            let mut up = Upstream::new(host.clone(), Rc::clone(&config), Rc::clone(&metrics));
            if up.on_request_headers(routed.is_empty()) == Flow::Pause
                && host.stream.local_reply.borrow().is_none()
            {
                up.on_request_body(routed.len(), true);
            }
            if host.stream.local_reply.borrow_mut().take().is_some() {
                up.on_done();
                break;
            }
            reached += 1;
            world.advance(t.elapsed_ms);
            let Some(status) = t.status else {
                host.set_envoy_property(b"upstream\0transport_failure_reason", Some(b"reset"));
                up.on_done();
                continue;
            };
            let mut response: Headers = vec![(":status".into(), status)];
            response.extend(t.headers);
            *host.stream.response.borrow_mut() = response;
            *host.stream.response_body.borrow_mut() = t.body.clone();
            up.on_response_headers(false);
            let half = t.body.len() / 2;
            up.on_response_body(half, false);
            up.on_response_body(t.body.len(), true);
            up.on_response_trailers();
            up.on_done();
            if host
                .header(Map::Response, wire::RETRY_MARKER_HEADER)
                .is_none()
            {
                break;
            }
        }
        host.set_envoy_property(
            b"response\0code_details",
            Some(b"upstream_reset_before_response_started{remote_reset}"),
        );
        down.on_response_headers();
        let len = host.stream.response_body.borrow().len();
        down.on_response_body(len, true);
    }
    down.on_done();
    reached
}

#[test]
fn the_driver_reaches_providers_and_falls_over() {
    let config = r#"{"providers":[{"name":"p0"},{"name":"p1"}],"chains":[{"name":"c","providers":["p0","p1"]}]}"#;
    let headers: Headers = vec![
        (":method".into(), b"POST".to_vec()),
        (":path".into(), b"/v1/chat/completions".to_vec()),
    ];
    let answer = |status: &str| Turn {
        attempt_header: None,
        cluster: None,
        plan: None,
        status: Some(status.as_bytes().to_vec()),
        headers: vec![],
        body: br#"{"error":{}}"#.to_vec(),
        elapsed_ms: 5,
        flags: None,
    };
    let body = br#"{"model":"gpt-4o","messages":[]}"#.to_vec();
    let turns = vec![answer("500"), answer("200"), answer("200")];
    assert_eq!(
        drive(config, headers, body, turns),
        2,
        "500 falls over, 200 ends the walk"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn both_roles_survive_arbitrary_requests_answers_and_state(
        config in configuration(),
        request in header_map(),
        method in prop::sample::select(vec!["POST", "GET", "HEAD", "DELETE"]),
        path in prop_oneof![Just(b"/v1/chat/completions".to_vec()), Just(b"/status".to_vec()),
                            Just(b"/v1/models".to_vec()), proptest::collection::vec(any::<u8>(), 0..16)],
        body in body(),
        turns in proptest::collection::vec(turn(), 0..5),
    ) {
        let mut headers: Headers = vec![
            (":method".into(), method.as_bytes().to_vec()),
            (":path".into(), path),
            (":authority".into(), b"gateway.local".to_vec()),
        ];
        headers.extend(request);
        let _ = drive(&config, headers, body, turns);
    }

    #[test]
    fn both_roles_survive_arbitrary_configuration_text(
        json in "\\{.{0,200}\\}",
        body in body(),
    ) {
        let headers: Headers = vec![
            (":method".into(), b"POST".to_vec()),
            (":path".into(), b"/v1/chat/completions".to_vec()),
        ];
        let _ = drive(&json, headers, body, vec![]);
    }
}
