//! The repository reads as a map (docs/internals.md): every source file of the filter crate has
//! its line in the source map, and no source file grows past 700 code lines.

// A test may unwrap, index and panic (the workspace denies these in the tools' code).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The most code lines (not blank, not a comment, before a trailing `#[cfg(test)]`) a source
/// file may have: a longer one is split into modules a newcomer can find.
const MAX_CODE_LINES: usize = 700;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Tests live beside their module (tests.rs, *_tests.rs, proptests.rs, a tests/ folder).
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name == "tests.rs"
        || name == "host_tests.rs"
        || name.ends_with("_tests.rs")
        || name == "proptests.rs"
        || rel.split('/').any(|part| part == "tests")
}

fn sources(dir: &str) -> Vec<String> {
    let base = Path::new(ROOT).join(dir);
    let mut files = Vec::new();
    rust_files(&base, &mut files);
    let mut rel: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(&base)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .filter(|r| !is_test_file(r))
        .collect();
    rel.sort();
    rel
}

/// The source map: the first fenced block of docs/internals.md.
fn source_map() -> String {
    let doc = fs::read_to_string(Path::new(ROOT).join("docs/internals.md")).unwrap();
    let start = doc
        .find("```\n")
        .expect("docs/internals.md opens with its source map")
        + 4;
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_string()
}

/// `rel` stands in the map as a path of its own (not as the tail of a longer one).
fn named(map: &str, rel: &str) -> bool {
    map.match_indices(rel).any(|(at, _)| {
        let before = map[..at].chars().next_back();
        let mut after = map[at + rel.len()..].chars();
        let (next, then) = (after.next(), after.next());
        let ends = match next {
            None => true,
            Some('.') => !then.is_some_and(char::is_alphanumeric),
            Some(c) => !(c.is_alphanumeric() || c == '_' || c == '/'),
        };
        matches!(before, None | Some(' ' | '\n' | '(' | '`' | ',')) && ends
    })
}

#[test]
fn every_source_file_has_a_line_in_the_source_map() {
    let map = source_map();
    let missing: Vec<String> = sources("src")
        .into_iter()
        .filter(|rel| !named(&map, rel))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/internals.md's source map names no line for {missing:?}: add one per file under \
         `src/` (its path from src/, then what it holds), so a newcomer finds it"
    );
}

#[test]
fn the_map_names_no_file_that_is_gone() {
    let map = source_map();
    let files = sources("src");
    let section = map.split("\ncli/").next().unwrap();
    let gone: Vec<&str> = section
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| matches!(c, ',' | ';' | ':' | '(' | ')' | '`')))
        .filter(|w| w.ends_with(".rs") && w.contains('/') && !w.contains('<'))
        .filter(|w| !files.iter().any(|f| f == w) && !Path::new(ROOT).join("src").join(w).exists())
        .collect();
    assert!(
        gone.is_empty(),
        "docs/internals.md's source map names files that are not in src/: {gone:?}"
    );
}

fn code_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]" && !l.starts_with("#[cfg(all(test"))
        .filter(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with("//")
        })
        .count()
}

#[test]
fn no_source_file_is_over_700_code_lines() {
    let mut long = Vec::new();
    for dir in ["src", "cli/src", "module/src", "native/src"] {
        for rel in sources(dir) {
            let text = fs::read_to_string(Path::new(ROOT).join(dir).join(&rel)).unwrap();
            let n = code_lines(&text);
            if n > MAX_CODE_LINES {
                long.push(format!("{dir}/{rel}: {n}"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these into modules (at most {MAX_CODE_LINES} code lines each): {long:?}"
    );
}

#[test]
fn the_checks_can_fail() {
    assert!(named(
        "  config/raw/read.rs the reader",
        "config/raw/read.rs"
    ));
    assert!(!named("  config/raw/read.rs the reader", "raw/read.rs"));
    assert!(!named("  plan.rs planning", "plan"));
    assert!(
        is_test_file("roles/tests/clouds.rs") && is_test_file("translate/chat/messages_tests.rs")
    );
    assert!(!is_test_file("translate/chat/caller.rs"));
    assert_eq!(
        code_lines("// c\n\nfn a() {}\n#[cfg(test)]\nmod tests { }\n"),
        1
    );
}

/// Text files a reader of the repository meets (the journal keeps history as it was written).
fn readable_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "node_modules" | "target" | "fixtures" | "__pycache__"
            ) {
                readable_files(&path, out);
            }
        } else if [".rs", ".md", ".py", ".sh", ".mjs", ".yaml", ".toml"]
            .iter()
            .any(|ext| name.ends_with(ext))
        {
            out.push(path);
        }
    }
}

/// `issue 12` and the like: a number from a tracker that is not in the repository.
fn cites_an_issue(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.match_indices("issue ").any(|(at, word)| {
        lower[at + word.len()..]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit())
    })
}

/// No "issue N": the tracker is not in the repository, so the docs and the code say what was
/// decided instead (docs/internals.md "Citations").
#[test]
fn nothing_cites_an_issue_number() {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    for dir in [
        "src",
        "cli",
        "module",
        "native",
        "tests",
        "scripts",
        "docs",
        "bench",
        "envoy",
        "examples",
        "integration",
        ".ci",
    ] {
        readable_files(&root.join(dir), &mut files);
    }
    for top in ["README.md", "BENCHMARKS.md", "RELIABILITY.md", "Cargo.toml"] {
        files.push(root.join(top));
    }
    let this_file = root.join("tests/repository_map.rs");
    let mut found = Vec::new();
    for file in files.iter().filter(|f| **f != this_file) {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if cites_an_issue(line) {
                let rel = file.strip_prefix(root).unwrap().display();
                found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "say what was decided instead of citing an issue:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_issue_citation_is_found() {
    assert!(cites_an_issue("a fix (issue 32)."));
    assert!(cites_an_issue("### Issue 44: Bedrock"));
    assert!(!cites_an_issue("no issue here; issues we know"));
    assert!(!cites_an_issue("the issue, 3 times"));
}
