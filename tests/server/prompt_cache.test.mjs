// Prompt caching as the providers' APIs expose it, through the official openai client and raw
// HTTP: explicit caches (/v1/caches, cached_content) kept apart per API key, OpenAI's
// prompt_cache_key and prompt_cache_retention, DeepSeek's hit/miss usage fields, and holds that
// outlive pressure which evicts ordinary prefixes. TTLs run out under --debug-clock (POST
// /debug/clock moves the clock forward), so no test waits for one.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Server, assertUsage, words } from "./lib/server.mjs";

const BLOCK = 16;
// words() repeats with a short period: a number in front keeps prompts apart from the start.
const text = (n, seed) => `${seed} ${words(n, seed)}`;
let server;  // keys k1 and k2: two tenants
let other;   // a client of tenant k2

before(async () => {
  server = await Server.start(["--debug-clock", "--api-key", "k2"], { apiKey: "k1" });
  other = server.client({ apiKey: "k2" });
});
after(() => server?.kill());

const asK2 = { headers: { authorization: "Bearer k2" }, auth: false };
const advance = async (seconds) => {
  const r = await server.json("POST", "/debug/clock", { advance_seconds: seconds });
  assert.equal(r.status, 200, r.text);
};

test("an explicit cache is made, listed, used, extended and deleted by its tenant only", async () => {
  const prompt = text(100, 11);
  const made = await server.json("POST", "/v1/caches", { prompt, ttl_seconds: 600 });
  assert.equal(made.status, 200, made.text);
  const cache = made.body;
  assert.match(cache.id, /^cache_[0-9a-f]{24}$/);
  assert.equal(cache.object, "cache");
  assert.equal(cache.model, server.model);
  assert.equal(cache.tokens, await server.tokenCount(prompt));
  assert.equal(cache.cached_tokens, Math.floor(cache.tokens / BLOCK) * BLOCK);
  assert.equal(cache.expires_at - cache.created_at, 600);

  const list = await server.json("GET", "/v1/caches");
  assert.deepEqual(list.body.data.map((c) => c.id), [cache.id]);
  // Another key sees nothing, and can neither read, use, extend nor delete it.
  assert.deepEqual((await server.json("GET", "/v1/caches", undefined, asK2)).body.data, []);
  for (const [method, body] of [["GET"], ["PATCH", { ttl_seconds: 60 }], ["DELETE"]]) {
    const r = await server.json(method, `/v1/caches/${cache.id}`, body, asK2);
    assert.equal(r.status, 404, `${method}: ${r.text}`);
    assert.equal(r.body.error.code, "cache_not_found");
  }
  await assert.rejects(
    other.completions.create({ model: server.model, prompt: " more", max_tokens: 1, cached_content: cache.id }),
    (e) => e.status === 404 && e.param === "cached_content");

  // The owner's request starts with the cache's prompt, whose held blocks are hits.
  const client = server.client();
  const own = " and then the story went on";
  const r = await client.completions.create({
    model: server.model, prompt: own, max_tokens: 4, temperature: 0, cached_content: cache.id,
  });
  assertUsage(r.usage);
  assert.equal(r.usage.prompt_tokens, cache.tokens + (await server.tokenCount(own)) - 1);  // one BOS
  assert.ok(r.usage.prompt_tokens_details.cached_tokens >= cache.cached_tokens,
    JSON.stringify(r.usage));
  // The same text without the cache gives the same greedy output.
  const plain = await client.completions.create({
    model: server.model, prompt: prompt + own, max_tokens: 4, temperature: 0,
  });
  assert.equal(plain.choices[0].text, r.choices[0].text);

  const patched = await server.json("PATCH", `/v1/caches/${cache.id}`, { ttl_seconds: 7200 });
  assert.equal(patched.status, 200, patched.text);
  assert.ok(patched.body.expires_at >= cache.created_at + 7200);
  await advance(3600);  // past the first TTL, within the new one
  assert.equal((await server.json("GET", `/v1/caches/${cache.id}`)).status, 200);

  const deleted = await server.json("DELETE", `/v1/caches/${cache.id}`);
  assert.deepEqual(deleted.body, { id: cache.id, object: "cache.deleted", deleted: true });
  assert.equal((await server.json("GET", `/v1/caches/${cache.id}`)).status, 404);
  assert.equal((await server.json("DELETE", `/v1/caches/${cache.id}`)).status, 404);
});

test("a chat cache leads the messages of the requests that name it, and expires", async () => {
  const system = { role: "system", content: text(60, 12) };
  const made = await server.json("POST", "/v1/caches", { messages: [system], ttl_seconds: 120 });
  assert.equal(made.status, 200, made.text);
  const client = server.client();
  const user = { role: "user", content: "Tell me about the water." };
  const withCache = await client.chat.completions.create({
    model: server.model, messages: [user], max_tokens: 6, temperature: 0, cached_content: made.body.id,
  });
  const whole = await client.chat.completions.create({
    model: server.model, messages: [system, user], max_tokens: 6, temperature: 0, cache_salt: "fresh",
  });
  assert.equal(withCache.usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(withCache.choices[0].message.content, whole.choices[0].message.content);
  assert.ok(withCache.usage.prompt_tokens_details.cached_tokens >= made.body.cached_tokens);
  // A chat cache does not go with /v1/completions.
  await assert.rejects(
    client.completions.create({ model: server.model, prompt: "x", max_tokens: 1, cached_content: made.body.id }),
    (e) => e.status === 400 && e.param === "cached_content");
  await advance(121);
  assert.equal((await server.json("GET", `/v1/caches/${made.body.id}`)).status, 404);
  await assert.rejects(
    client.chat.completions.create({ model: server.model, messages: [user], max_tokens: 1, cached_content: made.body.id }),
    (e) => e.status === 404);
});

test("bad cache requests are refused with errors naming the field", async () => {
  const cases = [
    [{ prompt: "a", ttl_seconds: 0 }, "ttl_seconds"],
    [{ prompt: "a", ttl_seconds: 1.5 }, "ttl_seconds"],
    [{ prompt: "a", ttl_seconds: 31 * 86400 }, "ttl_seconds"],
    [{ prompt: "a", messages: [{ role: "user", content: "b" }] }, "prompt"],
    [{}, "prompt"],
    [{ prompt: [1, "x"] }, "prompt"],
    [{ messages: [{ role: "robot", content: "b" }] }, "messages[0].role"],
    [{ prompt: "a", cache_salt: 3 }, "cache_salt"],
  ];
  for (const [body, param] of cases) {
    const r = await server.json("POST", "/v1/caches", body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.body.error.param, param, JSON.stringify(body));
  }
  const model = await server.json("POST", "/v1/caches", { model: "other", prompt: "a" });
  assert.equal(model.status, 404);
  assert.equal((await server.json("PATCH", "/v1/caches/cache_x", {})).status, 400);
  const put = await server.json("PUT", "/v1/caches", {});
  assert.equal(put.status, 405);
  assert.equal(put.headers.allow, "GET, POST");
  const unknown = await server.client().completions.create({
    model: server.model, prompt: "x", max_tokens: 1, cached_content: "cache_000000000000000000000000",
  }).catch((e) => e);
  assert.equal(unknown.status, 404);
});

test("prompt_cache_key comes back, and usage carries DeepSeek's hit and miss counts", async () => {
  const client = server.client();
  const messages = [{ role: "user", content: text(50, 13) }];
  const first = await client.chat.completions.create({
    model: server.model, messages, max_tokens: 2, prompt_cache_key: "user-42",
  });
  assert.equal(first.prompt_cache_key, "user-42");
  const second = await client.chat.completions.create({ model: server.model, messages, max_tokens: 2 });
  assert.equal(second.prompt_cache_key, undefined);
  for (const r of [first, second]) {
    assert.equal(r.usage.prompt_cache_hit_tokens, r.usage.prompt_tokens_details.cached_tokens);
    assert.equal(r.usage.prompt_cache_hit_tokens + r.usage.prompt_cache_miss_tokens, r.usage.prompt_tokens);
  }
  assert.ok(second.usage.prompt_cache_hit_tokens > 0);
  await assert.rejects(
    client.chat.completions.create({ model: server.model, messages, max_tokens: 1, prompt_cache_retention: "1w" }),
    (e) => e.status === 400 && e.param === "prompt_cache_retention");
});

test("two keys never share cached KV", async () => {
  const messages = [{ role: "user", content: text(80, 14) }];
  const ask = (client) => client.chat.completions.create({ model: server.model, messages, max_tokens: 1 });
  await ask(server.client());
  const a = await ask(server.client());
  const b = await ask(other);
  const again = await ask(other);
  const full = a.usage.prompt_tokens - BLOCK;
  assert.ok(a.usage.prompt_tokens_details.cached_tokens >= full, JSON.stringify(a.usage));
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, 0, "k2 must not hit k1's blocks");
  assert.ok(again.usage.prompt_tokens_details.cached_tokens >= full, JSON.stringify(again.usage));
});

// A small cache (32 blocks of 16 tokens, half of it for holds): a held prompt outlives traffic
// that evicts every ordinary prefix, until its TTL runs out.
test("a prompt held for 24h survives pressure that evicts ordinary prefixes; a full share is a 409", async () => {
  const small = await Server.start(["--debug-clock", "--num-blocks", "32", "--max-retained-fraction", "0.5"]);
  try {
    const client = small.client();
    const run = (prompt, extra = {}) => client.completions.create({
      model: small.model, prompt, max_tokens: 1, ...extra });
    const held = text(100, 20);
    const ordinary = text(100, 21);
    await run(held, { prompt_cache_retention: "24h" });
    await run(ordinary);
    for (let i = 0; i < 8; ++i) await run(text(100, 30 + i));  // 8 x 7 blocks: more than the cache
    const heldAgain = await run(held);
    const ordinaryAgain = await run(ordinary);
    const n = await small.tokenCount(held);
    assert.ok(heldAgain.usage.prompt_tokens_details.cached_tokens >= Math.floor((n - 1) / BLOCK) * BLOCK,
      JSON.stringify(heldAgain.usage));
    // (Only a few first tokens, which the prompts share, may still be found.)
    assert.ok(ordinaryAgain.usage.prompt_tokens_details.cached_tokens < BLOCK);
    // An explicit cache that would take holds past the share (16 blocks) is refused.
    const big = await small.json("POST", "/v1/caches", { prompt: text(300, 40) });
    assert.equal(big.status, 409, big.text);
    assert.equal(big.body.error.code, "cache_full");
    assert.match(big.body.error.message, /retained share/);
    // A day later the hold is over: the prompt is an ordinary prefix again.
    await small.json("POST", "/debug/clock", { advance_seconds: 86401 });
    for (let i = 0; i < 8; ++i) await run(text(100, 50 + i));
    assert.ok((await run(held)).usage.prompt_tokens_details.cached_tokens < BLOCK);
  } finally {
    small.kill();
  }
});
