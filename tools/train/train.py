#!/usr/bin/env python3
"""Trains kvserve's own models (a development tool: needs Debian's python3-torch and
python3-sentencepiece; neither the build nor the tests do).

    python3 tools/train/train.py tokenizer --work W          # corpus + SentencePiece BPE
    python3 tools/train/train.py model --work W --size target --steps 1600
    python3 tools/train/train.py model --work W --size draft --steps 1200
    python3 tools/train/train.py encode --work W --name mix --docs 40000 --json 0.25 --tools 0.07
    python3 tools/train/train.py model --work W --size target --data mix --resume --seq 1024 \
        --batch 4 --steps 260 --lr 5e-4 --warmup 20

`tokenizer` writes W/train.txt and W/heldout.txt (tools/train/corpus.py, seeds 1 and 2), trains
a byte-fallback BPE of 2048 pieces on the training text, and encodes both splits into W/*.ids.
`encode` writes a further corpus (corpus.py with JSON answers and tool dialogues mixed in) and
encodes it with the tokenizer already in W, for a later phase of training (`model --data`).
`heldout` writes the held-out split as one text for `kvserve perplexity --parse-special`.
`model` trains one size on random 256-token windows of the training ids with AdamW (linear
warm-up, cosine decay), logs the training loss every 10 steps and the held-out loss every 100
to W/<size>.loss.csv, and saves W/<size>.pt. tools/train/export_gguf.py turns that into GGUF.
"""
import argparse
import csv
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SPECIALS = ["<|im_start|>", "<|im_end|>"]
VOCAB = 2048
SIZES = {
    # ~5.2M parameters: the embedded default and the quality yardstick. Head size 64, as in
    # most served models, so KV dtypes are measured on the usual (token, head) vector length.
    "target": dict(dim=256, layers=6, heads=4, kv_heads=2, ffn=768),
    # ~0.65M parameters: the draft for speculative decoding.
    "draft": dict(dim=128, layers=2, heads=2, kv_heads=1, ffn=384),
}


def encode_docs(sp, text, rng, chat_bos=0.5):
    """Token ids of a corpus file: BOS + document + EOS for stories; dialogues are ChatML with
    the special markers inserted as single ids, with BOS a chat_bos share of the time (half: so
    the model works whether or not a chat prompt starts with it)."""
    from corpus import documents
    ids = []
    special_id = {s: sp.piece_to_id(s) for s in SPECIALS}
    for doc in documents(text):
        is_chat = doc.startswith("<|im_start|>")
        if not is_chat or rng.random() < chat_bos:
            ids.append(sp.bos_id())
        pos = 0
        while pos < len(doc):
            nxt = [(doc.find(s, pos), s) for s in SPECIALS]
            nxt = [(i, s) for i, s in nxt if i >= 0]
            if not nxt:
                ids.extend(sp.encode(doc[pos:]))
                break
            i, s = min(nxt)
            if i > pos:
                ids.extend(sp.encode(doc[pos:i]))
            ids.append(special_id[s])
            # Each text fragment is encoded on its own, with the dummy-prefix space, as
            # llama.cpp (and kvserve) tokenize text that follows a special token.
            pos = i + len(s)
        if not is_chat:
            ids.append(sp.eos_id())
    return np.array(ids, dtype=np.uint16)


def cmd_tokenizer(a):
    import random
    import sentencepiece as spm
    os.makedirs(a.work, exist_ok=True)
    corpus = os.path.join(HERE, "corpus.py")
    for split, seed, docs in (("train", 1, a.docs), ("heldout", 2, a.heldout_docs)):
        path = os.path.join(a.work, f"{split}.txt")
        if os.system(f"{sys.executable} {corpus} --seed {seed} --docs {docs} --out {path}") != 0:
            sys.exit("corpus generation failed")
    if a.reuse and os.path.exists(os.path.join(a.work, "tokenizer.model")):
        # The vocabulary of models that already exist (import_gguf.py rebuilds it from a GGUF).
        print("keeping the tokenizer in", a.work)
    else:
        spm.SentencePieceTrainer.train(
            input=os.path.join(a.work, "train.txt"), model_prefix=os.path.join(a.work, "tokenizer"),
            model_type="bpe", vocab_size=VOCAB, character_coverage=1.0, byte_fallback=True,
            split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=True, allow_whitespace_only_pieces=True, control_symbols=SPECIALS,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, input_sentence_size=200000,
            shuffle_input_sentence=True, num_threads=2, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.work, "tokenizer.model"))
    rng = random.Random(0)
    for split in ("train", "heldout"):
        with open(os.path.join(a.work, f"{split}.txt"), encoding="utf-8") as f:
            ids = encode_docs(sp, f.read(), rng)
        ids.tofile(os.path.join(a.work, f"{split}.ids"))
        print(f"{split}: {len(ids)} tokens")


def cmd_encode(a):
    """A further corpus, encoded with the tokenizer WORK already has (the vocabulary stays the
    model's): WORK/<name>.txt and WORK/<name>.ids for `model --data <name>`."""
    import random
    import sentencepiece as spm
    path = os.path.join(a.work, f"{a.name}.txt")
    cmd = (f"{sys.executable} {os.path.join(HERE, 'corpus.py')} --seed {a.seed} --docs {a.docs} "
           f"--json {a.json} --tools {a.tools} --out {path}")
    if os.system(cmd) != 0:
        sys.exit("corpus generation failed")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.work, "tokenizer.model"))
    with open(path, encoding="utf-8") as f:
        ids = encode_docs(sp, f.read(), random.Random(a.seed))
    ids.tofile(os.path.join(a.work, f"{a.name}.ids"))
    print(f"{a.name}: {len(ids)} tokens")


def cmd_model(a):
    import torch
    import torch.nn.functional as F
    from model import Config, Llama
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed + (1 if a.resume else 0))
    cfg = Config(vocab=VOCAB, ctx=max(512, a.seq), **SIZES[a.size])
    m = Llama(cfg)
    stem = a.name or a.size
    ckpt_path = os.path.join(a.work, f"{stem}.pt")
    first_step, first_tokens, first_seconds = 0, 0, 0.0
    if a.resume:
        # A second phase: the saved weights, a fresh optimizer and a new warm-up + cosine
        # schedule of --steps steps; the log continues the first phase's step count.
        ck = torch.load(ckpt_path, map_location="cpu")
        m.load_state_dict(ck["model"])
        first_step = ck["step"] + 1
        first_tokens = ck.get("tokens", first_step * a.batch * a.seq)
        first_seconds = ck.get("seconds", 0.0)
    print(f"{a.size}: {m.num_params() / 1e6:.3f}M parameters, {cfg}", flush=True)
    train = np.fromfile(os.path.join(a.work, f"{a.data}.ids"), dtype=np.uint16).astype(np.int64)
    held = np.fromfile(os.path.join(a.work, "heldout.ids"), dtype=np.uint16).astype(np.int64)
    T, B = a.seq, a.batch
    gen = np.random.default_rng(a.seed + (1 if a.resume else 0))
    decay, no_decay = [], []
    for n, p in m.named_parameters():
        (decay if p.dim() == 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))

    def lr_at(step):
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        f = (step - a.warmup) / max(1, a.steps - a.warmup)
        return a.lr_min + 0.5 * (a.lr - a.lr_min) * (1 + math.cos(math.pi * f))

    # Window starts: anywhere (random crops), or only at a document's <s> (as most LLMs are
    # trained: every window's first token is a BOS, which is what lets an attention sink form).
    bos_starts = np.flatnonzero(train[:len(train) - T - 1] == 1) if a.starts == "bos" else None

    def batch(src, rows):
        if bos_starts is not None and src is train:
            starts = bos_starts[gen.integers(0, len(bos_starts), size=rows)]
        else:
            starts = gen.integers(0, len(src) - T - 1, size=rows)
        x = np.stack([src[s:s + T + 1] for s in starts])
        return torch.from_numpy(x[:, :-1]), torch.from_numpy(x[:, 1:])

    def held_loss():
        # Fixed, non-overlapping windows over the start of the held-out split.
        m.eval()
        tot, n = 0.0, 0
        with torch.no_grad():
            for i in range(a.eval_windows):
                s = i * T
                if s + T + 1 > len(held):
                    break
                x = torch.from_numpy(held[s:s + T + 1][None])
                logits = m(x[:, :-1])
                tot += F.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
                n += T
        m.train()
        return tot / n

    log_path = os.path.join(a.work, f"{stem}.loss.csv")
    t0 = time.time() - first_seconds
    with open(log_path, "a" if a.resume else "w", newline="") as lf:
        log = csv.writer(lf)
        if not a.resume:
            log.writerow(["step", "tokens", "seconds", "lr", "train_loss", "heldout_loss"])
        run = 0.0
        for step in range(a.steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            x, y = batch(train, B)
            loss = F.cross_entropy(m(x).reshape(-1, cfg.vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            run = loss.item() if step == 0 else 0.9 * run + 0.1 * loss.item()
            last = step == a.steps - 1
            gstep, tokens = first_step + step, first_tokens + (step + 1) * B * T
            if step % 10 == 0 or last:
                hl = held_loss() if (step % 100 == 0 or last) else ""
                el = time.time() - t0
                log.writerow([gstep, tokens, f"{el:.1f}", f"{lr_at(step):.2e}",
                              f"{run:.4f}", f"{hl:.4f}" if hl != "" else ""])
                lf.flush()
                if hl != "":
                    print(f"step {gstep} tokens {tokens} {el:.0f}s train {run:.3f} "
                          f"heldout {hl:.3f} (ppl {math.exp(hl):.2f})", flush=True)
            if step % 200 == 0 or last:
                torch.save({"config": cfg.to_dict(), "model": m.state_dict(), "step": gstep,
                            "tokens": tokens, "seconds": time.time() - t0}, ckpt_path)
    print(f"done in {time.time() - t0:.0f}s", flush=True)


def heldout_stream(text):
    """The held-out split as one text that kvserve tokenizes (with special tokens parsed) into
    the same stream the model was trained on: stories as <s> story </s>, dialogues as <s> + ChatML
    turns. kvserve adds the first <s> itself."""
    from corpus import documents
    out = []
    for doc in documents(text):
        out.append(("<s>" if out else "") + doc + ("" if doc.startswith("<|im_start|>") else "</s>"))
    return "".join(out)


def cmd_heldout(a):
    with open(os.path.join(a.work, "heldout.txt"), encoding="utf-8") as f:
        text = f.read()
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(heldout_stream(text))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("--work", required=True)
    t.add_argument("--docs", type=int, default=60000)
    t.add_argument("--heldout-docs", type=int, default=400)
    t.add_argument("--reuse", action="store_true",
                   help="keep WORK/tokenizer.model if there is one (only write and encode the splits)")
    t.set_defaults(fn=cmd_tokenizer)
    h = sub.add_parser("heldout", help="write the held-out split in kvserve's stream form")
    h.add_argument("--work", required=True)
    h.add_argument("--out", required=True)
    h.set_defaults(fn=cmd_heldout)
    e = sub.add_parser("encode", help="a further corpus, encoded with WORK's tokenizer")
    e.add_argument("--work", required=True)
    e.add_argument("--name", required=True, help="WORK/<name>.txt and WORK/<name>.ids")
    e.add_argument("--seed", type=int, default=3)
    e.add_argument("--docs", type=int, default=60000)
    e.add_argument("--json", type=float, default=0.0, help="corpus.py --json")
    e.add_argument("--tools", type=float, default=0.0, help="corpus.py --tools")
    e.set_defaults(fn=cmd_encode)
    m = sub.add_parser("model")
    m.add_argument("--work", required=True)
    m.add_argument("--size", choices=sorted(SIZES), required=True)
    m.add_argument("--data", default="train",
                   help="training ids WORK/<data>.ids (train, or a corpus from `encode`)")
    m.add_argument("--steps", type=int, default=1600)
    m.add_argument("--batch", type=int, default=16)
    m.add_argument("--seq", type=int, default=256)
    m.add_argument("--lr", type=float, default=1.5e-3)
    m.add_argument("--lr-min", type=float, default=1e-4)
    m.add_argument("--warmup", type=int, default=100)
    m.add_argument("--eval-windows", type=int, default=16)
    m.add_argument("--threads", type=int, default=2)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--starts", choices=["random", "bos"], default="random",
                   help="training windows start anywhere, or only at a document's <s>")
    m.add_argument("--name", default=None,
                   help="file stem in WORK (default: the size), for variants of one size")
    m.add_argument("--resume", action="store_true",
                   help="continue from W/<size>.pt with a new schedule of --steps steps")
    m.set_defaults(fn=cmd_model)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
