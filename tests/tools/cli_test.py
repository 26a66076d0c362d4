"""Black-box tests of the kvserve command: outputs have the promised shape, and bad input of
every kind ends in a clear error message and a non-zero exit, never a crash."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

KVSERVE = None


def run(*args, check=True):
    proc = subprocess.run([KVSERVE, *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"kvserve {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "m.gguf")
        run("make-model", "--out", cls.model, "--arch", "qwen2", "--layers", "2", "--hidden", "64",
            "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab", "400", "--type", "Q8_0")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_clean_error(self, proc, *fragments):
        self.assertNotEqual(proc.returncode, 0)
        self.assertLess(proc.returncode, 128, "killed by a signal: " + proc.stderr)
        self.assertIn("error", proc.stderr.lower())
        for f in fragments:
            self.assertIn(f, proc.stderr)

    def test_run_json_has_the_promised_fields(self):
        out = json.loads(run("run", "--prompt", "Once upon a time", "-n", "8", "--temp", "0",
                             "--json", "--threads", "2").stdout)
        for key in ("prompt_ids", "ids", "text", "prompt_tokens_per_second",
                    "generation_tokens_per_second", "finish_reason"):
            self.assertIn(key, out)
        self.assertEqual(len(out["ids"]), 8)
        self.assertGreater(out["generation_tokens_per_second"], 0)

    def test_greedy_run_is_deterministic_and_seeded_sampling_repeats(self):
        a = json.loads(run("run", "--prompt", "hello", "-n", "6", "--temp", "0", "--json").stdout)
        b = json.loads(run("run", "--prompt", "hello", "-n", "6", "--temp", "0", "--json",
                           "--threads", "1").stdout)
        self.assertEqual(a["ids"], b["ids"])
        s1 = json.loads(run("run", "--prompt", "hello", "-n", "6", "--seed", "7", "--json").stdout)
        s2 = json.loads(run("run", "--prompt", "hello", "-n", "6", "--seed", "7", "--json").stdout)
        self.assertEqual(s1["ids"], s2["ids"])

    def test_run_on_a_file_with_prompt_ids(self):
        out = json.loads(run("run", "--model", self.model, "--prompt-ids", "1,5,9,13", "-n", "4",
                             "--temp", "0", "--json").stdout)
        self.assertEqual(out["prompt_ids"], [1, 5, 9, 13])
        self.assertEqual(len(out["ids"]), 4)

    def test_detokenize_of_run_output_matches_its_text(self):
        out = json.loads(run("run", "--model", self.model, "--prompt", "the cat", "-n", "10",
                             "--temp", "0", "--json").stdout)
        ids = ",".join(str(i) for i in out["ids"])
        text = json.loads(run("detokenize", "--model", self.model, "--ids", ids).stdout)["text"]
        self.assertEqual(text, out["text"])

    def test_inspect_lists_metadata_and_tensors(self):
        out = run("inspect", self.model).stdout
        self.assertIn("qwen2.block_count", out)
        self.assertIn("blk.0.attn_q.bias", out)
        self.assertIn("Q8_0", out)

    def test_missing_file_is_a_clear_error(self):
        self.assert_clean_error(run("run", "--model", "/nonexistent/m.gguf", "--prompt", "x",
                                    check=False), "/nonexistent/m.gguf")

    def test_garbage_file_is_a_clear_error(self):
        path = os.path.join(self.tmp.name, "garbage.gguf")
        with open(path, "wb") as f:
            f.write(b"GGUF" + os.urandom(200))
        self.assert_clean_error(run("run", "--model", path, "--prompt", "x", check=False))
        self.assert_clean_error(run("inspect", path, check=False))

    def test_prompt_longer_than_the_context_is_refused(self):
        proc = run("run", "--model", self.model, "--ctx", "8", "--prompt-ids",
                   ",".join(["3"] * 20), "-n", "4", check=False)
        self.assert_clean_error(proc, "exceeds")

    def test_out_of_vocabulary_prompt_id_is_refused(self):
        proc = run("run", "--model", self.model, "--prompt-ids", "1,400000", check=False)
        self.assert_clean_error(proc, "400000")

    def test_bad_sampling_values_are_refused(self):
        proc = run("run", "--prompt", "x", "--top-p", "0", check=False)
        self.assert_clean_error(proc, "top_p")

    def test_unknown_chat_template_names_the_known_ones(self):
        proc = run("run", "--prompt", "x", "--chat", "--chat-template", "no-such-template",
                   check=False)
        self.assert_clean_error(proc, "chatml")

    def test_bad_cache_type_is_refused(self):
        self.assert_clean_error(run("run", "--prompt", "x", "--cache-type-k", "q3", check=False))

    def test_unknown_cache_type_names_the_valid_ones(self):
        proc = run("run", "--model", self.model, "--prompt", "x", "--cache-type-v", "int3",
                   check=False)
        self.assert_clean_error(proc, "--cache-type-v", "'int3'",
                                "f32, f16, bf16, int8, fp8_e4m3, fp8_e5m2, int4")

    def test_int4_cache_needs_a_power_of_two_head_dim(self):
        odd = os.path.join(self.tmp.name, "hd24.gguf")
        run("make-model", "--out", odd, "--arch", "llama", "--layers", "1", "--hidden", "96",
            "--heads", "4", "--kv-heads", "2", "--ffn", "64", "--vocab", "300")
        proc = run("run", "--model", odd, "--prompt-ids", "1,2", "-n", "1", "--cache-type-k",
                   "int4", check=False)
        self.assert_clean_error(proc, "power of two", "24")
        run("run", "--model", odd, "--prompt-ids", "1,2", "-n", "1", "--cache-type-k", "int8")

    def test_startup_line_gives_bytes_per_token_and_capacity(self):
        # The test model: 2 layers, 2 KV heads, head_dim 16. int8 K: 16 + 2 bytes, int4 V: 8 + 4.
        proc = run("run", "--model", self.model, "--prompt-ids", "1,2,3", "-n", "2",
                   "--cache-type-k", "int8", "--cache-type-v", "int4", "--kv-cache-memory",
                   "64KiB", "--json")
        per_token = 2 * 2 * ((16 + 2) + (8 + 4))
        tokens = 65536 // (per_token * 16) * 16
        self.assertIn(f"kvserve: KV cache int8/int4: {per_token} bytes/token, {tokens} tokens in",
                      proc.stderr)
        json.loads(proc.stdout)  # stdout stays pure JSON

    def test_perplexity_compares_a_quantized_cache_with_f16(self):
        path = os.path.join(self.tmp.name, "ppl-q.txt")
        with open(path, "w") as f:
            f.write("the quick brown fox jumps over the lazy dog and runs far away " * 6)
        base = ["perplexity", "--model", self.model, "--file", path, "--ctx", "64", "--json",
                "--threads", "2"]
        f16 = json.loads(run(*base).stdout)
        self.assertEqual(f16["kl_divergence"], 0.0)
        self.assertEqual(f16["top1_agreement"], 1.0)
        self.assertFalse(f16["compared"])
        self.assertEqual(f16["reference_perplexity"], f16["perplexity"])
        self.assertEqual(f16["bytes_per_token"], 2 * 2 * 2 * 16 * 2)
        for k, v, head_bytes in [("int8", "int8", 18 + 18), ("fp8_e4m3", "fp8_e5m2", 18 + 16),
                                 ("int4", "int4", 12 + 12), ("f32", "f16", 64 + 32)]:
            out = json.loads(run(*base, "--cache-type-k", k, "--cache-type-v", v).stdout)
            for key in ("perplexity", "tokens", "kl_divergence", "top1_agreement",
                        "reference_perplexity", "cache_type_k", "cache_type_v", "bytes_per_token"):
                self.assertIn(key, out)
            self.assertTrue(out["compared"])
            self.assertEqual((out["cache_type_k"], out["cache_type_v"]), (k, v))
            self.assertEqual(out["bytes_per_token"], 2 * 2 * head_bytes)
            self.assertEqual(out["tokens"], f16["tokens"])
            # The reference run is the f16 run above, window for window.
            self.assertAlmostEqual(out["reference_perplexity"], f16["perplexity"],
                                   delta=1e-9 * f16["perplexity"])
            self.assertGreaterEqual(out["kl_divergence"], 0.0)
            self.assertLess(out["kl_divergence"], 0.5)
            self.assertGreaterEqual(out["top1_agreement"], 0.0)
            self.assertLessEqual(out["top1_agreement"], 1.0)
            self.assertNotEqual(out["perplexity"], f16["perplexity"])
        # The human table names both rows.
        table = run(*base[:-3], "--cache-type-k", "int8", "--cache-type-v", "int8").stdout
        self.assertIn("f16/f16", table)
        self.assertIn("int8/int8", table)
        self.assertIn("KL vs f16", table)

    def test_invalid_utf8_prompt_does_not_crash(self):
        path = os.path.join(self.tmp.name, "bad.txt")
        with open(path, "wb") as f:
            f.write(b"abc \xff\xfe \xc3( \xe2\x82 end")
        # --ignore-eos: three tokens whatever the model samples (it may end its answer at once).
        out = json.loads(run("run", "--prompt-file", path, "-n", "3", "--ignore-eos", "--json").stdout)
        self.assertEqual(len(out["ids"]), 3)

    def test_f32_and_f16_cache_give_the_same_greedy_start(self):
        args = ["run", "--model", self.model, "--prompt", "a b c", "-n", "3", "--temp", "0", "--json"]
        a = json.loads(run(*args, "--cache-type-k", "f32", "--cache-type-v", "f32").stdout)
        b = json.loads(run(*args).stdout)
        self.assertEqual(a["ids"][0], b["ids"][0])

    def test_perplexity_is_exp_of_the_mean_next_token_nll_from_the_logits(self):
        import numpy as np
        text = "the quick brown fox jumps over the lazy dog and runs far away"
        path = os.path.join(self.tmp.name, "ppl.txt")
        with open(path, "w") as f:
            f.write(text)
        ids = json.loads(run("tokenize", "--model", self.model, "--file", path).stdout)["ids"]
        out = json.loads(run("perplexity", "--model", self.model, "--file", path, "--ctx", "256",
                             "--json").stdout)
        self.assertEqual(out["tokens"], len(ids) - 1)
        self.assertEqual(out["windows"], 1)
        raw = os.path.join(self.tmp.name, "ppl.f32")
        meta = json.loads(run("logits", "--model", self.model, "--ids",
                              ",".join(map(str, ids)), "--out", raw).stdout)
        logits = np.fromfile(raw, dtype=np.float32).reshape(len(ids), meta["vocab"]).astype(np.float64)
        m = logits.max(axis=1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        nll = -np.mean([logp[i - 1, ids[i]] for i in range(1, len(ids))])
        self.assertAlmostEqual(out["perplexity"], float(np.exp(nll)), delta=1e-6 * np.exp(nll))
        # Windows of 8 advancing by 4 still score every token once.
        small = json.loads(run("perplexity", "--model", self.model, "--file", path, "--ctx", "8",
                               "--json").stdout)
        self.assertEqual(small["tokens"], len(ids) - 1)
        self.assertGreater(small["windows"], 1)

    def test_perplexity_refuses_a_missing_or_empty_file(self):
        self.assert_clean_error(run("perplexity", "--file", "/nonexistent/x.txt", check=False),
                                "cannot read")
        empty = os.path.join(self.tmp.name, "empty.txt")
        open(empty, "w").close()
        self.assert_clean_error(run("perplexity", "--model", self.model, "--file", empty,
                                    check=False), "fewer than 2 tokens")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    KVSERVE = os.path.abspath(args.kvserve)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
