// The embedded default model (kvserve's own trained model, models/README.md) through the openai
// client: `kvserve serve` without --model answers in the corpus's English, chat turns end at
// <|im_end|> with finish_reason "stop", streaming writes the same text, and the second turn of a
// conversation reuses the first turn's KV. The only suite file whose checks are about words.
import { test } from "node:test";
import assert from "node:assert/strict";
import { assertUsage, collectStream, testCleanShutdown, useServer } from "./lib/server.mjs";

const ctx = useServer([], { embedded: true });

const ASK_COW = [{ role: "user", content: "What sound does a cow make?" }];

test("the served model is the embedded kvserve-tiny", async () => {
  assert.equal(ctx.server.model, "kvserve-tiny");
});

test("a chat question gets the corpus's answer and stops at the end of the turn", async () => {
  const res = await ctx.client.chat.completions.create({
    model: ctx.server.model, messages: ASK_COW, temperature: 0, max_tokens: 32 });
  const [c] = res.choices;
  assert.match(c.message.content, /moo/);
  assert.equal(c.finish_reason, "stop");
  assertUsage(res.usage);
  assert.ok(res.usage.completion_tokens < 32);
});

test("streaming writes the same text as the non-streaming answer", async () => {
  const body = { model: ctx.server.model, messages: ASK_COW, temperature: 0, max_tokens: 32 };
  const whole = await ctx.client.chat.completions.create(body);
  const chunks = await collectStream(await ctx.client.chat.completions.create({ ...body, stream: true }));
  const text = chunks.map((ch) => ch.choices[0]?.delta?.content ?? "").join("");
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");
});

test("a story prompt continues as a story", async () => {
  const res = await ctx.client.completions.create({
    model: ctx.server.model, prompt: "Once upon a time, there was a little", temperature: 0, max_tokens: 24 });
  assert.match(res.choices[0].text, /^ \w+ named [A-Z][a-z]+\./);
});

test("the second turn of a conversation is answered from cache and still makes sense", async () => {
  const first = await ctx.client.chat.completions.create({
    model: ctx.server.model, temperature: 0, max_tokens: 32,
    messages: [{ role: "user", content: "What is the opposite of big?" }] });
  assert.match(first.choices[0].message.content, /small/);
  const second = await ctx.client.chat.completions.create({
    model: ctx.server.model, temperature: 0, max_tokens: 32,
    messages: [{ role: "user", content: "What is the opposite of big?" },
      first.choices[0].message,
      { role: "user", content: "What color is the sky?" }] });
  assert.match(second.choices[0].message.content, /blue/);
  // Whole blocks (16 tokens by default) of the first turn's prompt and answer are reused.
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > 0 && cached >= first.usage.prompt_tokens - 15,
    `cached ${cached} of ${second.usage.prompt_tokens} (first turn: ${first.usage.prompt_tokens})`);
});

testCleanShutdown(ctx);
