// Every documented client error, each in the OpenAI error shape
// {"error":{"message","type","param","code"}}: 400 for malformed JSON, invalid UTF-8, wrong types,
// out-of-range values and prompts longer than the context; 401 for a missing or wrong API key;
// 404 for unknown routes and models; 413 for oversized bodies. (503 is in limits.test.mjs.)
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import OpenAI from "openai";
import { Server, assertErrorShape, rawBytes, testCleanShutdown, useServer, words } from "./lib/server.mjs";

const ctx = useServer();

describe("400 invalid_request_error", () => {
  const post = (path, body, headers) => ctx.server.request("POST", path, { body, headers });

  test("malformed JSON", async () => {
    for (const path of ["/v1/completions", "/v1/chat/completions"]) {
      for (const body of ['{"prompt": "hi", ', "not json", "", '{"prompt": "a"} trailing']) {
        const res = await post(path, body);
        assert.equal(res.status, 400, `${path} ${JSON.stringify(body)}: ${res.text}`);
        assertErrorShape(res.body, { type: "invalid_request_error" });
      }
    }
  });

  test("a JSON body that is not an object", async () => {
    for (const body of ["[1, 2]", '"prompt"', "42", "null"]) {
      const res = await post("/v1/completions", body);
      assert.equal(res.status, 400, `${body}: ${res.text}`);
      assertErrorShape(res.body, { type: "invalid_request_error" });
    }
  });

  test("invalid UTF-8 in the body", async () => {
    const bodies = [
      Buffer.concat([Buffer.from('{"prompt": "bad '), Buffer.from([0xff, 0xfe]), Buffer.from('", "max_tokens": 1}')]),
      Buffer.concat([Buffer.from('{"prompt": "cut '), Buffer.from([0xe2, 0x82]), Buffer.from('", "max_tokens": 1}')]),
      Buffer.concat([Buffer.from('{"prompt": "overlong '), Buffer.from([0xc0, 0xaf]), Buffer.from('", "max_tokens": 1}')]),
    ];
    for (const body of bodies) {
      const res = await post("/v1/completions", body);
      assert.equal(res.status, 400, `${body.toString("hex")}: ${res.text}`);
      assertErrorShape(res.body, { type: "invalid_request_error" });
    }
    const chat = Buffer.concat([Buffer.from('{"messages": [{"role": "user", "content": "x'),
                                Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}], "max_tokens": 1}')]);
    const res = await post("/v1/chat/completions", chat);
    assert.equal(res.status, 400, res.text);
    assertErrorShape(res.body, { type: "invalid_request_error" });
  });

  // [endpoint, field, bad value] for wrong types and out-of-range values: each is a 400 naming
  // the field in error.param, sent through the openai client as a user would.
  const completions = "completions";
  const chat = "chat";
  const cases = [
    [completions, "max_tokens", "ten"], [completions, "max_tokens", 0], [completions, "max_tokens", -5],
    [completions, "max_tokens", 2.5],
    [completions, "temperature", "hot"], [completions, "temperature", -0.1], [completions, "temperature", 2.01],
    [completions, "top_p", 0], [completions, "top_p", 1.5], [completions, "top_p", "all"],
    [completions, "n", 0], [completions, "n", 129], [completions, "n", 1.5], [completions, "n", "2"],
    [completions, "stop", 42], [completions, "stop", Array.from({ length: 17 }, (_, i) => `s${i}`)],
    [completions, "stop", [1, 2]],
    [completions, "seed", "lucky"],
    [completions, "presence_penalty", 2.5], [completions, "frequency_penalty", -3],
    [completions, "logprobs", 21], [completions, "logprobs", -1], [completions, "logprobs", "3"],
    [completions, "stream", "yes"], [completions, "echo", "yes"],
    [completions, "stream_options", { include_usage: true }],  // only with stream: true
    [completions, "prompt", 42], [completions, "prompt", [1.5, 2]], [completions, "prompt", { text: "x" }],
    [completions, "prompt", [5000]], [completions, "prompt", [-1]], [completions, "prompt", []],
    [completions, "prompt", [[1, 2], [99999]]],
    [completions, "model", 42], [completions, "user", 5],
    // OpenAI fields kvserve cannot honour are refused rather than ignored.
    [completions, "best_of", 3], [completions, "logit_bias", { "5": 10 }], [completions, "suffix", "end"],
    [chat, "logit_bias", { "7": -100 }],
    // Constraints the engine cannot honour exactly: an unsupported keyword, a bad regex or grammar.
    [chat, "response_format", { type: "json_schema", json_schema: { name: "x",
      schema: { type: "object", unevaluatedProperties: false } } }],
    [chat, "response_format", { type: "json_schema", json_schema: { schema: { type: "object" } } }],
    [chat, "response_format", { type: "json_schema", json_schema: { name: "x", schema: { type: "integer", multipleOf: 0.3 } } }],
    [chat, "structured_outputs", { regex: "(a" }], [chat, "structured_outputs", { grammar: "root ::= foo" }],
    [chat, "structured_outputs", { choice: [] }], [chat, "guided_json", { type: "wat" }],
    [completions, "structured_outputs", { json: { type: "object", propertyNames: { maxLength: 2 } } }],
    [completions, "top_k", -2], [completions, "top_k", "many"], [completions, "min_p", 1.5],
    [completions, "repetition_penalty", 0], [completions, "repetition_penalty", -1],
    [completions, "priority", "high"], [completions, "priority", 1.5], [completions, "cache_salt", 5],
    [completions, "ignore_eos", "yes"], [completions, "stop_token_ids", "2"], [completions, "stop_token_ids", ["a"]],
    [chat, "messages", "hello"], [chat, "messages", []], [chat, "messages", [{ role: "wizard", content: "x" }]],
    [chat, "messages", [{ role: "user", content: 5 }]], [chat, "messages", [{ content: "no role" }]],
    [chat, "messages", [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/y.png" } }] }]],
    [chat, "logprobs", 3], [chat, "top_logprobs", 21], [chat, "top_logprobs", -1],
    [chat, "top_logprobs", 2],  // needs logprobs: true
    [chat, "max_completion_tokens", 0], [chat, "max_tokens", "many"], [chat, "temperature", 3],
    [chat, "n", 200], [chat, "stream", 1],
    // Values that are in range as doubles but not as the engine's 32-bit floats, and wrong
    // nested types: each is the client's mistake, named, never a 500.
    [completions, "repetition_penalty", 1e-320], [completions, "top_p", 1e-50],
    [completions, "max_tokens", 1e300], [completions, "seed", -1e20],
    [chat, "response_format", { type: 5 }], [chat, "response_format", "json"],
    [chat, "response_format", { type: null }],
  ];
  for (const [endpoint, field, value] of cases) {
    test(`${endpoint}: ${field} = ${JSON.stringify(value).slice(0, 40)} is rejected naming ${field}`, async () => {
      const base = endpoint === chat
        ? { model: ctx.server.model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }
        : { model: ctx.server.model, prompt: "hi", max_tokens: 2 };
      const params = { ...base, [field]: value };
      const create = endpoint === chat ? ctx.client.chat.completions : ctx.client.completions;
      const err = await create.create(params).then(
        (r) => assert.fail(`accepted: ${JSON.stringify(r).slice(0, 200)}`), (e) => e);
      assert.ok(err instanceof OpenAI.BadRequestError, `${err.constructor.name}: ${err.message}`);
      assert.equal(err.status, 400);
      assert.equal(err.type, "invalid_request_error");
      // Nested fields may name the exact path: messages[2].role, response_format.json_schema.name.
      if (["messages", "response_format", "structured_outputs"].includes(field)) {
        assert.ok(String(err.param).startsWith(field), `param ${err.param}`);
      }
      else assert.equal(err.param, field, err.message);
    });
  }

  test("the refusable OpenAI fields are accepted in their neutral form", async () => {
    const res = await ctx.client.completions.create({
      model: ctx.server.model, prompt: "hi", max_tokens: 2, n: 2, best_of: 2, logit_bias: {}, suffix: "",
      ignore_eos: true });
    assert.equal(res.choices.length, 2);
    const chatRes = await ctx.client.chat.completions.create({
      model: ctx.server.model, messages: [{ role: "user", content: "hi" }], max_tokens: 2, logit_bias: {},
      response_format: { type: "text" }, tools: [], ignore_eos: true });
    assert.equal(chatRes.usage.completion_tokens, 2);
  });

  test("a number beyond a double (1e400) is a 400 naming the JSON error, not a 500", async () => {
    for (const path of ["/v1/completions", "/tokenize"]) {
      const res = await post(path, '{"prompt": "hi", "max_tokens": 1e400}');
      assert.equal(res.status, 400, `${path}: ${res.text}`);
      assertErrorShape(res.body, { type: "invalid_request_error" });
      assert.match(res.body.error.message, /number overflow/);
    }
  });

  test("a body that cannot carry JSON (multipart, binary) is a 415; curl's default type is read", async () => {
    const boundary = "----kvserve";
    const multipart = `--${boundary}\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nhi\r\n--${boundary}--\r\n`;
    for (const [type, body] of [[`multipart/form-data; boundary=${boundary}`, multipart],
                                ["application/octet-stream", '{"prompt": "hi"}'],
                                ["image/png", "x"]]) {
      for (const path of ["/v1/completions", "/v1/chat/completions", "/tokenize"]) {
        const res = await ctx.server.request("POST", path, { body, headers: { "content-type": type } });
        assert.equal(res.status, 415, `${type} ${path}: ${res.text}`);
        assertErrorShape(res.body, { type: "invalid_request_error", code: "unsupported_media_type" });
      }
    }
    for (const type of ["application/x-www-form-urlencoded", "text/plain; charset=utf-8",
                        "application/json; charset=UTF-8", "application/merge-patch+json"]) {
      const res = await ctx.server.request("POST", "/v1/completions", {
        body: JSON.stringify({ prompt: "hi", max_tokens: 1 }), headers: { "content-type": type } });
      assert.equal(res.status, 200, `${type}: ${res.text}`);
    }
  });

  test("a temperature below 1e-5 (down to 1e-40) is greedy: the same text as temperature 0", async () => {
    const base = { model: ctx.server.model, prompt: "Once upon a time", max_tokens: 12 };
    const greedy = await ctx.client.completions.create({ ...base, temperature: 0 });
    for (const temperature of [1e-40, 1e-20, 1e-6]) {
      for (const seed of [1, 2, 3]) {
        const res = await ctx.client.completions.create({ ...base, temperature, seed });
        assert.equal(res.choices[0].text, greedy.choices[0].text, `temperature ${temperature} seed ${seed}`);
      }
    }
  });

  test("a raw out-of-range request carries the full error shape", async () => {
    const res = await post("/v1/completions", { prompt: "hi", temperature: 9 });
    assert.equal(res.status, 400);
    assert.match(res.headers["content-type"], /^application\/json/);
    assertErrorShape(res.body, { type: "invalid_request_error", param: "temperature" });
  });
});

describe("400 context_length_exceeded (--max-model-len 256)", () => {
  let server;
  let client;
  before(async () => { server = await Server.start(["--max-model-len", "256"]); client = server.client(); });
  after(() => server?.kill());

  test("/v1/models and /tokenize report max_model_len 256", async () => {
    const models = await server.request("GET", "/v1/models");
    assert.equal(models.body.data[0].max_model_len, 256);
    const tok = await server.request("POST", "/tokenize", { body: { prompt: "hello" } });
    assert.equal(tok.body.max_model_len, 256);
  });

  test("a prompt longer than the context is rejected", async () => {
    const prompt = words(400, 1);
    assert.ok(await server.tokenCount(prompt) > 256);
    for (const p of [prompt, [prompt]]) {
      const err = await client.completions.create({ model: server.model, prompt: p, max_tokens: 1 })
        .then(() => assert.fail("accepted"), (e) => e);
      assert.equal(err.status, 400, err.message);
      assert.equal(err.type, "invalid_request_error");
      assert.equal(err.code, "context_length_exceeded");
    }
    const chatErr = await client.chat.completions.create({
      model: server.model, messages: [{ role: "user", content: prompt }], max_tokens: 1 })
      .then(() => assert.fail("accepted"), (e) => e);
    assert.equal(chatErr.status, 400);
    assert.equal(chatErr.code, "context_length_exceeded");
  });

  test("a prompt that fits but not with max_tokens is rejected; one that fits with it is served", async () => {
    const prompt = words(120, 2);
    const p = await server.tokenCount(prompt);
    assert.ok(p > 100 && p < 240, `prompt is ${p} tokens`);
    const err = await client.completions.create({ model: server.model, prompt, max_tokens: 256 - p + 1 })
      .then(() => assert.fail("accepted"), (e) => e);
    assert.equal(err.status, 400);
    assert.equal(err.code, "context_length_exceeded");
    const ok = await client.completions.create({
      model: server.model, prompt, max_tokens: 256 - p, temperature: 0, ignore_eos: true });
    assert.equal(ok.usage.prompt_tokens, p);
    assert.equal(ok.usage.completion_tokens, 256 - p);
  });

  test("chat without max_tokens generates up to the rest of the context", async () => {
    const res = await client.chat.completions.create({
      model: server.model, messages: [{ role: "user", content: words(30, 3) }], temperature: 0,
      ignore_eos: true });
    assert.equal(res.choices[0].finish_reason, "length");
    assert.equal(res.usage.prompt_tokens + res.usage.completion_tokens, 256);
  });

  test("SIGTERM stops the --max-model-len server with exit status 0", async () => {
    assert.equal((await server.stop()).code, 0);
  });
});

describe("401 invalid_api_key (--api-key)", () => {
  const KEY = "sk-test-kvserve-0123456789";
  let server;
  before(async () => { server = await Server.start([], { apiKey: KEY }); });
  after(() => server?.kill());

  test("a missing key is rejected on /v1/*, /tokenize and /detokenize", async () => {
    const routes = [["GET", "/v1/models"], ["POST", "/v1/completions", { prompt: "hi", max_tokens: 1 }],
                    ["POST", "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 1 }],
                    ["POST", "/tokenize", { prompt: "hi" }], ["POST", "/detokenize", { tokens: [1] }]];
    for (const [method, path, body] of routes) {
      const res = await server.request(method, path, { body, auth: false });
      assert.equal(res.status, 401, `${method} ${path}: ${res.text}`);
      assertErrorShape(res.body, { type: "invalid_request_error", code: "invalid_api_key" });
    }
  });

  test("a wrong key is rejected through the openai client", async () => {
    const client = server.client({ apiKey: "sk-wrong" });
    const err = await client.completions.create({ model: server.model, prompt: "hi", max_tokens: 1 })
      .then(() => assert.fail("accepted"), (e) => e);
    assert.ok(err instanceof OpenAI.AuthenticationError, err.message);
    assert.equal(err.status, 401);
    assert.equal(err.code, "invalid_api_key");
    const raw = await server.request("GET", "/v1/models", { auth: false, headers: { authorization: `Bearer ${KEY}x` } });
    assert.equal(raw.status, 401);
    const noBearer = await server.request("GET", "/v1/models", { auth: false, headers: { authorization: KEY } });
    assert.equal(noBearer.status, 401);
  });

  test("the right key is accepted", async () => {
    const res = await server.client().completions.create({
      model: server.model, prompt: "hi", max_tokens: 2, ignore_eos: true });
    assert.equal(res.usage.completion_tokens, 2);
    const tok = await server.request("POST", "/tokenize", { body: { prompt: "hi" } });
    assert.equal(tok.status, 200);
  });

  test("/health and /metrics need no key", async () => {
    const health = await server.request("GET", "/health", { auth: false });
    assert.equal(health.status, 200);
    assert.deepEqual(health.body, { status: "ok" });
    const metrics = await server.request("GET", "/metrics", { auth: false });
    assert.equal(metrics.status, 200);
  });

  test("SIGTERM stops the --api-key server with exit status 0", async () => {
    assert.equal((await server.stop()).code, 0);
  });
});

describe("404", () => {
  test("an unknown route is not_found", async () => {
    for (const [method, path] of [["GET", "/v1/nothing"], ["POST", "/v2/completions"], ["GET", "/"],
                                  ["POST", "/v1/embeddings"], ["GET", "/v1/completions/extra"]]) {
      const res = await ctx.server.request(method, path, { body: method === "POST" ? {} : undefined });
      assert.equal(res.status, 404, `${method} ${path}: ${res.text}`);
      assertErrorShape(res.body, { type: "invalid_request_error", code: "not_found" });
    }
  });

  test("an unknown model is model_not_found, on both completion endpoints", async () => {
    const e1 = await ctx.client.completions.create({ model: "no-such-model", prompt: "hi", max_tokens: 1 })
      .then(() => assert.fail("accepted"), (e) => e);
    assert.ok(e1 instanceof OpenAI.NotFoundError, e1.message);
    assert.equal(e1.type, "invalid_request_error");
    assert.equal(e1.code, "model_not_found");
    const e2 = await ctx.client.chat.completions.create({
      model: `${ctx.server.model}-x`, messages: [{ role: "user", content: "hi" }], max_tokens: 1 })
      .then(() => assert.fail("accepted"), (e) => e);
    assert.equal(e2.status, 404);
    assert.equal(e2.code, "model_not_found");
    const raw = await ctx.server.request("POST", "/v1/completions", { body: { model: "gpt-4", prompt: "hi" } });
    assertErrorShape(raw.body, { type: "invalid_request_error", code: "model_not_found" });
  });
});

// Framing is checked before any body is read, and answered at once with the connection closed;
// Range is ignored (no route serves byte ranges).
describe("framing (400, 411, 413) and Range", () => {
  const body = '{"prompt": "hi", "max_tokens": 1}';
  const post = (headers) =>
    rawBytes(ctx.server.port, `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${headers}\r\n${body}`);
  const errorOf = (res) => JSON.parse(res.body).error;

  test("two different Content-Length headers are a 400, never one of them", async () => {
    const res = await post(`Content-Length: ${body.length}\r\nContent-Length: 5\r\n`);
    assert.equal(res.status, 400, res.body);
    assert.match(errorOf(res).message, /conflicting Content-Length/);
    assert.equal(res.headers.connection, "close");
    // The same length twice is one length.
    const same = await post(`Content-Length: ${body.length}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n`);
    assert.equal(same.status, 200, same.body);
  });

  test("Content-Length with Transfer-Encoding is a 400", async () => {
    const res = await post(`Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n`);
    assert.equal(res.status, 400, res.body);
    assert.match(errorOf(res).message, /both Content-Length and Transfer-Encoding/);
  });

  test("a transfer coding other than chunked is a 501, and the connection closes", async () => {
    for (const coding of ["gzip", "gzip, chunked", "deflate,chunked", "identity"]) {
      const res = await post(`Transfer-Encoding: ${coding}\r\n`);
      assert.equal(res.status, 501, `${coding}: ${res.body}`);
      assertErrorShape(JSON.parse(res.body), { type: "invalid_request_error" });
      assert.equal(errorOf(res).code, "not_implemented");
      assert.match(errorOf(res).message, /transfer coding '(gzip|deflate|identity)' is not implemented/);
      assert.equal(res.headers.connection, "close");
    }
    // chunked twice is malformed, not unsupported.
    const twice = await post(`Transfer-Encoding: chunked, chunked\r\n`);
    assert.equal(twice.status, 400, twice.body);
  });

  test("a negative or malformed Content-Length is a 400, a huge one a 413, at once", async () => {
    for (const value of ["-5", "12abc", "0x20", "1 2"]) {
      const res = await post(`Content-Length: ${value}\r\n`);
      assert.equal(res.status, 400, `${value}: ${res.body}`);
      assertErrorShape(JSON.parse(res.body), { type: "invalid_request_error" });
    }
    // Past 64 bits a length is no number the parser can hold: invalid, a 400.
    const overflow = await post("Content-Length: 99999999999999999999999\r\n");
    assert.equal(overflow.status, 400, overflow.body);
    assert.match(errorOf(overflow).message, /invalid Content-Length/);
    const huge = await post("Content-Length: 1000000000\r\n");
    assert.equal(huge.status, 413, huge.body);
    assertErrorShape(JSON.parse(huge.body), { code: "request_too_large" });
  });

  test("a POST with neither Content-Length nor a chunked body is a 411", async () => {
    const res = await post("");
    assert.equal(res.status, 411, res.body);
    assertErrorShape(JSON.parse(res.body), { type: "invalid_request_error", code: "length_required" });
  });

  test("Range is ignored: whole valid JSON, and /metrics is never multiplied", async () => {
    const tok = await ctx.server.request("POST", "/tokenize",
      { body: { prompt: "hello world" }, headers: { range: "bytes=0-3" } });
    assert.equal(tok.status, 200, tok.text);
    assert.ok(tok.body.count > 0, tok.text);
    const ranges = Array.from({ length: 2700 }, () => "0-").join(",");
    const metrics = await ctx.server.request("GET", "/metrics", { auth: false, headers: { range: `bytes=${ranges}` } });
    assert.equal(metrics.status, 200);
    assert.doesNotMatch(metrics.headers["content-type"], /multipart/);
    assert.ok(metrics.text.length < 100_000, `${metrics.text.length} bytes`);
    assert.match(metrics.text, /^# HELP /);
  });
});

describe("413 request_too_large (--max-body-bytes 2048)", () => {
  let server;
  before(async () => { server = await Server.start(["--max-body-bytes", "2048"]); });
  after(() => server?.kill());

  test("a body over the limit is rejected; one under it is served", async () => {
    const big = JSON.stringify({ prompt: "x ".repeat(4000), max_tokens: 1 });
    assert.ok(big.length > 2048);
    const res = await server.request("POST", "/v1/completions", { body: big });
    assert.equal(res.status, 413, res.text);
    assertErrorShape(res.body, { type: "invalid_request_error", code: "request_too_large" });
    const small = JSON.stringify({ prompt: words(100, 5), max_tokens: 1 });
    assert.ok(small.length < 2048 && small.length > 400);
    const ok = await server.request("POST", "/v1/completions", { body: small });
    assert.equal(ok.status, 200, ok.text);
  });

  test("the limit also applies to chat and /tokenize", async () => {
    const content = "y ".repeat(2000);
    const chat = await server.request("POST", "/v1/chat/completions",
      { body: { messages: [{ role: "user", content }], max_tokens: 1 } });
    assert.equal(chat.status, 413);
    assertErrorShape(chat.body, { code: "request_too_large" });
    const tok = await server.request("POST", "/tokenize", { body: { prompt: content } });
    assert.equal(tok.status, 413);
  });

  test("a chunked body over the limit (no Content-Length) is rejected too", { timeout: 60_000 }, async () => {
    const chunk = Buffer.from(" ".repeat(1000));
    const res = await new Promise((resolve, reject) => {
      const req = http.request({ host: "127.0.0.1", port: server.port, method: "POST", path: "/v1/completions",
        headers: { "content-type": "application/json", "transfer-encoding": "chunked", connection: "close" } },
      (r) => {
        let text = "";
        r.setEncoding("utf8").on("data", (d) => { text += d; }).on("end", () => resolve({ status: r.statusCode, text }));
      });
      req.on("error", (e) => (e.code === "EPIPE" || e.code === "ECONNRESET" ? undefined : reject(e)));
      req.write('{"max_tokens": 1, "prompt": "x"');
      for (let i = 0; i < 4; ++i) req.write(chunk);
      req.end("}");
    });
    assert.equal(res.status, 413, res.text);
    assertErrorShape(JSON.parse(res.text), { code: "request_too_large" });
  });

  test("SIGTERM stops the --max-body-bytes server with exit status 0", async () => {
    assert.equal((await server.stop()).code, 0);
  });
});

testCleanShutdown(ctx);
