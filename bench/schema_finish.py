#!/usr/bin/env python3
"""How often real-world JSON Schemas finish through the server's response_format: a seeded pick
of MaskBench schemas, each sent once to `kvserve serve` (the embedded model unless --model).

The schemas come from a MaskBench data folder (the `maskbench/data` folder of
guidance-ai/jsonschemabench, outside the repository): files `<Split>---<name>.json`, each an
object with "schema" and "tests". Every split's file names are shuffled with --seed and the
splits are taken in turn, one schema at a time, until there are --count. Each schema goes to
/v1/chat/completions as response_format {"type": "json_schema", "json_schema": {"name", "schema"}}
with a short user prompt, at temperature 0 and --max-tokens. Each comes out as one of:

  refused     HTTP 400; the message names the keyword kvserve cannot enforce (counted per
              keyword; the compile time and grammar size limits are counted as such). Any other
              400 is printed loudly: the schema may be one kvserve should take
  finished    finish_reason "stop": the content is parsed and validated by the jsonschema
              package (the validator of tests/structured/schema_suite_test.py: OpenAPI nullable,
              strict formats). A finished output that does not validate is a bug: it is printed
              in full and counted as invalid (as well as finished)
  unfinished  finish_reason "length": cut by max_tokens

Prints one line per schema and a table per split; with --json a last line with the counts, the
finish rate over the accepted schemas and the refusal keywords with their counts.

  python3 bench/schema_finish.py --maskbench jsonschemabench/maskbench/data \\
      [--kvserve build/kvserve] [--count 60] [--seed 1] [--max-tokens 400] [--json]
"""
import argparse
import collections
import concurrent.futures
import json
import os
import random
import re
import sys
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "structured"))
from bench_util import cpu_name, start_serve  # noqa: E402

try:
    import jsonschema
    from schema_suite_test import validator_for  # noqa: E402
except ImportError:
    jsonschema = None

# The splits of real-world schemas (MaskBench's Synthesized and Handwritten are made-up edge
# cases; its BFCL files have no split prefix).
SPLITS = ["Github_easy", "Github_medium", "Github_hard", "Glaiveai2K", "JsonSchemaStore",
          "Kubernetes", "Snowplow", "WashingtonPost"]
# The user turn: it says what to write. (A bare "Answer in JSON." leads kvserve-tiny, which has
# seen that phrase after questions, to copy it into string values until max_tokens.)
PROMPT = "Write an example record as JSON."
OUTCOMES = ["refused", "finished", "unfinished", "error"]


def pick(data_dir, splits, count, seed):
    """[(split, file name)]: each split's files shuffled by one seeded generator, then taken in
    turn until `count`."""
    rng = random.Random(seed)
    names = sorted(os.listdir(data_dir))
    pools = []
    for split in splits:
        files = [n for n in names if n.startswith(split + "---") and n.endswith(".json")]
        if not files:
            sys.exit(f"no {split}---*.json files in {data_dir}")
        rng.shuffle(files)
        pools.append((split, files))
    picked = []
    while len(picked) < count:
        before = len(picked)
        for split, files in pools:
            if files and len(picked) < count:
                picked.append((split, files.pop(0)))
        if len(picked) == before:
            break  # every split is used up
    return picked


def refusal_keyword(message):
    """What a 400's message refuses: the keyword it names as not enforceable ("if", "format
    idn-hostname", "pattern with maxLength"), a limit ("(compile time limit)", "(grammar size
    limit)"), or None for any other 400 (a schema kvserve should have taken, or one that is not
    valid JSON Schema)."""
    if "longer to compile than the time limit" in message:
        return "(compile time limit)"
    if message.startswith("grammar too large"):
        return "(grammar size limit)"
    if "supported" not in message:  # unsupported X, X is not supported, only ... are supported
        return None
    m = re.search(r"unsupported format '([^']*)'", message)
    if m:
        return f"format {m[1]}"
    m = re.search(r"unsupported (dependencies|\$ref)\b", message)
    if m:
        return m[1]
    m = re.search(r"'([$A-Za-z][A-Za-z0-9]*)'(?: with '([$A-Za-z][A-Za-z0-9]*)')?", message)
    if m:
        return m[1] if m[2] is None else f"{m[1]} with {m[2]}"
    return None


def post(url, body, timeout=600):
    """(HTTP status, parsed JSON body)."""
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def run_one(url, data_dir, split, file_name, args):
    """One schema through the server → a result dict (split, name, outcome, detail...)."""
    with open(os.path.join(data_dir, file_name)) as f:
        schema = json.load(f)["schema"]
    name = re.sub(r"[^A-Za-z0-9_-]", "_", file_name[:-len(".json")].split("---", 1)[1])[:64]
    body = {"messages": [{"role": "user", "content": args.prompt}], "temperature": 0,
            "max_tokens": args.max_tokens,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": name, "schema": schema}}}
    if args.strict:
        body["response_format"]["json_schema"]["strict"] = True
    status, resp = post(url, body)
    r = {"split": split, "file": file_name}
    if status == 400:
        message = resp.get("error", {}).get("message", "")
        return {**r, "outcome": "refused", "keyword": refusal_keyword(message), "detail": message}
    if status != 200:
        return {**r, "outcome": "error", "detail": f"HTTP {status}: {json.dumps(resp)[:500]}"}
    choice = resp["choices"][0]
    text = choice["message"]["content"]
    tokens = resp["usage"]["completion_tokens"]
    if choice["finish_reason"] != "stop":
        return {**r, "outcome": "unfinished", "tokens": tokens, "detail": text[-80:]}
    try:
        value = json.loads(text)
    except ValueError as e:
        return {**r, "outcome": "finished", "valid": False, "tokens": tokens,
                "detail": f"not JSON ({e}): {text}"}
    try:
        errors = list(validator_for(schema).iter_errors(value))
    except Exception as e:  # the validator cannot load the schema (or a $ref): not kvserve's fault
        return {**r, "outcome": "finished", "valid": None, "tokens": tokens,
                "detail": f"not validated: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    if errors:
        return {**r, "outcome": "finished", "valid": False, "tokens": tokens,
                "detail": f"{errors[0].message[:300]} at {list(errors[0].absolute_path)}\n"
                          f"    schema: {json.dumps(schema)}\n    output: {text}"}
    return {**r, "outcome": "finished", "valid": True, "tokens": tokens, "detail": text[:80]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--maskbench", required=True, help="MaskBench's data folder")
    ap.add_argument("--kvserve", default="build/kvserve")
    ap.add_argument("--model", help="a GGUF (default: the embedded model)")
    ap.add_argument("--count", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--splits", default=",".join(SPLITS))
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--strict", action="store_true",
                    help="json_schema.strict: additionalProperties defaults to false")
    ap.add_argument("--threads", type=int, default=2, help="the server's --threads")
    ap.add_argument("--workers", type=int, default=4, help="requests in flight")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if jsonschema is None:
        sys.exit("the jsonschema package is needed (Debian: python3-jsonschema)")
    picked = pick(args.maskbench, args.splits.split(","), args.count, args.seed)
    serve_args = ["--threads", str(args.threads), "--log-level", "warning"]
    if args.model:
        serve_args += ["--model", args.model]
    log = open(os.devnull, "w")
    proc, url, _ = start_serve(args.kvserve, serve_args, log)
    model = json.loads(urllib.request.urlopen(url + "/v1/models", timeout=30).read())["data"][0]["id"]
    print(f"# CPU: {cpu_name()}; model {model}; {len(picked)} schemas (seed {args.seed}), "
          f"temperature 0, max_tokens {args.max_tokens}", flush=True)
    try:
        with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
            results = list(pool.map(lambda p: run_one(url, args.maskbench, *p, args), picked))
    finally:
        proc.terminate()
        proc.wait()

    for r in results:
        extra = f" {r['tokens']} tokens" if "tokens" in r else ""
        keyword = f" [{r['keyword']}]" if r.get("keyword") else ""
        label = r["outcome"]
        if label == "finished" and r["valid"] is not True:
            label = "INVALID" if r["valid"] is False else "unchecked"
        print(f"{label:10s} {r['file']}{extra}{keyword}: {r['detail'].splitlines()[0][:120]}")
    invalid = [r for r in results if r.get("valid") is False]
    for r in invalid:
        print(f"\n!!! BUG: {r['file']} finished with output that does not validate:\n    "
              f"{r['detail']}", file=sys.stderr)
    errors = [r for r in results if r["outcome"] == "error"]
    for r in errors:
        print(f"\n!!! {r['file']}: {r['detail']}", file=sys.stderr)
    for r in results:
        if r["outcome"] == "refused" and r["keyword"] is None:
            print(f"\n!!! {r['file']}: refused, not for an unsupported keyword: {r['detail']}",
                  file=sys.stderr)

    def counts(rs):
        c = collections.Counter(r["outcome"] for r in rs)
        c["invalid"] = sum(1 for r in rs if r.get("valid") is False)
        c["unchecked"] = sum(1 for r in rs if r["outcome"] == "finished" and r["valid"] is None)
        return c

    columns = ["refused", "finished", "invalid", "unfinished", "error"]
    print("\n| split | schemas | " + " | ".join(columns) + " |")
    print("| --- " * (len(columns) + 2) + "|")
    for split in dict.fromkeys(r["split"] for r in results):
        c = counts([r for r in results if r["split"] == split])
        print(f"| {split} | {sum(c[o] for o in OUTCOMES)} | "
              + " | ".join(str(c[o]) for o in columns) + " |")
    total = counts(results)
    print(f"| all | {len(results)} | " + " | ".join(str(total[o]) for o in columns) + " |")
    accepted = total["finished"] + total["unfinished"]
    rate = total["finished"] / accepted if accepted else 0.0
    keywords = collections.Counter(r["keyword"] or "(other)" for r in results
                                   if r["outcome"] == "refused")
    print(f"\nfinished {total['finished']} of {accepted} accepted schemas ({100 * rate:.1f}%), "
          f"{total['invalid']} of them invalid, {total['unchecked']} not validated (the "
          f"validator could not load the schema); refused {total['refused']}: "
          + ", ".join(f"{k} {n}" for k, n in keywords.most_common()))
    if args.json:
        print(json.dumps({"schemas": len(results), **{o: total[o] for o in columns},
                          "unchecked": total["unchecked"], "accepted": accepted,
                          "finish_rate": round(rate, 4), "refusal_keywords": dict(keywords)}))
    return 1 if invalid or errors else 0

if __name__ == "__main__":
    sys.exit(main())
