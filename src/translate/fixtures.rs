//! The one runner of the translation fixtures (`src/translate/fixtures/`, the layout in
//! docs/translation.md "Fixtures"): every case of every `<caller>-to-<provider>` directory is
//! translated and compared byte for byte with its expected files; `LLM_FAILOVER_BLESS=1`
//! writes them instead. A new dialect pair adds a directory (and its name to [`api`]), not
//! code. Any chunking of a fixture stream gives the same translation as the stream whole.

use super::{Api, RequestContext, StreamContext, StreamTranslator};
use serde_json::Value;
use std::path::{Path, PathBuf};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/translate/fixtures");

/// The API a pair directory's name gives (`chat`, `messages`, `responses`).
fn api(name: &str) -> Api {
    match name {
        "chat" => Api::OpenAiChat,
        "messages" => Api::AnthropicMessages,
        "responses" => Api::OpenAiResponses,
        "gemini" => Api::Gemini,
        "converse" => Api::Converse,
        _ => panic!("{ROOT}: no API is named {name:?} (translate/fixtures.rs `api`)"),
    }
}

/// One case: a directory under its pair's, with its context (the pair's `context.json`, the
/// case's own over it).
pub(crate) struct Case {
    pub dir: PathBuf,
    pub caller: Api,
    pub provider: Api,
    cx: Value,
}

impl Case {
    /// `pair/case`, for messages.
    pub fn name(&self) -> String {
        let mut parts = self.dir.iter().rev().take(2).collect::<Vec<_>>();
        parts.reverse();
        parts
            .iter()
            .map(|p| p.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/")
    }

    fn u64(&self, key: &str, default: u64) -> u64 {
        self.cx.get(key).map_or(default, |v| v.as_u64().unwrap())
    }

    fn bool(&self, key: &str, default: bool) -> bool {
        self.cx.get(key).map_or(default, |v| v.as_bool().unwrap())
    }

    /// The input `request`, `answer` or `stream`: `NAME.json` is compacted (written readably;
    /// sent as serde_json writes it), `NAME.raw.json` and `NAME.sse` are sent byte for byte.
    pub fn input(&self, name: &str) -> Option<Vec<u8>> {
        let read = |file: String| std::fs::read(self.dir.join(file)).ok();
        if let Some(json) = read(format!("{name}.json")) {
            let value: Value = serde_json::from_slice(&json)
                .unwrap_or_else(|e| panic!("{}/{name}.json: {e}", self.name()));
            return Some(serde_json::to_vec(&value).unwrap());
        }
        read(format!("{name}.raw.json")).or_else(|| read(format!("{name}.sse")))
    }

    /// The provider's request (and `check` agrees that it translates).
    pub fn request(&self, body: &[u8]) -> Vec<u8> {
        let model = self.cx["model"].as_str().unwrap();
        let cx = RequestContext {
            model,
            default_max_tokens: self.u64("default_max_tokens", 4096) as u32,
            stream: self.bool("stream", false),
        };
        assert_eq!(
            super::check(self.caller, self.provider, body),
            Ok(()),
            "{}",
            self.name()
        );
        super::request(self.caller, self.provider, body, &cx)
            .unwrap_or_else(|e| panic!("{}: {e:?}", self.name()))
    }

    /// What the caller gets for the provider's answer (`status` in the context, 200 unless
    /// said; `unreadable: true` when the 2xx body is no answer of the provider's API).
    pub fn answer(&self, body: &[u8]) -> Vec<u8> {
        let status = self.u64("status", 200) as u16;
        let out = super::response(
            self.provider,
            self.caller,
            status,
            body,
            self.u64("created", 0),
        );
        assert_eq!(
            out.unreadable,
            self.bool("unreadable", false),
            "{}: unreadable",
            self.name()
        );
        out.body
    }

    /// The caller's stream for the provider's, fed in `chunks` (the last one ends it), and
    /// whether it finished.
    pub fn stream(&self, chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let cx = StreamContext {
            created: self.u64("created", 0),
            include_usage: self.bool("include_usage", false),
        };
        let mut t = StreamTranslator::new(self.provider, self.caller, cx)
            .unwrap_or_else(|| panic!("{}: the same API", self.name()));
        let mut out = Vec::new();
        for (k, chunk) in chunks.iter().enumerate() {
            t.push(chunk, k + 1 == chunks.len(), &mut out);
        }
        (out, t.finished())
    }

    /// Every file of the case is one the runner reads or writes, an expected file only beside
    /// its input (so nothing lies there unchecked).
    fn no_stray_files(&self) {
        for entry in std::fs::read_dir(&self.dir).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            let input = match file.as_str() {
                "context.json" => continue,
                "request.out.json" => "request",
                "answer.out.json" => "answer",
                "stream.out.sse" => "stream",
                "request.json" | "request.raw.json" | "answer.json" | "answer.raw.json"
                | "stream.sse" => continue,
                _ => panic!(
                    "{}/{file}: not a fixture file (docs/translation.md \"Fixtures\")",
                    self.name()
                ),
            };
            assert!(
                self.input(input).is_some(),
                "{}/{file}: no {input} beside it",
                self.name()
            );
        }
    }

    /// The stream whole: it finishes unless the context says `finished: false`.
    fn whole_stream(&self, stream: &[u8]) -> Vec<u8> {
        let (out, finished) = self.stream(&[stream]);
        assert_eq!(
            finished,
            self.bool("finished", true),
            "{}: finished",
            self.name()
        );
        out
    }
}

fn json_file(path: &Path) -> Value {
    match std::fs::read(path) {
        Ok(text) => serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{path:?}: {e}")),
        Err(_) => Value::Object(serde_json::Map::new()),
    }
}

fn sorted_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Every case of every pair, in order.
pub(crate) fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for pair in sorted_dirs(Path::new(ROOT)) {
        let name = pair.file_name().unwrap().to_string_lossy().into_owned();
        let (caller, provider) = name
            .split_once("-to-")
            .unwrap_or_else(|| panic!("{pair:?}: not <caller>-to-<provider>"));
        let (caller, provider) = (api(caller), api(provider));
        let defaults = json_file(&pair.join("context.json"));
        for dir in sorted_dirs(&pair) {
            let mut cx = defaults.clone();
            if let Value::Object(own) = json_file(&dir.join("context.json")) {
                cx.as_object_mut().unwrap().extend(own);
            }
            cases.push(Case {
                dir,
                caller,
                provider,
                cx,
            });
        }
    }
    cases
}

/// The cases with a stream, and their streams.
pub(crate) fn streams() -> Vec<(Case, Vec<u8>)> {
    cases()
        .into_iter()
        .filter_map(|case| case.input("stream").map(|s| (case, s)))
        .collect()
}

/// `actual` against the expected file `name` of `case` (written instead when blessing); a
/// difference is pushed to `failed`.
fn expect(case: &Case, name: &str, actual: &[u8], bless: bool, failed: &mut Vec<String>) {
    let path = case.dir.join(name);
    if bless {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    match std::fs::read(&path) {
        Ok(expected) if expected == actual => {}
        Ok(expected) => failed.push(format!(
            "{}/{name} differs:\n  expected {}\n  actual   {}",
            case.name(),
            String::from_utf8_lossy(&expected),
            String::from_utf8_lossy(actual)
        )),
        Err(_) => failed.push(format!("{}/{name} is missing", case.name())),
    }
}

#[test]
fn every_fixture_translates_to_its_expected_files() {
    let bless = std::env::var_os("LLM_FAILOVER_BLESS").is_some();
    let mut failed = Vec::new();
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases under {ROOT}", cases.len());
    for case in &cases {
        let mut inputs = 0;
        if let Some(body) = case.input("request") {
            expect(
                case,
                "request.out.json",
                &case.request(&body),
                bless,
                &mut failed,
            );
            inputs += 1;
        }
        if let Some(body) = case.input("answer") {
            expect(
                case,
                "answer.out.json",
                &case.answer(&body),
                bless,
                &mut failed,
            );
            inputs += 1;
        }
        if let Some(stream) = case.input("stream") {
            let out = case.whole_stream(&stream);
            expect(case, "stream.out.sse", &out, bless, &mut failed);
            inputs += 1;
        }
        assert!(inputs > 0, "{}: no request, answer or stream", case.name());
        case.no_stray_files();
    }
    assert!(
        failed.is_empty(),
        "{}\n(if the translation is meant to change: LLM_FAILOVER_BLESS=1 cargo test -p llm-failover --lib fixtures, and review the diff)",
        failed.join("\n")
    );
}

#[test]
fn a_stream_fed_byte_by_byte_or_with_crlf_line_ends_is_the_same() {
    for (case, stream) in streams() {
        let whole = case.stream(&[&stream]);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert!(
            case.stream(&bytes) == whole,
            "{}: byte by byte",
            case.name()
        );
        let crlf = String::from_utf8(stream.clone())
            .unwrap()
            .replace('\n', "\r\n");
        assert!(
            case.stream(&[crlf.as_bytes()]) == whole,
            "{}: CRLF",
            case.name()
        );
    }
}

/// Host only: proptest is not built for wasm32.
#[cfg(not(target_arch = "wasm32"))]
mod chunking {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any chunking of a fixture stream (cut anywhere, `\n` or `\r\n` line ends) gives the
        /// same translation as the stream fed whole.
        #[test]
        fn any_chunking_gives_the_same_translation(
            which in any::<prop::sample::Index>(),
            crlf in any::<bool>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let mut streams = streams();
            let (case, stream) = streams.swap_remove(which.index(streams.len()));
            let stream = String::from_utf8(stream).unwrap();
            let stream = if crlf { stream.replace('\n', "\r\n") } else { stream };
            let bytes = stream.as_bytes();
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            at.push(0);
            at.push(bytes.len());
            at.sort_unstable();
            let chunks: Vec<&[u8]> = at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
            prop_assert_eq!(case.stream(&chunks), case.stream(&[bytes]), "{}", case.name());
        }

        /// Any chunking of a stream with thinking blocks (their text and signature deltas cut
        /// anywhere) gives the same translation as the stream whole.
        #[test]
        fn any_chunking_of_a_thinking_stream_gives_the_same_translation(
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 1..24),
        ) {
            // A Chat caller is shown no thinking (docs/translation.md "Reasoning").
            let thinking = streams().into_iter().filter(|(c, _)| {
                c.name().contains("thinking") && c.caller != Api::OpenAiChat
            });
            for (case, stream) in thinking {
                let mut at: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
                at.push(0);
                at.push(stream.len());
                at.sort_unstable();
                let chunks: Vec<&[u8]> = at.windows(2).map(|w| &stream[w[0]..w[1]]).collect();
                let (whole, finished) = case.stream(&[&stream]);
                let shown = |s: &[u8]| s.windows(14).any(|w| w == b"thinking_delta")
                    || s.windows(17).any(|w| w == b"reasoning_summary");
                prop_assert!(finished && shown(&whole), "{}: the thinking is shown", case.name());
                prop_assert_eq!(case.stream(&chunks), (whole, finished), "{}", case.name());
            }
        }
    }
}
