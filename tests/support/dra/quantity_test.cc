#include "dra/quantity.h"

#include <gtest/gtest.h>

namespace tessera::testing::dra {
namespace {

Quantity Q(const char* text) {
  auto q = Quantity::Parse(text);
  EXPECT_TRUE(q.ok()) << text << ": " << (q.ok() ? "" : q.error().message);
  return q.ok() ? *q : Quantity();
}

TEST(QuantityTest, ParsesEverySuffixExactly) {
  EXPECT_EQ(Q("80Gi"), Quantity::FromInt(80LL << 30));
  EXPECT_EQ(Q("1Ki"), Quantity::FromInt(1024));
  EXPECT_EQ(Q("1Ei"), Quantity::FromInt(1LL << 60));
  EXPECT_EQ(Q("100"), Quantity::FromInt(100));
  EXPECT_EQ(Q("1k"), Quantity::FromInt(1000));
  EXPECT_EQ(Q("2M"), Quantity::FromInt(2'000'000));
  EXPECT_EQ(Q("1E"), Quantity::FromInt(1'000'000'000'000'000'000));
  EXPECT_EQ(Q("1e3"), Quantity::FromInt(1000));
  EXPECT_EQ(Q("1E3"), Quantity::FromInt(1000));
  EXPECT_EQ(Q("1.5Gi"), Quantity::FromInt(3LL << 29));
  EXPECT_EQ(Q("500m").nanos(), 500'000'000);
  EXPECT_EQ(Q("3n").nanos(), 3);
  EXPECT_EQ(Q("7u").nanos(), 7'000);
  EXPECT_EQ(Q("-2").Sign(), -1);
  EXPECT_EQ(Q("+2"), Quantity::FromInt(2));
  EXPECT_EQ(Q(".5"), Q("500m"));
  EXPECT_EQ(Q("1e-3"), Q("1m"));
}

TEST(QuantityTest, FormatFollowsTheSuffix) {
  EXPECT_EQ(Q("1Gi").format(), Quantity::Format::kBinarySI);
  EXPECT_EQ(Q("1G").format(), Quantity::Format::kDecimalSI);
  EXPECT_EQ(Q("12").format(), Quantity::Format::kDecimalSI);
  EXPECT_EQ(Q("1e9").format(), Quantity::Format::kDecimalExponent);
}

TEST(QuantityTest, FinerThanNanoRoundsUp) {
  EXPECT_EQ(Q("0.1n").nanos(), 1);
  EXPECT_EQ(Q("1.0000000001").nanos(), 1'000'000'001);
}

TEST(QuantityTest, RefusesWhatIsNotAQuantity) {
  for (const char* bad : {"", "Gi", "1.2.3", "1Gb", "1 Gi", "abc", "1e", "1ee3", "--1", "1Ki1"}) {
    auto q = Quantity::Parse(bad);
    EXPECT_FALSE(q.ok()) << bad;
    if (!q.ok()) {
      EXPECT_NE(q.error().message.find("quantity \""), std::string::npos);
    }
  }
  EXPECT_FALSE(Quantity::Parse("99999999999999999999999999999999999999Ei").ok());
}

TEST(QuantityTest, WritesTheCanonicalForm) {
  EXPECT_EQ(Q("80Gi").String(), "80Gi");
  EXPECT_EQ(Q("1024Mi").String(), "1Gi");
  EXPECT_EQ(Q("1536Mi").String(), "1536Mi");
  EXPECT_EQ(Quantity::FromInt(1536, Quantity::Format::kBinarySI).String(), "1536");  // not a whole Ki
  EXPECT_EQ(Quantity::FromInt(100, Quantity::Format::kBinarySI).String(), "100");    // below 1Ki
  EXPECT_EQ(Q("1000").String(), "1k");
  EXPECT_EQ(Q("1500").String(), "1500");
  EXPECT_EQ(Q("1.5M").String(), "1500k");
  EXPECT_EQ(Q("0.5").String(), "500m");
  EXPECT_EQ(Q("0").String(), "0");
  EXPECT_EQ(Q("0Gi").String(), "0");
  EXPECT_EQ(Q("-3Gi").String(), "-3Gi");
  EXPECT_EQ(Q("1e3").String(), "1e3");
  EXPECT_EQ(Q("30").String(), "30");
}

TEST(QuantityTest, ComparesAndAddsByValue) {
  EXPECT_EQ(Q("1Gi"), Q("1024Mi"));
  EXPECT_LT(Q("1G"), Q("1Gi"));
  EXPECT_GT(Q("2"), Q("1999m"));
  Quantity sum = Q("1Gi") + Q("512Mi");
  EXPECT_EQ(sum.String(), "1536Mi");  // keeps the left operand's format
  EXPECT_EQ((Q("1Gi") - Q("1Gi")).Sign(), 0);
}

TEST(QuantityTest, CeilValueRoundsUpAwayFromZero) {
  EXPECT_EQ(Q("1500m").CeilValue(), 2);
  EXPECT_EQ(Q("2").CeilValue(), 2);
  EXPECT_EQ(Q("-1500m").CeilValue(), -2);
  int64_t whole = 0;
  EXPECT_FALSE(Q("1500m").ToInt64(&whole));
  EXPECT_TRUE(Q("3k").ToInt64(&whole));
  EXPECT_EQ(whole, 3000);
}

}  // namespace
}  // namespace tessera::testing::dra
