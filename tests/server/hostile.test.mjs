// Clients that try to take the server down: header floods, slowloris, pipelining, connection
// bursts, more connections than allowed, shutdown under slow clients. Each waits on events (a
// response, a close, an exit), never on a sleep; the server's short deadlines make them quick.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import net from "node:net";
import { Server, assertErrorShape, rawBytes, rawRequest } from "./lib/server.mjs";

const FLAGS = ["--header-timeout", "1", "--read-timeout", "2", "--idle-timeout", "30",
               "--max-connections", "40", "--shutdown-timeout", "1"];

function rssMiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m[1]) / 1024;
}

// Writes `head` and then one more byte every `everyMs` until the server closes the connection;
// resolves to what the server sent.
function trickle(port, head, everyMs = 100) {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    let received = "";
    let timer;
    socket.on("connect", () => {
      socket.write(head);
      timer = setInterval(() => { if (!socket.destroyed) socket.write("X"); }, everyMs);
    });
    socket.setEncoding("latin1").on("data", (d) => { received += d; });
    socket.on("error", () => {});
    socket.on("close", () => { clearInterval(timer); resolve(received); });
  });
}

// An open connection that has sent nothing; resolves `closed` to what the server sent.
function idleConnection(port) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      let received = "";
      socket.setEncoding("latin1").on("data", (d) => { received += d; });
      const closed = new Promise((r) => socket.on("close", () => r(received)));
      resolve({ socket, closed });
    });
    socket.on("error", reject);
  });
}

let server;

test("start a server with short deadlines and a connection cap", { timeout: 60_000 }, async () => {
  server = await Server.start(FLAGS, { apiKey: "k" });
});

test("row 1: a head of many small headers is a 431 before any key check, and memory stays flat", { timeout: 120_000 }, async () => {
  const pid = server.child.pid;
  const line = "X-Filler: " + "a".repeat(90) + "\r\n";
  const flood = "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + line.repeat(2000) + "\r\n";  // 200 KB
  const before = rssMiB(pid);
  for (let i = 0; i < 20; ++i) {
    const res = await rawBytes(server.port, flood);
    assert.equal(res.status, 431, res.body.slice(0, 200));
    assertErrorShape(JSON.parse(res.body), { code: "request_header_fields_too_large" });
  }
  const grown = rssMiB(pid) - before;
  assert.ok(grown < 32, `RSS grew by ${grown.toFixed(1)} MiB over 20 flooded requests`);
  // Too many fields, each short: also a 431.
  const many = "GET /health HTTP/1.1\r\nHost: x\r\n" + "A: b\r\n".repeat(150) + "\r\n";
  assert.equal((await rawBytes(server.port, many)).status, 431);
});

test("row 2: slowloris connections get 408 at the head deadline, and /health is served meanwhile", { timeout: 60_000 }, async () => {
  const slow = [];
  for (let i = 0; i < 30; ++i) slow.push(trickle(server.port, "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  // While they trickle, other clients are served.
  for (let i = 0; i < 5; ++i) {
    const res = await rawRequest(server.port, "GET", "/health");
    assert.equal(res.status, 200);
  }
  for (const received of await Promise.all(slow)) {
    assert.match(received, /^HTTP\/1\.1 408 /, received.slice(0, 200));
    assert.match(received, /--header-timeout/);
  }
});

test("a body that trickles in gets 408 at the whole-request deadline", { timeout: 60_000 }, async () => {
  const received = await trickle(server.port,
    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n" +
    "Content-Length: 100000\r\n\r\n{", 50);
  assert.match(received, /^HTTP\/1\.1 408 /, received.slice(0, 200));
  assert.match(received, /--read-timeout/);
});

test("row 7: requests pipelined in one write are all answered, in order", { timeout: 60_000 }, async () => {
  const body = JSON.stringify({ prompt: "hi", max_tokens: 3, ignore_eos: true });
  const res = await new Promise((resolve, reject) => {
    const socket = net.connect(server.port, "127.0.0.1", () => socket.write(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
      "GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: second\r\n\r\n" +
      "GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    let received = "";
    socket.setEncoding("latin1").on("data", (d) => { received += d; });
    socket.on("error", reject);
    socket.on("close", () => resolve(received));
  });
  const statuses = [...res.matchAll(/HTTP\/1\.1 (\d+) /g)].map((m) => Number(m[1]));
  assert.deepEqual(statuses, [200, 200, 404], res);
  assert.ok(res.indexOf("text_completion") < res.indexOf('"status":"ok"'), res);
  assert.match(res, /X-Request-Id: second/i);
});

test("Expect: 100-continue gets its interim response, then the answer", { timeout: 60_000 }, async () => {
  const body = JSON.stringify({ prompt: "hi", max_tokens: 2, ignore_eos: true });
  const received = await new Promise((resolve, reject) => {
    const socket = net.connect(server.port, "127.0.0.1", () => socket.write(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${body.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`));
    let text = "";
    let sent = false;
    socket.setEncoding("latin1").on("data", (d) => {
      text += d;
      if (!sent && text.includes("100 Continue\r\n\r\n")) { sent = true; socket.write(body); }
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(text));
  });
  assert.match(received, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /, received.slice(0, 200));
});

test("row 11: a burst of 300 connects is served in full", { timeout: 120_000 }, async () => {
  // A server of its own, with the default backlog (1024) and connection cap (4096).
  const burst = await Server.start([]);
  try {
    const results = await Promise.all(Array.from({ length: 300 }, () =>
      rawRequest(burst.port, "GET", "/health").then((r) => r.status, (e) => e.code)));
    assert.deepEqual(results.filter((s) => s !== 200), []);
  } finally {
    assert.equal((await burst.stop()).code, 0);
  }
});

test("--max-connections: beyond the cap a connection gets 503 with Retry-After; below it again, service resumes", { timeout: 60_000 }, async () => {
  const held = [];
  for (let i = 0; i < 40; ++i) held.push(await idleConnection(server.port));
  // Every held connection is open on the server before the next one is tried: one more is over.
  const over = await rawBytes(server.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  assert.equal(over.status, 503, over.body);
  assert.equal(over.headers["retry-after"], "1");
  assert.match(JSON.parse(over.body).error.message, /--max-connections/);
  for (const { socket } of held) socket.destroy();
  await Promise.all(held.map((h) => h.closed));
  // The server notices the closes on its own schedule: retry until one is accepted.
  for (;;) {
    const res = await rawRequest(server.port, "GET", "/health");
    if (res.status === 200) break;
    assert.equal(res.status, 503);
  }
});

test("row 3: SIGTERM with a trickling client and a stalled stream exits 0 within the shutdown timeout", { timeout: 60_000 }, async () => {
  const slow = trickle(server.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n", 200);
  // A stream whose client reads nothing: the server's writes stall once the socket buffers fill.
  const body = JSON.stringify({ prompt: "hi", max_tokens: 3000, ignore_eos: true, stream: true, logprobs: 5 });
  const stalled = net.connect(server.port, "127.0.0.1", () => {
    stalled.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    stalled.pause();
  });
  stalled.on("error", () => {});
  await server.waitForMetrics((m) => m.get("kvserve:num_requests_running") === 1, { what: "the stream running" });
  const { code, signal } = await server.stop();
  assert.equal(signal, null);
  assert.equal(code, 0, server.stderr.slice(-2000));
  await slow;
  stalled.destroy();
});
