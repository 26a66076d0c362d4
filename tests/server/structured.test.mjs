// Structured output and tool calls through the official openai client, on the embedded
// kvserve-tiny (chatml, so Hermes-style tool calls) and on the same model with the llama3
// template: response_format json_schema streamed and not, tools with tool_choice required, a
// named function and auto, a two-turn exchange with role "tool" results, and the 400s.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Server, collectStream } from "./lib/server.mjs";

let chatml, llama3;
before(async () => {
  chatml = await Server.start(["--threads", "1"], { embedded: true });
  llama3 = await Server.start(["--threads", "1", "--chat-template", "llama3"], { embedded: true });
});
after(() => { chatml?.kill(); llama3?.kill(); });

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 24 }, unit: { type: "string", enum: ["c", "f"] } },
      required: ["city", "unit"],
    },
  },
};
const TIME = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };
const ASK = [{ role: "user", content: "What is the weather in Paris?" }];

function checkWeatherCall(call) {
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(Object.keys(args).sort(), ["city", "unit"]);
  assert.equal(typeof args.city, "string");
  assert.ok([...args.city].length <= 24);
  assert.ok(["c", "f"].includes(args.unit));
  return args;
}

// Rebuilds a streamed choice's message as the openai client's users do.
function assemble(chunks) {
  let content = "";
  const calls = [];
  let finish = null;
  for (const c of chunks) {
    const ch = c.choices[0];
    if (!ch) continue;
    content += ch.delta?.content ?? "";
    for (const d of ch.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
      const call = calls[d.index];
      if (d.id) call.id = d.id;
      if (d.function?.name) call.function.name += d.function.name;
      if (d.function?.arguments) call.function.arguments += d.function.arguments;
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  return { content, calls, finish };
}

test("response_format json_schema: the content parses and matches, streamed the same", async () => {
  const schema = {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 20 },
      age: { type: "integer", minimum: 0, maximum: 120 },
      tags: { type: "array", items: { enum: ["a", "b"] }, maxItems: 3 },
    },
    required: ["name", "age", "tags"],
    additionalProperties: false,
  };
  const client = chatml.client();
  const req = { model: chatml.model, messages: ASK, max_tokens: 200, temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } } };
  const res = await client.chat.completions.create(req);
  assert.equal(res.choices[0].finish_reason, "stop");
  const value = JSON.parse(res.choices[0].message.content);
  // Every required property once, in the order the model chose (the grammar allows any).
  assert.deepEqual(Object.keys(value).sort(), ["age", "name", "tags"]);
  assert.ok(Number.isInteger(value.age) && value.age >= 0 && value.age <= 120);
  assert.ok(value.tags.length <= 3 && value.tags.every((t) => t === "a" || t === "b"));
  const streamed = assemble(await collectStream(await client.chat.completions.create({ ...req, stream: true })));
  assert.equal(streamed.content, res.choices[0].message.content);
  assert.equal(streamed.finish, "stop");
});

test("response_format json_object gives a JSON object", async () => {
  const res = await chatml.client().chat.completions.create({
    model: chatml.model, messages: ASK, max_tokens: 300, temperature: 0,
    response_format: { type: "json_object" } });
  const text = res.choices[0].message.content;
  if (res.choices[0].finish_reason === "stop") {
    const value = JSON.parse(text);
    assert.equal(typeof value, "object");
    assert.ok(!Array.isArray(value) && value !== null);
  } else {
    assert.ok(text.startsWith("{"), text);  // cut by max_tokens: a prefix of an object
  }
});

for (const [label, server] of [["chatml (Hermes)", () => chatml], ["llama3 (JSON)", () => llama3]]) {
  test(`${label}: tool_choice required gives a call whose arguments match, streamed the same`, async () => {
    const s = server();
    const client = s.client();
    const req = { model: s.model, messages: ASK, tools: [WEATHER, TIME], tool_choice: "required",
      parallel_tool_calls: false, max_tokens: 200, temperature: 0 };
    const res = await client.chat.completions.create(req);
    const choice = res.choices[0];
    assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.ok(["get_weather", "get_time"].includes(call.function.name));
    if (call.function.name === "get_weather") checkWeatherCall(call);
    else assert.deepEqual(JSON.parse(call.function.arguments), {});

    const streamed = assemble(await collectStream(await client.chat.completions.create({ ...req, stream: true })));
    assert.equal(streamed.finish, "tool_calls");
    assert.equal(streamed.content, "");
    assert.equal(streamed.calls.length, 1);
    assert.equal(streamed.calls[0].function.name, call.function.name);
    assert.equal(streamed.calls[0].function.arguments, call.function.arguments);
  });

  test(`${label}: a named function is the one called`, async () => {
    const s = server();
    const res = await s.client().chat.completions.create({
      model: s.model, messages: ASK, tools: [TIME, WEATHER], max_tokens: 200, temperature: 0.8, seed: 5,
      tool_choice: { type: "function", function: { name: "get_weather" } }, parallel_tool_calls: false });
    assert.equal(res.choices[0].finish_reason, "tool_calls");
    checkWeatherCall(res.choices[0].message.tool_calls[0]);
  });
}

test("two turns with tool_choice auto: the call and its result render back through the template", async () => {
  const client = chatml.client();
  const tools = [WEATHER];
  const first = await client.chat.completions.create({
    model: chatml.model, messages: ASK, tools, tool_choice: "auto", max_tokens: 200, temperature: 0 });
  const msg = first.choices[0].message;
  // The tiny model may answer in text or call; either way the reply is well-formed.
  if (msg.tool_calls?.length) {
    assert.equal(first.choices[0].finish_reason, "tool_calls");
    msg.tool_calls.forEach(checkWeatherCall);
  } else {
    assert.equal(typeof msg.content, "string");
  }
  // The second turn carries a call and its result (the model's own when it called).
  const call = msg.tool_calls?.[0] ?? { id: "call_1", type: "function",
    function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris", unit: "c" }) } };
  const messages = [...ASK, { role: "assistant", content: null, tool_calls: [call] },
    { role: "tool", tool_call_id: call.id, content: "{\"temperature\": 21}" }];
  const second = await client.chat.completions.create({
    model: chatml.model, messages, tools, tool_choice: "auto", max_tokens: 30, temperature: 0 });
  assert.ok(["stop", "length", "tool_calls"].includes(second.choices[0].finish_reason));
  // The rendered prompt holds the call and the result in Qwen's format.
  const tok = await chatml.json("POST", "/tokenize", { messages });
  const text = (await chatml.json("POST", "/detokenize", { tokens: tok.body.tokens })).body.prompt;
  assert.ok(text.includes(`<tool_call>\n{"name": "get_weather", "arguments": ${call.function.arguments}}\n</tool_call>`), text);
  assert.ok(text.includes("user\n<tool_response>\n{\"temperature\": 21}\n</tool_response><|im_end|>"), text);
  // The same exchange on llama3: the result is an ipython turn.
  const again = await llama3.client().chat.completions.create({
    model: llama3.model, messages, tools, max_tokens: 20, temperature: 0 });
  assert.ok(again.choices[0].message);
});

test("tool_choice none renders the tools but leaves the text alone", async () => {
  const res = await chatml.client().chat.completions.create({
    model: chatml.model, messages: ASK, tools: [WEATHER], tool_choice: "none", max_tokens: 20, temperature: 0 });
  assert.equal(res.choices[0].message.tool_calls, undefined);
  assert.notEqual(res.choices[0].finish_reason, "tool_calls");
});

test("bad tools and tool_choice are 400s naming the field", async () => {
  const client = chatml.client();
  const cases = [
    [{ tools: [{ type: "function", function: { name: "bad name" } }] }, "tools[0].function.name"],
    [{ tools: [WEATHER, WEATHER] }, "tools[1].function.name"],
    [{ tools: [{ type: "function", function: { name: "f", parameters: { type: "array", contains: { type: "integer" } } } }] }, "tools"],
    [{ tools: [WEATHER], tool_choice: { type: "function", function: { name: "nope" } } }, "tool_choice"],
    [{ tools: [WEATHER], tool_choice: "sometimes" }, "tool_choice"],
    [{ tool_choice: "required" }, "tool_choice"],
    [{ tools: [WEATHER], response_format: { type: "json_object" } }, "response_format"],
    [{ messages: [{ role: "assistant", content: null, tool_calls: [{ id: "x", type: "function",
      function: { name: "f", arguments: "{not json" } }] }] }, "messages[0].tool_calls[0].function.arguments"],
    [{ messages: [{ role: "tool", content: "1" }] }, "messages[0].tool_call_id"],
  ];
  for (const [extra, param] of cases) {
    const err = await client.chat.completions.create({ model: chatml.model, messages: ASK, max_tokens: 5, ...extra })
      .then((r) => assert.fail(`accepted ${JSON.stringify(extra)}: ${JSON.stringify(r)}`), (e) => e);
    assert.ok(err instanceof OpenAI.BadRequestError, `${JSON.stringify(extra)}: ${err}`);
    assert.equal(err.param, param, `${JSON.stringify(extra)}: ${err.message}`);
  }
});

test("a family without a tool format refuses tools with a 400", async () => {
  const gemma = await Server.start(["--threads", "1", "--chat-template", "gemma"], { embedded: true });
  try {
    const err = await gemma.client().chat.completions.create({
      model: gemma.model, messages: ASK, tools: [WEATHER], max_tokens: 5 }).then(assert.fail, (e) => e);
    assert.equal(err.status, 400);
    assert.equal(err.param, "tools");
    assert.match(err.message, /no tool-call format/);
  } finally {
    gemma.kill();
  }
});
