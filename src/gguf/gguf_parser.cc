// GgufFile::Parse: validates a GGUF v2/v3 image and builds the metadata map and tensor table.
//
// NOTE: the file is untrusted. Every count or length read from it is checked against the bytes
// that remain BEFORE anything is allocated from it (each item of a kind needs at least a known
// number of bytes, so a count of 2^60 fails at once instead of reserving memory), every offset
// sum is done in uint64 with explicit overflow checks, and nesting of arrays is bounded so a
// hostile file cannot exhaust the stack.
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"

namespace kvserve {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr int kMaxArrayDepth = 16;
constexpr uint32_t kMaxDims = 4;
// Smallest encodings, used to bound counts: key (8-byte length) + type + 1-byte value; tensor
// name length + n_dims + one dim + type + offset.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

bool IsValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// Bytes of one encoded value of type t at the least (strings: their length; arrays: type+count).
uint64_t MinValueBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kString:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kArray: return 12;
  }
  return 1;
}

// Bounds-checked little-endian cursor over the file image.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    KV_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, base_ + pos_, sizeof(T));  // little-endian host (checked in CMake/tests)
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string* out, std::string_view what) {
    uint64_t len = 0;
    KV_RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return DataLoss(fmt::format("{}: string length {} at offset {} exceeds the {} bytes left",
                                  what, len, pos_ - 8, remaining()));
    }
    out->assign(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

 private:
  Status Need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return DataLoss(fmt::format("truncated file: {} needs {} bytes at offset {}, {} left", what,
                                  n, pos_, remaining()));
    }
    return Status::Ok();
  }

  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

template <typename Wire, typename Stored>
Status ReadScalar(Cursor& c, GgufValue* v, const std::string& what) {
  Wire w{};
  KV_RETURN_IF_ERROR(c.Read(&w, what));
  v->data = static_cast<Stored>(w);
  return Status::Ok();
}

Status ReadValue(Cursor& c, GgufValueType type, int depth, const std::string& what,
                 GgufValue* v);

Status ReadArray(Cursor& c, int depth, const std::string& what, GgufValue* v) {
  if (depth >= kMaxArrayDepth) {
    return InvalidArgument(fmt::format("{}: arrays nested deeper than {}", what, kMaxArrayDepth));
  }
  uint32_t raw_elem = 0;
  uint64_t count = 0;
  KV_RETURN_IF_ERROR(c.Read(&raw_elem, what + " (array element type)"));
  if (!IsValueType(raw_elem)) {
    return DataLoss(fmt::format("{}: unknown array element type {}", what, raw_elem));
  }
  KV_RETURN_IF_ERROR(c.Read(&count, what + " (array length)"));
  const auto elem = static_cast<GgufValueType>(raw_elem);
  if (count > c.remaining() / MinValueBytes(elem)) {
    return DataLoss(fmt::format("{}: array of {} {}s cannot fit in the {} bytes left", what, count,
                                GgufValueTypeName(elem), c.remaining()));
  }
  auto array = std::make_shared<GgufArray>();
  array->elem_type = elem;
  array->items.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    KV_RETURN_IF_ERROR(ReadValue(c, elem, depth + 1, what, &array->items[i]));
  }
  v->data = std::move(array);
  return Status::Ok();
}

Status ReadValue(Cursor& c, GgufValueType type, int depth, const std::string& what,
                 GgufValue* v) {
  v->type = type;
  switch (type) {
    case GgufValueType::kUint8: return ReadScalar<uint8_t, uint64_t>(c, v, what);
    case GgufValueType::kInt8: return ReadScalar<int8_t, int64_t>(c, v, what);
    case GgufValueType::kUint16: return ReadScalar<uint16_t, uint64_t>(c, v, what);
    case GgufValueType::kInt16: return ReadScalar<int16_t, int64_t>(c, v, what);
    case GgufValueType::kUint32: return ReadScalar<uint32_t, uint64_t>(c, v, what);
    case GgufValueType::kInt32: return ReadScalar<int32_t, int64_t>(c, v, what);
    case GgufValueType::kUint64: return ReadScalar<uint64_t, uint64_t>(c, v, what);
    case GgufValueType::kInt64: return ReadScalar<int64_t, int64_t>(c, v, what);
    case GgufValueType::kFloat32: return ReadScalar<float, double>(c, v, what);
    case GgufValueType::kFloat64: return ReadScalar<double, double>(c, v, what);
    case GgufValueType::kBool: {
      uint8_t b = 0;
      KV_RETURN_IF_ERROR(c.Read(&b, what));
      if (b > 1) return DataLoss(fmt::format("{}: bool value {} is neither 0 nor 1", what, b));
      v->data = b != 0;
      return Status::Ok();
    }
    case GgufValueType::kString: {
      std::string s;
      KV_RETURN_IF_ERROR(c.ReadString(&s, what));
      v->data = std::move(s);
      return Status::Ok();
    }
    case GgufValueType::kArray: return ReadArray(c, depth, what, v);
  }
  return DataLoss(fmt::format("{}: unknown value type {}", what, static_cast<uint32_t>(type)));
}

Status CheckVersion(uint32_t version) {
  if (version == 2 || version == 3) return Status::Ok();
  if (version == 1) {
    return Unimplemented("GGUF version 1 is not supported: re-convert the model with a current "
                         "converter (GGUF v2 or v3)");
  }
  if ((version & 0xffffu) == 0 && (version >> 16) != 0) {
    return Unimplemented(fmt::format(
        "GGUF version field reads {:#x}: this looks like a big-endian GGUF file, which is not "
        "supported (convert it to little-endian)",
        version));
  }
  return Unimplemented(fmt::format("unsupported GGUF version {} (expected 2 or 3)", version));
}

// Reads one tensor info (not yet placed in the data section).
Status ReadTensorInfo(Cursor& c, uint64_t index, GgufTensorInfo* info) {
  KV_RETURN_IF_ERROR(c.ReadString(&info->name, fmt::format("name of tensor #{}", index)));
  const std::string what = fmt::format("tensor '{}'", info->name);
  uint32_t n_dims = 0;
  KV_RETURN_IF_ERROR(c.Read(&n_dims, what + " n_dims"));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return InvalidArgument(fmt::format("{} has {} dimensions (must be 1..{})", what, n_dims,
                                       kMaxDims));
  }
  int64_t num_elements = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    uint64_t dim = 0;
    KV_RETURN_IF_ERROR(c.Read(&dim, what + " dims"));
    if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument(fmt::format("{} has invalid dimension {} = {}", what, i, dim));
    }
    if (__builtin_mul_overflow(num_elements, static_cast<int64_t>(dim), &num_elements)) {
      return InvalidArgument(fmt::format("{}: element count overflows int64", what));
    }
    info->dims.push_back(static_cast<int64_t>(dim));
  }
  uint32_t raw_type = 0;
  KV_RETURN_IF_ERROR(c.Read(&raw_type, what + " type"));
  std::optional<TypeTraits> traits = GetTypeTraits(raw_type);
  if (!traits.has_value()) {
    return InvalidArgument(fmt::format("{} has unknown ggml type id {}", what, raw_type));
  }
  if (!traits->supported) {
    return Unimplemented(fmt::format("{} has type {} which kvserve cannot load yet "
                                     "(re-quantize the model to a supported type)",
                                     what, traits->name));
  }
  info->type = traits->type;
  if (info->dims[0] % traits->block_elems != 0) {
    return InvalidArgument(fmt::format("{}: row length {} is not a multiple of the {} block size {}",
                                       what, info->dims[0], traits->name, traits->block_elems));
  }
  const auto num_blocks = static_cast<uint64_t>(num_elements / traits->block_elems);
  if (__builtin_mul_overflow(num_blocks, static_cast<uint64_t>(traits->block_bytes),
                             &info->size_bytes)) {
    return InvalidArgument(fmt::format("{}: byte size overflows", what));
  }
  return c.Read(&info->offset, what + " offset");
}

Status ReadMetadata(Cursor& c, uint64_t n_kv, std::map<std::string, GgufValue>* metadata,
                    std::vector<std::string>* order) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    KV_RETURN_IF_ERROR(c.ReadString(&key, fmt::format("key of metadata entry #{}", i)));
    const std::string what = fmt::format("metadata key '{}'", key);
    if (metadata->count(key) != 0) return InvalidArgument("duplicate " + what);
    uint32_t raw_type = 0;
    KV_RETURN_IF_ERROR(c.Read(&raw_type, what + " type"));
    if (!IsValueType(raw_type)) {
      return DataLoss(fmt::format("{} has unknown value type {}", what, raw_type));
    }
    GgufValue value;
    KV_RETURN_IF_ERROR(ReadValue(c, static_cast<GgufValueType>(raw_type), 0, what, &value));
    metadata->emplace(key, std::move(value));
    order->push_back(std::move(key));
  }
  return Status::Ok();
}

Status ReadAlignment(const GgufValue* value, uint64_t* alignment) {
  if (value == nullptr) return Status::Ok();  // keep the default
  std::optional<uint64_t> align = value->AsUint();
  if (!align.has_value() || *align == 0 || (*align & (*align - 1)) != 0) {
    return InvalidArgument(fmt::format(
        "metadata key 'general.alignment' = {} must be a nonzero power of two",
        value->ToDisplayString()));
  }
  *alignment = *align;
  return Status::Ok();
}

// Checks each tensor's offset and extent against the data section (which starts at the first
// multiple of `alignment` at or after `infos_end`) and points its `data` into the image.
Status PlaceTensors(const uint8_t* base, uint64_t size, uint64_t infos_end, uint64_t alignment,
                    std::vector<GgufTensorInfo>* tensors) {
  if (tensors->empty()) return Status::Ok();
  const uint64_t pad = (alignment - infos_end % alignment) % alignment;
  if (pad > size - infos_end) {
    return DataLoss(fmt::format("truncated file: the tensor data section (aligned to {}) starts "
                                "past the end of the {}-byte file",
                                alignment, size));
  }
  const uint64_t data_start = infos_end + pad;
  const uint64_t data_bytes = size - data_start;
  for (GgufTensorInfo& t : *tensors) {
    if (t.offset % alignment != 0) {
      return InvalidArgument(fmt::format("tensor '{}' offset {} is not a multiple of the "
                                         "alignment {}",
                                         t.name, t.offset, alignment));
    }
    if (t.offset > data_bytes || t.size_bytes > data_bytes - t.offset) {
      return DataLoss(fmt::format("tensor '{}' (offset {}, {} bytes) extends past the end of the "
                                  "file's {}-byte data section (truncated file?)",
                                  t.name, t.offset, t.size_bytes, data_bytes));
    }
    t.data = base + data_start + t.offset;
  }
  return Status::Ok();
}

}  // namespace

Status GgufFile::Parse() {
  Cursor c(base_, size_);
  if (size_ < sizeof(kMagic) || std::memcmp(base_, kMagic, sizeof(kMagic)) != 0) {
    return DataLoss("not a GGUF file: missing 'GGUF' magic at offset 0");
  }
  uint32_t magic = 0;
  KV_RETURN_IF_ERROR(c.Read(&magic, "magic"));
  KV_RETURN_IF_ERROR(c.Read(&version_, "version"));
  KV_RETURN_IF_ERROR(CheckVersion(version_));
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  KV_RETURN_IF_ERROR(c.Read(&n_tensors, "tensor count"));
  KV_RETURN_IF_ERROR(c.Read(&n_kv, "metadata count"));
  if (n_kv > c.remaining() / kMinKvBytes) {
    return DataLoss(fmt::format("metadata count {} cannot fit in the {} bytes left", n_kv,
                                c.remaining()));
  }
  if (n_tensors > c.remaining() / kMinTensorInfoBytes) {
    return DataLoss(fmt::format("tensor count {} cannot fit in the {} bytes left", n_tensors,
                                c.remaining()));
  }
  KV_RETURN_IF_ERROR(ReadMetadata(c, n_kv, &metadata_, &metadata_order_));
  KV_RETURN_IF_ERROR(ReadAlignment(Find("general.alignment"), &alignment_));
  tensors_.resize(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    KV_RETURN_IF_ERROR(ReadTensorInfo(c, i, &tensors_[i]));
    if (!tensor_index_.emplace(tensors_[i].name, i).second) {
      return InvalidArgument(fmt::format("duplicate tensor name '{}'", tensors_[i].name));
    }
  }
  return PlaceTensors(base_, size_, c.pos(), alignment_, &tensors_);
}

}  // namespace kvserve
