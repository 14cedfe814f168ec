import os

from openai import OpenAI

# Point the SDK at the gateway. The key is your gateway key (the gateway removes it before any
# provider sees it); the providers' own keys live in the gateway's configuration.
client = OpenAI(
    base_url=os.environ.get("GATEWAY_URL", "http://127.0.0.1:10000") + "/v1",
    api_key=os.environ.get("GATEWAY_KEY", "my-gateway-key"),
)
model = os.environ.get("MODEL", "gpt-4o")

reply = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Say hello"}]
)
print(reply.choices[0].message.content)

# Streamed: a fallback happens before the first byte, so a stream is never spliced.
stream = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Say hello"}], stream=True
)
print("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))

# Which provider answered, and after how many attempts:
raw = client.chat.completions.with_raw_response.create(
    model=model, messages=[{"role": "user", "content": "Say hello"}]
)
print(raw.headers.get("x-llm-provider"), raw.headers.get("x-llm-attempts"))

# The models the gateway's chains serve (answered by the gateway itself):
print([m.id for m in client.models.list()])
