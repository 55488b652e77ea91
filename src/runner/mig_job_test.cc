#include "runner/mig_job.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "base/testing.h"
#include "core/mig/geometry.h"
#include "runner/run_job.h"

namespace tessera::runner {
namespace {

namespace mig = core::mig;

// A MigDriver with NVML's rules for what tessera run does: instances only
// while MIG mode is on, at one of the profile's starts, never overlapping;
// destroying an instance a process uses fails.
class FakeMigDriver final : public host::MigDriver {
 public:
  struct Gpu {
    host::MigGpuState state;
    const mig::Model* model = nullptr;
  };

  // An A100-80GB (MIG mode `on`) or, with `model_key` "L4", a GPU without MIG.
  int AddGpu(const std::string& model_key, bool on, bool pending = false) {
    Gpu g;
    g.state.index = static_cast<int>(gpus_.size());
    g.state.uuid = "GPU-" + std::to_string(g.state.index) + "aaaaaa-0000-0000-0000-000000000000";
    if (model_key == "L4") {
      g.state.name = "NVIDIA L4";
      g.state.memory_mib = 23034;
    } else {
      g.model = mig::FindModel(model_key);
      g.state.name = model_key == "A30-24GB" ? "NVIDIA A30" : "NVIDIA A100-SXM4-80GB";
      g.state.memory_mib = 81920;
      g.state.pci_device_id = g.model->pci_device_ids.at(0);
      g.state.mig_capable = true;
      g.state.mig_enabled = on;
      g.state.mig_pending = pending;
    }
    gpus_.push_back(g);
    return g.state.index;
  }

  Result<std::vector<host::MigGpuState>> List() override {
    ++lists;
    std::vector<host::MigGpuState> out;
    for (const auto& g : gpus_) out.push_back(g.state);
    return out;
  }
  Result<host::MigModeChange> SetMigMode(int, bool) override { return Error{"not used"}; }

  Result<host::MigInstanceState> CreateInstance(int gpu_index, uint32_t profile_id, uint32_t start) override {
    if (!create_error.empty()) return Error{create_error};
    Gpu& g = gpus_.at(static_cast<size_t>(gpu_index));
    if (!g.state.mig_enabled) return Error{"MIG mode is off"};
    auto p = std::find_if(g.model->profiles.begin(), g.model->profiles.end(),
                          [&](const mig::Profile& q) { return q.id == profile_id; });
    if (p == g.model->profiles.end()) return Error{"no such profile"};
    std::vector<mig::Instance> existing;
    for (const auto& i : g.state.instances) existing.push_back({ProfileName(g, i.profile_id), i.start});
    if (!mig::CanAdd(*g.model, existing, {p->name, start})) return Error{"overlaps an instance"};
    host::MigInstanceState i;
    i.gpu_instance_id = next_id_++;
    i.compute_instance_id = 0;
    i.profile_id = profile_id;
    i.start = start;
    i.size = p->memory_slices;
    i.has_compute_instance = true;
    i.mig_uuid = "MIG-fake-" + std::to_string(i.gpu_instance_id);
    i.memory_mib = p->memory_mib;
    i.sm_count = p->sm_count;
    g.state.instances.push_back(i);
    return i;
  }

  Status DestroyInstance(int gpu_index, uint32_t gpu_instance_id) override {
    ++destroys;
    if (busy.count(gpu_instance_id) != 0) return Error{"in use by a process"};
    auto& list = gpus_.at(static_cast<size_t>(gpu_index)).state.instances;
    std::erase_if(list, [&](const auto& i) { return i.gpu_instance_id == gpu_instance_id; });
    return Status::Ok();
  }
  Status StartXidWatch(const std::vector<std::string>&, std::function<void(const host::MigXid&)>) override {
    return Status::Ok();
  }
  void StopXidWatch() override {}

  const std::vector<host::MigInstanceState>& instances(int gpu) const {
    return gpus_.at(static_cast<size_t>(gpu)).state.instances;
  }
  std::string uuid(int gpu) const { return gpus_.at(static_cast<size_t>(gpu)).state.uuid; }

  std::string create_error;
  std::set<uint32_t> busy;
  int lists = 0, destroys = 0;

 private:
  static std::string ProfileName(const Gpu& g, uint32_t id) {
    for (const auto& p : g.model->profiles) {
      if (p.id == id) return p.name;
    }
    return "?";
  }
  std::vector<Gpu> gpus_;
  uint32_t next_id_ = 1;
};

class MigJobTest : public ::testing::Test {
 protected:
  Result<MigReservation> Reserve(const std::string& profile, std::optional<int> gpu = std::nullopt,
                                 bool simulated = false) {
    return ReserveMigInstance(ledger_, driver_, MigRequest{profile, gpu, simulated}, {"./infer"});
  }
  // Reserves and creates; the entry as recorded.
  LedgerEntry Run(const std::string& profile, std::optional<int> gpu = std::nullopt) {
    auto r = Reserve(profile, gpu);
    EXPECT_TRUE(r.ok() && r->entry) << (r.ok() ? r->refusal : r.error().message);
    if (!r.ok() || !r->entry) return {};
    auto created = CreateMigInstance(ledger_, driver_, *r->entry);
    EXPECT_TRUE(created.ok()) << created.error().message;
    return created.ok() ? *created : LedgerEntry{};
  }
  std::vector<LedgerEntry> Entries() {
    auto listed = ledger_.List();
    return listed.ok() ? *listed : std::vector<LedgerEntry>{};
  }
  // Makes the recorded runner of `job_id` a process that is gone.
  void KillRunnerOf(const std::string& job_id) {
    ASSERT_TRUE(ledger_
                    .Update([&](std::vector<LedgerEntry>& entries) {
                      for (auto& e : entries) {
                        if (e.job_id == job_id)
                          e.holders = {{e.holders[0].pid, e.holders[0].start_ticks + 1}};
                      }
                      return Status::Ok();
                    })
                    .ok());
  }

  ::tessera::testing::TempDir tmp_{"tessera-migjob-test"};
  SliceLedger ledger_{tmp_.path()};
  FakeMigDriver driver_;
};

TEST_F(MigJobTest, CreatesTheInstanceRecordsItAndRemovesItAfter) {
  const int gpu = driver_.AddGpu("A100-80GB", true);
  const LedgerEntry e = Run("1g.10gb");
  ASSERT_TRUE(e.mig);
  ASSERT_EQ(driver_.instances(gpu).size(), 1u);
  const auto& made = driver_.instances(gpu)[0];
  EXPECT_EQ(made.profile_id, 19u);  // 1g.10gb on the A100-80GB
  EXPECT_EQ(e.mig->start, made.start);
  EXPECT_EQ(e.mig->parent_uuid, driver_.uuid(gpu));
  EXPECT_EQ(e.mig->mig_uuid, made.mig_uuid);
  EXPECT_EQ(e.mig->memory_mib, 9728u);
  EXPECT_EQ(e.mig->sm_count, 14u);
  EXPECT_TRUE(e.mig->created);
  EXPECT_TRUE(e.slices.devices.empty());  // no slice: nothing for slice placement to count
  auto entries = Entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0], e);  // the record survives the ledger file

  LocalGpus local;
  local.job_env["TESSERA_SIM_GPUS"] = "1xA100-80GB";
  const JobSpec spec = BuildMigJobSpec(e, local, {"./infer"});
  EXPECT_EQ(spec.set_env.at("CUDA_VISIBLE_DEVICES"), made.mig_uuid);
  EXPECT_EQ(spec.set_env.at("NVIDIA_VISIBLE_DEVICES"), made.mig_uuid);
  EXPECT_EQ(spec.set_env.at("TESSERA_SIM_GPUS"), "1xA100-80GB");
  EXPECT_EQ(spec.prepend_path_env.count("LD_PRELOAD"), 0u);  // the GPU isolates it, not libvgpu

  ASSERT_TRUE(ReleaseMigInstance(ledger_, driver_, e).ok());
  EXPECT_TRUE(driver_.instances(gpu).empty());
  EXPECT_TRUE(Entries().empty());
}

TEST_F(MigJobTest, PlacesBesideInstancesAndOtherRunnersReservations) {
  const int gpu = driver_.AddGpu("A100-80GB", true);
  ASSERT_TRUE(driver_.CreateInstance(gpu, 9, 0).ok());  // a 3g.40gb someone made: slices 0-3
  auto reserved = Reserve("1g.10gb");                   // another runner's, not created yet
  ASSERT_TRUE(reserved.ok() && reserved->entry);
  std::set<uint32_t> taken = {0, 1, 2, 3, reserved->entry->mig->start};
  EXPECT_EQ(taken.size(), 5u) << "the reservation overlaps the 3g.40gb";
  for (int i = 0; i < 2; ++i) {
    const LedgerEntry e = Run("1g.10gb");
    ASSERT_TRUE(e.mig);
    EXPECT_TRUE(taken.insert(e.mig->start).second) << "slice " << e.mig->start << " given twice";
  }
  // A 3g.40gb at 0-3 and 1g.10gb at 4, 5 and 6: no 1g placement is left (none starts at 7).
  auto full = Reserve("1g.10gb");
  ASSERT_TRUE(full.ok());
  EXPECT_FALSE(full->entry);
  EXPECT_NE(full->refusal.find("no GPU can take a 1g.10gb instance:"), std::string::npos) << full->refusal;
  EXPECT_NE(full->refusal.find("no free placement"), std::string::npos) << full->refusal;
  EXPECT_EQ(Entries().size(), 3u);
}

TEST_F(MigJobTest, UnknownProfileListsTheProfilesTheGpuHas) {
  driver_.AddGpu("A100-80GB", true);
  auto r = Reserve("1g.5gb");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->entry);
  EXPECT_NE(r->refusal.find("unknown MIG profile '1g.5gb'"), std::string::npos) << r->refusal;
  EXPECT_NE(r->refusal.find("1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),
            std::string::npos)
      << r->refusal;
  EXPECT_TRUE(Entries().empty());
  EXPECT_TRUE(driver_.instances(0).empty());
}

TEST_F(MigJobTest, NoMigCapableGpu) {
  driver_.AddGpu("L4", false);
  auto r = Reserve("1g.10gb");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->entry);
  EXPECT_EQ(r->refusal.rfind("no MIG-capable GPU on this machine:\n  #0 NVIDIA L4 (", 0), 0u) << r->refusal;
  EXPECT_NE(r->refusal.find("): not MIG-capable"), std::string::npos) << r->refusal;
  auto chosen = Reserve("1g.10gb", 0);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->refusal.rfind("GPU 0 has no MIG:", 0), 0u) << chosen->refusal;
  EXPECT_TRUE(Entries().empty());
}

TEST_F(MigJobTest, MigModeOffSaysHowToTurnItOn) {
  driver_.AddGpu("A100-80GB", false);
  auto real = Reserve("1g.10gb");
  ASSERT_TRUE(real.ok());
  EXPECT_FALSE(real->entry);
  EXPECT_EQ(real->refusal.rfind("no GPU with the profile 1g.10gb is in MIG mode:\n  #0 ", 0), 0u)
      << real->refusal;
  EXPECT_NE(
      real->refusal.find("MIG mode is off; turn it on with `sudo nvidia-smi -i 0 -mig 1`, then reset the "
                         "GPU (`sudo nvidia-smi -i 0 -r`"),
      std::string::npos)
      << real->refusal;
  auto simulated = Reserve("1g.10gb", std::nullopt, true);
  ASSERT_TRUE(simulated.ok());
  EXPECT_NE(simulated->refusal.find(
                "`tessera sim mig --gpu 0 on`, then reset the GPU (`tessera sim reset --gpu 0`"),
            std::string::npos)
      << simulated->refusal;
  EXPECT_TRUE(Entries().empty());

  FakeMigDriver pending;
  pending.AddGpu("A100-80GB", false, true);
  auto r = ReserveMigInstance(ledger_, pending, MigRequest{"1g.10gb", std::nullopt, true}, {"x"});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(
      r->refusal.find("MIG mode is off until the GPU is reset (the change is pending): `tessera sim reset "
                      "--gpu 0`"),
      std::string::npos)
      << r->refusal;
}

TEST_F(MigJobTest, GpuFlagChoosesTheGpuAndOtherwiseTheFullestWins) {
  driver_.AddGpu("A100-80GB", true);
  const int second = driver_.AddGpu("A100-80GB", true);
  ASSERT_TRUE(driver_.CreateInstance(second, 9, 4).ok());  // GPU 1 holds a 3g.40gb at 4
  EXPECT_EQ(Run("1g.10gb").mig->parent_uuid, driver_.uuid(second));
  EXPECT_EQ(Run("1g.10gb", 0).mig->parent_uuid, driver_.uuid(0));
  auto missing = Reserve("1g.10gb", 5);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->refusal, "--gpu 5: this machine has no such GPU (it has 2)");
  EXPECT_EQ(Entries().size(), 2u);
}

TEST_F(MigJobTest, ACrashedRunnersInstanceIsRemovedByTheNextRun) {
  const int gpu = driver_.AddGpu("A100-80GB", true);
  const LedgerEntry crashed = Run("1g.10gb");
  const LedgerEntry alive = Run("1g.10gb");
  auto reserved = Reserve("2g.20gb");  // a runner that died before it created its instance
  ASSERT_TRUE(reserved.ok() && reserved->entry);
  KillRunnerOf(crashed.job_id);
  KillRunnerOf(reserved->entry->job_id);
  ASSERT_EQ(driver_.instances(gpu).size(), 2u);

  // Listing keeps orphaned entries: their instances are still on the GPU.
  auto listed = Entries();
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(std::count_if(listed.begin(), listed.end(), IsOrphaned), 2);

  auto notes = CleanOrphanedInstances(ledger_, driver_);
  ASSERT_TRUE(notes.ok()) << notes.error().message;
  ASSERT_EQ(notes->size(), 1u);
  EXPECT_NE((*notes)[0].find("removed the 1g.10gb instance"), std::string::npos) << (*notes)[0];
  ASSERT_EQ(driver_.instances(gpu).size(), 1u);
  EXPECT_EQ(driver_.instances(gpu)[0].mig_uuid, alive.mig->mig_uuid);
  listed = Entries();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].job_id, alive.job_id);
}

TEST_F(MigJobTest, AnOrphanStillInUseStaysUntilItCanBeRemoved) {
  const int gpu = driver_.AddGpu("A100-80GB", true);
  const LedgerEntry crashed = Run("1g.10gb");
  KillRunnerOf(crashed.job_id);
  driver_.busy.insert(crashed.mig->gpu_instance_id);
  auto notes = CleanOrphanedInstances(ledger_, driver_);
  ASSERT_TRUE(notes.ok());
  ASSERT_EQ(notes->size(), 1u);
  EXPECT_NE((*notes)[0].find("cannot remove the 1g.10gb instance"), std::string::npos) << (*notes)[0];
  EXPECT_EQ(Entries().size(), 1u);
  driver_.busy.clear();
  ASSERT_TRUE(CleanOrphanedInstances(ledger_, driver_).ok());
  EXPECT_TRUE(Entries().empty());
  EXPECT_TRUE(driver_.instances(gpu).empty());
  // Nothing orphaned: the GPUs are not even listed.
  const int lists = driver_.lists;
  ASSERT_TRUE(CleanOrphanedInstances(ledger_, driver_).ok());
  EXPECT_EQ(driver_.lists, lists);
}

TEST_F(MigJobTest, AFailedCreateLeavesNoReservation) {
  const int gpu = driver_.AddGpu("A100-80GB", true);
  auto r = Reserve("3g.40gb");
  ASSERT_TRUE(r.ok() && r->entry);
  driver_.create_error = "NVML_ERROR_INSUFFICIENT_RESOURCES";
  auto created = CreateMigInstance(ledger_, driver_, *r->entry);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.error().message, "cannot create the 3g.40gb instance: NVML_ERROR_INSUFFICIENT_RESOURCES");
  EXPECT_TRUE(Entries().empty());
  EXPECT_TRUE(driver_.instances(gpu).empty());
}

TEST_F(MigJobTest, ReleaseThatCannotDestroyKeepsTheRecord) {
  driver_.AddGpu("A100-80GB", true);
  const LedgerEntry e = Run("1g.10gb");
  driver_.busy.insert(e.mig->gpu_instance_id);
  auto st = ReleaseMigInstance(ledger_, driver_, e);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("cannot remove the 1g.10gb instance MIG-fake-"), std::string::npos);
  EXPECT_EQ(Entries().size(), 1u);
}

TEST(MigFlags, SliceFlagsAreRefusedWithTheReason) {
  EXPECT_TRUE(CheckMigFlags(SliceRequest{}).ok());
  SliceRequest memory;
  ASSERT_TRUE(ParseGpuMemory("4000", memory).ok());
  auto st = CheckMigFlags(memory);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message.rfind("--mig cannot be combined with --gpumem: a MIG instance's memory and "
                                     "compute are fixed by its profile",
                                     0),
            0u)
      << st.error().message;
  SliceRequest percent;
  ASSERT_TRUE(ParseGpuMemory("50%", percent).ok());
  EXPECT_FALSE(CheckMigFlags(percent).ok());
  SliceRequest cores;
  cores.cores = 30;
  EXPECT_NE(CheckMigFlags(cores).error().message.find("--gpucores"), std::string::npos);
  SliceRequest gpus;
  gpus.gpus = 2;
  EXPECT_NE(CheckMigFlags(gpus).error().message.find("--gpus"), std::string::npos);
}

}  // namespace
}  // namespace tessera::runner
