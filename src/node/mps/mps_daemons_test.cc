#include "node/mps/mps_daemons.h"

#include "node/mps/fake_control_program.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

namespace tessera::node::mps {
namespace {

class MpsDaemonsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("mps-daemons-test-" + std::to_string(::getpid()));
    auto fake = std::make_unique<FakeControl>();
    fake_ = fake.get();
    MpsDaemonsOptions options;
    options.root = root_.string();
    options.quit_wait = std::chrono::milliseconds(100);
    daemons_ =
        std::make_unique<MpsDaemons>(options, std::move(fake),
                                     [this](const std::string& type, const std::string& reason,
                                            const std::string&) { events_.push_back(type + " " + reason); });
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string Pipe(const std::string& uuid) const { return PipeDirectoryOf(root_.string(), uuid); }

  static MpsGpu Gpu(const std::string& uuid, int pct, int64_t pinned) {
    MpsGpu gpu;
    gpu.uuid = uuid;
    gpu.memory_mib = 81920;
    gpu.default_active_thread_percentage = pct;
    gpu.default_pinned_memory_mib = pinned;
    return gpu;
  }

  std::filesystem::path root_;
  FakeControl* fake_ = nullptr;
  std::unique_ptr<MpsDaemons> daemons_;
  std::vector<std::string> events_;
};

TEST(EqualSplitTest, SplitsThreadsAndMemoryLikeNvidiasSharingMps) {
  auto four = EqualSplit("GPU-a", 0, 81920, 4);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->default_active_thread_percentage, 25);
  EXPECT_EQ(four->default_pinned_memory_mib, 20480);
  auto three = EqualSplit("GPU-a", 0, 81920, 3);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->default_active_thread_percentage, 33);  // rounded down: never more than the GPU
  EXPECT_EQ(three->default_pinned_memory_mib, 27306);
  auto one = EqualSplit("GPU-a", 0, 81920, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->default_active_thread_percentage, 100);
  EXPECT_EQ(one->default_pinned_memory_mib, 81920);
}

TEST(EqualSplitTest, RefusesReplicasBelowOneAndSharesBelowOnePercent) {
  EXPECT_NE(EqualSplit("GPU-a", 0, 81920, 0).error().message.find("at least 1"), std::string::npos);
  EXPECT_FALSE(EqualSplit("GPU-a", 0, 81920, -2).ok());
  EXPECT_NE(EqualSplit("GPU-a", 0, 81920, 101).error().message.find("at most 100"), std::string::npos);
  EXPECT_TRUE(EqualSplit("GPU-a", 0, 81920, 100).ok());
}

TEST_F(MpsDaemonsTest, StartsOneDaemonPerGpuAndSetsDefaultsByDeviceIndex) {
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-a", 25, 20480), Gpu("GPU-b", 100, 0)}).ok());
  EXPECT_EQ(fake_->log[0], "start " + Pipe("GPU-a") + " GPU-a " + LogDirectoryOf(root_.string(), "GPU-a"));
  EXPECT_EQ(fake_->log[1], Pipe("GPU-a") + ": set_default_active_thread_percentage 25");
  // By index 0 (the daemon's only device), never by UUID.
  EXPECT_EQ(fake_->log[2], Pipe("GPU-a") + ": set_default_device_pinned_mem_limit 0 20480M");
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].percentage, "25.0");
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].pinned, "20480M");
  // No limit: none is set.
  EXPECT_EQ(fake_->daemons[Pipe("GPU-b")].pinned, "N/A");
  EXPECT_TRUE(std::filesystem::is_directory(Pipe("GPU-a")));
  EXPECT_TRUE(std::filesystem::is_directory(LogDirectoryOf(root_.string(), "GPU-b")));
  EXPECT_EQ(daemons_->PipeDirectory("GPU-a"), Pipe("GPU-a"));
  EXPECT_EQ(daemons_->PipeDirectory("GPU-c"), "");
  const std::string metrics = daemons_->Metrics();
  EXPECT_NE(metrics.find("tessera_mps_daemon_up{gpu=\"0\",uuid=\"GPU-a\"} 1"), std::string::npos) << metrics;
}

TEST_F(MpsDaemonsTest, RestartsADeadDaemonAndReportsIt) {
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-a", 30, 8192)}).ok());
  const int first = fake_->LiveDaemonPid(Pipe("GPU-a"));
  daemons_->Check();  // alive: nothing happens
  EXPECT_EQ(fake_->LiveDaemonPid(Pipe("GPU-a")), first);
  EXPECT_EQ(daemons_->Daemons()[0].restarts, 0);

  fake_->Kill(Pipe("GPU-a"));
  daemons_->Check();
  const int second = fake_->LiveDaemonPid(Pipe("GPU-a"));
  EXPECT_NE(second, 0);
  EXPECT_NE(second, first);
  // The new daemon got the defaults again.
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].percentage, "30.0");
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].pinned, "8192M");
  EXPECT_EQ(daemons_->Daemons()[0].restarts, 1);
  EXPECT_EQ(events_.back(), "Warning MpsDaemonRestarted");
  EXPECT_NE(daemons_->Metrics().find("tessera_mps_daemon_restarts_total{gpu=\"0\",uuid=\"GPU-a\"} 1"),
            std::string::npos);
}

TEST_F(MpsDaemonsTest, TheCheckingThreadRestartsADeadDaemon) {
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-a", 30, 0)}).ok());
  const int first = fake_->LiveDaemonPid(Pipe("GPU-a"));
  fake_->Kill(Pipe("GPU-a"));  // before the thread runs: the fake is not thread-safe
  daemons_->StartChecking(std::chrono::milliseconds(5));
  for (int i = 0; i < 5000 && daemons_->Daemons()[0].restarts == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  daemons_->StopAll();  // joins the thread before the fake and the events are read
  EXPECT_NE(std::find(events_.begin(), events_.end(), "Warning MpsDaemonRestarted"), events_.end());
  EXPECT_EQ(fake_->LiveDaemonPid(Pipe("GPU-a")), 0);  // and quit it
  EXPECT_NE(std::find(fake_->log.begin(), fake_->log.end(), Pipe("GPU-a") + ": quit"), fake_->log.end());
  EXPECT_NE(first, 0);
}

TEST_F(MpsDaemonsTest, AFailedStartIsReportedAndRetriedByCheck) {
  fake_->fail_start = true;
  auto status = daemons_->Apply({Gpu("GPU-a", 50, 0)});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("cannot start its MPS control daemon"), std::string::npos);
  EXPECT_EQ(events_.back(), "Warning MpsDaemonFailed");
  EXPECT_NE(daemons_->Metrics().find("tessera_mps_daemon_up{gpu=\"0\",uuid=\"GPU-a\"} 0"), std::string::npos);
  fake_->fail_start = false;
  daemons_->Check();
  EXPECT_NE(fake_->LiveDaemonPid(Pipe("GPU-a")), 0);
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].percentage, "50.0");
  EXPECT_EQ(daemons_->Daemons()[0].error, "");
}

TEST_F(MpsDaemonsTest, ADefaultTheDaemonDoesNotTakeIsAnError) {
  fake_->ignore_percentage = true;
  auto status = daemons_->Apply({Gpu("GPU-a", 50, 0)});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("did not take active thread percentage 50"), std::string::npos)
      << status.error().message;
}

TEST_F(MpsDaemonsTest, QuitsTheDaemonOfAGpuThatLeavesMpsModeAndAtStopAll) {
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-a", 100, 0), Gpu("GPU-b", 100, 0)}).ok());
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-b", 100, 0)}).ok());
  EXPECT_EQ(fake_->LiveDaemonPid(Pipe("GPU-a")), 0);
  EXPECT_NE(std::find(fake_->log.begin(), fake_->log.end(), Pipe("GPU-a") + ": quit"), fake_->log.end());
  EXPECT_NE(fake_->LiveDaemonPid(Pipe("GPU-b")), 0);
  EXPECT_EQ(daemons_->PipeDirectory("GPU-a"), "");
  daemons_->StopAll();
  EXPECT_EQ(fake_->LiveDaemonPid(Pipe("GPU-b")), 0);
  EXPECT_TRUE(daemons_->Daemons().empty());
}

TEST_F(MpsDaemonsTest, NewDefaultsReachTheRunningDaemonWithoutARestart) {
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-a", 50, 0)}).ok());
  const int pid = fake_->LiveDaemonPid(Pipe("GPU-a"));
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-a", 25, 4096)}).ok());
  EXPECT_EQ(fake_->LiveDaemonPid(Pipe("GPU-a")), pid);
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].percentage, "25.0");
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].pinned, "4096M");
}

TEST_F(MpsDaemonsTest, AdoptsADaemonLeftRunning) {
  fake_->daemons[Pipe("GPU-a")] = FakeControl::Daemon{42};
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-a", 40, 0)}).ok());
  EXPECT_EQ(fake_->LiveDaemonPid(Pipe("GPU-a")), 42);
  for (const auto& line : fake_->log) EXPECT_NE(line.rfind("start ", 0), 0u) << line;
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].percentage, "40.0");
}

TEST_F(MpsDaemonsTest, BadInputIsRefusedAndChangesNothing) {
  ASSERT_TRUE(daemons_->Apply({Gpu("GPU-a", 50, 0)}).ok());
  const size_t commands = fake_->log.size();
  auto zero = daemons_->Apply({Gpu("GPU-a", 0, 0)});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("percentage 0 is not between 1 and 100"), std::string::npos);
  EXPECT_FALSE(daemons_->Apply({Gpu("GPU-a", 101, 0)}).ok());
  auto memory = daemons_->Apply({Gpu("GPU-a", 50, 90000)});
  ASSERT_FALSE(memory.ok());
  EXPECT_NE(memory.error().message.find("more than the GPU's 81920 MiB"), std::string::npos);
  auto twice = daemons_->Apply({Gpu("GPU-b", 50, 0), Gpu("GPU-b", 50, 0)});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message.find("listed twice"), std::string::npos);
  EXPECT_EQ(fake_->log.size(), commands);  // nothing sent, nothing started or quit
  EXPECT_EQ(fake_->daemons[Pipe("GPU-a")].percentage, "50.0");
  EXPECT_EQ(daemons_->Daemons().size(), 1u);
}

}  // namespace
}  // namespace tessera::node::mps
