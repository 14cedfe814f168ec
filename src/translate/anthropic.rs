//! Anthropic Messages on the wire: the request and the (not streamed) answer, as far as
//! translation reads or writes them (the same conventions as `super::openai`).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::common::StrOr;

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Request<'a> {
    #[serde(borrow)]
    pub model: Cow<'a, str>,
    /// Required by Messages; a caller's request without it is passed on without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub system: Option<StrOr<'a, Vec<Block<'a>>>>,
    #[serde(borrow)]
    pub messages: Vec<Message<'a>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<Cow<'a, str>>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool<'a>>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice<'a>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,

    // Read only: what a Chat provider cannot carry (see messages_to_chat::rules).
    #[serde(borrow, skip_serializing)]
    pub mcp_servers: Option<&'a RawValue>,
    #[serde(borrow, skip_serializing)]
    pub container: Option<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Metadata<'a> {
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize, Serialize)]
pub struct Message<'a> {
    #[serde(borrow)]
    pub role: Cow<'a, str>,
    #[serde(borrow)]
    pub content: StrOr<'a, Vec<Block<'a>>>,
}

/// A content block, every type in one flat shape: `text`, `image` (`source`), `tool_use`
/// (`id`, `name`, `input`), `tool_result` (`tool_use_id`, `content`, `is_error`); other types
/// are only read, to drop or refuse them. `cache_control` and `citations` are dropped.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Block<'a> {
    #[serde(borrow, rename = "type")]
    pub kind: Cow<'a, str>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub text: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source<'a>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub id: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub name: Option<Cow<'a, str>>,
    /// A tool call's input object (copied when read: it may be written back as OpenAI's
    /// `arguments` text, or built from that text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Cow<'a, RawValue>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub content: Option<StrOr<'a, Vec<Block<'a>>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
}

/// An image's source: `base64` (`media_type`, `data`) or `url` (`file`, a Files API id, is
/// only read, to refuse it).
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Source<'a> {
    #[serde(borrow, rename = "type")]
    pub kind: Cow<'a, str>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub data: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub url: Option<Cow<'a, str>>,
}

/// A tool: a client tool has no `type` (or `custom`); server tools (`web_search_20250305`,
/// `bash_20250124`...) have a versioned type.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Tool<'a> {
    #[serde(borrow, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub description: Option<Cow<'a, str>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<&'a RawValue>,
}

/// `auto`, `any`, `tool` (`name`) or `none`.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct ToolChoice<'a> {
    #[serde(borrow, rename = "type")]
    pub kind: Cow<'a, str>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub name: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_parallel_tool_use: Option<bool>,
}

/// A whole answer.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Response<'a> {
    #[serde(borrow, default)]
    pub id: Cow<'a, str>,
    #[serde(borrow, rename = "type", default)]
    pub kind: Cow<'a, str>,
    #[serde(borrow, default)]
    pub role: Cow<'a, str>,
    #[serde(borrow, default)]
    pub model: Cow<'a, str>,
    #[serde(borrow)]
    pub content: Vec<Block<'a>>,
    #[serde(borrow, default)]
    pub stop_reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub stop_sequence: Option<Cow<'a, str>>,
    #[serde(default)]
    pub usage: Usage,
}

/// The cache counts may be `null` (or absent) in answers; they are always written.
#[derive(Debug, Default, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: u64,
}

impl Usage {
    pub fn common(&self) -> super::common::Usage {
        super::common::Usage {
            input: self.input_tokens,
            output: self.output_tokens,
            cache_read: self.cache_read_input_tokens.unwrap_or(0),
            cache_creation: self.cache_creation_input_tokens.unwrap_or(0),
        }
    }

    pub fn from_common(u: super::common::Usage) -> Usage {
        Usage {
            input_tokens: u.input,
            cache_creation_input_tokens: Some(u.cache_creation),
            cache_read_input_tokens: Some(u.cache_read),
            output_tokens: u.output,
        }
    }
}
