// GgufWriter: builds a GGUF v3 file (metadata in insertion order, tensors aligned to
// `general.alignment`, default 32). Not thread-safe; build then write once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "kvserve/status.h"
#include "quant/types.h"

namespace kvserve {

class GgufWriter {
 public:
  // Setting a key twice replaces the value, keeping its first position.
  void Set(std::string key, GgufValue value);
  void SetString(std::string key, std::string v);
  void SetUint32(std::string key, uint32_t v);
  void SetInt32(std::string key, int32_t v);
  void SetUint64(std::string key, uint64_t v);
  void SetFloat32(std::string key, float v);
  void SetBool(std::string key, bool v);
  void SetStringArray(std::string key, const std::vector<std::string>& v);
  void SetFloat32Array(std::string key, const std::vector<float>& v);
  void SetInt32Array(std::string key, const std::vector<int32_t>& v);

  // dims in GGUF order (dims[0] fastest). `bytes` must hold exactly the tensor's size for `type`.
  Status AddTensor(std::string name, std::vector<int64_t> dims, GgmlType type,
                   std::vector<uint8_t> bytes);

  Result<std::vector<uint8_t>> WriteToBytes() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    std::vector<uint8_t> bytes;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvserve
