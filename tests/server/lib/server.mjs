// Test helpers for the black-box server suite: start `kvserve serve` on a free loopback port, talk
// to it over raw HTTP (for what the openai client cannot express), parse server-sent events and
// Prometheus text.
import { spawn, spawnSync } from "node:child_process";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import OpenAI from "openai";

const here = path.dirname(fileURLToPath(import.meta.url));

export const KVSERVE_BIN = process.env.KVSERVE_BIN ?? path.resolve(here, "../../../build/kvserve");

const LISTENING = /^kvserve: listening on http:\/\/127\.0\.0\.1:(\d+)$/;

// The suite's stock model: a small synthetic llama (random weights, synthetic vocabulary, no
// output row for control tokens), so generations always run to max_tokens and every test is
// independent of what a trained model would write. Written once per test process. Tests of the
// embedded trained model pass `{ embedded: true }` to Server.start.
let syntheticModel;
export function syntheticModelPath() {
  if (syntheticModel) return syntheticModel;
  const dir = mkdtempSync(path.join(os.tmpdir(), "kvserve-server-test-"));
  const file = path.join(dir, "synthetic.gguf");
  const r = spawnSync(KVSERVE_BIN, ["make-model", "--out", file, "--layers", "4", "--hidden", "256",
    "--heads", "8", "--kv-heads", "2", "--ffn", "768", "--vocab", "1024", "--context", "4096",
    "--type", "F32", "--seed", "20261122"], { encoding: "utf8" });
  assert.equal(r.status, 0, `kvserve make-model failed: ${r.stderr}`);
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  syntheticModel = file;
  return file;
}

// A running `kvserve serve`. Start with `await Server.start([...flags])`, stop with
// `await server.stop()` (SIGTERM, resolves to the exit code) or `server.kill()` (cleanup).
export class Server {
  static async start(flags = [], { apiKey, env: extraEnv = {}, embedded = false } = {}) {
    assert.ok(existsSync(KVSERVE_BIN), `kvserve binary not found at ${KVSERVE_BIN} (set KVSERVE_BIN)`);
    const args = ["serve", "--port", "0", ...flags];
    if (!embedded && !flags.includes("--model")) args.push("--model", syntheticModelPath());
    if (apiKey !== undefined) args.push("--api-key", apiKey);
    const env = { ...process.env };
    delete env.KVSERVE_API_KEY;  // only the flag decides whether a key is needed...
    Object.assign(env, extraEnv);  // ...unless a test sets it on purpose
    if (apiKey === undefined && extraEnv.KVSERVE_API_KEY !== undefined) apiKey = extraEnv.KVSERVE_API_KEY;
    const child = spawn(KVSERVE_BIN, args, { stdio: ["ignore", "pipe", "pipe"], env });
    const server = new Server(child, args, apiKey);
    server.port = await server.#waitForListening();
    server.origin = `http://127.0.0.1:${server.port}`;
    server.model = (await server.json("GET", "/v1/models")).body.data[0].id;
    return server;
  }

  constructor(child, args, apiKey) {
    this.child = child;
    this.args = args;
    this.apiKey = apiKey;
    this.stdout = "";
    this.stderr = "";
    this.agents = [];
    this.exited = new Promise((resolve) => {
      child.on("exit", (code, signal) => resolve({ code, signal }));
    });
    child.stdout.setEncoding("utf8").on("data", (d) => { this.stdout += d; });
    child.stderr.setEncoding("utf8").on("data", (d) => {
      this.stderr += d;
      if (this.stderr.length > 1 << 20) this.stderr = this.stderr.slice(-(1 << 19));
    });
  }

  #waitForListening() {
    return new Promise((resolve, reject) => {
      const onData = () => {
        const nl = this.stdout.indexOf("\n");
        if (nl < 0) return;
        this.child.stdout.off("data", onData);
        const line = this.stdout.slice(0, nl);
        const m = LISTENING.exec(line);
        if (!m || Number(m[1]) === 0) {
          reject(new Error(`unexpected first stdout line ${JSON.stringify(line)} from kvserve ${this.args.join(" ")}`));
          this.kill();
        } else {
          resolve(Number(m[1]));
        }
      };
      this.child.stdout.on("data", onData);
      this.child.on("exit", (code, signal) => reject(new Error(
        `kvserve ${this.args.join(" ")} exited (code ${code}, signal ${signal}) before listening:\n${this.stderr}`)));
      this.child.on("error", reject);
    });
  }

  // An openai client for this server. Retries are off so that every status reaches the test.
  // Its kept-alive connections go through an agent that stop() closes first (a client going
  // away), so shutdown is not held up by idle connections; process.test.mjs covers those.
  client(options = {}) {
    const agent = new http.Agent({ keepAlive: true });
    this.agents.push(agent);
    return new OpenAI({
      baseURL: `${this.origin}/v1`,
      apiKey: this.apiKey ?? "unused",
      maxRetries: 0,
      timeout: 300_000,
      httpAgent: agent,
      ...options,
    });
  }

  authHeaders() {
    return this.apiKey === undefined ? {} : { authorization: `Bearer ${this.apiKey}` };
  }

  // Raw request: body may be a string, Buffer or object (sent as JSON). Resolves to
  // {status, headers, text, body (parsed JSON or undefined)}.
  request(method, urlPath, { body, headers = {}, auth = true } = {}) {
    return rawRequest(this.port, method, urlPath, {
      body, headers: { ...(auth ? this.authHeaders() : {}), ...headers } });
  }

  json(method, urlPath, body, opts = {}) {
    return this.request(method, urlPath, { body, ...opts });
  }

  async tokenCount(prompt) {
    const res = await this.request("POST", "/tokenize", { body: { prompt } });
    assert.equal(res.status, 200, res.text);
    return res.body.count;
  }

  async metrics() {
    const res = await this.request("GET", "/metrics", { auth: false });
    assert.equal(res.status, 200, res.text);
    return parsePrometheus(res.text);
  }

  // Polls /metrics until `predicate(metrics)` holds or `deadlineMs` passes; resolves to the last
  // metrics seen. Polling is the synchronisation; the deadline only bounds a hang.
  async waitForMetrics(predicate, { deadlineMs = 60_000, what = "condition" } = {}) {
    const until = Date.now() + deadlineMs;
    let m;
    for (;;) {
      m = await this.metrics();
      if (predicate(m)) return m;
      if (Date.now() > until) {
        assert.fail(`metrics never showed ${what} within ${deadlineMs} ms; last:\n${m.text}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  // SIGTERM (or `signal`), then wait for the exit. Resolves to {code, signal}.
  async stop(signal = "SIGTERM") {
    for (const agent of this.agents) agent.destroy();
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    return this.exited;
  }

  kill() {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }
}

// Loopback HTTP without keep-alive (each request gets a fresh connection).
export function rawRequest(port, method, urlPath, { body, headers = {} } = {}) {
  let payload;
  if (body === undefined) payload = undefined;
  else if (typeof body === "string" || Buffer.isBuffer(body)) payload = Buffer.from(body);
  else payload = Buffer.from(JSON.stringify(body));
  const h = { connection: "close", ...headers };
  if (payload !== undefined) {
    h["content-type"] ??= "application/json";
    h["content-length"] = payload.length;
  }
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, method, path: urlPath, headers: h, agent: false },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let parsed;
          try { parsed = JSON.parse(text); } catch { parsed = undefined; }
          resolve({ status: res.statusCode, headers: res.headers, text, body: parsed });
        });
        res.on("error", reject);
      });
    req.on("error", reject);
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

// Bytes written as they are to a fresh connection (for requests no HTTP client would send);
// resolves to {status, headers (lower-case names), body} once the server closes the connection.
export function rawBytes(port, bytes) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(bytes));
    const chunks = [];
    socket.on("data", (c) => chunks.push(c));
    socket.on("error", reject);
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("latin1");
      const split = text.indexOf("\r\n\r\n");
      const head = split < 0 ? text : text.slice(0, split);
      const lines = head.split("\r\n");
      const status = Number((lines[0] ?? "").split(" ")[1]);
      const headers = {};
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(":");
        if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      resolve({ status, headers, body: split < 0 ? "" : text.slice(split + 4) });
    });
  });
}

// A streaming raw request: resolves once the response headers arrive, to an object with
// `status`, `headers`, `events()` (an async iterator over SSE items: {comment} or {data}) and
// `destroy()` (drop the connection abruptly).
export function openStream(port, urlPath, body, headers = {}) {
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: "127.0.0.1", port, method: "POST", path: urlPath, agent: false,
      headers: { "content-type": "application/json", "content-length": payload.length,
                 connection: "close", ...headers },
    }, (res) => {
      res.setEncoding("utf8");
      resolve({
        status: res.statusCode,
        headers: res.headers,
        events: () => sseEvents(res),
        async text() { let t = ""; for await (const c of res) t += c; return t; },
        destroy: () => { req.destroy(); res.destroy(); },
      });
    });
    req.on("error", reject);
    req.end(payload);
  });
}

// Splits a text/event-stream into items, following the SSE line algorithm: {comment} for each
// `:` line, {data} for each event (its data lines joined with "\n"), dispatched at a blank line.
// Anything left without its terminating blank line comes out as {trailing}.
export async function* sseEvents(stream) {
  let buf = "";
  let data = [];
  for await (const chunk of stream) {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (data.length) yield { data: data.join("\n") };
        data = [];
      } else if (line.startsWith(":")) {
        yield { comment: line.slice(1).trim() };
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }
  if (buf !== "" || data.length) yield { trailing: buf, data: data.join("\n") };
}

// Prometheus text format → {text, samples: [{name, labels, value}], types: Map(name → type),
// get(name, labels) → value or undefined, all(name) → samples}.
export function parsePrometheus(text) {
  const samples = [];
  const types = new Map();
  for (const line of text.split("\n")) {
    if (line === "") continue;
    if (line.startsWith("#")) {
      const m = /^# TYPE (\S+) (\S+)/.exec(line);
      if (m) types.set(m[1], m[2]);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$/.exec(line);
    assert.ok(m, `unparsable metrics line: ${JSON.stringify(line)}`);
    const labels = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*/g;
      let lm;
      let consumed = 0;
      while ((lm = re.exec(m[3])) !== null) {
        labels[lm[1]] = lm[2].replace(/\\n/g, "\n").replace(/\\"/g, '"').replace(/\\\\/g, "\\");
        consumed = re.lastIndex;
      }
      assert.equal(consumed, m[3].length, `unparsable labels in ${JSON.stringify(line)}`);
    }
    const v = m[4];
    const value = v === "+Inf" ? Infinity : v === "-Inf" ? -Infinity : Number(v);
    assert.ok(!Number.isNaN(value) || v === "NaN", `bad value in ${JSON.stringify(line)}`);
    samples.push({ name: m[1], labels, value });
  }
  const matches = (s, name, labels) =>
    s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v);
  return {
    text,
    samples,
    types,
    all: (name, labels = {}) => samples.filter((s) => matches(s, name, labels)),
    get(name, labels = {}) {
      const found = samples.filter((s) => matches(s, name, labels));
      return found.length ? found.reduce((a, s) => a + s.value, 0) : undefined;
    },
  };
}

// Asserts the OpenAI error shape {"error":{"message","type","param","code"}} and returns error.
export function assertErrorShape(body, { type, code, param } = {}) {
  assert.ok(body && typeof body === "object", `error body is not JSON: ${JSON.stringify(body)}`);
  const e = body.error;
  assert.ok(e && typeof e === "object", `no "error" object in ${JSON.stringify(body)}`);
  assert.equal(typeof e.message, "string");
  assert.ok(e.message.length > 0, "error.message is empty");
  assert.equal(typeof e.type, "string");
  assert.ok("param" in e, `error.param missing in ${JSON.stringify(body)}`);
  assert.ok("code" in e, `error.code missing in ${JSON.stringify(body)}`);
  assert.ok(e.param === null || typeof e.param === "string");
  assert.ok(e.code === null || typeof e.code === "string");
  if (type !== undefined) assert.equal(e.type, type, JSON.stringify(body));
  if (code !== undefined) assert.equal(e.code, code, JSON.stringify(body));
  if (param !== undefined) assert.equal(e.param, param, JSON.stringify(body));
  return e;
}

// Usage object per the spec: P + C = total and prompt_tokens_details.cached_tokens a number.
export function assertUsage(usage) {
  assert.ok(usage, "usage missing");
  for (const k of ["prompt_tokens", "completion_tokens", "total_tokens"]) {
    assert.ok(Number.isInteger(usage[k]) && usage[k] >= 0, `usage.${k} = ${usage[k]}`);
  }
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.ok(usage.prompt_tokens_details, `prompt_tokens_details missing: ${JSON.stringify(usage)}`);
  const cached = usage.prompt_tokens_details.cached_tokens;
  assert.ok(Number.isInteger(cached) && cached >= 0 && cached <= usage.prompt_tokens,
    `cached_tokens = ${cached}`);
}

// n words of the synthetic vocabulary, pseudo-random from `seed` (a prompt of known shape).
export function words(n, seed = 1) {
  const vocab = ["the", "model", "token", "cache", "story", "little", "girl", "boy", "water",
                 "people", "number", "world", "hello", "upon", "time", "long", "first", "write"];
  let x = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; ++i) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]);
  }
  return out.join(" ");
}

// Starts one server for the current test file (before hook) and kills it if a test left it
// running (after hook). Returns a context whose `server` and `client` are set once started; pair
// with `testCleanShutdown(ctx)` as the file's last test.
export function useServer(flags = [], options = {}) {
  const ctx = { server: undefined, client: undefined };
  before(async () => {
    ctx.server = await Server.start(flags, options);
    ctx.client = ctx.server.client();
  });
  after(() => ctx.server?.kill());
  return ctx;
}

// The last test of a file: SIGTERM makes the server exit with status 0.
export function testCleanShutdown(ctx) {
  test("SIGTERM stops the server with exit status 0", async () => {
    const { code, signal } = await ctx.server.stop();
    assert.equal(signal, null, `killed by ${signal}; stderr:\n${ctx.server.stderr.slice(-4000)}`);
    assert.equal(code, 0, `exit status ${code}; stderr:\n${ctx.server.stderr.slice(-4000)}`);
  });
}

// Collects a streamed openai response: chunks in order, plus text per choice index.
export async function collectStream(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}
