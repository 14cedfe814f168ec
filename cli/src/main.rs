//! `llm-failover render FILE [--out PATH] [--module PATH] [--pieces DIR] [--envoy-version V] [--no-env] [--otel-collector HOST:PORT]`
//! `llm-failover render FILE --target istio --out DIR [--istio-version V] [--module URL]`
//! `llm-failover validate FILE [--strict] [--envoy-version V] [--no-env]`
//! `llm-failover explain FILE --model M [--caller C] [--path P] [--body FILE] [--no-env]`
//! `llm-failover help [COMMAND]`, and `--help` on every command.
//!
//! Exit status: 0 done (warnings allowed), 1 the file has errors, an output could not be
//! written, or (explain) the gateway would refuse the request, 2 usage error.

// Tests may unwrap, index and panic (the workspace denies these in the tools' code).
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

use clap::{Args as ClapArgs, Parser, Subcommand, ValueEnum};
use llm_failover_cli::{env_warnings, istio, load_for, render, Diag};
use std::path::Path;
use std::process::ExitCode;

/// The one-screen summary printed after a usage error.
const USAGE: &str = "\
usage: llm-failover render FILE [--out PATH] [--module PATH] [--pieces DIR] [--envoy-version V] [--no-env] [--otel-collector HOST:PORT]
       llm-failover render FILE --target istio --out DIR [--istio-version V] [--module URL]
       llm-failover validate FILE [--strict] [--envoy-version V] [--no-env]
       llm-failover explain FILE --model MODEL [--caller CALLER] [--path PATH] [--body FILE] [--no-env]
       llm-failover help [COMMAND]     (or COMMAND --help)";

#[derive(Parser)]
#[command(
    name = "llm-failover",
    version,
    about = "Renders, validates and explains llm-failover gateway configurations",
    after_help = "exit status: 0 ok (warnings allowed), 1 invalid file, write failure or refused request (explain), 2 usage error"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a complete Envoy bootstrap (YAML) for the gateway described by FILE
    Render {
        #[command(flatten)]
        input: Input,
        /// Write it to PATH instead of standard output
        #[arg(short, long, value_name = "PATH")]
        out: Option<String>,
        /// The wasm module path Envoy loads (overrides the file's module:)
        #[arg(long, value_name = "PATH")]
        module: Option<String>,
        /// Also write http_filters.yaml, route.yaml, clusters.yaml, stats_config.yaml,
        /// local_reply_config.yaml and (with status_path on its own listener)
        /// status_listener.yaml to DIR, for merging into an existing Envoy configuration
        #[arg(long, value_name = "DIR")]
        pieces: Option<String>,
        /// Deliver both roles' plugin configuration from files in DIR that Envoy watches
        /// (extension config discovery): render again with the same DIR and a running Envoy
        /// takes the change without a restart (docs/operations.md, "Changing the
        /// configuration under traffic")
        #[arg(long, value_name = "DIR")]
        reloadable: Option<String>,
        /// What to render for: a standalone Envoy bootstrap, or Kubernetes manifests for an
        /// Istio gateway (written to --out DIR: manifests.yaml and
        /// gateway-deployment-patch.yaml; the file's istio: block says where, docs/istio.md)
        #[arg(long, value_enum, default_value = "envoy")]
        target: Target,
        /// The Istio release to render for (with --target istio; default 1.31)
        #[arg(long, value_name = "V")]
        istio_version: Option<String>,
        /// Also send each request's record to the OpenTelemetry collector at HOST:PORT (OTLP
        /// over gRPC, Envoy's OpenTelemetry access logger), with the GenAI semantic
        /// conventions' attributes (docs/observability.md, "OpenTelemetry")
        #[arg(long, value_name = "HOST:PORT")]
        otel_collector: Option<String>,
        /// Which build of the filter Envoy loads: the proxy-wasm module (any Envoy, Istio),
        /// or the native dynamic module (Envoy 1.40 and 1.41; --module is then the path of
        /// libllm_failover.so, by default beside the wasm module; docs/native.md)
        #[arg(long, value_enum, default_value = "wasm")]
        runtime: RuntimeArg,
    },
    /// Check FILE and report every problem as FILE: field: problem — fix
    Validate {
        #[command(flatten)]
        input: Input,
    },
    /// Print the walk a request would take (chain, providers in order, rewrites, skips)
    ///
    /// Runs the filter's own planner on FILE, with every breaker closed: the chain that serves
    /// the request and why, each attempt's provider and what it rewrites (model, path,
    /// authority, headers; never credential values), and every provider left out and why. No
    /// Envoy is started. Exit status 1 when the gateway would refuse the request.
    Explain {
        #[command(flatten)]
        input: Input,
        /// The model the request asks for (the JSON body's "model"); "" for none
        #[arg(long, value_name = "MODEL")]
        model: String,
        /// The caller, as the caller_header would name it
        #[arg(long, value_name = "CALLER")]
        caller: Option<String>,
        /// The request path
        #[arg(long, value_name = "PATH", default_value = "/v1/chat/completions")]
        path: String,
        /// The request asks for no fallback (the opt_out_header set to off)
        #[arg(long)]
        no_fallback: bool,
        /// A JSON request body: entries that cannot take it (images, tools, prompt size,
        /// another API) are shown as skipped
        #[arg(long, value_name = "FILE")]
        body: Option<String>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RuntimeArg {
    Wasm,
    Native,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    Envoy,
    Istio,
}

#[derive(ClapArgs)]
struct Input {
    /// The failover file ("-" reads standard input)
    #[arg(value_name = "FILE")]
    file: String,
    /// Ignore the environment: every ${VAR:-default} takes its default
    #[arg(long)]
    no_env: bool,
    /// The Envoy the configuration is for, e.g. 1.38 (overrides the file's envoy_version:;
    /// default 1.40): 1.39 and later get router mode, 1.36-1.38 grouping clusters
    #[arg(long, value_name = "V")]
    envoy_version: Option<String>,
    /// Treat warnings about the file as errors (exit 1, nothing written), e.g. in CI; a
    /// credential variable missing from this environment stays a warning
    #[arg(long)]
    strict: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                return usage_error("missing command");
            }
            // clap's own explanation (with its suggestions), then the summary of every command.
            let text = e.to_string();
            let problem = text
                .split("\nUsage:")
                .next()
                .unwrap_or(&text)
                .trim_end()
                .trim_start_matches("error: ");
            return usage_error(problem);
        }
    };
    run(cli.command)
}

fn print(file: &str, diags: &[Diag]) {
    for d in diags {
        eprintln!("{}", d.render(file));
    }
}

/// [`print`], each message located in `text` (the file after substitution) first.
fn print_in(file: &str, text: &str, diags: &[Diag]) {
    let mut diags = diags.to_vec();
    llm_failover_cli::input::locate::locate_all(text, &mut diags);
    print(file, &diags);
}

fn run(command: Command) -> ExitCode {
    let (input, module) = match &command {
        Command::Render { input, module, .. } => (input, module.as_deref()),
        Command::Validate { input } | Command::Explain { input, .. } => (input, None),
    };
    let file = input.file.as_str();
    let text = match read_file(file) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let real_env = |name: &str| std::env::var(name).ok();
    let no_env = |_: &str| None;
    let env: &dyn Fn(&str) -> Option<String> = if input.no_env { &no_env } else { &real_env };
    let gw = match load_for(&text, env, module, input.envoy_version.as_deref()) {
        Ok(gw) => gw,
        Err(errors) => {
            print(file, &errors);
            let n = errors.iter().filter(|d| d.is_error()).count();
            let s = if n == 1 { "" } else { "s" };
            eprintln!("{file}: {n} error{s}{}", nothing_written(&command));
            return ExitCode::from(1);
        }
    };
    let gw = match with_runtime(&command, gw) {
        Ok(gw) => gw,
        Err(problem) => {
            eprintln!("{file}: {problem} — nothing was written");
            return ExitCode::from(1);
        }
    };
    if let Err(code) = warn(&command, input, &gw) {
        return code;
    }
    let gw = match with_otel(&command, file, gw) {
        Ok(gw) => gw,
        Err(code) => return code,
    };
    let source = Path::new(file)
        .file_name()
        .map_or_else(|| file.to_string(), |n| n.to_string_lossy().into_owned());

    match &command {
        Command::Render {
            target: Target::Istio,
            pieces: Some(_),
            ..
        } => usage_error("--pieces is for the Envoy target"),
        Command::Render {
            out,
            module,
            target: Target::Istio,
            istio_version,
            ..
        } => {
            let loaded = istio::load(
                &text,
                env,
                module.as_deref(),
                input.envoy_version.as_deref(),
                istio_version.as_deref(),
            );
            render_istio(file, &gw.text, loaded, &source, out.as_deref())
        }
        Command::Render {
            istio_version: Some(_),
            ..
        } => usage_error("--istio-version needs --target istio"),
        Command::Render {
            pieces: Some(_),
            reloadable: Some(_),
            ..
        } => usage_error("--pieces and --reloadable do not go together"),
        Command::Render {
            out,
            reloadable: Some(dir),
            ..
        } => match with_secrets(gw, out.as_deref()) {
            Ok(gw) => render_reloadable(&gw, &source, out.as_deref(), dir),
            Err(code) => code,
        },
        Command::Render { out, pieces, .. } => match with_secrets(gw, out.as_deref()) {
            Ok(gw) => render_envoy(&gw, &source, out.as_deref(), pieces.as_deref()),
            Err(code) => code,
        },
        Command::Validate { .. } => validate(file, &gw, &real_env, &|| {
            istio::load(&text, env, None, input.envoy_version.as_deref(), None)
        }),
        Command::Explain {
            model,
            caller,
            path,
            no_fallback,
            body,
            ..
        } => {
            let request = Request {
                model,
                caller: caller.as_deref(),
                path,
                no_fallback: *no_fallback,
                body: body.as_deref(),
            };
            explain(&gw, &request)
        }
    }
}

/// `render --runtime native`: the dynamic module in place of the wasm one, for an Envoy that
/// can load it; the reason when it cannot be rendered.
fn with_runtime(
    command: &Command,
    mut gw: llm_failover_cli::Gateway,
) -> Result<llm_failover_cli::Gateway, String> {
    let Command::Render {
        runtime: RuntimeArg::Native,
        module,
        target,
        reloadable,
        ..
    } = command
    else {
        return Ok(gw);
    };
    if *target == Target::Istio {
        return Err(
            "--runtime native is for a standalone Envoy: Istio loads the wasm module \
                    (--runtime wasm)"
                .into(),
        );
    }
    if reloadable.is_some() {
        return Err(
            "--runtime native does not go with --reloadable yet: use the wasm module \
                    for configuration changes under traffic"
                .into(),
        );
    }
    gw.envoy_version.loads_native()?;
    gw.runtime = llm_failover_cli::version::Runtime::Native;
    gw.module = match module {
        Some(path) => path.clone(),
        None => {
            let wasm = Path::new(&gw.module);
            let dir = wasm.parent().unwrap_or_else(|| Path::new(""));
            dir.join("libllm_failover.so")
                .to_string_lossy()
                .into_owned()
        }
    };
    Ok(gw)
}

/// The failover file's text ("-": standard input).
fn read_file(file: &str) -> Result<String, ExitCode> {
    let text = if file == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map(|_| s)
    } else {
        std::fs::read_to_string(file)
    };
    text.map_err(|e| {
        eprintln!("{file}: cannot read: {e}");
        ExitCode::from(1)
    })
}

/// What a refusing `render` adds to its last message.
fn nothing_written(command: &Command) -> &'static str {
    if matches!(command, Command::Render { .. }) {
        " — nothing was written"
    } else {
        ""
    }
}

/// A usage error: the problem, then the summary of every command.
fn usage_error(problem: &str) -> ExitCode {
    eprintln!("llm-failover: {problem}\n{USAGE}");
    ExitCode::from(2)
}

/// Prints the file's warnings (and, for what loads the module from this machine, a module
/// path that is not there); with `--strict`, any is an error.
fn warn(command: &Command, input: &Input, gw: &llm_failover_cli::Gateway) -> Result<(), ExitCode> {
    let file = input.file.as_str();
    let mut warnings = gw.warnings.clone();
    if matches!(
        command,
        Command::Validate { .. }
            | Command::Render {
                target: Target::Envoy,
                ..
            }
    ) {
        warnings.extend(module_warning(&gw.module));
    }
    print_in(file, &gw.text, &warnings);
    if input.strict && !warnings.is_empty() {
        let n = warnings.len();
        let s = if n == 1 { "" } else { "s" };
        eprintln!(
            "{file}: {n} warning{s} and --strict{}",
            nothing_written(command)
        );
        return Err(ExitCode::from(1));
    }
    Ok(())
}

/// The gateway sending each request's record to the collector `--otel-collector` names (the
/// Envoy target only).
fn with_otel(
    command: &Command,
    file: &str,
    gw: llm_failover_cli::Gateway,
) -> Result<llm_failover_cli::Gateway, ExitCode> {
    match command {
        Command::Render {
            otel_collector: Some(_),
            target: Target::Istio,
            ..
        } => Err(usage_error("--otel-collector is for the Envoy target (Istio sends access logs to a collector with its Telemetry API)")),
        Command::Render {
            otel_collector: Some(collector),
            ..
        } => gw.with_otel(collector).map_err(|errors| {
            print(file, &errors);
            ExitCode::from(2)
        }),
        _ => Ok(gw),
    }
}

/// `explain`'s request, as the command line gives it.
struct Request<'a> {
    model: &'a str,
    caller: Option<&'a str>,
    path: &'a str,
    no_fallback: bool,
    /// The file holding the request's JSON body.
    body: Option<&'a str>,
}

/// Prints the walk `request` would take; 1 when the gateway would refuse it.
fn explain(gw: &llm_failover_cli::Gateway, request: &Request<'_>) -> ExitCode {
    let body = match request.body.map(std::fs::read) {
        None => Vec::new(),
        Some(Ok(body)) => body,
        Some(Err(e)) => {
            eprintln!("--body: cannot read: {e}");
            return ExitCode::from(2);
        }
    };
    let content = match llm_failover::intake::read_body(&body) {
        Ok(read) => read.content(),
        Err(reply) => {
            eprintln!("--body: {}", reply.message);
            return ExitCode::from(2);
        }
    };
    let facts = llm_failover::plan::RequestFacts {
        model: request.model,
        path: Some(request.path),
        caller: request.caller,
        no_fallback: request.no_fallback,
        route: None,
        api: llm_failover::translate::Api::of_path(request.path),
        content,
        body: &body,
    };
    let sending = |id: llm_failover::config::ProviderId| {
        let u = gw.upstreams.get(id.index())?;
        let p = gw.config.provider(id)?;
        render::sending(u, p)
    };
    match llm_failover::explain::explain_with(&gw.config, &facts, &sending) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(text) => {
            print!("{text}");
            ExitCode::from(1)
        }
    }
}

/// Writes the Envoy bootstrap to `out` (standard output when `None`), and its pieces to
/// `pieces` when asked.
fn render_envoy(
    gw: &llm_failover_cli::Gateway,
    source: &str,
    out: Option<&str>,
    pieces: Option<&str>,
) -> ExitCode {
    let text = render::bootstrap_text(gw, source);
    if let Err(code) = write_out(&text, out) {
        return code;
    }
    match pieces.map(|dir| write_files(dir, render::pieces(gw, source))) {
        Some(Err(code)) => code,
        _ => ExitCode::SUCCESS,
    }
}

/// Writes each `(name, text)` into `dir` (created when missing).
fn write_files<N: AsRef<Path>, T: AsRef<[u8]>>(
    dir: &str,
    files: impl IntoIterator<Item = (N, T)>,
) -> Result<(), ExitCode> {
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("{dir}: cannot create: {e}");
        return Err(ExitCode::from(1));
    }
    for (name, text) in files {
        let path = Path::new(dir).join(name);
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("{}: cannot write: {e}", path.display());
            return Err(ExitCode::from(1));
        }
    }
    Ok(())
}

/// Envoy opens the module at start, a relative path from the directory it starts in: a path
/// that is not there from here is worth a word before Envoy dies with "Invalid path".
fn module_warning(module: &str) -> Option<Diag> {
    let path = Path::new(module);
    if path.exists() {
        return None;
    }
    let problem = if path.is_absolute() {
        format!("{module} does not exist — build it (./scripts/build.sh), or write the path of llm_failover.wasm in module: (or render --module PATH)")
    } else {
        let here = std::env::current_dir().unwrap_or_default().join(path);
        format!(
            "{module} is relative, and Envoy started in this directory would open {}, which does not exist — write its absolute path in module: (or render --module \"$PWD/dist/llm_failover.wasm\" in the repository), or start Envoy where the path holds",
            here.display()
        )
    };
    Some(Diag::warning("module", problem))
}

type IstioLoad<'a> = &'a dyn Fn() -> Result<(llm_failover_cli::Gateway, istio::Options), Vec<Diag>>;

fn validate(
    file: &str,
    gw: &llm_failover_cli::Gateway,
    real_env: &dyn Fn(&str) -> Option<String>,
    istio_load: IstioLoad,
) -> ExitCode {
    // A file with an istio: block is also checked for `render --target istio`.
    if gw.istio.is_some() {
        if let Err(errors) =
            istio_load().and_then(|(igw, opts)| istio::render_files(&igw, file, &opts).map(|_| ()))
        {
            print_in(file, &gw.text, &errors);
            eprintln!("{file}: {} error(s) for --target istio", errors.len());
            return ExitCode::from(1);
        }
    }
    print_in(file, &gw.text, &env_warnings(gw, real_env));
    let providers = gw.config.providers.len();
    let chains = gw.config.chains.len();
    let groups = gw.groups.len();
    // The result goes to standard output; problems and warnings went to standard error.
    println!(
        "{file}: valid ({providers} provider{}, {chains} chain{}, {} attempt slot{}; Envoy {}: {})",
        if providers == 1 { "" } else { "s" },
        if chains == 1 { "" } else { "s" },
        render::slot_count(gw),
        if render::slot_count(gw) == 1 { "" } else { "s" },
        gw.envoy_version,
        match gw.envoy_version.mode() {
            llm_failover_cli::version::Mode::Router => "router mode".to_string(),
            llm_failover_cli::version::Mode::Grouping => format!(
                "grouping mode, {groups} grouping cluster{}",
                if groups == 1 { "" } else { "s" }
            ),
        },
    );
    ExitCode::SUCCESS
}

/// `render --reloadable DIR`: the plugin configurations go to DIR first (each written to a
/// temporary file and renamed, so Envoy never reads half a file), then the bootstrap.
fn render_reloadable(
    gw: &llm_failover_cli::Gateway,
    source: &str,
    out: Option<&str>,
    dir: &str,
) -> ExitCode {
    let Ok(abs) = std::fs::create_dir_all(dir).and_then(|_| std::fs::canonicalize(dir)) else {
        eprintln!("{dir}: cannot create");
        return ExitCode::from(1);
    };
    for (name, text) in render::extension_files(gw) {
        let tmp = abs.join(format!(".{name}.tmp"));
        let path = abs.join(name);
        if let Err(e) = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &path)) {
            eprintln!("{}: cannot write: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    let text = render::reloadable_bootstrap_text(gw, source, &abs.to_string_lossy());
    if let Err(code) = write_out(&text, out) {
        return code;
    }
    ExitCode::SUCCESS
}

fn render_istio(
    file: &str,
    text: &str,
    loaded: Result<(llm_failover_cli::Gateway, istio::Options), Vec<Diag>>,
    source: &str,
    out: Option<&str>,
) -> ExitCode {
    let Some(dir) = out else {
        return usage_error("--target istio writes two files: give --out DIR");
    };
    let files = loaded.and_then(|(gw, opts)| istio::render_files(&gw, source, &opts));
    let files = match files {
        Ok(f) => f,
        Err(errors) => {
            print_in(file, text, &errors);
            eprintln!("{file}: nothing was written");
            return ExitCode::from(1);
        }
    };
    match write_files(dir, files) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// Writes the secret files of `credential.file` providers beside the bootstrap `out` (each
/// to a temporary file, then renamed: Envoy may be watching them) and names their directory.
fn with_secrets(
    mut gw: llm_failover_cli::Gateway,
    out: Option<&str>,
) -> Result<llm_failover_cli::Gateway, ExitCode> {
    let files = render::secret_files(&gw);
    if files.is_empty() {
        return Ok(gw);
    }
    let Some(out) = out else {
        return Err(usage_error("a credential read from a file (credential.file) needs --out PATH: render writes the secret file Envoy watches beside the bootstrap"));
    };
    let parent = Path::new(out)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Ok(dir) = std::fs::canonicalize(parent) else {
        eprintln!("{}: no such directory", parent.display());
        return Err(ExitCode::from(1));
    };
    for (name, text) in files {
        let tmp = dir.join(format!(".{name}.tmp"));
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &path)) {
            eprintln!("{}: cannot write: {e}", path.display());
            return Err(ExitCode::from(1));
        }
    }
    gw.secret_dir = Some(dir.to_string_lossy().into_owned());
    Ok(gw)
}

/// Prints `text`, or writes it to `out`; a failed write is reported and exits 1.
fn write_out(text: &str, out: Option<&str>) -> Result<(), ExitCode> {
    match out {
        None => print!("{text}"),
        Some(out) => {
            if let Err(e) = std::fs::write(out, text) {
                eprintln!("{out}: cannot write: {e}");
                return Err(ExitCode::from(1));
            }
        }
    }
    Ok(())
}
