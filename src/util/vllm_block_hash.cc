// vLLM's block hash (vllm_block_hash.h): a minimal canonical CBOR writer for the few forms the
// hash input holds (arrays, integers, byte and text strings, null) and SHA-256 over it.
#include "util/vllm_block_hash.h"

#include "util/check.h"
#include "util/digest.h"

namespace kvserve {
namespace {

// CBOR major types (RFC 8949 §3.1).
constexpr uint8_t kUnsigned = 0, kNegative = 1, kBytes = 2, kText = 3, kArray = 4;
constexpr uint8_t kNull = 0xf6;

// A data item's head: the major type and its argument in the shortest form (canonical CBOR).
void PutHead(std::vector<uint8_t>* out, uint8_t major, uint64_t arg) {
  const uint8_t m = static_cast<uint8_t>(major << 5);
  int bytes = 0;
  if (arg < 24) {
    out->push_back(static_cast<uint8_t>(m | arg));
    return;
  } else if (arg <= 0xff) {
    out->push_back(m | 24);
    bytes = 1;
  } else if (arg <= 0xffff) {
    out->push_back(m | 25);
    bytes = 2;
  } else if (arg <= 0xffffffffull) {
    out->push_back(m | 26);
    bytes = 4;
  } else {
    out->push_back(m | 27);
    bytes = 8;
  }
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<uint8_t>(arg >> (8 * i)));
}

void PutInt(std::vector<uint8_t>* out, int64_t v) {
  // A negative n is major type 1 with argument -1 - n.
  if (v >= 0) {
    PutHead(out, kUnsigned, static_cast<uint64_t>(v));
  } else {
    PutHead(out, kNegative, static_cast<uint64_t>(-(v + 1)));
  }
}

void PutBytes(std::vector<uint8_t>* out, uint8_t major, const void* data, size_t size) {
  PutHead(out, major, size);
  const auto* p = static_cast<const uint8_t*>(data);
  out->insert(out->end(), p, p + size);
}

VllmBlockHash Sha256Bytes(const std::vector<uint8_t>& bytes) {
  const Digest256 d = Sha256Of(bytes.data(), bytes.size());
  return d.bytes;
}

}  // namespace

VllmBlockHash VllmNoneHash(std::string_view seed) {
  std::vector<uint8_t> cbor;
  PutBytes(&cbor, kText, seed.data(), seed.size());
  return Sha256Bytes(cbor);
}

std::vector<uint8_t> VllmBlockCbor(const VllmBlockHash& parent,
                                   std::span<const int32_t> block_tokens,
                                   std::string_view first_block_salt) {
  std::vector<uint8_t> out;
  out.reserve(48 + block_tokens.size() * 5 + first_block_salt.size());
  PutHead(&out, kArray, 3);
  PutBytes(&out, kBytes, parent.data(), parent.size());
  PutHead(&out, kArray, block_tokens.size());
  for (int32_t t : block_tokens) PutInt(&out, t);
  if (first_block_salt.empty()) {
    out.push_back(kNull);
  } else {
    PutHead(&out, kArray, 1);
    PutBytes(&out, kText, first_block_salt.data(), first_block_salt.size());
  }
  return out;
}

VllmBlockHash VllmHashBlock(const VllmBlockHash& parent, std::span<const int32_t> block_tokens,
                            std::string_view first_block_salt) {
  return Sha256Bytes(VllmBlockCbor(parent, block_tokens, first_block_salt));
}

std::vector<VllmBlockHash> VllmBlockHashes(std::span<const int32_t> tokens, int block_size,
                                           const VllmBlockHash& none_hash,
                                           std::string_view cache_salt) {
  KV_CHECK(block_size >= 1, "block size {} must be at least 1", block_size);
  const size_t bs = static_cast<size_t>(block_size);
  std::vector<VllmBlockHash> out;
  out.reserve(tokens.size() / bs);
  VllmBlockHash parent = none_hash;
  for (size_t start = 0; start + bs <= tokens.size(); start += bs) {
    parent = VllmHashBlock(parent, tokens.subspan(start, bs), start == 0 ? cache_salt : "");
    out.push_back(parent);
  }
  return out;
}

uint64_t VllmHashToU64(const VllmBlockHash& h) {
  uint64_t v = 0;
  for (size_t i = h.size() - 8; i < h.size(); ++i) v = (v << 8) | h[i];
  return v;
}

std::string VllmHashHex(const VllmBlockHash& h) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : h) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

}  // namespace kvserve
