#include "core/codec.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::core {
namespace {

TEST(DeviceUuidTest, AcceptsNvidiaForms) {
  for (const char* uuid :
       {"GPU-1a2b3c4d-0000-1111-2222-333344445555", "GPU-ABCDEF01-abcd-ABCD-0123-456789abcdef",
        "MIG-1a2b3c4d-0000-1111-2222-333344445555", "MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/7/0"}) {
    EXPECT_TRUE(IsValidDeviceUuid(uuid)) << uuid;
    EXPECT_TRUE(ValidateDeviceUuid(uuid, "x").ok()) << uuid;
  }
}

TEST(DeviceUuidTest, RejectsEverythingElse) {
  for (const char* uuid :
       {"", "0", "GPU-", "GPU-1a2b3c4d", "gpu-1a2b3c4d-0000-1111-2222-333344445555",
        "GPU-1a2b3c4d-0000-1111-2222-33334444555", "GPU-1a2b3c4d-0000-1111-2222-3333444455556",
        "GPU-1a2b3c4g-0000-1111-2222-333344445555", "GPU-1a2b3c4d_0000-1111-2222-333344445555",
        "GPU-1a2b3c4d-0000-1111-2222-333344445555 ", " GPU-1a2b3c4d-0000-1111-2222-333344445555", "MIG-",
        "MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555", "MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/7",
        "MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/x/0", "1a2b3c4d-0000-1111-2222-333344445555"}) {
    EXPECT_FALSE(IsValidDeviceUuid(uuid)) << uuid;
  }
  Status s = ValidateDeviceUuid("GPU-0", "allocation: containers[0]");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("allocation: containers[0]: uuid \"GPU-0\" is malformed"),
            std::string::npos);
  EXPECT_NE(s.error().message.find("such as GPU-"), std::string::npos);
  s = ValidateDeviceUuid("", "where");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("uuid is empty"), std::string::npos);
}

TEST(Rfc3339Test, AcceptsValidTimes) {
  for (const char* t : {"2026-11-22T02:31:53Z", "2026-11-22t02:31:53z", "2026-11-22T02:31:53.123456789Z",
                        "2026-11-22T02:31:53+05:30", "2026-11-22T02:31:53.5-08:00", "2024-02-29T00:00:00Z",
                        "2016-12-31T23:59:60Z", "2000-02-29T12:00:00Z"}) {
    EXPECT_TRUE(IsRfc3339Timestamp(t)) << t;
  }
}

TEST(Rfc3339Test, RejectsMalformedTimes) {
  for (const char* t :
       {"", "2026-11-22", "2026-11-22T02:31:53", "2026-11-22 02:31:53Z", "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z", "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
        "2026-11-22T24:00:00Z", "2026-11-22T23:60:00Z", "2026-11-22T23:59:61Z", "2026-11-22T02:31:53.Z",
        "2026-11-22T02:31:53+0530", "2026-11-22T02:31:53+24:00", "2026-11-22T02:31:53Zjunk",
        "26-11-22T02:31:53Z", "2026-11-22T02:31:53+05:30 ", "1763778713"}) {
    EXPECT_FALSE(IsRfc3339Timestamp(t)) << t;
  }
}

TEST(ParseJsonTextTest, ReportsWhereParsingStopped) {
  auto j = codec_detail::ParseJsonText("{\"a\": [1, 2", "payload");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.error().message.rfind("payload: not valid JSON (byte", 0), 0u) << j.error().message;
  EXPECT_TRUE(codec_detail::ParseJsonText("{\"a\": [1, 2]}", "payload").ok());
}

TEST(CheckRangeTest, NamesTheFieldTheValueAndTheRange) {
  using codec_detail::CheckRange;
  EXPECT_TRUE(CheckRange("w", "cores", 0, 0, 100).ok());
  EXPECT_TRUE(CheckRange("w", "cores", 100, 0, 100).ok());
  Status low = CheckRange("inventory: gpus[0]", "slots", -1, 0, 16);
  ASSERT_FALSE(low.ok());
  EXPECT_EQ(low.error().message, "inventory: gpus[0]: \"slots\" is -1; expected 0 to 16");
  Status high = CheckRange("d", "cores", 101, 0, 100, "(no limit)", "(exclusive)");
  ASSERT_FALSE(high.ok());
  EXPECT_EQ(high.error().message, "d: \"cores\" is 101; expected 0 (no limit) to 100 (exclusive)");
}

TEST(CheckEnvelopeTest, WantsAnObjectOfTheSupportedVersion) {
  using codec_detail::CheckEnvelope;
  EXPECT_TRUE(CheckEnvelope(nlohmann::json{{"version", 1}}, 1, "p").ok());
  Status array = CheckEnvelope(nlohmann::json::array(), 1, "p");
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.error().message, "p: expected a JSON object such as {\"version\":1,...}, got array");
  Status newer = CheckEnvelope(nlohmann::json{{"version", 2}}, 1, "p");
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.error().message.find("unsupported version 2"), std::string::npos) << newer.error().message;
}

TEST(EnumSpellingTest, OneTableReadBothWays) {
  enum class Colour { kRed, kBlue, kGreen };
  constexpr codec_detail::EnumSpelling<Colour> kColours[] = {{Colour::kRed, "red"}, {Colour::kBlue, "blue"}};
  EXPECT_EQ(codec_detail::SpellingOf(kColours, Colour::kBlue), "blue");
  EXPECT_EQ(codec_detail::SpellingOf(kColours, Colour::kGreen), "?");  // not in the table
  EXPECT_EQ(codec_detail::ValueSpelled(kColours, "red"), Colour::kRed);
  EXPECT_EQ(codec_detail::ValueSpelled(kColours, "Red"), std::nullopt);  // exact spelling only
  EXPECT_EQ(codec_detail::ValueSpelled(kColours, ""), std::nullopt);
}

}  // namespace
}  // namespace tessera::core
