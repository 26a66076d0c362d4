// POST /v1/chat/completions through the openai client: response shape, content parts, roles,
// streaming deltas, n > 1, logprobs, and prefix caching across the turns of a conversation
// (usage.prompt_tokens_details.cached_tokens).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Server, assertUsage, collectStream, testCleanShutdown, useServer, words } from "./lib/server.mjs";

const ctx = useServer();
const MESSAGES = [
  { role: "system", content: "You are a helpful model." },
  { role: "user", content: "Tell me a story about a little girl and the water." },
];

function chat(extra = {}, client = ctx.client) {
  return client.chat.completions.create({
    model: ctx.server.model, messages: MESSAGES, temperature: 0, max_tokens: 16, ignore_eos: true, ...extra,
  });
}

test("a chat completion has the chat.completion shape and exact usage counts", async () => {
  const res = await chat({ max_tokens: 10 });
  assert.match(res.id, /^chatcmpl-/);
  assert.equal(res.object, "chat.completion");
  assert.ok(Number.isInteger(res.created) && res.created > 1.6e9);
  assert.equal(res.model, ctx.server.model);
  assert.equal(res.choices.length, 1);
  const [c] = res.choices;
  assert.equal(c.index, 0);
  assert.equal(c.message.role, "assistant");
  assert.equal(typeof c.message.content, "string");
  assert.ok(c.message.content.length > 0);
  assert.equal(c.logprobs, null);
  assert.equal(c.finish_reason, "length");
  assertUsage(res.usage);
  assert.equal(res.usage.completion_tokens, 10);
  const tok = await ctx.server.request("POST", "/tokenize", { body: { messages: MESSAGES } });
  assert.equal(tok.status, 200, tok.text);
  assert.equal(res.usage.prompt_tokens, tok.body.count);
});

test("max_completion_tokens limits the reply like max_tokens", async () => {
  const res = await chat({ max_tokens: undefined, max_completion_tokens: 5 });
  assert.equal(res.usage.completion_tokens, 5);
  assert.equal(res.choices[0].finish_reason, "length");
});

test("greedy chat is deterministic", async () => {
  const a = await chat();
  const b = await chat();
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

test("content as an array of text parts is the same prompt as the joined string", async () => {
  const parts = [
    MESSAGES[0],
    { role: "user", content: [{ type: "text", text: "Tell me a story about a little girl" },
                              { type: "text", text: " and the water." }] },
  ];
  const asParts = await chat({ messages: parts });
  const asString = await chat();
  assert.equal(asParts.usage.prompt_tokens, asString.usage.prompt_tokens);
  assert.equal(asParts.choices[0].message.content, asString.choices[0].message.content);
});

test("the developer role is read as system", async () => {
  const dev = await chat({ messages: [{ ...MESSAGES[0], role: "developer" }, MESSAGES[1]] });
  const sys = await chat();
  assert.equal(dev.usage.prompt_tokens, sys.usage.prompt_tokens);
  assert.equal(dev.choices[0].message.content, sys.choices[0].message.content);
});

test("a multi-turn conversation with an assistant message is accepted", async () => {
  const res = await chat({ messages: [...MESSAGES, { role: "assistant", content: "Once upon a time" },
                                      { role: "user", content: "Go on." }] });
  assert.equal(res.usage.completion_tokens, 16);
  assert.ok(res.usage.prompt_tokens > (await chat()).usage.prompt_tokens);
});

test("streaming chat: role first, content deltas, empty delta with finish_reason, then usage", async () => {
  const whole = await chat({ max_tokens: 20 });
  const chunks = await collectStream(await chat({
    max_tokens: 20, stream: true, stream_options: { include_usage: true } }));
  const usageChunk = chunks.at(-1);
  assert.deepEqual(usageChunk.choices, []);
  assertUsage(usageChunk.usage);
  assert.equal(usageChunk.usage.completion_tokens, 20);
  assert.equal(usageChunk.usage.prompt_tokens, whole.usage.prompt_tokens);
  const deltas = [];
  for (const chunk of chunks.slice(0, -1)) {
    assert.equal(chunk.object, "chat.completion.chunk");
    assert.equal(chunk.id, chunks[0].id);
    assert.match(chunk.id, /^chatcmpl-/);
    assert.equal(chunk.model, ctx.server.model);
    assert.equal(chunk.usage, null, "usage must be null on every chunk but the last");
    for (const c of chunk.choices) { assert.equal(c.index, 0); deltas.push(c); }
  }
  assert.ok(deltas.length >= 3, `only ${deltas.length} deltas`);
  assert.deepEqual(deltas[0].delta, { role: "assistant", content: "" });
  const last = deltas.at(-1);
  assert.deepEqual(last.delta, {});
  assert.equal(last.finish_reason, "length");
  let text = "";
  for (const d of deltas.slice(1, -1)) {
    assert.equal(d.finish_reason, null);
    assert.equal(typeof d.delta.content, "string");
    assert.equal(d.delta.role, undefined);
    text += d.delta.content;
  }
  assert.equal(text, whole.choices[0].message.content);
});

test("chat n > 1 gives choices 0..n-1 and completion_tokens summed over them", async () => {
  const res = await chat({ n: 3, temperature: 1, seed: 5, max_tokens: 7 });
  assert.deepEqual(res.choices.map((c) => c.index).sort(), [0, 1, 2]);
  for (const c of res.choices) {
    assert.equal(c.finish_reason, "length");
    assert.equal(c.message.role, "assistant");
  }
  assert.equal(res.usage.completion_tokens, 3 * 7);
});

test("chat with the same seed at temperature 1 repeats itself", async () => {
  const a = await chat({ temperature: 1, seed: 99 });
  const b = await chat({ temperature: 1, seed: 99 });
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

test("a stop string ends the chat reply just before it", async () => {
  const free = (await chat({ max_tokens: 32 })).choices[0].message.content;
  const start = Math.floor(free.length / 2);
  const stop = free.slice(start, start + 3);
  assert.equal(stop.length, 3, `reply too short: ${JSON.stringify(free)}`);
  const res = await chat({ max_tokens: 32, stop: [stop] });
  assert.equal(res.choices[0].message.content, free.slice(0, free.indexOf(stop)));
  assert.equal(res.choices[0].finish_reason, "stop");
});

test("chat logprobs with top_logprobs 2: one entry per token, greedy token on top", async () => {
  const res = await chat({ max_tokens: 10, logprobs: true, top_logprobs: 2 });
  const content = res.choices[0].logprobs?.content;
  assert.ok(Array.isArray(content), `logprobs.content missing: ${JSON.stringify(res.choices[0].logprobs)}`);
  assert.equal(content.length, res.usage.completion_tokens);
  for (const [i, e] of content.entries()) {
    assert.equal(typeof e.token, "string");
    assert.ok(e.logprob <= 0, `logprob ${e.logprob}`);
    assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
    if (!e.token.includes("\ufffd")) assert.equal(Buffer.from(e.bytes).toString("utf8"), e.token);
    assert.ok(Array.isArray(e.top_logprobs) && e.top_logprobs.length >= 1 && e.top_logprobs.length <= 2,
      `token ${i}: ${e.top_logprobs?.length} top_logprobs`);
    for (const t of e.top_logprobs) {
      assert.equal(typeof t.token, "string");
      assert.ok(t.logprob <= 0);
      assert.ok(Array.isArray(t.bytes));
    }
    const best = Math.max(...e.top_logprobs.map((t) => t.logprob));
    assert.ok(Math.abs(best - e.logprob) < 1e-4, `token ${i}: chosen ${e.logprob}, best ${best}`);
  }
});

test("chat logprobs without top_logprobs give empty alternatives", async () => {
  const res = await chat({ max_tokens: 4, logprobs: true });
  const content = res.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const e of content) assert.deepEqual(e.top_logprobs, []);
});

test("cached_tokens grows on the second turn of a conversation (fresh server)", async () => {
  const server = await Server.start();
  try {
    const client = server.client();
    const system = `You are a storyteller. ${words(120, 42)}`;
    assert.ok(system.length > 500);
    const turn1 = [{ role: "system", content: system }, { role: "user", content: "Tell me about the water." }];
    const r1 = await client.chat.completions.create({
      model: server.model, messages: turn1, temperature: 0, max_tokens: 12, ignore_eos: true });
    assertUsage(r1.usage);
    assert.ok(r1.usage.prompt_tokens > 64, `system prompt is only ${r1.usage.prompt_tokens} tokens`);
    assert.equal(r1.usage.prompt_tokens_details.cached_tokens, 0, "first request on a fresh server");

    const turn2 = [...turn1, { role: "assistant", content: r1.choices[0].message.content },
                   { role: "user", content: "And then what happened?" }];
    const r2 = await client.chat.completions.create({
      model: server.model, messages: turn2, temperature: 0, max_tokens: 12, ignore_eos: true });
    assertUsage(r2.usage);
    const floor1 = Math.floor(r1.usage.prompt_tokens / 16) * 16 - 16;
    const cached2 = r2.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached2 > 0, "turn 2 found nothing cached");
    assert.ok(cached2 >= floor1, `turn 2 cached ${cached2} tokens, want >= ${floor1} (turn 1 prompt ${r1.usage.prompt_tokens})`);
    assert.ok(r2.usage.prompt_tokens > r1.usage.prompt_tokens);
    console.log(`cached_tokens: turn 1 prompt ${r1.usage.prompt_tokens} cached 0; ` +
                `turn 2 prompt ${r2.usage.prompt_tokens} cached ${cached2}`);

    // Turn 3 streamed: the usage chunk reports cached_tokens too.
    const turn3 = [...turn2, { role: "assistant", content: r2.choices[0].message.content },
                   { role: "user", content: "Thank you." }];
    const chunks = await collectStream(await client.chat.completions.create({
      model: server.model, messages: turn3, temperature: 0, max_tokens: 8, ignore_eos: true,
      stream: true, stream_options: { include_usage: true } }));
    const usage = chunks.at(-1).usage;
    assertUsage(usage);
    const floor2 = Math.floor(r2.usage.prompt_tokens / 16) * 16 - 16;
    assert.ok(usage.prompt_tokens_details.cached_tokens >= floor2,
      `turn 3 (streamed) cached ${usage.prompt_tokens_details.cached_tokens}, want >= ${floor2}`);

    const m = await server.metrics();
    assert.ok(m.get("kvserve:prefix_cache_hits_total") >= cached2 + floor2);
    assert.ok(m.get("kvserve:prefix_cache_queries_total") >= r1.usage.prompt_tokens + r2.usage.prompt_tokens);
  } finally {
    const { code } = await server.stop();
    assert.equal(code, 0);
  }
});

test("requests with different cache_salt values do not share cached blocks", async () => {
  const system = `Salted. ${words(100, 7)}`;
  const messages = [{ role: "system", content: system }, { role: "user", content: "Hi." }];
  const a = await chat({ messages, cache_salt: "alpha", max_tokens: 2 });
  const b = await chat({ messages, cache_salt: "beta", max_tokens: 2 });
  const c = await chat({ messages, cache_salt: "alpha", max_tokens: 2 });
  assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0, "a new salt must start uncached");
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, 0, "a new salt must start uncached");
  assert.ok(c.usage.prompt_tokens_details.cached_tokens >= Math.floor(a.usage.prompt_tokens / 16) * 16 - 16);
});

test("with --no-prefix-caching nothing is ever reported cached", async () => {
  const server = await Server.start(["--no-prefix-caching"]);
  try {
    const client = server.client();
    const messages = [{ role: "system", content: words(100, 8) }, { role: "user", content: "Hi." }];
    for (let i = 0; i < 2; ++i) {
      const r = await client.chat.completions.create({ model: server.model, messages, max_tokens: 2, ignore_eos: true });
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0, `request ${i}`);
    }
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

testCleanShutdown(ctx);
