#include "prefix/block_record.h"

#include <fmt/format.h>

#include <cstring>

#include "util/check.h"

namespace kvserve {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'B', 'L', 'K', '\r', '\n'};

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

bool SameLayout(const KvLayout& a, const KvLayout& b) {
  return a.num_layers == b.num_layers && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.block_size == b.block_size && a.k_dtype == b.k_dtype &&
         a.v_dtype == b.v_dtype && a.v_from_k == b.v_from_k;
}

}  // namespace

size_t BlockRecordBytes(const KvLayout& layout) {
  return kRecordHeaderBytes + 4 * static_cast<size_t>(layout.block_size) +
         layout.bytes_per_block() + kRecordChecksumBytes;
}

void EncodeBlockRecord(const TreeBlock& b, const KvStorage& kv, std::vector<uint8_t>* out) {
  EncodeUnsealedBlockRecord(b, kv, out);
  SealBlockRecord(*out);
}

void EncodeUnsealedBlockRecord(const TreeBlock& b, const KvStorage& kv,
                               std::vector<uint8_t>* out) {
  const KvLayout& layout = kv.layout();
  KV_CHECK_EQ(static_cast<int>(b.tokens.size()), layout.block_size);
  out->resize(BlockRecordBytes(layout));
  std::memset(out->data(), 0, kRecordHeaderBytes);
  uint8_t* p = out->data();
  std::memcpy(p, kMagic, 8);
  Put32(p + 8, kBlockRecordVersion);
  Put32(p + 12, kRecordHeaderBytes);
  std::memcpy(p + 16, b.root_key.bytes.data(), 32);
  std::memcpy(p + 48, b.key.bytes.data(), 32);
  std::memcpy(p + 80, b.parent_key.bytes.data(), 32);
  Put32(p + 112, static_cast<uint32_t>(layout.block_size));
  Put32(p + 116, static_cast<uint32_t>(layout.num_layers));
  Put32(p + 120, static_cast<uint32_t>(layout.num_kv_heads));
  Put32(p + 124, static_cast<uint32_t>(layout.head_dim));
  p[128] = static_cast<uint8_t>(layout.k_dtype);
  p[129] = static_cast<uint8_t>(layout.v_dtype);
  p[130] = layout.v_from_k ? 1 : 0;
  Put64(p + 136, layout.bytes_per_block());
  uint8_t* t = p + kRecordHeaderBytes;
  for (TokenId tok : b.tokens) {
    Put32(t, static_cast<uint32_t>(tok));
    t += 4;
  }
  kv.ReadBlock(b.block, t);
}

void SealBlockRecord(std::span<uint8_t> record) {
  KV_CHECK_GE(record.size(), kRecordHeaderBytes + kRecordChecksumBytes);
  const size_t body = record.size() - kRecordChecksumBytes;
  const Checksum128 c = ComputeChecksum128(record.data(), body);
  Put64(record.data() + body, c.lo);
  Put64(record.data() + body + 8, c.hi);
}

std::span<const uint8_t> BlockRecordPayload(std::span<const uint8_t> record,
                                            const KvLayout& layout) {
  return record.subspan(kRecordHeaderBytes + 4 * static_cast<size_t>(layout.block_size),
                        layout.bytes_per_block());
}

Result<BlockRecordHeader> ParseBlockRecordHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < kRecordHeaderBytes) {
    return DataLoss(fmt::format("block record of {} bytes is shorter than its header",
                                bytes.size()));
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 8) != 0) return DataLoss("not a kvserve block record (bad magic)");
  if (Get32(p + 8) != kBlockRecordVersion) {
    return DataLoss(fmt::format("block record version {} (this build reads {})", Get32(p + 8),
                                kBlockRecordVersion));
  }
  if (Get32(p + 12) != kRecordHeaderBytes) return DataLoss("block record header size mismatch");
  BlockRecordHeader h;
  std::memcpy(h.root_key.bytes.data(), p + 16, 32);
  std::memcpy(h.key.bytes.data(), p + 48, 32);
  std::memcpy(h.parent_key.bytes.data(), p + 80, 32);
  const uint32_t bs = Get32(p + 112), layers = Get32(p + 116), heads = Get32(p + 120),
                 dim = Get32(p + 124);
  if (bs == 0 || bs > 1024 || layers == 0 || layers > 4096 || heads == 0 || heads > 4096 ||
      dim == 0 || dim > 65536 || p[128] > static_cast<uint8_t>(KvDtype::kInt4) ||
      p[129] > static_cast<uint8_t>(KvDtype::kInt4) || p[130] > 1) {
    return DataLoss("block record layout out of range");
  }
  h.layout.block_size = static_cast<int>(bs);
  h.layout.num_layers = static_cast<int>(layers);
  h.layout.num_kv_heads = static_cast<int>(heads);
  h.layout.head_dim = static_cast<int>(dim);
  h.layout.k_dtype = static_cast<KvDtype>(p[128]);
  h.layout.v_dtype = static_cast<KvDtype>(p[129]);
  h.layout.v_from_k = p[130] == 1;
  h.payload_bytes = Get64(p + 136);
  if (h.payload_bytes != h.layout.bytes_per_block()) {
    return DataLoss("block record payload size does not match its layout");
  }
  return h;
}

Result<std::vector<TokenId>> ParseBlockRecordTokens(const BlockRecordHeader& h,
                                                    std::span<const uint8_t> token_bytes) {
  const size_t n = static_cast<size_t>(h.layout.block_size);
  if (token_bytes.size() < 4 * n) return DataLoss("block record tokens cut short");
  std::vector<TokenId> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<TokenId>(Get32(&token_bytes[4 * i]));
  if (!(ChainKey(h.parent_key, tokens) == h.key)) {
    return DataLoss("block record key is not the chain of its parent and tokens");
  }
  return tokens;
}

Result<std::span<const uint8_t>> VerifyBlockRecord(std::span<const uint8_t> record,
                                                   const BlockKey& key,
                                                   std::span<const TokenId> tokens,
                                                   const KvLayout& layout) {
  KV_ASSIGN_OR_RETURN(const BlockRecordHeader h, ParseBlockRecordHeader(record));
  if (!SameLayout(h.layout, layout)) return DataLoss("block record of another KV layout");
  if (record.size() != BlockRecordBytes(layout)) {
    return DataLoss(fmt::format("block record of {} bytes, expected {} (truncated?)",
                                record.size(), BlockRecordBytes(layout)));
  }
  if (!(h.key == key)) return DataLoss("block record holds another key");
  if (tokens.size() != static_cast<size_t>(layout.block_size)) {
    return DataLoss("block record checked against a partial block");
  }
  const uint8_t* t = record.data() + kRecordHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (Get32(t + 4 * i) != static_cast<uint32_t>(tokens[i])) {
      return DataLoss("block record tokens differ from the prompt's");
    }
  }
  if (!(ChainKey(h.parent_key, tokens) == key)) {
    return DataLoss("block record key is not the chain of its parent and tokens");
  }
  const size_t body = record.size() - kRecordChecksumBytes;
  const Checksum128 c = ComputeChecksum128(record.data(), body);
  if (c.lo != Get64(record.data() + body) || c.hi != Get64(record.data() + body + 8)) {
    return DataLoss("block record checksum mismatch");
  }
  return BlockRecordPayload(record, layout);
}

}  // namespace kvserve
