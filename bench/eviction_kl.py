#!/usr/bin/env python3
"""Eviction inside a sequence at equal budget: prompts compressed to each --kv-budget by each
--kv-eviction policy, against the full cache. Runs `kvserve perplexity --eviction-kl` per policy
and budget and prints a table of the KL divergence of the next-token distribution and top-1
agreement (over prompts x eval positions, the text's own tokens teacher-forced after each
prompt), with the perplexity of those tokens.

    python3 bench/eviction_kl.py --kvserve build/kvserve --model M.gguf --text T.txt \\
        [--prompt-tokens 1024] [--budgets 64,128,256] [--policies window,sinks,h2o,snapkv]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import cpu_name  # noqa: E402


def run(a, policy, budget):
    cmd = [a.kvserve, "perplexity", "--model", a.model, "-f", a.text, "--eviction-kl", "--json",
           "--parse-special", "--threads", str(a.threads), "--ctx", str(a.ctx),
           "--prompt-tokens", str(a.prompt_tokens), "--eval-tokens", str(a.eval_tokens),
           "--prompts", str(a.prompts), "--kv-eviction", policy, "--kv-budget", str(budget),
           "--kv-evict-batch", str(a.evict_batch),
           "--snapkv-window", str(min(a.snapkv_window, a.evict_batch))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvserve", default="build/kvserve")
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--policies", default="window,sinks,h2o,snapkv")
    ap.add_argument("--budgets", default="64,128,256")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--eval-tokens", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=25)
    ap.add_argument("--evict-batch", type=int, default=16,
                    help="tokens dropped at once, the same for every policy (default 16; "
                         "snapkv's window is at most this)")
    ap.add_argument("--snapkv-window", type=int, default=32,
                    help="snapkv's observation window (at most the evict batch)")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    budgets = [int(b) for b in a.budgets.split(",")]
    policies = a.policies.split(",")
    print(f"# CPU: {cpu_name()}; model {os.path.basename(a.model)}; {a.prompts} prompts of "
          f"{a.prompt_tokens} tokens, {a.eval_tokens} positions each, evict batch {a.evict_batch}")
    res = {}
    for b in budgets:
        for p in policies:
            res[(p, b)] = run(a, p, b)
    full = next(iter(res.values()))["full_cache_perplexity"]
    print(f"full cache perplexity over the scored positions: {full:.4f}\n")
    print("| policy | " + " | ".join(f"KL @{b}" for b in budgets) + " | " +
          " | ".join(f"top-1 @{b}" for b in budgets) + " | " +
          " | ".join(f"ppl @{b}" for b in budgets) + " |")
    print("| --- |" + " ---: |" * (3 * len(budgets)))
    for p in policies:
        r = [res[(p, b)] for b in budgets]
        print(f"| {p} | " + " | ".join(f"{x['kl_divergence']:.4f}" for x in r) + " | " +
              " | ".join(f"{100 * x['top1_agreement']:.1f}%" for x in r) + " | " +
              " | ".join(f"{x['perplexity']:.4f}" for x in r) + " |")
    print(f"\n{r[0]['positions']} positions per cell")


if __name__ == "__main__":
    main()
