#!/usr/bin/env python3
"""Compute on shared cores: prefill and decode tokens/s of `kvserve run` on a quiet machine and
while another process keeps one core busy.

Each run measures every (binary, poll, load) combination once, in an order that rotates from run
to run, so slow drift of a shared host falls on all sides alike. Prints every run, then medians
and the busy/quiet ratio per binary and poll setting.

Usage: bench/contention_bench.py [--model M.gguf] [--kvserve build/kvserve[,other/kvserve]]
                                 [--threads 2] [--poll-us -1,0,200] [--runs 5]
                                 [--prompt-tokens 512] [--gen 64]
"""
import argparse
import itertools
import json
import multiprocessing
import os
import statistics
import subprocess
import sys

from bench_util import cpu_name


def busy_loop():
    while True:
        pass


def run_once(binary, args, poll_us):
    # Ids below 1900 exist in every vocabulary here, the embedded model's 2048 included.
    ids = ",".join(str(100 + (i * 7919) % 1800) for i in range(args.prompt_tokens))
    cmd = [binary, "run", "--prompt-ids", ids, "-n", str(args.gen), "--temp", "0",
           "--ignore-eos", "--threads", str(args.threads), "--json"]
    if args.model:
        cmd += ["--model", args.model]
    if poll_us >= 0:
        cmd += ["--poll-us", str(poll_us)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j["prompt_tokens_per_second"], j["generation_tokens_per_second"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="GGUF file (default: the embedded model)")
    ap.add_argument("--kvserve", default="build/kvserve",
                    help="comma-separated binaries to compare (e.g. before,after)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--poll-us", default="-1",
                    help="comma-separated --poll-us values; -1 leaves the flag out (default)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen", type=int, default=64)
    args = ap.parse_args()
    binaries = args.kvserve.split(",")
    polls = [int(p) for p in args.poll_us.split(",")]
    cpu = cpu_name()
    print(f"cpu: {cpu}; {os.cpu_count()} cores; model {args.model or 'embedded'}; {args.threads} threads; "
          f"prompt {args.prompt_tokens}, generate {args.gen}")
    # A binary without --poll-us (an older build compared against) runs with its own default.
    has_poll = ["--poll-us" in subprocess.run([b, "run", "--help"], capture_output=True,
                                              text=True).stdout for b in binaries]
    pairs = [(b, p) for b, p in itertools.product(range(len(binaries)), polls)
             if p < 0 or has_poll[b]]
    sides = [(b, p, load) for b, p in pairs for load in ("quiet", "busy")]
    results = {s: [] for s in sides}
    for r in range(args.runs):
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        for side in order:
            b, poll, load = side
            hog = None
            if load == "busy":
                hog = multiprocessing.Process(target=busy_loop, daemon=True)
                hog.start()
            try:
                pp, tg = run_once(binaries[b], args, poll)
            finally:
                if hog is not None:
                    hog.terminate()
                    hog.join()
            results[side].append((pp, tg))
            print(f"run {r} {binaries[b]} poll={poll} {load}: prefill {pp:.1f} tok/s, "
                  f"decode {tg:.2f} tok/s", flush=True)
    print("\nmedians (prefill tok/s, decode tok/s) and busy/quiet:")
    for b, poll in pairs:
        q = results[(b, poll, "quiet")]
        h = results[(b, poll, "busy")]
        qpp, qtg = statistics.median(x[0] for x in q), statistics.median(x[1] for x in q)
        hpp, htg = statistics.median(x[0] for x in h), statistics.median(x[1] for x in h)
        print(f"{binaries[b]} poll={poll}: quiet {qpp:.1f} / {qtg:.2f}, busy {hpp:.1f} / {htg:.2f}"
              f" -> prefill {hpp / qpp:.0%}, decode {htg / qtg:.0%} of quiet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
