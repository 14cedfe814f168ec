import json
import os

from openai import OpenAI

# An app on OpenAI's Responses API, unchanged: when OpenAI fails, the gateway sends the request
# to Claude in Anthropic's API and hands the answer back as a Response (streams as Responses'
# typed events), function calls included.
client = OpenAI(
    base_url=os.environ.get("GATEWAY_URL", "http://127.0.0.1:10000") + "/v1",
    api_key=os.environ.get("GATEWAY_KEY", "my-gateway-key"),
)
model = os.environ.get("MODEL", "gpt-4o")
tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]
items = [{"role": "user", "content": "What is the weather in Paris?"}]

raw = client.responses.with_raw_response.create(model=model, input=items, tools=tools)
response = raw.parse()
# Which provider answered, and the model that did:
print(raw.headers.get("x-llm-provider"), response.model, response.status)

call = next(item for item in response.output if item.type == "function_call")
print(call.name, json.loads(call.arguments))
items += [{"type": "function_call", "call_id": call.call_id, "name": call.name,
           "arguments": call.arguments},
          {"type": "function_call_output", "call_id": call.call_id, "output": '{"celsius": 18}'}]

# Streamed, with the SDK's helper: the text as it comes, then the whole response.
with client.responses.stream(model=model, input=items, tools=tools) as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            print(event.delta, end="")
    print()
    print(stream.get_final_response().usage.total_tokens, "tokens")
