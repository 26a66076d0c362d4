// POST /v1/completions through the openai client: response shape, usage, greedy determinism,
// streaming, n > 1, several prompts, token-id prompts, stop strings, seeds, logprobs and echo.
// The embedded default model's text is gibberish, so every check is about structure, counts,
// determinism and consistency between requests, never about particular words.
import { test } from "node:test";
import assert from "node:assert/strict";
import { assertUsage, collectStream, testCleanShutdown, useServer, words } from "./lib/server.mjs";

const ctx = useServer();
const PROMPT = "Once upon a time there was a little girl who";

function greedy(extra = {}) {
  return ctx.client.completions.create({
    model: ctx.server.model, prompt: PROMPT, temperature: 0, max_tokens: 24, ignore_eos: true, ...extra,
  });
}

test("a completion has the text_completion shape and exact usage counts", async () => {
  const res = await greedy({ max_tokens: 8 });
  assert.match(res.id, /^cmpl-/);
  assert.equal(res.object, "text_completion");
  assert.ok(Number.isInteger(res.created) && res.created > 1.6e9, `created = ${res.created}`);
  assert.equal(res.model, ctx.server.model);
  assert.equal(res.choices.length, 1);
  const [c] = res.choices;
  assert.equal(c.index, 0);
  assert.equal(typeof c.text, "string");
  assert.ok(c.text.length > 0, "empty text for 8 generated tokens");
  assert.equal(c.logprobs, null);
  assert.equal(c.finish_reason, "length");
  assertUsage(res.usage);
  assert.equal(res.usage.completion_tokens, 8);
  assert.equal(res.usage.prompt_tokens, await ctx.server.tokenCount(PROMPT));
});

test("max_tokens defaults to 16 for completions", async () => {
  const res = await ctx.client.completions.create({
    model: ctx.server.model, prompt: PROMPT, temperature: 0, ignore_eos: true });
  assert.equal(res.usage.completion_tokens, 16);
  assert.equal(res.choices[0].finish_reason, "length");
});

test("temperature 0 is greedy: the same request gives the same text", async () => {
  const a = await greedy();
  const b = await greedy();
  assert.equal(b.choices[0].text, a.choices[0].text);
  assert.equal(a.usage.completion_tokens, 24);
});

test("the model field may be omitted", async () => {
  const res = await ctx.server.request("POST", "/v1/completions",
    { body: { prompt: PROMPT, max_tokens: 4, temperature: 0, ignore_eos: true } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.model, ctx.server.model);
  assert.equal(res.body.usage.completion_tokens, 4);
});

test("streaming gives the same text as the non-streamed greedy completion, then usage", async () => {
  const whole = await greedy();
  const stream = await ctx.client.completions.create({
    model: ctx.server.model, prompt: PROMPT, temperature: 0, max_tokens: 24, ignore_eos: true,
    stream: true, stream_options: { include_usage: true } });
  const chunks = await collectStream(stream);
  assert.ok(chunks.length >= 3, `only ${chunks.length} chunks`);
  const usageChunk = chunks.at(-1);
  assert.deepEqual(usageChunk.choices, []);
  assertUsage(usageChunk.usage);
  assert.equal(usageChunk.usage.completion_tokens, 24);
  assert.equal(usageChunk.usage.prompt_tokens, whole.usage.prompt_tokens);
  let text = "";
  const finishes = [];
  for (const chunk of chunks.slice(0, -1)) {
    assert.equal(chunk.object, "text_completion");
    assert.equal(chunk.id, chunks[0].id);
    assert.equal(chunk.usage, null, "usage must be null on every chunk but the last");
    for (const c of chunk.choices) {
      assert.equal(c.index, 0);
      text += c.text;
      if (c.finish_reason) finishes.push(c.finish_reason);
    }
  }
  assert.deepEqual(finishes, ["length"]);
  assert.equal(text, whole.choices[0].text);
});

test("n > 1 gives choices 0..n-1 and completion_tokens summed over them", async () => {
  const n = 4;
  const res = await ctx.client.completions.create({
    model: ctx.server.model, prompt: PROMPT, n, temperature: 1, seed: 7, max_tokens: 10,
    ignore_eos: true, logprobs: 0 });
  assert.deepEqual(res.choices.map((c) => c.index).sort((a, b) => a - b), [0, 1, 2, 3]);
  let sum = 0;
  for (const c of res.choices) {
    assert.equal(c.finish_reason, "length");
    assert.equal(c.logprobs.tokens.length, 10);
    sum += c.logprobs.tokens.length;
  }
  assert.equal(res.usage.completion_tokens, sum);
  assert.equal(res.usage.prompt_tokens, await ctx.server.tokenCount(PROMPT));
  const distinct = new Set(res.choices.map((c) => c.text));
  assert.ok(distinct.size > 1, "all n samples at temperature 1 are identical");
});

test("n > 1 streams every choice index to its own finish_reason", async () => {
  const n = 3;
  const stream = await ctx.client.completions.create({
    model: ctx.server.model, prompt: PROMPT, n, temperature: 1, seed: 11, max_tokens: 6,
    ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  const chunks = await collectStream(stream);
  const finish = new Map();
  for (const chunk of chunks) {
    for (const c of chunk.choices) {
      assert.ok(Number.isInteger(c.index) && c.index >= 0 && c.index < n, `index ${c.index}`);
      assert.ok(!finish.has(c.index), `choice ${c.index} continued after its finish_reason`);
      if (c.finish_reason) finish.set(c.index, c.finish_reason);
    }
  }
  assert.deepEqual([...finish.keys()].sort(), [0, 1, 2]);
  assert.ok([...finish.values()].every((r) => r === "length"));
  assert.equal(chunks.at(-1).usage.completion_tokens, n * 6);
});

test("several prompts give len(prompts) x n choices with index = prompt * n + sample", async () => {
  const prompts = [PROMPT, words(40, 3)];
  const res = await ctx.client.completions.create({
    model: ctx.server.model, prompt: prompts, n: 2, temperature: 0, max_tokens: 12, ignore_eos: true });
  assert.equal(res.choices.length, 4);
  const byIndex = new Map(res.choices.map((c) => [c.index, c.text]));
  assert.deepEqual([...byIndex.keys()].sort(), [0, 1, 2, 3]);
  for (const [p, prompt] of prompts.entries()) {
    const single = await ctx.client.completions.create({
      model: ctx.server.model, prompt, temperature: 0, max_tokens: 12, ignore_eos: true });
    assert.equal(byIndex.get(p * 2), single.choices[0].text, `prompt ${p}, sample 0`);
    assert.equal(byIndex.get(p * 2 + 1), single.choices[0].text, `prompt ${p}, sample 1`);
  }
  const counts = await Promise.all(prompts.map((p) => ctx.server.tokenCount(p)));
  assert.equal(res.usage.prompt_tokens, counts[0] + counts[1]);
  assert.equal(res.usage.completion_tokens, 4 * 12);
});

test("a prompt of token ids from /tokenize completes like the same prompt as text", async () => {
  const tok = await ctx.server.request("POST", "/tokenize", { body: { prompt: PROMPT } });
  assert.equal(tok.status, 200, tok.text);
  const fromIds = await ctx.client.completions.create({
    model: ctx.server.model, prompt: tok.body.tokens, temperature: 0, max_tokens: 12, ignore_eos: true });
  const fromText = await greedy({ max_tokens: 12 });
  assert.equal(fromIds.usage.prompt_tokens, tok.body.tokens.length);
  assert.equal(fromIds.choices[0].text, fromText.choices[0].text);
  const batch = await ctx.client.completions.create({
    model: ctx.server.model, prompt: [tok.body.tokens, tok.body.tokens.slice(0, 4)], temperature: 0,
    max_tokens: 3, ignore_eos: true });
  assert.equal(batch.choices.length, 2);
  assert.equal(batch.usage.prompt_tokens, tok.body.tokens.length + 4);
});

// Picks a stop string from the middle of `text`: a short run that starts after the first quarter.
function middleStop(text) {
  for (let len = 4; len >= 2; --len) {
    for (let start = Math.floor(text.length / 3); start + len <= text.length; ++start) {
      const s = text.slice(start, start + len);
      if (s.trim().length === len && text.indexOf(s) > 0) return s;
    }
  }
  return undefined;
}

test("a stop string ends the text just before it with finish_reason stop", async () => {
  const free = (await greedy({ max_tokens: 40 })).choices[0].text;
  const stop = middleStop(free);
  assert.ok(stop, `no usable stop string in ${JSON.stringify(free)}`);
  const expected = free.slice(0, free.indexOf(stop));
  const stopped = await greedy({ max_tokens: 40, stop });
  assert.equal(stopped.choices[0].text, expected, `stop = ${JSON.stringify(stop)}`);
  assert.equal(stopped.choices[0].finish_reason, "stop");
  assert.ok(stopped.usage.completion_tokens < 40);
  // As one of several stop strings, next to ones that never occur.
  const several = await greedy({ max_tokens: 40, stop: ["\u0000never", stop, "zzzzzzzz"] });
  assert.equal(several.choices[0].text, expected);
  assert.equal(several.choices[0].finish_reason, "stop");
  // And streamed: the pieces add up to the same prefix.
  const stream = await greedy({ max_tokens: 40, stop, stream: true });
  let text = "";
  let finish;
  for await (const chunk of stream) {
    for (const c of chunk.choices) { text += c.text; finish = c.finish_reason ?? finish; }
  }
  assert.equal(text, expected);
  assert.equal(finish, "stop");
});

test("a stop string that never occurs leaves finish_reason length", async () => {
  const res = await greedy({ max_tokens: 12, stop: ["\u0000absent"] });
  assert.equal(res.choices[0].finish_reason, "length");
  assert.equal(res.usage.completion_tokens, 12);
});

test("the same seed at temperature 1 gives the same text; different seeds differ", async () => {
  const sample = (seed) => ctx.client.completions.create({
    model: ctx.server.model, prompt: PROMPT, temperature: 1, seed, max_tokens: 16, ignore_eos: true })
    .then((r) => r.choices[0].text);
  const first = await sample(1234);
  assert.equal(await sample(1234), first);
  const others = [];
  for (const seed of [1, 2, 3, 4, 5]) others.push(await sample(seed));
  assert.ok(new Set([first, ...others]).size > 1, "six different seeds all gave the same text");
});

test("logprobs: 3 gives per-token arrays with at most 3 alternatives, greedy token on top", async () => {
  const res = await greedy({ max_tokens: 12, logprobs: 3 });
  const [c] = res.choices;
  const lp = c.logprobs;
  assert.ok(lp, "logprobs missing");
  const n = res.usage.completion_tokens;
  assert.equal(n, 12);
  for (const key of ["tokens", "token_logprobs", "top_logprobs", "text_offset"]) {
    assert.ok(Array.isArray(lp[key]), `${key} is not an array`);
    assert.equal(lp[key].length, n, `${key} has ${lp[key].length} entries for ${n} tokens`);
  }
  for (let i = 0; i < n; ++i) {
    assert.equal(typeof lp.tokens[i], "string");
    assert.ok(lp.token_logprobs[i] <= 0, `token_logprobs[${i}] = ${lp.token_logprobs[i]}`);
    const top = lp.top_logprobs[i];
    const values = Object.values(top);
    assert.ok(values.length >= 1 && values.length <= 3, `top_logprobs[${i}] has ${values.length} entries`);
    assert.ok(values.every((v) => typeof v === "number" && v <= 0));
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(Math.max(...values) - lp.token_logprobs[i]) < 1e-4,
      `token ${i}: chosen ${lp.token_logprobs[i]}, best alternative ${Math.max(...values)}`);
    if (i > 0) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1], "text_offset decreases");
  }
  assertOffsetsIndexText(c.text, lp);
});

// text_offset[i] is where tokens[i] starts in the returned text.
function assertOffsetsIndexText(text, lp) {
  for (const [i, token] of lp.tokens.entries()) {
    if (token.includes("\ufffd")) continue;
    const at = lp.text_offset[i];
    assert.equal(text.slice(at, at + token.length), token,
      `token ${i} ${JSON.stringify(token)} is not at text_offset ${at} of ${JSON.stringify(text)}`);
  }
}

test("with echo, text_offset still points into the returned (echoed) text", async () => {
  const res = await greedy({ max_tokens: 6, echo: true, logprobs: 1 });
  const { text, logprobs } = res.choices[0];
  assert.ok(text.startsWith(PROMPT));
  assert.ok(logprobs.tokens.length >= 6);
  assertOffsetsIndexText(text, logprobs);
});

test("echo prepends the prompt to the completion", async () => {
  const plain = await greedy({ max_tokens: 8 });
  const echoed = await greedy({ max_tokens: 8, echo: true });
  assert.equal(echoed.choices[0].text, PROMPT + plain.choices[0].text);
  assert.equal(echoed.usage.completion_tokens, 8);
});

test("stop_token_ids and ignore_eos are accepted extensions", async () => {
  const res = await greedy({ max_tokens: 6, stop_token_ids: [2], top_k: 5, min_p: 0.01,
                             repetition_penalty: 1.1, priority: 3, cache_salt: "s" });
  assert.equal(res.usage.completion_tokens, 6);
});

test("unknown fields are ignored", async () => {
  const res = await greedy({ max_tokens: 4, definitely_not_a_field: { x: 1 } });
  assert.equal(res.usage.completion_tokens, 4);
});

test("n up to --max-num-seqs (64 by default) gives n choices; more is a 400 naming n", async () => {
  const res = await ctx.client.completions.create({
    model: ctx.server.model, prompt: PROMPT, n: 64, max_tokens: 2, ignore_eos: true, seed: 1 });
  assert.equal(res.choices.length, 64);
  assert.deepEqual(res.choices.map((c) => c.index).sort((a, b) => a - b), [...Array(64).keys()]);
  assert.equal(res.usage.completion_tokens, 128);
  await assert.rejects(
    ctx.client.completions.create({ model: ctx.server.model, prompt: PROMPT, n: 65, max_tokens: 2 }),
    (err) => err.status === 400 && err.error?.param === "n");
});

test("sampled byte tokens still give valid UTF-8, and the stream adds up to the same text", async () => {
  // At temperature 2 the model also samples byte tokens (partial UTF-8 sequences).
  const body = { prompt: "hi", max_tokens: 300, temperature: 2, seed: 5, ignore_eos: true };
  const res = await fetch(`${ctx.server.origin}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  const bytes = new Uint8Array(await res.arrayBuffer());
  const whole = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  const streamed = await fetch(`${ctx.server.origin}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true }) });
  const sse = new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array(await streamed.arrayBuffer()));
  let text = "";
  for (const line of sse.split("\n")) {
    if (line.startsWith("data: {")) text += JSON.parse(line.slice(6)).choices.map((c) => c.text).join("");
  }
  assert.equal(text, whole.choices[0].text);
});

test("echo returns a multi-byte prompt unchanged", async () => {
  const prompt = "h\u00e9llo \u{1F600} w\u00f6rld \u4e16\u754c";
  const res = await ctx.client.completions.create({
    model: ctx.server.model, prompt, echo: true, max_tokens: 2, temperature: 0, ignore_eos: true });
  assert.ok(res.choices[0].text.startsWith(prompt), JSON.stringify(res.choices[0].text));
});

test("streamed logprobs: one entry per token across the chunks", async () => {
  const stream = await greedy({ max_tokens: 10, logprobs: 2, stream: true });
  const whole = await greedy({ max_tokens: 10, logprobs: 2 });
  const tokens = [];
  const lps = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (!c.logprobs) continue;
      tokens.push(...c.logprobs.tokens);
      lps.push(...c.logprobs.token_logprobs);
      assert.equal(c.logprobs.top_logprobs.length, c.logprobs.tokens.length);
    }
  }
  assert.equal(tokens.length, 10);
  assert.deepEqual(tokens, whole.choices[0].logprobs.tokens);
  for (const [i, lp] of lps.entries()) {
    assert.ok(Math.abs(lp - whole.choices[0].logprobs.token_logprobs[i]) < 1e-4);
  }
});

testCleanShutdown(ctx);
