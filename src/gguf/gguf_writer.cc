// GgufWriter: serializes metadata and tensors as GGUF v3.
#include "gguf/gguf_writer.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

namespace kvserve {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void PadTo(uint64_t alignment) {
    while (out_->size() % alignment != 0) out_->push_back(0);
  }

 private:
  std::vector<uint8_t>* out_;
};

template <typename T>
Status PutInteger(ByteSink& sink, const GgufValue& v, const std::string& key) {
  if constexpr (std::is_signed_v<T>) {
    std::optional<int64_t> i = v.AsInt();
    if (i && *i >= std::numeric_limits<T>::min() && *i <= std::numeric_limits<T>::max()) {
      sink.Put<T>(static_cast<T>(*i));
      return Status::Ok();
    }
  } else {
    std::optional<uint64_t> u = v.AsUint();
    if (u && *u <= std::numeric_limits<T>::max()) {
      sink.Put<T>(static_cast<T>(*u));
      return Status::Ok();
    }
  }
  return InvalidArgument(fmt::format("metadata key '{}': value {} does not fit type {}", key,
                                     v.ToDisplayString(), GgufValueTypeName(v.type)));
}

Status PutValue(ByteSink& sink, const GgufValue& v, const std::string& key) {
  switch (v.type) {
    case GgufValueType::kUint8: return PutInteger<uint8_t>(sink, v, key);
    case GgufValueType::kInt8: return PutInteger<int8_t>(sink, v, key);
    case GgufValueType::kUint16: return PutInteger<uint16_t>(sink, v, key);
    case GgufValueType::kInt16: return PutInteger<int16_t>(sink, v, key);
    case GgufValueType::kUint32: return PutInteger<uint32_t>(sink, v, key);
    case GgufValueType::kInt32: return PutInteger<int32_t>(sink, v, key);
    case GgufValueType::kUint64: return PutInteger<uint64_t>(sink, v, key);
    case GgufValueType::kInt64: return PutInteger<int64_t>(sink, v, key);
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64: {
      std::optional<double> d = v.AsFloat();
      if (!d) break;
      if (v.type == GgufValueType::kFloat32) {
        sink.Put<float>(static_cast<float>(*d));
      } else {
        sink.Put<double>(*d);
      }
      return Status::Ok();
    }
    case GgufValueType::kBool:
      if (std::optional<bool> b = v.AsBool()) {
        sink.Put<uint8_t>(*b ? 1 : 0);
        return Status::Ok();
      }
      break;
    case GgufValueType::kString:
      if (const std::string* s = v.AsString()) {
        sink.PutString(*s);
        return Status::Ok();
      }
      break;
    case GgufValueType::kArray:
      if (const GgufArray* a = v.AsArray()) {
        sink.Put<uint32_t>(static_cast<uint32_t>(a->elem_type));
        sink.Put<uint64_t>(a->items.size());
        for (const GgufValue& item : a->items) {
          if (item.type != a->elem_type) {
            return InvalidArgument(fmt::format("metadata key '{}': array of {} holds a {}", key,
                                               GgufValueTypeName(a->elem_type),
                                               GgufValueTypeName(item.type)));
          }
          KV_RETURN_IF_ERROR(PutValue(sink, item, key));
        }
        return Status::Ok();
      }
      break;
  }
  return InvalidArgument(fmt::format("metadata key '{}': declared type {} does not match its "
                                     "value",
                                     key, GgufValueTypeName(v.type)));
}

GgufValue Scalar(GgufValueType type, decltype(GgufValue::data) data) {
  GgufValue v;
  v.type = type;
  v.data = std::move(data);
  return v;
}

template <typename T, typename Convert>
GgufValue MakeArray(GgufValueType elem, const std::vector<T>& items, Convert convert) {
  auto array = std::make_shared<GgufArray>();
  array->elem_type = elem;
  array->items.reserve(items.size());
  for (const T& item : items) array->items.push_back(Scalar(elem, convert(item)));
  return Scalar(GgufValueType::kArray, std::move(array));
}

}  // namespace

void GgufWriter::Set(std::string key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::SetString(std::string key, std::string v) {
  Set(std::move(key), Scalar(GgufValueType::kString, std::move(v)));
}
void GgufWriter::SetUint32(std::string key, uint32_t v) {
  Set(std::move(key), Scalar(GgufValueType::kUint32, uint64_t{v}));
}
void GgufWriter::SetInt32(std::string key, int32_t v) {
  Set(std::move(key), Scalar(GgufValueType::kInt32, int64_t{v}));
}
void GgufWriter::SetUint64(std::string key, uint64_t v) {
  Set(std::move(key), Scalar(GgufValueType::kUint64, v));
}
void GgufWriter::SetFloat32(std::string key, float v) {
  Set(std::move(key), Scalar(GgufValueType::kFloat32, static_cast<double>(v)));
}
void GgufWriter::SetBool(std::string key, bool v) {
  Set(std::move(key), Scalar(GgufValueType::kBool, v));
}
void GgufWriter::SetStringArray(std::string key, const std::vector<std::string>& v) {
  Set(std::move(key), MakeArray(GgufValueType::kString, v, [](const std::string& s) { return s; }));
}
void GgufWriter::SetFloat32Array(std::string key, const std::vector<float>& v) {
  Set(std::move(key),
      MakeArray(GgufValueType::kFloat32, v, [](float f) { return static_cast<double>(f); }));
}
void GgufWriter::SetInt32Array(std::string key, const std::vector<int32_t>& v) {
  Set(std::move(key), MakeArray(GgufValueType::kInt32, v, [](int32_t i) { return int64_t{i}; }));
}

Status GgufWriter::AddTensor(std::string name, std::vector<int64_t> dims, GgmlType type,
                             std::vector<uint8_t> bytes) {
  for (const Tensor& t : tensors_) {
    if (t.name == name) return InvalidArgument(fmt::format("duplicate tensor name '{}'", name));
  }
  if (dims.empty() || dims.size() > 4) {
    return InvalidArgument(fmt::format("tensor '{}' needs 1..4 dimensions, got {}", name,
                                       dims.size()));
  }
  std::optional<TypeTraits> traits = GetTypeTraits(static_cast<uint32_t>(type));
  if (!traits) return InvalidArgument(fmt::format("tensor '{}' has an unknown type", name));
  int64_t num_elements = 1;
  for (int64_t d : dims) {
    if (d <= 0 || __builtin_mul_overflow(num_elements, d, &num_elements)) {
      return InvalidArgument(fmt::format("tensor '{}' has an invalid shape", name));
    }
  }
  std::optional<uint64_t> row_bytes = RowBytes(type, dims[0]);
  if (!row_bytes) {
    return InvalidArgument(fmt::format("tensor '{}': row length {} is not a multiple of the {} "
                                       "block size {}",
                                       name, dims[0], traits->name, traits->block_elems));
  }
  const uint64_t expected = *row_bytes * static_cast<uint64_t>(num_elements / dims[0]);
  if (bytes.size() != expected) {
    return InvalidArgument(fmt::format("tensor '{}' ({}) needs {} bytes, got {}", name,
                                       traits->name, expected, bytes.size()));
  }
  tensors_.push_back({std::move(name), std::move(dims), type, std::move(bytes)});
  return Status::Ok();
}

Result<std::vector<uint8_t>> GgufWriter::WriteToBytes() const {
  uint64_t alignment = kDefaultAlignment;
  for (const auto& [key, value] : kv_) {
    if (key != "general.alignment") continue;
    std::optional<uint64_t> a = value.AsUint();
    if (!a || *a == 0 || (*a & (*a - 1)) != 0) {
      return InvalidArgument("metadata key 'general.alignment' must be a nonzero power of two");
    }
    alignment = *a;
  }
  std::vector<uint8_t> out;
  ByteSink sink(&out);
  for (char ch : {'G', 'G', 'U', 'F'}) out.push_back(static_cast<uint8_t>(ch));
  sink.Put<uint32_t>(kVersion);
  sink.Put<uint64_t>(tensors_.size());
  sink.Put<uint64_t>(kv_.size());
  for (const auto& [key, value] : kv_) {
    sink.PutString(key);
    sink.Put<uint32_t>(static_cast<uint32_t>(value.type));
    KV_RETURN_IF_ERROR(PutValue(sink, value, key));
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    sink.PutString(t.name);
    sink.Put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.Put<uint64_t>(static_cast<uint64_t>(d));
    sink.Put<uint32_t>(static_cast<uint32_t>(t.type));
    sink.Put<uint64_t>(offset);
    offset += (t.bytes.size() + alignment - 1) / alignment * alignment;
  }
  if (!tensors_.empty()) sink.PadTo(alignment);
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    sink.PadTo(alignment);
  }
  return out;
}

Status GgufWriter::WriteFile(const std::string& path) const {
  KV_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, WriteToBytes());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return IoError(fmt::format("cannot create '{}'", path));
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) return IoError(fmt::format("failed writing '{}'", path));
  return Status::Ok();
}

}  // namespace kvserve
