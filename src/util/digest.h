// Digest256 and Sha256: a strong 256-bit digest (SHA-256, through OpenSSL's libcrypto) for
// identities that must not alias across processes and machines: the weights of a model, a prefix
// cache namespace, the chained key of a KV block. Checksum128: a fast non-cryptographic 128-bit
// checksum (XXH3-128) for detecting corrupted bytes, not for identity.
//
// Thread safety: Sha256 objects are not shared; the functions are reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace kvserve {

struct Digest256 {
  std::array<uint8_t, 32> bytes{};

  std::string Hex() const;
  // Parses 64 lowercase or uppercase hex digits; false (and *out untouched) otherwise.
  static bool FromHex(std::string_view hex, Digest256* out);
  // The first 8 bytes as a little-endian integer (for hash tables; the digest is uniform).
  uint64_t Prefix64() const {
    uint64_t v;
    std::memcpy(&v, bytes.data(), sizeof v);
    return v;
  }
  friend bool operator==(const Digest256&, const Digest256&) = default;
};

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  Sha256& Update(const void* data, size_t size);
  Sha256& Update(std::string_view s) { return Update(s.data(), s.size()); }
  // A value as its little-endian bytes (integers only).
  template <typename T>
  Sha256& UpdateLe(T v) {
    static_assert(std::is_integral_v<T>);
    uint8_t b[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
    return Update(b, sizeof b);
  }
  // A length-prefixed string, so ("ab", "c") and ("a", "bc") differ.
  Sha256& UpdateField(std::string_view s) { return UpdateLe<uint64_t>(s.size()).Update(s); }
  Digest256 Final();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

Digest256 Sha256Of(const void* data, size_t size);

struct Checksum128 {
  uint64_t lo = 0, hi = 0;
  friend bool operator==(const Checksum128&, const Checksum128&) = default;
};
Checksum128 ComputeChecksum128(const void* data, size_t size);

}  // namespace kvserve

template <>
struct std::hash<kvserve::Digest256> {
  size_t operator()(const kvserve::Digest256& d) const { return d.Prefix64(); }
};
