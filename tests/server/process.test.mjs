// The `kvserve serve` process itself: startup errors, signals, and the connection timeouts
// (--read-timeout, --idle-timeout). Waits are on events (exit, socket close), never sleeps.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import { KVSERVE_BIN, Server } from "./lib/server.mjs";

// Runs kvserve to its exit. Should it start listening instead, it is killed and the result has
// `listening: true` (so a wrongly accepted flag fails the test instead of hanging it).
function runToExit(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(KVSERVE_BIN, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    let listening = false;
    child.stdout.setEncoding("utf8").on("data", (d) => {
      stdout += d;
      if (!listening && stdout.includes("listening")) { listening = true; child.kill("SIGKILL"); }
    });
    child.stderr.setEncoding("utf8").on("data", (d) => { stderr += d; });
    child.on("error", reject);
    child.on("exit", (code, signal) => resolve({ code, signal, stdout, stderr, listening }));
  });
}

test("invalid flags exit non-zero without a listening line", { timeout: 60_000 }, async () => {
  for (const flags of [["--eviction-policy", "bogus"], ["--max-body-bytes", "lots"], ["--port", "-3"],
                       ["--model", "/nonexistent/model.gguf"], ["--chat-template", "no-such-template"],
                       ["--header-timeout", "0"], ["--read-timeout", "-1"], ["--shutdown-timeout", "nan"],
                       ["--max-connections", "0"], ["--backlog", "0"], ["--max-header-bytes", "10"],
                       ["--max-header-fields", "0"]]) {
    const r = await runToExit(["serve", "--port", "0", ...flags]);
    assert.ok(!r.listening, `kvserve serve ${flags.join(" ")} started: ${JSON.stringify(r.stdout)}`);
    assert.notEqual(r.code, 0, `kvserve serve ${flags.join(" ")} exited 0`);
    assert.ok(r.stderr.length > 0, `kvserve serve ${flags.join(" ")} failed without a message`);
  }
});

test("a port already in use is a startup error, not a second listener", { timeout: 60_000 }, async () => {
  const first = await Server.start();
  try {
    // Either it exits non-zero (expected) or it reports listening: then it shares the port (e.g.
    // SO_REUSEPORT) and connections are split between two servers. Kill it and fail.
    const second = spawn(KVSERVE_BIN, ["serve", "--port", String(first.port)], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    const outcome = await new Promise((resolve, reject) => {
      second.stdout.setEncoding("utf8").on("data", (d) => {
        stdout += d;
        if (stdout.includes("\n")) resolve({ listening: stdout });
      });
      second.stderr.resume();
      second.on("error", reject);
      second.on("exit", (code) => resolve({ code }));
    });
    if (outcome.listening !== undefined) {
      second.kill("SIGKILL");
      assert.fail(`a second server started on the busy port ${first.port}: ${JSON.stringify(outcome.listening)}`);
    }
    assert.notEqual(outcome.code, 0);
  } finally {
    assert.equal((await first.stop()).code, 0);
  }
});

test("SIGINT stops the server with exit status 0, like SIGTERM", async () => {
  const server = await Server.start();
  const r = await server.client().completions.create({ model: server.model, prompt: "hi", max_tokens: 2, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 2);
  const { code, signal } = await server.stop("SIGINT");
  assert.equal(signal, null);
  assert.equal(code, 0);
});

test("SIGTERM with an idle kept-alive connection still exits 0", { timeout: 60_000 }, async () => {
  const server = await Server.start();
  const socket = net.connect(server.port, "127.0.0.1");
  let received = "";
  await new Promise((resolve, reject) => {
    socket.on("error", reject);
    socket.setEncoding("utf8").on("data", (d) => {
      received += d;
      if (received.includes('"ok"')) resolve();
    });
    socket.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  });
  const closed = new Promise((resolve) => socket.on("close", resolve));
  const { code, signal } = await server.stop();
  assert.equal(signal, null);
  assert.equal(code, 0);
  await closed;
});

// Opens a raw TCP connection, writes `data`, and resolves to everything the server sent once it
// closes the connection.
function untilServerCloses(port, data) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(data));
    let received = "";
    socket.setEncoding("utf8").on("data", (d) => { received += d; });
    socket.on("error", (e) => (e.code === "ECONNRESET" ? undefined : reject(e)));
    socket.on("close", () => resolve(received));
  });
}

test("--read-timeout: a client that stalls mid-request is disconnected; others are served", { timeout: 60_000 }, async () => {
  // A body that stalls meets --read-timeout; headers that stall meet --header-timeout, also 1 s
  // here (its default, 10 s, was most of this test's time).
  const server = await Server.start(["--read-timeout", "1", "--header-timeout", "1"]);
  try {
    const stalledBody = untilServerCloses(server.port,
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\": ");
    const stalledHeaders = untilServerCloses(server.port, "GET /health HTTP/1.1\r\nHost: x\r\n");
    const ok = await server.client().completions.create({ model: server.model, prompt: "hi", max_tokens: 2, ignore_eos: true });
    assert.equal(ok.usage.completion_tokens, 2);
    const [a, b] = await Promise.all([stalledBody, stalledHeaders]);
    assert.ok(!/^HTTP\/1\.1 200/.test(a), `a half-sent body was answered 200: ${a.slice(0, 100)}`);
    assert.ok(!/^HTTP\/1\.1 200/.test(b));
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test("--idle-timeout: a kept-alive connection left idle is closed by the server", { timeout: 60_000 }, async () => {
  const server = await Server.start(["--idle-timeout", "1"]);
  try {
    const received = await untilServerCloses(server.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert.match(received, /^HTTP\/1\.1 200/);
    assert.match(received, /\{"status":\s*"ok"\}/);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test("--log-format json: one access line per request with its id, status, duration and errors' reasons", { timeout: 60_000 }, async () => {
  const server = await Server.start(["--log-format", "json"]);
  const given = await server.request("GET", "/v1/models", { headers: { "x-request-id": "client-id-7" } });
  assert.equal(given.headers["x-request-id"], "client-id-7");
  const missing = await server.request("GET", "/no-such-route");
  assert.match(missing.headers["x-request-id"], /^req-\d+$/);
  const bad = await server.request("POST", "/v1/completions", { body: { prompt: "hi", max_tokens: "x" } });
  assert.equal(bad.status, 400);
  const ok = await server.request("POST", "/v1/completions", { body: { prompt: "hi", max_tokens: 2 } });
  assert.equal(ok.status, 200);
  assert.equal((await server.stop()).code, 0);
  const lines = server.stderr.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
  const access = lines.filter((l) => l.method !== undefined);
  const byId = Object.fromEntries(access.map((l) => [l.request_id, l]));
  const mine = byId["client-id-7"];
  assert.ok(mine, server.stderr);
  assert.equal(mine.level, "info");
  assert.equal(mine.path, "/v1/models");
  assert.equal(mine.status, 200);
  assert.ok(mine.duration_ms >= 0 && mine.bytes > 0);
  assert.match(mine.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  const notFound = byId[missing.headers["x-request-id"]];
  assert.equal(notFound.status, 404);
  assert.equal(notFound.level, "warning");
  assert.equal(notFound.error, "unknown route");
  const invalid = access.find((l) => l.status === 400);
  assert.match(invalid.error, /max_tokens/);
  assert.ok(access.some((l) => l.path === "/v1/completions" && l.status === 200));
});

test("--log-level warning keeps 4xx lines and drops the rest; bad values are startup errors", { timeout: 60_000 }, async () => {
  const server = await Server.start(["--log-level", "warning"]);
  await server.request("GET", "/health");
  await server.request("GET", "/no-such-route");
  assert.equal((await server.stop()).code, 0);
  assert.match(server.stderr, /^\[W\] GET \/no-such-route 404 .*error="unknown route"/m);
  assert.doesNotMatch(server.stderr, /GET \/health/);
  for (const flags of [["--log-level", "loud"], ["--log-format", "xml"]]) {
    const r = await runToExit(["serve", "--port", "0", ...flags]);
    assert.equal(r.listening, false);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, new RegExp(flags[0]));
  }
});
