#include "sim/mps_protocol.h"

#include <gtest/gtest.h>

namespace tessera::sim::mps {
namespace {

TEST(MpsProtocol, MemoryValuesTakeBinaryUnits) {
  EXPECT_EQ(*ParseMemory("8192M"), 8ull << 30);
  EXPECT_EQ(*ParseMemory("2G"), 2ull << 30);
  EXPECT_EQ(*ParseMemory("512K"), 512ull << 10);
  EXPECT_EQ(*ParseMemory("1T"), 1ull << 40);
  EXPECT_EQ(*ParseMemory("4096"), 4096u);
  for (const char* bad : {"", "M", "12X", "1.5G", "-1G", "8 G"}) {
    auto v = ParseMemory(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.error().message.find("8192M"), std::string::npos);  // says what it takes
  }
  EXPECT_EQ(FormatMemory(2ull << 30), "2048M");
}

TEST(MpsProtocol, PinnedLimitsAreByClientOrdinal) {
  auto limits = ParsePinnedLimits("0=8192M,1=4G");
  ASSERT_TRUE(limits.ok());
  EXPECT_EQ(limits->size(), 2u);
  EXPECT_EQ(limits->at(0), 8ull << 30);
  EXPECT_EQ(limits->at(1), 4ull << 30);
  for (const char* bad : {"8192M", "x=1G", "0=", "0=1G,,", "GPU-1234=1G"})
    EXPECT_FALSE(ParsePinnedLimits(bad).ok()) << bad;
}

TEST(MpsProtocol, PercentagesRunFromOneToAHundred) {
  EXPECT_EQ(*ParsePercentage("1"), 1.0);
  EXPECT_EQ(*ParsePercentage("100"), 100.0);
  EXPECT_EQ(*ParsePercentage("33.5"), 33.5);
  for (const char* bad : {"", "0", "101", "abc", "50%"}) EXPECT_FALSE(ParsePercentage(bad).ok()) << bad;
}

TEST(MpsProtocol, ConnectRepliesRoundTrip) {
  ConnectReply r;
  r.server_pid = 4242;
  r.server_start_time = 987654;
  r.active_thread_percentage = 30;
  r.gpus = {2, 5};
  r.pinned_limit_bytes[5] = 1ull << 30;
  auto back = ConnectReply::Decode(r.Encode());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->server_pid, 4242);
  EXPECT_EQ(back->server_start_time, 987654u);
  EXPECT_EQ(back->active_thread_percentage, 30.0);
  EXPECT_EQ(back->gpus, (std::vector<int>{2, 5}));
  EXPECT_EQ(back->pinned_limit_bytes.size(), 1u);
  EXPECT_EQ(back->pinned_limit_bytes.at(5), 1ull << 30);
  auto refused = ConnectReply::Decode("error the MPS control daemon is shutting down");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("shutting down"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim::mps
