// The API-server stand-in's fault injection as a chaos test uses it: a fault
// with a probability hits a seeded share of the matching requests, spares the
// others, and every hit is counted.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>

#include "apiserver/fake_apiserver.h"

namespace tessera::testing {
namespace {

// How many of `count` GETs of the pod list got `status`.
int CountStatus(FakeApiServer& server, int count, int status) {
  const std::string url = server.url();
  httplib::Client http(url.substr(url.find("://") + 3));
  http.set_read_timeout(10);
  int seen = 0;
  for (int i = 0; i < count; ++i) {
    auto res = http.Get("/api/v1/pods");
    if (res && res->status == status) ++seen;
  }
  return seen;
}

int HitsOfOneRun(uint64_t seed) {
  FakeApiServerOptions options;
  options.fault_seed = seed;
  FakeApiServer server(options);
  if (!server.Start().ok()) return -1;
  Fault fault;
  fault.status = 503;
  fault.path_contains = "/pods";
  fault.probability = 0.3;
  server.AddFault(fault);
  const int hits = CountStatus(server, 200, 503);
  EXPECT_EQ(server.FaultsInjected(), static_cast<uint64_t>(hits));
  server.Stop();
  return hits;
}

TEST(FakeApiServerFaultTest, AProbabilityHitsASeededShareOfTheRequests) {
  const int hits = HitsOfOneRun(7);
  // 30 % of 200, give or take what a fair draw gives.
  EXPECT_GT(hits, 30);
  EXPECT_LT(hits, 90);
  EXPECT_EQ(HitsOfOneRun(7), hits) << "the same seed, the same requests hit";
}

TEST(FakeApiServerFaultTest, ASparedRequestDoesNotUseUpTimesAndMeetsTheNextFault) {
  FakeApiServer server;
  ASSERT_TRUE(server.Start().ok());
  Fault never;
  never.status = 500;
  never.probability = 0.0;
  never.times = 1;
  Fault always;
  always.status = 502;
  always.times = 3;
  server.AddFault(never);
  server.AddFault(always);
  EXPECT_EQ(CountStatus(server, 3, 502), 3);
  EXPECT_EQ(CountStatus(server, 2, 200), 2) << "the spared fault never hit, the other was used up";
  EXPECT_EQ(server.FaultsInjected(), 3u);
  server.Stop();
}

}  // namespace
}  // namespace tessera::testing
