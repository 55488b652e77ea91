#include "core/quantity.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::core {
namespace {

struct ValidCase {
  std::string text;
  std::string exact;  // Quantity::ToString() of the parsed value
};

class QuantityValidTest : public testing::TestWithParam<ValidCase> {};

TEST_P(QuantityValidTest, ParsesToExactValue) {
  const ValidCase& c = GetParam();
  auto q = Quantity::Parse(c.text);
  ASSERT_TRUE(q.ok()) << c.text << ": " << q.error().message;
  EXPECT_EQ(q->ToString(), c.exact) << c.text;
  // The exact rendering parses back to the same value.
  auto again = Quantity::Parse(q->ToString());
  ASSERT_TRUE(again.ok()) << q->ToString();
  EXPECT_EQ(*again, *q);
}

INSTANTIATE_TEST_SUITE_P(
    Grammar, QuantityValidTest,
    testing::Values(
        // integers and signs
        ValidCase{"0", "0"}, ValidCase{"3000", "3000"}, ValidCase{"+5", "5"}, ValidCase{"-5", "-5"},
        ValidCase{"-0", "0"}, ValidCase{"007", "7"},
        // decimals, including the short forms the grammar allows
        ValidCase{"1.5", "1.5"}, ValidCase{"0.25", "0.25"}, ValidCase{".5", "0.5"}, ValidCase{"5.", "5"},
        ValidCase{"-.5", "-0.5"}, ValidCase{"1.000000001", "1.000000001"},
        // decimal SI suffixes
        ValidCase{"1n", "0.000000001"}, ValidCase{"1u", "0.000001"}, ValidCase{"250m", "0.25"},
        ValidCase{"1500m", "1.5"}, ValidCase{"2k", "2000"}, ValidCase{"3M", "3000000"},
        ValidCase{"1G", "1000000000"}, ValidCase{"1T", "1000000000000"}, ValidCase{"1P", "1000000000000000"},
        ValidCase{"1E", "1000000000000000000"}, ValidCase{"0.5k", "500"}, ValidCase{"1.5m", "0.0015"},
        // binary SI suffixes
        ValidCase{"1Ki", "1024"}, ValidCase{"1Mi", "1048576"}, ValidCase{"8Gi", "8589934592"},
        ValidCase{"1Ti", "1099511627776"}, ValidCase{"1Pi", "1125899906842624"},
        ValidCase{"1Ei", "1152921504606846976"}, ValidCase{"1.5Gi", "1610612736"}, ValidCase{"0.5Ki", "512"},
        ValidCase{"0.001Ki", "1.024"},
        // exponents
        ValidCase{"1e3", "1000"}, ValidCase{"1E3", "1000"}, ValidCase{"1.5E2", "150"},
        ValidCase{"1e+3", "1000"}, ValidCase{"5e-1", "0.5"}, ValidCase{"12e-3", "0.012"},
        ValidCase{"1e0", "1"}, ValidCase{"0e999", "0"}, ValidCase{"-2.5e1", "-25"},
        // largest magnitude: 2^63-1 units
        ValidCase{"9223372036854775807", "9223372036854775807"},
        ValidCase{"-9223372036854775807", "-9223372036854775807"}, ValidCase{"7Ei", "8070450532247928832"},
        ValidCase{"9.223372036854775807E", "9223372036854775807"},
        // precision below 1n is rounded up (away from zero), as Kubernetes does
        ValidCase{"0.1n", "0.000000001"}, ValidCase{"1.0000000001", "1.000000001"},
        ValidCase{"-0.1n", "-0.000000001"}, ValidCase{"1e-30", "0.000000001"},
        ValidCase{"1.0000000000000000000000000000000000000000000001", "1.000000001"},
        ValidCase{"1.000000000000000000000000000000000000000000000Ki", "1024"},
        ValidCase{"0000000000000000000000000000000000000000000000001", "1"}));

struct InvalidCase {
  std::string text;
  std::string message_part;  // the error must say this
};

class QuantityInvalidTest : public testing::TestWithParam<InvalidCase> {};

TEST_P(QuantityInvalidTest, RejectsWithReasonAndExample) {
  const InvalidCase& c = GetParam();
  auto q = Quantity::Parse(c.text);
  ASSERT_FALSE(q.ok()) << c.text << " parsed as " << q->ToString();
  EXPECT_NE(q.error().message.find(c.message_part), std::string::npos)
      << c.text << " -> " << q.error().message;
  EXPECT_NE(q.error().message.find("e.g."), std::string::npos)
      << "error should show an accepted example: " << q.error().message;
  if (!c.text.empty()) {
    EXPECT_NE(q.error().message.find(c.text), std::string::npos) << q.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Garbage, QuantityInvalidTest,
    testing::Values(InvalidCase{"", "empty"}, InvalidCase{"1.2.3", "more than one decimal point"},
                    InvalidCase{"12Q", "unknown suffix \"Q\""}, InvalidCase{"Mi", "no digits"},
                    InvalidCase{"--1", "more than one sign"}, InvalidCase{"+-1", "more than one sign"},
                    InvalidCase{"1e", "exponent \"e\" has no digits"}, InvalidCase{"1E+", "has no digits"},
                    InvalidCase{"1e-", "has no digits"}, InvalidCase{"1e1.5", "whole number"},
                    InvalidCase{"1e3Ki", "whole number"}, InvalidCase{" 1", "whitespace"},
                    InvalidCase{"1 ", "whitespace"}, InvalidCase{"1 Gi", "whitespace"},
                    InvalidCase{"1\t", "whitespace"}, InvalidCase{".", "no digits"},
                    InvalidCase{"+", "no digits"}, InvalidCase{"-", "no digits"},
                    InvalidCase{"Gi", "no digits"}, InvalidCase{"e3", "no digits"},
                    InvalidCase{"1K", "did you mean \"k\""}, InvalidCase{"1ki", "\"Ki\""},
                    InvalidCase{"1Kib", "unknown suffix"}, InvalidCase{"1MiB", "unknown suffix"},
                    InvalidCase{"1mi", "unknown suffix"}, InvalidCase{"0x10", "unknown suffix"},
                    InvalidCase{"1-", "sign may only appear"}, InvalidCase{"1,5", "unknown suffix"},
                    InvalidCase{"\"1\"", "no digits"}, InvalidCase{"1e1001", "out of range"},
                    InvalidCase{"1e99999999999999999999", "out of range"},
                    // overflow: more than 2^63-1 units
                    InvalidCase{"9223372036854775808", "larger than the largest quantity"},
                    InvalidCase{"-9223372036854775808", "larger than the largest quantity"},
                    InvalidCase{"8Ei", "larger than the largest quantity"},
                    InvalidCase{"10E", "larger than the largest quantity"},
                    InvalidCase{"1e19", "larger than the largest quantity"},
                    InvalidCase{"1e40", "larger than the largest quantity"},
                    InvalidCase{"99999999999999999999999999999999999999999", "larger than the largest"}));

TEST(QuantityTest, IntegerConversions) {
  auto q = Quantity::Parse("1.2");
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->IsInteger());
  EXPECT_EQ(*q->ToIntegerCeil(), 2);
  EXPECT_EQ(*q->ToIntegerFloor(), 1);
  EXPECT_FALSE(q->ToInteger().ok());
  EXPECT_NE(q->ToInteger().error().message.find("1.2 is not a whole number"), std::string::npos);

  auto neg = Quantity::Parse("-1.2");
  ASSERT_TRUE(neg.ok());
  EXPECT_EQ(*neg->ToIntegerCeil(), -1);
  EXPECT_EQ(*neg->ToIntegerFloor(), -2);
  EXPECT_NE(neg->ToInteger().error().message.find("-1.2 is not a whole number; write an integer such as -2"),
            std::string::npos)
      << neg->ToInteger().error().message;

  auto whole = Quantity::Parse("2000m");
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(whole->IsInteger());
  EXPECT_EQ(*whole->ToInteger(), 2);

  auto max = Quantity::Parse("9223372036854775807");
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(*max->ToInteger(), INT64_MAX);
  EXPECT_EQ(*max->ToIntegerCeil(), INT64_MAX);
  auto min = Quantity::Parse("-9223372036854775807");
  ASSERT_TRUE(min.ok());
  EXPECT_EQ(*min->ToIntegerFloor(), -INT64_MAX);
}

TEST(QuantityTest, MilliRoundsUp) {
  EXPECT_EQ(*Quantity::Parse("250m")->ToMilli(), 250);
  EXPECT_EQ(*Quantity::Parse("2")->ToMilli(), 2000);
  EXPECT_EQ(*Quantity::Parse("1n")->ToMilli(), 1);
  EXPECT_EQ(*Quantity::Parse("1.0001")->ToMilli(), 1001);
  EXPECT_EQ(*Quantity::Parse("9223372036854775807m")->ToMilli(), INT64_MAX);
  auto too_big = Quantity::Parse("9223372036854775807")->ToMilli();
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.error().message.find("too large"), std::string::npos);
}

TEST(QuantityTest, ArithmeticIsExactAndDetectsOverflow) {
  auto a = *Quantity::Parse("0.1");
  auto b = *Quantity::Parse("0.2");
  EXPECT_EQ(*a.Add(b), *Quantity::Parse("0.3"));
  EXPECT_EQ(*b.Subtract(a), a);
  EXPECT_EQ(*a.Multiply(30), *Quantity::Parse("3"));
  EXPECT_EQ(Quantity::FromUnits(3), *Quantity::Parse("3"));
  EXPECT_EQ(Quantity::FromMilli(1500), *Quantity::Parse("1.5"));

  auto max = *Quantity::Parse("9223372036854775807");
  EXPECT_FALSE(max.Add(Quantity::FromMilli(1)).ok());
  EXPECT_FALSE(Quantity::FromUnits(-5).Subtract(max).ok());
  EXPECT_FALSE(max.Multiply(2).ok());
  EXPECT_FALSE(max.Multiply(INT64_MIN).ok());
  EXPECT_TRUE(max.Multiply(-1).ok());
  auto err = max.Multiply(2).error().message;
  EXPECT_NE(err.find("overflows"), std::string::npos) << err;
}

TEST(QuantityTest, OrdersByValueNotByText) {
  EXPECT_LT(*Quantity::Parse("999Mi"), *Quantity::Parse("1Gi"));
  EXPECT_LT(*Quantity::Parse("1G"), *Quantity::Parse("1Gi"));
  EXPECT_EQ(*Quantity::Parse("1k"), *Quantity::Parse("1000"));
  EXPECT_EQ(*Quantity::Parse("1e3"), *Quantity::Parse("1k"));
  EXPECT_GT(*Quantity::Parse("-1m"), *Quantity::Parse("-1"));
  EXPECT_TRUE(Quantity().IsZero());
  EXPECT_TRUE(Quantity::Parse("-1")->IsNegative());
}

}  // namespace
}  // namespace tessera::core
