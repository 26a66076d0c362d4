#include "gguf/weights_digest.h"

#include <vector>

namespace kvserve {

Digest256 WeightsDigest(const GgufFile& file, ThreadPool& pool) {
  constexpr uint64_t kPieceBytes = 16ull << 20;
  struct Piece {
    const uint8_t* data;
    uint64_t size;
  };
  std::vector<Piece> pieces;
  for (const GgufTensorInfo& t : file.tensors()) {
    for (uint64_t off = 0; off < t.size_bytes; off += kPieceBytes) {
      pieces.push_back(Piece{t.data + off, std::min(kPieceBytes, t.size_bytes - off)});
    }
  }
  std::vector<Digest256> digests(pieces.size());
  pool.ForEach(static_cast<int64_t>(pieces.size()),
               [&](int64_t i) { digests[i] = Sha256Of(pieces[i].data, pieces[i].size); });
  Sha256 h;
  h.Update("kvserve-weights-v1");
  size_t p = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    h.UpdateField(t.name).UpdateLe(static_cast<uint32_t>(t.type)).UpdateLe<uint64_t>(t.dims.size());
    for (int64_t d : t.dims) h.UpdateLe(d);
    h.UpdateLe(t.size_bytes);
    for (uint64_t off = 0; off < t.size_bytes; off += kPieceBytes, ++p) {
      h.Update(digests[p].bytes.data(), digests[p].bytes.size());
    }
  }
  return h.Final();
}

}  // namespace kvserve
