#!/usr/bin/env python3
"""Lower KV tiers measured from outside: `kvserve bench` against `kvserve serve`.

Experiments (each alternates its two sides and prints every run, then medians):
  restart   TTFT of one long prompt cold, as a RAM hit, and as a disk hit after a restart
            (page cache warm, then dropped for the tier's files); disk load bandwidth.
  beyond    repeat-prefix whose prefixes need several times the RAM tier, in a cyclic order
            that defeats LRU, with and without the disk tier: hit rate against the ideal,
            TTFT median and p90, requests/s.
  replicas  two servers on one Redis: a prompt computed on A, then sent to B; B's TTFT against
            cold, identical greedy text, Redis load bandwidth.
  cost      write-through on unique prompts (every block written), the disk tier and the disk
            and Redis tiers against no tier: TTFT and time per output token.

Usage: bench/kv_tiers_bench.py --model M.gguf [--kvserve build/kvserve] [--threads 2]
                               [--experiments restart,beyond,replicas,cost] [--runs 3]
"""
import argparse
import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench_util import cpu_name, free_port, start_serve

class Server:
    def __init__(self, args, flags, log_path):
        self.log = open(log_path, "a")
        self.proc, self.url, self.port = start_serve(
            args.kvserve, ["--model", args.model, "--threads", str(args.threads),
                           "--max-model-len", "4096"] + flags, self.log)
        models = json.loads(urllib.request.urlopen(self.url + "/v1/models", timeout=30).read())
        self.model = models["data"][0]["id"]
        # One short unrelated request first, so first-request costs of a new process (scratch
        # buffers, waking the compute threads) are not charged to the measured request.
        self.complete("warm up " + str(self.port), 1)

    def metrics(self):
        text = urllib.request.urlopen(self.url + "/metrics", timeout=30).read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def complete(self, prompt, max_tokens=16):
        body = json.dumps({"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                           "temperature": 0}).encode()
        req = urllib.request.Request(self.url + "/v1/completions", data=body,
                                     headers={"content-type": "application/json"})
        t0 = time.monotonic()
        r = json.loads(urllib.request.urlopen(req, timeout=600).read())
        return r, time.monotonic() - t0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=300)
        self.log.close()


def tier_metric(m, name, tier):
    for k, v in m.items():
        if k.startswith(name + "{") and f'tier="{tier}"' in k:
            return v
    return 0.0


def bench(args, server, flags, out):
    cmd = [args.kvserve, "bench", "--base-url", server.url, "--no-progress", "--out", out] + flags
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def drop_page_cache(directory):
    # dd's nocache flag asks the kernel to drop a file's cached pages (POSIX_FADV_DONTNEED).
    for path in glob.glob(os.path.join(directory, "**", "*.kvb"), recursive=True):
        subprocess.run(["dd", f"if={path}", "iflag=nocache", "count=0", "status=none"], check=False)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def one_prompt(seed, input_len):
    return ["--workload", "random", "--num-prompts", "1", "--input-len", str(input_len),
            "--output-len", "1", "--concurrency", "1", "--seed", str(seed)]


def load_gbps(before, after, tier):
    read = tier_metric(after, "kvserve:kv_tier_bytes_read_total", tier) - \
        tier_metric(before, "kvserve:kv_tier_bytes_read_total", tier)
    secs = tier_metric(after, "kvserve:kv_tier_load_seconds_sum", tier) - \
        tier_metric(before, "kvserve:kv_tier_load_seconds_sum", tier)
    return read / secs / 1e9 if secs > 0 else float("nan")


def restart(args, work):
    rows = []
    for r in range(args.runs):
        disk = tempfile.mkdtemp(dir=work, prefix="disk-")
        flags = ["--kv-disk-path", disk, "--kv-cache-memory", "2GiB"]
        seed = 1000 + r
        s = Server(args, flags, os.path.join(work, "restart.log"))
        cold = bench(args, s, one_prompt(seed, args.prompt_len), os.path.join(work, "r.json"))
        ram = bench(args, s, one_prompt(seed, args.prompt_len), os.path.join(work, "r.json"))
        s.stop()
        s = Server(args, flags, os.path.join(work, "restart.log"))
        m0 = s.metrics()
        warm = bench(args, s, one_prompt(seed, args.prompt_len), os.path.join(work, "r.json"))
        m1 = s.metrics()
        s.stop()
        drop_page_cache(disk)
        s = Server(args, flags, os.path.join(work, "restart.log"))
        m2 = s.metrics()
        coldpc = bench(args, s, one_prompt(seed, args.prompt_len), os.path.join(work, "r.json"))
        m3 = s.metrics()
        s.stop()
        row = {"cold_ms": cold["ttft_ms"]["p50"], "ram_ms": ram["ttft_ms"]["p50"],
               "disk_warm_ms": warm["ttft_ms"]["p50"], "disk_cold_ms": coldpc["ttft_ms"]["p50"],
               "cached_disk": warm["cached_tokens"]["reported"],
               "prompt_tokens": warm["total_input_tokens"],
               "gbps_warm": load_gbps(m0, m1, "disk"), "gbps_cold": load_gbps(m2, m3, "disk")}
        rows.append(row)
        print(f"restart run {r}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else
                                                f"{k} {v}" for k, v in row.items()), flush=True)
        shutil.rmtree(disk, ignore_errors=True)
    c, ram, w, cc = (med([x[k] for x in rows]) for k in ("cold_ms", "ram_ms", "disk_warm_ms",
                                                          "disk_cold_ms"))
    print(f"restart medians: cold {c:.1f} ms, RAM hit {ram:.1f} ms, disk hit (page cache warm) "
          f"{w:.1f} ms, disk hit (page cache dropped) {cc:.1f} ms; cold/disk {c / w:.1f}x, "
          f"disk/RAM {w / ram:.2f}x; disk load {med([x['gbps_warm'] for x in rows]):.2f} GB/s warm, "
          f"{med([x['gbps_cold'] for x in rows]):.2f} GB/s cold", flush=True)


def beyond(args, work):
    wl = ["--workload", "repeat-prefix", "--num-prefixes", str(args.beyond_prefixes),
          "--prefix-len", str(args.beyond_prefix_len), "--suffix-len", "32",
          "--num-prompts", str(args.beyond_prefixes * args.beyond_rounds), "--order", "interleave",
          "--output-len", "8", "--ignore-eos", "--concurrency", "1", "--seed", "7"]
    rows = {"ram": [], "disk": []}
    for r in range(args.beyond_runs):
        for side in ("ram", "disk") if r % 2 == 0 else ("disk", "ram"):
            flags = ["--kv-cache-memory", args.beyond_ram]
            disk = None
            if side == "disk":
                disk = tempfile.mkdtemp(dir=work, prefix="disk-")
                flags += ["--kv-disk-path", disk]
            s = Server(args, flags, os.path.join(work, "beyond.log"))
            res = bench(args, s, wl, os.path.join(work, "b.json"))
            s.stop()
            if disk:
                shutil.rmtree(disk, ignore_errors=True)
            ct = res["cached_tokens"]
            row = {"hit": ct["reported_hit_rate"], "ideal": ct["ideal_hit_rate"],
                   "ttft_p50": res["ttft_ms"]["p50"], "ttft_p90": res["ttft_ms"]["p90"],
                   "rps": res["request_throughput"], "failed": res["failed"]}
            rows[side].append(row)
            print(f"beyond run {r} {side}: {row}", flush=True)
    for side, xs in rows.items():
        print(f"beyond {side}: hit {med([x['hit'] for x in xs]):.3f} of ideal "
              f"{med([x['ideal'] for x in xs]):.3f}, TTFT p50 {med([x['ttft_p50'] for x in xs]):.0f} "
              f"ms p90 {med([x['ttft_p90'] for x in xs]):.0f} ms, "
              f"{med([x['rps'] for x in xs]):.3f} req/s", flush=True)
    if rows["ram"] and rows["disk"]:
        print(f"beyond: median TTFT RAM-only / disk = "
              f"{med([x['ttft_p50'] for x in rows['ram']]) / med([x['ttft_p50'] for x in rows['disk']]):.1f}x",
              flush=True)


@contextlib.contextmanager
def redis_server(work):
    """A private redis-server on a free loopback port; yields its redis:// URL."""
    port = free_port()
    rdir = tempfile.mkdtemp(dir=work, prefix="redis-")
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", rdir],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(rdir, ignore_errors=True)


def replicas(args, work):
    with redis_server(work) as url:
        flags = ["--kv-redis-url", url, "--kv-cache-memory", "2GiB"]
        a = Server(args, flags, os.path.join(work, "replica-a.log"))
        b = Server(args, flags, os.path.join(work, "replica-b.log"))
        rows = []
        for r in range(args.runs):
            seed = 2000 + r
            cold = bench(args, a, one_prompt(seed, args.prompt_len), os.path.join(work, "a.json"))
            time.sleep(1.0)  # let A's write-through reach Redis
            m0 = b.metrics()
            hit = bench(args, b, one_prompt(seed, args.prompt_len), os.path.join(work, "b.json"))
            m1 = b.metrics()
            row = {"cold_ms": cold["ttft_ms"]["p50"], "b_ms": hit["ttft_ms"]["p50"],
                   "b_cached": hit["cached_tokens"]["reported"],
                   "gbps": load_gbps(m0, m1, "redis")}
            rows.append(row)
            print(f"replicas run {r}: {row}", flush=True)
        # Identical greedy text: one prompt computed on A, then served from Redis on B.
        words = " ".join(f"word{i % 97} other{i % 13}" for i in range(250))
        ra, _ = a.complete(words, 16)
        time.sleep(1.0)
        rb, _ = b.complete(words, 16)
        same = ra["choices"][0]["text"] == rb["choices"][0]["text"]
        print(f"replicas identical text: {same}; B usage: {rb['usage']}", flush=True)
        a.stop()
        b.stop()
        c, bm = med([x["cold_ms"] for x in rows]), med([x["b_ms"] for x in rows])
        print(f"replicas medians: cold on A {c:.1f} ms, on B from Redis {bm:.1f} ms ({c / bm:.1f}x); "
              f"Redis load {med([x['gbps'] for x in rows]):.2f} GB/s", flush=True)


def cost(args, work):
    """Write-through on unique prompts (every block written) against no tier: the disk tier
    alone, and the disk and Redis tiers together. The sides rotate their order each run."""
    wl = ["--workload", "random", "--num-prompts", "6", "--input-len", "512", "--output-len", "64",
          "--ignore-eos", "--concurrency", "1"]
    sides = ["off", "disk", "disk+redis"]
    rows = {side: [] for side in sides}
    with redis_server(work) as url:
        for r in range(args.runs):
            for side in sides[r % 3:] + sides[:r % 3]:
                flags = ["--kv-cache-memory", "2GiB"]
                disk = None
                if side != "off":
                    disk = tempfile.mkdtemp(dir=work, prefix="disk-")
                    flags += ["--kv-disk-path", disk]
                if side == "disk+redis":
                    flags += ["--kv-redis-url", url]
                s = Server(args, flags, os.path.join(work, "cost.log"))
                res = bench(args, s, wl + ["--seed", str(3000 + r)], os.path.join(work, "c.json"))
                m = s.metrics()
                s.stop()
                if disk:
                    shutil.rmtree(disk, ignore_errors=True)
                row = {"ttft_p50": res["ttft_ms"]["p50"], "tpot_p50": res["tpot_ms"]["p50"],
                       "out_tps": res["output_throughput"]}
                for tier in ("disk", "redis"):
                    row[f"{tier}_written"] = tier_metric(
                        m, "kvserve:kv_tier_blocks_written_total", tier)
                    row[f"{tier}_dropped"] = tier_metric(
                        m, "kvserve:kv_tier_dropped_writes_total", tier)
                rows[side].append(row)
                print(f"cost run {r} {side}: {row}", flush=True)
    off_ttft = med([x["ttft_p50"] for x in rows["off"]])
    off_tpot = med([x["tpot_p50"] for x in rows["off"]])
    for side in sides[1:]:
        ttft = med([x["ttft_p50"] for x in rows[side]])
        tpot = med([x["tpot_p50"] for x in rows[side]])
        print(f"cost medians, {side} against off: TTFT {off_ttft:.1f} -> {ttft:.1f} ms "
              f"({ttft / off_ttft:.3f}x); TPOT {off_tpot:.2f} -> {tpot:.2f} ms "
              f"({tpot / off_tpot:.3f}x)", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--kvserve", default=os.path.join(os.path.dirname(__file__), "..", "build", "kvserve"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--prompt-len", type=int, default=2048)
    p.add_argument("--experiments", default="restart,beyond,replicas,cost")
    p.add_argument("--beyond-ram", default="64MiB")
    p.add_argument("--beyond-prefixes", type=int, default=12)
    p.add_argument("--beyond-prefix-len", type=int, default=1024)
    # Four rounds: the first is cold by necessity, so the median request is a repeat (with two
    # rounds the median falls between a cold and a hit request and says nothing).
    p.add_argument("--beyond-rounds", type=int, default=4)
    p.add_argument("--beyond-runs", type=int, default=3)
    p.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    args = p.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="kvserve-tiers-bench-")
    os.makedirs(work, exist_ok=True)
    print(f"cpu: {cpu_name()}; model {args.model}; {args.threads} threads; logs in {work}", flush=True)
    for name in args.experiments.split(","):
        {"restart": restart, "beyond": beyond, "replicas": replicas, "cost": cost}[name](args, work)


if __name__ == "__main__":
    sys.exit(main())
