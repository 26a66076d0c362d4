// GgufWriter -> GgufFile round trips: every metadata value type (nested arrays included), every
// supported tensor type, alignment, getters and display strings.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <random>
#include <string>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace kvserve {
namespace {

using VT = GgufValueType;

GgufValue V(VT type, decltype(GgufValue::data) data) {
  GgufValue v;
  v.type = type;
  v.data = std::move(data);
  return v;
}

GgufValue Arr(VT elem, std::vector<GgufValue> items) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = elem;
  a->items = std::move(items);
  return V(VT::kArray, std::move(a));
}

// Structural equality of two values, including the stored type of every nested item.
void ExpectSameValue(const GgufValue& want, const GgufValue& got, const std::string& where) {
  ASSERT_EQ(want.type, got.type) << where;
  if (want.type != VT::kArray) {
    EXPECT_EQ(want.data, got.data) << where << " want " << want.ToDisplayString() << " got "
                                   << got.ToDisplayString();
    return;
  }
  const GgufArray* a = want.AsArray();
  const GgufArray* b = got.AsArray();
  ASSERT_NE(b, nullptr) << where;
  ASSERT_EQ(a->elem_type, b->elem_type) << where;
  ASSERT_EQ(a->items.size(), b->items.size()) << where;
  for (size_t i = 0; i < a->items.size(); ++i) {
    ExpectSameValue(a->items[i], b->items[i], where + "[" + std::to_string(i) + "]");
  }
}

std::vector<std::pair<std::string, GgufValue>> EveryValueType() {
  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"t.u8", V(VT::kUint8, uint64_t{255})},
      {"t.i8", V(VT::kInt8, int64_t{-128})},
      {"t.u16", V(VT::kUint16, uint64_t{65535})},
      {"t.i16", V(VT::kInt16, int64_t{-32768})},
      {"t.u32", V(VT::kUint32, uint64_t{4294967295u})},
      {"t.i32", V(VT::kInt32, int64_t{-2147483647 - 1})},
      {"t.u64", V(VT::kUint64, std::numeric_limits<uint64_t>::max())},
      {"t.i64", V(VT::kInt64, std::numeric_limits<int64_t>::min())},
      {"t.f32", V(VT::kFloat32, double{0.25f})},
      {"t.f64", V(VT::kFloat64, 1e-300)},
      {"t.bool", V(VT::kBool, true)},
      {"t.string", V(VT::kString, std::string("hé\0llo", 7))},
      {"t.empty_string", V(VT::kString, std::string())},
      {"t.empty_array", Arr(VT::kInt32, {})},
      {"t.arr_u16", Arr(VT::kUint16, {V(VT::kUint16, uint64_t{1}), V(VT::kUint16, uint64_t{2})})},
      {"t.arr_f64", Arr(VT::kFloat64, {V(VT::kFloat64, -0.5)})},
      {"t.arr_bool", Arr(VT::kBool, {V(VT::kBool, false), V(VT::kBool, true)})},
      {"t.arr_str", Arr(VT::kString, {V(VT::kString, std::string("a")),
                                      V(VT::kString, std::string())})},
      {"t.arr_arr", Arr(VT::kArray, {Arr(VT::kInt32, {V(VT::kInt32, int64_t{-1})}),
                                     Arr(VT::kInt32, {})})},
      {"t.arr_arr_arr",
       Arr(VT::kArray, {Arr(VT::kArray, {Arr(VT::kString, {V(VT::kString, std::string("x"))})})})},
  };
  for (VT t : {VT::kUint8, VT::kInt8, VT::kUint32, VT::kInt64, VT::kUint64, VT::kInt16,
               VT::kInt32, VT::kFloat32}) {
    const bool is_float = t == VT::kFloat32;
    const bool is_signed = t == VT::kInt8 || t == VT::kInt16 || t == VT::kInt32 || t == VT::kInt64;
    std::vector<GgufValue> items;
    for (int i = 0; i < 3; ++i) {
      if (is_float) {
        items.push_back(V(t, double{i + 0.5}));
      } else if (is_signed) {
        items.push_back(V(t, int64_t{-i * 7}));
      } else {
        items.push_back(V(t, uint64_t(i * 7)));
      }
    }
    kv.push_back({"t.arr_" + std::string(GgufValueTypeName(t)), Arr(t, std::move(items))});
  }
  return kv;
}

GgufFile ReadBack(const GgufWriter& w) {
  Result<std::vector<uint8_t>> bytes = w.WriteToBytes();
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  Result<GgufFile> f = GgufFile::FromBytes(std::move(bytes).value());
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

TEST(GgufRoundTrip, EveryValueTypeIncludingNestedArrays) {
  GgufWriter w;
  const auto kv = EveryValueType();
  for (const auto& [k, v] : kv) w.Set(k, v);
  const GgufFile f = ReadBack(w);
  EXPECT_EQ(f.version(), 3u);
  ASSERT_EQ(f.metadata_order().size(), kv.size());
  for (size_t i = 0; i < kv.size(); ++i) {
    EXPECT_EQ(f.metadata_order()[i], kv[i].first);  // insertion order preserved
    const GgufValue* got = f.Find(kv[i].first);
    ASSERT_NE(got, nullptr) << kv[i].first;
    ExpectSameValue(kv[i].second, *got, kv[i].first);
  }
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufRoundTrip, SettingAKeyTwiceKeepsItsFirstPosition) {
  GgufWriter w;
  w.SetUint32("a", 1);
  w.SetString("b", "x");
  w.SetUint32("a", 2);
  const GgufFile f = ReadBack(w);
  EXPECT_EQ(f.metadata_order(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(*f.GetUint("a"), 2u);
}

TEST(GgufRoundTrip, TypedSettersAndGetters) {
  GgufWriter w;
  w.SetString("s", "llama");
  w.SetUint32("u32", 7);
  w.SetInt32("neg", -3);
  w.SetInt32("pos", 5);
  w.SetUint64("u64", uint64_t{1} << 63);
  w.SetFloat32("f", 1.5f);
  w.SetBool("b", true);
  w.SetStringArray("sa", {"a", "bb"});
  w.SetFloat32Array("fa", {0.5f, -2.0f});
  w.SetInt32Array("ia", {1, -1});
  const GgufFile f = ReadBack(w);
  EXPECT_EQ(*f.GetString("s"), "llama");
  EXPECT_EQ(*f.GetUint("u32"), 7u);
  EXPECT_EQ(*f.GetUint("pos"), 5u);  // non-negative signed is fine for GetUint
  EXPECT_EQ(f.GetUint("neg").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*f.GetInt("neg"), -3);
  EXPECT_EQ(*f.GetInt("u32"), 7);
  EXPECT_EQ(f.GetInt("u64").status().code(), StatusCode::kInvalidArgument);  // > INT64_MAX
  EXPECT_EQ(*f.GetUint("u64"), uint64_t{1} << 63);
  EXPECT_EQ(*f.GetFloat("f"), 1.5);
  EXPECT_EQ(*f.GetFloat("u32"), 7.0);  // any numeric type
  EXPECT_EQ(*f.GetBool("b"), true);
  EXPECT_EQ(f.GetBool("u32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*f.GetStringArray("sa"), (std::vector<std::string>{"a", "bb"}));
  EXPECT_EQ(*f.GetFloatArray("fa"), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(*f.GetFloatArray("ia"), (std::vector<double>{1.0, -1.0}));
  EXPECT_EQ(*f.GetIntArray("ia"), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(f.GetIntArray("sa").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetStringArray("s").status().code(), StatusCode::kInvalidArgument);

  const Status missing = f.GetString("nope").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("nope"), std::string::npos);
  const Status wrong = f.GetString("u32").status();
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("'u32'"), std::string::npos) << wrong.message();
  EXPECT_NE(wrong.message().find("uint32"), std::string::npos) << wrong.message();
}

TEST(GgufRoundTrip, DisplayStrings) {
  EXPECT_EQ(V(VT::kUint32, uint64_t{42}).ToDisplayString(), "42");
  EXPECT_EQ(V(VT::kInt8, int64_t{-5}).ToDisplayString(), "-5");
  EXPECT_EQ(V(VT::kFloat32, double{0.1f}).ToDisplayString(), "0.1");
  EXPECT_EQ(V(VT::kBool, false).ToDisplayString(), "false");
  EXPECT_EQ(V(VT::kString, std::string("a\"b\n")).ToDisplayString(), "\"a\\\"b\\n\"");
  EXPECT_EQ(Arr(VT::kInt32, {V(VT::kInt32, int64_t{1}), V(VT::kInt32, int64_t{2})})
                .ToDisplayString(),
            "[1, 2]");
  std::vector<GgufValue> many(32000, V(VT::kString, std::string("t")));
  EXPECT_EQ(Arr(VT::kString, many).ToDisplayString(), "[32000 strings]");
  EXPECT_EQ(Arr(VT::kArray, {Arr(VT::kInt32, {V(VT::kInt32, int64_t{3})})}).ToDisplayString(),
            "[[3]]");
  const std::string long_string(500, 'x');
  EXPECT_LT(V(VT::kString, long_string).ToDisplayString().size(), 130u);
}

// Bytes for n elements of `type`: quantized random data where we can quantize, else random bytes
// with a sane f32 scale (Q8_K).
std::vector<uint8_t> TensorBytes(GgmlType type, int64_t n, std::mt19937* rng) {
  std::vector<uint8_t> bytes(*RowBytes(type, n));
  if (CanQuantize(type)) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(n);
    for (float& v : x) v = u(*rng);
    EXPECT_TRUE(QuantizeRow(type, x.data(), bytes.data(), n));
  } else {
    for (uint8_t& b : bytes) b = static_cast<uint8_t>((*rng)() & 0x3f);
  }
  return bytes;
}

TEST(GgufRoundTrip, EverySupportedTensorTypeAligned) {
  std::mt19937 rng(5);
  GgufWriter w;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> expected;
  for (uint32_t id = 0; id < 40; ++id) {
    std::optional<TypeTraits> t = GetTypeTraits(id);
    if (!t || !t->supported) continue;
    const std::vector<int64_t> dims = {t->block_elems == 1 ? 3 : t->block_elems * 2, 2, 1};
    std::vector<uint8_t> bytes = TensorBytes(t->type, dims[0] * 2, &rng);
    const std::string name = "tensor." + std::string(t->name);
    expected.emplace_back(name, bytes);
    ASSERT_TRUE(w.AddTensor(name, dims, t->type, bytes).ok()) << name;
  }
  const GgufFile f = ReadBack(w);
  ASSERT_EQ(f.tensors().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const GgufTensorInfo& info = f.tensors()[i];
    EXPECT_EQ(info.name, expected[i].first);
    EXPECT_EQ(f.FindTensor(info.name), &info);
    EXPECT_EQ(info.dims.size(), 3u);
    EXPECT_EQ(info.offset % 32, 0u) << info.name;
    ASSERT_EQ(info.size_bytes, expected[i].second.size());
    EXPECT_EQ(std::vector<uint8_t>(info.data, info.data + info.size_bytes), expected[i].second);
    // Dequantizing what we read equals dequantizing what we wrote.
    std::vector<float> a(info.dims[0]), b(info.dims[0]);
    DequantizeRow(info.type, info.data, a.data(), info.dims[0]);
    DequantizeRow(info.type, expected[i].second.data(), b.data(), info.dims[0]);
    EXPECT_EQ(a, b) << info.name;
  }
  EXPECT_EQ(f.FindTensor("missing"), nullptr);
}

TEST(GgufRoundTrip, HonoursGeneralAlignment) {
  GgufWriter w;
  w.SetUint32("general.alignment", 256);
  ASSERT_TRUE(w.AddTensor("a", {3}, GgmlType::kF32, std::vector<uint8_t>(12, 1)).ok());
  ASSERT_TRUE(w.AddTensor("b", {5}, GgmlType::kF32, std::vector<uint8_t>(20, 2)).ok());
  const GgufFile f = ReadBack(w);
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.tensors()[0].offset, 0u);
  EXPECT_EQ(f.tensors()[1].offset, 256u);
  // The data section itself starts aligned in the file.
  EXPECT_EQ((f.tensors()[0].data - f.tensors()[1].data) % 256, 0);

  GgufWriter bad;
  bad.SetUint32("general.alignment", 48);
  EXPECT_EQ(bad.WriteToBytes().status().code(), StatusCode::kInvalidArgument);
}

TEST(GgufWriter, RejectsInvalidTensors) {
  GgufWriter w;
  EXPECT_FALSE(w.AddTensor("x", {32}, GgmlType::kQ8_0, std::vector<uint8_t>(33)).ok());
  EXPECT_FALSE(w.AddTensor("x", {16}, GgmlType::kQ8_0, std::vector<uint8_t>(17)).ok());
  EXPECT_FALSE(w.AddTensor("x", {}, GgmlType::kF32, {}).ok());
  EXPECT_FALSE(w.AddTensor("x", {1, 1, 1, 1, 1}, GgmlType::kF32, std::vector<uint8_t>(4)).ok());
  EXPECT_FALSE(w.AddTensor("x", {0}, GgmlType::kF32, {}).ok());
  EXPECT_TRUE(w.AddTensor("x", {1}, GgmlType::kF32, std::vector<uint8_t>(4)).ok());
  EXPECT_FALSE(w.AddTensor("x", {1}, GgmlType::kF32, std::vector<uint8_t>(4)).ok());  // dup
  w.Set("bad", V(VT::kUint8, uint64_t{300}));  // does not fit uint8
  EXPECT_EQ(w.WriteToBytes().status().code(), StatusCode::kInvalidArgument);
}

TEST(GgufRoundTrip, UnsupportedTensorTypeIsUnimplementedNamingTensorAndType) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("blk.0.ffn_up.weight", {256}, GgmlType::kQ2_K,
                          std::vector<uint8_t>(84)).ok());
  Result<GgufFile> f = GgufFile::FromBytes(*w.WriteToBytes());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(f.status().message().find("blk.0.ffn_up.weight"), std::string::npos);
  EXPECT_NE(f.status().message().find("Q2_K"), std::string::npos) << f.status().message();
}

TEST(GgufFileOpen, MapsAFileAndKeepsDataAliveAcrossMoves) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  std::vector<uint8_t> payload(64);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(w.AddTensor("t", {16}, GgmlType::kF32, payload).ok());
  const std::string path = ::testing::TempDir() + "/kvserve_gguf_open_test.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  Result<GgufFile> opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  GgufFile moved = std::move(opened).value();
  GgufFile target = std::move(moved);
  EXPECT_EQ(*target.GetString("general.architecture"), "llama");
  const GgufTensorInfo* t = target.FindTensor("t");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->size_bytes), payload);
  EXPECT_EQ(t->num_elements(), 16);
  EXPECT_EQ(target.file_size(), w.WriteToBytes()->size());
  std::remove(path.c_str());

  Result<GgufFile> missing = GgufFile::Open(path);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace kvserve
