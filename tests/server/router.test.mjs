// `kvserve route` in front of kvserve replicas (embedded model, one thread each), black box:
// proxying with the official openai client and raw HTTP (the Anthropic route too), streams passed
// through as they come, replicas' errors unchanged, round-robin turns, a client that leaves
// cancelling the replica's work, a killed replica costing no request sent after it died, and
// cache-aware routing from the replicas' KV events sending each conversation's next turn to the
// replica that holds its history (the replica's own cached_tokens say so). KV events travel over
// ipc:// endpoints in a temporary folder, so no port is guessed.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { KVSERVE_BIN, Server, assertErrorShape, assertUsage, openStream, words } from "./lib/server.mjs";

const BLOCK = 16;
const LISTENING = /^kvserve: listening on http:\/\/127\.0\.0\.1:(\d+)$/;

// A running `kvserve route`: Server's HTTP helpers (client(), request(), metrics(), stop()) on a
// router process.
class Router extends Server {
  static async start(replicas, flags = []) {
    const args = ["route", "--port", "0", "--log-level", "warning", ...flags];
    for (const r of replicas) args.push("--replica", r.spec ?? r.origin);
    const env = { ...process.env };
    delete env.KVSERVE_API_KEY;
    const child = spawn(KVSERVE_BIN, args, { stdio: ["ignore", "pipe", "pipe"], env });
    const router = new Router(child, args, undefined);
    router.port = await new Promise((resolve, reject) => {
      const onData = () => {
        const nl = router.stdout.indexOf("\n");
        if (nl < 0) return;
        child.stdout.off("data", onData);
        const m = LISTENING.exec(router.stdout.slice(0, nl));
        if (m) resolve(Number(m[1]));
        else reject(new Error(`unexpected first line from kvserve ${args.join(" ")}: ${router.stdout}`));
      };
      child.stdout.on("data", onData);
      child.on("exit", (code) => reject(new Error(`kvserve route exited (${code}):\n${router.stderr}`)));
    });
    router.origin = `http://127.0.0.1:${router.port}`;
    router.model = replicas[0].model;
    return router;
  }

  // kvserve_router:NAME for `replica` (its origin), 0 when absent.
  async count(name, replica, labels = {}) {
    const m = await this.metrics();
    return m.get(`kvserve_router:${name}`, { replica: replica.origin, ...labels }) ?? 0;
  }
}

const eventsDir = mkdtempSync(path.join(os.tmpdir(), "kvserve-router-test-"));
process.on("exit", () => rmSync(eventsDir, { recursive: true, force: true }));

// A replica publishing KV events on ipc endpoints of its own; `spec` is its --replica value.
async function replicaWithEvents(name) {
  const endpoint = `ipc://${eventsDir}/${name}-events`;
  const replay = `ipc://${eventsDir}/${name}-replay`;
  const config = JSON.stringify({ enable_kv_cache_events: true, publisher: "zmq", endpoint,
                                  replay_endpoint: replay, topic: "kv" });
  const server = await Server.start(["--threads", "1", "--kv-events-config", config], { embedded: true });
  server.spec = `${server.origin},events=${endpoint},replay=${replay},topic=kv`;
  return server;
}

let replicas = [];
let router;  // cache-aware over `replicas`
const extra = [];

before(async () => {
  replicas = await Promise.all(["r0", "r1", "r2"].map(replicaWithEvents));
  router = await Router.start(replicas);
});
after(() => {
  router?.kill();
  for (const s of [...replicas, ...extra]) s.kill();
});

const successes = async (server) =>
  (await server.metrics()).get("kvserve:request_success_total") ?? 0;

test("the openai client gets through the router what it gets from a replica", async () => {
  const client = router.client();
  const chat = await client.chat.completions.create({
    model: router.model, messages: [{ role: "user", content: "Say hello." }], max_tokens: 6, temperature: 0,
  });
  const direct = await replicas[0].client().chat.completions.create({
    model: router.model, messages: [{ role: "user", content: "Say hello." }], max_tokens: 6, temperature: 0,
  });
  assert.equal(chat.choices[0].message.content, direct.choices[0].message.content);
  assertUsage(chat.usage);
  const done = await client.completions.create({ model: router.model, prompt: "Once upon", max_tokens: 3 });
  assertUsage(done.usage);
  assert.equal(typeof done.choices[0].text, "string");
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [router.model]);
  const tokens = await router.json("POST", "/tokenize", { prompt: "Once upon a time" });
  assert.equal(tokens.status, 200, tokens.text);
  assert.deepEqual(tokens.body.tokens, (await replicas[1].json("POST", "/tokenize", { prompt: "Once upon a time" })).body.tokens);
  const text = await router.json("POST", "/detokenize", { tokens: tokens.body.tokens });
  assert.equal(text.status, 200, text.text);

  const message = await router.json("POST", "/v1/messages", {
    model: router.model, max_tokens: 4, messages: [{ role: "user", content: "Hi" }],
  }, { headers: { "anthropic-version": "2023-06-01" } });
  assert.equal(message.status, 200, message.text);
  assert.equal(message.body.type, "message");
  const health = await router.json("GET", "/health");
  assert.equal(health.status, 200);
  assert.equal(health.body.healthy_replicas, 3);
});

test("a stream passes through the router event by event, its usage chunk included", async () => {
  const body = { model: router.model, messages: [{ role: "user", content: "Count to five." }],
                 max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } };
  const collect = async (server) => {
    const chunks = [];
    for await (const c of await server.client().chat.completions.create(body)) chunks.push(c);
    return chunks;
  };
  const [through, direct] = await Promise.all([collect(router), collect(replicas[2])]);
  const text = (chunks) => chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
  assert.equal(text(through), text(direct));
  assert.equal(through.length, direct.length);
  assertUsage(through.at(-1).usage);
  assert.equal(through.at(-1).usage.completion_tokens, direct.at(-1).usage.completion_tokens);
});

test("a replica's error reaches the client unchanged", async () => {
  const bad = { model: router.model, prompt: "x", max_tokens: -1 };
  const [through, direct] = await Promise.all([
    router.json("POST", "/v1/completions", bad), replicas[0].json("POST", "/v1/completions", bad)]);
  assert.equal(through.status, 400);
  assert.equal(through.status, direct.status);
  assert.deepEqual(through.body, direct.body);
  assertErrorShape(through.body, { param: "max_tokens" });
  const unknown = await router.json("GET", "/v1/nothing-here");
  assert.equal(unknown.status, 404);
  assertErrorShape(unknown.body);
});

test("round-robin gives each replica its turn", async () => {
  const rr = await Router.start(replicas, ["--policy", "round-robin"]);
  try {
    const before = await Promise.all(replicas.map(successes));
    const client = rr.client();
    for (let i = 0; i < 6; ++i) {
      await client.completions.create({ model: rr.model, prompt: `${i} ${words(8, i)}`, max_tokens: 2 });
    }
    const after = await Promise.all(replicas.map(successes));
    assert.deepEqual(after.map((n, i) => n - before[i]), [2, 2, 2]);
    for (const r of replicas) {
      assert.equal(await rr.count("requests_total", r, { policy: "round-robin", rule: "round_robin" }), 2);
    }
  } finally {
    await rr.stop();
  }
});

test("a client that leaves a stream cancels the replica's generation", async () => {
  const rr = await Router.start([replicas[1]], ["--policy", "least-load"]);
  try {
    const aborts = async () =>
      (await replicas[1].metrics()).get("kvserve:request_success_total", { finished_reason: "abort" }) ?? 0;
    const before = await aborts();
    const s = await openStream(rr.port, "/v1/completions", {
      model: rr.model, prompt: words(20, 3), max_tokens: 3000, ignore_eos: true, stream: true });
    assert.equal(s.status, 200);
    const it = s.events()[Symbol.asyncIterator]();
    await it.next();  // the first event: the replica is generating
    s.destroy();
    await replicas[1].waitForMetrics(
      (m) => m.get("kvserve:num_requests_running") === 0 &&
        (m.get("kvserve:request_success_total", { finished_reason: "abort" }) ?? 0) > before,
      { what: "the abandoned generation cancelled" });
    assert.ok(await aborts() > before);
  } finally {
    await rr.stop();
  }
});

test("after a replica is killed, no request sent later fails", async () => {
  const pair = await Promise.all([0, 1].map(() => Server.start(["--threads", "1"], { embedded: true })));
  extra.push(...pair);
  const rr = await Router.start(pair, ["--policy", "round-robin", "--health-interval", "0.2"]);
  try {
    const client = rr.client();
    const ask = (i) => client.completions.create({ model: rr.model, prompt: `${i} ${words(6, i)}`, max_tokens: 2 });
    for (let i = 0; i < 2; ++i) await ask(i);
    pair[0].kill();
    await pair[0].exited;
    // Sequential and concurrent requests, the first of which go to the dead replica's turn.
    for (let i = 0; i < 4; ++i) await ask(10 + i);
    await Promise.all(Array.from({ length: 8 }, (_, i) => ask(20 + i)));
    assert.equal(await rr.count("replica_healthy", pair[0]), 0);
    assert.equal(await rr.count("replica_healthy", pair[1]), 1);
    assert.equal((await rr.metrics()).get("kvserve_router:failed_requests_total"), 0);
  } finally {
    await rr.stop();
  }
});

test("cache-aware routing sends each conversation's next turn to the replica holding it", async () => {
  const client = router.client();
  const conversations = Array.from({ length: 4 }, (_, c) => [
    { role: "user", content: `Conversation ${c}: ${words(40, 100 + c)}` }]);
  for (let turn = 0; turn < 3; ++turn) {
    for (const [c, messages] of conversations.entries()) {
      const r = await client.chat.completions.create({
        model: router.model, messages, max_tokens: 8, temperature: 0 });
      assertUsage(r.usage);
      if (turn > 0) {
        // The history (every full block of the previous turn's prompt) was cached where it went.
        const previous = messages.previousPromptTokens;
        assert.ok(r.usage.prompt_tokens_details.cached_tokens >= Math.floor(previous / BLOCK) * BLOCK,
          `conversation ${c} turn ${turn}: ${r.usage.prompt_tokens_details.cached_tokens} cached of ` +
          `${r.usage.prompt_tokens}, the previous prompt had ${previous}`);
      }
      messages.previousPromptTokens = r.usage.prompt_tokens;
      messages.push({ role: "assistant", content: r.choices[0].message.content },
                    { role: "user", content: `Turn ${turn + 1}: ${words(12, 200 + 10 * c + turn)}` });
    }
  }
  const m = await router.metrics();
  assert.ok(m.get("kvserve_router:requests_total", { rule: "cache_match" }) >= 8, m.text);
  assert.ok(m.get("kvserve_router:kv_event_batches_total") > 0, m.text);
  // Predicted and reported cached tokens are both counted, the prediction never above the report
  // by more than what pending blocks can add (here: none, every turn ran alone).
  const predicted = m.get("kvserve_router:predicted_cached_tokens_total");
  const reported = m.get("kvserve_router:reported_cached_tokens_total");
  assert.ok(predicted > 0 && predicted <= reported, `predicted ${predicted}, reported ${reported}`);
});

test("cache-aware routing hashes a chat's tools as the replicas render them", async () => {
  // The tools come first in the rendered prompt: requests that share them share that prefix, and
  // the router must find it (its /tokenize call carries the tools in the client's key order).
  const client = router.client();
  const tools = [{ type: "function", function: { name: "lookup_tide", description: words(30, 300),
    parameters: { type: "object", properties: { zeta: { type: "string" }, alpha: { type: "number" } },
                  required: ["zeta"] } } }];
  const messages = (i) => [{ role: "user", content: `Question ${i}: ${words(6, 400 + i)}` }];
  const [a, b] = await Promise.all([0, 1].map((i) => replicas[0].request("POST", "/tokenize",
    { body: { messages: messages(i), tools } })));
  assert.equal(a.status, 200, a.text);
  let common = 0;
  while (a.body.tokens[common] === b.body.tokens[common]) ++common;
  assert.ok(common > 4 * BLOCK, `the tools make a long shared prefix (${common} tokens)`);
  for (let i = 0; i < 4; ++i) {
    const r = await client.chat.completions.create({
      model: router.model, tools, messages: messages(i), max_tokens: 4, temperature: 0 });
    assertUsage(r.usage);
    if (i > 0) {
      // Every full block of the shared prefix was cached where the request went.
      const shared = Math.floor(common / BLOCK) * BLOCK;
      assert.ok(r.usage.prompt_tokens_details.cached_tokens >= shared,
        `request ${i}: ${r.usage.prompt_tokens_details.cached_tokens} cached, ${shared} shared`);
    }
  }
});

test("SIGTERM stops the router with exit status 0", async () => {
  const { code, signal } = await router.stop();
  assert.equal(signal, null, router.stderr);
  assert.equal(code, 0, router.stderr);
});
