// Prompt caching through the official @anthropic-ai/sdk client on the embedded model:
// cache_control breakpoints with 5-minute and 1-hour TTLs, the usage that splits cache reads from
// cache writes (by TTL), a two-turn conversation streamed and not, a 5-minute hold running out
// under --debug-clock, and a 1-hour hold surviving pressure that evicts every ordinary prefix.
// A small cache (48 blocks of 16 tokens, at most half of them held) makes the pressure cheap.
import { test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { useServer, words } from "./lib/server.mjs";

const BLOCK = 16;
const ctx = useServer(["--threads", "1", "--debug-clock", "--num-blocks", "48"], { embedded: true });

const anthropic = () => new Anthropic({
  baseURL: ctx.server.origin, apiKey: "unused", maxRetries: 0, timeout: 300_000,
});
const text = (n, seed) => `${seed} ${words(n, seed)}`;
const system = (seed, ttl) => [{ type: "text", text: text(120, seed), cache_control: { type: "ephemeral", ttl } }];
const cached = (s, ttl = "5m") => ({ type: "text", text: s, cache_control: { type: "ephemeral", ttl } });

// Tokens of the chat rendered through the template: with the generation prompt (the whole
// prompt), or without (a breakpoint's prefix), as lists of ids.
async function render(systemText, messages, generationPrompt) {
  const all = [{ role: "system", content: systemText }, ...messages.map((m) => ({
    role: m.role, content: typeof m.content === "string" ? m.content : m.content.map((b) => b.text).join("\n"),
  }))];
  const r = await ctx.server.request("POST", "/tokenize",
    { body: { messages: all, add_generation_prompt: generationPrompt } });
  assert.equal(r.status, 200, r.text);
  return r.body.tokens;
}
const shared = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) ++i; return i; };

// The tokens up to each breakpoint: the prefix rendered alone, cut to what the prompt shares.
async function breakpoints(systemText, messages) {
  const whole = await render(systemText, messages, true);
  const out = [shared(await render(systemText, [], false), whole)];
  for (let i = 0; i < messages.length; ++i) {
    if (typeof messages[i].content !== "string" && messages[i].content.some((b) => b.cache_control)) {
      out.push(shared(await render(systemText, messages.slice(0, i + 1), false), whole));
    }
  }
  return { whole: whole.length, points: out };
}

function assertSplit(usage, promptTokens) {
  assert.equal(usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens,
    promptTokens, JSON.stringify(usage));
  assert.equal(usage.cache_creation.ephemeral_5m_input_tokens + usage.cache_creation.ephemeral_1h_input_tokens,
    usage.cache_creation_input_tokens, JSON.stringify(usage));
}

// Pressure: prompts that together need several times the cache, none of them held.
async function pressure(client, seed) {
  for (let i = 0; i < 6; ++i) {
    await client.messages.create({
      model: ctx.server.model, max_tokens: 2, messages: [{ role: "user", content: text(160, seed + i) }],
    });
  }
}

test("a two-turn conversation writes its breakpoints on turn 1 and reads them on turn 2", async () => {
  const client = anthropic();
  const sys = system(1, "1h");
  const turn1 = [{ role: "user", content: [cached("What sound does a cow make?")] }];
  const r1 = await client.messages.create({
    model: ctx.server.model, max_tokens: 8, temperature: 0, system: sys, messages: turn1,
  });
  const b1 = await breakpoints(sys[0].text, turn1);
  assertSplit(r1.usage, b1.whole);
  // A fresh prefix: nothing read (the template's first tokens at most), everything up to the
  // last breakpoint written, the system part for an hour and the user turn for 5 minutes.
  assert.ok(r1.usage.cache_read_input_tokens < BLOCK, JSON.stringify(r1.usage));
  assert.equal(r1.usage.cache_creation_input_tokens, b1.points[1] - r1.usage.cache_read_input_tokens);
  assert.equal(r1.usage.cache_creation.ephemeral_1h_input_tokens, b1.points[0] - r1.usage.cache_read_input_tokens);
  assert.equal(r1.usage.cache_creation.ephemeral_5m_input_tokens, b1.points[1] - b1.points[0]);

  // Turn 2, streamed: the conversation so far is read from the cache; only the new turn is
  // written.
  const turn2 = [
    { role: "user", content: "What sound does a cow make?" },
    { role: "assistant", content: r1.content[0].text },
    { role: "user", content: [cached("And a dog?")] },
  ];
  const stream = client.messages.stream({
    model: ctx.server.model, max_tokens: 8, temperature: 0, system: sys, messages: turn2,
  });
  const r2 = await stream.finalMessage();
  const b2 = await breakpoints(sys[0].text, turn2);
  assertSplit(r2.usage, b2.whole);
  assert.ok(r2.usage.cache_read_input_tokens >= Math.floor(b1.points[1] / BLOCK) * BLOCK,
    `turn 2 read ${r2.usage.cache_read_input_tokens}, turn 1 wrote up to ${b1.points[1]}`);
  assert.equal(r2.usage.cache_creation.ephemeral_1h_input_tokens, 0);
  assert.equal(r2.usage.cache_creation.ephemeral_5m_input_tokens,
    Math.max(0, b2.points[1] - r2.usage.cache_read_input_tokens));
  console.log(`turn 1: ${JSON.stringify(r1.usage)}\nturn 2: ${JSON.stringify(r2.usage)}`);

  // The same turn 2 again, not streamed: read up to its breakpoint, nothing written.
  const r3 = await client.messages.create({
    model: ctx.server.model, max_tokens: 8, temperature: 0, system: sys, messages: turn2,
  });
  assert.equal(r3.usage.cache_creation_input_tokens, 0, JSON.stringify(r3.usage));
  assert.ok(r3.usage.cache_read_input_tokens >= b2.points[1], JSON.stringify(r3.usage));
  assert.equal(r3.content[0].text, r2.content[0].text, "greedy output is the same from the cache");
});

test("a 1-hour hold survives pressure that evicts ordinary prefixes; a 5-minute one runs out", async () => {
  const client = anthropic();
  // The holds of the test before have ended; this one's fill the retained share (24 blocks):
  // the 1-hour system prompt first (14 blocks), then the 5-minute one as far as it fits.
  const clock = await ctx.server.json("POST", "/debug/clock", { advance_seconds: 3601 });
  assert.equal(clock.status, 200, clock.text);
  const long = system(2, "1h");
  const short = system(3, "5m");
  const ask = (sys) => client.messages.create({
    model: ctx.server.model, max_tokens: 2, system: sys, messages: [{ role: "user", content: "Hello?" }],
  });
  await ask(long);
  await ask(short);
  const unheld = [{ type: "text", text: text(120, 4) }];
  await ask(unheld);
  const held = (await breakpoints(long[0].text, [])).points[0];
  // Six minutes later the 5-minute hold is over; the pressure then evicts it with the rest.
  const later = await ctx.server.json("POST", "/debug/clock", { advance_seconds: 360 });
  assert.equal(later.status, 200, later.text);
  await pressure(client, 100);
  const again = await ask(long);
  assert.ok(again.usage.cache_read_input_tokens >= Math.floor(held / BLOCK) * BLOCK,
    `the 1h prefix (${held} tokens) read only ${again.usage.cache_read_input_tokens}`);
  assert.ok((await ask(short)).usage.cache_read_input_tokens < BLOCK, "the expired 5m prefix is evicted");
  assert.ok((await ask(unheld)).usage.cache_read_input_tokens < BLOCK, "the unheld prefix is evicted");
  // The held blocks are in the metrics while the hold lasts.
  const m = await ctx.server.metrics();
  assert.ok(m.get("kvserve:kv_cache_held_blocks") >= Math.floor(held / BLOCK), "held blocks gauge");
  assert.equal(m.get("kvserve:kv_cache_retained_share_blocks"), 24);
});
