"""A KV event subscriber written only against vLLM's public format (vllm/distributed/kv_events.py
and the block hash of vllm/v1/core/kv_cache_utils.py), run against `kvserve serve`.

It subscribes to the ZeroMQ PUB socket (multipart [topic, seq as 8 bytes big-endian, msgpack
EventBatch]), rebuilds the server's block set from BlockStored / BlockRemoved / AllBlocksCleared,
recomputes every stored block's hash with cbor2 + hashlib from its parent and tokens, fills
sequence gaps from the replay ROUTER socket (one batch is dropped on purpose), and checks that the
block set matches the server's cached-block count, that a prompt's block hashes computed here
from POST /tokenize are among the stored ones, and that a restart starts over with
AllBlocksCleared. Every wait polls with a generous deadline.

Exits 77 (skip) when python3-zmq, python3-msgpack or python3-cbor2 is missing."""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

try:
    import cbor2
    import msgpack
    import zmq
except ImportError as e:  # pragma: no cover
    print(f"skipping: {e} (Debian: python3-zmq python3-msgpack python3-cbor2)")
    sys.exit(77)

KVSERVE = None
SEED = "kvserve-test-seed"
TOPIC = "kv@replica-0@kvserve"
BLOCK_SIZE = 16
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def sha256_cbor(obj):
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


NONE_HASH = sha256_cbor(SEED)  # vLLM's NONE_HASH with PYTHONHASHSEED=SEED


def block_hashes(tokens, salt=None):
    """vLLM's hash_block_tokens over every full block, cache_salt in the first block's keys."""
    out, parent = [], NONE_HASH
    for start in range(0, len(tokens) - BLOCK_SIZE + 1, BLOCK_SIZE):
        extra = (salt,) if (salt and start == 0) else None
        parent = sha256_cbor((parent, tuple(tokens[start:start + BLOCK_SIZE]), extra))
        out.append(parent)
    return out


def as_int(h):
    """The 64-bit form vLLM sends by default: the digest's low 64 bits."""
    return int.from_bytes(h, "big") & ((1 << 64) - 1)


class Server:
    def __init__(self, events_dir, num_blocks):
        self.pub = f"ipc://{events_dir}/pub"
        self.replay = f"ipc://{events_dir}/replay"
        config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": self.pub,
                  "replay_endpoint": self.replay, "topic": TOPIC, "buffer_steps": 1000}
        self.stderr = open(os.path.join(events_dir, "stderr.log"), "a+")
        self.proc = subprocess.Popen(
            [KVSERVE, "serve", "--port", "0", "--threads", "1", "--num-blocks", str(num_blocks),
             "--block-size", str(BLOCK_SIZE), "--kv-events-config", json.dumps(config),
             "--kv-events-hash-seed", SEED, "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"kvserve: listening on http://127\.0\.0\.1:(\d+)$", line.strip())
        if not m:
            self.stop()
            self.stderr.seek(0)
            raise AssertionError(f"unexpected first line {line!r}: {self.stderr.read()}")
        self.origin = f"http://127.0.0.1:{m.group(1)}"

    def post(self, path, body):
        req = urllib.request.Request(self.origin + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def metric(self, name, labels=""):
        with urllib.request.urlopen(self.origin + "/metrics", timeout=60) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith(name + "{") and labels in line:
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no metric {name} {labels}")

    def complete(self, prompt, **extra):
        return self.post("/v1/completions", {"prompt": prompt, "max_tokens": 4,
                                             "temperature": 0, **extra})

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


class Subscriber:
    """The block set of one replica as a router would keep it."""

    def __init__(self, pub, replay):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, TOPIC.encode())
        self.sub.connect(pub)
        self.dealer = self.ctx.socket(zmq.DEALER)
        self.dealer.connect(replay)
        self.next_seq = 0
        self.last_live = None  # the last seq the PUB socket delivered (live seqs only grow)
        self.replayed = set()  # seqs applied from the replay socket
        self.blocks = {}       # int hash -> (full 32-byte hash, parent int hash or None, tokens)
        self.removed = 0
        self.cleared = 0
        self.replays = 0
        self.drop_seq = None   # a live batch to drop on purpose, once
        self.dropped = None
        self.salted = set()    # salts seen in extra_keys

    def close(self):
        self.sub.close(0)
        self.dealer.close(0)
        self.ctx.term()

    def replay_from(self, start):
        self.dealer.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            if not self.dealer.poll(30000):
                raise AssertionError(f"no replay answer from {start}")
            empty, seq, payload = self.dealer.recv_multipart()
            assert empty == b""
            if seq == END_SEQ:
                return
            seq = int.from_bytes(seq, "big")
            if seq == self.next_seq:
                self.apply(payload)
                self.replayed.add(seq)
                self.next_seq += 1

    def on_message(self, topic, seq_bytes, payload):
        assert topic == TOPIC.encode(), topic
        seq = int.from_bytes(seq_bytes, "big")
        restarted = self.last_live is not None and seq <= self.last_live
        self.last_live = seq
        if self.drop_seq is not None and seq >= self.drop_seq and self.dropped is None:
            self.dropped = seq  # lost on purpose: the next batch reveals the gap
            return
        if restarted:  # a new publisher counts from 0 again
            self.next_seq = 0
        if seq > self.next_seq:  # a gap (or batches sent before we connected)
            self.replays += 1
            self.replay_from(self.next_seq)
        if seq == self.next_seq:
            self.apply(payload)
            self.next_seq += 1

    def pump(self, done, what, timeout=60, must=True):
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                if not must:
                    return False
                raise AssertionError(f"timed out waiting for {what}")
            if self.sub.poll(200):
                self.on_message(*self.sub.recv_multipart())
            else:  # a quiet stream: batches lost at its end show no gap, so ask for them
                self.replay_from(self.next_seq)
        return True

    def apply(self, payload):
        ts, events, dp_rank = msgpack.unpackb(payload, raw=False)
        assert isinstance(ts, float) and ts > 1e9, ts
        assert dp_rank == 0, dp_rank
        for event in events:
            tag = event[0]
            if tag == "AllBlocksCleared":
                assert event == ["AllBlocksCleared"], event
                self.blocks.clear()
                self.removed = 0  # a new server: its eviction counter starts over too
                self.cleared += 1
            elif tag == "BlockStored":
                hashes, parent, token_ids, block_size, lora_id, medium, lora_name = event[1:8]
                extra_keys = event[8] if len(event) > 8 else None
                assert block_size == BLOCK_SIZE and lora_id is None and lora_name is None
                assert medium == "GPU", medium
                assert len(token_ids) == len(hashes) * block_size
                full_parent = NONE_HASH
                if parent is not None:
                    assert parent in self.blocks, f"unknown parent {parent}"
                    full_parent = self.blocks[parent][0]
                for i, h in enumerate(hashes):
                    assert isinstance(h, int), h
                    tokens = tuple(token_ids[i * block_size:(i + 1) * block_size])
                    extra = None
                    if extra_keys is not None and extra_keys[i] is not None:
                        extra = tuple(extra_keys[i])
                        self.salted.update(extra)
                    full = sha256_cbor((full_parent, tokens, extra))
                    assert as_int(full) == h, "a block hash that is not vLLM's"
                    assert h not in self.blocks, f"stored twice: {h}"
                    self.blocks[h] = (full, parent, tokens)
                    parent, full_parent = h, full
            elif tag == "BlockRemoved":
                hashes, medium = event[1:3]
                assert medium == "GPU", medium
                for h in hashes:
                    assert h in self.blocks, f"removed an unknown block {h}"
                    del self.blocks[h]
                    self.removed += 1
            else:
                raise AssertionError(f"unknown event {tag}")


class KvEventsSubscriberTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvev-")
        self.server = None
        self.sub = None

    def tearDown(self):
        if self.sub:
            self.sub.close()
        if self.server:
            self.server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def wait_for_server_view(self, server, what):
        def matches():
            cached = server.metric("kvserve:kv_cache_blocks", 'state="cached"')
            in_use = server.metric("kvserve:kv_cache_blocks", 'state="in_use"')
            evicted = server.metric("kvserve:prefix_cache_evictions_total")
            return (in_use == 0 and len(self.sub.blocks) == cached
                    and self.sub.removed == evicted)
        self.sub.pump(matches, what)

    def test_subscriber_rebuilds_the_block_set_fills_a_gap_and_sees_a_restart(self):
        self.server = Server(self.dir, num_blocks=16)
        self.sub = Subscriber(self.server.pub, self.server.replay)
        texts = [f"Once upon a time in a small village by the sea there lived a fisherman "
                 f"named {name}, who every morning rowed out past the lighthouse and "
                 f"sang to the gulls about {topic}."
                 for name in ("Tom", "Anna", "Ole")
                 for topic in ("the weather", "his boat", "the old king", "a lost ring")]
        prompts = [self.server.post("/tokenize", {"prompt": t})["tokens"] for t in texts]
        self.assertGreaterEqual(min(len(p) for p in prompts), 2 * BLOCK_SIZE)
        self.server.complete(prompts[0])
        self.server.complete(prompts[0])  # a hit
        self.wait_for_server_view(self.server, "the first requests")
        self.sub.drop_seq = self.sub.next_seq + 1
        for p in prompts[1:]:
            self.server.complete(p)
        for p in prompts[:4]:
            self.server.complete(p)  # old prompts again: hits, or recomputed after evictions
        self.server.complete(prompts[5], cache_salt="tenant-a")
        self.server.complete(texts[7])
        self.wait_for_server_view(self.server, "the workload")
        self.assertIsNotNone(self.sub.dropped, "no batch was dropped")
        self.assertIn(self.sub.dropped, self.sub.replayed)  # the gap, filled from the replay
        self.assertGreater(self.sub.removed, 0, "the workload should evict")
        self.assertEqual(self.sub.cleared, 1)
        self.assertEqual(self.sub.salted, {"tenant-a"})
        # A router's view: the hashes of a prompt, from its tokens alone, are all stored.
        for h in block_hashes(prompts[7]):
            self.assertIn(as_int(h), self.sub.blocks)
        self.assertIn(as_int(block_hashes(prompts[5], "tenant-a")[0]), self.sub.blocks)

        # A restart: the new server counts batches from 0 again, and its first batch clears the
        # view. The subscriber learns of it from the first live batch that reaches it (its
        # socket reconnects on its own, so requests go on until one does).
        self.server.stop()
        self.server = Server(self.dir, num_blocks=16)
        deadline = time.monotonic() + 60
        while not self.sub.pump(lambda: self.sub.cleared == 2, "", timeout=1, must=False):
            self.assertLess(time.monotonic(), deadline, "the restart was never seen")
            self.server.complete(prompts[2])
        self.wait_for_server_view(self.server, "the restarted server")
        self.assertEqual(self.sub.cleared, 2)
        for h in block_hashes(prompts[2]):
            self.assertIn(as_int(h), self.sub.blocks)


def main():
    global KVSERVE
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    KVSERVE = os.path.abspath(args.kvserve)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
