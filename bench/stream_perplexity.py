#!/usr/bin/env python3
"""Streaming perplexity with eviction inside the sequence: one long text scored as a single
stream by `kvserve perplexity --stream`, once per --kv-eviction policy at the same budget, and
per segment of --segment-tokens the perplexity, tokens/s and peak KV blocks, as a table and an
SVG plot (perplexity per segment, one line per policy).

"none" keeps every token, so a stream longer than the model's context is refused: the script
prints that refusal (the dense cache's limit) and goes on with the other policies.

    python3 bench/stream_perplexity.py --kvserve build/kvserve --model M.gguf --text T.txt \\
        [--budget 256] [--policies none,window,sinks,h2o] [--segment-tokens 4096] [--svg out.svg]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import cpu_name  # noqa: E402

COLOURS = {"none": "#444444", "window": "#d62728", "sinks": "#1f77b4", "h2o": "#2ca02c",
           "snapkv": "#9467bd"}


def stream(a, policy, text):
    cmd = [a.kvserve, "perplexity", "--model", a.model, "-f", text, "--stream", "--json",
           "--threads", str(a.threads), "--segment-tokens", str(a.segment_tokens),
           "--ctx", str(a.ctx), "--kv-eviction", policy, "--parse-special"]
    if policy != "none":
        cmd += ["--kv-budget", str(a.budget), "--kv-sink-tokens", str(a.sink_tokens)]
        if a.evict_batch:
            cmd += ["--kv-evict-batch", str(a.evict_batch)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def svg(runs, path, title):
    width, height, pad = 760, 420, 60
    series = {p: [s["perplexity"] for s in r["segments"] if s["tokens"] == r["segment_tokens"]]
              for p, r in runs.items()}
    n = max(len(v) for v in series.values())
    top = max(max(v) for v in series.values() if v) * 1.05
    low = min(min(v) for v in series.values() if v) * 0.95
    seg = next(iter(runs.values()))["segment_tokens"]

    def x(i):
        return pad + (width - 2 * pad) * (i / max(1, n - 1))

    def y(v):
        return height - pad - (height - 2 * pad) * (v - low) / (top - low)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
             'stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 15}" text-anchor="middle">'
             f'tokens streamed (segments of {seg})</text>',
             f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" '
             'text-anchor="middle">perplexity per segment</text>']
    for k in range(5):
        v = low + (top - low) * k / 4
        parts.append(f'<text x="{pad - 5}" y="{y(v) + 4}" text-anchor="end">{v:.3f}</text>')
    for k in range(5):
        i = round((n - 1) * k / 4)
        parts.append(f'<text x="{x(i)}" y="{height - pad + 16}" text-anchor="middle">'
                     f'{(i + 1) * seg // 1000}k</text>')
    for j, (policy, values) in enumerate(series.items()):
        colour = COLOURS.get(policy, "#2ca02c")
        if len(values) == 1:
            parts.append(f'<circle cx="{x(0)}" cy="{y(values[0])}" r="4" fill="{colour}"/>')
        else:
            pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                         f'points="{pts}"/>')
        parts.append(f'<text x="{width - pad - 120}" y="{pad + 16 * j}" fill="{colour}">'
                     f'{policy}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvserve", default="build/kvserve")
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--policies", default="none,window,sinks,h2o")
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--sink-tokens", type=int, default=4)
    ap.add_argument("--evict-batch", type=int, default=0)
    ap.add_argument("--ctx", type=int, default=256, help="the model's context for the run")
    ap.add_argument("--segment-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--svg", default="")
    a = ap.parse_args()
    print(f"# CPU: {cpu_name()}; model {os.path.basename(a.model)}; budget {a.budget}")
    runs = {}
    for policy in a.policies.split(","):
        try:
            runs[policy] = stream(a, policy, a.text)
        except subprocess.CalledProcessError as e:
            print(f"{policy}: failed: {e.stderr.strip().splitlines()[-1]}")
    print("| policy | tokens | first segment ppl | last segment ppl | last / first | "
          "tok/s first | tok/s last | peak KV blocks |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for policy, r in runs.items():
        segs = [s for s in r["segments"] if s["tokens"] == r["segment_tokens"]] or r["segments"]
        f, l = segs[0], segs[-1]
        print(f"| {policy} | {r['tokens']} | {f['perplexity']:.4f} | {l['perplexity']:.4f} | "
              f"{l['perplexity'] / f['perplexity']:.3f} | {f['tokens_per_second']:.0f} | "
              f"{l['tokens_per_second']:.0f} | {r['peak_kv_blocks']} |")
    print()
    names = list(runs)
    print("| segment | " + " | ".join(names) + " |")
    print("| ---: | " + " | ".join("---:" for _ in names) + " |")
    longest = max(len(r["segments"]) for r in runs.values())
    for i in range(longest):
        row = []
        for p in names:
            segs = runs[p]["segments"]
            row.append(f"{segs[i]['perplexity']:.4f}" if i < len(segs) else "")
        first = next(runs[p]["segments"][i]["first_token"] for p in names
                     if i < len(runs[p]["segments"]))
        print(f"| {first} | " + " | ".join(row) + " |")
    if a.svg:
        svg(runs, a.svg, f"{os.path.basename(a.model)}: streaming perplexity, KV budget "
            f"{a.budget}")
        print(f"\nplot: {a.svg}")


if __name__ == "__main__":
    main()
