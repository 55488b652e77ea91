#include "node/mps/mps_node.h"

#include <gtest/gtest.h>

#include "base/testing.h"
#include "node/mps/fake_control_program.h"

namespace tessera::node::mps {
namespace {

sharing::ModeAssignment Modes(bool gpu1_mps) {
  sharing::ModeAssignment modes;
  for (int i = 0; i < 2; ++i) {
    sharing::GpuMode m;
    m.uuid = "GPU-" + std::to_string(i);
    m.index = i;
    m.mode = i == 1 && gpu1_mps ? core::SharingMode::kMps : core::SharingMode::kVgpu;
    m.replicas = m.mode == core::SharingMode::kMps ? 2 : 0;
    modes.gpus.push_back(m);
  }
  return modes;
}

TEST(MpsNodeTest, StartsTheDaemonsOfMpsGpusAndFollowsModeChanges) {
  ::tessera::testing::TempDir dir{"mps-node"};
  NodeConfig config;
  config.mps_root = dir.path() + "/mps";
  config.monitor_interval_ms = 60000;  // no check during the test
  auto fake = std::make_unique<FakeControl>();
  FakeControl* control = fake.get();
  std::vector<core::Gpu> discovered(2);
  for (int i = 0; i < 2; ++i) {
    discovered[i].uuid = "GPU-" + std::to_string(i);
    discovered[i].index = i;
    discovered[i].memory_mib = 40960;
  }
  MpsNode node(
      config, nullptr, [] { return std::string("region"); }, std::move(fake));
  node.Start(Modes(true), discovered);
  const std::string pipe = PipeDirectoryOf(config.mps_root, "GPU-1");
  ASSERT_NE(control->LiveDaemonPid(pipe), 0);
  EXPECT_EQ(control->daemons[pipe].percentage, "50.0");  // one of two replicas
  EXPECT_EQ(control->daemons[pipe].pinned, "20480M");
  EXPECT_EQ(control->LiveDaemonPid(PipeDirectoryOf(config.mps_root, "GPU-0")), 0);
  EXPECT_NE(node.Metrics().find("tessera_mps_daemon_up{gpu=\"1\",uuid=\"GPU-1\"} 1"), std::string::npos);

  node.ModesChanged(Modes(false));  // GPU 1 left mps mode
  EXPECT_EQ(control->LiveDaemonPid(pipe), 0);
  node.ModesChanged(Modes(true));
  EXPECT_NE(control->LiveDaemonPid(pipe), 0);
  node.Stop();
  EXPECT_EQ(control->LiveDaemonPid(pipe), 0);
}

}  // namespace
}  // namespace tessera::node::mps
