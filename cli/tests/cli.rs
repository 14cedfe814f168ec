//! The `llm-failover` binary: exit codes, messages (`FILE: field.path: problem — fix`),
//! environment substitution, output files.

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_llm-failover"));
    // A known environment: nothing the files reference is set unless a test sets it.
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    c
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("llm-failover-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("runs");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// `stderr` with each message's `:LINE:COLUMN` after the file name taken out, for tests about
/// the field and the problem (positions have their own tests).
fn unplaced(stderr: &str, file: &str) -> String {
    stderr
        .lines()
        .map(
            |l| match l.strip_prefix(file).and_then(|r| r.strip_prefix(':')) {
                Some(rest) => {
                    let mut parts = rest.splitn(3, ':');
                    match (parts.next(), parts.next(), parts.next()) {
                        (Some(line), Some(col), Some(msg))
                            if line.parse::<usize>().is_ok() && col.parse::<usize>().is_ok() =>
                        {
                            format!("{file}:{msg}")
                        }
                        _ => l.to_string(),
                    }
                }
                None => l.to_string(),
            },
        )
        .map(|l| l + "\n")
        .collect()
}

const OK: &str = "providers:\n  - {name: a, endpoint: \"127.0.0.1:18101\"}\n  - {name: b, endpoint: \"127.0.0.1:18102\"}\nchains:\n  - {name: main, providers: [a, b]}\n";

/// Each invalid file, and the `field: problem` its message must carry.
const INVALID: &[(&str, &str, &str)] = &[
    // Plugin configuration, checked by the filter's own code.
    ("unknown provider", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a, azur]}]\n", "chains[0].providers[1]: unknown provider \"azur\""),
    ("duplicate entry", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a, a]}]\n", "chains[0].providers[1]: provider \"a\" with the same model appears twice"),
    ("empty chain", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: []}]\n", "chains[0].providers: empty chain"),
    ("no attempts", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a], max_attempts: 0}]\n", "chains[0].max_attempts: must be at least 1"),
    ("bad duration", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\nbreaker: {window: 30 parsecs}\n", "breaker.window:"),
    ("duration without a unit", "providers: [{name: a, endpoint: \"127.0.0.1:1\", budget: {tokens: 1000, window: 24}}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].budget.window: 24 has no unit: write \"24s\" for seconds, \"24h\" for hours (ms, s, m, h or d)"),
    ("quoted duration without a unit", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\ntimeouts: {attempt: \"30\"}\n", "timeouts.attempt: 30 has no unit"),
    ("connect timeout without a unit", "providers: [{name: a, endpoint: \"127.0.0.1:1\", connect_timeout: 5}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].connect_timeout: 5 has no unit"),
    ("unknown class", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a], fallback_on: [server_eror]}]\n", "chains[0].fallback_on[0]: unknown failure class"),
    ("bad status", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a], fallback_on: [700]}]\n", "chains[0].fallback_on[0]: status 700 is outside 100-599"),
    ("never falls over", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a], fallback_on: [invalid_request]}]\n", "chains[0].fallback_on[0]:"),
    // Groups of equal entries: each mistake named at its field, with the fix.
    ("group of one", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}, {name: b, endpoint: \"127.0.0.1:2\"}]\nchains: [{name: c, providers: [{group: [a]}, b]}]\n", "chains[0].providers[0].group: a group of one member: write the member itself"),
    ("weights not per member", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}, {name: b, endpoint: \"127.0.0.1:2\"}]\nchains: [{name: c, providers: [{group: [a, b], weights: [2, 1, 1]}]}]\n", "chains[0].providers[0].weights: 3 weights for 2 members: give one weight per member"),
    ("zero weight", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}, {name: b, endpoint: \"127.0.0.1:2\"}]\nchains: [{name: c, providers: [{group: [a, b], weights: [2, 0]}]}]\n", "chains[0].providers[0].weights[1]: a weight of 0 never picks the member"),
    ("member elsewhere", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}, {name: b, endpoint: \"127.0.0.1:2\"}]\nchains: [{name: c, providers: [a, {group: [b, a]}]}]\n", "chains[0].providers[1].group[1]: provider \"a\" with the same model appears twice in this chain (group members included)"),
    // Chain entries: fail closed, as providers and chains do.
    ("entry field typo", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}, {name: b, endpoint: \"127.0.0.1:2\"}]\nchains: [{name: c, providers: [a, {provider: b, modle: m}]}]\n", "chains[0].providers[1].modle: unknown field `modle` — did you mean `model`?"),
    ("entry capabilities typo", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [{provider: a, capabilites: {vision: false}}]}]\n", "chains[0].providers[0].capabilites: unknown field `capabilites` — did you mean `capabilities`?"),
    ("capability typo", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [{provider: a, capabilities: {context_windw: 8000}}]}]\n", "chains[0].providers[0].capabilities.context_windw: unknown field `context_windw` — did you mean `context_window`?"),
    ("context window with a unit", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [{provider: a, capabilities: {context_window: 200k}}]}]\n", "chains[0].providers[0].capabilities.context_window: \"200k\" is not a whole number — write the number itself: 200000"),
    ("context window quoted", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [{provider: a, capabilities: {context_window: \"200000\"}}]}]\n", "chains[0].providers[0].capabilities.context_window: \"200000\" is not a whole number — write it without quotes: 200000"),
    ("context window zero", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [{provider: a, capabilities: {context_window: 0}}]}]\n", "chains[0].providers[0].capabilities.context_window: must be a number of tokens above 0 (omit it when unknown)"),
    ("vision yes", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [{provider: a, capabilities: {vision: yes}}]}]\n", "chains[0].providers[0].capabilities.vision: \"yes\" is not true or false — write true or false, without quotes"),
    ("entry not a name", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a, 5]}]\n", "chains[0].providers[1]: 5 is not a provider's name or a mapping {provider, model, capabilities, effort, max_tokens} or {group, weights, policy} — write a provider's name, or {provider: NAME, model: MODEL}"),
    ("entry without provider", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a], context_window: [{model: big}]}]\n", "chains[0].context_window[0]: missing field `provider` — add provider: ..."),
    ("azure without deployment", "providers: [{name: az, endpoint: \"127.0.0.1:1\", api: azure_openai, api_version: \"2024-10-21\"}]\nchains: [{name: c, providers: [az]}]\n", "chains[0].providers[0]: provider \"az\" is Azure OpenAI: name the deployment, or the caller's model is sent in its place — write {provider: az, model: DEPLOYMENT}"),
    ("bedrock without model id", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}, {name: br, endpoint: \"127.0.0.1:2\", api: bedrock, credential: {header: authorization, value: k}}]\nchains: [{name: c, providers: [a, br]}]\n", "chains[0].providers[1]: provider \"br\" is Bedrock: name the model id"),
    ("max tokens with a unit", "providers: [{name: a, endpoint: \"127.0.0.1:1\", api: anthropic, max_tokens: 4k}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].max_tokens: \"4k\" is not a whole number — write the number itself: 4000"),
    ("aws credentials source", "providers: [{name: br, endpoint: \"127.0.0.1:1\", api: bedrock, region: us-east-1, aws_credentials: instance}]\nchains: [{name: c, providers: [{provider: br, model: m}]}]\n", "providers[0].aws_credentials: \"instance\" is not a credential source — write env (the default), chain"),
    ("aws credentials typo", "providers: [{name: br, endpoint: \"127.0.0.1:1\", api: bedrock, region: us-east-1, aws_credentials: {file: /etc/aws/credentials, profil: x}}]\nchains: [{name: c, providers: [{provider: br, model: m}]}]\n", "providers[0].aws_credentials: unknown field `profil` — did you mean `profile`?"),
    ("aws credentials with a key", "providers: [{name: br, endpoint: \"127.0.0.1:1\", api: bedrock, aws_credentials: env, credential: {header: authorization, value: k}}]\nchains: [{name: c, providers: [{provider: br, model: m}]}]\n", "providers[0].aws_credentials: only for a Bedrock provider Envoy signs"),
    ("provider field typo", "providers: [{name: a, endpoint: \"127.0.0.1:1\", modles: [x]}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].modles: unknown field `modles` — did you mean `models`?"),
    ("top-level typo", "lisen: {port: 1}\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n", "lisen: unknown field `lisen` — did you mean `listen`?"),
    ("wrong type", "providers: [{name: a, endpoint: \"127.0.0.1:1\", models: gpt}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].models: \"gpt\" is not a list"),
    ("two credentials", "providers: [{name: a, endpoint: \"127.0.0.1:1\", credential: {header: x-api-key, value: k, env: K}}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].credential: give exactly one of `value` or `env`"),
    ("bad credential header", "providers: [{name: a, endpoint: \"127.0.0.1:1\", credential: {header: \"x api key\", value: k}}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].credential.header:"),
    ("bad path prefix", "providers: [{name: a, endpoint: \"127.0.0.1:1\", path_prefix: openai/}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].path_prefix:"),
    ("duplicate provider", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}, {name: a, endpoint: \"127.0.0.1:2\"}]\nchains: [{name: c, providers: [a]}]\n", "providers[1].name: provider \"a\" is defined twice"),
    ("no providers", "providers: []\nchains: []\n", "providers: no provider is defined"),
    ("missing chains", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\n", "missing field `chains`"),
    ("bad status path", "providers: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\nstatus_path: status\n", "status_path:"),
    // Renderer fields.
    ("role given", "role: upstream\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n", "role: set by the renderer"),
    ("log_models given", "log_models: true\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n", "log_models: set by the renderer with render --otel-collector"),
    ("missing endpoint", "providers: [{name: a}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].endpoint: missing — add endpoint: host:port"),
    ("endpoint without port", "providers: [{name: a, endpoint: api.openai.com}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].endpoint: \"api.openai.com\" has no port — write host:port"),
    ("endpoint with scheme", "providers: [{name: a, endpoint: \"https://api.openai.com:443\"}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].endpoint: \"https://api.openai.com:443\" has a scheme"),
    ("endpoint not a string", "providers: [{name: a, endpoint: 8080}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].endpoint: 8080 is not host:port"),
    ("bad port", "providers: [{name: a, endpoint: \"127.0.0.1:70000\"}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].endpoint: port \"70000\""),
    ("bad tls", "providers: [{name: a, endpoint: \"127.0.0.1:1\", tls: maybe}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].tls: \"maybe\" is not true or false"),
    ("tls to an ip without sni", "providers: [{name: a, endpoint: \"127.0.0.1:443\"}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].sni: required for TLS to an IP address"),
    ("http2 with tls", "providers: [{name: a, endpoint: \"api.example.com:443\", http2: true}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].http2: TLS providers negotiate HTTP/2 by ALPN already"),
    ("sni without tls", "providers: [{name: a, endpoint: \"127.0.0.1:1\", sni: x.example}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].sni: set without TLS"),
    ("bad connect timeout", "providers: [{name: a, endpoint: \"127.0.0.1:1\", connect_timeout: soon}]\nchains: [{name: c, providers: [a]}]\n", "providers[0].connect_timeout:"),
    ("cluster clash", "providers: [{name: a, endpoint: \"127.0.0.1:1\", cluster: x}, {name: b, endpoint: \"127.0.0.1:2\", cluster: x}]\nchains: [{name: c, providers: [a, b]}]\n", "providers[1].endpoint: cluster \"x\" is also used by provider \"a\""),
    ("listen hostname", "listen: {address: localhost}\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n", "listen.address: \"localhost\" is not an IP address"),
    ("listen port", "listen: {port: 0}\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n", "listen.port: 0 is not a port"),
    ("admin field", "admin: {prot: 9901}\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n", "admin.prot: unknown field"),
    ("body size", "max_request_body: 10 parsecs\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n", "max_request_body: \"10 parsecs\" has an unknown unit"),
    ("module", "module: \"\"\nproviders: [{name: a, endpoint: \"127.0.0.1:1\"}]\nchains: [{name: c, providers: [a]}]\n", "module: must be a non-empty string"),
    // The file itself.
    ("unset variable", "providers: [{name: a, endpoint: \"127.0.0.1:${NOT_SET_ANYWHERE}\"}]\nchains: [{name: c, providers: [a]}]\n", "line 1: environment variable NOT_SET_ANYWHERE is not set — export NOT_SET_ANYWHERE"),
    ("yaml syntax", "providers: [{name: a\nchains: [\n", "not valid YAML: did not find expected"),
    ("empty file", "", "the file is empty"),
    ("not a mapping", "- a\n- b\n", "the file must be a YAML mapping"),
];

#[test]
fn every_error_reaches_the_user_with_file_and_field_and_exit_1() {
    let dir = Scratch::new("invalid");
    for (i, (what, yaml, expected)) in INVALID.iter().enumerate() {
        let file = dir.file(&format!("case{i}.failover.yaml"), yaml);
        for command in ["validate", "render"] {
            let (code, stdout, stderr) = run(bin().args([command, &file]));
            let stderr = unplaced(&stderr, &file);
            assert_eq!(code, 1, "{what} ({command}): exit {code}\n{stderr}");
            assert!(stdout.is_empty(), "{what}: nothing rendered on error");
            let wanted = format!("{file}: {expected}");
            let line = stderr.lines().find(|l| l.starts_with(&wanted));
            assert!(
                line.is_some(),
                "{what} ({command}): wanted a line starting with\n  {wanted}\ngot:\n{stderr}"
            );
            // The field, the problem, and the fix.
            let line = line.unwrap_or_default();
            let fixes = [
                " — ",
                ": use",
                ": write",
                ": remove",
                ": add",
                ": list",
                ": define",
                ": give",
                ": names must",
                "e.g.",
                "omit it",
                "1 means",
                "with providers: and chains:",
            ];
            assert!(
                fixes.iter().any(|f| line.contains(f)),
                "{what}: the message names no fix: {line}"
            );
        }
    }
}

#[test]
fn all_problems_are_reported_at_once() {
    let dir = Scratch::new("many");
    let file = dir.file(
        "many.failover.yaml",
        "listen: {port: 0}\nproviders: [{name: a, endpoint: nope}]\nchains: [{name: c, providers: [a, b], max_attempts: 0}]\n",
    );
    let (code, _, stderr) = run(bin().args(["validate", &file]));
    let stderr = unplaced(&stderr, &file);
    assert_eq!(code, 1);
    for field in [
        "listen.port:",
        "providers[0].endpoint:",
        "chains[0].providers[1]:",
        "chains[0].max_attempts:",
    ] {
        assert!(
            stderr.contains(&format!("{file}: {field}")),
            "{field} missing from:\n{stderr}"
        );
    }
    assert!(stderr.ends_with(&format!("{file}: 4 errors\n")), "{stderr}");
    let (code, _, stderr) = run(bin().args(["render", &file]));
    assert_eq!(code, 1);
    assert!(
        stderr.ends_with("4 errors — nothing was written\n"),
        "{stderr}"
    );
}

#[test]
fn warnings_do_not_fail_validation() {
    let dir = Scratch::new("warn");
    let file = dir.file(
        "warn.failover.yaml",
        "providers:\n  - {name: a, endpoint: \"127.0.0.1:1\"}\n  - {name: spare, endpoint: \"127.0.0.1:2\"}\n  - {name: k, endpoint: \"127.0.0.1:3\", credential: {header: x-api-key, env: K_KEY}}\n\
         chains:\n  - {name: main, models: [\"gpt-*\", \"o3*\"], providers: [a, k]}\n  - {name: gpt, models: [\"gpt-4*\"], providers: [a]}\n  - {name: mixed, models: [\"gpt-4o\", \"claude-*\"], routes: [other], providers: [a]}\n",
    );
    let (code, stdout, stderr) = run(bin().args(["validate", &file]));
    let stderr = unplaced(&stderr, &file);
    assert_eq!(code, 0, "{stderr}");
    // The result on standard output, the warnings on standard error.
    assert_eq!(
        stdout,
        format!(
            "{file}: valid (3 providers, 3 chains, 2 attempt slots; Envoy 1.40: router mode)\n"
        )
    );
    assert!(!stderr.contains(": valid ("), "{stderr}");
    for wanted in [
        "warning: providers[1]: provider \"spare\" is not used by any chain",
        "warning: chains[1].models: chain \"gpt\" can never match",
        "warning: chains[2].models[0]: \"gpt-4o\" is matched first by chain \"main\"",
        "warning: chains[2].routes: the rendered gateway has a single route",
        "warning: providers[2].credential.env: K_KEY is not set here",
    ] {
        assert!(
            stderr.contains(&format!("{file}: {wanted}")),
            "missing {wanted:?} in:\n{stderr}"
        );
    }
    // Set, the variable is no longer a warning; render never needs it.
    let (_, _, stderr) = run(bin().args(["validate", &file]).env("K_KEY", "sk-k"));
    assert!(!stderr.contains("K_KEY"), "{stderr}");
    let (code, stdout, stderr) = run(bin().args(["render", &file]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("- K_KEY"),
        "host_env_keys lists the variable"
    );
    assert!(!stderr.contains("K_KEY"));
}

#[test]
fn environment_substitution_feeds_render() {
    let dir = Scratch::new("env");
    let file = dir.file(
        "env.failover.yaml",
        "listen: {port: \"${LISTEN_PORT:-10000}\"}\nproviders:\n  - {name: a, endpoint: \"${A_HOST:-127.0.0.1}:${A_PORT}\"}\nchains: [{name: c, providers: [a]}]\n",
    );
    let (code, _, stderr) = run(bin().args(["render", &file]));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("environment variable A_PORT is not set"),
        "{stderr}"
    );
    let (code, stdout, stderr) = run(bin()
        .args(["render", &file])
        .env("A_PORT", "18555")
        .env("LISTEN_PORT", "12345"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("port_value: 18555"), "{stdout}");
    assert!(stdout.contains("port_value: 12345"), "{stdout}");
    // --no-env: defaults only, the environment is ignored.
    let (code, _, stderr) = run(bin()
        .args(["render", "--no-env", &file])
        .env("A_PORT", "18555"));
    assert_eq!(code, 1, "{stderr}");
}

#[test]
fn render_writes_out_module_and_pieces() {
    let dir = Scratch::new("render");
    let file = dir.file("gw.failover.yaml", OK);
    let out = dir.path("envoy.yaml");
    let pieces = dir.path("pieces");
    let (code, stdout, stderr) = run(bin().args([
        "render",
        &file,
        "--out",
        &out,
        "--module=/srv/lf.wasm",
        "--pieces",
        &pieces,
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.is_empty());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("# Envoy bootstrap for the llm-failover gateway, rendered by `llm-failover render gw.failover.yaml`"));
    assert!(text.contains("filename: /srv/lf.wasm"));
    for name in ["http_filters.yaml", "route.yaml", "clusters.yaml"] {
        let piece = std::fs::read_to_string(PathBuf::from(&pieces).join(name)).unwrap();
        assert!(piece.contains("# Goes in"), "{name}");
    }
    // Standard output by default, same text.
    let (code, stdout, _) = run(bin().args(["render", &file, "--module", "/srv/lf.wasm"]));
    assert_eq!(code, 0);
    assert_eq!(stdout, text);
}

#[test]
fn render_otel_collector_adds_the_logger_and_its_piece() {
    let dir = Scratch::new("render-otel");
    let file = dir.file("gw.failover.yaml", OK);
    let pieces = dir.path("pieces");
    let (code, stdout, stderr) = run(bin().args([
        "render",
        &file,
        "--otel-collector",
        "127.0.0.1:4317",
        "--pieces",
        &pieces,
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("envoy.access_loggers.open_telemetry"));
    let piece = std::fs::read_to_string(PathBuf::from(&pieces).join("access_log.yaml")).unwrap();
    assert!(piece.contains("gen_ai.request.model"), "{piece}");
    let clusters = std::fs::read_to_string(PathBuf::from(&pieces).join("clusters.yaml")).unwrap();
    assert!(clusters.contains("llm_failover_otel"));
    let (code, _, stderr) = run(bin().args(["render", &file, "--otel-collector", "collector"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--otel-collector: \"collector\" has no port"),
        "{stderr}"
    );
    let (code, _, stderr) = run(bin().args([
        "render",
        &file,
        "--target",
        "istio",
        "--otel-collector",
        "127.0.0.1:4317",
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--otel-collector is for the Envoy target"),
        "{stderr}"
    );
}

#[test]
fn render_reloadable_writes_the_watched_plugin_configurations() {
    let dir = Scratch::new("reloadable");
    let file = dir.file("gw.failover.yaml", OK);
    let out = dir.path("envoy.yaml");
    let ecds = dir.path("ecds");
    let (code, _, stderr) =
        run(bin().args(["render", &file, "--out", &out, "--reloadable", &ecds]));
    assert_eq!(code, 0, "{stderr}");
    let text = std::fs::read_to_string(&out).unwrap();
    let clusters = text
        .matches("name: envoy.filters.http.upstream_codec")
        .count();
    assert!(clusters >= 1);
    assert_eq!(text.matches("config_discovery:").count(), 1 + clusters);
    assert!(
        !text.contains("\"role\":"),
        "no inline plugin configuration is left"
    );
    for (name, role) in [
        ("llm_failover.yaml", "downstream"),
        ("llm_failover_upstream.yaml", "upstream"),
    ] {
        let path = std::fs::canonicalize(PathBuf::from(&ecds).join(name)).unwrap();
        assert!(
            text.contains(&format!("path: {}", path.display())),
            "{name}"
        );
        let resource = std::fs::read_to_string(&path).unwrap();
        assert!(
            resource.contains(&format!("\"role\":\"{role}\"")),
            "{resource}"
        );
    }
    let (code, _, _) = run(bin().args(["render", &file, "--reloadable", &ecds, "--pieces", &ecds]));
    assert_eq!(code, 2);
}

#[test]
fn usage_errors_exit_2_and_unreadable_files_exit_1() {
    for args in [
        vec![],
        vec!["frobnicate", "x"],
        vec!["render"],
        vec!["render", "a.yaml", "b.yaml"],
        vec!["render", "a.yaml", "--out"],
        vec!["render", "a.yaml", "--bogus"],
        vec!["validate", "a.yaml", "--out", "x"],
    ] {
        let (code, _, stderr) = run(bin().args(&args));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            stderr.contains("usage: llm-failover render FILE"),
            "{args:?}: {stderr}"
        );
    }
    // `validate` alone: the usage names its --strict.
    let (code, _, stderr) = run(bin().arg("validate"));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("llm-failover validate FILE [--strict]"),
        "{stderr}"
    );
    let (code, stdout, _) = run(bin().arg("--help"));
    assert_eq!(code, 0);
    assert!(stdout.contains("validate"));
    let (code, _, stderr) = run(bin().args(["validate", "/nonexistent/x.failover.yaml"]));
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("/nonexistent/x.failover.yaml: cannot read:"),
        "{stderr}"
    );
}

#[test]
fn validate_reads_standard_input_as_dash() {
    use std::io::Write;
    let mut child = bin()
        .args(["validate", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(OK.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn help_works_on_every_command_both_ways() {
    for command in ["render", "validate", "explain"] {
        for args in [
            vec![command, "--help"],
            vec!["help", command],
            vec![command, "-h"],
        ] {
            let (code, stdout, stderr) = run(bin().args(&args));
            assert_eq!(code, 0, "{args:?}: {stderr}");
            assert!(
                stdout.contains(&format!("Usage: llm-failover {command}")),
                "{args:?}: {stdout}"
            );
        }
    }
    let (code, stdout, _) = run(bin().arg("help"));
    assert_eq!(code, 0);
    for command in ["render", "validate", "explain"] {
        assert!(stdout.contains(command), "{stdout}");
    }
}

#[test]
fn explain_with_a_body_shows_each_entrys_api_and_the_entries_it_skips() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../envoy/cross-vendor.failover.yaml")
        .display()
        .to_string();
    let dir = Scratch::new("explain-body");
    let body = dir.file(
        "image.json",
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"what is it"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}"#,
    );
    let (code, stdout, stderr) = run(bin().args([
        "explain", &file, "--model", "gpt-4o", "--no-env", "--body", &body,
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("1. openai"), "{stdout}");
    assert!(stdout.contains("       api: openai\n"), "{stdout}");
    assert!(
        stdout.contains("api: anthropic (translated from openai, answers back to openai)"),
        "{stdout}"
    );
    assert!(stdout.contains("path: /v1/messages"), "{stdout}");
    assert!(
        stdout.contains("local: skipped: capability_vision"),
        "{stdout}"
    );
    // Without a body nothing is known of the request: no entry is skipped for it.
    let (code, stdout, _) = run(bin().args(["explain", &file, "--model", "gpt-4o", "--no-env"]));
    assert_eq!(code, 0);
    assert!(stdout.contains("3. local"), "{stdout}");
    let (code, _, stderr) = run(bin().args([
        "explain",
        &file,
        "--model",
        "gpt-4o",
        "--no-env",
        "--body",
        "/nonexistent.json",
    ]));
    assert_eq!(code, 2);
    assert!(stderr.contains("--body"), "{stderr}");
    // A Responses request that names stored state, or runs in the background, cannot go to the
    // claude chain's first entry (Anthropic): refused as the gateway refuses it, exit 1.
    for (name, member) in [
        ("state", r#""previous_response_id":"resp_1""#),
        ("background", r#""background":true"#),
    ] {
        let body = dir.file(
            &format!("{name}.json"),
            &format!(r#"{{"model":"claude-sonnet-4-5","input":"hi",{member}}}"#),
        );
        let (code, stdout, stderr) = run(bin().args([
            "explain",
            &file,
            "--model",
            "claude-sonnet-4-5",
            "--path",
            "/v1/responses",
            "--no-env",
            "--body",
            &body,
        ]));
        assert_eq!(code, 1, "{name}: {stdout}{stderr}");
        assert!(
            stdout.contains("refused: 400 untranslatable_request (x-should-retry: false)"),
            "{name}: {stdout}"
        );
    }
}

#[test]
fn explain_prints_the_walk_and_refusals_exit_1() {
    let dir = Scratch::new("explain");
    let file = dir.file(
        "gw.failover.yaml",
        "caller_header: x-team\n\
         providers:\n\
         - {name: openai, endpoint: \"127.0.0.1:1\", models: [\"gpt-*\"], credential: {header: authorization, prefix: \"Bearer \", value: sk-secret}}\n\
         - {name: azure, endpoint: \"127.0.0.1:2\", models: [\"gpt-*\"], path_prefix: /openai}\n\
         - {name: claude, endpoint: \"127.0.0.1:3\", models: [\"claude-*\"]}\n\
         chains:\n\
         - {name: gpt, models: [\"gpt-*\"], paths: [\"/v1/chat/*\"], providers: [openai, claude, azure, {provider: claude, model: claude-sonnet}], max_attempts: 2}\n\
         - {name: team-a, callers: [team-a], providers: [azure]}\n",
    );
    let (code, stdout, stderr) = run(bin().args(["explain", &file, "--model", "gpt-4o"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("chain: gpt"), "{stdout}");
    assert!(stdout.contains("1. openai"), "{stdout}");
    assert!(stdout.contains("2. azure"), "{stdout}");
    assert!(
        stdout.contains("path: /openai/v1/chat/completions"),
        "{stdout}"
    );
    assert!(
        stdout.contains("claude: skipped: does not serve"),
        "{stdout}"
    );
    assert!(
        stdout.contains("claude: not reached (max_attempts 2)"),
        "{stdout}"
    );
    assert!(!stdout.contains("sk-secret"));
    let (code, stdout, _) =
        run(bin().args(["explain", &file, "--model", "gpt-4o", "--caller", "team-a"]));
    assert_eq!(code, 0);
    assert!(stdout.contains("chain: team-a"), "{stdout}");
    let (code, stdout, _) = run(bin().args([
        "explain",
        &file,
        "--model",
        "gpt-4o",
        "--path",
        "/v1/embeddings",
    ]));
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("refused: 400 model_not_recognized"),
        "{stdout}"
    );
    let (code, _, stderr) = run(bin().args(["explain", &file]));
    assert_eq!(code, 2, "--model is required");
    assert!(stderr.contains("--model"), "{stderr}");
}

#[test]
fn same_residency_is_refused_where_the_file_decides_and_explained_where_it_does_not() {
    let dir = Scratch::new("residency");
    let file = dir.file(
        "res.failover.yaml",
        "providers:\n  - {name: us, endpoint: \"127.0.0.1:1\", residency: us}\n  - {name: eu, endpoint: \"127.0.0.1:2\", residency: eu}\n  - {name: plain, endpoint: \"127.0.0.1:3\"}\n  - {name: claude-eu, endpoint: \"bedrock-runtime.eu-west-1.amazonaws.com:443\", api: bedrock}\n  - {name: claude-wrong, endpoint: \"127.0.0.1:4\", api: bedrock, region: us-east-1, residency: eu}\n\
         chains:\n  - {name: main, same_residency: true, providers: [us, eu, plain, {provider: claude-eu, model: m}]}\n",
    );
    let (code, _, stderr) = run(bin().args(["validate", &file]));
    let stderr = unplaced(&stderr, &file);
    assert_eq!(code, 1, "{stderr}");
    for wanted in [
        "providers[4].residency: \"eu\", but region us-east-1 is in \"us\"",
        "chains[0].providers[1]: provider \"eu\" is in \"eu\", the chain's first entry (which takes every request) in \"us\"",
        "chains[0].providers[2]: provider \"plain\" has no residency, which never matches",
        // Bedrock's residency follows the region its endpoint names.
        "chains[0].providers[3]: provider \"claude-eu\" is in \"eu\"",
    ] {
        assert!(
            stderr.contains(&format!("{file}: {wanted}")),
            "missing {wanted:?} in:\n{stderr}"
        );
    }
    // The first entry serves gpt-* only: decided per request, and explain says what it skips.
    let file = dir.file(
        "ok.failover.yaml",
        "providers:\n  - {name: us, endpoint: \"127.0.0.1:1\", residency: us, models: [\"gpt-*\"]}\n  - {name: eu, endpoint: \"127.0.0.1:2\", residency: eu}\n  - {name: claude-us, endpoint: \"127.0.0.1:4\", api: bedrock, region: us-west-2, credential: {header: authorization, prefix: \"Bearer \", value: k}}\n\
         chains:\n  - {name: main, same_residency: true, providers: [us, eu, {provider: claude-us, model: m}]}\n",
    );
    let (code, _, stderr) = run(bin().args(["validate", &file]));
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, _) = run(bin().args(["explain", &file, "--model", "gpt-4o", "--no-env"]));
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains(
            "  eu: skipped: residency (eu; the request's first entry is in us; same_residency)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("  2. claude-us"), "{stdout}");
    let (code, stdout, _) = run(bin().args(["explain", &file, "--model", "mistral", "--no-env"]));
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("  1. eu"), "{stdout}");
    assert!(
        stdout.contains("  claude-us: skipped: residency (us; the request's first entry is in eu; same_residency)"),
        "{stdout}"
    );
}

#[test]
fn explain_counts_and_names_the_in_place_retry_slots() {
    let dir = Scratch::new("explain-in-place");
    let file = dir.file(
        "gw.failover.yaml",
        "providers:\n\
         - {name: flaky, endpoint: \"127.0.0.1:1\"}\n\
         - {name: spare, endpoint: \"127.0.0.1:2\"}\n\
         chains:\n\
         - {name: retried, models: [\"r-*\"], providers: [flaky, spare], retry_in_place: {back_off: 200ms}}\n\
         - {name: plain, providers: [flaky, spare]}\n",
    );
    let (code, stdout, stderr) = run(bin().args(["explain", &file, "--model", "r-1"]));
    assert_eq!(code, 0, "{stderr}");
    // Two providers, each retried once in place, within max_attempts 3: three attempts.
    assert!(
        stdout.contains("walk: up to 3 attempts (each provider may be retried once in place"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n  1. flaky (cluster flaky)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n  1'. flaky again (retry in place): once, when it fails with connection_error, server_error or overloaded, after 200ms, or rate_limited with a Retry-After of at most 2s; the providers after it then move back one\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n  2'. spare again (retry in place)"),
        "{stdout}"
    );
    // Without retry_in_place: the two planned attempts, no retry slot.
    let (code, stdout, _) = run(bin().args(["explain", &file, "--model", "x"]));
    assert_eq!(code, 0);
    assert!(stdout.contains("walk: up to 2 attempts;"), "{stdout}");
    assert!(!stdout.contains("retry in place"), "{stdout}");
}

#[test]
fn an_entrys_effort_is_checked_and_explained() {
    let dir = Scratch::new("effort");
    let file = dir.file(
        "effort.failover.yaml",
        "providers:\n  - {name: a, endpoint: \"127.0.0.1:1\"}\n  - {name: b, endpoint: \"127.0.0.1:2\"}\n\
         chains:\n  - {name: main, providers: [{provider: a, effort: lowest}, {provider: b, max_tokens: 0}]}\n",
    );
    let (code, _, stderr) = run(bin().args(["validate", &file]));
    let stderr = unplaced(&stderr, &file);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("{file}: chains[0].providers[0].effort: \"lowest\" is not an effort: use minimal, low, medium, high")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{file}: chains[0].providers[1].max_tokens:")),
        "{stderr}"
    );
    let file = dir.file(
        "ok.failover.yaml",
        "providers:\n  - {name: a, endpoint: \"127.0.0.1:1\"}\n  - {name: b, endpoint: \"127.0.0.1:2\"}\n\
         chains:\n  - {name: main, providers: [{provider: a, effort: low, max_tokens: 100}, b]}\n",
    );
    let (code, stdout, _) = run(bin().args(["explain", &file, "--model", "gpt-4o", "--no-env"]));
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout
            .contains("       sent with: effort low, max_tokens 100 (in the provider's dialect)\n"),
        "{stdout}"
    );
}
