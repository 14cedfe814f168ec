import json
import os

from openai import OpenAI

# An OpenAI-SDK app, unchanged: when OpenAI fails, the gateway sends the request to Claude in
# Anthropic's API and hands the answer back in OpenAI's format, tool calls included.
client = OpenAI(
    base_url=os.environ.get("GATEWAY_URL", "http://127.0.0.1:10000") + "/v1",
    api_key=os.environ.get("GATEWAY_KEY", "my-gateway-key"),
)
model = os.environ.get("MODEL", "gpt-4o")
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]

raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, tools=tools)
reply = raw.parse()
# Which provider answered, and the model that did:
print(raw.headers.get("x-llm-provider"), reply.model, reply.choices[0].finish_reason)

call = reply.choices[0].message.tool_calls[0]
print(call.function.name, json.loads(call.function.arguments))
messages.append(reply.choices[0].message.model_dump(exclude_none=True))
messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 18}'})

final = client.chat.completions.create(model=model, messages=messages, tools=tools)
print(final.choices[0].message.content)
