// GgufValue typed views and display rendering; GGUF value type names.
#include <fmt/format.h>

#include <limits>
#include <string>

#include "gguf/gguf_file.h"

namespace kvserve {
namespace {

constexpr size_t kMaxDisplayStringChars = 100;

std::string QuoteForDisplay(const std::string& s) {
  std::string out = "\"";
  const size_t shown = std::min(s.size(), kMaxDisplayStringChars);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  if (shown < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

std::optional<uint64_t> GgufValue::AsUint() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data); i != nullptr && *i >= 0) {
    return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&data);
      u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<double> GgufValue::AsFloat() const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::AsString() const { return std::get_if<std::string>(&data); }

const GgufArray* GgufValue::AsArray() const {
  const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&data);
  return a != nullptr ? a->get() : nullptr;
}

std::string GgufValue::ToDisplayString(size_t max_items) const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return fmt::format("{}", *u);
  if (const auto* i = std::get_if<int64_t>(&data)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&data)) {
    // float32 values were widened: print them at float precision ("0.1", not "0.10000000149").
    if (type == GgufValueType::kFloat32) return fmt::format("{}", static_cast<float>(*d));
    return fmt::format("{}", *d);
  }
  if (const auto* b = std::get_if<bool>(&data)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&data)) return QuoteForDisplay(*s);
  const GgufArray* array = AsArray();
  if (array == nullptr) return "[]";
  if (array->items.size() > max_items) {
    return fmt::format("[{} {}s]", array->items.size(), GgufValueTypeName(array->elem_type));
  }
  std::string out = "[";
  for (size_t k = 0; k < array->items.size(); ++k) {
    if (k > 0) out += ", ";
    out += array->items[k].ToDisplayString(max_items);
  }
  return out + "]";
}

}  // namespace kvserve
