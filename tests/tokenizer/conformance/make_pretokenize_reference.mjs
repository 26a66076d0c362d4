// Writes tests/data/tokenizer/pretokenize_reference.json: how HuggingFace's own tokenizers
// library (the Rust crate with its Oniguruma regexes, through the @anush008/tokenizers Node
// binding) splits the conformance corpus with each pre-tokenizer row's regexes, spelled as the
// models' tokenizer.json files spell them. tokenizer_test (PreTokenizerReferenceTest) checks
// that kvserve's table, in PCRE2's dialect, splits every string the same way.
//
// Run: node make_pretokenize_reference.mjs   (after `npm ci` here), then commit the JSON.
// A row is named by one of its GGUF pre values. Where no tokenizer.json spelling is known the
// regexes are llama.cpp's (src/llama-vocab.cpp); AFMoE is left out (llama.cpp splits its digits
// with hand-written code, there is no regex to run).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomStrings } from "./random_strings.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { Tokenizer } = require("@anush008/tokenizers");

const C = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const LLAMA3 = `${C}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const QWEN2_TAIL = "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = `${C}|${QWEN2_TAIL}`;
const U = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]";
const L = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]";
const LEAD = "[^\\r\\n\\p{L}\\p{N}]?";
const O200K = `${LEAD}${U}*${L}+${C}?|${LEAD}${U}+${L}*${C}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const HAN_KANA = "[一-龥぀-ゟ゠-ヿ]+";
const DSV3_MAIN = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const BLOOM = " ?[^(\\s|.,!?…。，、।۔،)]+";
const KU = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]";
const KL = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]";

const rows = {
  "default": ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
  "gpt-2": [GPT2],
  "starcoder": ["\\p{N}", GPT2],
  "falcon": ["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"],
  "llama-bpe": [LLAMA3],
  "dbrx": [LLAMA3],
  "jais-2": [`${C}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}`],
  "qwen2": [QWEN2],
  "stablelm2": [QWEN2],
  "qwen35": [`${C}|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  "ufakzeka": [QWEN2_TAIL],
  "laguna": ["[^\\n]+|[\\n]+", QWEN2],
  "seed-coder": [`${C}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  "minicpm5": ["\\p{N}{1,3}", `${C}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  "exaone-moe": [`${C}|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+`],
  "bailingmoe": ["'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"],
  "gpt-4o": [O200K],
  "granite-embed-multi-97m": [O200K],
  "tiny_aya": ["\\d{1,3}(?=(?:\\d{3})*\\b)", O200K],
  "tekken": [`${LEAD}${U}*${L}+|${LEAD}${U}+${L}*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  "youtu": ["[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
            `${LEAD}${U}*${L}+${C}?|${LEAD}${U}+${L}*${C}?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  "kimi-k2": [`[\\p{Han}]+|${LEAD}${KU}*${KL}+${C}?|${LEAD}${KU}+${KL}*${C}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  "bloom": [BLOOM],
  "viking": [BLOOM, "\\p{N}"],
  "chameleon": ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
                "[\\p{P}!-/:-@\\[-`{-~]", GPT2],
  "superbpe": ["\\p{N}+", "(?=(\\d{3})+(?!\\d))"],
  "deepseek-llm": [
    "[\r\n]",
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\ud801\udc00-\ud801\udc4f\ud801\udcb0-\ud801\udcd3\ud801\udcd8-\ud801\udcfb\ud803\udc80-\ud803\udcb2\ud803\udcc0-\ud803\udcf2\ud806\udca0-\ud806\udcdf\ud83a\udd00-\ud83a\udd43]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"],
  "deepseek-coder": ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"],
  "deepseek-v3": ["\\p{N}{1,3}", HAN_KANA, DSV3_MAIN],
  "spark2_5": ["\\p{N}{1,3}", HAN_KANA,
               "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
               "\\p{N}"],
};

// Strings that reach each row's special cases, on top of the conformance corpus.
const extras = [
  "a" + " ".repeat(10) + "b", "x" + " ".repeat(37) + "\n" + " ".repeat(600) + "y   ", "Ankara'dan we'llx",
  "<sentinel:12>IMGIMGABZ  x\tHi, 42!", "a    b\tc", "HelloWorld JSONParser ABC aΒ Straße ΑΒγδ",
  "你好world 中、文 日本語のテキスト 々", "안녕，世界！abc ㄅㄆ", "1234567 x 1234abc 12 123456",
  "cafe\u0301! e\u0301\u0301x", "Hello world foo  bar", "x.\n\ny/\n/z", "I'M 12\n\nx", "it'S WE'LL 'LLx",
  "abc 1234567 de", "１２，ｘ", "(a) [b] {c} <d> |e| `f` ~g^ $h", "\u3000\u3001x", "x\r\n\r\n  y",
];

function preTokenizer(regexes) {
  const json = {
    version: "1.0", truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: "Sequence", pretokenizers: regexes.map((r) => (
      { type: "Split", pattern: { Regex: r }, behavior: "Isolated", invert: false })) },
    post_processor: null, decoder: null,
    model: { type: "WordLevel", vocab: { "[UNK]": 0 }, unk_token: "[UNK]" },
  };
  return Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer();
}


const texts = [...JSON.parse(readFileSync(path.join(here, "corpus.json"), "utf8")), ...extras,
               ...randomStrings(300)].filter((t) => t.length > 0);
const out = { generator: "tests/tokenizer/conformance/make_pretokenize_reference.mjs",
              reference: "@anush008/tokenizers 0.6.0 (HF tokenizers, Oniguruma)", texts, rows: [] };
for (const [pre, regexes] of Object.entries(rows)) {
  const pt = preTokenizer(regexes);
  // Each text's pieces as UTF-8 byte lengths (the pieces always concatenate to the text).
  const pieces = texts.map((t) => {
    const split = pt.preTokenizeString(t).map(([p]) => p);
    if (split.join("") !== t) throw new Error(`${pre}: pieces of ${JSON.stringify(t)} lose text`);
    return split.map((p) => Buffer.byteLength(p, "utf8"));
  });
  out.rows.push({ pre, hf_regexes: regexes, pieces });
}
const dir = path.resolve(here, "../../data/tokenizer");
mkdirSync(dir, { recursive: true });
writeFileSync(path.join(dir, "pretokenize_reference.json"), JSON.stringify(out) + "\n");
console.log(`${out.rows.length} rows x ${texts.length} strings`);
