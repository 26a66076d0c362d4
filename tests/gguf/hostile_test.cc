// Corrupt, truncated and hostile GGUF images: each must yield a clear error Status (never a
// crash, never a huge allocation), naming the problem and the key or tensor. Also a hand-written
// GGUF v2 file.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "gguf/gguf_file.h"
#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"

namespace kvserve {
namespace {

using testing_util::ByteBuilder;
constexpr uint32_t kTypeString = 8;
constexpr uint32_t kTypeArray = 9;
constexpr uint32_t kTypeUint32 = 4;
constexpr uint32_t kTypeUint8 = 0;
constexpr uint32_t kTypeBool = 7;

void ExpectError(const std::vector<uint8_t>& bytes, StatusCode code,
                 const std::vector<std::string>& substrings) {
  const auto start = std::chrono::steady_clock::now();
  Result<GgufFile> f = GgufFile::FromBytes(bytes);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), code) << f.status().ToString();
  for (const std::string& s : substrings) {
    EXPECT_NE(f.status().message().find(s), std::string::npos)
        << "'" << s << "' not in: " << f.status().message();
  }
  EXPECT_LT(elapsed, std::chrono::seconds(1));  // hostile counts fail fast
}

// A v3 file holding exactly one tensor info and `data_bytes` zero bytes of tensor data.
std::vector<uint8_t> OneTensorFile(const std::string& name, const std::vector<uint64_t>& dims,
                                   uint32_t type, uint64_t offset, size_t data_bytes) {
  ByteBuilder b;
  b.Header(3, 1, 0).TensorInfo(name, dims, type, offset).PadTo(32);
  return b.Raw(std::vector<uint8_t>(data_bytes, 0)).bytes();
}

TEST(GgufHandWritten, ReadsAVersion2File) {
  ByteBuilder b;
  b.Header(2, 1, 2);
  b.Str("general.architecture").U32(kTypeString).Str("llama");
  b.Str("tokenizer.ggml.scores").U32(kTypeArray).U32(6).U64(2).Put(0.5f).Put(-1.0f);
  b.TensorInfo("token_embd.weight", {4, 2}, /*F32*/ 0, 0).PadTo(32);
  for (int i = 0; i < 8; ++i) b.Put(static_cast<float>(i) * 0.25f);
  Result<GgufFile> f = GgufFile::FromBytes(b.bytes());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetFloatArray("tokenizer.ggml.scores"), (std::vector<double>{0.5, -1.0}));
  const GgufTensorInfo* t = f->FindTensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(t->size_bytes, 32u);
  float row[4];
  DequantizeRow(t->type, t->data + 16, row, 4);  // second row
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[3], 1.75f);
}

TEST(GgufHostile, BadMagicAndEmptyFile) {
  ExpectError({}, StatusCode::kDataLoss, {"magic"});
  ExpectError({'G', 'G', 'U'}, StatusCode::kDataLoss, {"magic"});
  ByteBuilder b;
  b.Header(3, 0, 0);
  std::vector<uint8_t> bytes = b.bytes();
  bytes[3] = 'X';
  ExpectError(bytes, StatusCode::kDataLoss, {"GGUF"});
}

TEST(GgufHostile, UnsupportedVersions) {
  ExpectError(ByteBuilder().Header(1, 0, 0).bytes(), StatusCode::kUnimplemented, {"version 1"});
  ExpectError(ByteBuilder().Header(4, 0, 0).bytes(), StatusCode::kUnimplemented, {"version 4"});
  ExpectError(ByteBuilder().Header(0x03000000, 0, 0).bytes(), StatusCode::kUnimplemented,
              {"big-endian"});
  ExpectError(ByteBuilder().Header(0, 0, 0).bytes(), StatusCode::kUnimplemented, {"version 0"});
}

TEST(GgufHostile, TruncationAtEveryByteIsAnError) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.context_length", 128);
  w.SetStringArray("tokenizer.ggml.tokens", {"<s>", "</s>", "hi"});
  GgufValue nested;
  nested.type = GgufValueType::kArray;
  auto outer = std::make_shared<GgufArray>();
  outer->elem_type = GgufValueType::kArray;
  GgufValue inner;
  inner.type = GgufValueType::kArray;
  auto inner_array = std::make_shared<GgufArray>();
  inner_array->elem_type = GgufValueType::kInt32;
  inner_array->items.resize(2, GgufValue{GgufValueType::kInt32, int64_t{9}});
  inner.data = inner_array;
  outer->items = {inner, inner};
  nested.data = outer;
  w.Set("test.nested", nested);
  ASSERT_TRUE(w.AddTensor("a", {4}, GgmlType::kF32, std::vector<uint8_t>(16, 1)).ok());
  ASSERT_TRUE(w.AddTensor("b", {32}, GgmlType::kQ8_0, std::vector<uint8_t>(34, 2)).ok());
  const std::vector<uint8_t> full = *w.WriteToBytes();
  Result<GgufFile> whole = GgufFile::FromBytes(full);
  ASSERT_TRUE(whole.ok());
  // The file ends with tensor b's 34 bytes padded to 64: only those 30 padding bytes may go.
  const size_t end_of_tensor_bytes = full.size() - (64 - 34);
  ASSERT_LT(end_of_tensor_bytes, full.size());
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    Result<GgufFile> f = GgufFile::FromBytes(std::move(prefix));
    if (len < end_of_tensor_bytes) {
      ASSERT_FALSE(f.ok()) << "prefix of " << len << " bytes parsed";
      EXPECT_TRUE(f.status().code() == StatusCode::kDataLoss ||
                  f.status().code() == StatusCode::kUnimplemented)
          << f.status().ToString();
    } else {
      EXPECT_TRUE(f.ok()) << "only trailing padding is missing at " << len;
    }
  }
}

TEST(GgufHostile, TensorOffsetPastEnd) {
  ExpectError(OneTensorFile("blk.0.attn_q.weight", {4}, 0, 1024, 16), StatusCode::kDataLoss,
              {"blk.0.attn_q.weight", "past the end"});
  ExpectError(OneTensorFile("t", {8}, 0, 0, 16), StatusCode::kDataLoss, {"'t'"});  // too short
  ExpectError(OneTensorFile("t", {4}, 0, ~uint64_t{0} - 31, 16), StatusCode::kDataLoss,
              {"'t'"});  // 2^64 - 32: aligned, but offset + size would wrap around
  ExpectError(OneTensorFile("t", {4}, 0, ~uint64_t{0} - 3, 16), StatusCode::kInvalidArgument,
              {"'t'", "alignment"});
}

TEST(GgufHostile, MisalignedTensorOffset) {
  ExpectError(OneTensorFile("output.weight", {4}, 0, 4, 32), StatusCode::kInvalidArgument,
              {"output.weight", "alignment 32"});
}

TEST(GgufHostile, AbsurdCountsFailFast) {
  ExpectError(ByteBuilder().Header(3, 0, uint64_t{1} << 60).bytes(), StatusCode::kDataLoss,
              {"metadata count"});
  ExpectError(ByteBuilder().Header(3, uint64_t{1} << 60, 0).bytes(), StatusCode::kDataLoss,
              {"tensor count"});
  ExpectError(ByteBuilder().Header(3, ~uint64_t{0}, ~uint64_t{0}).bytes(), StatusCode::kDataLoss,
              {});
  // An array claiming 2^60 items (of every element size) must not be reserved.
  for (uint32_t elem : {kTypeUint8, kTypeString, kTypeArray, 12u}) {
    ByteBuilder b;
    b.Header(3, 0, 1).Str("tokenizer.ggml.tokens").U32(kTypeArray).U32(elem).U64(uint64_t{1} << 60);
    ExpectError(b.bytes(), StatusCode::kDataLoss, {"tokenizer.ggml.tokens", "cannot fit"});
  }
}

TEST(GgufHostile, HugeStringLengths) {
  ByteBuilder key;
  key.Header(3, 0, 1).U64(uint64_t{1} << 62).Raw(std::vector<uint8_t>(32, 'a'));
  ExpectError(key.bytes(), StatusCode::kDataLoss, {"string length"});
  ByteBuilder value;
  value.Header(3, 0, 1).Str("general.name").U32(kTypeString).U64(~uint64_t{0});
  ExpectError(value.bytes(), StatusCode::kDataLoss, {"general.name", "string length"});
  ByteBuilder name;
  name.Header(3, 1, 0).U64(uint64_t{1} << 40).Raw(std::vector<uint8_t>(40, 'x'));
  ExpectError(name.bytes(), StatusCode::kDataLoss, {"tensor #0"});
}

TEST(GgufHostile, BadDimensions) {
  ExpectError(OneTensorFile("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 0),
              StatusCode::kInvalidArgument, {"'t'", "overflow"});
  ExpectError(OneTensorFile("t", {uint64_t{1} << 63}, 0, 0, 0), StatusCode::kInvalidArgument,
              {"'t'"});
  ExpectError(OneTensorFile("t", {}, 0, 0, 0), StatusCode::kInvalidArgument,
              {"'t'", "0 dimensions"});
  ExpectError(OneTensorFile("t", {1, 1, 1, 1, 1}, 0, 0, 4), StatusCode::kInvalidArgument,
              {"'t'", "5 dimensions"});
  ExpectError(OneTensorFile("t", {4, 0}, 0, 0, 0), StatusCode::kInvalidArgument,
              {"'t'", "dimension 1"});
  // A byte size that overflows even though the element count fits (2^62 F32 elements).
  ExpectError(OneTensorFile("t", {uint64_t{1} << 62}, 0, 0, 0), StatusCode::kInvalidArgument,
              {"'t'", "overflow"});
  // Q8_0 rows must be whole 32-element blocks.
  ExpectError(OneTensorFile("t", {16}, 8, 0, 32), StatusCode::kInvalidArgument,
              {"'t'", "multiple"});
}

TEST(GgufHostile, UnknownAndUnsupportedTensorTypes) {
  ExpectError(OneTensorFile("tok", {4}, 99, 0, 16), StatusCode::kInvalidArgument,
              {"'tok'", "99"});
  ExpectError(OneTensorFile("tok", {4}, 4, 0, 16), StatusCode::kInvalidArgument, {"'tok'"});
  ExpectError(OneTensorFile("ffn", {256}, 10, 0, 84), StatusCode::kUnimplemented,
              {"'ffn'", "Q2_K"});
  ExpectError(OneTensorFile("ffn", {256}, 11, 0, 110), StatusCode::kUnimplemented,
              {"'ffn'", "Q3_K"});
}

TEST(GgufHostile, DuplicateKeysAndTensorNames) {
  ByteBuilder keys;
  keys.Header(3, 0, 2);
  keys.Str("general.name").U32(kTypeString).Str("a");
  keys.Str("general.name").U32(kTypeString).Str("b");
  ExpectError(keys.bytes(), StatusCode::kInvalidArgument, {"duplicate", "general.name"});
  ByteBuilder tensors;
  tensors.Header(3, 2, 0).TensorInfo("w", {4}, 0, 0).TensorInfo("w", {4}, 0, 32).PadTo(32);
  tensors.Raw(std::vector<uint8_t>(64, 0));
  ExpectError(tensors.bytes(), StatusCode::kInvalidArgument, {"duplicate", "'w'"});
}

TEST(GgufHostile, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    ByteBuilder b;
    b.Header(3, 0, 1).Str("general.alignment").U32(kTypeUint32).U32(a);
    ExpectError(b.bytes(), StatusCode::kInvalidArgument, {"general.alignment", "power of two"});
  }
  ByteBuilder s;
  s.Header(3, 0, 1).Str("general.alignment").U32(kTypeString).Str("32");
  ExpectError(s.bytes(), StatusCode::kInvalidArgument, {"general.alignment"});
}

TEST(GgufHostile, BadValueTypesAndNesting) {
  ByteBuilder type;
  type.Header(3, 0, 1).Str("k").U32(13).U32(0);
  ExpectError(type.bytes(), StatusCode::kDataLoss, {"'k'", "value type 13"});
  ByteBuilder elem;
  elem.Header(3, 0, 1).Str("k").U32(kTypeArray).U32(77).U64(1);
  ExpectError(elem.bytes(), StatusCode::kDataLoss, {"'k'", "element type 77"});
  ByteBuilder boolean;
  boolean.Header(3, 0, 1).Str("k").U32(kTypeBool).U8(2);
  ExpectError(boolean.bytes(), StatusCode::kDataLoss, {"'k'", "bool"});
  // Arrays nested 100000 deep must be rejected without recursing that deep.
  ByteBuilder deep;
  deep.Header(3, 0, 1).Str("k").U32(kTypeArray);
  for (int i = 0; i < 100000; ++i) deep.U32(kTypeArray).U64(1);
  deep.U32(kTypeUint8).U64(1).U8(0);
  ExpectError(deep.bytes(), StatusCode::kInvalidArgument, {"'k'", "nested"});
}

TEST(GgufHostile, BigEndianFileFromGgufPy) {
  Result<GgufFile> f = GgufFile::Open(std::string(KVSERVE_GGUF_TEST_DATA) +
                                      "/gguf_py_big_endian.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(f.status().message().find("big-endian"), std::string::npos) << f.status().message();
}

}  // namespace
}  // namespace kvserve
