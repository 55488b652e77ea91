#include "vgpu/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>

namespace tessera::vgpu {
namespace {

using Env = std::map<std::string, std::string>;

const char* lookup(void* ctx, const char* name) {
  auto* env = static_cast<Env*>(ctx);
  auto it = env->find(name);
  return it == env->end() ? nullptr : it->second.c_str();
}

Config load(Env env) {
  return load_config(&lookup, &env);
}

constexpr const char* kUuidA = "GPU-11111111-2222-3333-4444-555555555555";
constexpr const char* kUuidB = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

TEST(MemorySize, AcceptsHamiSuffixes) {
  uint64_t b = 0;
  ASSERT_TRUE(parse_memory_size("3000", &b));
  EXPECT_EQ(b, 3000u);
  ASSERT_TRUE(parse_memory_size("512k", &b));
  EXPECT_EQ(b, 512u << 10);
  ASSERT_TRUE(parse_memory_size("1500m", &b));
  EXPECT_EQ(b, 1500ull << 20);
  ASSERT_TRUE(parse_memory_size("2G", &b));
  EXPECT_EQ(b, 2ull << 30);
  ASSERT_TRUE(parse_memory_size("2Gi", &b));
  EXPECT_EQ(b, 2ull << 30);
  ASSERT_TRUE(parse_memory_size("0", &b));
  EXPECT_EQ(b, 0u);
}

TEST(MemorySize, RejectsGarbage) {
  uint64_t b = 7;
  for (const char* bad : {"", "-1", "1x", "m", " 1", "1 m", "99999999999999999999", "17179869184g", "1i"})
    EXPECT_FALSE(parse_memory_size(bad, &b)) << bad;
  EXPECT_EQ(b, 7u);
}

TEST(Config, HamiVariablesByOrdinal) {
  Config c = load({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"},
                   {"CUDA_DEVICE_MEMORY_LIMIT_1", "512m"},
                   {"CUDA_DEVICE_SM_LIMIT", "30"},
                   {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/x/y.cache"}});
  EXPECT_EQ(c.source, ConfigSource::kHami);
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 1ull << 30);
  EXPECT_EQ(c.memory_limit_for(kUuidB, 1), 512ull << 20);
  EXPECT_EQ(c.cores_for(kUuidA, 0), 30);
  EXPECT_EQ(c.region_path, "/x/y.cache");
  EXPECT_TRUE(c.device_visible(kUuidB));
  EXPECT_TRUE(c.problems.empty());
}

TEST(Config, NoVariablesMeansNoLimits) {
  Config c = load({});
  EXPECT_EQ(c.source, ConfigSource::kNone);
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 0u);
  EXPECT_EQ(c.region_path, kDefaultRegionPath);
  EXPECT_EQ(c.log_level, 2);
}

TEST(Config, AllocationTakesPrecedenceAndMatchesByUuid) {
  std::string json = std::string(R"({"version":1,"node":"node-a","containers":[)") +
                     R"({"name":"side","devices":[{"uuid":")" + kUuidA + R"(","memoryMiB":1,"cores":1}]},)" +
                     R"({"name":"app","devices":[{"uuid":")" + kUuidB +
                     R"(","memoryMiB":3000,"cores":30}]}]})";
  Config c = load({{"TESSERA_ALLOCATION", json},
                   {"TESSERA_CONTAINER_NAME", "app"},
                   {"CUDA_DEVICE_MEMORY_LIMIT", "1g"},
                   {"TESSERA_REGION", "/r"}});
  ASSERT_EQ(c.source, ConfigSource::kAllocation) << (c.problems.empty() ? "" : c.problems[0]);
  // Ordinal 0 is device B here: the limit follows the UUID, not the ordinal.
  EXPECT_EQ(c.memory_limit_for(kUuidB, 0), 3000ull << 20);
  EXPECT_EQ(c.cores_for(kUuidB, 0), 30);
  EXPECT_FALSE(c.device_visible(kUuidA));
  EXPECT_TRUE(c.device_visible(kUuidB));
  EXPECT_EQ(c.region_path, "/r");
}

TEST(Config, SingleContainerEntryAppliesWithoutName) {
  std::string json =
      std::string(R"({"version":1,"node":"n","containers":[{"name":"x","devices":[{"uuid":")") + kUuidA +
      R"(","memoryMiB":0,"cores":0}]}]})";
  Config c = load({{"TESSERA_ALLOCATION", json}});
  ASSERT_EQ(c.source, ConfigSource::kAllocation);
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 0u);  // 0 = no memory limit
  EXPECT_TRUE(c.device_visible(kUuidA));
}

TEST(Config, BadAllocationFallsBackToHamiWithOneProblem) {
  const char* bad[] = {
      "{not json",
      R"({"version":2,"containers":[{"name":"a","devices":[]}]})",
      R"({"containers":[{"name":"a","devices":[]}]})",
      R"({"version":1,"containers":[{"name":"a","devices":[]},{"name":"b","devices":[]}]})",
      R"({"version":1,"containers":[{"name":"a","devices":[{"uuid":"GPU-1","memoryMiB":-5}]}]})",
      R"({"version":1,"containers":[{"name":"a","devices":[{"uuid":"GPU-1","memoryMiB":1.5}]}]})",
      R"({"version":1,"containers":[{"name":"a","devices":[{"uuid":"GPU-1","cores":101}]}]})",
      R"({"version":1,"containers":[{"name":"a","devices":[{"memoryMiB":1}]}]})",
      R"({"version":1,"containers":[{"name":"a","devices":[{"uuid":"GPU-1"},{"uuid":"GPU-1"}]}]})",
      R"([1])",
  };
  for (const char* json : bad) {
    Config c = load({{"TESSERA_ALLOCATION", json}, {"CUDA_DEVICE_MEMORY_LIMIT", "100m"}});
    EXPECT_EQ(c.source, ConfigSource::kHami) << json;
    ASSERT_EQ(c.problems.size(), 1u) << json;
    EXPECT_NE(c.problems[0].find("TESSERA_ALLOCATION ignored"), std::string::npos) << c.problems[0];
    EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 100ull << 20);
  }
}

TEST(Config, UnknownContainerNameIsAProblem) {
  Config c = load(
      {{"TESSERA_ALLOCATION", std::string(R"({"version":1,"node":"n","containers":[{"name":"a",)") +
                                  R"("devices":[{"uuid":")" + kUuidA + R"(","memoryMiB":1,"cores":1}]}]})"},
       {"TESSERA_CONTAINER_NAME", "b"}});
  EXPECT_EQ(c.source, ConfigSource::kNone);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("\"b\""), std::string::npos);
}

TEST(Config, AContainerTesseraDidNotPlaceGetsWhatTheNodeSays) {
  // refuse: nothing visible, even with CUDA_DISABLE_CONTROL, and one line why.
  Config refused = load({{"TESSERA_UNPLACED_PODS", "refuse"},
                         {"TESSERA_KUBELET_GPUS", kUuidA},
                         {"CUDA_DISABLE_CONTROL", "true"}});
  EXPECT_TRUE(refused.unplaced_refused());
  EXPECT_FALSE(refused.device_visible(kUuidA));
  EXPECT_FALSE(refused.device_visible(kUuidB));
  ASSERT_EQ(refused.problems.size(), 1u);
  EXPECT_NE(refused.problems[0].find("tessera-scheduler did not place"), std::string::npos)
      << refused.problems[0];
  // whole-gpu: the kubelet's GPUs, unlimited.
  Config whole = load(
      {{"TESSERA_UNPLACED_PODS", "whole-gpu"}, {"TESSERA_KUBELET_GPUS", std::string(kUuidB) + ",GPU-other"}});
  EXPECT_FALSE(whole.unplaced_refused());
  EXPECT_FALSE(whole.device_visible(kUuidA));
  EXPECT_TRUE(whole.device_visible(kUuidB));
  EXPECT_FALSE(whole.device_visible(""));
  EXPECT_EQ(whole.memory_limit_for(kUuidB, 0), 0u);
  EXPECT_TRUE(whole.problems.empty());
  // With an allocation the policy does not apply: the allocation decides.
  std::string json =
      std::string(R"({"version":1,"node":"n","containers":[{"name":"x","devices":[{"uuid":")") + kUuidA +
      R"(","memoryMiB":10,"cores":0}]}]})";
  Config placed = load({{"TESSERA_ALLOCATION", json}, {"TESSERA_UNPLACED_PODS", "refuse"}});
  EXPECT_FALSE(placed.unplaced_refused());
  EXPECT_TRUE(placed.device_visible(kUuidA));
  EXPECT_TRUE(placed.problems.empty());
  // An unknown policy value is read as refuse, with a problem naming it.
  Config odd = load({{"TESSERA_UNPLACED_PODS", "allow"}});
  EXPECT_TRUE(odd.unplaced_refused());
  EXPECT_NE(odd.problems[0].find("TESSERA_UNPLACED_PODS=allow"), std::string::npos);
}

TEST(Config, DisableControlLiftsLimits) {
  Config c = load({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_DISABLE_CONTROL", "true"}});
  EXPECT_TRUE(c.control_disabled);
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 0u);
}

TEST(Config, FlagsAndBadValues) {
  Config c = load({{"CUDA_OVERSUBSCRIBE", "TRUE"},
                   {"ACTIVE_OOM_KILLER", "1"},
                   {"LIBCUDA_LOG_LEVEL", "9"},
                   {"CUDA_DEVICE_MEMORY_LIMIT_0", "lots"},
                   {"GPU_CORE_UTILIZATION_POLICY", "FORCE"}});
  EXPECT_TRUE(c.oversubscribe);
  EXPECT_TRUE(c.oom_killer);
  EXPECT_EQ(c.log_level, 2);
  EXPECT_EQ(c.core_policy, "force");
  EXPECT_EQ(c.problems.size(), 2u);
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 0u);
}

// CUDA_TASK_PRIORITY as the webhook passes nvidia.com/priority: CUDA's and
// HAMi's convention, lower is more important. The compute limiter treats 0
// (and unset) as high and 1 and above as low.
TEST(Config, TaskPriorityIsReadAsGiven) {
  EXPECT_EQ(load({}).priority, 0);
  EXPECT_EQ(load({{"CUDA_TASK_PRIORITY", "0"}}).priority, 0);
  EXPECT_EQ(load({{"CUDA_TASK_PRIORITY", "1"}}).priority, 1);
  EXPECT_EQ(load({{"CUDA_TASK_PRIORITY", "7"}}).priority, 7);
}

// --- The limits file (docs/security.md) -----------------------------------

std::string LimitsPayload(const char* uuid, int mib) {
  return std::string(R"({"version":1,"node":"n","containers":[{"name":"main","devices":[{"uuid":")") + uuid +
         R"(","memoryMiB":)" + std::to_string(mib) + R"(,"cores":20}]}]})";
}

TEST(LimitsFile, OutranksTheEnvironmentAndSaysSo) {
  Config c = load({{"TESSERA_ALLOCATION", LimitsPayload(kUuidA, 80000)},
                   {"TESSERA_CONTAINER_NAME", "main"},
                   {"CUDA_DISABLE_CONTROL", "true"}});
  const std::string text = LimitsPayload(kUuidA, 1000);
  apply_limits_file(c, "/run/l.json", text.c_str(), "");
  EXPECT_TRUE(c.limits_from_file);
  EXPECT_FALSE(c.control_disabled);
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 1000ull << 20);
  EXPECT_EQ(c.cores_for(kUuidA, 0), 20);
  EXPECT_FALSE(c.device_visible(kUuidB));
  ASSERT_EQ(c.problems.size(), 2u);
  EXPECT_NE(c.problems[0].find("CUDA_DISABLE_CONTROL ignored"), std::string::npos);
  EXPECT_NE(c.problems[1].find("TESSERA_ALLOCATION disagrees with limits file /run/l.json"),
            std::string::npos)
      << c.problems[1];

  Config hami = load({{"CUDA_DEVICE_MEMORY_LIMIT", "80g"}});
  apply_limits_file(hami, "/run/l.json", text.c_str(), "");
  EXPECT_EQ(hami.memory_limit_for(kUuidA, 0), 1000ull << 20);
  ASSERT_EQ(hami.problems.size(), 1u);
  EXPECT_NE(hami.problems[0].find("CUDA_DEVICE_MEMORY_LIMIT / CUDA_DEVICE_SM_LIMIT ignored"),
            std::string::npos);

  // The same grants as the environment's: nothing to say.
  Config same = load({{"TESSERA_ALLOCATION", text}});
  apply_limits_file(same, "/run/l.json", text.c_str(), "");
  EXPECT_TRUE(same.problems.empty());
}

// The file carries no compute policy: the environment may pick force or
// default, not switch the limiter off.
TEST(LimitsFile, TheEnvironmentCannotDisableTheComputeQuota) {
  Config c = load({{"GPU_CORE_UTILIZATION_POLICY", "disable"}});
  const std::string text = LimitsPayload(kUuidA, 1000);
  apply_limits_file(c, "/run/l.json", text.c_str(), "");
  EXPECT_EQ(c.core_policy, "default");
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("GPU_CORE_UTILIZATION_POLICY=disable ignored"), std::string::npos);

  Config force = load({{"GPU_CORE_UTILIZATION_POLICY", "force"}});
  apply_limits_file(force, "/run/l.json", text.c_str(), "");
  EXPECT_EQ(force.core_policy, "force");
  EXPECT_TRUE(force.problems.empty());

  // Without a file (not there yet), the environment's choice stands.
  Config pending = load({{"GPU_CORE_UTILIZATION_POLICY", "disable"}});
  apply_limits_file(pending, "/run/l.json", nullptr, "");
  EXPECT_EQ(pending.core_policy, "disable");
}

TEST(LimitsFile, NotThereYetLeavesTheEnvironmentInForce) {
  Config c = load({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  apply_limits_file(c, "/run/l.json", nullptr, "");
  EXPECT_TRUE(c.limits_pending);
  EXPECT_FALSE(c.limits_from_file);
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 2ull << 30);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("is not there yet"), std::string::npos);
}

// The pod's own limits (the annotation bind wrote, mounted read-only by the
// webhook) close the window before the node's file exists: they, not the
// environment, hold from the first call; the node's file still wins.
TEST(PodLimitsFile, HoldsWhileTheNodesFileIsNotThereAndNotAfter) {
  Config c = load({{"CUDA_DEVICE_MEMORY_LIMIT", "80g"},
                   {"CUDA_DEVICE_SM_LIMIT", "100"},
                   {"GPU_CORE_UTILIZATION_POLICY", "disable"}});
  apply_limits_file(c, "/run/l.json", nullptr, "");
  ASSERT_TRUE(c.limits_pending);
  const std::string pod = LimitsPayload(kUuidA, 1000);
  apply_pod_limits_file(c, "/run/pod/limits.json", pod.c_str(), "");
  EXPECT_TRUE(c.limits_from_file);
  EXPECT_TRUE(c.limits_pending) << "the node's file is still awaited";
  EXPECT_EQ(c.limits_path, "/run/l.json") << "refresh keeps watching the node's file";
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 1000ull << 20);
  EXPECT_EQ(c.cores_for(kUuidA, 0), 20);
  EXPECT_EQ(c.core_policy, "default");
  EXPECT_FALSE(c.device_visible(kUuidB));
  bool said = false;
  for (const auto& p : c.problems) {
    EXPECT_EQ(p.find("the environment's limits apply"), std::string::npos) << p;
    said =
        said || p.find("the pod's own limits (/run/pod/limits.json, read-only) apply") != std::string::npos;
  }
  EXPECT_TRUE(said);

  // The node's file there: the pod's is not consulted.
  Config node = load({});
  const std::string node_text = LimitsPayload(kUuidA, 2000);
  apply_limits_file(node, "/run/l.json", node_text.c_str(), "");
  apply_pod_limits_file(node, "/run/pod/limits.json", pod.c_str(), "");
  EXPECT_EQ(node.memory_limit_for(kUuidA, 0), 2000ull << 20);

  // No node file configured at all (a node without tessera-node's mount).
  Config bare = load({{"CUDA_DEVICE_MEMORY_LIMIT", "80g"}});
  apply_pod_limits_file(bare, "/run/pod/limits.json", pod.c_str(), "");
  EXPECT_EQ(bare.memory_limit_for(kUuidA, 0), 1000ull << 20);
  EXPECT_EQ(bare.limits_path, "/run/pod/limits.json");
}

// Named by the environment (tests; no Downward API directory), the file is
// only as trustworthy as the environment: its limits apply, but a new
// process is still held to the stricter of them and the region's.
TEST(PodLimitsFile, AFileNamedByTheEnvironmentIsNotAuthoritative) {
  Config c = load({});
  apply_limits_file(c, "/run/l.json", nullptr, "");
  const std::string pod = LimitsPayload(kUuidA, 1000);
  apply_pod_limits_file(c, "/tmp/pod.json", pod.c_str(), "", /*from_fixed_dir=*/false);
  EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 1000ull << 20);
  EXPECT_FALSE(c.limits_from_file);
  EXPECT_TRUE(c.limits_pending);
}

TEST(PodLimitsFile, BlankOrAbsentChangesNothingAndInvalidShowsNoDevice) {
  for (const char* blank : {"", " \n"}) {
    Config c = load({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
    apply_limits_file(c, "/run/l.json", nullptr, "");
    apply_pod_limits_file(c, "/run/pod/limits.json", blank, "");
    EXPECT_FALSE(c.limits_from_file) << "no annotation: the pod was not placed by tessera-scheduler";
    EXPECT_EQ(c.memory_limit_for(kUuidA, 0), 2ull << 30);
  }
  Config absent = load({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  apply_pod_limits_file(absent, "/run/pod/limits.json", nullptr, "");
  EXPECT_EQ(absent.memory_limit_for(kUuidA, 0), 2ull << 30);
  EXPECT_TRUE(absent.problems.empty());

  Config bad = load({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  apply_limits_file(bad, "/run/l.json", nullptr, "");
  apply_pod_limits_file(bad, "/run/pod/limits.json", "{\"version\":1,", "");
  EXPECT_TRUE(bad.limits_unusable);
  EXPECT_FALSE(bad.device_visible(kUuidA));
}

TEST(LimitsFile, UnusableLeavesNothingVisible) {
  for (const std::string& bad :
       {std::string("{\"version\":1,"),
        // two entries: which one would be ours?
        std::string(R"({"version":1,"node":"n","containers":[)"
                    R"({"name":"a","devices":[{"uuid":")") +
            kUuidA + R"(","memoryMiB":1,"cores":0}]},{"name":"b","devices":[{"uuid":")" + kUuidB +
            R"(","memoryMiB":1,"cores":0}]}]})"}) {
    Config c = load({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
    apply_limits_file(c, "/run/l.json", bad.c_str(), "");
    EXPECT_TRUE(c.limits_unusable) << bad;
    EXPECT_TRUE(c.filters_devices());
    EXPECT_FALSE(c.device_visible(kUuidA));
    ASSERT_EQ(c.problems.size(), 1u);
    EXPECT_NE(c.problems[0].find("limits file /run/l.json cannot be used"), std::string::npos)
        << c.problems[0];
  }
  Config unreadable;
  apply_limits_file(unreadable, "/run/l.json", nullptr, "cannot open: Permission denied");
  EXPECT_TRUE(unreadable.limits_unusable);
  EXPECT_NE(unreadable.problems.at(0).find("Permission denied"), std::string::npos);
}

TEST(LimitsFile, AnUnplacedPodsFileOutranksItsEnvironment) {
  // The tenant dropped TESSERA_UNPLACED_PODS and set its own limits.
  Config refused = load({{"CUDA_DEVICE_MEMORY_LIMIT", "80g"}});
  apply_limits_file(refused, "/run/l.json", R"({"version":1,"unplaced":"refuse"})", "");
  EXPECT_TRUE(refused.limits_from_file);
  EXPECT_TRUE(refused.unplaced_refused());
  EXPECT_FALSE(refused.device_visible(kUuidA));
  ASSERT_EQ(refused.problems.size(), 1u);
  EXPECT_NE(refused.problems[0].find("did not place this pod (refuse)"), std::string::npos)
      << refused.problems[0];

  Config whole = load({{"TESSERA_UNPLACED_PODS", "refuse"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}});
  const std::string text = std::string(R"({"version":1,"unplaced":"whole-gpu","gpus":[")") + kUuidB + "\"]}";
  apply_limits_file(whole, "/run/l.json", text.c_str(), "");
  EXPECT_FALSE(whole.unplaced_refused());
  EXPECT_TRUE(whole.device_visible(kUuidB));
  EXPECT_FALSE(whole.device_visible(kUuidA));
  EXPECT_EQ(whole.memory_limit_for(kUuidB, 0), 0u);  // whole, unlimited

  for (const char* bad : {R"({"version":1,"unplaced":"maybe"})", R"({"version":2,"unplaced":"refuse"})",
                          R"({"version":1,"unplaced":"whole-gpu","gpus":["nope"]})",
                          R"({"version":1,"unplaced":"whole-gpu"})"}) {
    Config c;
    apply_limits_file(c, "/run/l.json", bad, "");
    EXPECT_TRUE(c.limits_unusable) << bad;
    EXPECT_FALSE(c.device_visible(kUuidA)) << bad;
  }
}

TEST(LimitsFile, TheFixedDirectoryWinsOverTheEnvironment) {
  char dir[] = "/tmp/tessera-limits-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Env env{{"TESSERA_LIMITS", "/somewhere/else.json"}};
  EXPECT_EQ(resolve_limits_path(&lookup, &env, dir), std::string(dir) + "/limits.json");
  EXPECT_EQ(resolve_limits_path(&lookup, &env, "/nonexistent-tessera-dir"), "/somewhere/else.json");
  Env none;
  EXPECT_EQ(resolve_limits_path(&lookup, &none, "/nonexistent-tessera-dir"), "");
  rmdir(dir);
}

}  // namespace
}  // namespace tessera::vgpu
