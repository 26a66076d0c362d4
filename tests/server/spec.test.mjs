// Speculative decoding through the server, on the embedded kvserve-tiny with its draft model:
// greedy text identical to a server without speculation (completions and chat, streamed and
// not, through the official openai client), the spec_decode metrics adding up, the per-request
// opt-out, and a bad --speculative-config refused at start-up with the reason.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { KVSERVE_BIN, Server, collectStream } from "./lib/server.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const DRAFT = path.resolve(here, "../../models/kvserve-tiny-draft-q8_0.gguf");
// Not adaptive: whether the adaptive policy drafts depends on measured step times, and the
// counters below must not. The adaptive server has a test of its own.
const SPEC = JSON.stringify({ method: "draft_model", model: DRAFT, num_speculative_tokens: 4,
  adaptive: false });
let on, off;
before(async () => {
  on = await Server.start(["--speculative-config", SPEC, "--threads", "1"], { embedded: true });
  off = await Server.start(["--threads", "1"], { embedded: true });
});
after(() => { on?.kill(); off?.kill(); });

const specCount = (m, name) => m.get(`kvserve:spec_decode_num_${name}_total`) ?? 0;

test("greedy text is the same with speculation on and off", async () => {
  const prompt = "Once upon a time, there was a little duck named Ella.";
  for (const stream of [false, true]) {
    const texts = [];
    for (const server of [on, off]) {
      const client = server.client();
      const req = { model: server.model, prompt, max_tokens: 60, temperature: 0, stream };
      if (stream) {
        const chunks = await collectStream(await client.completions.create(req));
        texts.push(chunks.map((c) => c.choices[0]?.text ?? "").join(""));
      } else {
        texts.push((await client.completions.create(req)).choices[0].text);
      }
    }
    assert.ok(texts[0].length > 20, `short text: ${JSON.stringify(texts[0])}`);
    assert.equal(texts[0], texts[1]);
  }
  const chat = [];
  for (const server of [on, off]) {
    const r = await server.client().chat.completions.create({
      model: server.model, messages: [{ role: "user", content: "What month comes after July?" }],
      max_tokens: 30, temperature: 0, logprobs: true, top_logprobs: 2 });
    chat.push([r.choices[0].message.content, r.choices[0].logprobs.content.map((t) => t.logprob)]);
  }
  assert.deepEqual(chat[0], chat[1]);
  // Stop strings and n > 1 end where they end without speculation.
  const stops = [];
  for (const server of [on, off]) {
    const r = await server.client().completions.create({ model: server.model, prompt, max_tokens: 60,
      temperature: 0, n: 2, stop: [" the", "!"] });
    stops.push(r.choices.map((c) => [c.text, c.finish_reason]));
  }
  assert.deepEqual(stops[0], stops[1]);
});

test("spec_decode metrics add up, and speculative: false opts a request out", async () => {
  const before0 = await on.metrics();
  await on.client().completions.create({ model: on.model, prompt: "One sunny morning,", max_tokens: 40, temperature: 0 });
  const m = await on.metrics();
  const drafts = specCount(m, "draft_tokens") - specCount(before0, "draft_tokens");
  const accepted = specCount(m, "accepted_tokens") - specCount(before0, "accepted_tokens");
  assert.ok(drafts > 0, "no drafts verified");
  assert.ok(accepted > 0 && accepted <= drafts, `${accepted} accepted of ${drafts}`);
  assert.ok(specCount(m, "drafts") > specCount(before0, "drafts"));
  let perPos = 0;
  for (let j = 0; j < 4; ++j) {
    perPos += m.get("kvserve:spec_decode_num_accepted_tokens_per_pos_total", { position: String(j) }) ?? 0;
  }
  assert.equal(perPos, specCount(m, "accepted_tokens"));
  await on.client().completions.create({ model: on.model, prompt: "One sunny morning,", max_tokens: 40,
    temperature: 0, speculative: false });
  const m2 = await on.metrics();
  assert.equal(specCount(m2, "draft_tokens"), specCount(m, "draft_tokens"));
  // The server without speculation has no spec_decode series.
  assert.equal((await off.metrics()).get("kvserve:spec_decode_num_drafts_total"), undefined);
  assert.match(on.stderr, /speculative decoding: draft_model, up to 4 drafts per step, draft /);
});

test("the adaptive policy measures its verification cost at start-up and stays exact", async () => {
  const spec = JSON.stringify({ method: "draft_model", model: DRAFT, num_speculative_tokens: 4 });
  const adaptive = await Server.start(["--speculative-config", spec, "--threads", "1"], { embedded: true });
  try {
    assert.match(adaptive.stderr, /speculative decoding: draft_model, up to 4 drafts per step, adaptive/);
    // Five row counts (a decode, then 1..4 drafts), each a positive time in ms.
    const line = adaptive.stderr.match(/verification cost, ms for 1\.\.5 rows:((?: [0-9.]+){5}) \(measured in/);
    assert.ok(line, adaptive.stderr.slice(-2000));
    for (const ms of line[1].trim().split(" ")) assert.ok(Number(ms) > 0, line[0]);
    const texts = [];
    for (const server of [adaptive, off]) {
      const r = await server.client().completions.create({ model: server.model,
        prompt: "One sunny morning,", max_tokens: 40, temperature: 0 });
      texts.push(r.choices[0].text);
    }
    assert.equal(texts[0], texts[1]);
    // Its first decode step probes with one draft, whatever the policy decides after it.
    assert.ok(specCount(await adaptive.metrics(), "draft_tokens") > 0);
  } finally {
    const { code } = await adaptive.stop();
    assert.equal(code, 0);
  }
});

test("a bad --speculative-config is refused at start-up with the reason", () => {
  for (const [config, reason] of [
    ['{"method": "medusa"}', /method 'medusa' is not supported/],
    ['{"method": "ngram", "num_speculative_tokens": 0}', /num_speculative_tokens/],
    ["not json", /must be a JSON object/],
    ['{"method": "draft_model", "model": "/nonexistent/d.gguf"}', /draft model '\/nonexistent\/d.gguf'/],
  ]) {
    const r = spawnSync(KVSERVE_BIN, ["serve", "--port", "0", "--speculative-config", config],
      { encoding: "utf8", timeout: 60_000 });
    assert.notEqual(r.status, 0, config);
    assert.match(r.stderr, reason, config);
  }
});

test("SIGTERM stops both servers with exit status 0", async () => {
  for (const s of [on, off]) {
    const { code, signal } = await s.stop();
    assert.equal(signal, null);
    assert.equal(code, 0, s.stderr.slice(-2000));
  }
});
