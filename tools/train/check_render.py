#!/usr/bin/env python3
"""Checks that the training corpus's chat documents are token for token what kvserve sends the
model for the same conversation: each JSON and tool dialogue that corpus.py writes is parsed
back into an OpenAI request (messages, tools, assistant tool_calls, tool messages), sent to a
running `kvserve serve`'s /tokenize, and compared with the ids train.py trains on (<s> first,
as kvserve adds it).

    kvserve serve --port 8091 &
    python3 tools/train/check_render.py --work build/train --port 8091 --docs 300
"""
import argparse
import json
import os
import random
import re
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
from train import encode_docs  # noqa: E402

TURN = re.compile(r"<\|im_start\|>(\w+)\n?(.*?)<\|im_end\|>\n?", re.S)
CALL = re.compile(r"\n?<tool_call>\n\{\"name\": \"([^\"]+)\", \"arguments\": (.*?)\}\n</tool_call>", re.S)
RESULT = re.compile(r"\n<tool_response>\n(.*?)\n</tool_response>", re.S)


def to_request(doc):
    """(messages, tools) of one ChatML document as an OpenAI chat request carries them."""
    messages, tools, n_calls = [], [], 0
    for role, body in TURN.findall(doc):
        if role == "system" and corpus.HERMES_TOOLS_HEAD in body:
            system, rest = body.split(corpus.HERMES_TOOLS_HEAD)
            lines = rest[:rest.index("\n</tools>")].strip("\n").split("\n")
            tools = [json.loads(line) for line in lines]
            if system:
                messages.append({"role": "system", "content": system[:-2]})  # less "\n\n"
        elif role == "user" and body.startswith("<tool_response>"):
            for content in RESULT.findall("\n" + body):
                messages.append({"role": "tool", "tool_call_id": f"call_{n_calls}",
                                 "content": content})
        elif role == "assistant" and "<tool_call>" in body:
            content = body[:body.index("<tool_call>")].rstrip("\n")
            calls = []
            for name, args in CALL.findall(body):
                n_calls += 1
                calls.append({"id": f"call_{n_calls}", "type": "function",
                              "function": {"name": name, "arguments": args}})
            messages.append({"role": "assistant", "content": content or None, "tool_calls": calls})
        else:
            messages.append({"role": role, "content": body})
    return messages, tools


def main():
    import sentencepiece as spm
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="holds tokenizer.model")
    ap.add_argument("--port", type=int, default=8091)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.work, "tokenizer.model"))
    r = random.Random(a.seed)
    bad = 0
    for i in range(a.docs):
        doc = corpus.tool_dialogue(r) if i % 2 else corpus.json_dialogue(r)
        messages, tools = to_request(doc)
        body = {"messages": messages, "add_generation_prompt": False}
        if tools:
            body["tools"] = tools
        req = urllib.request.Request(f"http://127.0.0.1:{a.port}/tokenize",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            got = json.load(urllib.request.urlopen(req))["tokens"]
        except urllib.error.HTTPError as e:
            sys.exit(f"document {i}: {e.read().decode()}\n{doc}")
        # With <s> (kvserve adds it to a chat prompt) and the "\n" after the last turn, which the
        # corpus leaves out of a document's end.
        want = [int(t) for t in encode_docs(sp, doc + "\n", random.Random(0), chat_bos=1.0)]
        if got != want:
            bad += 1
            if bad <= 3:
                at = next((k for k, (x, y) in enumerate(zip(got, want)) if x != y),
                          min(len(got), len(want)))
                print(f"document {i} differs at token {at} of {len(got)}/{len(want)}:\n{doc}\n"
                      f" kvserve {sp.id_to_piece(got[at - 3:at + 6])}\n"
                      f" corpus  {sp.id_to_piece(want[at - 3:at + 6])}")
    print(f"{a.docs - bad} of {a.docs} documents tokenize as kvserve renders them")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
