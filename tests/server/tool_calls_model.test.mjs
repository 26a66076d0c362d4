// Tool calls that the embedded kvserve-tiny makes, through the official openai client at
// temperature 0: for tool_choice "required" and a named function, streamed and not, the answer
// ends with finish_reason "tool_calls", each call names one of the tools (the named one when
// named) and its arguments parse as JSON that the function's parameters accept. The streamed
// answer is assembled by the client's own ChatCompletionStream, as applications do, and equals
// the non-streamed one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { testCleanShutdown, useServer } from "./lib/server.mjs";

const ctx = useServer(["--threads", "1"], { embedded: true });

const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather forecast for a city",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", minLength: 1, maxLength: 32 },
          days: { type: "integer", minimum: 1, maximum: 7 },
        },
        required: ["city", "days"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "get_time",
      description: "The local time in a city",
      parameters: {
        type: "object",
        properties: { city: { type: "string", minLength: 1, maxLength: 32 } },
        required: ["city"],
        additionalProperties: false,
      },
    },
  },
];
const MESSAGES = [{ role: "user", content: "What is the weather in Paris?" }];

// The errors of `value` against the JSON Schema subset TOOLS use (type object/string/integer,
// properties, required, additionalProperties false, string lengths in code points, integer
// bounds); [] when it is valid.
function schemaErrors(schema, value, path = "$") {
  const errors = [];
  switch (schema.type) {
    case "object": {
      if (typeof value !== "object" || value === null || Array.isArray(value)) {
        return [`${path}: ${JSON.stringify(value)} is not an object`];
      }
      for (const name of schema.required ?? []) {
        if (!(name in value)) errors.push(`${path}: "${name}" is missing`);
      }
      for (const [name, v] of Object.entries(value)) {
        const sub = schema.properties?.[name];
        if (sub) errors.push(...schemaErrors(sub, v, `${path}.${name}`));
        else if (schema.additionalProperties === false) errors.push(`${path}: "${name}" is not a parameter`);
      }
      return errors;
    }
    case "string": {
      if (typeof value !== "string") return [`${path}: ${JSON.stringify(value)} is not a string`];
      const n = [...value].length;
      if (n < (schema.minLength ?? 0) || n > (schema.maxLength ?? Infinity)) {
        errors.push(`${path}: ${JSON.stringify(value)} has ${n} characters`);
      }
      return errors;
    }
    case "integer": {
      if (!Number.isInteger(value)) return [`${path}: ${JSON.stringify(value)} is not an integer`];
      if (value < (schema.minimum ?? -Infinity) || value > (schema.maximum ?? Infinity)) {
        errors.push(`${path}: ${value} is out of bounds`);
      }
      return errors;
    }
    default:
      throw new Error(`schemaErrors does not know type ${JSON.stringify(schema.type)}`);
  }
}

test("the validator rejects what the parameters do not allow", () => {
  const [weather, time] = TOOLS.map((t) => t.function.parameters);
  assert.deepEqual(schemaErrors(weather, { city: "Paris", days: 3 }), []);
  assert.deepEqual(schemaErrors(time, { city: "Oslo" }), []);
  for (const bad of [{ city: "Paris" }, { city: "Paris", days: 0 }, { city: "Paris", days: 2.5 },
    { city: "", days: 1 }, { city: 5, days: 1 }, { city: "Paris", days: 1, unit: "c" }, [], null]) {
    assert.notDeepEqual(schemaErrors(weather, bad), [], JSON.stringify(bad));
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
  ["required", "required", TOOLS.map((t) => t.function.name)],
  ["a named function", { type: "function", function: { name: "get_time" } }, ["get_time"]],
];

for (const [label, toolChoice, allowed] of CHOICES) {
  test(`tool_choice ${label}: the model calls a tool whose arguments validate, streamed the same`, async () => {
    const body = { model: ctx.server.model, messages: MESSAGES, tools: TOOLS, tool_choice: toolChoice,
      temperature: 0, max_tokens: 200, parallel_tool_calls: false };
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
