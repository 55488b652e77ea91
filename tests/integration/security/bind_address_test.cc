// Metrics and health endpoints bound as documented (docs/scheduler.md's
// server.bindAddress and dashboard.bindAddress, docs/node.md's
// metrics_address): each listening socket of the binary is on the address its
// configuration names, read from /proc/net/tcp — by default every address
// (0.0.0.0, so the kubelet's probes and Prometheus reach it on the pod IP),
// and only loopback when 127.0.0.1 is configured.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <sstream>
#include <string>

#include "apiserver/fake_apiserver.h"
#include "base/testing.h"
#include "security_fixture.h"
#include "testing/node_cluster.h"
#include "testing/ports.h"

namespace tessera::security {
namespace {

using ::tessera::testing::WaitFor;

// The IPv4 address a socket listens on at `port`, as /proc/net/tcp says
// ("0.0.0.0", "127.0.0.1"), or "" when none does.
std::string ListeningAddress(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state != "0A") continue;  // LISTEN
    const size_t colon = local.find(':');
    if (colon == std::string::npos || std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
    const unsigned long ip = std::stoul(local.substr(0, colon), nullptr, 16);  // little-endian bytes
    return std::to_string(ip & 0xff) + "." + std::to_string((ip >> 8) & 0xff) + "." +
           std::to_string((ip >> 16) & 0xff) + "." + std::to_string((ip >> 24) & 0xff);
  }
  return "";
}

class BindAddressTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(api_.Start().ok()); }
  ::tessera::testing::TempDir dir_{"tessera-bind"};
  ::tessera::testing::FakeApiServer api_;
};

TEST_F(BindAddressTest, TheSchedulerListensOnEveryAddressByDefault) {
  SchedulerProcess scheduler(dir_.Path("scheduler.log"));
  const int webhook = ::tessera::testing::FreePort();
  ASSERT_TRUE(scheduler.Start({"--api-server=" + api_.url(), "--webhook-port=" + std::to_string(webhook)}))
      << scheduler.Log();
  EXPECT_EQ(ListeningAddress(scheduler.port()), "0.0.0.0");
  EXPECT_TRUE(WaitFor([&] { return ListeningAddress(webhook) == "0.0.0.0"; }));
}

TEST_F(BindAddressTest, TheSchedulerListensOnlyWhereItIsTold) {
  SchedulerProcess scheduler(dir_.Path("scheduler.log"));
  const int webhook = ::tessera::testing::FreePort();
  ASSERT_TRUE(scheduler.Start({"--api-server=" + api_.url(), "--webhook-port=" + std::to_string(webhook),
                               "--set=server.bindAddress=127.0.0.1"}))
      << scheduler.Log();
  // /healthz, /readyz and /metrics share the extender's port.
  EXPECT_EQ(ListeningAddress(scheduler.port()), "127.0.0.1");
  EXPECT_TRUE(WaitFor([&] { return ListeningAddress(webhook) == "127.0.0.1"; }));
}

TEST(NodeBindAddressTest, TheNodeAgentsMetricsAndHealthListenWhereConfigured) {
  ::tessera::testing::NodeCluster cluster;
  auto gpus = cluster.Start();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  // NodeCluster's flags name --metrics-address=127.0.0.1.
  ASSERT_TRUE(cluster.StartNode().ok());
  httplib::Client http("127.0.0.1", cluster.metrics_port());
  EXPECT_TRUE(WaitFor([&] {
    auto res = http.Get("/healthz");
    return res && res->status == 200;
  })) << cluster.NodeLog();
  EXPECT_EQ(ListeningAddress(cluster.metrics_port()), "127.0.0.1");
  cluster.StopNode();
  ASSERT_TRUE(cluster.StartNode({{"--metrics-address", "0.0.0.0"}}).ok());
  EXPECT_TRUE(WaitFor([&] { return ListeningAddress(cluster.metrics_port()) == "0.0.0.0"; }))
      << cluster.NodeLog();
}

}  // namespace
}  // namespace tessera::security
