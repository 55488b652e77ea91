#include "runner/ledger.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/testing.h"

namespace tessera::runner {
namespace {

namespace fs = std::filesystem;

class LedgerTest : public ::testing::Test {
 protected:
  LedgerEntry Entry(const std::string& id, ProcessId holder, int64_t mib) {
    LedgerEntry e;
    e.job_id = id;
    e.command = {"python", "train.py"};
    e.holders = {holder};
    e.slices.container = "main";
    e.slices.devices = {{"GPU-00000000-0000-0000-0000-000000000001", mib, 30}};
    e.region_path = dir_ + "/" + id + "/vgpu.region";
    e.started_unix = 1700000000;
    e.core_policy = "force";
    return e;
  }

  ::tessera::testing::TempDir tmp_{"tessera-ledger-test"};
  const std::string dir_ = tmp_.path();
};

TEST_F(LedgerTest, RoundTripsEntriesOfLiveProcesses) {
  SliceLedger ledger(dir_);
  auto entry = Entry("job-a", SelfProcessId(), 1024);
  ASSERT_TRUE(ledger
                  .Update([&](auto& entries) {
                    entries.push_back(entry);
                    return Status::Ok();
                  })
                  .ok());
  auto listed = ledger.List();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0], entry);
}

TEST_F(LedgerTest, ReadsEntriesWrittenBeforeTheCorePolicyWasRecorded) {
  const ProcessId self = SelfProcessId();
  {
    std::ofstream(dir_ + "/ledger.json")
        << R"({"version":1,"jobs":[{"jobId":"job-old","command":["x"],"holders":[{"pid":)" << self.pid
        << R"(,"startTicks":)" << self.start_ticks
        << R"(}],"container":"job","devices":[{"uuid":"GPU-1","memoryMiB":100,"cores":30}],)"
        << R"("region":"/nonexistent","started":1700000000}]})";
  }
  SliceLedger ledger(dir_);
  auto listed = ledger.List();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].job_id, "job-old");
  EXPECT_EQ((*listed)[0].core_policy, "");
}

TEST_F(LedgerTest, DropsEntriesWhoseHoldersAreGone) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  auto id = LookupProcessId(child);  // may already have exited; then use a fake start time
  ProcessId dead = id.ok() ? *id : ProcessId{child, 1};
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(IsAlive(dead));

  SliceLedger ledger(dir_);
  ASSERT_TRUE(ledger
                  .Update([&](auto& entries) {
                    entries.push_back(Entry("job-dead", dead, 2048));
                    entries.push_back(Entry("job-live", SelfProcessId(), 1024));
                    return Status::Ok();
                  })
                  .ok());
  auto listed = ledger.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].job_id, "job-live");
}

TEST_F(LedgerTest, PidReuseIsNotMistakenForTheHolder) {
  ProcessId self = SelfProcessId();
  ProcessId impostor{self.pid, self.start_ticks + 1};
  EXPECT_TRUE(IsAlive(self));
  EXPECT_FALSE(IsAlive(impostor));
}

TEST_F(LedgerTest, FailedMutationWritesNothing) {
  SliceLedger ledger(dir_);
  ASSERT_TRUE(ledger
                  .Update([&](auto& entries) {
                    entries.push_back(Entry("job-a", SelfProcessId(), 1024));
                    return Status::Ok();
                  })
                  .ok());
  auto st = ledger.Update([&](auto& entries) {
    entries.clear();
    return Status(Error{"does not fit"});
  });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "does not fit");
  EXPECT_EQ(ledger.List()->size(), 1u);
}

TEST_F(LedgerTest, CorruptFileIsRefusedAndLeftUntouched) {
  const std::string path = dir_ + "/ledger.json";
  for (const std::string& garbage :
       {std::string("{\"version\":1,\"jobs\":[{\"jobId\":"), std::string("[1,2,3]"),
        std::string("{\"version\":1,\"jobs\":[{\"jobId\":\"x\"}]}")}) {
    { std::ofstream(path) << garbage; }
    SliceLedger ledger(dir_);
    auto listed = ledger.List();
    ASSERT_FALSE(listed.ok()) << garbage;
    EXPECT_NE(listed.error().message.find("corrupt"), std::string::npos) << listed.error().message;
    EXPECT_NE(listed.error().message.find(path), std::string::npos);
    std::ifstream in(path);
    std::string now((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(now, garbage);
  }
}

TEST_F(LedgerTest, NewerVersionIsRefused) {
  { std::ofstream(dir_ + "/ledger.json") << R"({"version":2,"jobs":[]})"; }
  SliceLedger ledger(dir_);
  auto listed = ledger.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find("version 2"), std::string::npos);
}

// Many processes race to take 1 GiB slices of an 8 GiB budget: exactly 8 win.
TEST_F(LedgerTest, ConcurrentWritersNeverOvercommit) {
  constexpr int kProcs = 16;
  std::vector<pid_t> kids;
  for (int i = 0; i < kProcs; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      SliceLedger ledger(dir_);
      auto st = ledger.Update([&](std::vector<LedgerEntry>& entries) {
        int64_t used = 0;
        for (const auto& e : entries) used += e.slices.devices[0].memory_mib;
        if (used + 1024 > 8192) return Status(Error{"full"});
        // The holder is the test process itself so the entry stays live.
        LedgerEntry e;
        e.job_id = "job-" + std::to_string(i);
        e.holders = {
            {getppid(), LookupProcessId(getppid()).ok() ? LookupProcessId(getppid())->start_ticks : 0}};
        e.slices.container = "main";
        e.slices.devices = {{"GPU-00000000-0000-0000-0000-000000000001", 1024, 10}};
        entries.push_back(e);
        return Status::Ok();
      });
      _exit(st.ok() ? 0 : 1);
    }
    kids.push_back(pid);
  }
  int winners = 0;
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(k, &status, 0), k);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 0) ++winners;
  }
  EXPECT_EQ(winners, 8);
  SliceLedger ledger(dir_);
  EXPECT_EQ(ledger.List()->size(), 8u);
}

}  // namespace
}  // namespace tessera::runner
