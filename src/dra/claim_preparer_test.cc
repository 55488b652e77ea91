#include "dra/claim_preparer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <set>

#include "base/files.h"
#include "core/allocation_codec.h"
#include "dra/testing.h"

namespace tessera::dra {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kUid = "11111111-2222-3333-4444-555555555555";
constexpr const char* kShare = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
constexpr const char* kGpu0 = "GPU-00000000-0000-0000-0000-000000000000";
constexpr const char* kGpu1 = "GPU-11111111-0000-0000-0000-000000000000";

class ClaimPreparerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dra-preparer-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    config_.node_name = "node-a";
    config_.state_dir = root_ + "/state";
    config_.cdi_dir = root_ + "/cdi";
    config_.region_host_dir = root_ + "/regions";
    config_.libvgpu_host_path = root_ + "/lib/libvgpu.so";
    config_.device_nodes = false;
    gpus_ = {Gpu(0, kGpu0), Gpu(1, kGpu1)};
  }
  void TearDown() override { fs::remove_all(root_); }

  static core::Gpu Gpu(int index, const char* uuid) {
    core::Gpu g;
    g.index = index;
    g.uuid = uuid;
    g.model = "NVIDIA A100-SXM4-80GB";
    g.memory_mib = 81920;
    return g;
  }

  // A claim allocated on this node's `device`, as kube-scheduler writes it.
  static Json Claim(const std::string& name, const std::string& uid, Json results,
                    Json config = Json::array()) {
    return {{"metadata", {{"namespace", "default"}, {"name", name}, {"uid", uid}}},
            {"status", {{"allocation", {{"devices", {{"results", results}, {"config", config}}}}}}}};
  }
  static Json Share(const std::string& device, const std::string& memory, const std::string& cores,
                    const std::string& share = kShare) {
    return {{"request", "gpu"}, {"driver", "gpu.tessera.io"},
            {"pool", "node-a"}, {"device", device},
            {"shareID", share}, {"consumedCapacity", {{"memory", memory}, {"cores", cores}}}};
  }

  std::unique_ptr<ClaimPreparer> MakePreparer() {
    PreparerDeps deps;
    deps.read_claim = [this](const std::string& ns, const std::string& name) -> Result<std::optional<Json>> {
      ++reads_;
      if (api_down_) return Error{"connection refused"};
      auto it = claims_.find(ns + "/" + name);
      if (it == claims_.end()) return std::optional<Json>();
      return std::optional<Json>(it->second);
    };
    deps.read_pod = [this](const std::string& ns, const std::string& name) -> Result<std::optional<Json>> {
      auto it = pods_.find(ns + "/" + name);
      if (it == pods_.end()) return std::optional<Json>();
      return std::optional<Json>(it->second);
    };
    deps.gpus = [this] { return gpus_; };
    deps.on_step = [this](std::string_view step, bool& crash) -> Status {
      if (on_step_) return on_step_(step, crash);
      return Status::Ok();
    };
    auto p = std::make_unique<ClaimPreparer>(config_, deps);
    EXPECT_TRUE(p->Recover().ok());
    return p;
  }

  void Add(const Json& claim) { claims_["default/" + claim["metadata"]["name"].get<std::string>()] = claim; }

  // Files under the root other than the state directory's claims/ folder.
  std::vector<std::string> Leftovers() const {
    std::vector<std::string> out;
    for (const auto& dir : {config_.cdi_dir, config_.region_host_dir, config_.state_dir + "/claims"}) {
      if (!fs::exists(dir)) continue;
      for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
    }
    return out;
  }

  std::string root_;
  DraConfig config_;
  std::vector<core::Gpu> gpus_;
  std::map<std::string, Json> claims_;
  std::map<std::string, Json> pods_;  // by "namespace/name"
  bool api_down_ = false;
  int reads_ = 0;
  std::function<Status(std::string_view, bool&)> on_step_;
};

TEST_F(ClaimPreparerTest, ShareBecomesTheLimitsOfTheContainer) {
  Add(Claim("a", kUid, Json::array({Share("gpu-0", "10Gi", "30")})));
  auto p = MakePreparer();
  auto prepared = p->Prepare("default", "a", kUid);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  ASSERT_EQ(prepared->devices.size(), 1u);
  const auto& d = prepared->devices[0];
  EXPECT_EQ(d.uuid, kGpu0);
  EXPECT_EQ(d.memory_mib, 10240);
  EXPECT_EQ(d.cores, 30);
  EXPECT_EQ(CdiDeviceId(d), std::string("tessera.io/gpu=") + kUid + "-gpu-0-" + kShare);

  // The limits file holds exactly the share.
  auto limits = files::Read(prepared->limits_dir + "/limits.json");
  ASSERT_TRUE(limits.ok());
  auto payload = core::DecodeAllocation(*limits);
  ASSERT_TRUE(payload.ok()) << *limits;
  ASSERT_EQ(payload->containers.size(), 1u);
  ASSERT_EQ(payload->containers[0].devices.size(), 1u);
  EXPECT_EQ(payload->containers[0].devices[0].memory_mib, 10240);
  EXPECT_EQ(payload->containers[0].devices[0].cores, 30);

  // The CDI spec on disk: kind, device, mounts of libvgpu, preload, region, limits.
  auto text = files::Read(p->CdiSpecPath(kUid));
  ASSERT_TRUE(text.ok());
  const Json spec = Json::parse(*text);
  EXPECT_EQ(spec["kind"], "tessera.io/gpu");
  EXPECT_EQ(spec["cdiVersion"], "0.6.0");
  EXPECT_EQ(spec["devices"][0]["name"], d.cdi_name);
  std::map<std::string, Json> mounts;
  for (const auto& m : spec["containerEdits"]["mounts"]) mounts[m["containerPath"]] = m;
  ASSERT_EQ(mounts.count("/etc/ld.so.preload"), 1u);
  EXPECT_EQ(mounts["/run/tessera/limits"]["hostPath"], prepared->limits_dir);
  EXPECT_EQ(mounts["/run/tessera/limits"]["options"][0], "ro");
  EXPECT_EQ(mounts["/tmp/tessera"]["hostPath"], prepared->region_dir);
  EXPECT_EQ(mounts["/tmp/tessera"]["options"][0], "rw");
  EXPECT_EQ(mounts[config_.libvgpu_container_path]["hostPath"], config_.libvgpu_host_path);
  bool has_allocation = false;
  for (const auto& e : spec["containerEdits"]["env"]) {
    if (e.get<std::string>() == "TESSERA_ALLOCATION=" + *limits) has_allocation = true;
  }
  EXPECT_TRUE(has_allocation) << spec.dump(2);
}

TEST_F(ClaimPreparerTest, PrepareIsIdempotentAndSurvivesARestart) {
  Add(Claim("a", kUid, Json::array({Share("gpu-0", "10Gi", "30")})));
  auto first = MakePreparer()->Prepare("default", "a", kUid);
  ASSERT_TRUE(first.ok());
  const int reads = reads_;
  auto restarted = MakePreparer();
  auto again = restarted->Prepare("default", "a", kUid);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(reads_, reads) << "a checkpointed claim is answered without the API";

  // A lost CDI spec (tmpfs after a reboot) is written again at start.
  fs::remove(restarted->CdiSpecPath(kUid));
  auto third = MakePreparer();
  EXPECT_TRUE(fs::exists(third->CdiSpecPath(kUid)));
  ASSERT_TRUE(third->Unprepare(kUid).ok());
  EXPECT_TRUE(Leftovers().empty());
  EXPECT_TRUE(third->Unprepare(kUid).ok()) << "unprepare is idempotent";
}

TEST_F(ClaimPreparerTest, CrashBeforeTheCheckpointLeavesNothingAfterRestart) {
  Add(Claim("a", kUid, Json::array({Share("gpu-0", "10Gi", "30")})));
  on_step_ = [](std::string_view step, bool& crash) -> Status {
    if (step != "written") return Status::Ok();
    crash = true;
    return Error{"killed"};
  };
  auto p = MakePreparer();
  ASSERT_FALSE(p->Prepare("default", "a", kUid).ok());
  EXPECT_TRUE(fs::exists(p->CdiSpecPath(kUid))) << "the crash left the spec behind";
  on_step_ = nullptr;
  auto restarted = MakePreparer();  // Recover() removes what has no checkpoint
  EXPECT_TRUE(Leftovers().empty());
  auto prepared = restarted->Prepare("default", "a", kUid);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  EXPECT_TRUE(fs::exists(restarted->CdiSpecPath(kUid)));
}

TEST_F(ClaimPreparerTest, TwoClaimsShareAGpuUpToItsCapacity) {
  const std::string uid2 = "22222222-2222-3333-4444-555555555555";
  const std::string uid3 = "33333333-2222-3333-4444-555555555555";
  Add(Claim("a", kUid, Json::array({Share("gpu-0", "40Gi", "50")})));
  Add(Claim("b", uid2, Json::array({Share("gpu-0", "40Gi", "50", "bbbbbbbb-bbbb-cccc-dddd-eeeeeeeeeeee")})));
  Add(Claim("c", uid3, Json::array({Share("gpu-0", "1Gi", "1", "cccccccc-bbbb-cccc-dddd-eeeeeeeeeeee")})));
  auto p = MakePreparer();
  ASSERT_TRUE(p->Prepare("default", "a", kUid).ok());
  ASSERT_TRUE(p->Prepare("default", "b", uid2).ok());
  auto over = p->Prepare("default", "c", uid3);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("over-committed"), std::string::npos) << over.error().message;
  EXPECT_FALSE(fs::exists(p->CdiSpecPath(uid3)));
  ASSERT_TRUE(p->Unprepare(uid2).ok());
  EXPECT_TRUE(p->Prepare("default", "c", uid3).ok()) << "room again once b is gone";
}

TEST_F(ClaimPreparerTest, BadInputIsRefusedWithoutLeavingFiles) {
  struct Case {
    const char* what;
    Json claim;
    std::string error;
  };
  Json foreign_pool = Share("gpu-0", "10Gi", "30");
  foreign_pool["pool"] = "node-b";
  const Json bad_config = Json::array(
      {{{"source", "FromClaim"},
        {"opaque",
         {{"driver", "gpu.tessera.io"},
          {"parameters", {{"apiVersion", "tessera.io/v1alpha1"}, {"kind", "GpuConfig"}, {"priorty", 1}}}}}}});
  const std::vector<Case> cases = {
      {"device not on this node", Claim("a", kUid, Json::array({Share("gpu-7", "10Gi", "30")})),
       "device 'gpu-7' of pool 'node-a' is not on this node (it has gpu-0, gpu-1)"},
      {"pool of another node", Claim("a", kUid, Json::array({foreign_pool})),
       "allocated from pool 'node-b', but this node's pool is 'node-a'"},
      {"memory over the GPU's", Claim("a", kUid, Json::array({Share("gpu-0", "90Gi", "30")})),
       "consumed memory 92160 MiB is more than the GPU's 81920 MiB"},
      {"cores over 100", Claim("a", kUid, Json::array({Share("gpu-0", "10Gi", "130")})),
       "consumed cores 130 are more than the GPU's 100"},
      {"malformed quantity", Claim("a", kUid, Json::array({Share("gpu-0", "ten", "30")})),
       "consumedCapacity memory of device 'gpu-0'"},
      {"malformed opaque config", Claim("a", kUid, Json::array({Share("gpu-0", "10Gi", "30")}), bad_config),
       "invalid opaque config #1 (FromClaim) for gpu.tessera.io: unknown field 'priorty'"},
      {"not allocated", Json{{"metadata", {{"namespace", "default"}, {"name", "a"}, {"uid", kUid}}}},
       "the claim is not allocated"},
      {"UID of another claim", Claim("a", "99999999-2222-3333-4444-555555555555", Json::array()),
       "has UID 99999999-2222-3333-4444-555555555555, not " + std::string(kUid)},
  };
  for (const auto& c : cases) {
    claims_.clear();
    Add(c.claim);
    auto p = MakePreparer();
    auto prepared = p->Prepare("default", "a", kUid);
    ASSERT_FALSE(prepared.ok()) << c.what;
    EXPECT_NE(prepared.error().message.find(c.error), std::string::npos)
        << c.what << ": " << prepared.error().message;
    EXPECT_TRUE(Leftovers().empty()) << c.what;
  }
  claims_.clear();
  auto missing = MakePreparer()->Prepare("default", "a", kUid);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("does not exist"), std::string::npos);
  api_down_ = true;
  auto down = MakePreparer()->Prepare("default", "a", kUid);
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.error().message.find("connection refused"), std::string::npos);
  EXPECT_FALSE(MakePreparer()->Prepare("default", "a", "../../etc").ok());
  EXPECT_TRUE(Leftovers().empty());
}

TEST_F(ClaimPreparerTest, ClaimDeletedWhileBeingPreparedIsNotCommitted) {
  Add(Claim("a", kUid, Json::array({Share("gpu-0", "10Gi", "30")})));
  on_step_ = [this](std::string_view step, bool&) -> Status {
    if (step == "written") claims_.clear();  // deleted between the two reads
    return Status::Ok();
  };
  auto p = MakePreparer();
  auto prepared = p->Prepare("default", "a", kUid);
  ASSERT_FALSE(prepared.ok());
  EXPECT_NE(prepared.error().message.find("was deleted while it was being prepared"), std::string::npos)
      << prepared.error().message;
  EXPECT_TRUE(Leftovers().empty());
  EXPECT_TRUE(p->Prepared().empty());
}

TEST_F(ClaimPreparerTest, OpaqueConfigSetsTheEnvironmentClassFirstClaimWins) {
  auto config = [](const char* source, Json params) {
    params["apiVersion"] = "tessera.io/v1alpha1";
    params["kind"] = "GpuConfig";
    return Json{{"source", source}, {"opaque", {{"driver", "gpu.tessera.io"}, {"parameters", params}}}};
  };
  Add(Claim("a", kUid, Json::array({Share("gpu-0", "10Gi", "30")}),
            Json::array({config("FromClass", {{"computePolicy", "force"}, {"priority", 1}}),
                         config("FromClaim", {{"priority", 0}, {"oversubscription", true}}),
                         Json{{"source", "FromClaim"},
                              {"opaque", {{"driver", "other.example.com"}, {"parameters", {{"x", 1}}}}}}})));
  auto prepared = MakePreparer()->Prepare("default", "a", kUid);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  std::set<std::string> env;
  for (const auto& e : prepared->cdi_spec["containerEdits"]["env"]) env.insert(e.get<std::string>());
  EXPECT_EQ(env.count("GPU_CORE_UTILIZATION_POLICY=force"), 1u);
  EXPECT_EQ(env.count("CUDA_TASK_PRIORITY=0"), 1u);
  EXPECT_EQ(env.count("CUDA_OVERSUBSCRIBE=true"), 1u);
}

TEST_F(ClaimPreparerTest, WholeGpuResultIsUnlimitedAndExclusive) {
  const std::string uid2 = "22222222-2222-3333-4444-555555555555";
  Json whole = {{"request", "gpu"}, {"driver", "gpu.tessera.io"}, {"pool", "node-a"}, {"device", "gpu-1"}};
  Add(Claim("a", kUid, Json::array({whole})));
  Add(Claim("b", uid2, Json::array({Share("gpu-1", "1Gi", "10")})));
  auto p = MakePreparer();
  auto prepared = p->Prepare("default", "a", kUid);
  ASSERT_TRUE(prepared.ok());
  EXPECT_EQ(prepared->devices[0].memory_mib, 0);
  EXPECT_EQ(prepared->devices[0].cores, 0);
  auto second = p->Prepare("default", "b", uid2);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find("held whole"), std::string::npos) << second.error().message;
}

TEST_F(ClaimPreparerTest, OtherDriversResultsAreNotOurs) {
  Json other = Share("gpu-0", "10Gi", "30");
  other["driver"] = "gpu.nvidia.com";
  Add(Claim("a", kUid, Json::array({other})));
  auto prepared = MakePreparer()->Prepare("default", "a", kUid);
  ASSERT_TRUE(prepared.ok());
  EXPECT_TRUE(prepared->devices.empty());
  EXPECT_TRUE(Leftovers().empty());
}

// A pod "p" (UID "uid-p") whose containers reference the claims named
// directly: `containers` maps a container to its claims.
Json PodUsing(const std::vector<std::pair<std::string, std::vector<std::string>>>& containers) {
  Json pod = dra::testing::PodUsingClaims("default", "p", containers);
  pod["metadata"]["uid"] = "uid-p";
  return pod;
}

TEST_F(ClaimPreparerTest, TwoClaimsForOneContainerAreRefusedLeavingPreparedOnesAlone) {
  const std::string uid2 = "22222222-2222-3333-4444-555555555555";
  const std::string uid3 = "33333333-2222-3333-4444-555555555555";
  const Json reserved = Json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "uid-p"}}});
  Json a = Claim("a", kUid, Json::array({Share("gpu-0", "10Gi", "30")}));
  Json b =
      Claim("b", uid2, Json::array({Share("gpu-1", "10Gi", "30", "bbbbbbbb-bbbb-cccc-dddd-eeeeeeeeeeee")}));
  Json c =
      Claim("c", uid3, Json::array({Share("gpu-1", "1Gi", "10", "cccccccc-bbbb-cccc-dddd-eeeeeeeeeeee")}));
  a["status"]["reservedFor"] = b["status"]["reservedFor"] = c["status"]["reservedFor"] = reserved;
  Add(a);
  Add(b);
  Add(c);
  auto p = MakePreparer();
  // "c" was prepared while the pod gave it a container of its own.
  pods_["default/p"] = PodUsing({{"one", {"a"}}, {"two", {"b"}}, {"three", {"c"}}});
  ASSERT_TRUE(p->Prepare("default", "c", uid3).ok());
  const std::vector<std::string> before = Leftovers();

  pods_["default/p"] = PodUsing({{"main", {"a", "b", "c"}}});
  for (const auto& [name, uid] : {std::pair<std::string, std::string>{"a", kUid}, {"b", uid2}}) {
    auto refused = p->Prepare("default", name, uid);
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_EQ(
        refused.error().message,
        "pod default/p: container 'main' would get 3 claims of gpu.tessera.io (default/a, default/b, "
        "default/c), but a container may hold one: each mounts its limits at /run/tessera/limits, one "
        "would hide the other's; ask for the devices in one claim, or give each claim its own container");
  }
  EXPECT_EQ(Leftovers(), before) << "no CDI spec, region or checkpoint of a or b";
  auto kept = p->Prepare("default", "c", uid3);
  ASSERT_TRUE(kept.ok()) << "a prepared claim is answered from its checkpoint, untouched";
  EXPECT_EQ(p->Prepared().size(), 1u);

  // The same claims in containers of their own are prepared.
  pods_["default/p"] = PodUsing({{"one", {"a"}}, {"two", {"b"}}, {"three", {"c"}}});
  EXPECT_TRUE(p->Prepare("default", "a", kUid).ok());
  EXPECT_TRUE(p->Prepare("default", "b", uid2).ok());
}

TEST_F(ClaimPreparerTest, OneClaimWithTwoGpusMountsItsSliceOnce) {
  // The spec's own edits, which the runtime applies once per container
  // whichever of its devices the container gets: a claim's two GPUs do not
  // collide the way two claims would.
  Json a = Claim("a", kUid,
                 Json::array({Share("gpu-0", "10Gi", "30"),
                              Share("gpu-1", "10Gi", "30", "bbbbbbbb-bbbb-cccc-dddd-eeeeeeeeeeee")}));
  a["status"]["reservedFor"] = Json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "uid-p"}}});
  Add(a);
  pods_["default/p"] = PodUsing({{"main", {"a"}}});
  auto prepared = MakePreparer()->Prepare("default", "a", kUid);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  ASSERT_EQ(prepared->cdi_spec["devices"].size(), 2u);
  int limits_mounts = 0;
  for (const auto& m : prepared->cdi_spec["containerEdits"]["mounts"]) {
    if (m["containerPath"] == "/run/tessera/limits") ++limits_mounts;
  }
  EXPECT_EQ(limits_mounts, 1);
  for (const auto& d : prepared->cdi_spec["devices"]) EXPECT_FALSE(d["containerEdits"].contains("mounts"));
}

}  // namespace
}  // namespace tessera::dra
