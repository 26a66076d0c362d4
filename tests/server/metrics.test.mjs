// /metrics: every documented series, histogram structure, counters that add up to what the
// requests did, and the KV pool returning to idle after clients disconnect — one abrupt raw
// disconnect, then 32 concurrent streaming openai clients of which every 4th aborts early.
import { test } from "node:test";
import assert from "node:assert/strict";
import { openStream, testCleanShutdown, useServer, words } from "./lib/server.mjs";

const ctx = useServer();

const DOCUMENTED = {
  "kvserve:kv_cache_usage_perc": "gauge",
  "kvserve:kv_cache_blocks": "gauge",
  "kvserve:kv_cache_blocks_total": "gauge",
  "kvserve:kv_cache_bytes_per_token": "gauge",
  "kvserve:kv_cache_capacity_tokens": "gauge",
  "kvserve:cache_config_info": "gauge",
  "kvserve:prefix_cache_queries_total": "counter",
  "kvserve:prefix_cache_hits_total": "counter",
  "kvserve:prefix_cache_evictions_total": "counter",
  "kvserve:kv_cache_held_blocks": "gauge",
  "kvserve:kv_cache_retained_share_blocks": "gauge",
  "kvserve:explicit_caches": "gauge",
  "kvserve:kv_tier_retained_blocks_total": "counter",
  "kvserve:num_requests_running": "gauge",
  "kvserve:num_requests_waiting": "gauge",
  "kvserve:num_preemptions_total": "counter",
  "kvserve:prompt_tokens_total": "counter",
  "kvserve:generation_tokens_total": "counter",
  "kvserve:request_success_total": "counter",
  "kvserve:requests_rejected_total": "counter",
  "kvserve:time_to_first_token_seconds": "histogram",
  "kvserve:inter_token_latency_seconds": "histogram",
  "kvserve:e2e_request_latency_seconds": "histogram",
  "kvserve:request_queue_time_seconds": "histogram",
  "kvserve:request_prefill_time_seconds": "histogram",
  "kvserve:request_decode_time_seconds": "histogram",
};

const finished = (m, reason) => m.get("kvserve:request_success_total", { finished_reason: reason }) ?? 0;

function isIdle(m) {
  return m.get("kvserve:num_requests_running") === 0 && m.get("kvserve:num_requests_waiting") === 0 &&
    m.get("kvserve:kv_cache_blocks", { state: "in_use" }) === 0;
}

function assertIdlePool(m) {
  const total = m.get("kvserve:kv_cache_blocks_total");
  const free = m.get("kvserve:kv_cache_blocks", { state: "free" });
  const cached = m.get("kvserve:kv_cache_blocks", { state: "cached" });
  assert.ok(total > 0, `kv_cache_blocks_total = ${total}`);
  assert.equal(free + cached, total, `free ${free} + cached ${cached} != total ${total}`);
  assert.equal(m.get("kvserve:kv_cache_usage_perc"), 0);
}

test("/metrics serves every documented metric, typed, labelled with model_name", async () => {
  // One finished request first, so that every histogram has observations.
  await ctx.client.completions.create({ model: ctx.server.model, prompt: "hello", max_tokens: 4, ignore_eos: true });
  const res = await ctx.server.request("GET", "/metrics", { auth: false });
  assert.equal(res.status, 200);
  assert.match(res.headers["content-type"], /^text\/plain/);
  const m = await ctx.server.metrics();
  for (const [name, type] of Object.entries(DOCUMENTED)) {
    const declared = m.types.get(name) ?? m.types.get(name.replace(/_total$/, ""));
    assert.equal(declared, type, `# TYPE of ${name}`);
    const series = type === "histogram" ? m.all(`${name}_count`) : m.all(name);
    assert.ok(series.length > 0, `no samples of ${name}`);
  }
  for (const s of m.samples.filter((x) => x.name.startsWith("kvserve:"))) {
    assert.equal(s.labels.model_name, ctx.server.model, `${s.name} ${JSON.stringify(s.labels)}`);
  }
  for (const state of ["free", "cached", "in_use"]) {
    assert.ok(m.get("kvserve:kv_cache_blocks", { state }) !== undefined, `kv_cache_blocks{state="${state}"}`);
  }
  const perc = m.get("kvserve:kv_cache_usage_perc");
  assert.ok(perc >= 0 && perc <= 1);
});

test("histograms have cumulative _bucket series ending in +Inf = _count, and _sum", async () => {
  const m = await ctx.server.metrics();
  for (const [name, type] of Object.entries(DOCUMENTED)) {
    if (type !== "histogram") continue;
    const buckets = m.all(`${name}_bucket`);
    assert.ok(buckets.length >= 2, `${name}_bucket`);
    const les = buckets.map((b) => b.labels.le);
    assert.ok(les.every((le) => le !== undefined), `${name}_bucket without le`);
    assert.equal(les.at(-1), "+Inf");
    const bounds = les.map((le) => (le === "+Inf" ? Infinity : Number(le)));
    for (let i = 1; i < buckets.length; ++i) {
      assert.ok(bounds[i] > bounds[i - 1], `${name}: le not increasing`);
      assert.ok(buckets[i].value >= buckets[i - 1].value, `${name}: buckets not cumulative`);
    }
    const count = m.get(`${name}_count`);
    assert.equal(buckets.at(-1).value, count);
    assert.ok(count >= 1, `${name}_count = ${count}`);
    const sum = m.get(`${name}_sum`);
    assert.ok(Number.isFinite(sum) && sum >= 0, `${name}_sum = ${sum}`);
  }
});

test("counters add up to a request's prompt and generated tokens and its finish reason", async () => {
  const prompt = words(30, 9);
  const before = await ctx.server.metrics();
  const res = await ctx.client.completions.create({
    model: ctx.server.model, prompt, max_tokens: 9, temperature: 0, ignore_eos: true });
  const after = await ctx.server.waitForMetrics(
    (m) => finished(m, "length") === finished(before, "length") + 1, { what: "the request counted" });
  const delta = (name) => after.get(name) - before.get(name);
  assert.equal(delta("kvserve:prompt_tokens_total"), res.usage.prompt_tokens);
  assert.equal(delta("kvserve:generation_tokens_total"), 9);
  assert.equal(delta("kvserve:e2e_request_latency_seconds_count"), 1);
  assert.equal(delta("kvserve:time_to_first_token_seconds_count"), 1);
  // TTFT splits into queue + prefill, and E2E into TTFT + decode, for this one request.
  for (const part of ["queue", "prefill", "decode"]) {
    assert.equal(delta(`kvserve:request_${part}_time_seconds_count`), 1, part);
    assert.ok(delta(`kvserve:request_${part}_time_seconds_sum`) >= 0, part);
  }
  const near = (a, b, what) => assert.ok(Math.abs(a - b) <= 1e-6 * Math.max(1, b), `${what}: ${a} vs ${b}`);
  near(delta("kvserve:request_queue_time_seconds_sum") + delta("kvserve:request_prefill_time_seconds_sum"),
    delta("kvserve:time_to_first_token_seconds_sum"), "queue + prefill = TTFT");
  near(delta("kvserve:time_to_first_token_seconds_sum") + delta("kvserve:request_decode_time_seconds_sum"),
    delta("kvserve:e2e_request_latency_seconds_sum"), "TTFT + decode = E2E");
  assert.ok(delta("kvserve:prefix_cache_queries_total") >= res.usage.prompt_tokens - 16);
});

test("an abruptly dropped stream is cancelled and its KV blocks return to the pool", async () => {
  const before = await ctx.server.metrics();
  const stream = await openStream(ctx.server.port, "/v1/completions", {
    prompt: words(50, 4), max_tokens: 3000, ignore_eos: true, stream: true });
  assert.equal(stream.status, 200);
  const events = stream.events();
  for (let seen = 0; seen < 3;) {
    const { value, done } = await events.next();
    assert.ok(!done);
    if (value.data !== undefined) ++seen;
  }
  stream.destroy();
  const after = await ctx.server.waitForMetrics(
    (m) => isIdle(m) && finished(m, "abort") === finished(before, "abort") + 1,
    { what: "the dropped request aborted and the pool idle" });
  assertIdlePool(after);
});

test("a non-streaming request whose client goes away is cancelled and its KV blocks return", { timeout: 120_000 }, async () => {
  const before = await ctx.server.metrics();
  const controller = new AbortController();
  const pending = ctx.client.completions.create({
    model: ctx.server.model, prompt: "hi", max_tokens: 3000, ignore_eos: true }, { signal: controller.signal })
    .then(() => "its response", (e) => e.constructor.name);
  await ctx.server.waitForMetrics((m) => m.get("kvserve:num_requests_running") === 1,
    { what: "the request admitted" });
  controller.abort();
  assert.equal(await pending, "APIUserAbortError");
  // The HTTP layer watches the connection while the request runs: the closed socket cancels it.
  const after = await ctx.server.waitForMetrics(
    (m) => isIdle(m) && finished(m, "abort") === finished(before, "abort") + 1,
    { what: "the abandoned request aborted and the pool idle" });
  assert.equal(finished(after, "length"), finished(before, "length"));
  assert.ok(after.get("kvserve:generation_tokens_total") - before.get("kvserve:generation_tokens_total") < 3000);
  assertIdlePool(after);
});

test("32 concurrent streaming clients, every 4th aborting: all finish or are cancelled, pool idles", async () => {
  const CLIENTS = 32;
  const before = await ctx.server.metrics();
  const client = ctx.server.client();
  const started = performance.now();
  const run = async (i) => {
    const abort = i % 4 === 3;
    const controller = new AbortController();
    const common = {
      model: ctx.server.model, max_tokens: abort ? 2000 : 24 + (i % 5) * 8, temperature: i % 2 ? 1 : 0,
      seed: i, ignore_eos: true, stream: true, stream_options: { include_usage: true },
    };
    const chat = i % 2 === 0;
    const stream = chat
      ? await client.chat.completions.create(
          { ...common, messages: [{ role: "system", content: words(40, 1) }, { role: "user", content: words(8, i) }] },
          { signal: controller.signal })
      : await client.completions.create({ ...common, prompt: `${words(40, 1)} ${words(8, i)}` },
          { signal: controller.signal });
    let chunks = 0;
    let usage;
    let finishReason;
    try {
      for await (const chunk of stream) {
        ++chunks;
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) finishReason = c.finish_reason ?? finishReason;
        if (abort && chunks === 3) controller.abort();  // the client's stream then ends quietly
      }
    } catch (e) {
      if (!(abort && controller.signal.aborted)) throw e;
    }
    if (abort) {
      assert.ok(controller.signal.aborted, `client ${i} ended after ${chunks} chunks before aborting`);
      assert.equal(finishReason, undefined, `client ${i} got a finish_reason despite aborting`);
      return { i, outcome: "cancelled", chunks, tokens: 0 };
    }
    assert.equal(finishReason, "length", `client ${i}`);
    assert.equal(usage?.completion_tokens, common.max_tokens, `client ${i}`);
    return { i, outcome: "finished", chunks, tokens: usage.completion_tokens };
  };
  const results = await Promise.all(Array.from({ length: CLIENTS }, (_, i) => run(i)));
  const wall = (performance.now() - started) / 1000;
  const done = results.filter((r) => r.outcome === "finished");
  const cancelled = results.filter((r) => r.outcome === "cancelled");
  const tokens = done.reduce((a, r) => a + r.tokens, 0);
  console.log(`concurrency: ${CLIENTS} clients, ${done.length} finished, ${cancelled.length} cancelled, ` +
              `${tokens} tokens streamed to finishers in ${wall.toFixed(2)} s ` +
              `(${(tokens / wall).toFixed(0)} tok/s)`);
  assert.equal(done.length + cancelled.length, CLIENTS);
  assert.equal(cancelled.length, CLIENTS / 4);

  const started2 = performance.now();
  const after = await ctx.server.waitForMetrics(
    (m) => isIdle(m) && finished(m, "abort") - finished(before, "abort") === cancelled.length,
    { what: "all requests gone and the KV pool idle" });
  console.log(`concurrency: pool idle ${((performance.now() - started2) / 1000).toFixed(2)} s after the last client; ` +
              `preemptions ${after.get("kvserve:num_preemptions_total")}`);
  assertIdlePool(after);
  const completedDelta = finished(after, "length") + finished(after, "stop") -
    finished(before, "length") - finished(before, "stop");
  assert.equal(completedDelta, done.length);
  assert.equal(finished(after, "error"), finished(before, "error"));
  assert.equal(after.get("kvserve:generation_tokens_total") - before.get("kvserve:generation_tokens_total") >= tokens, true);
});

test("the server still answers after the concurrency run", async () => {
  const res = await ctx.client.chat.completions.create({
    model: ctx.server.model, messages: [{ role: "user", content: "hi" }], max_tokens: 3, ignore_eos: true });
  assert.equal(res.usage.completion_tokens, 3);
});

testCleanShutdown(ctx);
