//! OpenAI Chat Completions on the wire: the request and the (not streamed) answer, as far as
//! translation reads or writes them. One type per shape serves both directions (read from a
//! caller or provider, written for the other); what is only read (to refuse or drop it) is
//! never written.
//!
//! Strings borrow from the body unless they hold escapes; numbers the translation does not
//! compute (sampling parameters) and JSON it does not look into (tool schemas) stay
//! [`RawValue`]s, copied through verbatim: no float is parsed or printed, and the module links
//! no `serde_json::Value` (smaller than a tree of values: see `super`'s doc).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::common::StrOr;

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Request<'a> {
    #[serde(borrow)]
    pub model: Cow<'a, str>,
    #[serde(borrow)]
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StrOr<'a, Vec<Cow<'a, str>>>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool<'a>>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<StrOr<'a, NamedToolChoice<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub user: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,

    // Read only: what a Messages provider cannot carry (see chat_to_messages::rules).
    #[serde(skip_serializing)]
    pub n: Option<u64>,
    #[serde(skip_serializing)]
    pub logprobs: Option<bool>,
    #[serde(borrow, skip_serializing)]
    pub response_format: Option<TypeOnly<'a>>,
    #[serde(borrow, skip_serializing)]
    pub audio: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing)]
    pub modalities: Option<Vec<Cow<'a, str>>>,
    #[serde(borrow, skip_serializing)]
    pub logit_bias: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing)]
    pub functions: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing)]
    pub function_call: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing)]
    pub web_search_options: Option<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "is_false")]
    pub include_usage: bool,
}

/// An object read only for its `type`.
#[derive(Debug, Deserialize)]
pub struct TypeOnly<'a> {
    #[serde(borrow, rename = "type")]
    pub kind: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Message<'a> {
    #[serde(borrow)]
    pub role: Cow<'a, str>,
    /// A string or parts; `null` (or absent) on an assistant turn that only calls tools.
    #[serde(borrow, default)]
    pub content: Option<StrOr<'a, Vec<Part<'a>>>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall<'a>>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Cow<'a, str>>,
}

/// A content part: `text`, `image_url` or `refusal` (others are only read, to refuse them).
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Part<'a> {
    #[serde(borrow, rename = "type")]
    pub kind: Cow<'a, str>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub text: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<ImageUrl<'a>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Cow<'a, str>>,
}

/// `detail` has no Messages counterpart: dropped.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct ImageUrl<'a> {
    #[serde(borrow)]
    pub url: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct ToolCall<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow, rename = "type", default = "function")]
    pub kind: Cow<'a, str>,
    /// Absent from the calls of custom tools (refused by `type`).
    #[serde(borrow, default)]
    pub function: FunctionCall<'a>,
}

fn function() -> Cow<'static, str> {
    Cow::Borrowed("function")
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct FunctionCall<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    /// JSON text of the arguments (a string holding JSON, not an object).
    #[serde(borrow, default)]
    pub arguments: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Tool<'a> {
    #[serde(borrow, rename = "type")]
    pub kind: Cow<'a, str>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionDef<'a>>,
}

/// `strict` is dropped towards Messages.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct FunctionDef<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub description: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<&'a RawValue>,
}

/// `{"type": "function", "function": {"name"}}` (the string forms are `auto`, `none`,
/// `required`).
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct NamedToolChoice<'a> {
    #[serde(borrow, rename = "type")]
    pub kind: Cow<'a, str>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub function: Option<Name<'a>>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Name<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
}

/// A whole answer.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Response<'a> {
    #[serde(borrow, default)]
    pub id: Cow<'a, str>,
    #[serde(borrow, default)]
    pub object: Cow<'a, str>,
    #[serde(default)]
    pub created: u64,
    #[serde(borrow, default)]
    pub model: Cow<'a, str>,
    #[serde(borrow)]
    pub choices: Vec<Choice<'a>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Choice<'a> {
    #[serde(default)]
    pub index: u64,
    #[serde(borrow)]
    pub message: Message<'a>,
    /// Always null when written (Messages has no log probabilities).
    #[serde(skip_deserializing)]
    pub logprobs: Option<()>,
    #[serde(borrow, default)]
    pub finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `cache_creation_input_tokens` is not OpenAI's (it reports no cache writes): written when an
/// Anthropic provider reported some, and read back, so nothing counted is lost.
#[derive(Debug, Default, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
}

impl Usage {
    pub fn common(&self) -> super::common::Usage {
        let details = self.prompt_tokens_details.unwrap_or_default();
        super::common::Usage::from_openai(
            self.prompt_tokens,
            self.completion_tokens,
            details.cached_tokens,
            details.cache_creation_input_tokens.unwrap_or(0),
        )
    }

    pub fn from_common(u: super::common::Usage) -> Usage {
        Usage {
            prompt_tokens: u.prompt_tokens(),
            completion_tokens: u.output,
            total_tokens: u.total_tokens(),
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: u.cache_read,
                cache_creation_input_tokens: (u.cache_creation > 0).then_some(u.cache_creation),
            }),
        }
    }
}
