#include "dra/mig_partitions.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "base/files.h"
#include "base/testing.h"
#include "dra/claim_preparer.h"
#include "dra/resource_slices.h"

namespace tessera::dra {
namespace {

using Json = nlohmann::json;

const core::mig::Model& A100() {
  return *core::mig::FindModel("A100-80GB");
}

MigGpu Mig(int index) {
  return {index, "GPU-0000000" + std::to_string(index) + "-0000-4000-8000-000000000000", &A100()};
}

core::Gpu Gpu(int index) {
  core::Gpu g;
  g.index = index;
  g.uuid = Mig(index).uuid;
  g.model = "NVIDIA A100-SXM4-80GB";
  g.memory_mib = 81920;
  g.mig_capable = true;
  return g;
}

TEST(MigPartitionsTest, NamesRoundTrip) {
  const auto* profile = A100().FindProfile("1g.10gb");
  ASSERT_NE(profile, nullptr);
  EXPECT_EQ(MigDeviceName(3, *profile, 6), "gpu-3-mig-1g10gb-19-6");
  auto ref = ParseMigDeviceName("gpu-3-mig-1g10gb-19-6");
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->gpu_index, 3);
  EXPECT_EQ(ref->profile_id, 19u);
  EXPECT_EQ(ref->start, 6u);
  for (const char* other :
       {"gpu-0", "gpu-x-mig-1g10gb-19-0", "gpu-0-mig-19-0", "gpu-0-mig-1g10gb-19-", "mig-1"}) {
    EXPECT_FALSE(ParseMigDeviceName(other).has_value()) << other;
  }
}

TEST(MigPartitionsTest, EveryPlacementConsumesItsSlices) {
  const Json set = MigCounterSet(Mig(0));
  EXPECT_EQ(set["name"], "gpu-0-counter-set");
  EXPECT_EQ(set["counters"].size(), 9u) << "8 memory slices and the compute slices";
  EXPECT_EQ(set["counters"]["compute-slices"]["value"], "7");
  const auto devices =
      MigDevices(Mig(0), {{"productName", {{"string", "NVIDIA A100-SXM4-80GB"}}}, {"index", {{"int", 0}}}});
  size_t expected = 0;
  for (const auto& p : A100().profiles) expected += p.media_extension ? 0 : p.starts.size();
  ASSERT_EQ(devices.size(), expected);
  std::map<std::string, Json> by_name;
  for (const auto& d : devices) by_name[d["name"]] = d;
  const Json& small = by_name.at("gpu-0-mig-1g10gb-19-6");
  EXPECT_EQ(small["attributes"]["type"]["string"], "mig");
  EXPECT_EQ(small["attributes"]["profile"]["string"], "1g.10gb");
  EXPECT_EQ(small["attributes"]["parentUUID"]["string"], Mig(0).uuid);
  EXPECT_EQ(small["attributes"]["productName"]["string"], "NVIDIA A100-SXM4-80GB");
  EXPECT_FALSE(small["attributes"].contains("index")) << "the parent's index is parentIndex";
  EXPECT_EQ(small["consumesCounters"][0]["counterSet"], "gpu-0-counter-set");
  EXPECT_EQ(small["consumesCounters"][0]["counters"],
            (Json{{"compute-slices", {{"value", "1"}}}, {"memory-slice-6", {{"value", "1"}}}}));
  const Json& whole = by_name.at("gpu-0-mig-7g80gb-0-0");
  EXPECT_EQ(whole["consumesCounters"][0]["counters"].size(), 9u);
  EXPECT_FALSE(whole.contains("allowMultipleAllocations"));
}

TEST(MigPartitionsTest, EightMigGpusMakeSeveralSlicesOfOnePool) {
  DraConfig config;
  config.node_name = "node-a";
  std::vector<core::Gpu> gpus;
  std::vector<MigGpu> mig;
  for (int i = 0; i < 8; ++i) {
    gpus.push_back(Gpu(i));
    mig.push_back(Mig(i));
  }
  gpus.push_back(Gpu(8));  // not MIG: a whole-GPU device
  auto pool = BuildPool(config, gpus, {}, mig);
  ASSERT_TRUE(pool.ok()) << pool.error().message;
  EXPECT_EQ(pool->counter_sets.size(), 8u);
  const auto slices = BuildResourceSlices(config, *pool, 1);
  size_t devices = 0, sets = 0;
  for (const auto& s : slices) {
    EXPECT_NE(s["spec"].contains("devices"), s["spec"].contains("sharedCounters")) << "one or the other";
    if (s["spec"].contains("devices")) {
      EXPECT_LE(s["spec"]["devices"].size(), 64u);
      devices += s["spec"]["devices"].size();
    } else {
      EXPECT_LE(s["spec"]["sharedCounters"].size(), 8u);
      sets += s["spec"]["sharedCounters"].size();
    }
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], static_cast<int64_t>(slices.size()));
  }
  EXPECT_EQ(devices, pool->devices.size());
  EXPECT_EQ(sets, 8u);
  EXPECT_EQ(pool->devices.front()["name"], "gpu-8") << "the GPU without MIG stays whole";
  EXPECT_GT(slices.size(), 3u);
}

TEST(MigPartitionsTest, SelectionParses) {
  std::vector<core::Gpu> gpus = {Gpu(0), Gpu(1)};
  gpus[1].mig_capable = false;
  EXPECT_EQ(*ParseMigGpus("none", gpus), std::vector<int>{});
  EXPECT_EQ(*ParseMigGpus("all", gpus), std::vector<int>{0});
  EXPECT_EQ(*ParseMigGpus("1,0,1", gpus), (std::vector<int>{1, 0}));
  EXPECT_FALSE(ParseMigGpus("0;1", gpus).ok());
}

// A MIG driver over a table, with real-looking MIG UUIDs (the limits payload
// checks them) and placements that must not overlap.
class TableMigDriver final : public host::MigDriver {
 public:
  TableMigDriver() {
    host::MigGpuState gpu;
    gpu.index = 0;
    gpu.uuid = Mig(0).uuid;
    gpu.name = "NVIDIA A100-SXM4-80GB";
    gpu.memory_mib = 81920;
    gpu.mig_capable = gpu.mig_enabled = true;
    gpus.push_back(gpu);
  }
  Result<std::vector<host::MigGpuState>> List() override { return gpus; }
  Result<host::MigModeChange> SetMigMode(int, bool) override { return host::MigModeChange{}; }
  Result<host::MigInstanceState> CreateInstance(int index, uint32_t profile_id, uint32_t start) override {
    const core::mig::Profile* profile = nullptr;
    for (const auto& p : A100().profiles) {
      if (p.id == profile_id) profile = &p;
    }
    std::vector<core::mig::Instance> existing;
    for (const auto& i : gpus[index].instances) {
      for (const auto& p : A100().profiles) {
        if (p.id == i.profile_id) existing.push_back({p.name, i.start});
      }
    }
    if (!core::mig::CanAdd(A100(), existing, {profile->name, start}))
      return Error{"NVML_ERROR_INSUFFICIENT_RESOURCES"};
    host::MigInstanceState made;
    made.gpu_instance_id = next_++;
    made.profile_id = profile_id;
    made.start = start;
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid), "MIG-%08u-0000-4000-8000-000000000000", made.gpu_instance_id);
    made.mig_uuid = uuid;
    gpus[index].instances.push_back(made);
    return made;
  }
  Status DestroyInstance(int index, uint32_t gi) override {
    std::erase_if(gpus[index].instances, [&](const auto& i) { return i.gpu_instance_id == gi; });
    ++destroys;
    return Status::Ok();
  }
  Status StartXidWatch(const std::vector<std::string>&, std::function<void(const host::MigXid&)>) override {
    return Status::Ok();
  }
  void StopXidWatch() override {}

  std::vector<host::MigGpuState> gpus;
  int destroys = 0;
  uint32_t next_ = 1;
};

class MigPrepareTest : public ::testing::Test {
 protected:
  std::unique_ptr<ClaimPreparer> MakePreparer() {
    DraConfig config;
    config.node_name = "node-a";
    config.state_dir = tmp_.Path("state");
    config.cdi_dir = tmp_.Path("cdi");
    config.region_host_dir = tmp_.Path("regions");
    config.device_nodes = false;
    PreparerDeps deps;
    deps.read_claim = [this](const std::string&, const std::string& name) -> Result<std::optional<Json>> {
      if (!claims_.count(name)) return std::optional<Json>();
      return std::optional<Json>(claims_.at(name));
    };
    deps.gpus = [] { return std::vector<core::Gpu>{Gpu(0), Gpu(1)}; };
    deps.mig = &driver_;
    deps.mig_gpus = [] { return std::vector<MigGpu>{Mig(0)}; };
    auto p = std::make_unique<ClaimPreparer>(config, deps);
    EXPECT_TRUE(p->Recover().ok());
    return p;
  }
  void Add(const std::string& name, const std::string& uid, const std::string& device) {
    Json claim = {{"metadata", {{"namespace", "team"}, {"name", name}, {"uid", uid}}}};
    claim["status"]["allocation"]["devices"]["results"] = Json::array(
        {{{"request", "mig"}, {"driver", "gpu.tessera.io"}, {"pool", "node-a"}, {"device", device}}});
    claims_[name] = claim;
  }

  testing::TempDir tmp_{"dra-mig"};
  TableMigDriver driver_;
  std::map<std::string, Json> claims_;
};

TEST_F(MigPrepareTest, PrepareMakesTheInstanceAndUnprepareDestroysIt) {
  const std::string uid = "10000000-0000-4000-8000-000000000001";
  Add("a", uid, "gpu-0-mig-3g40gb-9-4");
  auto p = MakePreparer();
  auto prepared = p->Prepare("team", "a", uid);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  ASSERT_EQ(driver_.gpus[0].instances.size(), 1u);
  const auto& instance = driver_.gpus[0].instances[0];
  EXPECT_EQ(instance.start, 4u);
  EXPECT_EQ(prepared->devices[0].uuid, instance.mig_uuid);
  bool visible = false;
  for (const auto& e : prepared->cdi_spec["containerEdits"]["env"]) {
    if (e == "NVIDIA_VISIBLE_DEVICES=" + instance.mig_uuid) visible = true;
  }
  EXPECT_TRUE(visible) << prepared->cdi_spec.dump(2);
  EXPECT_FALSE(prepared->cdi_spec["containerEdits"].contains("mounts")) << "no libvgpu in a MIG container";
  EXPECT_TRUE(prepared->region_dir.empty());
  // A restarted plugin keeps the instance its checkpoint holds.
  auto restarted = MakePreparer();
  EXPECT_EQ(driver_.gpus[0].instances.size(), 1u);
  ASSERT_TRUE(restarted->Unprepare(uid).ok());
  EXPECT_TRUE(driver_.gpus[0].instances.empty());
  EXPECT_TRUE(restarted->Unprepare(uid).ok());
}

TEST_F(MigPrepareTest, BadPartitionsAndTakenPlacementsLeaveNothing) {
  const std::string uid = "20000000-0000-4000-8000-000000000002";
  // The placement is taken (an instance another claim holds): NVML refuses.
  Add("held", "30000000-0000-4000-8000-000000000003", "gpu-0-mig-4g40gb-5-0");
  auto p = MakePreparer();
  ASSERT_TRUE(p->Prepare("team", "held", "30000000-0000-4000-8000-000000000003").ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gpu-0-mig-1g10gb-19-0", "cannot create the MIG instance for device 'gpu-0-mig-1g10gb-19-0'"},
      {"gpu-0-mig-1g10gb-19-7", "is no MIG partition the A100-80GB of GPU 0 can hold"},
      {"gpu-1-mig-1g10gb-19-0", "which tessera-dra does not manage in MIG mode on this node"},
      {"gpu-0", "is in MIG mode on this node"},
  };
  for (const auto& [device, error] : cases) {
    Add("a", uid, device);
    auto prepared = p->Prepare("team", "a", uid);
    ASSERT_FALSE(prepared.ok()) << device;
    EXPECT_NE(prepared.error().message.find(error), std::string::npos) << prepared.error().message;
    EXPECT_EQ(driver_.gpus[0].instances.size(), 1u) << device;
    EXPECT_FALSE(std::filesystem::exists(p->CdiSpecPath(uid))) << device;
  }
}

TEST_F(MigPrepareTest, AClaimHoldsPartitionsOrSharesNotBoth) {
  const std::string uid = "40000000-0000-4000-8000-000000000004";
  Add("mixed", uid, "gpu-0-mig-1g10gb-19-0");
  claims_["mixed"]["status"]["allocation"]["devices"]["results"].push_back(
      {{"request", "gpu"}, {"driver", "gpu.tessera.io"}, {"pool", "node-a"}, {"device", "gpu-1"}});
  auto prepared = MakePreparer()->Prepare("team", "mixed", uid);
  ASSERT_FALSE(prepared.ok());
  EXPECT_NE(prepared.error().message.find("MIG partitions and shared GPUs together"), std::string::npos)
      << prepared.error().message;
  EXPECT_TRUE(driver_.gpus[0].instances.empty());
}

TEST_F(MigPrepareTest, InstancesNoClaimHoldsAreDestroyedAtStart) {
  ASSERT_TRUE(driver_.CreateInstance(0, 19, 3).ok());  // left by a prepare killed before its checkpoint
  MakePreparer();
  EXPECT_TRUE(driver_.gpus[0].instances.empty());
  EXPECT_EQ(driver_.destroys, 1);
}

}  // namespace
}  // namespace tessera::dra
