#include "loadgen/text_gen.h"

#include <iterator>
#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

namespace kvserve::loadgen {
namespace {

constexpr std::string_view kWords[] = {
    "the",      "of",        "and",      "to",        "in",       "is",        "that",
    "for",      "it",        "as",       "was",       "with",     "be",        "by",
    "on",       "not",       "he",       "this",      "are",      "or",        "his",
    "from",     "at",        "which",    "but",       "have",     "an",        "had",
    "they",     "you",       "were",     "their",     "one",      "all",       "we",
    "can",      "her",       "has",      "there",     "been",     "if",        "more",
    "when",     "will",      "would",    "who",       "so",       "no",        "time",
    "people",   "year",      "way",      "day",       "man",      "thing",     "woman",
    "life",     "child",     "world",    "school",    "state",    "family",    "student",
    "group",    "country",   "problem",  "hand",      "part",     "place",     "case",
    "week",     "company",   "system",   "program",   "question", "work",      "government",
    "number",   "night",     "point",    "home",      "water",    "room",      "mother",
    "area",     "money",     "story",    "fact",      "month",    "lot",       "right",
    "study",    "book",      "eye",      "job",       "word",     "business",  "issue",
    "side",     "kind",      "head",     "house",     "service",  "friend",    "father",
    "power",    "hour",      "game",     "line",      "end",      "member",    "law",
    "car",      "city",      "community", "name",     "president", "team",     "minute",
    "idea",     "kid",       "body",     "information", "back",   "parent",    "face",
    "others",   "level",     "office",   "door",      "health",   "person",    "art",
    "war",      "history",   "party",    "result",    "change",   "morning",   "reason",
    "research", "girl",      "guy",      "moment",    "air",      "teacher",   "force",
    "education", "good",     "new",      "first",     "last",     "long",      "great",
    "little",   "own",       "other",    "old",       "big",      "high",      "different",
    "small",    "large",     "next",     "early",     "young",    "important", "few",
    "public",   "bad",       "same",     "able",      "river",    "garden",    "winter",
    "summer",   "music",     "paper",    "light",     "stone",    "market",    "signal",
    "engine",   "memory",    "cache",    "block",     "token",    "model",     "answer",
    "number",   "quiet",     "bright",   "simple",    "careful",  "rapid",     "gentle",
    "open",     "closed",    "north",    "south",     "east",     "west",      "window",
    "bridge",   "forest",    "island",   "valley",    "planet",   "signal",    "letter",
    "table",    "chair",     "road",     "field",     "cloud",    "storm",     "harbor",
    "lamp",     "clock",     "coin",     "thread",    "wheel",    "glass",     "salt",
    "bread",    "apple",     "tiger",    "horse",     "eagle",    "whale",     "violet",
    "amber",    "silver",    "copper"};

std::string JoinWords(const std::vector<int>& words, int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    if (i > 0) text += ' ';
    text += kWords[static_cast<size_t>(words[static_cast<size_t>(i)])];
  }
  return text;
}

}  // namespace

int EstimateTokens(std::string_view text) { return static_cast<int>((text.size() + 3) / 4); }

Result<BuiltText> TextBuilder::Build(Rng& rng, int target_tokens) {
  if (target_tokens <= 0) return BuiltText{};
  std::vector<int> words;
  auto ensure_words = [&](int n) {
    while (static_cast<int>(words.size()) < n) {
      words.push_back(static_cast<int>(rng.UniformInt(0, static_cast<int64_t>(std::size(kWords)) - 1)));
    }
  };
  std::map<int, int> counts;  // words kept -> tokens
  auto count = [&](int n) -> Result<int> {
    if (auto it = counts.find(n); it != counts.end()) return it->second;
    ensure_words(n);
    ++num_counter_calls_;
    KV_ASSIGN_OR_RETURN(int c, counter_(JoinWords(words, n)));
    counts[n] = c;
    return c;
  };
  // NOTE: a secant-style search on the word count: each measurement refines the tokens-per-word
  // ratio; stop at an exact hit, on a repeat, or after a few calls, keeping the closest text.
  int n = std::max(1, static_cast<int>(std::lround(target_tokens / tokens_per_word_)));
  int best_n = -1;
  for (int iter = 0; iter < 8; ++iter) {
    KV_ASSIGN_OR_RETURN(int c, count(n));
    auto better = [&](int cand) {
      if (best_n < 0) return true;
      const int d_new = std::abs(counts[cand] - target_tokens);
      const int d_old = std::abs(counts[best_n] - target_tokens);
      return d_new < d_old || (d_new == d_old && counts[cand] < counts[best_n]);
    };
    if (better(n)) best_n = n;
    if (c == target_tokens) break;
    if (c > 0) tokens_per_word_ = 0.5 * tokens_per_word_ + 0.5 * (static_cast<double>(c) / n);
    int next = n + static_cast<int>(std::lround((target_tokens - c) / tokens_per_word_));
    if (next == n) next = c < target_tokens ? n + 1 : n - 1;
    next = std::max(1, next);
    if (counts.count(next)) {
      // Already measured: step one word toward the target from the best so far, else stop.
      const int step = counts[best_n] < target_tokens ? best_n + 1 : best_n - 1;
      if (step < 1 || counts.count(step)) break;
      next = step;
    }
    n = next;
  }
  ensure_words(best_n);
  return BuiltText{JoinWords(words, best_n), counts[best_n]};
}

}  // namespace kvserve::loadgen
