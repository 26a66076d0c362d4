#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(Utf8Test, DecodesAndReplacesInvalidBytesOneByOne) {
  size_t len = 0;
  EXPECT_EQ(DecodeUtf8At("\xE2\x82\xAC", 0, &len), 0x20AC);
  EXPECT_EQ(len, 3u);
  EXPECT_EQ(DecodeUtf8At("\xC0\x80", 0, &len), kReplacementChar);  // overlong
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(DecodeUtf8At("\xED\xA0\x80", 0, &len), kReplacementChar);  // surrogate
  EXPECT_EQ(SanitizeUtf8("ok"), "ok");
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8Test, CompletePrefixHoldsBackOnlyViableTails) {
  EXPECT_EQ(CompleteUtf8Prefix("ab"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98"), 1u);  // emoji missing its last byte
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98\x80"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xE0\x80"), 3u);  // E0 80 can never be valid
  EXPECT_EQ(CompleteUtf8Prefix("a\xFF"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("\xC3"), 0u);
}

TEST(NfcTest, ComposesDecomposedSequences) {
  EXPECT_EQ(NormalizeNfc("e\xCC\x81"), "\xC3\xA9");     // e + U+0301 → é
  EXPECT_EQ(NormalizeNfc("\xE2\x84\xAB"), "\xC3\x85");  // Angstrom sign → Å
  EXPECT_EQ(NormalizeNfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // 한 jamo
  // q + dot below (220) + dot above (230), in either order: canonical order, no composite.
  EXPECT_EQ(NormalizeNfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
  // s + dot above + dot below → U+1E69 (ṩ).
  EXPECT_EQ(NormalizeNfc("s\xCC\x87\xCC\xA3"), "\xE1\xB9\xA9");
  EXPECT_EQ(NormalizeNfc("plain ascii"), "plain ascii");
  EXPECT_EQ(NormalizeNfc("\xE4\xB8\x96"), "\xE4\xB8\x96");
}

}  // namespace
}  // namespace kvserve
