#include "kvserve/status.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KV_ASSIGN_OR_RETURN(int h, Half(x));
  KV_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(Status, OkAndErrorCarryCodeAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = NotFound("no such tensor 'x'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no such tensor 'x'");
}

TEST(Result, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd");
}

}  // namespace
}  // namespace kvserve
