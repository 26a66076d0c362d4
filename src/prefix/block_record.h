// Block records: the self-describing bytes a lower cache tier (disk file, Redis value) stores for
// one full KV block. The same record everywhere, little-endian:
//
//   offset  size  field
//   0       8     magic "KVSBLK\r\n"
//   8       4     format version (kBlockRecordVersion)
//   12      4     header bytes (kRecordHeaderBytes: where the tokens start)
//   16      32    root key: RootKey of the namespace (model weights digest, dtypes, salt, ...)
//   48      32    key: the block's chained key (block_key.h)
//   80      32    parent key: the previous block's key (the root key for a first block)
//   112     4+4+4+4  block_size, num_layers, num_kv_heads, head_dim
//   128     1+1+1+1  k dtype, v dtype (KvDtype numbers), layout flags (bit 0: latent, values
//                    read from the keys: KvLayout::v_from_k), zero
//   132     4     zero
//   136     8     payload bytes
//   144     4*block_size  token ids (int32)
//   ...     payload: KvStorage::ReadBlock's flat order
//   end-16  16    checksum: XXH3-128 (low, high) of every byte before it
//
// NOTE (verification): a record is served only when its magic, version, layout, key, parent key
// chain (ChainKey(parent, tokens) == key), tokens (equal to the tokens the request needs) and
// checksum all match. Anything else is a miss that the caller counts as corrupt and deletes:
// a wrong block is never served.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_storage.h"
#include "kvserve/status.h"
#include "prefix/block_key.h"
#include "prefix/block_listener.h"

namespace kvserve {

inline constexpr uint32_t kBlockRecordVersion = 1;
inline constexpr size_t kRecordHeaderBytes = 144;
inline constexpr size_t kRecordChecksumBytes = 16;

struct BlockRecordHeader {
  BlockKey root_key, key, parent_key;
  KvLayout layout;  // num_layers, num_kv_heads, head_dim, block_size, dtypes
  uint64_t payload_bytes = 0;
};

// Total bytes of the record of one block of `layout`.
size_t BlockRecordBytes(const KvLayout& layout);
// Encodes `b` with its K/V read from `kv` into *out (resized): EncodeUnsealed then Seal.
void EncodeBlockRecord(const TreeBlock& b, const KvStorage& kv, std::vector<uint8_t>* out);
// Everything but the checksum (the engine thread's part: a copy of the bytes).
void EncodeUnsealedBlockRecord(const TreeBlock& b, const KvStorage& kv,
                               std::vector<uint8_t>* out);
// Writes the checksum of an unsealed record (an I/O thread's part).
void SealBlockRecord(std::span<uint8_t> record);
// The payload of a verified record of `layout`.
std::span<const uint8_t> BlockRecordPayload(std::span<const uint8_t> record,
                                            const KvLayout& layout);
// Parses and checks the fixed header alone (magic, version, sizes): what a directory rebuild
// reads. DataLoss naming the problem otherwise. REQUIRES nothing of bytes' length.
Result<BlockRecordHeader> ParseBlockRecordHeader(std::span<const uint8_t> bytes);
// The token ids of a record whose header is `h`, from the bytes that follow that header (at
// least 4 * block_size), checked to chain from the header's parent key to its key: what a
// restarted tier needs to name a record without reading its payload. DataLoss otherwise.
Result<std::vector<TokenId>> ParseBlockRecordTokens(const BlockRecordHeader& h,
                                                    std::span<const uint8_t> token_bytes);
// Full verification (see the NOTE) of `record` as the block `key` holding `tokens` in `layout`.
// On success returns the payload (a view into record).
Result<std::span<const uint8_t>> VerifyBlockRecord(std::span<const uint8_t> record,
                                                   const BlockKey& key,
                                                   std::span<const TokenId> tokens,
                                                   const KvLayout& layout);

}  // namespace kvserve
