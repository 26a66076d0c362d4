#!/usr/bin/env python3
"""Where a model's attention mass goes: the share on the first tokens of the window, per layer,
measured with the float64 reference (tools/reference/ref_model.py) on windows of a text.

An attention sink shows as a share on the first token far above what position alone would give
it. For each layer: the mean over heads and over query positions >= --from of the attention on
position 0 and on positions 0..3, and "uniform", the share position 0 would get if every query
spread its attention evenly over what it sees. Two kinds of window are measured, because a model
may form a sink only where it was trained to see one:
  start  a window that starts at <s> and a document's first token (how most LLMs are trained)
  crop   a window cut from the middle of the text (how kvserve-tiny was trained: random crops)

    python3 bench/attention_sinks.py --kvserve build/kvserve --model M.gguf --text T.txt \\
        [--window 256] [--windows 4]
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "reference"))
sys.path.insert(0, HERE)
import ref_model  # noqa: E402
from bench_util import cpu_name  # noqa: E402


def tokenize(kvserve, model, text, add_special):
    cmd = [kvserve, "tokenize", "--model", model, "--text", text]
    if not add_special:
        cmd.append("--no-add-special")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ids"]


def attention_shares(model, ids, first_query):
    """Per layer [mean share on position 0, on positions 0..3, uniform share of position 0]."""
    shares = []
    c = model.config
    original = model.attention

    def recording(layer, q, k, v):
        out = original(layer, q, k, v)
        keys = model.k_cache[layer]
        n = keys.shape[0]
        group = c.n_heads // c.n_kv_heads
        s0, s4 = [], []
        for h in range(c.n_heads):
            scores = q[:, h, :] @ keys[:, h // group, :].T / math.sqrt(c.head_dim)
            scores[np.arange(n)[None, :] > np.arange(n)[:, None]] = -np.inf
            att = ref_model.softmax(scores)[first_query:]
            s0.append(att[:, 0].mean())
            s4.append(att[:, :4].sum(axis=1).mean())
        uniform = np.mean([1.0 / (t + 1) for t in range(first_query, n)])
        shares.append((float(np.mean(s0)), float(np.mean(s4)), float(uniform)))
        return out

    model.attention = recording
    model.logits(ids)
    model.attention = original
    return shares


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvserve", default="build/kvserve")
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True, help="documents separated by blank lines")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--windows", type=int, default=4, help="windows of each kind")
    ap.add_argument("--from", dest="first_query", type=int, default=32)
    a = ap.parse_args()
    model = ref_model.Transformer(a.model)
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    docs = [d for d in text.split("\n\n") if len(d) > 200]
    whole = tokenize(a.kvserve, a.model, "\n\n".join(docs[: 8 * a.windows]), False)
    results = {"start": [], "crop": []}
    for w in range(a.windows):
        start = tokenize(a.kvserve, a.model, "\n\n".join(docs[w * 4:w * 4 + 4]), True)
        results["start"].append(attention_shares(model, start[: a.window], a.first_query))
        off = len(whole) // (a.windows + 1) * (w + 1) + 17
        results["crop"].append(attention_shares(model, whole[off: off + a.window], a.first_query))
    print(f"# CPU: {cpu_name()}; model {os.path.basename(a.model)}; windows of {a.window} "
          f"tokens, queries from position {a.first_query}, {a.windows} windows of each kind")
    print("| layer | start: on pos 0 | start: on pos 0-3 | crop: on pos 0 | crop: on pos 0-3 | "
          "uniform share of pos 0 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    layers = len(results["start"][0])
    for li in range(layers):
        st = np.mean([r[li] for r in results["start"]], axis=0)
        cr = np.mean([r[li] for r in results["crop"]], axis=0)
        print(f"| {li} | {st[0]:.3f} | {st[1]:.3f} | {cr[0]:.3f} | {cr[1]:.3f} | {st[2]:.3f} |")


if __name__ == "__main__":
    main()
