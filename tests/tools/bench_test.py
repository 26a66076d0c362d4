"""Black-box tests of `kvserve bench`: against a stand-in server that speaks llama.cpp's
OpenAI subset (streamed completions and chat, /tokenize answering {"tokens": [...]} for
{"content": ...}, timings.cache_n) and against a real `kvserve serve`. Nothing here depends on
how fast anything runs."""
import argparse
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest

KVSERVE = None


class StandIn(http.server.ThreadingHTTPServer):
    """A llama.cpp-like server: a word is a token, the prefix cache is perfect (the longest
    common prefix with any earlier prompt), every request generates exactly max_tokens."""
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), StandInHandler)
        self.lock = threading.Lock()
        self.prompts = []      # token lists seen so far
        self.requests = []     # bodies of completion requests
        self.tokenize_calls = 0


class StandInHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "stand-in-model"}]})
        else:
            self.send_json(404, {"error": {"message": "not found", "code": 404}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            if "content" not in body:  # llama.cpp reads only "content"
                return self.send_json(400, {"error": {"message": "content missing"}})
            with self.server.lock:
                self.server.tokenize_calls += 1
            return self.send_json(200, {"tokens": [hash(w) % 32000 for w in body["content"].split()]})
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self.send_json(404, {"error": {"message": "not found"}})
        if body.get("model") == "broken":
            return self.send_json(400, {"error": {"message": "model broken is not loaded"}})
        chat = self.path.endswith("chat/completions")
        if chat:
            tokens = []
            for m in body["messages"]:
                tokens += ["<%s>" % m["role"]] + m["content"].split()
            tokens.append("<assistant>")  # the generation prompt
        else:
            tokens = body["prompt"].split()
        with self.server.lock:
            cache_n = 0
            for p in self.server.prompts:
                n = 0
                while n < min(len(p), len(tokens) - 1) and p[n] == tokens[n]:
                    n += 1
                cache_n = max(cache_n, n)
            n_out = body.get("max_tokens", 16)
            # The KV of generated tokens is cached too, as in llama.cpp's slots.
            self.server.prompts.append(tokens + ["w%d" % i for i in range(n_out)])
            self.server.requests.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(obj):
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for i in range(n_out):
            piece = " w%d" % i
            if chat:
                delta = {"content": piece} if i else {"role": "assistant", "content": piece}
                event({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})
            else:
                event({"object": "text_completion", "choices": [{"index": 0, "text": piece}]})
        last = {"choices": [{"index": 0, "finish_reason": "length"}],
                "timings": {"cache_n": cache_n, "prompt_n": len(tokens) - cache_n, "predicted_n": n_out}}
        if chat:
            last["choices"][0]["delta"] = {}
        else:
            last["choices"][0]["text"] = ""
        event(last)
        if body.get("stream_options", {}).get("include_usage"):
            # Like older llama.cpp: usage without prompt_tokens_details.
            event({"choices": [], "usage": {"prompt_tokens": len(tokens), "completion_tokens": n_out,
                                            "total_tokens": len(tokens) + n_out}})
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def load(path):
    with open(path) as f:
        return json.load(f)


def read(path):
    with open(path) as f:
        return f.read()


def bench(*args, check=True):
    proc = subprocess.run([KVSERVE, "bench", "--no-progress", *args], capture_output=True, text=True,
                          timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"kvserve bench {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


class BenchAgainstStandIn(unittest.TestCase):
    def setUp(self):
        self.server = StandIn()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_shared_prefix_result_has_the_promised_fields_and_counts(self):
        out, report = self.path("r.json"), self.path("r.html")
        proc = bench("--base-url", self.url, "--workload", "shared-prefix", "--groups", "2",
                     "--prompts-per-group", "3", "--system-prompt-len", "40", "--question-len", "6",
                     "--output-len", "5", "--ignore-eos", "--concurrency", "3", "--seed", "4",
                     "--slo", "ttft:60000,tpot:60000", "--out", out, "--report", report)
        self.assertIn("TTFT", proc.stdout)
        r = load(out)
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            for stat in ("mean", "p50", "p90", "p99"):
                self.assertIn(stat, r[key], key)
        self.assertEqual(r["ttft_ms"]["count"], 6)
        self.assertEqual(r["itl_ms"]["count"], 6 * 4)
        self.assertEqual((r["num_requests"], r["completed"], r["failed"]), (6, 6, 0))
        self.assertEqual(r["total_output_tokens"], 30)
        self.assertEqual(r["total_input_tokens"], 6 * 46)
        for key in ("request_throughput", "output_throughput", "total_token_throughput"):
            self.assertGreater(r[key], 0)
        self.assertEqual(r["goodput"]["good_requests"], 6)
        # Every later member of a group can reuse the 40-token system prompt.
        self.assertEqual(r["cached_tokens"]["ideal"], 4 * 40)
        self.assertEqual(r["cached_tokens"]["requests_reporting"], 6)
        self.assertGreaterEqual(r["cached_tokens"]["reported"], 4 * 40)
        self.assertLessEqual(r["cached_tokens"]["reported"], 4 * 40 + 6)
        self.assertEqual(r["config"]["token_counter"], "server")
        self.assertEqual(r["config"]["model"], "stand-in-model")
        self.assertIsNone(r["server_ms"])  # the stand-in has no /metrics, as llama.cpp by default
        self.assertEqual(len(r["requests"]), 6)
        self.assertEqual(sorted(q["seq"] for q in r["requests"]), list(range(6)))
        # What the server saw.
        self.assertGreater(self.server.tokenize_calls, 0)
        self.assertEqual(len(self.server.requests), 6)
        for body in self.server.requests:
            self.assertEqual(body["max_tokens"], 5)
            self.assertIs(body["ignore_eos"], True)
            self.assertIs(body["stream"], True)
            self.assertIs(body["stream_options"]["include_usage"], True)
            self.assertEqual(body["model"], "stand-in-model")
        prefixes = {}
        for body in self.server.requests:
            words = body["prompt"].split()
            self.assertEqual(len(words), 46)
            prefixes.setdefault(" ".join(words[:40]), 0)
            prefixes[" ".join(words[:40])] += 1
        self.assertEqual(sorted(prefixes.values()), [3, 3])
        html = read(report)
        self.assertTrue(html.startswith("<!DOCTYPE html>"))
        self.assertGreaterEqual(html.count("<svg"), 7)
        self.assertNotIn("<script", html)

    def test_same_seed_sends_the_same_prompts(self):
        args = ["--base-url", self.url, "--workload", "repeat-prefix", "--num-prompts", "6",
                "--num-prefixes", "2", "--prefix-len", "20", "--suffix-len", "4", "--output-len", "2",
                "--concurrency", "1", "--seed", "11"]
        bench(*args)
        first = [b["prompt"] for b in self.server.requests]
        bench(*args)
        self.assertEqual([b["prompt"] for b in self.server.requests[6:]], first)
        self.assertEqual(len(set(p.split()[0] for p in first)), 2)

    def test_multi_turn_sends_the_whole_history_over_chat(self):
        out = self.path("mt.json")
        bench("--base-url", self.url, "--workload", "multi-turn", "--conversations", "2",
              "--rounds", "3", "--user-len", "8", "--output-len", "4", "--concurrency", "2",
              "--out", out)
        r = load(out)
        self.assertEqual((r["completed"], r["failed"]), (6, 0))
        self.assertEqual(r["config"]["endpoint"], "chat")
        by_len = sorted(len(b["messages"]) for b in self.server.requests)
        self.assertEqual(by_len, [1, 1, 3, 3, 5, 5])
        for body in self.server.requests:
            for m in body["messages"]:
                if m["role"] == "assistant":
                    self.assertEqual(m["content"], " w0 w1 w2 w3")
        # Round r+1 can reuse round r's prompt and all but its last answer token.
        reqs = {q["id"]: q for q in r["requests"]}
        for i in range(2, 6):
            prev = reqs[i - 2]
            self.assertEqual(reqs[i]["ideal_cached_tokens"],
                             prev["prompt_tokens"] + prev["output_tokens"] - 1)
            self.assertGreaterEqual(reqs[i]["cached_tokens"], reqs[i]["ideal_cached_tokens"])

    def test_long_doc_and_random_with_poisson_and_gamma_arrivals(self):
        out = self.path("ld.json")
        bench("--base-url", self.url, "--workload", "long-doc", "--docs", "2", "--doc-len", "30",
              "--questions-per-doc", "2", "--question-len", "3", "--order", "interleave",
              "--output-len", "2", "--request-rate", "500", "--out", out)
        r = load(out)
        self.assertEqual(r["completed"], 4)
        self.assertEqual(r["config"]["arrival"], "poisson")
        self.assertEqual(r["cached_tokens"]["ideal"], 2 * 30)
        bench("--base-url", self.url, "--workload", "random", "--num-prompts", "5", "--input-len",
              "12", "--range-ratio", "0.5", "--output-len", "2", "--request-rate", "500",
              "--burstiness", "0.5", "--out", out)
        r = load(out)
        self.assertEqual(r["completed"], 5)
        self.assertEqual(r["config"]["arrival"], "gamma")
        self.assertEqual(r["cached_tokens"]["ideal"], 0)

    def test_compare_prints_ratios(self):
        a, b = self.path("a.json"), self.path("b.json")
        common = ["--base-url", self.url, "--workload", "random", "--num-prompts", "3",
                  "--input-len", "10", "--output-len", "3"]
        bench(*common, "--out", a)
        bench(*common, "--out", b)
        proc = bench("--compare", a, b)
        self.assertRegex(proc.stdout, r"request_throughput\s+[\d.]+\s+[\d.]+\s+[\d.]+")
        self.assertIn("B/A", proc.stdout)

    def test_failures_are_reported_not_crashes(self):
        out = self.path("fail.json")
        proc = bench("--base-url", self.url, "--model", "broken", "--workload", "random",
                     "--num-prompts", "2", "--input-len", "5", "--output-len", "2", "--out", out,
                     check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("model broken is not loaded", proc.stdout)
        r = load(out)
        self.assertEqual((r["completed"], r["failed"]), (0, 2))

    def test_bad_flags_are_clear_errors(self):
        for args, fragment in ((["--workload", "nope"], "unknown workload"),
                               (["--workload", "shared-prefix", "--groups", "0"], "--groups"),
                               (["--slo", "ttft"], "--slo"),
                               (["--request-rate", "0"], "--request-rate")):
            proc = bench("--base-url", self.url, *args, check=False)
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn(fragment, proc.stderr)
        proc = bench("--base-url", "http://127.0.0.1:1", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("cannot reach", proc.stderr)
        self.assertIn("--base-url", bench(check=False).stderr)


class BenchAgainstKvserve(unittest.TestCase):
    def test_tiny_shared_prefix_run(self):
        server = subprocess.Popen([KVSERVE, "serve", "--port", "0", "--threads", "2"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = server.stdout.readline()
            m = re.match(r"kvserve: listening on (http://\S+)", line)
            self.assertIsNotNone(m, line)
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "r.json")
                bench("--base-url", m.group(1), "--workload", "shared-prefix", "--groups", "1",
                      "--prompts-per-group", "3", "--system-prompt-len", "48", "--question-len", "4",
                      "--output-len", "4", "--ignore-eos", "--concurrency", "3", "--out", out)
                r = load(out)
        finally:
            server.terminate()
            server.wait(timeout=30)
        self.assertEqual((r["completed"], r["failed"]), (3, 0))
        self.assertEqual(r["total_output_tokens"], 12)
        self.assertEqual(r["config"]["token_counter"], "server")
        self.assertEqual(r["cached_tokens"]["requests_reporting"], 3)
        self.assertIsNotNone(r["cached_tokens"]["reported"])
        self.assertGreaterEqual(r["cached_tokens"]["ideal"], 2 * 40)
        # The server's own phase histograms, scraped before and after the run, saw these three
        # requests and nothing else.
        self.assertEqual(r["server_ms"]["source"], "kvserve:request_*_time_seconds")
        phases = r["server_ms"]["phases"]
        self.assertEqual(sorted(phases), ["decode", "prefill", "queue"])
        for name, p in phases.items():
            self.assertEqual(p["count"], 3, name)
            self.assertGreaterEqual(p["mean"], 0, name)
            self.assertLessEqual(p["p50"], p["p90"], name)
        self.assertGreater(phases["prefill"]["mean"], 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    KVSERVE = os.path.abspath(args.kvserve)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
