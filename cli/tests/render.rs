//! The shape of what `render` writes: slots and matcher, retry policy, filters, clusters.

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
    // Hostname providers get their host as :authority; IP providers keep the caller's.
    let providers = down_json["providers"].as_array().unwrap();
    assert_eq!(providers[0]["authority"], "api.openai.com");
    assert_eq!(providers[1]["authority"], "my.openai.azure.com");
    assert!(providers[3].get("authority").is_none());
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
