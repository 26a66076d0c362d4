// Tool calls that the embedded kvserve-tiny makes, through the official openai client at
// temperature 0: for tool_choice "auto", "required" and a named function, streamed and not, the
// answer ends with finish_reason "tool_calls", each call names one of the tools (the named one
// when named) and its arguments parse as JSON that the function's parameters accept. "auto"
// holds nothing to a call until the model starts one, so its prompt is one the training corpus
// answers with a call. The streamed answer is assembled by the client's own
// ChatCompletionStream, as applications do, and equals the non-streamed one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { testCleanShutdown, useServer } from "./lib/server.mjs";

const ctx = useServer(["--threads", "1"], { embedded: true });

// Two tools in the shape the training corpus gives them (tools/train/corpus.py: its weather and
// kitchen-timer tools), so that the prompt below is one the model has learnt to answer with a
// set_timer call. The parameters hold a string and an integer.
const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the weather for a place.",
      parameters: {
        type: "object",
        properties: { place: { type: "string", description: "A town or a village." } },
        required: ["place"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "set_timer",
      description: "Start a kitchen timer.",
      parameters: {
        type: "object",
        properties: {
          minutes: { type: "integer", description: "How long, in minutes." },
          label: { type: "string", description: "What the timer is for." },
        },
        required: ["minutes"],
      },
    },
  },
];
const MESSAGES = [{ role: "user", content: "Set a timer for 10 minutes for tea." }];

// The errors of `value` against the JSON Schema subset TOOLS use (type object, string or
// integer; properties; required); [] when it is valid.
// additionalProperties defaults to false, as the server holds calls to it (docs/structured.md,
// "Tool calls"): a call carries only the arguments its function declares.
function schemaErrors(schema, value, path = "$") {
  switch (schema.type) {
    case "object": {
      if (typeof value !== "object" || value === null || Array.isArray(value)) {
        return [`${path}: ${JSON.stringify(value)} is not an object`];
      }
      const errors = [];
      for (const name of schema.required ?? []) {
        if (!(name in value)) errors.push(`${path}: "${name}" is missing`);
      }
      for (const [name, v] of Object.entries(value)) {
        const sub = schema.properties?.[name];
        if (sub) errors.push(...schemaErrors(sub, v, `${path}.${name}`));
        else if (!schema.additionalProperties) errors.push(`${path}: "${name}" is not a parameter`);
      }
      return errors;
    }
    case "string":
      return typeof value === "string" ? [] : [`${path}: ${JSON.stringify(value)} is not a string`];
    case "integer":
      return Number.isInteger(value) ? [] : [`${path}: ${JSON.stringify(value)} is not an integer`];
    default:
      throw new Error(`schemaErrors does not know type ${JSON.stringify(schema.type)}`);
  }
}

test("the validator rejects what the parameters do not allow", () => {
  const [weather, timer] = TOOLS.map((t) => t.function.parameters);
  assert.deepEqual(schemaErrors(weather, { place: "Sandy Bay" }), []);
  assert.deepEqual(schemaErrors(timer, { minutes: 10, label: "tea" }), []);
  assert.deepEqual(schemaErrors(timer, { minutes: 10 }), []);
  for (const bad of [{}, { label: "tea" }, { minutes: 2.5 }, { minutes: "10" }, { minutes: 1, label: 5 },
    { minutes: 1, place: "Sandy Bay" }, [], null]) {
    assert.notDeepEqual(schemaErrors(timer, bad), [], JSON.stringify(bad));
  }
});

// Asserts that `message` (from a choice that finished with "tool_calls") carries calls of the
// given tools whose arguments validate; returns [name, arguments] per call.
function checkCalls(message, allowed) {
  const calls = message.tool_calls ?? [];
  assert.ok(calls.length >= 1, `no tool_calls in ${JSON.stringify(message)}`);
  return calls.map((call) => {
    assert.match(call.id, /^call_[0-9a-f]{24}$/);
    assert.equal(call.type, "function");
    assert.ok(allowed.includes(call.function.name), `called ${call.function.name}, not one of ${allowed}`);
    const tool = TOOLS.find((t) => t.function.name === call.function.name);
    let args;
    try {
      args = JSON.parse(call.function.arguments);
    } catch (e) {
      assert.fail(`${call.function.name}'s arguments are not JSON (${e.message}): ${call.function.arguments}`);
    }
    assert.deepEqual(schemaErrors(tool.function.parameters, args), [],
      `${call.function.name}(${call.function.arguments})`);
    return [call.function.name, args];
  });
}

const CHOICES = [
  ["auto", "auto", TOOLS.map((t) => t.function.name)],
  ["required", "required", TOOLS.map((t) => t.function.name)],
  ["a named function", { type: "function", function: { name: "set_timer" } }, ["set_timer"]],
];

for (const [label, toolChoice, allowed] of CHOICES) {
  test(`tool_choice ${label}: the model calls a tool whose arguments validate, streamed the same`, async () => {
    const body = { model: ctx.server.model, messages: MESSAGES, tools: TOOLS, tool_choice: toolChoice,
      temperature: 0, max_tokens: 200 };
    const res = await ctx.client.chat.completions.create(body);
    const [choice] = res.choices;
    assert.equal(choice.finish_reason, "tool_calls", `the answer: ${JSON.stringify(choice.message)}`);
    const calls = checkCalls(choice.message, allowed);

    const stream = ctx.client.beta.chat.completions.stream(body);
    const streamed = (await stream.finalChatCompletion()).choices[0];
    assert.equal(streamed.finish_reason, "tool_calls", `the answer: ${JSON.stringify(streamed.message)}`);
    assert.deepEqual(checkCalls(streamed.message, allowed), calls);
    assert.equal(streamed.message.content ?? "", choice.message.content ?? "");
  });
}

testCleanShutdown(ctx);
