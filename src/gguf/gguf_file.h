// GgufFile: a read-only, validated view of a GGUF file (versions 2 and 3).
//
// Contract: Open() memory-maps the file and validates everything before returning: header,
// every metadata key/value (all value types, nested arrays), tensor infos, alignment, and that
// every tensor's bytes lie inside the file. A corrupt, truncated or hostile file yields a
// DataLoss / InvalidArgument / Unimplemented Status that names the problem (and the key or tensor
// involved); it never crashes or reads out of bounds. After a successful Open() all accessors are
// const and thread-safe. Move-only: the mapping is released when the object dies, so tensor data
// pointers live as long as the GgufFile.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvserve/status.h"
#include "quant/types.h"

namespace kvserve {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType t);

struct GgufArray;

// One metadata value. Integers are widened to int64/uint64 and floats to double in `data`, but
// `type` keeps the type the file stored.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> data;

  // Typed views; nullopt when the stored type does not fit (e.g. negative into unsigned).
  std::optional<uint64_t> AsUint() const;
  std::optional<int64_t> AsInt() const;
  std::optional<double> AsFloat() const;   // any numeric type
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;
  const GgufArray* AsArray() const;
  // Short human-readable rendering ("[32000 strings]" for big arrays), for `kvserve inspect`.
  std::string ToDisplayString(size_t max_items = 8) const;
};

struct GgufArray {
  GgufValueType elem_type = GgufValueType::kUint8;
  std::vector<GgufValue> items;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the fastest-varying (row length)
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;        // relative to the start of the tensor data section
  const uint8_t* data = nullptr;  // into the mapping
  uint64_t size_bytes = 0;
  int64_t num_elements() const;
};

class GgufFile {
 public:
  // With populate, every page of the file is mapped at once (MAP_POPULATE): loading a model
  // then reads its weights up front instead of page-faulting through the first request.
  static Result<GgufFile> Open(const std::string& path, bool populate = false);
  // Parses a file image already in memory; takes ownership of the bytes (used for the embedded
  // default model and the fuzzer).
  static Result<GgufFile> FromBytes(std::vector<uint8_t> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  // Metadata keys in file order (for inspect).
  const std::vector<std::string>& metadata_order() const { return metadata_order_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // Drops the resident pages that lie wholly inside [data, data + bytes) of a mapped file (they
  // are read from the file again if touched); nothing for a file image held in memory.
  void ReleasePages(const uint8_t* data, uint64_t bytes) const;

  const GgufValue* Find(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Typed getters: NotFound if missing, InvalidArgument naming the key if the type is wrong.
  Result<std::string> GetString(std::string_view key) const;
  Result<uint64_t> GetUint(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<double>> GetFloatArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;

 private:
  GgufFile() = default;
  Status Parse();
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<std::string> metadata_order_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace kvserve
