// What the in-process tests of tessera-node's Agent share: two fake GPUs, a
// temporary root laid out like a node (plugin dir, libvgpu, regions), an
// Agent configured into it, and the kubelet stand-in on the other side.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/testing.h"
#include "host/inventory.h"
#include "kubelet_standin.h"
#include "node/agent.h"

namespace tessera::node::test {

// Generous: the machine may be loaded; conditions are polled, never timed.
inline constexpr auto kWait = std::chrono::seconds(30);

inline std::vector<core::Gpu> TwoGpus() {
  std::vector<core::Gpu> gpus;
  for (int i = 0; i < 2; ++i) {
    core::Gpu gpu;
    gpu.uuid = "GPU-0000000" + std::to_string(i) + "-aaaa-bbbb-cccc-dddddddddddd";
    gpu.index = i;
    gpu.model = "NVIDIA A100-SXM4-80GB";
    gpu.memory_mib = 81920;
    gpu.numa_node = i;
    gpus.push_back(gpu);
  }
  return gpus;
}

class AgentFixture : public ::testing::Test {
 protected:
  // `pod_resources_socket` empty: the stand-in serves no PodResources API.
  void SetUpNode(const std::string& pod_resources_socket_name = "") {
    root_ = tmp_.path();
    tmp_.MakeDir("dp");
    tmp_.Write("lib/libvgpu.so", "stand-in for libvgpu");
    config_.plugin_dir = root_ + "/dp";
    config_.libvgpu_host_path = root_ + "/lib/libvgpu.so";
    config_.region_host_dir = root_ + "/regions";
    config_.split_count = 3;
    config_.kubelet_poll_ms = 50;
    config_.metrics_port = 0;  // several agents run at once in tests
    if (!pod_resources_socket_name.empty()) pod_resources_socket_ = root_ + "/" + pod_resources_socket_name;
    kubelet_ = std::make_unique<testing::KubeletStandIn>(config_.plugin_dir, pod_resources_socket_);
  }
  void TearDown() override {
    agent_.reset();
    kubelet_.reset();
  }

  void StartAgent() {
    auto inventory = std::make_unique<host::StaticInventory>(TwoGpus());
    inventory_ = inventory.get();
    agent_ = std::make_unique<Agent>(config_, std::move(inventory));
    auto started = agent_->Start();
    ASSERT_TRUE(started.ok()) << started.error().message;
  }

  ::tessera::testing::TempDir tmp_{"tn"};  // short: unix socket paths are limited
  std::string root_;
  std::string pod_resources_socket_;
  NodeConfig config_;
  std::unique_ptr<testing::KubeletStandIn> kubelet_;
  host::StaticInventory* inventory_ = nullptr;
  std::unique_ptr<Agent> agent_;
};

}  // namespace tessera::node::test

// Every test of the fixture names these without their namespace.
namespace tessera::node {
using test::kWait;
using test::TwoGpus;
}  // namespace tessera::node
