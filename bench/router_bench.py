#!/usr/bin/env python3
"""`kvserve route` in front of 3 replicas on loopback: each policy's cache hit rate against the
ideal, median TTFT and requests/s, and the router's own cost (added TTFT and ITL at p50).

For each policy, 3 fresh replicas (`kvserve serve`, the embedded model unless --model, --threads 1
each, KV events over ipc:// endpoints) and a router with that policy; then two `kvserve bench`
runs at once through the router:
  - multi-turn: 16 conversations x 6 rounds (each round the whole history plus a new user turn),
  - shared-prefix: 8 groups of 8 prompts (a system prompt of its group + a question),
with Poisson arrivals, so both mixes hit the fleet together. The hit rate is reported cached
tokens / prompt tokens over both; the ideal is kvserve bench's block-granular ideal (what one
unbounded prefix cache would serve, in send order). The router's /metrics give its predicted
cached tokens beside the reported ones.

Then a replica killed halfway through a run of streaming conversations (cache-aware): how many
requests started after the kill failed (the goal: none), and how many of those in flight broke.

The router's cost: one replica, streamed completions one at a time sent to it directly and
through two routers (cache-aware over two entries that are both that replica, so every request
is tokenized and scored as in a real fleet; and round-robin, the bare proxy), the three taking
turns request by request, every request the same prompt (served from the replica's cache, so a
prefill's noise does not hide the router's cost); the p50 TTFT and ITL of each.

  python3 bench/router_bench.py [--kvserve build/kvserve] [--policies cache-aware,least-load,round-robin]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import LISTENING, cpu_name, start_serve  # noqa: E402


def cpu_family_model():
    """'family F model M' from /proc/cpuinfo (a model name alone may not tell the generation)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"


def start_router(kvserve, replica_specs, flags, stderr):
    args = [kvserve, "route", "--port", "0", "--log-level", "warning"] + flags
    for spec in replica_specs:
        args += ["--replica", spec]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True)
    line = proc.stdout.readline().strip()
    m = LISTENING.match(line)
    if not m:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"router did not start: {line!r}")
    return proc, m.group(1)


def start_replica(a, tmp, name, log):
    endpoint, replay = f"ipc://{tmp}/{name}-ev", f"ipc://{tmp}/{name}-rp"
    config = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint,
                         "replay_endpoint": replay, "topic": "kv"})
    args = ["--threads", str(a.threads), "--log-level", "warning", "--kv-events-config", config]
    if a.model:
        args += ["--model", a.model]
    proc, url, _ = start_serve(a.kvserve, args, log)
    return proc, url, f"{url},events={endpoint},replay={replay},topic=kv"


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def bench(a, url, out, workload_args):
    args = [a.kvserve, "bench", "--base-url", url, "--out", out, "--no-progress", "--ignore-eos",
            "--block-size", "16"] + workload_args
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_bench(proc, out):
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"kvserve bench failed ({proc.returncode}): {err}")
    with open(out) as f:
        return json.load(f)


def scrape(url, prefix="kvserve_router:"):
    """Each metric of the router summed over its labels."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        sums = {}
        for line in r.read().decode().splitlines():
            if line.startswith(prefix):
                name, value = line.rsplit(" ", 1)
                name = name.split("{")[0]
                sums[name] = sums.get(name, 0) + float(value)
        return sums


MULTI_TURN = ["--workload", "multi-turn", "--conversations", "16", "--rounds", "6",
              "--user-len", "64", "--output-len", "16", "--concurrency", "16"]
SHARED_PREFIX = ["--workload", "shared-prefix", "--groups", "8", "--prompts-per-group", "8",
                 "--system-prompt-len", "768", "--question-len", "32", "--output-len", "16",
                 "--concurrency", "8"]


def run_policy(a, policy, tmp, log):
    procs = []
    try:
        replicas = [start_replica(a, tmp, f"{policy}-{i}", log) for i in range(3)]
        procs += [r[0] for r in replicas]
        router, url = start_router(a.kvserve, [r[2] for r in replicas], ["--policy", policy], log)
        procs.append(router)
        load = ["--seed", str(a.seed), "--request-rate", str(a.rate)]
        t0 = time.monotonic()
        outs = [f"{tmp}/{policy}-mt.json", f"{tmp}/{policy}-sp.json"]
        runs = [bench(a, url, outs[0], MULTI_TURN + load), bench(a, url, outs[1], SHARED_PREFIX + load)]
        results = [wait_bench(p, out) for p, out in zip(runs, outs)]
        wall = time.monotonic() - t0
        metrics = scrape(url)
    finally:
        stop(procs)
    reqs = [r for res in results for r in res["requests"] if r.get("ok")]
    prompt = sum(r["prompt_tokens"] for r in reqs)
    reported = sum(r.get("cached_tokens") or 0 for r in reqs)
    ideal = sum(res["cached_tokens"]["ideal_block"] for res in results)
    return {
        "requests": len(reqs),
        "failed": sum(res["failed"] for res in results),
        "hit_rate": reported / prompt,
        "ideal_hit_rate": ideal / prompt,
        "ttft_p50_ms": statistics.median(r["ttft_ms"] for r in reqs),
        "ttft_p50_ms_by_workload": [res["ttft_ms"]["p50"] for res in results],
        "requests_per_s": len(reqs) / wall,
        "predicted_cached": metrics.get("kvserve_router:predicted_cached_tokens_total", 0),
        "reported_cached": metrics.get("kvserve_router:reported_cached_tokens_total", 0),
    }


def chat_stream(url, messages, max_tokens):
    """One streamed chat request; True when it ended with [DONE] after a 200."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return any(raw.strip() == b"data: [DONE]" for raw in resp)
    except Exception:  # noqa: BLE001 (any failure is a failed request)
        return False


def kill_mid_run(a, tmp, log, seconds=6.0, clients=12):
    """Cache-aware over 3 replicas; `clients` conversations stream turn after turn; one replica
    is killed halfway. Returns (started after the kill, of them failed, in flight at the kill,
    of them failed)."""
    import random
    import threading
    procs = []
    records = []  # (start, end, ok)
    lock = threading.Lock()
    try:
        replicas = [start_replica(a, tmp, f"kill-{i}", log) for i in range(3)]
        procs += [r[0] for r in replicas]
        router, url = start_router(a.kvserve, [r[2] for r in replicas],
                                   ["--policy", "cache-aware", "--health-interval", "0.2"], log)
        procs.append(router)
        stop_at = time.monotonic() + seconds

        def converse(c):
            rng = random.Random(c)
            words = "the river map duck house flowers friend morning garden lamp window".split()
            messages = []
            while time.monotonic() < stop_at:
                messages.append({"role": "user", "content": " ".join(rng.choice(words) for _ in range(40))})
                start = time.monotonic()
                ok = chat_stream(url, messages, 16)
                with lock:
                    records.append((start, time.monotonic(), ok))
                messages.append({"role": "assistant", "content": "fine"})
                if len(messages) > 12:
                    messages = []

        threads = [threading.Thread(target=converse, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        time.sleep(seconds / 2)
        victim = replicas[0][0]
        victim.kill()
        killed_at = time.monotonic()
        for t in threads:
            t.join()
    finally:
        stop(procs)
    after = [ok for start, _, ok in records if start > killed_at]
    during = [ok for start, end, ok in records if start <= killed_at < end]
    return len(after), after.count(False), len(during), during.count(False)


class Streamer:
    """A kept-alive connection that sends streamed completions and times their chunks on
    arrival (the same client code for every target, so its own cost cancels out)."""

    def __init__(self, url):
        import http.client
        import socket
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def run(self, prompt, max_tokens):
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                           "ignore_eos": True, "stream": True})
        t0 = time.perf_counter()
        self.conn.request("POST", "/v1/completions", body=body,
                          headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        times = []
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: {") and b'"text"' in line:
                times.append(time.perf_counter())
        if resp.status != 200 or not times:
            raise RuntimeError(f"a timed request failed ({resp.status})")
        return times[0] - t0, [b - a for a, b in zip(times, times[1:])]


def overhead(a, tmp, log):
    """TTFT and ITL medians of the replica directly and through each router, the targets taking
    turns request by request (drift on a busy machine hits all three alike). Every request sends
    the same prompt, which the replica then serves from its cache: the time to the first token
    is the one token it computes, and the router's cost is not lost in a prefill's noise. The
    routers do their whole work for it all the same (the cache-aware one tokenizes the prompt,
    hashes its blocks and matches them)."""
    procs = []
    names = ["direct", "cache-aware", "round-robin"]
    ttft = {n: [] for n in names}
    itl = {n: [] for n in names}
    try:
        proc, url, spec = start_replica(a, tmp, "solo", log)
        procs.append(proc)
        # Two entries for the one replica: the cache-aware router tokenizes and scores every
        # request (it skips both with a single replica in the pool) and still sends each to it.
        ca, ca_url = start_router(a.kvserve, [spec, spec], ["--policy", "cache-aware"], log)
        rr, rr_url = start_router(a.kvserve, [url], ["--policy", "round-robin"], log)
        procs += [ca, rr]
        streamers = {"direct": Streamer(url), "cache-aware": Streamer(ca_url),
                     "round-robin": Streamer(rr_url)}
        filler = " ".join(["the river map duck house flowers friend morning garden lamp"] * 10)
        for i in range(a.overhead_requests):
            for name in names if i % 2 == 0 else names[::-1]:
                first, gaps = streamers[name].run(filler, 16)
                if i >= 5:  # the first ones warm connections, threads and caches
                    ttft[name].append(first)
                    itl[name].extend(gaps)
    finally:
        stop(procs)
    return {n: (1e3 * statistics.median(ttft[n]), 1e3 * statistics.median(itl[n])) for n in names}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kvserve", default="build/kvserve")
    ap.add_argument("--model", default="", help="GGUF file (default: the embedded model)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--policies", default="cache-aware,least-load,round-robin")
    ap.add_argument("--rate", type=float, default=10, help="requests/s of each workload (Poisson)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overhead-requests", type=int, default=300,
                    help="requests per target for the router's cost (0: skip)")
    ap.add_argument("--no-kill", dest="kill", action="store_false",
                    help="skip the run that kills a replica midway")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvserve-router-bench-")
    log = open(os.path.join(tmp, "servers.log"), "w")
    print(f"CPU: {cpu_name()} ({cpu_family_model()}); 3 replicas x {a.threads} thread(s); "
          f"{'model ' + a.model if a.model else 'embedded model'}; {a.rate:g} requests/s per workload")
    try:
        print(f"{'policy':<12} {'reqs':>5} {'fail':>4} {'hit':>6} {'ideal':>6} {'of ideal':>8} "
              f"{'TTFT p50':>9} {'mt / sp':>15} {'req/s':>6}  router predicted/reported cached")
        for policy in [p for p in a.policies.split(",") if p]:
            r = run_policy(a, policy, tmp, log)
            mt, sp = r["ttft_p50_ms_by_workload"]
            print(f"{policy:<12} {r['requests']:>5} {r['failed']:>4} {r['hit_rate']:>6.1%} "
                  f"{r['ideal_hit_rate']:>6.1%} {r['hit_rate'] / r['ideal_hit_rate']:>8.1%} "
                  f"{r['ttft_p50_ms']:>7.2f}ms {mt:>6.2f}/{sp:>6.2f}ms {r['requests_per_s']:>6.1f}  "
                  f"{r['predicted_cached']:.0f}/{r['reported_cached']:.0f}", flush=True)
        if a.kill:
            n_after, failed_after, n_during, failed_during = kill_mid_run(a, tmp, log)
            print(f"one replica killed mid-run (cache-aware, 12 streaming conversations): "
                  f"{failed_after} of {n_after} requests started after the kill failed; "
                  f"{failed_during} of the {n_during} in flight at the kill broke off", flush=True)
        if a.overhead_requests > 0:
            med = overhead(a, tmp, log)
            d_ttft, d_itl = med["direct"]
            print(f"router cost (one replica, one request at a time, {a.overhead_requests} each, "
                  f"p50): direct TTFT {d_ttft:.3f} ms, ITL {d_itl:.3f} ms")
            for name in ("cache-aware", "round-robin"):
                t, i = med[name]
                print(f"  {name:<12} TTFT {t:.3f} ms ({t - d_ttft:+.3f}), "
                      f"ITL {i:.3f} ms ({i - d_itl:+.3f})")
    finally:
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
