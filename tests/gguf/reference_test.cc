// Reads GGUF files written by another implementation (llama.cpp's gguf-py; see
// tests/data/gguf/README.md) and checks metadata, tensor layout and dequantized values against
// the expectations gguf-py itself computed (its own reader and dequantizer).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "gguf/gguf_file.h"

namespace kvserve {
namespace {

using nlohmann::json;

std::string DataPath(const std::string& name) {
  return std::string(KVSERVE_GGUF_TEST_DATA) + "/" + name;
}

json LoadJson(const std::string& name) {
  std::ifstream in(DataPath(name));
  EXPECT_TRUE(in.good()) << DataPath(name);
  return json::parse(in);
}

std::string Hex(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

void ExpectValueMatches(const GgufValue& v, const json& want, const std::string& where) {
  if (want.is_array()) {
    const GgufArray* a = v.AsArray();
    ASSERT_NE(a, nullptr) << where;
    ASSERT_EQ(a->items.size(), want.size()) << where;
    for (size_t i = 0; i < want.size(); ++i) {
      ExpectValueMatches(a->items[i], want[i], where + "[" + std::to_string(i) + "]");
    }
  } else if (want.is_boolean()) {
    EXPECT_EQ(v.AsBool(), want.get<bool>()) << where;
  } else if (want.is_string()) {
    ASSERT_NE(v.AsString(), nullptr) << where;
    EXPECT_EQ(*v.AsString(), want.get<std::string>()) << where;
  } else if (want.is_number_unsigned()) {
    EXPECT_EQ(v.AsUint(), want.get<uint64_t>()) << where;
  } else if (want.is_number_integer()) {
    EXPECT_EQ(v.AsInt(), want.get<int64_t>()) << where;
  } else {
    ASSERT_TRUE(want.is_number_float()) << where;
    EXPECT_EQ(v.AsFloat(), want.get<double>()) << where;  // float32 widens exactly
  }
}

class GgufPyReference : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufPyReference, MetadataMatches) {
  const json want = LoadJson(GetParam() + ".expected.json");
  Result<GgufFile> f = GgufFile::Open(DataPath(GetParam() + ".gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), want["alignment"].get<uint64_t>());
  EXPECT_EQ(f->metadata_order(), want["key_order"].get<std::vector<std::string>>());
  if (!want.contains("metadata")) return;
  for (const auto& [key, type_and_value] : want["metadata"].items()) {
    const GgufValue* v = f->Find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(GgufValueTypeName(v->type), type_and_value[0].get<std::string>()) << key;
    ExpectValueMatches(*v, type_and_value[1], key);
  }
}

TEST_P(GgufPyReference, TensorsDequantizeLikeGgufPy) {
  const json want = LoadJson(GetParam() + ".expected.json");
  Result<GgufFile> f = GgufFile::Open(DataPath(GetParam() + ".gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), want["tensors"].size());
  const GgufTensorInfo& first = f->tensors()[0];
  const auto first_abs = want["tensors"][0]["absolute_offset"].get<int64_t>();
  for (const json& wt : want["tensors"]) {
    const std::string name = wt["name"].get<std::string>();
    const GgufTensorInfo* t = f->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(Traits(t->type).name, wt["type"].get<std::string>()) << name;
    EXPECT_EQ(t->dims, wt["dims"].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(t->data - first.data, wt["absolute_offset"].get<int64_t>() - first_abs) << name;
    EXPECT_EQ(t->offset % f->alignment(), 0u) << name;

    const int64_t cols = t->dims[0];
    const int64_t rows = t->num_elements() / cols;
    const uint64_t row_bytes = *RowBytes(t->type, cols);
    std::vector<float> row(cols);
    double sum = 0.0;
    double abs_sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t->type, t->data + r * row_bytes, row.data(), cols);
      if (r == 0) {
        const auto first_row = wt["first_row"].get<std::vector<float>>();
        ASSERT_EQ(first_row.size(), row.size());
        for (int64_t i = 0; i < cols; ++i) {
          // gguf-py computes in float32 too; allow for FMA contraction only.
          ASSERT_NEAR(row[i], first_row[i], 1e-6f * std::max(1.0f, std::fabs(first_row[i])))
              << name << " [" << i << "]";
        }
      }
      for (float v : row) {
        sum += v;
        abs_sum += std::fabs(v);
      }
    }
    EXPECT_NEAR(sum, wt["sum"].get<double>(), 1e-5 * (1.0 + abs_sum)) << name;
    EXPECT_NEAR(abs_sum, wt["abs_sum"].get<double>(), 1e-5 * (1.0 + abs_sum)) << name;
  }
}

TEST_P(GgufPyReference, OurQuantizerMatchesGgufPyBytes) {
  // gguf-py implements ggml's reference quantizers; ours must produce the same bytes.
  const json want = LoadJson(GetParam() + ".expected.json");
  for (const json& wt : want["tensors"]) {
    if (!wt.contains("source_first_row")) continue;
    const std::string name = wt["name"].get<std::string>();
    const GgmlType type = *ParseGgmlType(wt["type"].get<std::string>());
    const auto src = wt["source_first_row"].get<std::vector<float>>();
    std::vector<uint8_t> bytes(*RowBytes(type, static_cast<int64_t>(src.size())));
    ASSERT_TRUE(QuantizeRow(type, src.data(), bytes.data(), static_cast<int64_t>(src.size())));
    EXPECT_EQ(Hex(bytes.data(), bytes.size()), wt["first_row_bytes_hex"].get<std::string>())
        << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, GgufPyReference,
                         ::testing::Values("gguf_py_types", "gguf_py_kquants"));

}  // namespace
}  // namespace kvserve
