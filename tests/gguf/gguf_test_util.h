// Helpers for assembling GGUF images byte by byte in tests (hostile and hand-written files).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kvserve::testing_util {

class ByteBuilder {
 public:
  template <typename T>
  ByteBuilder& Put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  ByteBuilder& U8(uint8_t v) { return Put(v); }
  ByteBuilder& U32(uint32_t v) { return Put(v); }
  ByteBuilder& U64(uint64_t v) { return Put(v); }
  ByteBuilder& Str(const std::string& s) {
    U64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuilder& Raw(const std::vector<uint8_t>& b) {
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  ByteBuilder& PadTo(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
  }
  // "GGUF", version, tensor count, kv count.
  ByteBuilder& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    for (char c : {'G', 'G', 'U', 'F'}) bytes_.push_back(static_cast<uint8_t>(c));
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  // A tensor info: name, dims, type id, offset.
  ByteBuilder& TensorInfo(const std::string& name, const std::vector<uint64_t>& dims,
                          uint32_t type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    return U32(type).U64(offset);
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace kvserve::testing_util
