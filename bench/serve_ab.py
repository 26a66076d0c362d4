#!/usr/bin/env python3
"""Two (or more) `kvserve serve` configurations, or other servers, under one `kvserve bench` workload.

Each run starts a fresh server per side (so every side starts with an empty cache), runs the
same `kvserve bench` command against it and stops it; the order of the sides rotates from run
to run, so slow drift of a shared host falls on all sides alike. Prints every run, then the
median of each figure per side and the ratios against the first side.

Usage:
  bench/serve_ab.py --model M.gguf --side on= --side off=--no-partial-block-hits \\
      --runs 3 -- --workload shared-prefix --groups 4 --prompts-per-group 4 \\
      --system-prompt-len 700 --question-len 27 --concurrency 2 --output-len 32 --ignore-eos

--side NAME=FLAGS: FLAGS (split on spaces) are added to `kvserve serve`; everything after `--`
goes to `kvserve bench`.
--peer NAME=COMMAND: another OpenAI-compatible server as a side, for example llama.cpp's
  --peer 'llama.cpp=/path/llama-server -m {model} -t {threads} -np 4 --port {port}'
  {model}, {threads} and {port} (a free loopback port) are filled in; the side is ready when
  GET /health or /v1/models answers 200.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench_util import cpu_name, free_port, start_serve

FIGURES = [
    ("ttft_p50", lambda r: r["ttft_ms"]["p50"]),
    ("ttft_p90", lambda r: r["ttft_ms"]["p90"]),
    ("tpot_p50", lambda r: r["tpot_ms"]["p50"]),
    ("tpot_p90", lambda r: r["tpot_ms"]["p90"]),
    ("itl_p90", lambda r: r["itl_ms"]["p90"]),
    ("itl_p99", lambda r: r["itl_ms"]["p99"]),
    ("req_per_s", lambda r: r["request_throughput"]),
    ("out_tok_per_s", lambda r: r["output_throughput"]),
    ("cached", lambda r: r["cached_tokens"]["reported"] or 0),
    ("ideal_cached", lambda r: r["cached_tokens"]["ideal"]),
    ("ideal_cached_block", lambda r: r["cached_tokens"]["ideal_block"]),
    ("input_tokens", lambda r: r["total_input_tokens"]),
    ("server_queue_mean", lambda r: (r.get("server_ms") or {}).get("phases", {})
     .get("queue", {}).get("mean")),
    ("server_prefill_mean", lambda r: (r.get("server_ms") or {}).get("phases", {})
     .get("prefill", {}).get("mean")),
]


def start_peer(command, args, log, timeout_s=300):
    """Starts COMMAND (placeholders filled) and waits until it answers; returns (process, url)."""
    port = free_port()
    argv = [a.format(model=args.model, threads=args.threads, port=port) for a in command.split()]
    proc = subprocess.Popen(argv, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited with {proc.returncode} before it was ready")
        for path in ("/health", "/v1/models"):
            try:
                with urllib.request.urlopen(url + path, timeout=2) as r:
                    if r.status == 200:
                        return proc, url
            except OSError:
                pass
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"{argv[0]} did not answer on port {port} within {timeout_s} s")


def run_side(args, side, bench_args, out_path, log):
    kind, flags = side
    if kind == "peer":
        server, url = start_peer(flags, args, log)
    else:
        server, url, _ = start_serve(
            args.kvserve, ["--model", args.model, "--threads", str(args.threads)] + flags, log)
    try:
        subprocess.run([args.kvserve, "bench", "--base-url", url, "--no-progress",
                        "--out", out_path] + bench_args,
                       check=True, stdout=subprocess.DEVNULL, stderr=log)
    finally:
        server.terminate()
        server.wait(timeout=60)
    with open(out_path) as f:
        return json.load(f)


def main():
    argv = sys.argv[1:]
    bench_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, bench_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--kvserve", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "kvserve"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--side", action="append", default=[], help="NAME=SERVE FLAGS")
    ap.add_argument("--peer", action="append", default=[], help="NAME=SERVER COMMAND")
    ap.add_argument("--log", default=None, help="server and bench stderr (default: a temp file)")
    args = ap.parse_args(argv)
    sides = []
    for s in args.side:
        name, _, flags = s.partition("=")
        sides.append((name, ("kvserve", flags.split())))
    for s in args.peer:
        name, _, command = s.partition("=")
        sides.append((name, ("peer", command)))
    if len(sides) < 1:
        ap.error("give at least one --side or --peer")
    log_path = args.log or tempfile.mktemp(prefix="serve_ab_", suffix=".log")
    cpu = cpu_name()
    print(f"cpu: {cpu}; model {args.model}; {args.threads} threads; bench {' '.join(bench_args)};"
          f" log {log_path}")
    results = {name: [] for name, _ in sides}
    with open(log_path, "a") as log, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            for name, side in order:
                res = run_side(args, side, bench_args, os.path.join(tmp, "r.json"), log)
                figures = {k: f(res) for k, f in FIGURES}
                results[name].append(figures)
                shown = ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                  for k, v in figures.items() if v is not None)
                print(f"run {r} {name}: {shown}", flush=True)
    print("\nmedians:")
    base = sides[0][0]
    medians = {}
    for name, _ in sides:
        medians[name] = {}
        for k, _ in FIGURES:
            vals = [x[k] for x in results[name] if x[k] is not None]
            medians[name][k] = statistics.median(vals) if vals else None
        shown = ", ".join(f"{k} {v:.2f}" for k, v in medians[name].items() if v is not None)
        print(f"{name}: {shown}")
    for name, _ in sides[1:]:
        ratios = []
        for k, _ in FIGURES:
            a, b = medians[base][k], medians[name][k]
            if a and b:
                ratios.append(f"{k} {b / a:.3f}x")
        print(f"{name} / {base}: {', '.join(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
