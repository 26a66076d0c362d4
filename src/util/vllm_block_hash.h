// vLLM's prefix-caching block hash, computed the way a vLLM-aware router (llm-d's KV-cache
// indexer, NVIDIA Dynamo's KV router) recomputes it from a prompt's token ids, so that the block
// hashes kvserve publishes in its KV events (docs/kv_events.md) match what those routers expect.
//
// NOTE (the scheme, vLLM's `sha256_cbor` with a seeded NONE_HASH): vLLM v1 names each full block
// of block_size tokens by
//     hash(block i) = SHA-256(CBOR([parent, tokens_i, extra_keys_i]))
// where parent is hash(block i-1) as a 32-byte byte string, or NONE_HASH for the first block;
// tokens_i is the block's token ids as an array of integers; extra_keys_i is null for plain text
// (no LoRA, no multimodal input) or an array of extra keys. vLLM puts a request's cache_salt in
// the extra keys of its FIRST block only (the block at token 0), so kvserve's salt does the same:
// extra_keys_0 = [salt] when the salt is non-empty. CBOR is RFC 8949's canonical form as Python's
// cbor2.dumps(obj, canonical=True) writes it (shortest integer heads, definite lengths).
//     NONE_HASH = SHA-256(CBOR(seed)), seed being the PYTHONHASHSEED string (a CBOR text string).
// vLLM draws NONE_HASH at random when PYTHONHASHSEED is unset, so every replica and every router
// of a fleet must be given the same seed; llm-d's indexer calls it `hashSeed` (default "").
//
// NOTE (the form on the wire): a hash travels in KV events either as the 32 bytes or as a 64-bit
// unsigned integer, the low 64 bits of the digest read as a big-endian number (its last 8
// bytes). vLLM sends the integer form by default (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1) and
// llm-d and Dynamo key their indexes by that integer (llm-d folds the byte form to the same 64
// bits), so kvserve sends the integer by default too; VllmHashToU64 gives it.
//
// Thread safety: pure functions, reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

using VllmBlockHash = std::array<uint8_t, 32>;

// NONE_HASH for `seed`: SHA-256 of the CBOR text string `seed`.
VllmBlockHash VllmNoneHash(std::string_view seed);

// The hash of one full block: parent is the previous block's hash, or VllmNoneHash(seed) for
// the first block of a prompt. first_block_salt is non-empty only for the first block of a
// salted prompt (it becomes the block's extra keys [salt]; empty = null extra keys).
VllmBlockHash VllmHashBlock(const VllmBlockHash& parent, std::span<const int32_t> block_tokens,
                            std::string_view first_block_salt = {});

// The hashes of every full block of a prompt that starts at token 0 (a trailing partial block has
// none), chained from none_hash, the salt in the first block's extra keys.
// REQUIRES: block_size >= 1.
std::vector<VllmBlockHash> VllmBlockHashes(std::span<const int32_t> tokens, int block_size,
                                           const VllmBlockHash& none_hash,
                                           std::string_view cache_salt = {});

// The 64-bit integer form: the digest's last 8 bytes, big-endian (vLLM's
// int.from_bytes(digest, "big") & (2**64 - 1)).
uint64_t VllmHashToU64(const VllmBlockHash& h);

// The canonical CBOR encoding of [parent, block_tokens, extra_keys] that VllmHashBlock hashes
// (exposed for tests).
std::vector<uint8_t> VllmBlockCbor(const VllmBlockHash& parent,
                                   std::span<const int32_t> block_tokens,
                                   std::string_view first_block_salt);

std::string VllmHashHex(const VllmBlockHash& h);

}  // namespace kvserve
