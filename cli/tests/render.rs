//! The shape of what `render` writes: slots and matcher, retry policy, filters, clusters.

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use llm_failover::wire;
use llm_failover_cli::{load, render, Gateway};
use serde_yaml_ng::Value;

fn gateway(yaml: &str) -> Gateway {
    load(yaml, &|_| None, None).unwrap_or_else(|e| panic!("{e:?}"))
}

fn bootstrap(yaml: &str) -> Value {
    let gw = gateway(yaml);
    let text = render::bootstrap_text(&gw, "test.failover.yaml");
    serde_yaml_ng::from_str(&text).expect("the rendered text is YAML")
}

fn hcm(b: &Value) -> &Value {
    &b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
}

fn route(b: &Value) -> &Value {
    &hcm(b)["route_config"]["virtual_hosts"][0]["routes"][0]
}

fn cluster_matcher(b: &Value) -> &Value {
    &route(b)["route"]["inline_cluster_specifier_plugin"]["extension"]["typed_config"]
        ["cluster_matcher"]
}

fn plugin_json(filter: &Value) -> serde_json::Value {
    let text = filter["typed_config"]["config"]["configuration"]["value"]
        .as_str()
        .expect("configuration string");
    serde_json::from_str(text).expect("plugin configuration is JSON")
}

fn upstream_filters(cluster: &Value) -> &Value {
    &cluster["typed_extension_protocol_options"]
        ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"]
}

const THREE: &str = r#"
providers:
  - {name: a, endpoint: "127.0.0.1:1001"}
  - {name: b, endpoint: "127.0.0.1:1002"}
  - {name: c, endpoint: "127.0.0.1:1003", cluster: shared}
  - {name: d, endpoint: "127.0.0.1:1003", cluster: shared, models: ["x-*"]}
chains:
  - {name: two, models: ["x-*"], providers: [a, b, c, d], max_attempts: 2}
  - {name: all, providers: [a, b, c], max_attempts: 5}
"#;

#[test]
fn slots_are_the_longest_plan_and_each_maps_every_cluster() {
    let gw = gateway(THREE);
    // max(min(2, 4), min(5, 3)) = 3
    assert_eq!(render::slot_count(&gw), 3);
    let b = bootstrap(THREE);
    let m = cluster_matcher(&b);
    assert_eq!(
        m["matcher_tree"]["input"]["typed_config"]["header_name"],
        wire::ATTEMPT_COUNT_HEADER
    );
    let by_attempt = m["matcher_tree"]["exact_match_map"]["map"]
        .as_mapping()
        .unwrap();
    let keys: Vec<&str> = by_attempt.keys().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(keys, ["1", "2"], "attempt count n selects slot n+1");
    let slots = [
        (1, &m["on_no_match"]["matcher"]),
        (2, &by_attempt["1"]["matcher"]),
        (3, &by_attempt["2"]["matcher"]),
    ];
    for (k, slot) in slots {
        let input = &slot["matcher_tree"]["input"]["typed_config"];
        assert_eq!(input["@type"], "type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.FilterStateInput");
        assert_eq!(
            input["key"],
            format!("wasm.{}{k}", wire::SLOT_PROPERTY_PREFIX).as_str()
        );
        let map = slot["matcher_tree"]["exact_match_map"]["map"]
            .as_mapping()
            .unwrap();
        let clusters: Vec<&str> = map.keys().map(|k| k.as_str().unwrap()).collect();
        assert_eq!(
            clusters,
            ["a", "b", "shared"],
            "one entry per distinct cluster"
        );
        for (name, action) in map {
            let action = &action["action"]["typed_config"];
            assert_eq!(action["@type"], "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.ClusterAction");
            assert_eq!(&action["cluster"], name);
        }
    }
    assert_eq!(route(&b)["route"]["retry_policy"]["num_retries"], 2);
    let clusters = b["static_resources"]["clusters"].as_sequence().unwrap();
    assert_eq!(
        clusters.len(),
        3,
        "providers sharing a cluster share its definition"
    );
}

#[test]
fn a_single_slot_needs_no_attempt_header_tree() {
    let b = bootstrap("providers: [{name: a, endpoint: \"127.0.0.1:1\"}, {name: b, endpoint: \"127.0.0.1:2\"}]\nchains: [{name: c, providers: [a, b], max_attempts: 1}]\n");
    let m = cluster_matcher(&b);
    assert!(m.get("on_no_match").is_none());
    assert_eq!(
        m["matcher_tree"]["input"]["typed_config"]["key"],
        "wasm.llm_failover.try1"
    );
    assert_eq!(route(&b)["route"]["retry_policy"]["num_retries"], 0);
}

#[test]
fn route_retries_only_on_the_marker_and_connection_failures_with_the_configured_timeouts() {
    let b = bootstrap(
        "max_request_body: 12MiB\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\ntimeouts: {attempt: 45s, stall: 2500ms}\n",
    );
    let r = route(&b);
    assert_eq!(r["name"], "llm_failover");
    assert_eq!(r["match"]["prefix"], "/");
    assert_eq!(r["route"]["timeout"], "0s");
    assert_eq!(r["request_body_buffer_limit"], 12u64 << 20);
    let p = &r["route"]["retry_policy"];
    assert_eq!(
        p["retry_on"],
        "retriable-headers,connect-failure,reset,refused-stream"
    );
    assert_eq!(p["per_try_timeout"], "45s");
    assert_eq!(p["per_try_idle_timeout"], "2.500s");
    assert_eq!(p["retriable_headers"][0]["name"], wire::RETRY_MARKER_HEADER);
    assert_eq!(
        p["retriable_headers"][0]["string_match"]["exact"],
        wire::RETRY_MARKER_RETRY
    );
    assert_eq!(p["refresh_cluster_on_retry"], true);
    assert_eq!(p["retry_back_off"]["base_interval"], "0.001s");
    let vh = &hcm(&b)["route_config"]["virtual_hosts"][0];
    assert_eq!(vh["include_request_attempt_count"], true);
    // The filter reads the attempt count from Envoy's stream info; nothing to strip.
    assert!(vh.get("include_attempt_count_in_response").is_none());
    assert_eq!(
        b["static_resources"]["listeners"][0]["per_connection_buffer_limit_bytes"],
        12u64 << 20
    );
    assert_eq!(
        b["static_resources"]["clusters"][0]["per_connection_buffer_limit_bytes"],
        12u64 << 20
    );

    // No stall timeout configured: no idle timeout on the route.
    let b = bootstrap(
        "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n",
    );
    assert!(route(&b)["route"]["retry_policy"]
        .get("per_try_idle_timeout")
        .is_none());
    assert_eq!(
        route(&b)["route"]["retry_policy"]["per_try_timeout"],
        "120s"
    );
    assert!(b.get("admin").is_none());
    assert_eq!(
        b["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"],
        10000
    );
}

#[test]
fn access_log_prints_the_attempt_record() {
    let b = bootstrap(
        "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n",
    );
    let format = hcm(&b)["access_log"][0]["typed_config"]["log_format"]["text_format_source"]
        ["inline_string"]
        .as_str()
        .unwrap();
    assert!(
        format.contains("%FILTER_STATE(wasm.llm_failover.attempts:PLAIN)%"),
        "{format}"
    );
    assert!(format.ends_with('\n'));
}

#[test]
fn otel_collector_adds_the_opentelemetry_logger_its_cluster_and_log_models() {
    let yaml =
        "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n";
    let plain = bootstrap(yaml);
    assert_eq!(hcm(&plain)["access_log"].as_sequence().unwrap().len(), 1);
    let downstream = &hcm(&plain)["http_filters"][0];
    assert_eq!(plugin_json(downstream).get("log_models"), None);

    let gw = gateway(yaml).with_otel("collector.internal:4317").unwrap();
    let text = render::bootstrap_text(&gw, "test.failover.yaml");
    let b: Value = serde_yaml_ng::from_str(&text).unwrap();
    let logs = hcm(&b)["access_log"].as_sequence().unwrap();
    assert_eq!(logs.len(), 2, "the stdout line stays");
    let otel = &logs[1]["typed_config"];
    assert_eq!(logs[1]["name"], "envoy.access_loggers.open_telemetry");
    assert_eq!(
        otel["grpc_service"]["envoy_grpc"]["cluster_name"],
        render::OTEL_CLUSTER
    );
    let attributes: Vec<(&str, &str)> = otel["attributes"]["values"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|kv| {
            (
                kv["key"].as_str().unwrap(),
                kv["value"]["string_value"].as_str().unwrap(),
            )
        })
        .collect();
    let want = render::otel_attributes();
    assert_eq!(attributes.len(), want.len());
    for (key, format) in &want {
        assert!(attributes.contains(&(*key, format.as_str())), "{key}");
    }
    for key in [
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "llm_failover.attempts",
    ] {
        assert!(want.iter().any(|(k, _)| *k == key), "{key}");
    }
    let cluster = b["static_resources"]["clusters"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == render::OTEL_CLUSTER)
        .expect("the collector's cluster");
    assert_eq!(cluster["type"], "STRICT_DNS");
    let address = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        ["address"]["socket_address"];
    assert_eq!(address["address"], "collector.internal");
    assert_eq!(address["port_value"], 4317);
    // The downstream role is told to write the models.
    assert_eq!(plugin_json(&hcm(&b)["http_filters"][0])["log_models"], true);
    assert!(gateway(yaml).with_otel("http://collector:4317").is_err());
}

#[test]
fn otel_on_envoy_1_36_uses_its_common_config() {
    let yaml = "envoy_version: \"1.36\"\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n";
    let gw = gateway(yaml).with_otel("127.0.0.1:4317").unwrap();
    let b: Value =
        serde_yaml_ng::from_str(&render::bootstrap_text(&gw, "t.failover.yaml")).unwrap();
    let otel = &hcm(&b)["access_log"][1]["typed_config"];
    assert_eq!(
        otel["common_config"]["grpc_service"]["envoy_grpc"]["cluster_name"],
        render::OTEL_CLUSTER
    );
    assert_eq!(otel["grpc_service"], Value::Null);
}

const CREDENTIALS: &str = r#"
module: /opt/llm_failover.wasm
providers:
  - name: openai
    endpoint: api.openai.com:443
    credential: {header: authorization, prefix: "Bearer ", env: OPENAI_API_KEY}
  - name: azure
    endpoint: my.openai.azure.com:443
    credential: {header: api-key, env: AZURE_KEY}
  - name: again
    endpoint: api.openai.com:443
    cluster: openai
    credential: {header: authorization, env: OPENAI_API_KEY}
  - name: local
    endpoint: "127.0.0.1:8000"
    credential: {header: x-api-key, value: sk-local}
chains: [{name: c, providers: [openai, azure, again, local]}]
"#;

#[test]
fn credential_variables_reach_every_filter_vm_and_the_plugin_json_differs_only_in_role() {
    let gw = gateway(CREDENTIALS);
    assert_eq!(gw.env_keys, ["OPENAI_API_KEY", "AZURE_KEY"]);
    let b = bootstrap(CREDENTIALS);
    let down = &hcm(&b)["http_filters"][0];
    assert_eq!(
        hcm(&b)["http_filters"][1]["name"],
        "envoy.filters.http.router"
    );
    let config = &down["typed_config"]["config"];
    assert_eq!(config["name"], "llm_failover");
    assert_eq!(config["root_id"], "llm_failover");
    assert_eq!(config["allow_on_headers_stop_iteration"], true);
    let vm = &config["vm_config"];
    assert_eq!(vm["vm_id"], "llm_failover");
    assert_eq!(vm["runtime"], "envoy.wasm.runtime.v8");
    assert_eq!(vm["code"]["local"]["filename"], "/opt/llm_failover.wasm");
    let keys: Vec<&str> = vm["environment_variables"]["host_env_keys"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(keys, ["OPENAI_API_KEY", "AZURE_KEY"]);

    let mut down_json = plugin_json(down);
    assert_eq!(down_json["role"], "downstream");
    let rendered = serde_yaml_ng::to_string(&b).unwrap();
    assert!(
        !rendered.contains("rendered-placeholder"),
        "no key, real or placeholder, is rendered"
    );

    for cluster in b["static_resources"]["clusters"].as_sequence().unwrap() {
        let filters = upstream_filters(cluster);
        assert_eq!(filters[1]["name"], "envoy.filters.http.upstream_codec");
        let up = &filters[0]["typed_config"]["config"];
        assert_eq!(
            up["vm_config"], *vm,
            "one VM for every filter: identical vm_config"
        );
        assert_eq!(up["root_id"], "llm_failover");
        assert_eq!(up["allow_on_headers_stop_iteration"], true);
        let mut up_json = plugin_json(&filters[0]);
        assert_eq!(up_json["role"], "upstream");
        up_json["role"] = "x".into();
        down_json["role"] = "x".into();
        assert_eq!(up_json, down_json, "plugin JSON identical but for the role");
    }
    // Every provider gets its endpoint's host as :authority, an IP provider its address
    // (never the caller's host).
    let providers = down_json["providers"].as_array().unwrap();
    assert_eq!(providers[0]["authority"], "api.openai.com");
    assert_eq!(providers[1]["authority"], "my.openai.azure.com");
    assert_eq!(providers[3]["authority"], "127.0.0.1:8000");
    assert!(
        providers[0].get("endpoint").is_none(),
        "renderer fields never reach the filter"
    );
}

#[test]
fn tls_providers_get_verified_tls_with_alpn_and_plain_ones_http1() {
    let b = bootstrap(CREDENTIALS);
    let clusters = b["static_resources"]["clusters"].as_sequence().unwrap();
    let names: Vec<&str> = clusters
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["openai", "azure", "local"]);
    let openai = &clusters[0];
    assert_eq!(openai["type"], "LOGICAL_DNS");
    assert_eq!(openai["connect_timeout"], "5s");
    let ep = &openai["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"];
    assert_eq!(ep["address"]["socket_address"]["address"], "api.openai.com");
    assert_eq!(ep["address"]["socket_address"]["port_value"], 443);
    let tls = &openai["transport_socket"]["typed_config"];
    assert_eq!(
        tls["@type"],
        "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
    );
    assert_eq!(tls["sni"], "api.openai.com");
    let ctx = &tls["common_tls_context"];
    assert_eq!(ctx["alpn_protocols"], Value::from(vec!["h2", "http/1.1"]));
    assert_eq!(
        ctx["validation_context"]["trusted_ca"]["filename"],
        "/etc/ssl/certs/ca-certificates.crt"
    );
    assert_eq!(
        ctx["validation_context"]["match_typed_subject_alt_names"][0]["matcher"]["exact"],
        "api.openai.com"
    );
    let options = &openai["typed_extension_protocol_options"]
        ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    assert!(options["auto_config"]
        .get("http2_protocol_options")
        .is_some());
    assert!(options.get("explicit_http_config").is_none());
    for c in clusters {
        let t = &c["circuit_breakers"]["thresholds"][0];
        for field in [
            "max_retries",
            "max_pending_requests",
            "max_requests",
            "max_connections",
        ] {
            assert_eq!(t[field], render::CLUSTER_LIMIT, "{field}");
        }
    }
    let local = &clusters[2];
    assert_eq!(local["type"], "STATIC");
    assert!(local.get("transport_socket").is_none());
    let options = &local["typed_extension_protocol_options"]
        ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    assert!(options["explicit_http_config"]
        .get("http_protocol_options")
        .is_some());
}

#[test]
fn tls_settings_can_be_overridden() {
    let b = bootstrap(
        "ca_file: /etc/my-ca.pem\nproviders:\n  - {name: a, endpoint: \"10.0.0.5:8443\", tls: true, sni: llm-a.internal}\n  - {name: b, endpoint: \"llm.internal:8443\", tls: true, sni: front.internal, connect_timeout: 250ms}\n  - {name: c, endpoint: \"api.example.com:443\", tls: false}\nchains: [{name: c, providers: [a, b, c]}]\n",
    );
    let clusters = b["static_resources"]["clusters"].as_sequence().unwrap();
    let a = &clusters[0]["transport_socket"]["typed_config"];
    assert_eq!(
        a["sni"], "llm-a.internal",
        "an IP address needs an explicit SNI"
    );
    assert_eq!(
        a["common_tls_context"]["validation_context"]["trusted_ca"]["filename"],
        "/etc/my-ca.pem"
    );
    let b_tls = &clusters[1]["transport_socket"]["typed_config"];
    assert_eq!(b_tls["sni"], "front.internal");
    assert_eq!(clusters[1]["connect_timeout"], "0.250s");
    assert!(clusters[2].get("transport_socket").is_none());
    let json = plugin_json(&hcm(&b)["http_filters"][0]);
    assert_eq!(json["providers"][0]["authority"], "llm-a.internal:8443");
    assert_eq!(json["providers"][1]["authority"], "llm.internal:8443");
    assert_eq!(json["providers"][2]["authority"], "api.example.com:443");
}

#[test]
fn pieces_are_the_same_parts_as_the_bootstrap() {
    let gw = gateway(CREDENTIALS);
    let b = bootstrap(CREDENTIALS);
    let pieces = render::pieces(&gw, "test.failover.yaml");
    let names: Vec<&str> = pieces.iter().map(|p| p.0).collect();
    assert_eq!(
        names,
        [
            "http_filters.yaml",
            "route.yaml",
            "clusters.yaml",
            "stats_config.yaml",
            "local_reply_config.yaml"
        ]
    );
    for (name, text) in &pieces {
        assert!(
            text.starts_with("# Rendered by `llm-failover render test.failover.yaml"),
            "{name}"
        );
        assert!(text.contains("# Goes in"), "{name} says where it goes");
    }
    let parse = |t: &str| -> Value { serde_yaml_ng::from_str(t).unwrap() };
    assert_eq!(parse(&pieces[0].1)[0], hcm(&b)["http_filters"][0]);
    assert_eq!(parse(&pieces[1].1)[0], *route(&b));
    assert_eq!(parse(&pieces[2].1), b["static_resources"]["clusters"]);
    assert_eq!(parse(&pieces[3].1)["stats_config"], b["stats_config"]);
    assert_eq!(
        parse(&pieces[4].1)["local_reply_config"],
        hcm(&b)["local_reply_config"]
    );
    assert!(pieces[1].1.contains("include_request_attempt_count: true"));
}

#[test]
fn plain_providers_can_speak_http2() {
    let b = bootstrap(
        "providers:\n  - {name: a, endpoint: \"127.0.0.1:8000\", http2: true}\n  - {name: b, endpoint: \"127.0.0.1:8001\"}\nchains: [{name: c, providers: [a, b]}]\n",
    );
    let clusters = b["static_resources"]["clusters"].as_sequence().unwrap();
    let options = |i: usize| {
        clusters[i]["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
            .clone()
    };
    assert!(options(0).get("http2_protocol_options").is_some());
    assert!(options(0).get("http_protocol_options").is_none());
    assert!(options(1).get("http_protocol_options").is_some());
}

// ------------------------------------------------------------- grouping mode (Envoy 1.36-1.38)

const GROUPED: &str = r#"
envoy_version: "1.38"
providers:
  - {name: a, endpoint: "127.0.0.1:1001"}
  - {name: b, endpoint: "127.0.0.1:1002"}
  - {name: c, endpoint: "127.0.0.1:1003"}
chains:
  - {name: all, providers: [a, b, c]}
"#;

fn clusters_by_name(b: &Value) -> Vec<(&str, &Value)> {
    b["static_resources"]["clusters"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c))
        .collect()
}

#[test]
fn grouping_mode_routes_by_the_group_property_to_one_aggregate_per_order() {
    let b = bootstrap(GROUPED);
    let m = cluster_matcher(&b);
    assert!(m.get("on_no_match").is_none());
    let input = &m["matcher_tree"]["input"]["typed_config"];
    assert_eq!(
        input["key"],
        format!("wasm.{}", wire::GROUP_PROPERTY).as_str()
    );
    let targets: Vec<&str> = m["matcher_tree"]["exact_match_map"]["map"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    let groups = [
        "llm_failover~a~b",
        "llm_failover~a~b~c",
        "llm_failover~a~c",
        "llm_failover~b~c",
    ];
    let mut want = vec!["a", "b", "c"];
    want.extend(groups);
    assert_eq!(
        targets, want,
        "one-attempt plans go to the provider's cluster"
    );
    let clusters = clusters_by_name(&b);
    let names: Vec<&str> = clusters.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, want, "every target is a cluster");
    let (_, abc) = clusters[4];
    assert_eq!(abc["cluster_type"]["name"], "envoy.clusters.aggregate");
    let subs: Vec<&str> = abc["cluster_type"]["typed_config"]["clusters"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(subs, ["a", "b", "c"], "sub-clusters in attempt order");
    assert_eq!(abc["lb_policy"], "CLUSTER_PROVIDED");
    // The group's own upstream filter is the one that runs, and its retries count on it.
    assert_eq!(upstream_filters(abc)[0]["name"], "llm_failover");
    assert_eq!(
        abc["circuit_breakers"]["thresholds"][0]["max_retries"],
        render::CLUSTER_LIMIT
    );
}

#[test]
fn grouping_mode_retries_on_the_next_priority_and_tells_the_filter() {
    let b = bootstrap(GROUPED);
    let p = &route(&b)["route"]["retry_policy"];
    assert!(
        p.get("refresh_cluster_on_retry").is_none(),
        "Envoy before 1.39 refuses the field"
    );
    assert_eq!(
        p["retry_priority"]["name"],
        "envoy.retry_priorities.previous_priorities"
    );
    assert_eq!(p["retry_priority"]["typed_config"]["update_frequency"], 1);
    assert!(route(&b).get("request_body_buffer_limit").is_none());
    assert_eq!(
        route(&b)["per_request_buffer_limit_bytes"],
        2 * input_default_body(),
        "doubled: older Envoys count a held body twice against the retry buffer"
    );
    let filters = hcm(&b)["http_filters"].as_sequence().unwrap();
    assert_eq!(plugin_json(&filters[0])["routing"], "groups");
    assert_eq!(plugin_json(&filters[0])["body_limit"], input_default_body());
    for (name, c) in clusters_by_name(&b) {
        assert_eq!(plugin_json(&upstream_filters(c)[0])["routing"], "groups");
        if name.starts_with(wire::GROUP_CLUSTER_PREFIX) {
            continue;
        }
        let endpoint = &c["load_assignment"]["endpoints"][0]["lb_endpoints"][0];
        assert_eq!(
            endpoint["metadata"]["filter_metadata"]
                [llm_failover::destination::HOST_METADATA_NAMESPACE]
                [llm_failover::destination::HOST_METADATA_PROVIDER_KEY],
            name,
            "each host names its provider"
        );
    }
    assert!(
        plugin_json(&filters[0]).get("hold_answers").is_none(),
        "1.37 and later hold answers to read their bodies"
    );
    let b36 = bootstrap(&GROUPED.replace("\"1.38\"", "\"1.36\""));
    let filters36 = hcm(&b36)["http_filters"].as_sequence().unwrap();
    assert_eq!(plugin_json(&filters36[0])["hold_answers"], false);
    // Router mode has none of it.
    let b = bootstrap(&GROUPED.replace("\"1.38\"", "\"1.39\""));
    assert_eq!(
        route(&b)["route"]["retry_policy"]["refresh_cluster_on_retry"],
        true
    );
    assert_eq!(clusters_by_name(&b).len(), 3);
    let filters = hcm(&b)["http_filters"].as_sequence().unwrap();
    assert!(plugin_json(&filters[0]).get("routing").is_none());
}

fn input_default_body() -> u64 {
    llm_failover_cli::input::DEFAULT_MAX_REQUEST_BODY
}

#[test]
fn grouping_mode_labels_cluster_scoped_metrics() {
    let b = bootstrap(GROUPED);
    let tags = b["stats_config"]["stats_tags"].as_sequence().unwrap();
    assert_eq!(tags[0]["tag_name"], llm_failover::metrics::SCOPE);
    assert!(tags[1]["regex"]
        .as_str()
        .unwrap()
        .starts_with(r"^(?:cluster\.[^=]*?\.)?wasmcustom\."));
}

#[test]
fn the_version_comes_from_the_flag_before_the_file_and_is_checked() {
    let gw = llm_failover_cli::load_for(GROUPED, &|_| None, None, Some("1.40.0")).unwrap();
    assert!(gw.groups.is_empty());
    let gw = llm_failover_cli::load_for(GROUPED, &|_| None, None, Some("1.36")).unwrap();
    assert_eq!(gw.groups.len(), 4);
    let err = |yaml: &str, flag: Option<&str>| {
        let e = llm_failover_cli::load_for(yaml, &|_| None, None, flag).unwrap_err();
        format!("{}: {}", e[0].field, e[0].problem)
    };
    assert!(err(GROUPED, Some("1.35")).contains("needs Envoy 1.36 or later"));
    assert!(err(GROUPED, Some("latest")).starts_with("--envoy-version: "));
    let unquoted = GROUPED.replace("\"1.38\"", "1.40");
    assert!(err(&unquoted, None).contains("quote it"));
    let gw = load(&GROUPED.replace("\"1.38\"", "1.37"), &|_| None, None).unwrap();
    assert_eq!(gw.envoy_version.to_string(), "1.37");
    assert!(err(&format!("routing: groups\n{GROUPED}"), None).starts_with("routing: "));
}

#[test]
fn grouping_mode_refuses_what_it_cannot_honour_naming_it() {
    let shared = GROUPED.replace(
        "{name: c, endpoint: \"127.0.0.1:1003\"}",
        "{name: c, endpoint: \"127.0.0.1:1002\", cluster: b}",
    );
    let e = llm_failover_cli::load_for(&shared, &|_| None, None, None).unwrap_err();
    assert_eq!(e[0].field, "providers[2].cluster");
    assert!(
        e[0].problem.starts_with("envoy_version 1.38: "),
        "{}",
        e[0].problem
    );
    let big = r#"
envoy_version: "1.36"
providers: [{name: a, endpoint: "127.0.0.1:1"}, {name: b, endpoint: "127.0.0.1:2"},
            {name: c, endpoint: "127.0.0.1:3"}, {name: d, endpoint: "127.0.0.1:4"},
            {name: e, endpoint: "127.0.0.1:5"}, {name: f, endpoint: "127.0.0.1:6"},
            {name: g, endpoint: "127.0.0.1:7"}, {name: h, endpoint: "127.0.0.1:8"}]
chains: [{name: all, providers: [a, b, c, d, e, f, g, h], max_attempts: 4}]
"#;
    let e = llm_failover_cli::load_for(big, &|_| None, None, None).unwrap_err();
    assert_eq!(e[0].field, "chains[0]");
    assert!(e[0].problem.contains("more than 100 grouping clusters"));
    // The same file renders for router mode.
    assert!(llm_failover_cli::load_for(big, &|_| None, None, Some("1.39")).is_ok());
}

const TOKEN_FILE: &str = r#"
gateway_credential_headers: [x-gateway-key]
providers:
  - {name: vertex, endpoint: "vertex.example:443", api: vertex, project: p1, region: us-east5,
     credential: {header: Authorization, prefix: "Bearer ", file: /var/run/vertex/token}}
  - {name: anthropic, endpoint: "127.0.0.1:9001", api: anthropic,
     credential: {header: x-api-key, value: sk-ant}}
chains:
  - {name: claude, models: ["claude-*"], providers: [{provider: vertex, model: "claude-x@1"}, anthropic]}
"#;

#[test]
fn a_credential_from_a_file_is_injected_by_envoy_on_its_cluster_only() {
    let mut gw = gateway(TOKEN_FILE);
    gw.secret_dir = Some("/etc/envoy".into());
    let files = render::secret_files(&gw);
    assert_eq!(files.len(), 1);
    let (name, text) = &files[0];
    assert_eq!(name, "vertex.credential.yaml");
    let sds: Value = serde_yaml_ng::from_str(text).expect("YAML");
    let secret = &sds["resources"][0];
    assert_eq!(secret["name"], "llm_failover.credential.vertex");
    assert_eq!(
        secret["generic_secret"]["secret"]["filename"],
        "/var/run/vertex/token"
    );
    let text = render::bootstrap_text(&gw, "test.failover.yaml");
    let b: Value = serde_yaml_ng::from_str(&text).expect("YAML");
    let clusters = clusters_by_name(&b);
    let (_, vertex) = clusters
        .iter()
        .find(|(n, _)| *n == "vertex")
        .expect("vertex");
    let filters = upstream_filters(vertex).as_sequence().expect("filters");
    let names: Vec<&str> = filters.iter().filter_map(|f| f["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "llm_failover",
            "envoy.filters.http.credential_injector",
            "envoy.filters.http.upstream_codec"
        ],
        "after this filter, which clears the header on every attempt"
    );
    let injector = &filters[1]["typed_config"];
    assert_eq!(injector["overwrite"], true);
    assert_eq!(injector["allow_request_without_credential"], false);
    let generic = &injector["credential"]["typed_config"];
    assert_eq!(generic["header"], "authorization");
    assert_eq!(generic["header_value_prefix"], "Bearer ");
    assert_eq!(
        generic["credential"]["name"],
        "llm_failover.credential.vertex"
    );
    assert_eq!(
        generic["credential"]["sds_config"]["path_config_source"]["path"],
        "/etc/envoy/vertex.credential.yaml"
    );
    let (_, anthropic) = clusters
        .iter()
        .find(|(n, _)| *n == "anthropic")
        .expect("anthropic");
    assert_eq!(
        upstream_filters(anthropic).as_sequence().map(Vec::len),
        Some(2)
    );
    // The filter never sees the file: it has no credential to set, and clears the header.
    let plugin = plugin_json(&filters[0]);
    assert!(plugin["providers"][0].get("credential").is_none());
    assert_eq!(
        plugin["gateway_credential_headers"],
        serde_json::json!(["x-gateway-key", "authorization"])
    );
    assert!(gw
        .config
        .cleared_headers
        .iter()
        .any(|h| h == "authorization"));
    // With the filter's default list, which has authorization already, nothing is added.
    let gw = gateway(&TOKEN_FILE.replace("gateway_credential_headers: [x-gateway-key]\n", ""));
    assert_eq!(
        gw.config.gateway_credential_headers,
        ["authorization", "x-api-key", "api-key"]
    );
}

#[test]
fn a_credential_from_a_file_is_refused_where_envoy_cannot_inject_it_alone() {
    let problems = |yaml: &str, version: Option<&str>| -> String {
        match llm_failover_cli::load_for(yaml, &|_| None, None, version) {
            Ok(_) => panic!("accepted:\n{yaml}"),
            Err(e) => format!("{e:?}"),
        }
    };
    let grouping = problems(TOKEN_FILE, Some("1.38"));
    assert!(grouping.contains("credential.file"), "{grouping}");
    assert!(
        grouping.contains("Envoy 1.39+") && grouping.contains("env:"),
        "{grouping}"
    );
    for (change, says) in [
        (
            "file: /var/run/vertex/token",
            "file: /var/run/vertex/token, env: V",
        ),
        ("file: /var/run/vertex/token", "file: var/run/token"),
        (
            "file: /var/run/vertex/token",
            "file: /var/run/vertex/token, extra: 1",
        ),
        ("header: Authorization", "header: \"bad header\""),
    ]
    .map(|(from, to)| (TOKEN_FILE.replace(from, to), to))
    {
        let e = problems(&change, None);
        assert!(e.contains("providers[0].credential"), "{says}: {e}");
    }
}

/// `aws_credentials` chooses the signer's credential sources; the default, the environment
/// only, never lets Envoy ask the instance metadata address.
#[test]
fn a_bedrock_providers_aws_credentials_choose_the_signers_sources() {
    let signer = |credentials: &str| -> Value {
        let b = bootstrap(&format!(
            "providers: [{{name: br, endpoint: \"127.0.0.1:1\", api: bedrock, region: us-east-1{credentials}}}]\nchains: [{{name: c, providers: [{{provider: br, model: m}}]}}]\n"
        ));
        let clusters = b["static_resources"]["clusters"].as_sequence().unwrap();
        let options = &clusters[0]["typed_extension_protocol_options"];
        let (_, options) = options.as_mapping().unwrap().iter().next().unwrap();
        let filters = options["http_filters"].as_sequence().unwrap();
        let signer = filters
            .iter()
            .find(|f| f["name"] == "envoy.filters.http.aws_request_signing")
            .unwrap();
        signer["typed_config"]["credential_provider"].clone()
    };
    let env: Value = serde_yaml_ng::from_str(
        "{custom_credential_provider_chain: true, environment_credential_provider: {}}",
    )
    .unwrap();
    assert_eq!(signer(""), env, "the default");
    assert_eq!(signer(", aws_credentials: env"), env);
    assert_eq!(
        signer(", aws_credentials: chain"),
        Value::Null,
        "Envoy's own chain"
    );
    assert_eq!(
        signer(", aws_credentials: {file: /etc/aws/credentials, profile: bedrock}"),
        serde_yaml_ng::from_str::<Value>("{custom_credential_provider_chain: true, credentials_file_provider: {credentials_data_source: {filename: /etc/aws/credentials}, profile: bedrock}}").unwrap()
    );
    assert_eq!(
        signer(", aws_credentials: {web_identity_token_file: /var/run/token, role_arn: \"arn:aws:iam::1:role/r\"}"),
        serde_yaml_ng::from_str::<Value>("{custom_credential_provider_chain: true, assume_role_with_web_identity_provider: {web_identity_token_data_source: {filename: /var/run/token}, role_arn: \"arn:aws:iam::1:role/r\", role_session_name: llm-failover}}").unwrap()
    );
}
