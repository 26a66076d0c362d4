#!/usr/bin/env python3
"""Writes corpus.json: hard strings for the tokenizer conformance test. Edit the lists here and
re-run (python3 make_corpus.py > corpus.json); the JSON is what the test reads.

Left out on purpose, because the reference (JavaScript regexes, Unicode 15.1) and HF/llama.cpp
(Unicode White_Space, PCRE2 with Unicode 14) disagree there: U+0085, U+180E and U+FEFF next to
spaces, and letters added after Unicode 14.
"""
import json

corpus = [
    # Plain English, punctuation, casing.
    "Hello world", "Hello, world!", "hello world", "HELLO WORLD", "The quick brown fox jumps over the lazy dog.",
    "a", "A", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "", "x", ".", "...", "?!",
    "It was the best of times, it was the worst of times.",
    "Once upon a time, there was a little girl named Lily.",
    # Leading / trailing / runs of whitespace.
    " leading space", "trailing space ", "  two leading", "two trailing  ", "   three   inner   ",
    "tab\tseparated\tvalues", "\t\tindented with tabs", "mixed \t \t whitespace", "line1\nline2",
    "line1\n\nline2", "line1\n\n\n\nline2", "para\r\n\r\nCRLF", "ends with newline\n",
    "\n starts with newline", "trailing tabs\t\t", "spaces before newline   \nnext",
    "a \n\n b", "  \n\t  \n  ", "word\u00a0nbsp", "em\u2003space", "ideographic\u3000space",
    # Contractions in both cases.
    "I'm", "you're", "he's", "she'll", "we've", "they'd", "it's", "don't", "can't", "won't",
    "I'M", "YOU'RE", "HE'S", "SHE'LL", "WE'VE", "THEY'D", "DON'T", "I'm sure you'll've done it'd",
    "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "rock'n'roll", "O'Neil's", "''quoted''",
    "\u2019s curly apostrophe", "it\u2019s",
    # Digits of many lengths.
    "0", "7", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
    "3.14159", "1,000,000", "-42", "+1 (555) 010-9999", "2024-01-15T10:30:00Z", "v1.2.3",
    "0x1F600", "1e-9", "99 bottles", "abc123def456", "\u0661\u0662\u0663 arabic digits", "\uff11\uff12 fullwidth",
    "\u2460\u2461 circled", "\u00bd \u00bc fractions",
    # Code.
    "def foo(x):\n    return x * 2\n", "int main() { return 0; }", "for (int i = 0; i < n; ++i) {}",
    "if x == y:\n\tpass", "const f = (a, b) => a + b;", "#include <stdio.h>", "SELECT * FROM t WHERE id = 1;",
    "<div class=\"x\">hi</div>", "{\"key\": [1, 2, 3]}", "a && b || !c", "x->y::z", "// comment\n/* block */",
    "    four spaces", "        eight spaces", "$HOME/.config", "snake_case_name CamelCaseName",
    # URLs, emails, paths.
    "https://example.com/path?query=1&x=y#frag", "http://localhost:8080/v1/chat/completions",
    "user.name+tag@example.co.uk", "C:\\Windows\\System32", "/usr/local/bin/kvserve",
    # Latin with diacritics, precomposed and decomposed (NFC matters for Qwen).
    "caf\u00e9", "cafe\u0301", "na\u00efve r\u00e9sum\u00e9", "nai\u0308ve", "\u00c5ngstr\u00f6m", "\u212bngstr\u00f6m",
    "Stra\u00dfe", "\u0141\u00f3d\u017a", "\u0160\u010de\u0165", "s\u0307\u0323", "q\u0307\u0323", "e\u0301\u0301",
    "\u1e9b\u0323", "\u0041\u030a", "Z\u0351\u036b\u0343\u036a\u0302 zalgo",
    # Many scripts.
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "\u0532\u0561\u0580\u0565\u0582", "\u12a0\u121b\u122d\u129b",
    "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd", "\u1780\u1798\u17d2\u1796\u17bb\u1787\u17b6", "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "T\u00fcrk\u00e7e \u0131\u0130 i\u0307", "\u00c6\u00d8\u00c5 \u00e6\u00f8\u00e5",
    # CJK.
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17\u3067\u3059\u306d\u3002",
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a", "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
    "\u1112\u1161\u11ab\u1100\u1173\u11af jamo", "\u4e2d\u6587English\u6df7\u5408mixed", "\u6f22\u5b57 \u6f22\u5b57  \u6f22\u5b57",
    "\uff21\uff22\uff23 fullwidth latin", "\u3000\u3001\u3002\u300c\u300d",
    # Emoji: single, skin tones, ZWJ sequences, flags, keycaps, variation selectors.
    "\U0001F600", "\U0001F600\U0001F603\U0001F604", "hi \U0001F44B", "\U0001F44B\U0001F3FD",
    "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F469\u200D\U0001F4BB coding",
    "\U0001F1FA\U0001F1F8\U0001F1EF\U0001F1F5\U0001F1E9\U0001F1EA", "\U0001F3F3\uFE0F\u200D\U0001F308",
    "1\uFE0F\u20E3 #\uFE0F\u20E3", "\u2764\uFE0F love", "\u2764", "\U0001F9D1\u200D\U0001F91D\u200D\U0001F9D1",
    "text\U0001F525fire", "\U0001F600 \U0001F600  \U0001F600", "\u2603\u2602\u2601",
    # Symbols and odd characters.
    "\u00a9 \u00ae \u2122", "\u20ac100 \u00a350 \u00a5", "\u2192 \u2190 \u21d2", "\u2200x \u2203y: x \u2264 y",
    "\u200b zero width", "a\u200cb\u200dc", "\u2028line sep", "\u00b5\u03bc", "\ufb01 ligature",
    "\u0000 nul", "\u0007 bell \u001b[0m", "\ufffd replacement", "\U00010348 gothic", "\U0001D11E music",
    # Text that looks like special tokens, whole and partial.
    "<s>", "</s>", "<unk>", "<s>Hello</s>", "a<s>b", " <s> ", "<s><s>", "<|begin_of_text|>", "<|end_of_text|>",
    "<|begin_of_text|>Hello", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<|eot_id|>",
    "<|im_start|>", "<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<|endoftext|>", "<|im_start", "im_start|>", "<|begin_of", "<|", "|>", "< s>", "<s", "s>", "<<s>>",
    "<0x41>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<think>\nhmm\n</think>", "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
    "<|reserved_special_token_5|>", "<|python_tag|>", "\u2581already\u2581escaped", "\u0120G with dot",
    # Longer mixed passages.
    "The year 2023 saw 1,234 papers on LLMs (large language models) \u2014 up 56% from 2022!",
    "Dear Sir/Madam,\n\nI'm writing to inquire about order #12345.\n\nThanks,\nJ. Doe\n",
    "\u00bfQu\u00e9 tal? \u00a1Muy bien! \u00c7a va? Gr\u00fc\u00df Gott! \u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439\u0442\u0435.",
    "    def __init__(self):\n        self.x = 1  # init\n\n\n    async def run(self) -> None: ...",
]

seen = set()
unique = []
for s in corpus:
    if s not in seen:
        seen.add(s)
        unique.append(s)
print(json.dumps(unique, ensure_ascii=False, indent=0))
