#include "core/result.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return Error{"value must be positive, got " + std::to_string(v)};
  return v;
}

TEST(Result, CarriesValueOrError) {
  auto good = ParsePositive(3);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  auto bad = ParsePositive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "value must be positive, got -1");
  EXPECT_EQ(bad.error().Wrap("limit").message, "limit: value must be positive, got -1");
}

TEST(Status, DefaultsToOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  Status e = Error{"boom"};
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "boom");
}

}  // namespace
}  // namespace tessera
