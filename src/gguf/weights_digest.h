// WeightsDigest: a strong digest of a model's exact weights, so that caches that outlive the
// process (disk, Redis) never mix the KV of two models, even two fine-tunes with the same
// architecture, shapes and name.
//
// NOTE (definition): every tensor's data is cut into 16 MiB pieces; each piece is hashed with
// SHA-256 (in parallel on the pool); the digest is SHA-256 over "kvserve-weights-v1" and, for
// each tensor in file order, its name, type, dimensions, byte size and the digests of its
// pieces. It changes when any weight byte, tensor name, type or shape changes, and is the same
// for the same file on every machine and thread count.
#pragma once

#include "gguf/gguf_file.h"
#include "util/digest.h"
#include "util/thread_pool.h"

namespace kvserve {

Digest256 WeightsDigest(const GgufFile& file, ThreadPool& pool);

}  // namespace kvserve
