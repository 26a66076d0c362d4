// Lower KV tiers through the server, black-box: a restart on the same --kv-disk-path serves the
// same prompt from disk with the same greedy text; kill -9 in the middle of heavy write-through
// loses nothing that is served (every answer after the restart equals a cache-off server's);
// flipped bytes are counted misses; an unusable directory leaves the tier off; two replicas on
// one real redis-server share blocks; Redis killed or filled with garbage fails no request.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, statSync, openSync, readSync, writeSync, closeSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { KVSERVE_BIN, Server, words } from "./lib/server.mjs";

const scratch = mkdtempSync(path.join(os.tmpdir(), "kvserve-tiers-test-"));
after(() => rmSync(scratch, { recursive: true, force: true }));
let dirs = 0;
const newDir = () => path.join(scratch, `d${dirs++}`);

function kvbFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".kvb")) out.push(p);
    }
  };
  walk(dir);
  return out.sort();
}

function flipByte(file, offset) {
  const fd = openSync(file, "r+");
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, offset);
  b[0] ^= 0x20;
  writeSync(fd, b, 0, 1, offset);
  closeSync(fd);
}

const request = (server, prompt, max_tokens = 12) => server.client().completions.create(
  { model: server.model, prompt, max_tokens, temperature: 0, ignore_eos: true });

const byTier = (usage) => usage.prompt_tokens_details.cached_tokens_by_tier;

async function stopClean(server) {
  const { code, signal } = await server.stop();
  assert.equal(signal, null, server.stderr.slice(-2000));
  assert.equal(code, 0, server.stderr.slice(-2000));
}

// What a server without any cache answers: the reference for every comparison below.
let reference;
async function referenceTexts(prompts, maxTokens) {
  reference ??= await Server.start(["--no-prefix-caching"]);
  const out = [];
  for (const p of prompts) out.push((await request(reference, p, maxTokens)).choices[0].text);
  return out;
}
after(() => reference?.kill());

test("a restart on the same directory serves the prompt from disk with the same text", async () => {
  const dir = newDir();
  const prompt = words(300, 11);
  const a = await Server.start(["--kv-disk-path", dir]);
  assert.match(a.stderr, /kvserve: disk tier .*0 blocks/);
  const first = await request(a, prompt);
  assert.deepEqual(byTier(first.usage), { ram: 0, disk: 0 });
  const again = await request(a, prompt);
  assert.ok(byTier(again.usage).ram > 0);
  assert.equal(byTier(again.usage).disk, 0);
  await stopClean(a);  // a graceful stop finishes the queued writes

  const b = await Server.start(["--kv-disk-path", dir]);
  try {
    assert.match(b.stderr, /kvserve: disk tier .*[1-9][0-9]* blocks/);
    const after = await request(b, prompt);
    assert.equal(after.choices[0].text, first.choices[0].text);
    // Tiers hold whole blocks by key: the RAM hit also reused the tokens of the last block it
    // shares (a token-granular copy), the disk serves the whole blocks before it.
    const ramCached = again.usage.prompt_tokens_details.cached_tokens;
    assert.equal(ramCached, first.usage.prompt_tokens - 1);
    assert.equal(after.usage.prompt_tokens_details.cached_tokens, Math.floor(ramCached / 16) * 16);
    assert.equal(byTier(after.usage).disk, after.usage.prompt_tokens_details.cached_tokens);
    assert.equal(byTier(after.usage).ram, 0);
    const m = await b.metrics();
    assert.equal(m.get("kvserve:kv_tier_up", { tier: "disk" }), 1);
    assert.equal(m.get("kvserve:kv_tier_hit_tokens_total", { tier: "disk" }), byTier(after.usage).disk);
    assert.ok(m.get("kvserve:kv_tier_bytes_read_total", { tier: "disk" }) > 0);
    assert.ok(m.get("kvserve:kv_tier_entries", { tier: "disk" }) > 0);
    assert.equal(m.get("kvserve:kv_tier_errors_total", { tier: "disk", kind: "corrupt" }), 0);
  } finally {
    await stopClean(b);
  }
});

test("kill -9 during heavy write-through: after the restart every answer equals the cache-off answer", async () => {
  const dir = newDir();
  const prompts = Array.from({ length: 12 }, (_, i) => words(260, 100 + i));
  const expected = await referenceTexts(prompts, 8);
  const a = await Server.start(["--kv-disk-path", dir]);
  // 12 concurrent prompts: blocks are being written while the process dies.
  const inflight = prompts.map((p) => request(a, p, 8).catch(() => null));
  await a.waitForMetrics((m) => (m.get("kvserve:kv_tier_blocks_written_total", { tier: "disk" }) ?? 0) >= 10,
    { what: "some blocks written" });
  a.kill();
  await a.exited;
  await Promise.all(inflight);

  const b = await Server.start(["--kv-disk-path", dir]);
  try {
    const m0 = await b.metrics();
    const survivors = m0.get("kvserve:kv_tier_entries", { tier: "disk" });
    const dropped = m0.get("kvserve:kv_tier_errors_total", { tier: "disk", kind: "corrupt" });
    let fromDisk = 0;
    for (let i = 0; i < prompts.length; ++i) {
      const r = await request(b, prompts[i], 8);
      assert.equal(r.choices[0].text, expected[i], `prompt ${i}`);
      fromDisk += byTier(r.usage).disk;
    }
    const m1 = await b.metrics();
    console.log(`# crash: ${survivors} blocks survived, ${dropped} files dropped at rebuild, ` +
      `${fromDisk} prompt tokens then served from disk, ` +
      `${m1.get("kvserve:kv_tier_errors_total", { tier: "disk", kind: "corrupt" })} corrupt in all`);
    assert.ok(survivors > 0);
    assert.ok(fromDisk > 0);
    // No temporary file is ever visible under a final name: nothing half-written was served,
    // and what the rebuild found is whole.
    for (const f of kvbFiles(dir)) assert.ok(statSync(f).size > 0);
  } finally {
    await stopClean(b);
  }
});

test("flipped bytes in the disk tier are counted misses, never wrong text", async () => {
  const dir = newDir();
  const prompts = [words(200, 21), words(200, 22)];
  const expected = await referenceTexts(prompts, 10);
  const a = await Server.start(["--kv-disk-path", dir]);
  for (const p of prompts) await request(a, p, 10);
  await stopClean(a);
  const files = kvbFiles(dir);
  assert.ok(files.length >= 4);
  for (const f of files) flipByte(f, Math.floor(statSync(f).size * 0.7));
  const b = await Server.start(["--kv-disk-path", dir]);
  try {
    for (let i = 0; i < prompts.length; ++i) {
      const r = await request(b, prompts[i], 10);
      assert.equal(r.choices[0].text, expected[i]);
      assert.equal(byTier(r.usage).disk, 0);
    }
    const m = await b.metrics();
    const corrupt = m.get("kvserve:kv_tier_errors_total", { tier: "disk", kind: "corrupt" });
    console.log(`# flipped bytes: ${files.length} files flipped, ${corrupt} counted corrupt, ` +
      `${m.get("kvserve:kv_tier_hit_tokens_total", { tier: "disk" })} tokens served from disk`);
    assert.ok(corrupt >= 2);
  } finally {
    await stopClean(b);
  }
});

test("an unusable --kv-disk-path is one clear log line and a metric; the server serves", async () => {
  const notADir = path.join(scratch, "a-file");
  writeFileSync(notADir, "not a directory");
  const s = await Server.start(["--kv-disk-path", notADir]);
  try {
    const lines = s.stderr.split("\n").filter((l) => l.includes(notADir));
    assert.ok(lines.length >= 1 && lines.length <= 2, s.stderr);
    const m = await s.metrics();
    assert.equal(m.get("kvserve:kv_tier_up", { tier: "disk" }), 0);
    const r = await request(s, words(50, 3), 4);
    assert.equal(r.choices.length, 1);
    assert.deepEqual(byTier(r.usage), { ram: 0, disk: 0 });
  } finally {
    await stopClean(s);
  }
});

test("bad tier flags are refused at start-up with what to write", () => {
  const bad = spawnSync(KVSERVE_BIN, ["serve", "--port", "0",
    "--kv-redis-url", "http://nope"], { encoding: "utf8", timeout: 60_000 });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /redis:\/\/HOST:PORT/);
  const policy = spawnSync(KVSERVE_BIN, ["serve", "--port", "0",
    "--kv-disk-write-policy", "sometimes"], { encoding: "utf8", timeout: 60_000 });
  assert.notEqual(policy.status, 0);
  assert.match(policy.stderr, /write-through or write-back/);
});

// A real redis-server on a free loopback port, stopped by the test.
async function startRedis() {
  const port = await new Promise((resolve) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => {
      const p = srv.address().port;
      srv.close(() => resolve(p));
    });
  });
  const dir = mkdtempSync(path.join(scratch, "redis-"));
  const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "",
    "--appendonly", "no", "--dir", dir], { stdio: "ignore" });
  const exited = new Promise((r) => child.on("exit", r));
  for (let i = 0; i < 200; ++i) {
    if (spawnSync("redis-cli", ["-p", String(port), "ping"], { encoding: "utf8" }).stdout.trim() === "PONG") {
      return { port, url: `redis://127.0.0.1:${port}`, cli: (...args) => spawnSync("redis-cli", ["-p", String(port), ...args], { encoding: "utf8" }),
        kill: async () => { child.kill("SIGKILL"); await exited; } };
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill("SIGKILL");
  throw new Error("redis-server did not answer PING (scripts/setup.sh installs it)");
}

test("two replicas on one Redis: a prompt computed on A is served to B from Redis, same text", async () => {
  const redis = await startRedis();
  const a = await Server.start(["--kv-redis-url", redis.url]);
  const b = await Server.start(["--kv-redis-url", redis.url]);
  try {
    const prompt = words(300, 31);
    const onA = await request(a, prompt);
    assert.deepEqual(byTier(onA.usage), { ram: 0, redis: 0 });
    // A's writes reach Redis off its engine thread: wait for them to land.
    await a.waitForMetrics((m) => m.get("kvserve:kv_tier_blocks_written_total", { tier: "redis" }) >= 18,
      { what: "A's blocks in Redis" });
    const onB = await request(b, prompt);
    assert.equal(onB.choices[0].text, onA.choices[0].text);
    assert.ok(byTier(onB.usage).redis >= 18 * 16, JSON.stringify(onB.usage));
    assert.equal(onB.usage.prompt_tokens_details.cached_tokens, byTier(onB.usage).redis);
    const keys = redis.cli("--scan", "--pattern", "kvserve:*").stdout.trim().split("\n");
    assert.ok(keys.length >= 18);

    // Garbage in Redis: counted misses on a fresh replica, never wrong text.
    for (const k of keys) redis.cli("set", k, "garbage");
    const c = await Server.start(["--kv-redis-url", redis.url]);
    try {
      const onC = await request(c, prompt);
      assert.equal(onC.choices[0].text, onA.choices[0].text);
      assert.equal(byTier(onC.usage).redis, 0);
      const m = await c.metrics();
      const corrupt = m.get("kvserve:kv_tier_errors_total", { tier: "redis", kind: "corrupt" });
      console.log(`# garbage in Redis: ${keys.length} values overwritten, ${corrupt} counted corrupt, ` +
        `${byTier(onC.usage).redis} tokens served from Redis`);
      assert.ok(corrupt >= 1);
    } finally {
      await stopClean(c);
    }

    // Redis killed while requests are being served: no request fails.
    const prompts = Array.from({ length: 6 }, (_, i) => words(200, 40 + i));
    const expected = await referenceTexts(prompts, 6);
    const results = prompts.map((p) => request(b, p, 6));
    await redis.kill();
    const texts = (await Promise.all(results)).map((r) => r.choices[0].text);
    assert.deepEqual(texts, expected);
    const again = await request(b, words(220, 50), 6);
    assert.equal(again.choices.length, 1);
    const m = await b.metrics();
    const down = m.get("kvserve:kv_tier_errors_total", { tier: "redis", kind: "connection" }) +
      m.get("kvserve:kv_tier_errors_total", { tier: "redis", kind: "timeout" });
    console.log(`# Redis killed mid-traffic: ${texts.length + 1} requests, 0 failed, ` +
      `${down} connection or timeout errors counted`);
    assert.ok(down >= 1, "the outage was counted");
  } finally {
    await stopClean(a);
    await stopClean(b);
    await redis.kill();
  }
});
