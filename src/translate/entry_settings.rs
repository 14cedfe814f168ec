//! What a chain entry sends its requests with besides the model (docs/behaviour.md section 7):
//! a reasoning `effort` and `max_tokens`, written in the dialect of the body the provider gets.
//!
//! | dialect | `effort` | `max_tokens` |
//! |---|---|---|
//! | OpenAI Chat | `reasoning_effort` | `max_completion_tokens` (and `max_tokens` where the body has it) |
//! | OpenAI Responses | `reasoning.effort` (the body's other `reasoning` members kept) | `max_output_tokens` |
//! | Gemini native | `generationConfig.thinkingConfig.thinkingBudget` ([`Effort::budget_tokens`]; `includeThoughts` kept) | `generationConfig.maxOutputTokens` (the body's other `generationConfig` members kept), raised by the budget when not above it |
//! | Bedrock Converse | none (refused when the configuration loads: each model's reasoning settings are its own) | `inferenceConfig.maxTokens` (the body's other `inferenceConfig` members kept) |
//! | Anthropic Messages | `thinking: {type: enabled, budget_tokens}` ([`Effort::budget_tokens`]); `temperature`, `top_p`, `top_k` removed (Anthropic refuses them with thinking); none when `tool_choice` forces a tool (refused with thinking too) or the last assistant turn called tools without a thinking block first (a tool loop begun without thinking) | `max_tokens`, raised by the budget when not above it |
//!
//! Only entries that set something pay for it: their body's top-level members are copied as
//! written, those the settings replace left out and the settings' own appended. Entries
//! without settings keep the byte-exact model rewrite (`rewrite::rewrite`) or nothing.

use crate::rewrite::decoded_eq;
use crate::translate::json::{self, Digits};
use crate::translate::Api;

/// A reasoning effort, as the OpenAI APIs name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

impl Effort {
    pub const NAMES: [&'static str; 4] = ["minimal", "low", "medium", "high"];

    pub fn parse(word: &str) -> Option<Effort> {
        match word {
            "minimal" => Some(Effort::Minimal),
            "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" => Some(Effort::High),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }

    /// Anthropic's thinking budget for this effort (at least the 1,024 tokens Anthropic
    /// requires).
    pub fn budget_tokens(self) -> u64 {
        match self {
            Effort::Minimal => 1_024,
            Effort::Low => 4_000,
            Effort::Medium => 10_000,
            Effort::High => 20_000,
        }
    }
}

/// A chain entry's request settings; the default sets nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntrySettings {
    pub effort: Option<Effort>,
    pub max_tokens: Option<u32>,
    /// Not the entry's: the attempt of a request that did not ask for a stream is streamed
    /// (`"stream": true`, and for Chat `stream_options.include_usage`) to be gathered
    /// (docs/behaviour.md section 5).
    pub stream: bool,
    /// Not the entry's either: an OpenAI Chat stream whose caller did not ask for its usage
    /// asks for it (`stream_options.include_usage: true`, merged with the caller's other
    /// `stream_options`; docs/behaviour.md section 15).
    pub usage: bool,
    /// With `usage`: the body has a top-level `stream_options`, which the ask is merged into
    /// (the body written member by member). Without one the ask is written as the body's first
    /// member, the rest of the body as it is ([`ask_usage`]).
    pub stream_options: bool,
}

impl EntrySettings {
    pub fn is_empty(&self) -> bool {
        self.effort.is_none() && self.max_tokens.is_none() && !self.stream && !self.usage
    }
}

/// Anthropic's `max_tokens` when a Messages body has none (it always should).
const MESSAGES_MAX_TOKENS: u64 = 4_096;

/// `body` with `settings` written in `dialect`; `None` when it is not a JSON object (it is
/// then sent as it is) or nothing is to be written.
pub fn apply(body: &[u8], dialect: Api, settings: &EntrySettings) -> Option<Vec<u8>> {
    if settings.is_empty() {
        return None;
    }
    let usage_only = EntrySettings {
        usage: true,
        ..EntrySettings::default()
    };
    if dialect == Api::OpenAiChat && *settings == usage_only {
        return ask_usage(body);
    }
    let (replaced, mut added): (&[&str], Vec<(&str, Vec<u8>)>) = match dialect {
        Api::OpenAiChat => chat(settings),
        // Gemini's stream is in the path (the envelope writes it), never in the body.
        Api::Gemini => gemini(body, settings),
        Api::OpenAiResponses => responses(body, settings),
        Api::AnthropicMessages => messages(body, settings),
        Api::Converse => converse(body, settings),
    };
    let mut replaced = replaced.to_vec();
    // Gemini's and Converse's stream is in the path (the envelope writes it).
    if settings.stream && !matches!(dialect, Api::Gemini | Api::Converse) {
        replaced.push("stream");
        added.push(("stream", b"true".to_vec()));
    }
    if (settings.stream || settings.usage) && dialect == Api::OpenAiChat {
        // The caller's other stream_options stay.
        let mut options = open_without(member(body, "stream_options"), &["include_usage"]);
        json::put(&mut options, &[b"\"include_usage\":true"]);
        replaced.push("stream_options");
        added.push(("stream_options", close(options)));
    }
    if added.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + 96);
    out.push(b'{');
    let mut members = json::members(body);
    while let Some((name, value)) = members.next_span() {
        let (Some(name_bytes), Some(value)) = (body.get(name.clone()), body.get(value)) else {
            return None;
        };
        let name_text = std::str::from_utf8(name_bytes).ok()?;
        if replaced.iter().any(|r| is_name(name_text, r)) {
            continue;
        }
        separate(&mut out);
        out.push(b'"');
        out.extend_from_slice(name_bytes);
        out.extend_from_slice(b"\":");
        out.extend_from_slice(value);
    }
    if !members.complete() {
        return None;
    }
    for (name, value) in added {
        separate(&mut out);
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        out.extend_from_slice(&value);
    }
    out.push(b'}');
    Some(out)
}

/// `body` (a JSON object without a top-level `stream_options`: the request scan read it)
/// asking for its stream's usage: `"stream_options":{"include_usage":true}` written as its
/// first member, every other byte as it was (no walk of the body: one copy).
fn ask_usage(body: &[u8]) -> Option<Vec<u8>> {
    let start = body.trim_ascii_start();
    let rest = start.strip_prefix(b"{")?;
    let head = body.get(..body.len() - rest.len())?;
    let comma: &[u8] = if rest.trim_ascii_start().starts_with(b"}") {
        b""
    } else {
        b","
    };
    let mut out = Vec::new();
    json::put(
        &mut out,
        &[
            head,
            br#""stream_options":{"include_usage":true}"#,
            comma,
            rest,
        ],
    );
    Some(out)
}

fn separate(out: &mut Vec<u8>) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
}

/// A member name as written, compared decoded (`"max\u005ftokens"` is `max_tokens`).
fn is_name(raw: &str, name: &str) -> bool {
    if raw.contains('\\') {
        decoded_eq(raw, name)
    } else {
        raw == name
    }
}

fn quoted(word: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(word.len() + 2);
    v.push(b'"');
    v.extend_from_slice(word.as_bytes());
    v.push(b'"');
    v
}

fn number(n: u64) -> Vec<u8> {
    Digits::of(n).get().to_vec()
}

/// The value of the top-level member `name`, as written.
fn member<'a>(body: &'a [u8], name: &str) -> Option<&'a [u8]> {
    json::members(body)
        .find(|(n, _)| std::str::from_utf8(n).is_ok_and(|n| is_name(n, name)))
        .map(|(_, v)| v)
}

fn chat(s: &EntrySettings) -> (&'static [&'static str], Vec<(&'static str, Vec<u8>)>) {
    let mut added = Vec::new();
    let mut replaced: &'static [&'static str] = &[];
    if let Some(effort) = s.effort {
        added.push(("reasoning_effort", quoted(effort.as_str())));
        replaced = &["reasoning_effort"];
    }
    if let Some(max) = s.max_tokens {
        added.push(("max_completion_tokens", number(max.into())));
        replaced = if s.effort.is_some() {
            &["reasoning_effort", "max_completion_tokens", "max_tokens"]
        } else {
            &["max_completion_tokens", "max_tokens"]
        };
    }
    (replaced, added)
}

fn responses(
    body: &[u8],
    s: &EntrySettings,
) -> (&'static [&'static str], Vec<(&'static str, Vec<u8>)>) {
    let mut added = Vec::new();
    if let Some(effort) = s.effort {
        // The caller's other reasoning settings (`summary`) stay.
        let mut reasoning = open_without(member(body, "reasoning"), &["effort"]);
        json::put(&mut reasoning, &[b"\"effort\":", &quoted(effort.as_str())]);
        added.push(("reasoning", close(reasoning)));
    }
    if let Some(max) = s.max_tokens {
        added.push(("max_output_tokens", number(max.into())));
    }
    let replaced: &'static [&'static str] = match (s.effort, s.max_tokens) {
        (Some(_), Some(_)) => &["reasoning", "max_output_tokens"],
        (Some(_), None) => &["reasoning"],
        _ => &["max_output_tokens"],
    };
    (replaced, added)
}

fn messages(
    body: &[u8],
    s: &EntrySettings,
) -> (&'static [&'static str], Vec<(&'static str, Vec<u8>)>) {
    let max = s
        .max_tokens
        .map(u64::from)
        .or_else(|| member(body, "max_tokens").and_then(json::number));
    let thinking = s
        .effort
        .filter(|_| !forces_a_tool(body) && !calls_without_thinking(body));
    let Some(effort) = thinking else {
        let Some(max) = s.max_tokens else {
            return (&[], Vec::new());
        };
        return (&["max_tokens"], vec![("max_tokens", number(max.into()))]);
    };
    let budget = effort.budget_tokens();
    let max = with_thinking(max.unwrap_or(MESSAGES_MAX_TOKENS), budget);
    let mut value = b"{\"type\":\"enabled\",\"budget_tokens\":".to_vec();
    json::put(&mut value, &[Digits::of(budget).get(), b"}"]);
    (
        &["max_tokens", "thinking", "temperature", "top_p", "top_k"],
        vec![("max_tokens", number(max)), ("thinking", value)],
    )
}

/// The output limit for an answer that may think `budget` tokens: Anthropic and Gemini count
/// thinking inside it, so a limit not above the budget is raised by it (the answer keeps the
/// room it was given; Anthropic refuses a budget not below `max_tokens`, and Gemini could spend
/// the whole limit thinking and answer nothing).
fn with_thinking(max: u64, budget: u64) -> u64 {
    if max > budget {
        max
    } else {
        max.saturating_add(budget)
    }
}

/// Converse's `inferenceConfig.maxTokens` (the caller's other `inferenceConfig` members kept).
/// `effort` is refused for Converse entries when the configuration loads (its reasoning
/// settings are each model's own), so none is written.
fn converse(
    body: &[u8],
    s: &EntrySettings,
) -> (&'static [&'static str], Vec<(&'static str, Vec<u8>)>) {
    let Some(max) = s.max_tokens else {
        return (&[], Vec::new());
    };
    let mut config = open_without(member(body, "inferenceConfig"), &["maxTokens"]);
    json::put(&mut config, &[b"\"maxTokens\":", &number(max.into())]);
    (
        &["inferenceConfig"],
        vec![("inferenceConfig", close(config))],
    )
}

/// Gemini's `generationConfig`: `maxOutputTokens`, and the effort as
/// `thinkingConfig.thinkingBudget` (the budgets Anthropic gets, [`Effort::budget_tokens`]:
/// within what every Gemini 2.5 and 3 model takes); the caller's other members of both kept.
/// With an effort, the limit (the entry's, else the caller's) is raised by the budget as
/// Anthropic's is ([`with_thinking`]): Gemini counts thinking inside `maxOutputTokens`.
fn gemini(
    body: &[u8],
    s: &EntrySettings,
) -> (&'static [&'static str], Vec<(&'static str, Vec<u8>)>) {
    if s.effort.is_none() && s.max_tokens.is_none() {
        return (&[], Vec::new());
    }
    // Google's JSON takes proto field names too (`generation_config`, `thinking_level`: the
    // google-genai SDK writes some so): either spelling is the same member.
    let old = member(body, "generationConfig").or_else(|| member(body, "generation_config"));
    const MAX: [&str; 2] = ["maxOutputTokens", "max_output_tokens"];
    const THINKING: [&str; 2] = ["thinkingConfig", "thinking_config"];
    const BOTH: [&str; 4] = [MAX[0], MAX[1], THINKING[0], THINKING[1]];
    let callers = || {
        let old = old?;
        member(old, MAX[0])
            .or_else(|| member(old, MAX[1]))
            .and_then(json::number)
    };
    let max = match s.effort {
        Some(effort) => (s.max_tokens.map(u64::from))
            .or_else(callers)
            .map(|max| with_thinking(max, effort.budget_tokens())),
        None => s.max_tokens.map(u64::from),
    };
    let dropped: &[&str] = match (s.effort, max) {
        (Some(_), Some(_)) => &BOTH,
        (Some(_), None) => &THINKING,
        _ => &MAX,
    };
    let mut config = open_without(old, dropped);
    if let Some(max) = max {
        json::put(&mut config, &[b"\"maxOutputTokens\":", &number(max), b","]);
    }
    if let Some(effort) = s.effort {
        // includeThoughts stays; the caller's own budget or level gives way.
        let old = old.and_then(|c| member(c, THINKING[0]).or_else(|| member(c, THINKING[1])));
        let budget = [
            "thinkingBudget",
            "thinking_budget",
            "thinkingLevel",
            "thinking_level",
        ];
        let mut thinking = open_without(old, &budget);
        json::put(
            &mut thinking,
            &[
                b"\"thinkingBudget\":",
                Digits::of(effort.budget_tokens()).get(),
            ],
        );
        json::put(&mut config, &[b"\"thinkingConfig\":", &close(thinking)]);
    }
    (
        &["generationConfig", "generation_config"],
        vec![("generationConfig", close(config))],
    )
}

/// `{` and the members of the object `old` (none when it is absent) but those named in
/// `dropped`, each followed by a comma: the caller appends its own and then [`close`]s it.
fn open_without(old: Option<&[u8]>, dropped: &[&str]) -> Vec<u8> {
    let mut out = b"{".to_vec();
    for (name, value) in old.into_iter().flat_map(json::members) {
        if std::str::from_utf8(name).is_ok_and(|n| dropped.iter().any(|d| is_name(n, d))) {
            continue;
        }
        json::put(&mut out, &[b"\"", name, b"\":", value, b","]);
    }
    out
}

/// The object [`open_without`] began, its last comma taken back.
fn close(mut object: Vec<u8>) -> Vec<u8> {
    if object.last() == Some(&b',') {
        object.pop();
    }
    object.push(b'}');
    object
}

/// `tool_choice` makes the model call a tool (`{"type": "any"}` or `{"type": "tool", ...}`),
/// which Anthropic refuses with thinking.
fn forces_a_tool(body: &[u8]) -> bool {
    let Some(choice) = member(body, "tool_choice") else {
        return false;
    };
    let [kind] = json::pick(choice, [b"type"]);
    kind == b"\"any\"" || kind == b"\"tool\""
}

/// The conversation's last assistant turn called tools and does not start with a thinking
/// block: a tool loop begun without thinking (by another vendor, or a caller's dialect that
/// carries none back), which Anthropic refuses to continue with thinking ("Expected `thinking`
/// or `redacted_thinking`, but found `tool_use`").
pub(crate) fn calls_without_thinking(body: &[u8]) -> bool {
    let mut last = None;
    for m in json::elements(member(body, "messages").unwrap_or_default()) {
        let [role, content] = json::pick(m, [b"role", b"content"]);
        if role == b"\"assistant\"" {
            last = Some(content);
        }
    }
    let (mut calls, mut first) = (false, None);
    for block in json::elements(last.unwrap_or_default()) {
        let [kind] = json::pick(block, [b"type"]);
        first = first.or(Some(kind));
        calls |= kind == b"\"tool_use\"";
    }
    calls && !matches!(first, Some(b"\"thinking\"" | b"\"redacted_thinking\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(body: &str, dialect: Api, effort: Option<Effort>, max: Option<u32>) -> String {
        let s = EntrySettings {
            effort,
            max_tokens: max,
            stream: false,
            usage: false,
            stream_options: false,
        };
        let out = apply(body.as_bytes(), dialect, &s).expect("edited");
        serde_json::from_slice::<serde_json::Value>(&out).expect("still JSON");
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn chat_gets_reasoning_effort_and_max_completion_tokens() {
        let body = r#"{"model": "m", "messages": [{"role":"user","content":"hi"}], "reasoning_effort": "high", "max_tokens": 9}"#;
        assert_eq!(
            edit(body, Api::OpenAiChat, Some(Effort::Low), Some(100)),
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"low","max_completion_tokens":100}"#
        );
        assert_eq!(
            edit(
                r#"{"model":"m"}"#,
                Api::OpenAiChat,
                Some(Effort::Minimal),
                None
            ),
            r#"{"model":"m","reasoning_effort":"minimal"}"#
        );
        assert_eq!(
            edit(
                r#"{"model":"m","reasoning_effort":"high"}"#,
                Api::OpenAiChat,
                None,
                Some(5)
            ),
            r#"{"model":"m","reasoning_effort":"high","max_completion_tokens":5}"#
        );
    }

    #[test]
    fn responses_get_reasoning_effort_keeping_the_summary() {
        let body = r#"{"model":"m","input":"hi","reasoning":{"effort":"high","summary":"auto"},"max_output_tokens":7}"#;
        assert_eq!(
            edit(body, Api::OpenAiResponses, Some(Effort::Medium), Some(50)),
            r#"{"model":"m","input":"hi","reasoning":{"summary":"auto","effort":"medium"},"max_output_tokens":50}"#
        );
        assert_eq!(
            edit(
                r#"{"model":"m"}"#,
                Api::OpenAiResponses,
                Some(Effort::Low),
                None
            ),
            r#"{"model":"m","reasoning":{"effort":"low"}}"#
        );
    }

    #[test]
    fn messages_get_a_thinking_budget_below_max_tokens_and_no_temperature() {
        let body = r#"{"model":"c","max_tokens":30000,"temperature":0.2,"top_k":5,"messages":[]}"#;
        assert_eq!(
            edit(body, Api::AnthropicMessages, Some(Effort::Medium), None),
            r#"{"model":"c","messages":[],"max_tokens":30000,"thinking":{"type":"enabled","budget_tokens":10000}}"#
        );
        // A max_tokens at or below the budget keeps its room above the budget.
        assert_eq!(
            edit(
                r#"{"max_tokens":1024,"thinking":{"type":"disabled"}}"#,
                Api::AnthropicMessages,
                Some(Effort::Low),
                None
            ),
            r#"{"max_tokens":5024,"thinking":{"type":"enabled","budget_tokens":4000}}"#
        );
        assert_eq!(
            edit(
                r#"{"max_tokens":64}"#,
                Api::AnthropicMessages,
                Some(Effort::High),
                Some(30000)
            ),
            r#"{"max_tokens":30000,"thinking":{"type":"enabled","budget_tokens":20000}}"#
        );
        assert_eq!(
            edit(
                r#"{"max_tokens":64}"#,
                Api::AnthropicMessages,
                None,
                Some(8)
            ),
            r#"{"max_tokens":8}"#
        );
        // A forced tool: no thinking (Anthropic refuses both), max_tokens still written.
        let forced =
            r#"{"max_tokens":64,"temperature":0,"tool_choice":{"type":"tool","name":"f"}}"#;
        assert_eq!(
            edit(forced, Api::AnthropicMessages, Some(Effort::High), Some(9)),
            r#"{"temperature":0,"tool_choice":{"type":"tool","name":"f"},"max_tokens":9}"#
        );
        let s = EntrySettings {
            effort: Some(Effort::High),
            max_tokens: None,
            stream: false,
            usage: false,
            stream_options: false,
        };
        assert_eq!(apply(forced.as_bytes(), Api::AnthropicMessages, &s), None);
    }

    #[test]
    fn a_tool_loop_begun_without_thinking_continues_without_it() {
        let turns = |assistant: &str| {
            format!(
                r#"{{"max_tokens":64,"messages":[{{"role":"user","content":"hi"}},{{"role":"assistant","content":[{assistant}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":"1"}}]}}]}}"#
            )
        };
        let call = r#"{"type":"tool_use","id":"t","name":"f","input":{}}"#;
        // Calls without thinking first (another vendor's, or a Chat caller's): none asked.
        for assistant in [
            call.to_owned(),
            format!(r#"{{"type":"text","text":"x"}},{call}"#),
        ] {
            let low = EntrySettings {
                effort: Some(Effort::Low),
                ..EntrySettings::default()
            };
            let body = turns(&assistant);
            assert_eq!(
                apply(body.as_bytes(), Api::AnthropicMessages, &low),
                None,
                "{assistant}"
            );
        }
        // The turn's thinking came back (signed or redacted), or no tool was called: thinking.
        for assistant in [
            format!(r#"{{"type":"thinking","thinking":"t","signature":"s"}},{call}"#),
            format!(r#"{{"type":"redacted_thinking","data":"d"}},{call}"#),
            r#"{"type":"text","text":"x"}"#.to_owned(),
        ] {
            let body = turns(&assistant);
            assert!(
                edit(&body, Api::AnthropicMessages, Some(Effort::Low), None)
                    .contains(r#""thinking":{"type":"enabled","budget_tokens":4000}"#),
                "{assistant}"
            );
        }
    }

    #[test]
    fn gemini_gets_a_thinking_budget_and_max_output_tokens_in_its_generation_config() {
        let body = r#"{"contents":[],"generationConfig":{"temperature":0.5,"maxOutputTokens":9,"thinkingConfig":{"includeThoughts":true,"thinkingLevel":"high"}}}"#;
        assert_eq!(
            edit(body, Api::Gemini, Some(Effort::Low), Some(300)),
            r#"{"contents":[],"generationConfig":{"temperature":0.5,"maxOutputTokens":4300,"thinkingConfig":{"includeThoughts":true,"thinkingBudget":4000}}}"#
        );
        // Gemini counts thinking inside maxOutputTokens: a limit not above the budget is
        // raised by it, as Anthropic's max_tokens is; one above it stays. Only the effort: the
        // caller's own limit is raised the same way.
        for (body, max, sent) in [
            (r#"{"contents":[]}"#, Some(2048), 6048),
            (r#"{"contents":[]}"#, Some(8192), 8192),
            (
                r#"{"contents":[],"generationConfig":{"maxOutputTokens":1000}}"#,
                None,
                5000,
            ),
        ] {
            assert_eq!(
                edit(body, Api::Gemini, Some(Effort::Low), max),
                format!(
                    r#"{{"contents":[],"generationConfig":{{"maxOutputTokens":{sent},"thinkingConfig":{{"thinkingBudget":4000}}}}}}"#
                )
            );
        }
        // The proto spellings (google-genai writes `thinking_level`) are the same members.
        assert_eq!(
            edit(
                r#"{"generation_config":{"max_output_tokens":1,"thinkingConfig":{"include_thoughts":true,"thinking_level":"HIGH"}}}"#,
                Api::Gemini,
                Some(Effort::Medium),
                Some(2)
            ),
            r#"{"generationConfig":{"maxOutputTokens":10002,"thinkingConfig":{"include_thoughts":true,"thinkingBudget":10000}}}"#
        );
        // Only max_tokens: the caller's thinking settings stay as written.
        assert_eq!(
            edit(body, Api::Gemini, None, Some(7)),
            r#"{"contents":[],"generationConfig":{"temperature":0.5,"thinkingConfig":{"includeThoughts":true,"thinkingLevel":"high"},"maxOutputTokens":7}}"#
        );
        assert_eq!(
            edit(r#"{"contents":[]}"#, Api::Gemini, Some(Effort::High), None),
            r#"{"contents":[],"generationConfig":{"thinkingConfig":{"thinkingBudget":20000}}}"#
        );
        // A gathered attempt's stream is in Gemini's path, never its body.
        let s = EntrySettings {
            stream: true,
            ..Default::default()
        };
        assert_eq!(apply(br#"{"contents":[]}"#, Api::Gemini, &s), None);
    }

    #[test]
    fn converse_gets_max_tokens_in_its_inference_config() {
        let body = r#"{"messages":[],"inferenceConfig":{"temperature":0.5,"maxTokens":9}}"#;
        assert_eq!(
            edit(body, Api::Converse, None, Some(300)),
            r#"{"messages":[],"inferenceConfig":{"temperature":0.5,"maxTokens":300}}"#
        );
        assert_eq!(
            edit(r#"{"messages":[]}"#, Api::Converse, None, Some(7)),
            r#"{"messages":[],"inferenceConfig":{"maxTokens":7}}"#
        );
        // A gathered attempt's stream is in Converse's path (/converse-stream), never its body.
        let s = EntrySettings {
            stream: true,
            ..Default::default()
        };
        assert_eq!(apply(br#"{"messages":[]}"#, Api::Converse, &s), None);
    }

    #[test]
    fn a_gathered_attempt_asks_for_a_stream_with_its_usage() {
        let s = EntrySettings {
            stream: true,
            ..Default::default()
        };
        let chat = apply(br#"{"model":"m","stream":false}"#, Api::OpenAiChat, &s).unwrap();
        assert_eq!(
            chat,
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#
        );
        let messages = apply(br#"{"max_tokens":5}"#, Api::AnthropicMessages, &s).unwrap();
        assert_eq!(messages, br#"{"max_tokens":5,"stream":true}"#);
    }

    /// The usage ask for a caller that did not ask: written as the first member of a body
    /// without `stream_options` (every other byte as it was), merged into the caller's own
    /// `stream_options` when it has one (its other members kept, its `include_usage` replaced).
    #[test]
    fn an_unasked_streams_usage_ask_is_one_member_written_first_or_merged() {
        let ask = |body: &str, stream_options: bool| {
            let s = EntrySettings {
                usage: true,
                stream_options,
                ..Default::default()
            };
            apply(body.as_bytes(), Api::OpenAiChat, &s).map(|b| String::from_utf8(b).unwrap())
        };
        let with = r#"{"stream_options":{"include_usage":true},"#;
        for (body, sent) in [
            (
                r#"{"model":"m","stream":true, "messages" : [{"content":"a,b"}] }"#,
                format!(
                    r#"{with}"model":"m","stream":true, "messages" : [{{"content":"a,b"}}] }}"#
                ),
            ),
            (
                " \n{ \"stream\":true}\n",
                format!(" \n{with} \"stream\":true}}\n"),
            ),
            (
                " { } ",
                r#" {"stream_options":{"include_usage":true} } "#.to_string(),
            ),
        ] {
            assert_eq!(ask(body, false).as_deref(), Some(sent.as_str()), "{body}");
        }
        // Not an object (the request scan lets none through): sent as it is.
        assert_eq!(ask("[{}]", false), None);
        assert_eq!(ask("x{}", false), None);
        // The caller's stream_options: include_usage false, other members, or both.
        for (options, merged) in [
            (r#"{"include_usage":false}"#, r#"{"include_usage":true}"#),
            (
                r#"{"include_obfuscation":false}"#,
                r#"{"include_obfuscation":false,"include_usage":true}"#,
            ),
            (
                r#"{ "include_usage" : false, "include_obfuscation":false }"#,
                r#"{"include_obfuscation":false,"include_usage":true}"#,
            ),
            ("null", r#"{"include_usage":true}"#),
        ] {
            let body = format!(r#"{{"model":"m","stream_options":{options},"stream":true}}"#);
            assert_eq!(
                ask(&body, true).as_deref(),
                Some(
                    format!(r#"{{"model":"m","stream":true,"stream_options":{merged}}}"#).as_str()
                ),
                "{options}"
            );
        }
    }

    #[test]
    fn escaped_names_count_and_other_bodies_are_left_alone() {
        assert_eq!(
            edit(
                r#"{"max\u005ftokens":1, "m" : [1, {"a":2}] }"#,
                Api::OpenAiChat,
                None,
                Some(3)
            ),
            r#"{"m":[1, {"a":2}],"max_completion_tokens":3}"#
        );
        let s = EntrySettings {
            effort: Some(Effort::Low),
            max_tokens: None,
            stream: false,
            usage: false,
            stream_options: false,
        };
        for body in ["[1]", "{\"a\":1", "{\"a\":1} x", ""] {
            assert_eq!(apply(body.as_bytes(), Api::OpenAiChat, &s), None, "{body}");
        }
        assert_eq!(
            apply(b"{}", Api::OpenAiChat, &EntrySettings::default()),
            None
        );
    }
}
