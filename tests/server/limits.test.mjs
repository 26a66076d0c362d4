// Admission and response limits: 503 server_overloaded with Retry-After when running + queued
// requests are at their limit, keep-alive comments while a streaming request waits in the queue,
// SIGTERM with a request in flight, and --max-response-bytes. Synchronisation is by events (first
// chunk received, metrics polled), never by sleeping.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Server, assertErrorShape, openStream } from "./lib/server.mjs";

const LONG = (model) => ({
  model, prompt: "Once upon a time", max_tokens: 4000, temperature: 0, ignore_eos: true, stream: true,
});

// Reads SSE items until the first data event; resolves to the iterator (positioned after it) and
// the comments seen before it.
async function untilFirstData(stream) {
  const it = stream.events();
  const comments = [];
  for (;;) {
    const { value, done } = await it.next();
    assert.ok(!done, "stream ended before any data");
    if (value.comment !== undefined) comments.push(value.comment);
    else if (value.data !== undefined) return { it, first: value.data, comments };
    else assert.fail(`unexpected trailing stream content ${JSON.stringify(value)}`);
  }
}

async function drain(it) {
  const data = [];
  for (;;) {
    const { value, done } = await it.next();
    if (done) return data;
    if (value.data !== undefined) data.push(value.data);
  }
}

describe("503 server_overloaded (--max-num-seqs 1 --max-queued-requests 0)", () => {
  let server;
  before(async () => {
    server = await Server.start(["--max-num-seqs", "1", "--max-queued-requests", "0"]);
  });
  after(() => server?.kill());

  test("a request beyond the running one gets 503 with Retry-After; after it ends, requests are served", async () => {
    const rejectedBefore = (await server.metrics()).get("kvserve:requests_rejected_total") ?? 0;
    const busy = await openStream(server.port, "/v1/completions", LONG(server.model));
    assert.equal(busy.status, 200);
    const { it } = await untilFirstData(busy);

    const raw = await server.request("POST", "/v1/completions",
      { body: { model: server.model, prompt: "hi", max_tokens: 1 } });
    assert.equal(raw.status, 503, raw.text);
    assert.equal(raw.headers["retry-after"], "1");
    assertErrorShape(raw.body, { type: "server_error", code: "server_overloaded" });

    const client = server.client();
    const err = await client.chat.completions.create({
      model: server.model, messages: [{ role: "user", content: "hi" }], max_tokens: 1 })
      .then(() => assert.fail("accepted while the server is full"), (e) => e);
    assert.ok(err instanceof OpenAI.InternalServerError, `${err.constructor.name}: ${err.message}`);
    assert.equal(err.status, 503);
    assert.equal(err.headers["retry-after"], "1");
    assert.equal(err.code, "server_overloaded");
    assert.equal(err.type, "server_error");

    const streamed = await openStream(server.port, "/v1/completions", { ...LONG(server.model), max_tokens: 2 });
    assert.equal(streamed.status, 503, "a streaming request must be refused before the stream starts");
    assert.equal(streamed.headers["retry-after"], "1");
    assertErrorShape(JSON.parse(await streamed.text()), { code: "server_overloaded" });

    const m = await server.metrics();
    assert.equal(m.get("kvserve:requests_rejected_total") - rejectedBefore, 3);

    busy.destroy();
    await drain(it).catch(() => {});
    await server.waitForMetrics((mm) => mm.get("kvserve:num_requests_running") === 0 &&
      mm.get("kvserve:kv_cache_blocks", { state: "in_use" }) === 0, { what: "the aborted request gone" });
    const ok = await client.completions.create({ model: server.model, prompt: "hi", max_tokens: 3, ignore_eos: true });
    assert.equal(ok.usage.completion_tokens, 3);
  });

  test("a request with more prompts than the admission limit can ever take is a 400 naming prompt, not a 503", async () => {
    const rejectedBefore = (await server.metrics()).get("kvserve:requests_rejected_total") ?? 0;
    const res = await server.request("POST", "/v1/completions",
      { body: { model: server.model, prompt: ["a", "b"], max_tokens: 1 } });
    assert.equal(res.status, 400, res.text);
    assert.equal(res.headers["retry-after"], undefined);
    assertErrorShape(res.body, { type: "invalid_request_error", param: "prompt" });
    assert.match(res.body.error.message, /2 prompts.*at most 1/);
    assert.equal((await server.metrics()).get("kvserve:requests_rejected_total") - rejectedBefore, 0);
    const one = await server.request("POST", "/v1/completions",
      { body: { model: server.model, prompt: ["a"], max_tokens: 1 } });
    assert.equal(one.status, 200, one.text);
  });

  test("SIGTERM with a stream in flight cancels it and exits 0", async () => {
    const busy = await openStream(server.port, "/v1/completions", LONG(server.model));
    const { it } = await untilFirstData(busy);
    const { code, signal } = await server.stop();
    assert.equal(signal, null);
    assert.equal(code, 0, server.stderr.slice(-4000));
    // The stream ends (cleanly or with a reset); it must not hang.
    await drain(it).catch(() => {});
  });
});

describe("queueing (--max-num-seqs 1 --max-queued-requests 1)", () => {
  let server;
  before(async () => {
    server = await Server.start(["--max-num-seqs", "1", "--max-queued-requests", "1"]);
  });
  after(() => server?.kill());

  test("a queued stream gets keep-alive comments until admitted, then its tokens", { timeout: 120_000 }, async () => {
    const busy = await openStream(server.port, "/v1/completions", LONG(server.model));
    const { it: busyIt } = await untilFirstData(busy);

    const queued = await openStream(server.port, "/v1/chat/completions", {
      model: server.model, messages: [{ role: "user", content: "hi" }], max_tokens: 5, temperature: 0,
      ignore_eos: true, stream: true });
    assert.equal(queued.status, 200);
    assert.match(queued.headers["content-type"], /^text\/event-stream/);
    const queuedIt = queued.events();
    // The queued request is waiting: comments arrive, no data.
    const first = await queuedIt.next();
    assert.equal(first.done, false);
    assert.equal(first.value.data, undefined, `got data while another request holds the only slot`);
    assert.equal(first.value.comment, "keep-alive");
    const waiting = await server.waitForMetrics((m) => m.get("kvserve:num_requests_waiting") === 1,
      { what: "one waiting request" });
    assert.equal(waiting.get("kvserve:num_requests_running"), 1);

    // Running + queued are at the limit: a third is refused.
    const third = await server.request("POST", "/v1/completions", { body: { prompt: "x", max_tokens: 1 } });
    assert.equal(third.status, 503);

    // Free the slot; the queued one is admitted and completes.
    busy.destroy();
    await drain(busyIt).catch(() => {});
    const rest = [];
    for (;;) {
      const { value, done } = await queuedIt.next();
      if (done) break;
      if (value.data !== undefined) rest.push(value.data);
    }
    assert.equal(rest.at(-1), "[DONE]");
    const chunks = rest.slice(0, -1).map((d) => JSON.parse(d));
    const finish = chunks.flatMap((c) => c.choices).map((c) => c.finish_reason).filter(Boolean);
    assert.deepEqual(finish, ["length"]);
    await server.waitForMetrics((m) => m.get("kvserve:num_requests_running") === 0 &&
      m.get("kvserve:num_requests_waiting") === 0 && m.get("kvserve:kv_cache_blocks", { state: "in_use" }) === 0,
      { what: "an idle server" });
  });

  test("a queued stream whose client goes away leaves the queue", { timeout: 120_000 }, async () => {
    const abortedBefore = (await server.metrics()).get("kvserve:request_success_total", { finished_reason: "abort" }) ?? 0;
    const busy = await openStream(server.port, "/v1/completions", LONG(server.model));
    const { it: busyIt } = await untilFirstData(busy);
    const queued = await openStream(server.port, "/v1/completions", { ...LONG(server.model), max_tokens: 5 });
    await server.waitForMetrics((m) => m.get("kvserve:num_requests_waiting") === 1, { what: "one waiting request" });
    queued.destroy();
    const m = await server.waitForMetrics((mm) => mm.get("kvserve:num_requests_waiting") === 0,
      { what: "the abandoned request gone from the queue" });
    assert.equal(m.get("kvserve:num_requests_running"), 1, "the running request must be untouched");
    busy.destroy();
    await drain(busyIt).catch(() => {});
    const idle = await server.waitForMetrics((mm) => mm.get("kvserve:num_requests_running") === 0 &&
      mm.get("kvserve:kv_cache_blocks", { state: "in_use" }) === 0, { what: "an idle server" });
    assert.equal(idle.get("kvserve:request_success_total", { finished_reason: "abort" }) - abortedBefore, 2);
  });

  test("SIGTERM stops the queueing server with exit status 0", async () => {
    assert.equal((await server.stop()).code, 0);
  });
});

describe("one request's fair share (--max-num-seqs 1 --max-queued-requests 3)", () => {
  let server;
  before(async () => {
    server = await Server.start(["--max-num-seqs", "1", "--max-queued-requests", "3"]);
  });
  after(() => server?.kill());

  test("a request may hold half of the 4 places: 2 prompts are served, 3 are a 400 naming prompt", async () => {
    const two = await server.request("POST", "/v1/completions",
      { body: { model: server.model, prompt: ["a", "b"], max_tokens: 1 } });
    assert.equal(two.status, 200, two.text);
    assert.equal(two.body.choices.length, 2);
    const three = await server.request("POST", "/v1/completions",
      { body: { model: server.model, prompt: ["a", "b", "c"], max_tokens: 1 } });
    assert.equal(three.status, 400, three.text);
    assert.equal(three.headers["retry-after"], undefined);
    assertErrorShape(three.body, { type: "invalid_request_error", param: "prompt" });
    assert.match(three.body.error.message, /3 prompts.*at most 2 of the server's 4 places/);
  });

  test("SIGTERM stops the fair-share server with exit status 0", async () => {
    assert.equal((await server.stop()).code, 0);
  });
});

describe("priority (--max-num-seqs 1 --max-queued-requests 2)", () => {
  let server;
  before(async () => {
    server = await Server.start(["--max-num-seqs", "1", "--max-queued-requests", "2"]);
  });
  after(() => server?.kill());

  // Resolves to `name` at the stream's first data event. It reads with next() and never ends
  // the iteration early: leaving a for-await loop would close the connection, and the server
  // would (rightly) cancel that request.
  async function firstData(name, stream) {
    await untilFirstData(stream);
    return name;
  }

  test("of two queued requests the one with the higher priority is admitted first", { timeout: 120_000 }, async () => {
    const busy = await openStream(server.port, "/v1/completions", LONG(server.model));
    const { it: busyIt } = await untilFirstData(busy);
    // Both queued requests are long, so whichever is admitted holds the only slot for thousands
    // of tokens while the other keeps waiting: the first data event tells which went first.
    const low = await openStream(server.port, "/v1/completions", { ...LONG(server.model), priority: 0 });
    await server.waitForMetrics((m) => m.get("kvserve:num_requests_waiting") === 1, { what: "low queued" });
    const high = await openStream(server.port, "/v1/completions", { ...LONG(server.model), priority: 10 });
    await server.waitForMetrics((m) => m.get("kvserve:num_requests_waiting") === 2, { what: "high queued" });
    const winner = Promise.race([firstData("high", high), firstData("low", low)]);
    busy.destroy();
    await drain(busyIt).catch(() => {});
    assert.equal(await winner, "high");
    const m = await server.metrics();
    assert.equal(m.get("kvserve:num_requests_running"), 1);
    assert.equal(m.get("kvserve:num_requests_waiting"), 1);
    high.destroy();
    low.destroy();
    await server.waitForMetrics((mm) => mm.get("kvserve:num_requests_running") === 0 &&
      mm.get("kvserve:num_requests_waiting") === 0 && mm.get("kvserve:kv_cache_blocks", { state: "in_use" }) === 0,
      { what: "an idle server" });
  });

  test("SIGTERM stops the priority server with exit status 0", async () => {
    assert.equal((await server.stop()).code, 0);
  });
});

describe("response size (--max-response-bytes 8KiB)", () => {
  let server;
  before(async () => { server = await Server.start(["--max-response-bytes", "8KiB"]); });
  after(() => server?.kill());

  test("a request that can only produce more than the limit is a 400 naming max_tokens", async () => {
    // The probe's case: 136 bytes asking for 64 choices x 1000 tokens x 20 top logprobs.
    const res = await server.json("POST", "/v1/chat/completions", {
      messages: [{ role: "user", content: "hi" }], n: 64, max_tokens: 1000, logprobs: true, top_logprobs: 20,
    });
    assert.equal(res.status, 400, res.text);
    assertErrorShape(res.body, { type: "invalid_request_error", param: "max_tokens" });
    assert.match(res.body.error.message, /--max-response-bytes/);
  });

  test("a stream that reaches the limit ends with a response_too_large event, and the server goes on", async () => {
    const stream = await openStream(server.port, "/v1/completions",
      { model: server.model, prompt: "Once upon a time", max_tokens: 120, temperature: 0, ignore_eos: true, stream: true });
    assert.equal(stream.status, 200);
    const data = await drain(stream.events());
    assert.equal(data.at(-1), "[DONE]");
    const last = JSON.parse(data.at(-2));
    assert.equal(last.error.code, "response_too_large");
    const tokens = data.slice(0, -2).map((d) => JSON.parse(d));
    assert.ok(tokens.length > 5 && tokens.length < 120, `${tokens.length} chunks`);
    const bytes = data.slice(0, -2).reduce((n, d) => n + d.length + 8, 0);
    assert.ok(bytes <= 8192, `${bytes} bytes before the error`);
    // The cut request was cancelled: nothing is left running, and the next request is served.
    await server.waitForMetrics((m) => m.get("kvserve:num_requests_running") === 0, { what: "no request running" });
    const ok = await server.json("POST", "/v1/completions", { model: server.model, prompt: "hi", max_tokens: 4 });
    assert.equal(ok.status, 200, ok.text);
  });

  test("a non-streamed response that reaches the limit is a 400 response_too_large", async () => {
    // 9 tokens x 21 logprob entries: at least 40 + 5 bytes each in chat's shape, over 8 KiB, while
    // the up-front floor (60 + 40 x 21 bytes a token) stays under it.
    const res = await server.json("POST", "/v1/chat/completions", {
      messages: [{ role: "user", content: "hi" }], max_tokens: 9, logprobs: true, top_logprobs: 20,
      ignore_eos: true, temperature: 0,
    });
    assert.equal(res.status, 400, res.text.slice(0, 300));
    assertErrorShape(res.body, { type: "invalid_request_error", code: "response_too_large" });
    const small = await server.json("POST", "/v1/chat/completions", {
      messages: [{ role: "user", content: "hi" }], max_tokens: 2, logprobs: true, top_logprobs: 2,
    });
    assert.equal(small.status, 200, small.text);
  });

  test("SIGTERM stops the --max-response-bytes server with exit status 0", async () => {
    assert.equal((await server.stop()).code, 0);
  });
});
