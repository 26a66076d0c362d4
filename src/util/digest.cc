#include "util/digest.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include "util/check.h"

namespace kvserve {
namespace {

const EVP_MD* Sha256Md() {
  static const EVP_MD* md = [] {
    const EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    KV_CHECK(m != nullptr, "libcrypto has no SHA-256");
    return m;
  }();
  return md;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Digest256::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

bool Digest256::FromHex(std::string_view hex, Digest256* out) {
  if (hex.size() != 64) return false;
  Digest256 d;
  for (size_t i = 0; i < 32; ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    d.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  *out = d;
  return true;
}

struct Sha256::Ctx {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  KV_CHECK(ctx_->ctx != nullptr && EVP_DigestInit_ex(ctx_->ctx, Sha256Md(), nullptr) == 1,
           "SHA-256 init failed");
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

Sha256& Sha256::Update(const void* data, size_t size) {
  KV_CHECK(EVP_DigestUpdate(ctx_->ctx, data, size) == 1, "SHA-256 update failed");
  return *this;
}

Digest256 Sha256::Final() {
  Digest256 d;
  unsigned int n = 0;
  KV_CHECK(EVP_DigestFinal_ex(ctx_->ctx, d.bytes.data(), &n) == 1 && n == 32,
           "SHA-256 final failed");
  return d;
}

Digest256 Sha256Of(const void* data, size_t size) { return Sha256().Update(data, size).Final(); }

Checksum128 ComputeChecksum128(const void* data, size_t size) {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  return Checksum128{h.low64, h.high64};
}

}  // namespace kvserve
