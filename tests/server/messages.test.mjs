// POST /v1/messages (Anthropic's Messages API) through the official @anthropic-ai/sdk client, on
// the embedded kvserve-tiny (chatml): messages and their usage, streaming with
// messages.stream(), stop sequences, max_tokens, system prompts, tools with a named tool_choice,
// cache_control, both API key headers, and errors in Anthropic's shape.
import { test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { testCleanShutdown, useServer } from "./lib/server.mjs";

const KEY = "sk-ant-kvserve-test";
const ctx = useServer(["--threads", "1"], { embedded: true, apiKey: KEY });

// An Anthropic client for the test server. It sends the key as `Authorization: Bearer`; with
// `xApiKey` it sends only `x-api-key`, as Anthropic's own API expects.
function anthropic({ apiKey = KEY, xApiKey } = {}) {
  return new Anthropic({
    baseURL: ctx.server.origin,
    apiKey: xApiKey === undefined ? apiKey : null,
    defaultHeaders: xApiKey === undefined ? {} : { "x-api-key": xApiKey },
    maxRetries: 0,
    timeout: 300_000,
  });
}

const COW = [{ role: "user", content: "What sound does a cow make?" }];
const STORY = [{ role: "user", content: "Tell me a story about a little girl." }];
const WEATHER = {
  name: "get_weather",
  description: "The current weather in a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", maxLength: 24 }, unit: { type: "string", enum: ["c", "f"] } },
    required: ["city", "unit"],
  },
};

function create(extra = {}, client = anthropic()) {
  return client.messages.create({ model: ctx.server.model, max_tokens: 32, temperature: 0, messages: COW, ...extra });
}

function textOf(message) {
  return message.content.filter((b) => b.type === "text").map((b) => b.text).join("");
}

function assertUsage(usage) {
  for (const k of ["input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"]) {
    assert.ok(Number.isInteger(usage[k]) && usage[k] >= 0, `usage.${k} = ${usage[k]}`);
  }
  for (const k of ["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"]) {
    assert.ok(Number.isInteger(usage.cache_creation?.[k]) && usage.cache_creation[k] >= 0,
      `usage.cache_creation.${k} in ${JSON.stringify(usage)}`);
  }
}

// Prompt tokens of a user-only chat as /tokenize counts them (with the generation prompt).
async function promptTokens(messages) {
  const res = await ctx.server.request("POST", "/tokenize", { body: { messages } });
  assert.equal(res.status, 200, res.text);
  return res.body.count;
}

function assertAnthropicError(body, type) {
  assert.equal(body?.type, "error", JSON.stringify(body));
  assert.equal(body.error?.type, type, JSON.stringify(body));
  assert.equal(typeof body.error.message, "string");
  assert.ok(body.error.message.length > 0);
}

test("messages.create answers a message with text, end_turn and consistent usage", async () => {
  const res = await create();
  assert.match(res.id, /^msg_[0-9a-f]{24}$/);
  assert.equal(res.type, "message");
  assert.equal(res.role, "assistant");
  assert.equal(res.model, ctx.server.model);
  assert.equal(res.content.length, 1);
  assert.equal(res.content[0].type, "text");
  assert.match(res.content[0].text, /moo/);
  assert.equal(res.stop_reason, "end_turn");
  assert.equal(res.stop_sequence, null);
  assertUsage(res.usage);
  const { input_tokens, cache_read_input_tokens, cache_creation_input_tokens } = res.usage;
  assert.equal(input_tokens + cache_read_input_tokens + cache_creation_input_tokens, await promptTokens(COW));
  assert.ok(res.usage.output_tokens > 0 && res.usage.output_tokens < 32);
  // The same chat through the OpenAI route writes the same words.
  const chat = await ctx.server.client().chat.completions.create({
    model: ctx.server.model, messages: COW, max_tokens: 32, temperature: 0 });
  assert.equal(res.content[0].text, chat.choices[0].message.content);
  assert.equal(res.usage.output_tokens, chat.usage.completion_tokens);
});

test("max_tokens ends the message with stop_reason max_tokens after exactly that many tokens", async () => {
  const res = await create({ messages: STORY, max_tokens: 5 });
  assert.equal(res.stop_reason, "max_tokens");
  assert.equal(res.stop_sequence, null);
  assert.equal(res.usage.output_tokens, 5);
  assert.ok(textOf(res).length > 0);
});

test("messages.stream: the events build the same message as the non-streamed call", async () => {
  const body = { model: ctx.server.model, max_tokens: 24, temperature: 0, messages: STORY };
  const whole = await anthropic().messages.create(body);
  const stream = anthropic().messages.stream(body);
  const types = [];
  for await (const event of stream) types.push(event.type);
  const final = await stream.finalMessage();
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  assert.equal(types.at(-2), "message_delta");
  assert.equal(types[1], "content_block_start");
  assert.ok(types.filter((t) => t === "content_block_delta").length > 1, types.join(" "));
  assert.equal(textOf(final), textOf(whole));
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  // The model's own end of turn may come first (greedy output is the model's); either way the
  // reason matches the count.
  if (final.stop_reason === "max_tokens") {
    assert.equal(final.usage.output_tokens, 24);
  } else {
    assert.equal(final.stop_reason, "end_turn");
    assert.ok(final.usage.output_tokens > 1 && final.usage.output_tokens < 24);
  }
  assert.match(final.id, /^msg_/);
  assertUsage(final.usage);
  assert.equal(final.usage.input_tokens + final.usage.cache_read_input_tokens +
    final.usage.cache_creation_input_tokens, await promptTokens(STORY));
});

test("the raw stream frames each event as `event: TYPE` and its data with that type", async () => {
  const res = await fetch(`${ctx.server.origin}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ model: ctx.server.model, max_tokens: 6, temperature: 0, messages: COW, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /^text\/event-stream/);
  const text = await res.text();
  assert.ok(text.endsWith("\n\n"), JSON.stringify(text.slice(-40)));
  const names = [];
  for (const event of text.slice(0, -2).split("\n\n")) {
    const m = /^event: (\w+)\ndata: (.*)$/.exec(event);
    assert.ok(m, `malformed event ${JSON.stringify(event)}`);
    assert.equal(JSON.parse(m[2]).type, m[1]);
    if (m[1] !== "ping") names.push(m[1]);
  }
  assert.equal(names[0], "message_start");
  assert.deepEqual(names.slice(-2), ["message_delta", "message_stop"]);
});

test("a stop sequence ends the text before it, with stop_reason stop_sequence naming it", async () => {
  const free = textOf(await create({ messages: STORY, max_tokens: 32 }));
  const start = Math.floor(free.length / 2);
  const stop = free.slice(start, start + 3);
  assert.equal(stop.length, 3, `reply too short: ${JSON.stringify(free)}`);
  const body = { messages: STORY, max_tokens: 32, stop_sequences: [stop] };
  const res = await create(body);
  assert.equal(textOf(res), free.slice(0, free.indexOf(stop)));
  assert.equal(res.stop_reason, "stop_sequence");
  assert.equal(res.stop_sequence, stop);
  const streamed = await anthropic().messages.stream({ model: ctx.server.model, temperature: 0, ...body }).finalMessage();
  assert.equal(textOf(streamed), textOf(res));
  assert.equal(streamed.stop_reason, "stop_sequence");
  assert.equal(streamed.stop_sequence, stop);
});

test("a system prompt as a string and as text blocks (joined with newlines) is the same prompt", async () => {
  const asString = await create({ system: "You are a farmer.\nAnswer briefly." });
  const asBlocks = await create({ system: [{ type: "text", text: "You are a farmer." },
                                           { type: "text", text: "Answer briefly." }] });
  const total = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
  assert.equal(total(asBlocks.usage), total(asString.usage));
  assert.equal(textOf(asBlocks), textOf(asString));
  assert.ok(total(asString.usage) > await promptTokens(COW), "the system prompt is part of the prompt");
});

test("cache_control breakpoints are accepted and usage stays whole", async () => {
  const system = [{ type: "text", text: "You are a storyteller who tells long stories about the sea.",
                    cache_control: { type: "ephemeral", ttl: "1h" } }];
  const messages = [{ role: "user", content: [{ type: "text", text: "Tell me a story.", cache_control: { type: "ephemeral" } }] }];
  for (let i = 0; i < 2; ++i) {
    const res = await create({ system, messages, max_tokens: 4 });
    assertUsage(res.usage);
    assert.equal(res.usage.output_tokens, 4);
  }
  const five = Array.from({ length: 5 }, (_, i) => ({ type: "text", text: `part ${i}`, cache_control: { type: "ephemeral" } }));
  const err = await create({ messages: [{ role: "user", content: five }] }).then(assert.fail, (e) => e);
  assert.ok(err instanceof Anthropic.BadRequestError, err.message);
  assert.equal(err.error.error.message, "A maximum of 4 blocks with cache_control may be provided. Found 5.");
});

test("a named tool gives a tool_use block whose input matches the schema, streamed the same", async () => {
  const body = { model: ctx.server.model, max_tokens: 200, temperature: 0,
    messages: [{ role: "user", content: "What is the weather in Paris?" }], tools: [WEATHER],
    tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true } };
  const res = await anthropic().messages.create(body);
  assert.equal(res.stop_reason, "tool_use", JSON.stringify(res));
  const calls = res.content.filter((b) => b.type === "tool_use");
  assert.equal(calls.length, 1, JSON.stringify(res.content));
  const [call] = calls;
  assert.match(call.id, /^toolu_[0-9a-f]{24}$/);
  assert.equal(call.name, "get_weather");
  assert.deepEqual(Object.keys(call.input).sort(), ["city", "unit"]);
  assert.equal(typeof call.input.city, "string");
  assert.ok([...call.input.city].length <= 24);
  assert.ok(["c", "f"].includes(call.input.unit));
  assertUsage(res.usage);

  const streamed = await anthropic().messages.stream(body).finalMessage();
  assert.equal(streamed.stop_reason, "tool_use");
  const streamedCalls = streamed.content.filter((b) => b.type === "tool_use");
  assert.equal(streamedCalls.length, 1);
  assert.equal(streamedCalls[0].name, "get_weather");
  assert.deepEqual(streamedCalls[0].input, call.input);

  // The call and its result go back as tool_use and tool_result blocks.
  const next = await anthropic().messages.create({ ...body, max_tokens: 8, tool_choice: { type: "none" },
    messages: [...body.messages, { role: "assistant", content: res.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "21 degrees" }] }] });
  assert.ok(["end_turn", "max_tokens"].includes(next.stop_reason), next.stop_reason);
  assert.ok(next.content.every((b) => b.type === "text"));
});

test("a bad request is a BadRequestError with Anthropic's error shape naming the field", async () => {
  const err = await create({ messages: [{ role: "user", content: [{ type: "image", source: { type: "base64",
    media_type: "image/png", data: "AAAA" } }] }] }).then(assert.fail, (e) => e);
  assert.ok(err instanceof Anthropic.BadRequestError, err.message);
  assert.equal(err.status, 400);
  assertAnthropicError(err.error, "invalid_request_error");
  assert.match(err.error.error.message, /messages\[0\]\.content\[0\]\.type/);

  const noMax = await anthropic().messages.create({ model: ctx.server.model, messages: COW }).then(assert.fail, (e) => e);
  assert.ok(noMax instanceof Anthropic.BadRequestError);
  assert.match(noMax.error.error.message, /max_tokens/);

  const model = await create({ model: "claude-unknown" }).then(assert.fail, (e) => e);
  assert.ok(model instanceof Anthropic.NotFoundError, model.message);
  assertAnthropicError(model.error, "not_found_error");
});

test("the API key may come as x-api-key or as a Bearer token; a wrong one is an AuthenticationError", async () => {
  const viaHeader = await create({ max_tokens: 2 }, anthropic({ xApiKey: KEY }));
  assert.equal(viaHeader.usage.output_tokens, 2);
  for (const client of [anthropic({ xApiKey: "wrong" }), anthropic({ apiKey: "wrong" })]) {
    const err = await create({ max_tokens: 2 }, client).then(assert.fail, (e) => e);
    assert.ok(err instanceof Anthropic.AuthenticationError, err.message);
    assert.equal(err.status, 401);
    assertAnthropicError(err.error, "authentication_error");
  }
  const missing = await ctx.server.request("POST", "/v1/messages", { auth: false,
    body: { model: ctx.server.model, max_tokens: 2, messages: COW } });
  assert.equal(missing.status, 401);
  assertAnthropicError(missing.body, "authentication_error");
  // x-api-key works on the OpenAI routes too; their errors keep OpenAI's shape.
  const models = await ctx.server.request("GET", "/v1/models", { auth: false, headers: { "x-api-key": KEY } });
  assert.equal(models.status, 200, models.text);
  const openai = await ctx.server.request("GET", "/v1/models", { auth: false, headers: { "x-api-key": "wrong" } });
  assert.equal(openai.status, 401);
  assert.equal(openai.body.error.code, "invalid_api_key");
});

test("anthropic-version and anthropic-beta headers are accepted and ignored", async () => {
  const res = await ctx.server.request("POST", "/v1/messages", {
    headers: { "anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31,some-future-beta" },
    body: { model: ctx.server.model, max_tokens: 2, temperature: 0, messages: COW } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.type, "message");
});

test("refusals before the body is read are in Anthropic's shape on /v1/messages", async () => {
  const get = await ctx.server.request("GET", "/v1/messages");
  assert.equal(get.status, 405);
  assert.equal(get.headers.allow, "POST");
  assertAnthropicError(get.body, "invalid_request_error");
  const multipart = await ctx.server.request("POST", "/v1/messages", {
    body: "x", headers: { "content-type": "multipart/form-data; boundary=b" } });
  assert.equal(multipart.status, 415);
  assertAnthropicError(multipart.body, "invalid_request_error");
  const unknown = await ctx.server.request("POST", "/v1/messages/batches", { body: {} });
  assert.equal(unknown.status, 404);
  assertAnthropicError(unknown.body, "not_found_error");
  const bad = await ctx.server.request("POST", "/v1/messages", { body: "{not json" });
  assert.equal(bad.status, 400);
  assertAnthropicError(bad.body, "invalid_request_error");
});

testCleanShutdown(ctx);
