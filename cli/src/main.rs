//! `llm-failover render FILE [--out PATH] [--module PATH] [--pieces DIR] [--no-env]`
//! `llm-failover validate FILE`
//!
//! Exit status: 0 done (warnings allowed), 1 the file has errors or an output could not be
//! written, 2 usage error.

use llm_failover_cli::{env_warnings, load, render, Diag};
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "\
usage: llm-failover render FILE [--out PATH] [--module PATH] [--pieces DIR] [--no-env]
       llm-failover validate FILE [--no-env]

  render    write a complete Envoy bootstrap (YAML) for the gateway described by FILE
            --out PATH     write it to PATH instead of standard output
            --module PATH  the wasm module path Envoy loads (overrides the file's module:)
            --pieces DIR   also write http_filters.yaml, route.yaml, clusters.yaml and
                           stats_config.yaml to DIR, for merging into an existing Envoy
                           configuration
  validate  check FILE and report every problem as FILE: field: problem — fix
  --no-env  ignore the environment: every ${VAR:-default} takes its default

exit status: 0 ok (warnings allowed), 1 invalid file or write failure, 2 usage error";

struct Args {
    command: String,
    file: String,
    out: Option<String>,
    module: Option<String>,
    pieces: Option<String>,
    no_env: bool,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut it = args.iter();
    let command = it.next().ok_or("missing command")?.clone();
    if command != "render" && command != "validate" {
        return Err(format!("unknown command {command:?}"));
    }
    let mut parsed = Args {
        command,
        file: String::new(),
        out: None,
        module: None,
        pieces: None,
        no_env: false,
    };
    let mut file = None;
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone().or_else(|| it.next().cloned()) {
                Some(v) if !v.is_empty() => Ok(v),
                _ => Err(format!("{name} needs a value")),
            }
        };
        let render_only = |name: &str, parsed: &Args| {
            if parsed.command == "render" {
                Ok(())
            } else {
                Err(format!("{name} is only for render"))
            }
        };
        match flag {
            "--out" | "-o" => {
                render_only(flag, &parsed)?;
                parsed.out = Some(value(flag)?);
            }
            "--module" => {
                render_only(flag, &parsed)?;
                parsed.module = Some(value(flag)?);
            }
            "--pieces" => {
                render_only(flag, &parsed)?;
                parsed.pieces = Some(value(flag)?);
            }
            "--no-env" if inline.is_none() => parsed.no_env = true,
            f if f.starts_with('-') && f != "-" => return Err(format!("unknown option {arg:?}")),
            _ if file.is_none() => file = Some(arg.clone()),
            _ => return Err(format!("unexpected argument {arg:?}: give one FILE")),
        }
    }
    parsed.file = file.ok_or("missing FILE")?;
    Ok(parsed)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some("-V" | "--version") => {
            println!("llm-failover {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let args = match parse_args(&args) {
        Ok(a) => a,
        Err(problem) => {
            eprintln!("llm-failover: {problem}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    run(&args)
}

fn print(file: &str, diags: &[Diag]) {
    for d in diags {
        eprintln!("{}", d.render(file));
    }
}

fn run(args: &Args) -> ExitCode {
    let file = args.file.as_str();
    let text = if file == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map(|_| s)
    } else {
        std::fs::read_to_string(file)
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{file}: cannot read: {e}");
            return ExitCode::from(1);
        }
    };
    let real_env = |name: &str| std::env::var(name).ok();
    let no_env = |_: &str| None;
    let env: &dyn Fn(&str) -> Option<String> = if args.no_env { &no_env } else { &real_env };
    let gw = match load(&text, env, args.module.as_deref()) {
        Ok(gw) => gw,
        Err(errors) => {
            print(file, &errors);
            let n = errors.len();
            eprintln!(
                "{file}: {n} error{}{}",
                if n == 1 { "" } else { "s" },
                if args.command == "render" {
                    " — nothing was written"
                } else {
                    ""
                }
            );
            return ExitCode::from(1);
        }
    };
    print(file, &gw.warnings);
    let source = Path::new(file)
        .file_name()
        .map_or_else(|| file.to_string(), |n| n.to_string_lossy().into_owned());

    if args.command == "validate" {
        print(file, &env_warnings(&gw, &real_env));
        let providers = gw.config.providers.len();
        let chains = gw.config.chains.len();
        eprintln!(
            "{file}: valid ({providers} provider{}, {chains} chain{}, {} attempt slot{})",
            if providers == 1 { "" } else { "s" },
            if chains == 1 { "" } else { "s" },
            render::slot_count(&gw),
            if render::slot_count(&gw) == 1 {
                ""
            } else {
                "s"
            },
        );
        return ExitCode::SUCCESS;
    }

    let text = render::bootstrap_text(&gw, &source);
    match &args.out {
        None => print!("{text}"),
        Some(out) => {
            if let Err(e) = std::fs::write(out, &text) {
                eprintln!("{out}: cannot write: {e}");
                return ExitCode::from(1);
            }
        }
    }
    if let Some(dir) = &args.pieces {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("{dir}: cannot create: {e}");
            return ExitCode::from(1);
        }
        for (name, text) in render::pieces(&gw, &source) {
            let path = Path::new(dir).join(name);
            if let Err(e) = std::fs::write(&path, text) {
                eprintln!("{}: cannot write: {e}", path.display());
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
