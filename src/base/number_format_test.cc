#include "base/number_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <locale>
#include <sstream>
#include <string>

namespace tessera {
namespace {

TEST(NumberFormatTest, FormatsIntegersExactly) {
  EXPECT_EQ(FormatNumber(0), "0");
  EXPECT_EQ(FormatNumber(-0.0), "0");
  EXPECT_EQ(FormatNumber(1), "1");
  EXPECT_EQ(FormatNumber(-42), "-42");
  EXPECT_EQ(FormatNumber(1e6), "1000000");
  EXPECT_EQ(FormatNumber(81920.0 * 1024 * 1024), "85899345920");            // 80 GiB in bytes
  EXPECT_EQ(FormatNumber(9007199254740992.0), "9007199254740992");          // 2^53
  EXPECT_EQ(FormatNumber(9007199254740994.0), "9007199254740994");          // 2^53 + 2
  EXPECT_EQ(FormatNumber(-9223372036854775808.0), "-9223372036854775808");  // -2^63
}

TEST(NumberFormatTest, FormatsOtherFiniteValuesInShortestRoundTripForm) {
  EXPECT_EQ(FormatNumber(0.5), "0.5");
  EXPECT_EQ(FormatNumber(0.1), "0.1");
  EXPECT_EQ(FormatNumber(-2.25), "-2.25");
  EXPECT_EQ(FormatNumber(1.5e-7), "1.5e-07");
  EXPECT_EQ(FormatNumber(1e300), "1e+300");
  // At and above 2^63 the shortest form wins, whichever notation it is in.
  EXPECT_EQ(FormatNumber(9223372036854775808.0), "9223372036854775808");  // 2^63
  EXPECT_EQ(FormatNumber(1e20), "1e+20");
  const double values[] = {0.1,
                           1.0 / 3,
                           2.0 / 3 * 1e-300,
                           123456.789,
                           6.02214076e23,
                           1e-320,
                           M_PI,
                           std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::min(),
                           4503599627370495.5};
  for (double v : values) {
    const std::string s = FormatNumber(v);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;
  }
}

TEST(NumberFormatTest, SpellsInfinitiesAndNaNAsPrometheusDoes) {
  EXPECT_EQ(FormatNumber(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatNumber(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatNumber(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(FormatNumber(-std::numeric_limits<double>::quiet_NaN()), "NaN");
}

// A program may install a global C++ locale whose numbers group digits and use
// a decimal comma; iostreams then print 1234567 as "1.234.567" and 0.5 as "0,5".
// FormatNumber does not go through them.
class CommaDecimals : public std::numpunct<char> {
 protected:
  char do_decimal_point() const override { return ','; }
  char do_thousands_sep() const override { return '.'; }
  std::string do_grouping() const override { return "\3"; }
};

TEST(NumberFormatTest, IgnoresTheGlobalLocale) {
  const std::locale saved = std::locale::global(std::locale(std::locale::classic(), new CommaDecimals));
  std::ostringstream stream;
  stream << 1234567 << " " << 0.5;
  const std::string through_iostream = stream.str();
  const std::string integer = FormatNumber(1234567);
  const std::string fraction = FormatNumber(0.5);
  std::locale::global(saved);
  EXPECT_EQ(through_iostream, "1.234.567 0,5");  // the hazard is real
  EXPECT_EQ(integer, "1234567");
  EXPECT_EQ(fraction, "0.5");
}

}  // namespace
}  // namespace tessera
