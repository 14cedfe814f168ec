"""What the real APIs refuse, for the mock provider's ``strict`` behaviour (stdlib only).

Translation bugs show up as requests a real provider answers with 400: a Messages request
without ``max_tokens``, an OpenAI field Anthropic does not know, a ``role: tool`` message sent to
Anthropic, a tool id outside Anthropic's pattern, a Chat tool call id over OpenAI's 40 characters
(a Responses ``call_id`` over 64), an Anthropic content block sent to OpenAI.
A Responses request (``responses``) is held to the Responses API reference: its own members
only (a Chat-shaped body's ``messages`` is an unknown parameter), its item and part types, a
``function_call_output`` answering an earlier ``function_call``, function tools written flat.
``problem(api, headers, body)`` returns the first such problem as ``(param, message)`` with the
wording of the API's own answer, or ``None`` when the request is one the API takes. The rules
are the published request schemas (Anthropic Messages and OpenAI Chat Completions references),
trimmed to what a translation can get wrong; they are no substitute for the real APIs.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

# Anthropic Messages: top-level fields it takes (every other one: "Extra inputs are not
# permitted").
MESSAGES_FIELDS = {
    "model", "messages", "max_tokens", "metadata", "stop_sequences", "stream", "system",
    "temperature", "top_k", "top_p", "tools", "tool_choice", "thinking", "service_tier",
    "container", "mcp_servers", "context_management", "cache_control", "output_config",
    "inference_geo", "speed", "diagnostics", "user_profile_id", "workspace_id",
}
MESSAGES_BLOCKS = {"text", "image", "document", "tool_use", "tool_result", "thinking",
                   "redacted_thinking", "search_result", "server_tool_use",
                   "web_search_tool_result"}
IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}

# OpenAI Chat Completions: top-level fields it takes ("Unrecognized request argument
# supplied: X" otherwise).
CHAT_FIELDS = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
    "stream", "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
    "logprobs", "top_logprobs", "user", "response_format", "seed", "tools", "tool_choice",
    "parallel_tool_calls", "functions", "function_call", "service_tier", "store", "metadata",
    "reasoning_effort", "modalities", "audio", "prediction", "web_search_options",
    "safety_identifier", "prompt_cache_key", "verbosity",
}
CHAT_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
CHAT_PARTS = {"text", "image_url", "input_audio", "file", "refusal"}


def problem(api: str, headers: list[tuple[str, str]], body: bytes,
            answering: bool = True) -> tuple[str, str] | None:
    """The first reason the API (``messages``, ``chat`` or ``responses``) refuses this
    request, or None. ``answering``: the mock is to serve it (not answer an outage), so a
    reasoning item's encrypted content is checked too (the model continues from it)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ("body", "There was an error parsing the body of your request: invalid JSON")
    if not isinstance(doc, dict):
        return ("body", "the request body must be a JSON object")
    if api == "messages":
        if not any(k.lower() == "anthropic-version" for k, _ in headers):
            return ("anthropic-version", "anthropic-version: header is required")
        return _messages(doc)
    if api == "chat":
        return _chat(doc)
    if api == "responses":
        return _responses(doc, answering)
    return None


# ------------------------------------------------------------------------ Anthropic Messages
def _messages(doc: dict) -> tuple[str, str] | None:
    for k in doc:
        if k not in MESSAGES_FIELDS:
            return (k, f"{k}: Extra inputs are not permitted")
    if "max_tokens" not in doc:
        return ("max_tokens", "max_tokens: Field required")
    if not isinstance(doc["max_tokens"], int) or doc["max_tokens"] < 1:
        return ("max_tokens", "max_tokens: Input should be a valid integer greater than 0")
    t = doc.get("temperature")
    if t is not None and not (isinstance(t, (int, float)) and 0 <= t <= 1):
        return ("temperature", "temperature: Input should be less than or equal to 1")
    stops = doc.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list)
                                  and all(isinstance(s, str) for s in stops)):
        return ("stop_sequences", "stop_sequences: Input should be a valid list of strings")
    system = doc.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list) or any(
                not isinstance(b, dict) or b.get("type") != "text" for b in system):
            return ("system", "system: Input should be a valid string or a list of text blocks")
    thinking = doc.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        # Anthropic's extended-thinking rules (its docs, "Extended thinking").
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return ("thinking", "thinking.enabled.budget_tokens: Input should be greater than "
                                "or equal to 1024")
        if budget >= doc["max_tokens"]:
            return ("max_tokens", "`max_tokens` must be greater than `thinking.budget_tokens`")
        if t is not None and t != 1 or "top_k" in doc:
            return ("temperature", "`temperature` may only be set to 1 when thinking is "
                                   "enabled")
        if isinstance(doc.get("tool_choice"), dict) and \
                doc["tool_choice"].get("type") in ("any", "tool"):
            return ("tool_choice", "Thinking may not be enabled when tool_choice forces tool "
                                   "use.")
        bad = _tool_loop_without_thinking(doc.get("messages"))
        if bad:
            return bad
    tc = doc.get("tool_choice")
    if tc is not None and not (isinstance(tc, dict)
                               and tc.get("type") in ("auto", "any", "tool", "none")):
        return ("tool_choice", "tool_choice: Input should be a valid dictionary or object "
                               "with type auto, any, tool or none")
    for i, tool in enumerate(doc.get("tools") or []):
        if not isinstance(tool, dict) or "name" not in tool or (
                "type" not in tool and not isinstance(tool.get("input_schema"), dict)):
            return (f"tools.{i}", f"tools.{i}.custom.input_schema: Field required")
    msgs = doc.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return ("messages", "messages: Field required (a non-empty list)")
    pending: set[str] = set()  # tool_use ids the next user turn must answer
    for i, m in enumerate(msgs):
        where = f"messages.{i}"
        if not isinstance(m, dict):
            return (where, f"{where}: Input should be a valid dictionary")
        role = m.get("role")
        if role not in ("user", "assistant"):
            if role == "system":
                return (f"{where}.role", 'messages: Unexpected role "system". The Messages API '
                        'accepts a top-level `system` parameter, not "system" as an input '
                        'message role.')
            return (f"{where}.role", f"{where}.role: Input should be 'user' or 'assistant'")
        extra = set(m) - {"role", "content"}
        if extra:
            name = sorted(extra)[0]
            return (f"{where}.{name}", f"{where}.{name}: Extra inputs are not permitted")
        content = m.get("content")
        blocks = [] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            return (f"{where}.content", f"{where}.content: Input should be a valid list")
        answered: set[str] = set()
        used: set[str] = set()
        for j, b in enumerate(blocks):
            bad = _messages_block(b, f"{where}.content.{j}", role)
            if bad:
                return bad
            if b["type"] == "tool_result":
                answered.add(b["tool_use_id"])
            if b["type"] == "tool_use":
                used.add(b["id"])
        if pending and not pending <= answered:
            return (where, f"{where}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(sorted(pending - answered))}. Each "
                    "`tool_use` block must have a corresponding `tool_result` block in the "
                    "next message.")
        stray = answered - pending
        if stray:
            return (where, f"{where}.content: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {sorted(stray)[0]}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message.")
        pending = used
    return None


def signature(thinking: str) -> str:
    """The signature the mock gives a thinking block of this text (base64, as Anthropic's),
    and takes back only with that text."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def _tool_loop_without_thinking(msgs: Any) -> tuple[str, str] | None:
    """With thinking enabled, Anthropic continues a tool loop only from an assistant turn that
    starts with its thinking block (its docs, "Extended thinking with tool use")."""
    last = [(i, m) for i, m in enumerate(msgs or []) if isinstance(m, dict)
            and m.get("role") == "assistant" and isinstance(m.get("content"), list)]
    if not last:
        return None
    i, m = last[-1]
    blocks = [b for b in m["content"] if isinstance(b, dict)]
    if not any(b.get("type") == "tool_use" for b in blocks):
        return None
    first = blocks[0].get("type") if blocks else None
    if first in ("thinking", "redacted_thinking"):
        return None
    return (f"messages.{i}.content.0.type", f"messages.{i}.content.0.type: Expected "
            f"`thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is "
            "enabled, a final `assistant` message must start with a thinking block (preceeding "
            "the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
            "thinking blocks from previous turns.")


def _messages_block(b: Any, where: str, role: str) -> tuple[str, str] | None:
    if not isinstance(b, dict) or b.get("type") not in MESSAGES_BLOCKS:
        tag = b.get("type") if isinstance(b, dict) else None
        return (where, f"{where}: Input tag '{tag}' found using 'type' does not match any of "
                "the expected tags")
    kind = b["type"]
    if kind == "text" and not isinstance(b.get("text"), str):
        return (f"{where}.text", f"{where}.text.text: Field required")
    if kind == "thinking":
        if role != "assistant" or not isinstance(b.get("thinking"), str):
            return (where, f"{where}.thinking: thinking blocks are the assistant's")
        if b.get("signature") != signature(b["thinking"]):
            return (f"{where}.signature", f"{where}: Invalid `signature` in `thinking` block")
    if kind == "redacted_thinking" and not isinstance(b.get("data"), str):
        return (f"{where}.data", f"{where}.redacted_thinking.data: Field required")
    if kind == "image":
        src = b.get("source")
        ok = isinstance(src, dict) and (
            (src.get("type") == "base64" and src.get("media_type") in IMAGE_TYPES
             and isinstance(src.get("data"), str) and src["data"])
            or (src.get("type") == "url" and isinstance(src.get("url"), str)))
        if not ok:
            return (f"{where}.source", f"{where}.image.source: Input should be a base64 or url "
                    "source with a supported media_type")
        if role != "user":
            return (where, f"{where}: images are only allowed in user messages")
    if kind == "tool_use":
        if role != "assistant":
            return (where, f"{where}: tool_use blocks are only allowed in assistant messages")
        if not isinstance(b.get("id"), str) or not TOOL_ID.match(b["id"]):
            return (f"{where}.id", f"{where}.tool_use.id: String should match pattern "
                    "'^[a-zA-Z0-9_-]+$'")
        if not isinstance(b.get("input"), dict):
            return (f"{where}.input", f"{where}.tool_use.input: Input should be a valid "
                    "dictionary")
        if not isinstance(b.get("name"), str):
            return (f"{where}.name", f"{where}.tool_use.name: Field required")
    if kind == "tool_result":
        if role != "user":
            return (where, f"{where}: tool_result blocks are only allowed in user messages")
        tid = b.get("tool_use_id")
        if not isinstance(tid, str) or not TOOL_ID.match(tid):
            return (f"{where}.tool_use_id", f"{where}.tool_result.tool_use_id: String should "
                    "match pattern '^[a-zA-Z0-9_-]+$'")
        inner = b.get("content")
        if inner is not None and not isinstance(inner, str):
            if not isinstance(inner, list) or any(
                    not isinstance(x, dict) or x.get("type") not in ("text", "image")
                    for x in inner):
                return (f"{where}.content", f"{where}.tool_result.content: Input should be a "
                        "string or a list of text and image blocks")
    return None


# ----------------------------------------------------------------------- OpenAI Chat Completions
def _chat(doc: dict) -> tuple[str, str] | None:
    for k in doc:
        if k not in CHAT_FIELDS:
            return (k, f"Unrecognized request argument supplied: {k}")
    if "stream_options" in doc and doc.get("stream") is not True:
        return ("stream_options", "The 'stream_options' parameter is only allowed when "
                "'stream' is enabled.")
    t = doc.get("temperature")
    if t is not None and not (isinstance(t, (int, float)) and 0 <= t <= 2):
        return ("temperature", f"Invalid 'temperature': decimal above maximum value. Expected a "
                f"value <= 2, but got {t} instead.")
    stop = doc.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop)):
        return ("stop", "Invalid 'stop': expected a string or an array of at most 4 strings.")
    tc = doc.get("tool_choice")
    if tc is not None and tc not in ("none", "auto", "required") and not (
            isinstance(tc, dict) and tc.get("type") == "function"
            and isinstance(tc.get("function"), dict)):
        return ("tool_choice", "Invalid value for 'tool_choice': expected 'none', 'auto', "
                "'required' or a named function.")
    for i, tool in enumerate(doc.get("tools") or []):
        if not (isinstance(tool, dict) and tool.get("type") == "function"
                and isinstance(tool.get("function"), dict)
                and isinstance(tool["function"].get("name"), str)):
            return (f"tools[{i}]", f"Missing required parameter: 'tools[{i}].function'.")
    msgs = doc.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return ("messages", "Missing required parameter: 'messages'.")
    calls: set[str] = set()  # ids of the tool calls the last assistant message made
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
            role = m.get("role") if isinstance(m, dict) else None
            return (f"{where}.role", f"Invalid value: '{role}'. Supported values are: "
                    "'system', 'assistant', 'user', 'function', 'tool', and 'developer'.")
        role = m["role"]
        content = m.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                bad = _chat_part(part, f"{where}.content[{j}]")
                if bad:
                    return bad
        elif content is not None and not isinstance(content, str):
            return (f"{where}.content", f"Invalid type for '{where}.content': expected one of "
                    "a string or array of objects.")
        if role == "tool":
            if m.get("tool_call_id") not in calls:
                return (where, "Invalid parameter: messages with role 'tool' must be a response "
                        "to a preceeding message with 'tool_calls'.")
            continue
        calls = set()
        if role == "assistant":
            for j, call in enumerate(m.get("tool_calls") or []):
                w = f"{where}.tool_calls[{j}]"
                if not (isinstance(call, dict) and isinstance(call.get("id"), str)
                        and call.get("type") == "function"
                        and isinstance(call.get("function"), dict)
                        and isinstance(call["function"].get("name"), str)):
                    return (w, f"Missing required parameter: '{w}.function'.")
                if not isinstance(call["function"].get("arguments"), str):
                    return (f"{w}.function.arguments", f"Invalid type for "
                            f"'{w}.function.arguments': expected a string, but got an object "
                            "instead.")
                if len(call["id"]) > 40:
                    return (f"{w}.id", _too_long(f"{w}.id", call["id"], 40))
                calls.add(call["id"])
        elif content is None:
            return (f"{where}.content", f"Missing required parameter: '{where}.content'.")
    return None


def _too_long(where: str, value: str, limit: int) -> str:
    return (f"Invalid '{where}': string too long. Expected a string with maximum length "
            f"{limit}, but got a string with length {len(value)} instead.")


def _chat_part(part: Any, where: str) -> tuple[str, str] | None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in CHAT_PARTS:
        return (f"{where}.type", f"Invalid value: '{kind}'. Supported values are: 'text', "
                "'image_url', 'input_audio', 'refusal', 'audio', and 'file'.")
    if kind == "text" and not isinstance(part.get("text"), str):
        return (f"{where}.text", f"Missing required parameter: '{where}.text'.")
    if kind == "image_url":
        img = part.get("image_url")
        if not (isinstance(img, dict) and isinstance(img.get("url"), str)):
            return (f"{where}.image_url", f"Missing required parameter: "
                    f"'{where}.image_url.url'.")
    return None


# ------------------------------------------------------------------------ OpenAI Responses
RESPONSES_FIELDS = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools",
    "tool_choice", "parallel_tool_calls", "user", "safety_identifier", "store", "stream",
    "stream_options", "metadata", "reasoning", "text", "truncation", "include",
    "previous_response_id", "conversation", "background", "prompt", "prompt_cache_key",
    "service_tier", "top_logprobs", "max_tool_calls",
}
RESPONSES_PARTS = {
    "user": {"input_text", "input_image", "input_file", "input_audio"},
    "system": {"input_text"}, "developer": {"input_text"},
    "assistant": {"output_text", "refusal"},
}
PART_FIELDS = {"input_text": {"type", "text"}, "output_text": {"type", "text", "annotations",
               "logprobs"}, "refusal": {"type", "refusal"},
               "input_image": {"type", "image_url", "file_id", "detail"},
               "input_file": {"type", "file_id", "file_data", "file_url", "filename"},
               "input_audio": {"type", "input_audio"}}
ITEM_FIELDS = {
    "message": {"type", "role", "content", "id", "status"},
    "function_call": {"type", "call_id", "name", "arguments", "id", "status"},
    "function_call_output": {"type", "call_id", "output", "id", "status"},
    "reasoning": {"type", "id", "summary", "content", "encrypted_content", "status"},
    "item_reference": {"type", "id"},
}
TOOL_FIELDS = {"type", "name", "description", "parameters", "strict"}


def encrypted(item_id: str) -> str:
    """The `encrypted_content` the mock gives its reasoning item `item_id` (opaque, as
    OpenAI's; checked when it comes back)."""
    return "gAAAAB" + base64.b64encode(hashlib.sha256(b"enc:" + item_id.encode()).digest()).decode()


def _reasoning(doc: dict, items: list, i: int, where: str,
               answering: bool) -> tuple[str, str] | None:
    """A reasoning input item as the Responses API takes one: an `id`, a `summary` of
    `summary_text` parts, followed by the output item it came with, and (no state kept, `store:
    false`) the `encrypted_content` OpenAI gave it."""
    item = items[i]
    rid = item.get("id")
    if not isinstance(rid, str):
        return (f"{where}id", f"Missing required parameter: '{where}id'.")
    summary = item.get("summary")
    if not isinstance(summary, list) or not all(
            isinstance(p, dict) and p.get("type") == "summary_text"
            and isinstance(p.get("text"), str) for p in summary):
        return (f"{where}summary", f"Missing required parameter: '{where}summary'.")
    after = items[i + 1] if i + 1 < len(items) else None
    if not (isinstance(after, dict) and (after.get("type") == "function_call" or (
            after.get("type", "message") == "message" and after.get("role") == "assistant"))):
        return (f"input[{i}]", f"Item '{rid}' of type 'reasoning' was provided without its "
                               "required following item.")
    content = item.get("encrypted_content")
    if content is None and doc.get("store") is False:
        return (f"{where}id", f"Item with id '{rid}' not found. Items are not persisted when "
                "`store` is set to false. Try again with `store` set to true, or remove this "
                "item from your input.")
    if answering and content is not None and content != encrypted(rid):
        return (f"{where}encrypted_content",
                f"The encrypted content for item {rid} could not be verified.")
    return None


def _unknown(where: str, k: str) -> tuple[str, str]:
    return (f"{where}{k}", f"Unknown parameter: '{where}{k}'.")


def _responses(doc: dict, answering: bool = True) -> tuple[str, str] | None:
    for k in doc:
        if k not in RESPONSES_FIELDS:
            return _unknown("", k)
    if "model" not in doc:
        return ("model", "Missing required parameter: 'model'.")
    m = doc.get("max_output_tokens")
    if m is not None and not (isinstance(m, int) and m >= 16):
        return ("max_output_tokens", "Invalid 'max_output_tokens': integer below minimum "
                                     "value. Expected a value >= 16.")
    for k in ("instructions", "user", "safety_identifier"):
        if doc.get(k) is not None and not isinstance(doc[k], str):
            return (k, f"Invalid type for '{k}': expected a string.")
    for i, tool in enumerate(doc.get("tools") or []):
        where = f"tools[{i}]."
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue  # built-in tools: not checked here
        for k in tool:
            if k not in TOOL_FIELDS:
                return _unknown(where, k)
        if not isinstance(tool.get("name"), str):
            return (f"{where}name", f"Missing required parameter: '{where}name'.")
    tc = doc.get("tool_choice")
    if tc is not None and tc not in ("auto", "none", "required") and not (
            isinstance(tc, dict) and tc.get("type") == "function"
            and isinstance(tc.get("name"), str) and set(tc) == {"type", "name"}):
        return ("tool_choice", "Invalid value for 'tool_choice'.")
    items = doc.get("input")
    if isinstance(items, str):
        return None
    if not isinstance(items, list) or not items:
        return ("input", "Missing required parameter: 'input'.")
    calls: set[str] = set()
    for i, item in enumerate(items):
        where = f"input[{i}]."
        if not isinstance(item, dict):
            return (f"input[{i}]", f"Invalid type for 'input[{i}]': expected an object.")
        kind = item.get("type", "message")
        if kind not in ITEM_FIELDS:
            return (f"{where}type", f"Invalid value: '{kind}'.")
        for k in item:
            if k not in ITEM_FIELDS[kind]:
                return _unknown(where, k)
        if kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                return (f"{where}arguments", f"Missing required parameter: '{where}call_id', "
                                             "'name' and 'arguments' are strings.")
            if len(item["call_id"]) > 64:
                return (f"{where}call_id", _too_long(f"{where}call_id", item["call_id"], 64))
            calls.add(item["call_id"])
        elif kind == "reasoning":
            bad = _reasoning(doc, items, i, where, answering)
            if bad:
                return bad
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                return (f"{where}call_id", "No tool call found for function call output with "
                                           f"call_id {item.get('call_id')}.")
            if not isinstance(item.get("output"), (str, list)):
                return (f"{where}output", f"Invalid type for '{where}output'.")
        elif kind == "message":
            role = item.get("role")
            if role not in RESPONSES_PARTS:
                return (f"{where}role", f"Invalid value: '{role}'. Supported values are: "
                                        "'assistant', 'system', 'developer', and 'user'.")
            content = item.get("content")
            if isinstance(content, str):
                continue
            if not isinstance(content, list):
                return (f"{where}content", f"Missing required parameter: '{where}content'.")
            for j, part in enumerate(content):
                at = f"{where}content[{j}]."
                ptype = part.get("type") if isinstance(part, dict) else None
                if ptype not in RESPONSES_PARTS[role]:
                    allowed = " and ".join(f"'{t}'" for t in sorted(RESPONSES_PARTS[role]))
                    return (f"{at}type", f"Invalid value: '{ptype}'. Supported values are: "
                                         f"{allowed}.")
                for k in part:
                    if k not in PART_FIELDS[ptype]:
                        return _unknown(at, k)
    return None
