//! The first hour: a realistic file (OpenAI, Azure, Anthropic, a per-team chain) with
//! one typical mistake at a time, and the exact message each one gets: where in the file, what
//! is wrong in the file's own words, and what to write instead.

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::PathBuf;
use std::process::Command;

/// The file a platform engineer writes. `MODULE` is replaced by a module that exists.
const GATEWAY: &str = r#"listen: {address: 127.0.0.1, port: 10000}
admin: {address: 127.0.0.1, port: 9901}
module: MODULE
providers:
  - name: openai
    endpoint: api.openai.com:443
    models: ["gpt-*", "o3*"]
    credential: {header: authorization, prefix: "Bearer ", env: OPENAI_API_KEY}
  - name: azure
    endpoint: my-resource.openai.azure.com:443
    path_prefix: /openai
    models: ["gpt-*"]
    credential: {header: api-key, env: AZURE_OPENAI_API_KEY}
  - name: anthropic
    endpoint: api.anthropic.com:443
    models: ["claude-*"]
    credential: {header: x-api-key, env: ANTHROPIC_API_KEY}
caller_header: x-team
chains:
  - name: team-ml
    callers: [team-ml]
    models: ["gpt-*"]
    providers: [azure, openai]
  - name: gpt
    models: ["gpt-*", "o3*"]
    providers: [openai, azure, {provider: anthropic, model: claude-sonnet-4-5}]
    max_attempts: 3
  - name: claude
    models: ["claude-*"]
    providers: [anthropic, {provider: openai, model: gpt-4.1}]
timeouts: {attempt: 60s, budget: 5m}
"#;

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "llm-failover-first-hour-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("llm_failover.wasm"), b"\0asm").unwrap();
        Scratch(dir)
    }
    fn module(&self) -> String {
        self.0
            .join("llm_failover.wasm")
            .to_string_lossy()
            .into_owned()
    }
    /// GATEWAY with `from` replaced by `to` (which must be there), written to a file.
    fn gateway(&self, from: &str, to: &str) -> (String, String) {
        assert!(from.is_empty() || GATEWAY.contains(from), "{from:?}");
        let text = GATEWAY
            .replacen(from, to, 1)
            .replace("MODULE", &self.module());
        let path = self.0.join("gateway.failover.yaml");
        std::fs::write(&path, &text).unwrap();
        (path.to_string_lossy().into_owned(), text)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str], cwd: Option<&std::path::Path>) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_llm-failover"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("OPENAI_API_KEY", "sk-o")
        .env("AZURE_OPENAI_API_KEY", "sk-a")
        .env("ANTHROPIC_API_KEY", "sk-c")
        .args(args);
    if let Some(dir) = cwd {
        c.current_dir(dir);
    }
    let out = c.output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `LINE:COLUMN` (from 1) of `needle` in `text`, as the message must give it.
fn place(text: &str, needle: &str) -> String {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in the file"));
    let line = text[..at].matches('\n').count() + 1;
    let column = at - text[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{line}:{column}")
}

#[test]
fn the_realistic_file_is_valid_without_a_warning() {
    let dir = Scratch::new("valid");
    let (file, _) = dir.gateway("", "");
    let (code, stdout, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr, "",
        "no warning for a per-team chain before a general one"
    );
    assert_eq!(
        stdout,
        format!(
            "{file}: valid (3 providers, 3 chains, 3 attempt slots; Envoy 1.40: router mode)\n"
        )
    );
    // The other order: the team's chain still wins for its callers (as explain and Envoy route).
    let team = "  - name: team-ml\n    callers: [team-ml]\n    models: [\"gpt-*\"]\n    providers: [azure, openai]\n";
    let team_last = GATEWAY
        .replace(team, "")
        .replace("timeouts:", &format!("{team}timeouts:"));
    let path = dir.0.join("team-last.failover.yaml");
    std::fs::write(&path, team_last.replace("MODULE", &dir.module())).unwrap();
    let (code, _, stderr) = run(&["validate", &path.to_string_lossy()], None);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let (code, stdout, _) = run(
        &[
            "explain",
            &path.to_string_lossy(),
            "--model",
            "gpt-4o",
            "--caller",
            "team-ml",
        ],
        None,
    );
    assert_eq!(code, 0);
    assert!(stdout.contains("\nchain: team-ml ("), "{stdout}");
}

#[test]
fn a_general_chain_behind_another_for_the_same_callers_still_warns() {
    let dir = Scratch::new("shadow");
    let (file, text) = dir.gateway(
        "  - name: claude\n",
        "  - name: team-again\n    callers: [team-ml]\n    models: [\"gpt-4o\"]\n    providers: [openai]\n  - name: claude\n",
    );
    let (code, _, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "{file}:{}: warning: chains[2].models: chain \"team-again\" can never match: every model it lists is matched first by chain \"team-ml\" for the same routes, paths and callers — move it before, narrow the earlier chain's models, or give it routes\n",
            place(&text, "[\"gpt-4o\"]")
        )
    );
}

#[test]
fn a_wrong_type_is_named_in_words_at_its_line() {
    let dir = Scratch::new("type");
    let (file, text) = dir.gateway("max_attempts: 3", "max_attempts: three");
    let (code, _, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        format!(
            "{file}:{}: chains[1].max_attempts: \"three\" is not a whole number — write it in digits, without quotes or units\n{file}: 1 error\n",
            place(&text, "three")
        )
    );
}

#[test]
fn durations_say_the_one_form_allowed() {
    let dir = Scratch::new("durations");
    for (written, says) in [
        ("1m30s", "\"1m30s\" combines units: write one number with one unit, e.g. \"90s\""),
        ("-5s", "\"-5s\" is negative: a duration is positive; write one number with one unit (ms, s, m, h or d), e.g. \"30s\""),
    ] {
        let (file, text) = dir.gateway("attempt: 60s", &format!("attempt: {written}"));
        let (code, _, stderr) = run(&["validate", &file], None);
        assert_eq!(code, 1);
        assert_eq!(
            stderr,
            format!(
                "{file}:{}: timeouts.attempt: {says}\n{file}: 1 error\n",
                place(&text, written)
            )
        );
    }
}

#[test]
fn listeners_that_envoy_could_not_bind_are_errors() {
    let dir = Scratch::new("ports");
    let (file, text) = dir.gateway("port: 9901}", "port: 10000}");
    let (code, _, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        format!(
            "{file}:{}: admin.port: 10000 is taken: listen already binds 127.0.0.1:10000 — Envoy cannot bind one port twice and would not start — give admin another port\n{file}: 1 error\n",
            place(&text, "10000}\nmodule")
        )
    );
    // The status listener's default port, taken by admin.
    let (file, text) = dir.gateway(
        "port: 9901}",
        "port: 9902}\nstatus_path: /llm-failover/status",
    );
    let (code, _, stderr) = run(&["render", &file], None);
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        format!(
            "{file}:{}: status_path: the status endpoint gets its own listener, by default on 127.0.0.1:9902, but admin already binds 127.0.0.1:9902 — Envoy cannot bind one port twice and would not start: set status_listen: {{port: ...}} to a free port, or move admin\n{file}: 1 error — nothing was written\n",
            place(&text, "/llm-failover/status")
        )
    );
}

#[test]
fn a_module_path_envoy_would_not_find_is_named_as_envoy_resolves_it() {
    let dir = Scratch::new("module");
    let (file, _) = dir.gateway("module: MODULE", "module: dist/llm_failover.wasm");
    let elsewhere = dir.0.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let (code, stdout, stderr) = run(&["render", &file, "--out", "envoy.yaml"], Some(&elsewhere));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.is_empty());
    let resolved = elsewhere
        .canonicalize()
        .unwrap()
        .join("dist/llm_failover.wasm");
    assert_eq!(
        stderr,
        format!(
            "{file}:3:9: warning: module: dist/llm_failover.wasm is relative, and Envoy started in this directory would open {}, which does not exist — write its absolute path in module: (or render --module \"$PWD/dist/llm_failover.wasm\" in the repository), or start Envoy where the path holds\n",
            resolved.display()
        )
    );
    // Given the module's real path, nothing to say.
    let (code, _, stderr) = run(
        &[
            "render",
            &file,
            "--module",
            &dir.module(),
            "--out",
            "envoy.yaml",
        ],
        Some(&elsewhere),
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
}

#[test]
fn a_chain_that_can_never_serve_is_an_error() {
    let dir = Scratch::new("never");
    let (file, text) = dir.gateway(
        "models: [\"gpt-*\"]\n    providers: [azure, openai]",
        "models: [\"gpt4*\"]\n    providers: [azure, openai]",
    );
    let (code, _, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "{file}:{}: warning: chains[0].providers[0]: provider \"azure\" serves none of chain \"team-ml\"'s models, so it is always skipped — fix its models, or give this entry a model: to send instead\n\
             {file}:{}: warning: chains[0].providers[1]: provider \"openai\" serves none of chain \"team-ml\"'s models, so it is always skipped — fix its models, or give this entry a model: to send instead\n\
             {file}:{}: chains[0]: chain \"team-ml\" can never serve a request: every provider in it is skipped for its models (see the warnings above) — fix the model names in the chain or its providers\n\
             {file}: 1 error\n",
            place(&text, "azure, openai]"),
            place(&text, "openai]"),
            place(&text, "name: team-ml"),
        )
    );
}

#[test]
fn strict_turns_warnings_into_a_failure() {
    let dir = Scratch::new("strict");
    let (file, _) = dir.gateway(
        "  - name: anthropic\n",
        "  - name: spare\n    endpoint: \"127.0.0.1:1\"\n  - name: anthropic\n",
    );
    let (code, stdout, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(": valid ("));
    assert!(
        stderr.contains("warning: providers[2]: provider \"spare\" is not used"),
        "{stderr}"
    );
    let (code, stdout, stderr) = run(&["validate", "--strict", &file], None);
    assert_eq!(code, 1);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.ends_with(&format!("{file}: 1 warning and --strict\n")),
        "{stderr}"
    );
    let (code, stdout, stderr) = run(&["render", "--strict", &file], None);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(
        stderr.ends_with("1 warning and --strict — nothing was written\n"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_provider_gets_did_you_mean() {
    let dir = Scratch::new("provider");
    let (file, text) = dir.gateway("providers: [azure, openai]", "providers: [azur, openai]");
    let (code, _, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        format!(
            "{file}:{}: chains[0].providers[0]: unknown provider \"azur\" — did you mean \"azure\"?\n{file}: 1 error\n",
            place(&text, "azur,")
        )
    );
}

#[test]
fn yaml_syntax_errors_say_what_to_check() {
    let dir = Scratch::new("syntax");
    let (file, _) = dir.gateway(
        "    endpoint: api.anthropic.com:443",
        "\tendpoint: api.anthropic.com:443",
    );
    let (code, _, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 1);
    let line = GATEWAY
        .lines()
        .position(|l| l.contains("api.anthropic.com"))
        .unwrap()
        + 1;
    assert_eq!(
        stderr,
        format!(
            "{file}:{line}:1: not valid YAML: line {line} is indented with a tab — YAML indents with spaces only: replace the tab with spaces\n{file}: 1 error\n"
        )
    );
    let (file, _) = dir.gateway("    path_prefix: /openai", "   path_prefix: /openai");
    let (code, _, stderr) = run(&["validate", &file], None);
    assert_eq!(code, 1);
    let line = GATEWAY
        .lines()
        .position(|l| l.contains("path_prefix"))
        .unwrap()
        + 1;
    assert!(stderr.starts_with(&format!("{file}:{line}:")), "{stderr}");
    assert!(
        stderr.contains(&format!("— check the indentation of line {line} and the lines above it (the fields of one mapping start in one column; list items start with \"- \" under their key) and that every quote and bracket is closed\n")),
        "{stderr}"
    );
}

#[test]
fn explain_says_which_reason_left_a_provider_out() {
    let dir = Scratch::new("explain");
    let (file, _) = dir.gateway("", "");
    let (code, stdout, _) = run(&["explain", &file, "--model", "o3-mini"], None);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("  azure: skipped: does not serve o3-mini (models gpt-*)\n"),
        "{stdout}"
    );
}

#[test]
fn render_help_lists_every_piece() {
    let (code, stdout, _) = run(&["render", "--help"], None);
    assert_eq!(code, 0);
    let help = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for piece in [
        "http_filters.yaml",
        "route.yaml",
        "clusters.yaml",
        "stats_config.yaml",
        "local_reply_config.yaml",
        "status_listener.yaml",
    ] {
        assert!(help.contains(piece), "{piece} missing from:\n{stdout}");
    }
}

/// The configuration reference in docs/configuration.md: the YAML block that shows every field.
fn reference() -> String {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )
    .unwrap();
    let start = doc
        .find("```yaml\n# Renderer-only fields")
        .expect("the reference block")
        + 8;
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_string()
}

/// What a file means, to compare two files: the renderer's fields and the filter's
/// configuration (without its fingerprint, which is of the bytes).
fn meaning(text: &str) -> String {
    let gw = llm_failover_cli::load(text, &|_| None, None).unwrap_or_else(|e| panic!("{e:?}"));
    let mut config = gw.config.clone();
    config.fingerprint = 0;
    format!(
        "{:?} {:?} {} {} {} {} {:?} {config:?}",
        gw.listen,
        gw.admin,
        gw.module,
        gw.max_request_body,
        gw.ca_file,
        gw.envoy_version,
        gw.status
    )
}

#[test]
fn every_value_the_reference_marks_default_is_the_default() {
    let full = reference();
    let is_marked = |l: &str| {
        let (code, comment) = l.split_once('#').unwrap_or((l, ""));
        !code.trim().is_empty() && comment.contains("(default)")
    };
    let marked: Vec<&str> = full.lines().filter(|l| is_marked(l)).collect();
    for field in [
        "listen:",
        "module:",
        "max_request_body:",
        "ca_file:",
        "envoy_version:",
        "max_attempts:",
        "fallback_on:",
        "breaker:",
        "dead_marks:",
        "timeouts:",
        "opt_out_header:",
        "gateway_credential_headers:",
        "models_path:",
    ] {
        assert!(
            marked.iter().any(|l| l.trim_start().starts_with(field)),
            "{field} is not shown with its default"
        );
    }
    let without: String = full
        .lines()
        .filter(|l| !is_marked(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(meaning(&without), meaning(&full));

    // fallback_on on a chain without alternative lists (a list adds its class to the set).
    let line = marked
        .iter()
        .find(|l| l.trim_start().starts_with("fallback_on:"))
        .unwrap();
    let list = line
        .split_once(':')
        .unwrap()
        .1
        .split('#')
        .next()
        .unwrap()
        .trim();
    let chain = |extra: &str| {
        format!("providers: [{{name: a, endpoint: \"127.0.0.1:1\"}}]\nchains: [{{name: c, providers: [a]{extra}}}]\n")
    };
    assert_eq!(
        meaning(&chain(&format!(", fallback_on: {list}"))),
        meaning(&chain("")),
        "the reference's fallback_on is not the default"
    );
}

/// docs/configuration.md's residency example, as written, is a valid file.
#[test]
fn the_residency_example_validates_as_written() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )
    .expect("docs/configuration.md");
    let section = &doc[doc
        .find("## Keeping a walk in one residency")
        .expect("the section")..];
    let start = section.find("```yaml\n").expect("its YAML block") + "```yaml\n".len();
    let block = &section[start..start + section[start..].find("```").expect("its end")];
    let dir = Scratch::new("residency-example");
    let file = dir.0.join("residency.failover.yaml");
    std::fs::write(&file, block).expect("written");
    let (code, stdout, stderr) = run(&["validate", &file.display().to_string(), "--no-env"], None);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("valid"), "{stdout}");
}
