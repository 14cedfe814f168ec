import OpenAI from "openai";

// Point the SDK at the gateway. The key is your gateway key (the gateway removes it before any
// provider sees it); the providers' own keys live in the gateway's configuration.
const client = new OpenAI({
  baseURL: (process.env.GATEWAY_URL ?? "http://127.0.0.1:10000") + "/v1",
  apiKey: process.env.GATEWAY_KEY ?? "my-gateway-key",
});
const model = process.env.MODEL ?? "gpt-4o";

const reply = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Say hello" }],
});
console.log(reply.choices[0].message.content);

// Streamed: a fallback happens before the first byte, so a stream is never spliced.
const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Say hello" }],
  stream: true,
});
let text = "";
for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
console.log(text);

// Which provider answered, and after how many attempts:
const { response } = await client.chat.completions
  .create({ model, messages: [{ role: "user", content: "Say hello" }] })
  .withResponse();
console.log(response.headers.get("x-llm-provider"), response.headers.get("x-llm-attempts"));

// The models the gateway's chains serve (answered by the gateway itself):
const models = [];
for await (const m of client.models.list()) models.push(m.id);
console.log(JSON.stringify(models));
