#!/usr/bin/env python3
"""Speculative decoding through `kvserve serve`: decode throughput with --speculative-config
against without, at several concurrencies, alternating the two servers' runs.

Each run sends C concurrent streaming /v1/completions requests (greedy, ignore_eos) whose
prompts carry a text that the output may copy (the input-grounded workload: the text, then its
first sentence again). The prompts are sent once with max_tokens 1 first, so that the measured
requests find them cached and decode together from their first step. Decode throughput = the tokens after each request's first, summed, over
the time from the earliest first token to the latest last one. Prints every run, then per
concurrency the medians, the on/off ratio, and the acceptance rate and mean acceptance length
read from the server's /metrics (kvserve:spec_decode_*). Greedy outputs are compared: they must
be identical.

  python3 bench/spec_serve_bench.py --model M.gguf --spec '{"method": "ngram"}' \
      [--concurrency 1,4,16] [--runs 3] [--max-tokens 64] [--threads 2]
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import cpu_name, start_serve  # noqa: E402

WORDS = ("the river map duck house flowers friend morning garden lamp window bread "
         "stone bridge letter basket cloud hill road song boat kite").split()


def grounded_prompt(i, words=180):
    """A paragraph of pseudo-text (seeded by i), then its first sentence again."""
    import random
    rng = random.Random(i)
    sents = []
    for _ in range(words // 9):
        s = " ".join(rng.choice(WORDS) for _ in range(9))
        sents.append(s[0].upper() + s[1:] + ".")
    text = " ".join(sents)
    return f"{text}\n\nAgain: {sents[0]}"


def stream(url, prompt, max_tokens, out, i):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    times, text = [], []
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for c in ev.get("choices", []):
                if c.get("text"):
                    times.append(time.monotonic())
                    text.append(c["text"])
    out[i] = (times, "".join(text))


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        m = {}
        for line in r.read().decode().splitlines():
            if line.startswith("kvserve:spec_decode_num_") and "per_pos" not in line:
                k, v = line.rsplit(" ", 1)
                m[k.split("{")[0]] = float(v)
        return m


def run_once(url, c, max_tokens, round_id):
    # First the prompts alone (one token each), so that they are cached and the measured
    # requests all start decoding in the same step: the decode window then holds no prefill.
    for n in (1, max_tokens):
        out = [None] * c
        threads = [threading.Thread(target=stream,
                                    args=(url, grounded_prompt(1000 * round_id + i), n, out, i))
                   for i in range(c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    firsts = [o[0][0] for o in out if o[0]]
    lasts = [o[0][-1] for o in out if o[0]]
    tokens = sum(len(o[0]) - 1 for o in out if o[0])
    return tokens / max(max(lasts) - min(firsts), 1e-9), [o[1] for o in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kvserve", default="build/kvserve")
    ap.add_argument("--model", required=True)
    ap.add_argument("--spec", required=True, help="--speculative-config of the 'on' server")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    common = ["--model", a.model, "--threads", str(a.threads), "--max-num-seqs", "16",
              "--kv-cache-memory", "2GiB", "--log-level", "warning"]
    log = open(os.devnull, "w")
    servers = {}
    for side, extra in (("off", []), ("on", ["--speculative-config", a.spec])):
        proc, url, _ = start_serve(a.kvserve, common + extra, log)
        servers[side] = (proc, url)
    print(f"CPU: {cpu_name()}; model {a.model}; spec {a.spec}; {a.max_tokens} tokens per request")
    try:
        for c in [int(x) for x in a.concurrency.split(",")]:
            rates = {"off": [], "on": []}
            acc, lens, identical = [], [], True
            # Warm-up (page cache, the step cost model) on both sides, not counted.
            for side in ("off", "on"):
                run_once(servers[side][1], c, a.max_tokens, 999)
            for r in range(a.runs):
                order = ("off", "on") if r % 2 == 0 else ("on", "off")
                texts = {}
                before = scrape(servers["on"][1])
                for side in order:
                    rate, texts[side] = run_once(servers[side][1], c, a.max_tokens, r)
                    rates[side].append(rate)
                after = scrape(servers["on"][1])
                d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
                drafts = d.get("kvserve:spec_decode_num_drafts_total", 0)
                dt = d.get("kvserve:spec_decode_num_draft_tokens_total", 0)
                at = d.get("kvserve:spec_decode_num_accepted_tokens_total", 0)
                acc.append(at / dt if dt else 0)
                lens.append(1 + at / drafts if drafts else 1)
                identical = identical and texts["on"] == texts["off"]
                print(f"c={c} run {r}: off {rates['off'][-1]:.1f} tok/s, on {rates['on'][-1]:.1f} "
                      f"tok/s ({rates['on'][-1] / rates['off'][-1]:.2f}x); {int(dt)} drafts in "
                      f"{int(drafts)} verifications, {100 * acc[-1]:.1f}% accepted, mean acceptance "
                      f"length {lens[-1]:.2f}", flush=True)
            off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
            print(f"c={c} median: off {off:.1f} tok/s, on {on:.1f} tok/s, on/off {on / off:.2f}x, "
                  f"acceptance {100 * statistics.median(acc):.1f}%, mean acceptance length "
                  f"{statistics.median(lens):.2f}, outputs {'identical' if identical else 'DIFFER'}",
                  flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
