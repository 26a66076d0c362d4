// Quantized KV cache types on the server: int8 keys and int4 values (the suite's model has 4
// layers, 2 KV heads, head_dim 32). The start-up line and /metrics state the bytes per token and
// the capacity; prefix caching stays exact (a cached prompt gives the text it gave uncached); bad
// type names are refused at start-up with the list of valid ones.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { KVSERVE_BIN, Server, syntheticModelPath, testCleanShutdown, useServer, words } from "./lib/server.mjs";

const BLOCKS = 64;
const ctx = useServer(["--cache-type-k", "int8", "--cache-type-v", "int4", "--num-blocks", String(BLOCKS)]);
// 4 layers x 2 KV heads x (int8 K: 32 + 2 scale bytes, int4 V: 16 nibble bytes + 4 scale/min bytes)
const BYTES_PER_TOKEN = 4 * 2 * ((32 + 2) + (16 + 4));

test("the start-up line and /metrics give bytes per token and capacity", async () => {
  assert.match(ctx.server.stderr,
    new RegExp(`kvserve: KV cache int8/int4: ${BYTES_PER_TOKEN} bytes/token, ${BLOCKS * 16} tokens in `));
  const m = await ctx.server.metrics();
  assert.equal(m.get("kvserve:kv_cache_bytes_per_token"), BYTES_PER_TOKEN);
  assert.equal(m.get("kvserve:kv_cache_capacity_tokens"), BLOCKS * 16);
  assert.equal(m.get("kvserve:cache_config_info", { cache_type_k: "int8", cache_type_v: "int4" }), 1);
});

test("a prompt served from the quantized prefix cache gives the same greedy text", async () => {
  const request = { model: ctx.server.model, prompt: words(120, 7), max_tokens: 24, temperature: 0, ignore_eos: true };
  const first = await ctx.client.completions.create(request);
  const second = await ctx.client.completions.create(request);
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= 96,
    `only ${second.usage.prompt_tokens_details.cached_tokens} cached tokens`);
  assert.equal(second.choices[0].text, first.choices[0].text);
});

test("--kv-cache-dtype sets both types, --cache-type-v overrides it for values", async () => {
  const server = await Server.start(["--kv-cache-dtype", "fp8_e4m3", "--cache-type-v", "f16", "--num-blocks", "8"]);
  try {
    const m = await server.metrics();
    assert.equal(m.get("kvserve:cache_config_info", { cache_type_k: "fp8_e4m3", cache_type_v: "f16" }), 1);
    assert.equal(m.get("kvserve:kv_cache_bytes_per_token"), 4 * 2 * ((32 + 2) + 32 * 2));
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test("unknown cache types are refused at start-up with the valid names", () => {
  const bad = spawnSync(KVSERVE_BIN, ["serve", "--port", "0", "--model", syntheticModelPath(),
    "--cache-type-v", "int3"], { encoding: "utf8", timeout: 60_000 });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /--cache-type-v: unknown KV cache type 'int3'; valid types: f32, f16, bf16, int8, fp8_e4m3, fp8_e5m2, int4/);
  const shorthand = spawnSync(KVSERVE_BIN, ["serve", "--port", "0", "--model", syntheticModelPath(),
    "--kv-cache-dtype", "q9"], { encoding: "utf8", timeout: 60_000 });
  assert.notEqual(shorthand.status, 0);
  assert.match(shorthand.stderr, /--kv-cache-dtype: unknown KV cache type 'q9'/);
});

testCleanShutdown(ctx);
