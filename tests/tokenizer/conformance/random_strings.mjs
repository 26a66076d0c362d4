// The conformance corpus's random part, shared by the conformance test and the generator of the
// pre-tokenizer reference splits (same seed, same pieces, so both see the same strings).

// Deterministic random strings glued from pieces that stress the pre-tokenizers and merges.
export function randomStrings(count) {
  const pieces = [
    "a", "Z", "the", " The", "ing", "'s", "'LL", "'", "0", "12", "345", "6789", " ", "  ", "\t", "\n",
    "\n\n", "\r\n", ".", ",", "!?", "...", "-", "_", "(", ")", "{", "}", "<", ">", "|", "<s>", "</s>",
    "<|im_start|>", "<|eot_id|>", "<|", "|>", "é", "e\u0301", "ß", "İ", "ı", "Ж", "ж", "λ", "ש", "ب",
    "न", "ि", "ก", "中", "文", "日本", "한", "\u1100\u1161", "😀", "👋🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "\u200d",
    "\u00a0", "\u3000", "\u2581", "ﬁ", "½", "①", "٣", "\\", "\"", "`", "$", "#", "@", "http://", ".com",
  ];
  let state = 12345;
  const next = (n) => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state % n;
  };
  const out = [];
  for (let i = 0; i < count; ++i) {
    let s = "";
    const len = 1 + next(12);
    for (let j = 0; j < len; ++j) s += pieces[next(pieces.length)];
    out.push(s);
  }
  return out;
}
