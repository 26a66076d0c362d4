#!/usr/bin/env python3
"""Structured output's decode throughput: JSON generation with jump-forward (force and verify)
and without, against unconstrained generation of the same number of tokens, on one model.

Each round runs, in turn, `kvserve run --json-schema S` with jump-forward forced, verified and
off, then `kvserve run` without a constraint for as many tokens as the constrained run without
jump-forward wrote (--ignore-eos). Throughput is the generated tokens over the decode time (from
the first token to the last) that `run --json` reports. Rounds alternate the configurations;
the medians and the ratios against unconstrained come last. The outputs of the constrained runs
are checked to parse as JSON.

  python3 bench/structured_throughput.py --kvserve build/kvserve --model M.gguf \\
      [--rounds 5] [--threads 2] [--max-tokens 256]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import cpu_name  # noqa: E402

# Property names, enum values and brackets give forced stretches; bounded strings and numbers
# keep the output finite on any model.
SCHEMA = {
    "type": "object",
    "properties": {
        "customer_name": {"type": "string", "maxLength": 16},
        "customer_identifier": {"type": "integer", "minimum": 0, "maximum": 99999},
        "membership_level": {"enum": ["membership-bronze", "membership-silver", "membership-gold"]},
        "shipping_address": {
            "type": "object",
            "properties": {
                "street_name": {"type": "string", "maxLength": 16},
                "postal_code": {"type": "string", "pattern": "[0-9]{5}"},
                "country_code": {"enum": ["country-fr", "country-de", "country-us"]},
            },
            "required": ["street_name", "postal_code", "country_code"],
            "additionalProperties": False,
        },
        "order_items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "product_identifier": {"type": "integer", "minimum": 0, "maximum": 999},
                    "product_category": {"enum": ["category-books", "category-music"]},
                    "quantity_ordered": {"type": "integer", "minimum": 1, "maximum": 9},
                },
                "required": ["product_identifier", "product_category", "quantity_ordered"],
                "additionalProperties": False,
            },
            "minItems": 2,
            "maxItems": 3,
        },
    },
    "required": ["customer_name", "customer_identifier", "membership_level", "shipping_address",
                 "order_items"],
    "additionalProperties": False,
}
PROMPT = "Write an order record as JSON."


def run(args, extra):
    cmd = [args.kvserve, "run", "-m", args.model, "-p", PROMPT, "--temp", "0", "--json",
           "--threads", str(args.threads)] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvserve", default="build/kvserve")
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(SCHEMA, f)
        schema_file = f.name
    print(f"# CPU: {cpu_name()}; model {os.path.basename(args.model)}; {args.rounds} rounds")
    constrained = {
        "jf-force": ["--json-schema", schema_file, "-n", str(args.max_tokens)],
        "jf-verify": ["--json-schema", schema_file, "-n", str(args.max_tokens),
                      "--jump-forward-mode", "verify"],
        "jf-off": ["--json-schema", schema_file, "-n", str(args.max_tokens), "--no-jump-forward"],
    }
    rates = {k: [] for k in list(constrained) + ["unconstrained"]}
    tokens = {}
    for r in range(args.rounds):
        for name, extra in constrained.items():
            j = run(args, extra)
            if j["finish_reason"] == "stop":
                json.loads(j["text"])  # the constraint held
            tokens[name] = j["generated_tokens"]
            rates[name].append(j["generation_tokens_per_second"])
            print(f"round {r} {name:14s} {j['generated_tokens']:4d} tokens "
                  f"{j['generation_tokens_per_second']:7.1f} tok/s  forced "
                  f"{j.get('jump_forward_accepted', 0)}/{j.get('jump_forward_tokens', 0)}  "
                  f"{j['finish_reason']}", flush=True)
        j = run(args, ["-n", str(tokens["jf-off"]), "--ignore-eos"])
        rates["unconstrained"].append(j["generation_tokens_per_second"])
        print(f"round {r} {'unconstrained':14s} {j['generated_tokens']:4d} tokens "
              f"{j['generation_tokens_per_second']:7.1f} tok/s", flush=True)
    base = statistics.median(rates["unconstrained"])
    print("\n| run | tokens | tok/s (median) | vs unconstrained |")
    print("| --- | --- | --- | --- |")
    for name, values in rates.items():
        med = statistics.median(values)
        print(f"| {name} | {tokens.get(name, tokens['jf-off'])} | {med:.1f} | {med / base:.2f}x |")
    os.unlink(schema_file)


if __name__ == "__main__":
    main()
