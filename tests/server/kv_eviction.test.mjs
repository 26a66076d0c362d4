// Eviction inside a sequence through the official openai client: the kv_eviction request
// extension (a policy name or an object) lets a request run past its KV budget; /metrics counts
// the evicted tokens per policy and the compactions of h2o and snapkv; bad settings are 400s
// that name the field.
import { test } from "node:test";
import assert from "node:assert/strict";
import { testCleanShutdown, useServer, words } from "./lib/server.mjs";

const ctx = useServer(["--num-blocks", "64"]);

function completion(kv_eviction, max_tokens = 160) {
  return ctx.client.completions.create({
    model: ctx.server.model, prompt: words(100, 3), max_tokens, temperature: 0, ignore_eos: true,
    kv_eviction,
  });
}

test("each policy runs a request past its budget, greedy and repeatable", async () => {
  for (const policy of ["window", "sinks", "h2o", "snapkv"]) {
    const kv_eviction = { policy, budget: 64, evict_batch: 32 };
    const first = await completion(kv_eviction);
    assert.equal(first.usage.completion_tokens, 160, policy);
    const again = await completion(kv_eviction);
    assert.equal(again.choices[0].text, first.choices[0].text, policy);
  }
  const m = await ctx.server.metrics();
  for (const policy of ["window", "sinks", "h2o", "snapkv"]) {
    // 100 prompt tokens + 159 computed = 259 slots through a budget of 64, 32 at a time: 224 go.
    assert.equal(m.get("kvserve:kv_evicted_tokens_total", { policy }), 2 * 224, policy);
  }
  assert.equal(m.get("kvserve:kv_compactions_total"), 2 * 2 * 7);
  assert.ok(m.get("kvserve:kv_compacted_vectors_total") > 0);
});

test("a streamed chat completion evicts with sinks", async () => {
  const stream = await ctx.client.chat.completions.create({
    model: ctx.server.model, messages: [{ role: "user", content: words(40, 5) }],
    max_tokens: 120, temperature: 0, ignore_eos: true, stream: true,
    kv_eviction: { policy: "sinks", budget: 64 },
  });
  let tokens = 0;
  for await (const chunk of stream) tokens += chunk.choices[0]?.delta?.content ? 1 : 0;
  assert.ok(tokens > 0);
});

test("bad eviction settings are 400s that name the field", async () => {
  const cases = [
    [{ policy: "snapkv", budget: 64, evict_batch: 16 }, /snapkv window \(32\) must not be longer than the kv evict batch/],
    [{ policy: "h2o", budget: 64, h2o_recent_fraction: 1.5 }, /h2o_recent_fraction/],
    [{ policy: "lru", budget: 64 }, /unknown policy 'lru'/],
    [{ policy: "h2o", budget: 64, snapkv_window: 0 }, /snapkv_window/],
  ];
  for (const [kv_eviction, message] of cases) {
    await assert.rejects(completion(kv_eviction, 4), (e) => {
      assert.equal(e.status, 400, JSON.stringify(kv_eviction));
      assert.match(e.message, message);
      return true;
    });
  }
});

testCleanShutdown(ctx);
