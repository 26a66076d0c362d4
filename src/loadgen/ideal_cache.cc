#include "loadgen/ideal_cache.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "util/check.h"

namespace kvserve::loadgen {
namespace {

uint64_t Fnv1a(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Hash of the segment chain up to and including `s`, given the chain hash before it.
uint64_t ChainHash(uint64_t before, const Segment& s) {
  uint64_t h = Fnv1a(before ^ (static_cast<uint64_t>(s.role) + 1) * 0x9e3779b97f4a7c15ULL,
                     s.content);
  return Fnv1a(h, "\x1f");
}

}  // namespace

std::vector<int> IdealCachedTokens(const std::vector<SentPrompt>& sent) {
  std::unordered_set<uint64_t> seen;  // chain hashes of every prefix of every earlier prompt
  std::vector<int> ideal(sent.size(), 0);
  for (size_t i = 0; i < sent.size(); ++i) {
    KV_CHECK(sent[i].segments != nullptr, "prompt {} has no segments", i);
    const std::vector<Segment>& segs = *sent[i].segments;
    int total = 0;
    for (const Segment& s : segs) total += s.num_tokens;
    if (sent[i].prompt_tokens >= 0) total = sent[i].prompt_tokens;

    int shared = 0, running = 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    std::vector<uint64_t> chain;
    chain.reserve(segs.size());
    bool matching = true;
    for (const Segment& s : segs) {
      h = ChainHash(h, s);
      chain.push_back(h);
      running += s.num_tokens;
      if (matching && seen.count(h)) {
        shared = running;
      } else {
        matching = false;
      }
    }
    int best = shared;
    const int prev = sent[i].prev;
    if (prev >= 0) {
      KV_CHECK_LT(static_cast<size_t>(prev), i);
      const SentPrompt& p = sent[static_cast<size_t>(prev)];
      if (p.prompt_tokens >= 0 && p.completion_tokens >= 1) {
        best = std::max(best, p.prompt_tokens + p.completion_tokens - 1);
      }
    }
    ideal[i] = std::max(0, std::min(best, total - 1));
    seen.insert(chain.begin(), chain.end());
  }
  return ideal;
}

int RoundDownToBlock(int tokens, int block_size) {
  KV_CHECK_GE(block_size, 1);
  return tokens / block_size * block_size;
}

}  // namespace kvserve::loadgen
