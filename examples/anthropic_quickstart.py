import os

from anthropic import Anthropic

# The gateway takes Anthropic's Messages API too (x-api-key and anthropic-version headers).
client = Anthropic(
    base_url=os.environ.get("GATEWAY_URL", "http://127.0.0.1:10000"),
    api_key=os.environ.get("GATEWAY_KEY", "my-gateway-key"),
)
model = os.environ.get("MODEL", "claude-sonnet-4-5")

message = client.messages.create(
    model=model, max_tokens=256, messages=[{"role": "user", "content": "Say hello"}]
)
print(message.content[0].text)

with client.messages.stream(
    model=model, max_tokens=256, messages=[{"role": "user", "content": "Say hello"}]
) as stream:
    print("".join(stream.text_stream))
