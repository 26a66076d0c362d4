// The plain endpoints (/health, /v1/models, /tokenize, /detokenize) and the exact wire format of
// server-sent events, read with node's http module rather than the openai client.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Server, assertErrorShape, assertUsage, openStream, testCleanShutdown, useServer, words } from "./lib/server.mjs";

const ctx = useServer();

test("the first stdout line names the bound loopback port", () => {
  assert.match(ctx.server.stdout.split("\n")[0], /^kvserve: listening on http:\/\/127\.0\.0\.1:\d+$/);
  assert.ok(ctx.server.port > 0 && ctx.server.port < 65536);
});

test("GET /health answers 200 {status: ok}", async () => {
  const res = await ctx.server.request("GET", "/health");
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { status: "ok" });
});

test("GET /v1/models lists exactly the served model", async () => {
  const res = await ctx.server.request("GET", "/v1/models");
  assert.equal(res.status, 200);
  assert.equal(res.body.object, "list");
  assert.equal(res.body.data.length, 1);
  const [m] = res.body.data;
  assert.equal(typeof m.id, "string");
  assert.ok(m.id.length > 0);
  assert.equal(m.object, "model");
  assert.equal(m.owned_by, "kvserve");
  assert.ok(Number.isInteger(m.created));
  assert.equal(m.max_model_len, 4096);  // the stock test model's context
  const listed = [];
  for await (const model of ctx.client.models.list()) listed.push(model.id);
  assert.deepEqual(listed, [m.id]);
});

test("/tokenize and /detokenize round-trip text", async () => {
  const prompt = "Hello world, the little girl and the water.";
  const tok = await ctx.server.request("POST", "/tokenize", { body: { prompt } });
  assert.equal(tok.status, 200, tok.text);
  assert.ok(Array.isArray(tok.body.tokens) && tok.body.tokens.every(Number.isInteger));
  assert.equal(tok.body.count, tok.body.tokens.length);
  assert.equal(tok.body.max_model_len, 4096);
  const plain = await ctx.server.request("POST", "/tokenize", { body: { prompt, add_special_tokens: false } });
  assert.equal(plain.body.count, tok.body.count - 1, "the stock test model adds one BOS token");
  const detok = await ctx.server.request("POST", "/detokenize", { body: { tokens: plain.body.tokens } });
  assert.equal(detok.status, 200, detok.text);
  assert.equal(detok.body.prompt, prompt);
});

test("/tokenize with messages applies the chat template", async () => {
  const messages = [{ role: "user", content: "hello world" }];
  const withPrompt = await ctx.server.request("POST", "/tokenize", { body: { messages } });
  assert.equal(withPrompt.status, 200, withPrompt.text);
  const bare = await ctx.server.request("POST", "/tokenize", { body: { prompt: "hello world" } });
  assert.ok(withPrompt.body.count > bare.body.count, "the template adds tokens around the message");
  const noGen = await ctx.server.request("POST", "/tokenize",
    { body: { messages, add_generation_prompt: false } });
  assert.ok(noGen.body.count < withPrompt.body.count, "add_generation_prompt: false drops the assistant header");
  assert.deepEqual(withPrompt.body.tokens.slice(0, noGen.body.count), noGen.body.tokens);
});

test("/tokenize with tools renders them as chat does, in the client's key order", async () => {
  const messages = [{ role: "user", content: "weather in Paris?" }];
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather now",
    parameters: { type: "object", properties: { zeta: { type: "string" }, alpha: { type: "number" } } } } }];
  const bare = await ctx.server.request("POST", "/tokenize", { body: { messages } });
  const withTools = await ctx.server.request("POST", "/tokenize", { body: { messages, tools } });
  assert.equal(withTools.status, 200, withTools.text);
  assert.ok(withTools.body.count > bare.body.count, "the template prints the tools");
  const chat = await ctx.server.request("POST", "/v1/chat/completions",
    { body: { messages, tools, max_tokens: 1, temperature: 0 } });
  assert.equal(chat.status, 200, chat.text);
  assert.equal(chat.body.usage.prompt_tokens, withTools.body.count);
  // The same tool with its properties the other way round is another prompt.
  const swapped = structuredClone(tools);
  swapped[0].function.parameters.properties = { alpha: { type: "number" }, zeta: { type: "string" } };
  const other = await ctx.server.request("POST", "/tokenize", { body: { messages, tools: swapped } });
  assert.notDeepEqual(other.body.tokens, withTools.body.tokens);
  const bad = await ctx.server.request("POST", "/tokenize", { body: { messages, tools: [{ type: "x" }] } });
  assert.equal(bad.status, 400, bad.text);
  assertErrorShape(bad.body, { param: "tools[0]" });
});

// Reads the whole event stream as text and splits it into comment lines and data events, checking
// that each event is exactly `data: <payload>\n\n`.
async function readSse(stream) {
  const text = await stream.text();
  assert.ok(text.endsWith("data: [DONE]\n\n"), `stream does not end with [DONE]: ${JSON.stringify(text.slice(-200))}`);
  const blocks = text.split("\n\n");
  assert.equal(blocks.pop(), "");
  const payloads = [];
  for (const block of blocks) {
    const lines = block.split("\n").filter((l) => l !== "" && !l.startsWith(":"));  // comments
    if (lines.length === 0) continue;
    assert.equal(lines.length, 1, `an event of several lines: ${JSON.stringify(block)}`);
    assert.match(lines[0], /^data: /, `not a data line: ${JSON.stringify(block)}`);
    payloads.push(lines[0].slice(6));
  }
  assert.equal(payloads.pop(), "[DONE]");
  assert.ok(!payloads.includes("[DONE]"), "[DONE] before the end");
  return payloads.map((p) => JSON.parse(p));
}

test("completions stream: text/event-stream of text_completion chunks ending in [DONE]", async () => {
  const stream = await openStream(ctx.server.port, "/v1/completions", {
    prompt: "The little girl", max_tokens: 6, temperature: 0, ignore_eos: true, stream: true });
  assert.equal(stream.status, 200);
  assert.match(stream.headers["content-type"], /^text\/event-stream/);
  const chunks = await readSse(stream);
  assert.ok(chunks.length >= 1);
  const finishes = [];
  for (const c of chunks) {
    assert.equal(c.object, "text_completion");
    assert.match(c.id, /^cmpl-/);
    for (const ch of c.choices) {
      assert.deepEqual(Object.keys(ch).sort(), ["finish_reason", "index", "logprobs", "text"]);
      if (ch.finish_reason !== null) finishes.push(ch.finish_reason);
    }
    assert.ok(c.usage === undefined || c.usage === null, "no usage without include_usage");
  }
  assert.deepEqual(finishes, ["length"]);
});

test("chat stream with n = 2 and include_usage: per-choice role/content/finish deltas, usage last", async () => {
  const stream = await openStream(ctx.server.port, "/v1/chat/completions", {
    messages: [{ role: "user", content: "Tell me a story." }], max_tokens: 5, n: 2, temperature: 1,
    seed: 3, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  assert.equal(stream.status, 200);
  assert.match(stream.headers["content-type"], /^text\/event-stream/);
  const chunks = await readSse(stream);
  const usageChunk = chunks.pop();
  assert.deepEqual(usageChunk.choices, []);
  assertUsage(usageChunk.usage);
  assert.equal(usageChunk.usage.completion_tokens, 10);
  const perChoice = new Map([[0, []], [1, []]]);
  for (const c of chunks) {
    assert.equal(c.object, "chat.completion.chunk");
    assert.match(c.id, /^chatcmpl-/);
    assert.equal(c.id, chunks[0].id);
    assert.ok("usage" in c, "with include_usage every chunk has a usage field");
    assert.equal(c.usage, null);
    for (const ch of c.choices) {
      assert.ok(perChoice.has(ch.index), `index ${ch.index}`);
      perChoice.get(ch.index).push(ch);
    }
  }
  for (const [index, deltas] of perChoice) {
    assert.ok(deltas.length >= 2, `choice ${index} has ${deltas.length} deltas`);
    assert.deepEqual(deltas[0].delta, { role: "assistant", content: "" });
    assert.deepEqual(deltas.at(-1).delta, {});
    assert.equal(deltas.at(-1).finish_reason, "length");
    for (const d of deltas.slice(1, -1)) {
      assert.deepEqual(Object.keys(d.delta), ["content"]);
      assert.equal(d.finish_reason, null);
    }
  }
});

test("a streamed error before the stream starts is a plain JSON error, not SSE", async () => {
  const stream = await openStream(ctx.server.port, "/v1/completions",
    { prompt: "x", max_tokens: -1, stream: true });
  assert.equal(stream.status, 400);
  const body = JSON.parse(await stream.text());
  assert.equal(body.error.param, "max_tokens");
});

test("a kept-alive connection serves several requests", async () => {
  // The openai client reuses connections; a burst of sequential requests must all succeed.
  for (let i = 0; i < 5; ++i) {
    const r = await ctx.client.completions.create({ model: ctx.server.model, prompt: words(5, i), max_tokens: 2, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, 2);
  }
});

test("/detokenize rejects ids outside the vocabulary", async () => {
  const res = await ctx.server.request("POST", "/detokenize", { body: { tokens: [1, 99999] } });
  assert.equal(res.status, 400);
  assertErrorShape(res.body, { type: "invalid_request_error", param: "tokens" });
});

test("--served-model-name renames the model; the old name is model_not_found", async () => {
  const server = await Server.start(["--served-model-name", "my-served-model"]);
  try {
    assert.equal(server.model, "my-served-model");
    const client = server.client();
    const ok = await client.completions.create({ model: "my-served-model", prompt: "hi", max_tokens: 2, ignore_eos: true });
    assert.equal(ok.model, "my-served-model");
    const err = await client.completions.create({ model: ctx.server.model, prompt: "hi", max_tokens: 1 })
      .then(() => assert.fail("accepted the GGUF's name"), (e) => e);
    assert.equal(err.status, 404);
    assert.equal(err.code, "model_not_found");
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test("the API key can come from KVSERVE_API_KEY", async () => {
  const server = await Server.start([], { env: { KVSERVE_API_KEY: "sk-from-env" } });
  try {
    const missing = await server.request("GET", "/v1/models", { auth: false });
    assert.equal(missing.status, 401);
    assertErrorShape(missing.body, { code: "invalid_api_key" });
    const ok = await server.request("GET", "/v1/models");
    assert.equal(ok.status, 200);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

testCleanShutdown(ctx);
