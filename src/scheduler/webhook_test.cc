#include "scheduler/webhook.h"

#include <gtest/gtest.h>

#include <tuple>

#include "core/fit.h"
#include "core/pod_request.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

Json PodWithLimits(const Json& limits, const std::string& name = "app") {
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "p"}, {"namespace", "default"}}},
      {"spec", {{"containers", {{{"name", name}, {"image", "cuda"}, {"resources", {{"limits", limits}}}}}}}}};
}

Json Review(const Json& pod) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
            {"namespace", "default"},
            {"operation", "CREATE"},
            {"object", pod},
            {"oldObject", nullptr},
            {"dryRun", false}}}};
}

std::string PatchError(const Json& pod, int64_t largest = 0) {
  auto r = MutationPatch(pod, SchedulerConfig{}, largest);
  return r.ok() ? std::string("(accepted)") : r.error().message;
}

TEST(WebhookTest, Base64AndPointerEscaping) {
  // Two, one and no padding characters; the empty text.
  for (const auto& [text, base64] :
       {std::pair{"hello", "aGVsbG8="}, {"hell", "aGVsbA=="}, {"hel", "aGVs"}, {"", ""}})
    EXPECT_EQ(Base64Encode(text), base64) << text;
  EXPECT_EQ(EscapeJsonPointer("nvidia.com/gpu"), "nvidia.com~1gpu");
  EXPECT_EQ(EscapeJsonPointer("a~b/c"), "a~0b~1c");
}

TEST(WebhookTest, NonGpuPodIsAllowedUntouched) {
  Json pod = PodWithLimits({{"cpu", "1"}});
  Json answer = Mutate(Review(pod), SchedulerConfig{}, 0);
  EXPECT_EQ(answer["kind"], "AdmissionReview");
  EXPECT_EQ(answer["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(answer["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
  EXPECT_EQ(answer["response"]["allowed"], true);
  EXPECT_FALSE(answer["response"].contains("patch"));
  EXPECT_FALSE(answer["response"].contains("patchType"));
}

TEST(WebhookTest, GpuPodGetsSchedulerDefaultsAndEnvAndIsIdempotent) {
  SchedulerConfig config;
  config.resources.default_cores = 20;
  Json pod = PodWithLimits({{"nvidia.com/gpumem", "3000"}});
  auto patch = MutationPatch(pod, config, 81920);
  ASSERT_TRUE(patch.ok()) << patch.error().message;
  // Every limit path is escaped: the resource names contain '/'.
  bool escaped = false;
  for (const Json& op : *patch) {
    std::string path = op["path"];
    if (path.find("nvidia.com~1") != std::string::npos) escaped = true;
    EXPECT_EQ(path.find("nvidia.com/"), std::string::npos) << path;
  }
  EXPECT_TRUE(escaped) << patch->dump();
  Json mutated = pod.patch(*patch);
  EXPECT_EQ(mutated["spec"]["schedulerName"], "tessera-scheduler");
  const Json& c = mutated["spec"]["containers"][0];
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpucores"], "20");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpumem"], "3000");
  ASSERT_TRUE(c["env"].is_array());
  ASSERT_EQ(c["env"].size(), 3u);
  EXPECT_EQ(c["env"][0]["name"], "TESSERA_ALLOCATION");
  EXPECT_EQ(c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['tessera.io/allocation']");
  EXPECT_EQ(c["env"][1]["name"], "NVIDIA_VISIBLE_DEVICES");
  EXPECT_EQ(c["env"][1]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['tessera.io/visible-devices.0']");
  EXPECT_EQ(c["env"][2]["name"], "TESSERA_CONTAINER_NAME");
  EXPECT_EQ(c["env"][2]["value"], "app");
  // Applied twice: nothing more to do.
  auto again = MutationPatch(mutated, config, 81920);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << again->dump();
}

TEST(WebhookTest, EnvAppendsToExistingListAndLeavesOtherContainersAlone) {
  Json pod =
      PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}, {"nvidia.com/gpucores", "10"}});
  pod["spec"]["containers"][0]["env"] = Json::array({{{"name", "X"}, {"value", "1"}}});
  pod["spec"]["containers"].push_back({{"name", "sidecar"}, {"image", "busybox"}});
  auto patch = MutationPatch(pod, SchedulerConfig{}, 0);
  ASSERT_TRUE(patch.ok());
  Json mutated = pod.patch(*patch);
  EXPECT_EQ(mutated["spec"]["containers"][0]["env"].size(), 4u);
  EXPECT_EQ(mutated["spec"]["containers"][0]["env"][0]["name"], "X");
  EXPECT_FALSE(mutated["spec"]["containers"][1].contains("env"));
}

// The env entry `name` of a container, or null.
Json EnvOf(const Json& container, const std::string& name) {
  for (const Json& e : container.value("env", Json::array())) {
    if (e.value("name", "") == name) return e;
  }
  return nullptr;
}

TEST(WebhookTest, PriorityReachesTheContainerAsCudaTaskPriority) {
  Json pod = PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "0"}}, "high");
  Json& containers = pod["spec"]["containers"];
  containers.push_back(
      {{"name", "low"},
       {"resources", {{"limits", {{"nvidia.com/gpumem", "1000"}, {"nvidia.com/priority", 1}}}}}});
  containers.push_back({{"name", "unset"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}});
  // Its own value stays: the container's env wins, as for every variable.
  containers.push_back(
      {{"name", "own"},
       {"env", {{{"name", "CUDA_TASK_PRIORITY"}, {"value", "1"}}}},
       {"resources", {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "0"}}}}}});
  containers.push_back({{"name", "sidecar"}, {"image", "busybox"}});
  pod["spec"]["initContainers"] = {
      {{"name", "warmup"},
       {"resources", {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "3"}}}}}}};
  auto patch = MutationPatch(pod, SchedulerConfig{}, 0);
  ASSERT_TRUE(patch.ok()) << patch.error().message;
  Json mutated = pod.patch(*patch);
  const Json& c = mutated["spec"]["containers"];
  // A literal value (pod-spec data: no Downward API), as given.
  EXPECT_EQ(EnvOf(c[0], "CUDA_TASK_PRIORITY"), (Json{{"name", "CUDA_TASK_PRIORITY"}, {"value", "0"}}));
  EXPECT_EQ(EnvOf(c[1], "CUDA_TASK_PRIORITY"), (Json{{"name", "CUDA_TASK_PRIORITY"}, {"value", "1"}}));
  EXPECT_TRUE(EnvOf(c[2], "CUDA_TASK_PRIORITY").is_null()) << c[2].dump();  // none given: libvgpu's high
  EXPECT_EQ(c[3]["env"].size(), 4u) << c[3].dump();
  EXPECT_EQ(EnvOf(c[3], "CUDA_TASK_PRIORITY")["value"], "1");
  EXPECT_FALSE(c[4].contains("env"));
  EXPECT_EQ(EnvOf(mutated["spec"]["initContainers"][0], "CUDA_TASK_PRIORITY")["value"], "3");
  // Applied twice: nothing more to do.
  auto again = MutationPatch(mutated, SchedulerConfig{}, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << again->dump();

  // The resource name is configurable; the variable is libvgpu's.
  SchedulerConfig config;
  config.resources.gpu_priority_name = "example.com/priority";
  Json renamed = PodWithLimits({{"nvidia.com/gpu", "1"}, {"example.com/priority", "1"}});
  auto renamed_patch = MutationPatch(renamed, config, 0);
  ASSERT_TRUE(renamed_patch.ok()) << renamed_patch.error().message;
  EXPECT_EQ(EnvOf(renamed.patch(*renamed_patch)["spec"]["containers"][0], "CUDA_TASK_PRIORITY")["value"],
            "1");
}

TEST(WebhookTest, DynamicMigPodGetsLimitsButNoDeviceOrLibvgpuVariables) {
  // HAMi's nvidia.com/vgpu-mode: mig, with a priority and an init container.
  Json pod = PodWithLimits({{"nvidia.com/gpumem", "9728"}, {"nvidia.com/priority", "1"}});
  pod["metadata"]["annotations"] = {{"nvidia.com/vgpu-mode", "mig"}};
  pod["spec"]["initContainers"] = {
      {{"name", "warmup"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}};
  auto patch = MutationPatch(pod, SchedulerConfig{}, 81920);
  ASSERT_TRUE(patch.ok()) << patch.error().message;
  Json mutated = pod.patch(*patch);
  EXPECT_EQ(mutated["spec"]["schedulerName"], "tessera-scheduler");
  for (const Json* c : {&mutated["spec"]["containers"][0], &mutated["spec"]["initContainers"][0]}) {
    // The limits the scheduler sizes the instance from are still defaulted...
    EXPECT_EQ((*c)["resources"]["limits"]["nvidia.com/gpu"], "1") << c->dump();
    // ...but no variable: NVIDIA_VISIBLE_DEVICES would resolve to "" (bind
    // writes no visible-devices annotation for a MIG device) and win over
    // Allocate's MIG UUID; the others are libvgpu's, which a MIG container lacks.
    EXPECT_FALSE(c->contains("env")) << c->dump();
    EXPECT_FALSE(c->contains("volumeMounts")) << "no libvgpu, no limits file: " << c->dump();
  }
  EXPECT_FALSE(mutated["spec"].contains("volumes"));
  auto again = MutationPatch(mutated, SchedulerConfig{}, 81920);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << again->dump();

  // Any other mode (or none) is a vGPU pod: wired as before.
  pod["metadata"]["annotations"]["nvidia.com/vgpu-mode"] = "hami-core";
  auto vgpu = MutationPatch(pod, SchedulerConfig{}, 81920);
  ASSERT_TRUE(vgpu.ok()) << vgpu.error().message;
  const Json app = pod.patch(*vgpu)["spec"]["containers"][0];
  EXPECT_EQ(EnvOf(app, "NVIDIA_VISIBLE_DEVICES")["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['tessera.io/visible-devices.0']");
  EXPECT_EQ(EnvOf(app, "CUDA_TASK_PRIORITY")["value"], "1");
  // Bad input is still refused for a MIG pod, naming the field.
  Json too_big = PodWithLimits({{"nvidia.com/gpumem", "90000"}});
  too_big["metadata"]["annotations"] = {{"nvidia.com/vgpu-mode", "mig"}};
  EXPECT_NE(PatchError(too_big, 81920).find("largest GPU"), std::string::npos);
}

// The volume named `name` in the pod, or null.
Json VolumeOf(const Json& pod, const std::string& name) {
  for (const Json& v : pod["spec"].value("volumes", Json::array())) {
    if (v.value("name", "") == name) return v;
  }
  return nullptr;
}

// Each GPU container gets its own limits annotation as a read-only Downward
// API file (docs/security.md): no other container mounts it, none can write it.
TEST(WebhookTest, EachGpuContainerMountsItsOwnLimitsAnnotationReadOnly) {
  Json pod = PodWithLimits({{"nvidia.com/gpumem", "1000"}});
  pod["spec"]["initContainers"] = {
      {{"name", "warmup"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}};
  pod["spec"]["containers"].push_back({{"name", "sidecar"}, {"image", "busybox"}});
  Json second = {{"name", "second"}};
  second["resources"]["limits"]["nvidia.com/gpumem"] = "2000";
  pod["spec"]["containers"].push_back(second);
  auto patch = MutationPatch(pod, SchedulerConfig{}, 81920);
  ASSERT_TRUE(patch.ok()) << patch.error().message;
  Json mutated = pod.patch(*patch);
  for (const auto& [list, index, volume, annotation] :
       {std::tuple{"initContainers", 0, "tessera-limits-init-0", "tessera.io/limits.init-0"},
        std::tuple{"containers", 0, "tessera-limits-0", "tessera.io/limits.0"},
        std::tuple{"containers", 2, "tessera-limits-2", "tessera.io/limits.2"}}) {
    const Json v = VolumeOf(mutated, volume);
    ASSERT_TRUE(v.is_object()) << volume << " in " << mutated["spec"].dump();
    ASSERT_EQ(v["downwardAPI"]["items"].size(), 1u);
    EXPECT_EQ(v["downwardAPI"]["items"][0]["path"], "limits.json");
    EXPECT_EQ(v["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
              std::string("metadata.annotations['") + annotation + "']");
    const Json& c = mutated["spec"][list][index];
    ASSERT_EQ(c["volumeMounts"].size(), 1u) << c.dump();
    EXPECT_EQ(c["volumeMounts"][0]["name"], volume);
    EXPECT_EQ(c["volumeMounts"][0]["mountPath"], "/run/tessera/pod-limits");
    EXPECT_EQ(c["volumeMounts"][0]["readOnly"], true);
  }
  EXPECT_EQ(mutated["spec"]["volumes"].size(), 3u);
  EXPECT_FALSE(mutated["spec"]["containers"][1].contains("volumeMounts")) << "the sidecar asks for no GPU";
  auto again = MutationPatch(mutated, SchedulerConfig{}, 81920);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << again->dump();

  // Volumes and mounts the pod already has stay; a container that mounts
  // something at that path itself is left alone.
  Json own = PodWithLimits({{"nvidia.com/gpumem", "1000"}});
  own["spec"]["volumes"] = Json::array({{{"name", "data"}, {"emptyDir", Json::object()}}});
  own["spec"]["containers"][0]["volumeMounts"] = Json::array({{{"name", "data"}, {"mountPath", "/data"}}});
  Json own_mutated = own.patch(*MutationPatch(own, SchedulerConfig{}, 81920));
  EXPECT_EQ(own_mutated["spec"]["volumes"].size(), 2u);
  EXPECT_EQ(own_mutated["spec"]["containers"][0]["volumeMounts"].size(), 2u);
  EXPECT_EQ(own_mutated["spec"]["containers"][0]["volumeMounts"][0]["name"], "data");
  Json taken = PodWithLimits({{"nvidia.com/gpumem", "1000"}});
  taken["spec"]["containers"][0]["volumeMounts"] =
      Json::array({{{"name", "mine"}, {"mountPath", "/run/tessera/pod-limits"}}});
  Json taken_mutated = taken.patch(*MutationPatch(taken, SchedulerConfig{}, 81920));
  EXPECT_FALSE(taken_mutated["spec"].contains("volumes"));
  EXPECT_EQ(taken_mutated["spec"]["containers"][0]["volumeMounts"].size(), 1u);
}

TEST(WebhookTest, ResponseCarriesBase64JsonPatch) {
  Json pod = PodWithLimits({{"nvidia.com/gpu", "1"}});
  Json answer = Mutate(Review(pod), SchedulerConfig{}, 0);
  ASSERT_EQ(answer["response"]["allowed"], true);
  EXPECT_EQ(answer["response"]["patchType"], "JSONPatch");
  auto patch = MutationPatch(pod, SchedulerConfig{}, 0);
  ASSERT_TRUE(patch.ok());
  EXPECT_EQ(answer["response"]["patch"], Base64Encode(patch->dump()));
}

TEST(WebhookTest, RejectionsNameTheField) {
  EXPECT_NE(PatchError(PodWithLimits({{"nvidia.com/gpucores", "150"}})).find("nvidia.com/gpucores"),
            std::string::npos);
  EXPECT_NE(PatchError(PodWithLimits({{"nvidia.com/gpumem", "abc"}})).find("nvidia.com/gpumem"),
            std::string::npos);
  EXPECT_NE(PatchError(PodWithLimits({{"nvidia.com/gpumem", "-5"}})).find("nvidia.com/gpumem"),
            std::string::npos);
  std::string both =
      PatchError(PodWithLimits({{"nvidia.com/gpumem", "1000"}, {"nvidia.com/gpumem-percentage", "50"}}));
  EXPECT_NE(both.find("gpumem-percentage"), std::string::npos) << both;
  std::string too_big = PatchError(PodWithLimits({{"nvidia.com/gpumem", "90000"}}), 81920);
  EXPECT_NE(too_big.find("largest GPU"), std::string::npos) << too_big;
  EXPECT_NE(too_big.find("\"app\""), std::string::npos) << too_big;
  // Unknown cluster: the size check is skipped, the pod is accepted.
  EXPECT_EQ(PatchError(PodWithLimits({{"nvidia.com/gpumem", "90000"}}), 0), "(accepted)");
}

TEST(WebhookTest, DeniedReviewSaysWhy) {
  Json answer = Mutate(Review(PodWithLimits({{"nvidia.com/gpucores", "101"}})), SchedulerConfig{}, 0);
  EXPECT_EQ(answer["response"]["allowed"], false);
  EXPECT_EQ(answer["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
  std::string message = answer["response"]["status"]["message"];
  EXPECT_NE(message.find("nvidia.com/gpucores"), std::string::npos) << message;
  Json broken = Mutate(Json{{"kind", "AdmissionReview"}}, SchedulerConfig{}, 0);
  EXPECT_EQ(broken["response"]["allowed"], false);
}

TEST(WebhookTest, MistypedReviewIsDeniedNotThrown) {
  // fuzz/regressions/admission_review: these threw nlohmann's type_error (a 500).
  Json kind_object = Review(PodWithLimits({{"nvidia.com/gpu", "1"}}));
  kind_object["request"]["kind"]["kind"] = {{"group", ""}};
  Json uid_number = Review(PodWithLimits({{"nvidia.com/gpu", "1"}}));
  uid_number["request"]["uid"] = 7;
  for (const Json& review : {kind_object, uid_number}) {
    Json answer;
    ASSERT_NO_THROW(answer = Mutate(review, SchedulerConfig{}, 0)) << review.dump();
    EXPECT_EQ(answer["response"]["allowed"], false) << review.dump();
    std::string message = answer["response"]["status"]["message"];
    EXPECT_NE(message.find("must be strings"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace tessera::scheduler

namespace tessera::scheduler {
namespace {

Json MpsPod(bool host_ipc) {
  Json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "p"}, {"namespace", "default"}}},
      {"spec",
       {{"containers",
         {{{"name", "app"},
           {"image", "cuda"},
           {"resources", {{"limits", {{"nvidia.com/mps-core", "50"}, {"nvidia.com/mps-memory", "8"}}}}}}}}}}};
  if (host_ipc) pod["spec"]["hostIPC"] = true;
  return pod;
}

TEST(WebhookSharingTest, AnMpsPodWithoutHostIpcIsWarnedAndAdmitted) {
  Json answer = Mutate(Review(MpsPod(false)), SchedulerConfig{}, 81920);
  const Json& response = answer["response"];
  EXPECT_EQ(response["allowed"], true);
  ASSERT_TRUE(response.contains("warnings")) << response.dump();
  ASSERT_EQ(response["warnings"].size(), 1u);
  const std::string warning = response["warnings"][0];
  EXPECT_NE(warning.find("MPS clients need hostIPC: true"), std::string::npos) << warning;
  EXPECT_NE(warning.find("\"app\""), std::string::npos) << warning;
  EXPECT_LE(warning.size(), 120u) << "kubectl shows warnings on one line";
  EXPECT_TRUE(response.contains("patch")) << "still routed to tessera-scheduler";
  // With hostIPC: no warning; the annotation form is warned the same way.
  EXPECT_FALSE(Mutate(Review(MpsPod(true)), SchedulerConfig{}, 81920)["response"].contains("warnings"));
  Json annotated = PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "30"}});
  annotated["metadata"]["annotations"]["nvidia.com/vgpu-mode"] = "mps";
  EXPECT_EQ(MutationWarnings(annotated, SchedulerConfig{}).size(), 1u);
  annotated["spec"]["hostIPC"] = "true";  // a string is not true
  EXPECT_EQ(MutationWarnings(annotated, SchedulerConfig{}).size(), 1u);
}

// The env entries of the patched container "app" (the patch adds the whole
// env array: the test pods have none).
Json PatchedEnv(const Json& pod) {
  auto patch = MutationPatch(pod, SchedulerConfig{}, 0);
  EXPECT_TRUE(patch.ok()) << patch.error().message;
  if (!patch.ok()) return Json::array();
  for (const Json& op : *patch) {
    if (op["path"] == "/spec/containers/0/env") return op["value"];
  }
  return Json::array();
}

std::string FieldPathOf(const Json& env, std::string_view name) {
  for (const Json& e : env) {
    if (e["name"] == name) return e["valueFrom"]["fieldRef"]["fieldPath"];
  }
  return "";
}

TEST(WebhookSharingTest, MpsContainersGetTheMpsVariablesFromBindsAnnotations) {
  const Json env = PatchedEnv(MpsPod(true));
  EXPECT_EQ(FieldPathOf(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
            "metadata.annotations['tessera.io/mps-thread-percentage.0']");
  EXPECT_EQ(FieldPathOf(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
            "metadata.annotations['tessera.io/mps-pinned-memory.0']");
  EXPECT_NE(FieldPathOf(env, "TESSERA_ALLOCATION"), "");
  // A vGPU container gets neither; a container setting one keeps its own.
  const Json vgpu = PatchedEnv(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}));
  EXPECT_EQ(FieldPathOf(vgpu, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "");
  EXPECT_EQ(FieldPathOf(vgpu, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "");
  Json own = MpsPod(true);
  own["spec"]["containers"][0]["env"] = {{{"name", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}, {"value", "20"}}};
  auto patch = MutationPatch(own, SchedulerConfig{}, 0);
  ASSERT_TRUE(patch.ok());
  EXPECT_EQ(patch->dump().find("mps-thread-percentage"), std::string::npos) << patch->dump();
  EXPECT_NE(patch->dump().find("mps-pinned-memory.0"), std::string::npos) << patch->dump();
  EXPECT_EQ(MpsThreadPercentageAnnotation(true, 2), "tessera.io/mps-thread-percentage.init-2");
  EXPECT_EQ(MpsPinnedMemoryAnnotation(false, 1), "tessera.io/mps-pinned-memory.1");
}

TEST(WebhookSharingTest, VgpuPodsAndReplicaPodsGetNoWarning) {
  EXPECT_TRUE(MutationWarnings(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}),
                               SchedulerConfig{})
                  .empty());
  // Replica resources are kube-scheduler's: no patch, no warning, even though
  // an MPS GPU's replicas would want hostIPC (the webhook cannot know that).
  for (const char* resource : {"nvidia.com/gpu.shared", "nvidia.com/gpu.mps"}) {
    Json answer = Mutate(Review(PodWithLimits({{resource, "1"}})), SchedulerConfig{}, 81920);
    EXPECT_EQ(answer["response"]["allowed"], true);
    EXPECT_FALSE(answer["response"].contains("patch")) << resource;
    EXPECT_FALSE(answer["response"].contains("warnings")) << resource;
  }
}

TEST(WebhookSharingTest, ImpossibleMpsRequestsAreDeniedWithTheReason) {
  Json too_big = MpsPod(true);
  too_big["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mps-memory"] = "100";
  EXPECT_NE(PatchError(too_big, 81920).find("an MPS share of 102400 MiB is more than the largest GPU"),
            std::string::npos)
      << PatchError(too_big, 81920);
  Json no_cores = MpsPod(true);
  no_cores["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mps-core"] = "0";
  Json answer = Mutate(Review(no_cores), SchedulerConfig{}, 81920);
  EXPECT_EQ(answer["response"]["allowed"], false);
  EXPECT_NE(answer["response"]["status"]["message"].get<std::string>().find("nvidia.com/mps-core is \"0\""),
            std::string::npos)
      << answer.dump();
}

}  // namespace
}  // namespace tessera::scheduler

// GPU memory quotas (issue 18 item 3): in a namespace with a ResourceQuota on
// requests.nvidia.com/gpumem, a container whose memory is not in MiB gets it
// rewritten into MiB, or the pod is refused.
namespace tessera::scheduler {
namespace {

constexpr const char* kUuidA = "GPU-1a2b3c4d-0000-1111-2222-333344445555";

core::Gpu MakeGpu(const std::string& uuid, const std::string& model, int64_t memory_mib,
                  core::SharingMode mode = core::SharingMode::kVgpu) {
  core::Gpu g;
  g.uuid = uuid;
  g.model = model;
  g.memory_mib = memory_mib;
  g.mode = mode;
  return g;
}

// A view of `gpus` in which namespace "team" has the quota "gpu-quota" on GPU
// memory and every other namespace none.
ClusterView QuotaView(std::vector<core::Gpu> gpus) {
  ClusterView view;
  view.largest_gpu_mib = 81920;
  view.gpu_memory_quota = [](const std::string& ns) {
    NamespaceQuota q;
    if (ns == "team") q.quotas = {"gpu-quota"};
    return q;
  };
  view.visit_gpus = [gpus = std::move(gpus)](const std::function<void(const core::Gpu&)>& visit) {
    for (const core::Gpu& g : gpus) visit(g);
    return Status::Ok();
  };
  return view;
}

Json InNamespace(Json pod, const std::string& ns) {
  pod["metadata"]["namespace"] = ns;
  return pod;
}

// The pod as the patch leaves it (the patch must apply).
Json Patched(const Json& pod, const ClusterView& view, const SchedulerConfig& config = {}) {
  auto patch = MutationPatch(pod, config, view);
  EXPECT_TRUE(patch.ok()) << patch.error().message;
  return patch.ok() ? pod.patch(*patch) : pod;
}

std::string QuotaError(const Json& pod, const ClusterView& view, const SchedulerConfig& config = {}) {
  auto patch = MutationPatch(pod, config, view);
  return patch.ok() ? std::string("(accepted)") : patch.error().message;
}

TEST(WebhookQuotaTest, APercentageBecomesTheMiBItWouldBeAllocatedInAQuotaedNamespace) {
  // 15109 MiB: 33 % is 4985.97, and core's fit rounds down to 4985.
  const std::vector<core::Gpu> gpus = {MakeGpu("GPU-a", "Tesla T4", 15109),
                                       MakeGpu("GPU-b", "Tesla T4", 15109)};
  const ClusterView view = QuotaView(gpus);
  Json pod = InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "33"}}), "team");
  pod["spec"]["containers"][0]["resources"]["requests"] = {{"nvidia.com/gpumem-percentage", "33"}};
  const Json mutated = Patched(pod, view);
  const Json& resources = mutated["spec"]["containers"][0]["resources"];
  EXPECT_EQ(resources["limits"]["nvidia.com/gpumem"], "4985") << resources.dump();
  EXPECT_EQ(resources["requests"]["nvidia.com/gpumem"], "4985") << "requests equal limits";
  EXPECT_FALSE(resources["limits"].contains("nvidia.com/gpumem-percentage")) << resources.dump();
  EXPECT_FALSE(resources["requests"].contains("nvidia.com/gpumem-percentage")) << resources.dump();
  // Exactly what the fit would have given the percentage on that GPU.
  auto before = core::DerivePodRequest(pod, core::ResourceConfig{});
  auto after = core::DerivePodRequest(mutated, core::ResourceConfig{});
  ASSERT_TRUE(before.ok() && after.ok());
  const core::GpuState gpu{gpus[0], {}};
  const core::GpuCheck as_percent = core::CheckGpu(gpu, before->containers[0], before->filter);
  const core::GpuCheck as_mib = core::CheckGpu(gpu, after->containers[0], after->filter);
  ASSERT_EQ(as_percent.reason, core::GpuReason::kFits);
  EXPECT_EQ(as_mib.memory_mib, as_percent.memory_mib);
  EXPECT_EQ(after->containers[0].memory_mib, 4985);
  EXPECT_FALSE(after->containers[0].memory_percent.has_value());
  // The rest of the wiring is as for any GPU pod; applied again, nothing to do.
  EXPECT_EQ(mutated["spec"]["schedulerName"], "tessera-scheduler");
  EXPECT_TRUE(EnvOf(mutated["spec"]["containers"][0], "TESSERA_ALLOCATION").is_object());
  auto again = MutationPatch(mutated, SchedulerConfig{}, view);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << again->dump();
}

TEST(WebhookQuotaTest, ANamespaceWithoutAQuotaKeepsThePercentage) {
  const ClusterView view = QuotaView({MakeGpu("GPU-a", "A100", 40960)});
  for (const char* ns : {"default", "other"}) {
    const Json mutated =
        Patched(InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}}), ns), view);
    const Json& limits = mutated["spec"]["containers"][0]["resources"]["limits"];
    EXPECT_EQ(limits["nvidia.com/gpumem-percentage"], "50") << ns;
    EXPECT_FALSE(limits.contains("nvidia.com/gpumem")) << ns << ": " << limits.dump();
  }
  // Nor does a view without quotas rewrite anything (the old entry point).
  EXPECT_EQ(PatchError(InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}}), "team"), 81920),
            "(accepted)");
}

TEST(WebhookQuotaTest, TheReviewsNamespaceDecides) {
  const ClusterView view = QuotaView({MakeGpu("GPU-a", "A100", 40960)});
  Json pod = PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}});
  pod["metadata"].erase("namespace");
  Json review = Review(pod);
  review["request"]["namespace"] = "team";
  const Json answer = Mutate(review, SchedulerConfig{}, view);
  ASSERT_EQ(answer["response"]["allowed"], true) << answer.dump();
  const std::string patch = answer["response"]["patch"];
  EXPECT_EQ(patch, Base64Encode(MutationPatch(pod, SchedulerConfig{}, view, "team")->dump()));
  EXPECT_NE(MutationPatch(pod, SchedulerConfig{}, view, "team")->dump().find("\"20480\""), std::string::npos);
}

TEST(WebhookQuotaTest, TheWholeGpuAndADefaultedPercentageAreRewrittenToo) {
  const ClusterView view = QuotaView({MakeGpu("GPU-a", "A100", 40960), MakeGpu("GPU-b", "A100", 40960)});
  // No memory and no default: the whole GPU, 100 %.
  Json whole = Patched(InNamespace(PodWithLimits({{"nvidia.com/gpu", "2"}}), "team"), view);
  EXPECT_EQ(whole["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"], "40960");
  // gpumem "0" means the same and is replaced.
  Json zero = Patched(InNamespace(PodWithLimits({{"nvidia.com/gpumem", "0"}}), "team"), view);
  EXPECT_EQ(zero["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"], "40960");
  // defaults.memoryPercentage: written as MiB, never as a percentage.
  SchedulerConfig config;
  config.resources.default_memory_percent = 25;
  Json defaulted = Patched(InNamespace(PodWithLimits({{"nvidia.com/gpu", "1"}}), "team"), view, config);
  const Json& limits = defaulted["spec"]["containers"][0]["resources"]["limits"];
  EXPECT_EQ(limits["nvidia.com/gpumem"], "10240") << limits.dump();
  EXPECT_FALSE(limits.contains("nvidia.com/gpumem-percentage")) << limits.dump();
  EXPECT_EQ(limits["nvidia.com/gpu"], "1");
  // Outside the quota the default percentage is written as before.
  Json outside = Patched(InNamespace(PodWithLimits({{"nvidia.com/gpu", "1"}}), "other"), view, config);
  EXPECT_EQ(outside["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"], "25");
  // MiB given: counted as written, untouched; init containers are rewritten too.
  Json pod = InNamespace(PodWithLimits({{"nvidia.com/gpumem", "3000"}}), "team");
  pod["spec"]["initContainers"] = {
      {{"name", "warmup"}, {"resources", {{"limits", {{"nvidia.com/gpumem-percentage", "10"}}}}}}};
  Json mixed = Patched(pod, view);
  EXPECT_EQ(mixed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"], "3000");
  EXPECT_EQ(mixed["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpumem"], "4096");
}

TEST(WebhookQuotaTest, GpusOfDifferentSizesAreRefusedUnlessATypeIsPinned) {
  ClusterView view = QuotaView({MakeGpu(kUuidA, "NVIDIA A100-SXM4-40GB", 40960),
                                MakeGpu("GPU-b", "NVIDIA A100-SXM4-80GB", 81920),
                                MakeGpu("GPU-c", "NVIDIA A100-SXM4-80GB", 81920)});
  const Json pod = InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}}), "team");
  const std::string refused = QuotaError(pod, view);
  for (const char* part :
       {"ResourceQuota \"gpu-quota\"", "requests.nvidia.com/gpumem", "nvidia.com/gpumem-percentage 50",
        "20480 MiB on \"NVIDIA A100-SXM4-40GB\"", "40960 MiB on \"NVIDIA A100-SXM4-80GB\"",
        "ask nvidia.com/gpumem in MiB", "nvidia.com/use-gputype", "container \"app\""}) {
    EXPECT_NE(refused.find(part), std::string::npos) << part << " in: " << refused;
  }
  // Through the review: denied, with the same words.
  Json review = Review(pod);
  review["request"]["namespace"] = "team";
  const Json answer = Mutate(review, SchedulerConfig{}, view);
  ASSERT_EQ(answer["response"]["allowed"], false) << answer.dump();
  EXPECT_EQ(answer["response"]["status"]["message"], "tessera: " + refused);
  // Pinned to one type (HAMi's annotation, as the fit reads it): one size.
  Json pinned = pod;
  pinned["metadata"]["annotations"] = {{"nvidia.com/use-gputype", "80GB"}};
  EXPECT_EQ(Patched(pinned, view)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"],
            "40960");
  Json excluded = pod;
  excluded["metadata"]["annotations"] = {{"nvidia.com/nouse-gputype", "80GB"}};
  EXPECT_EQ(Patched(excluded, view)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"],
            "20480");
  Json by_uuid = pod;
  by_uuid["metadata"]["annotations"] = {{"nvidia.com/use-gpuuuid", kUuidA}};
  EXPECT_EQ(Patched(by_uuid, view)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"],
            "20480");
  // A size that rounds to the same MiB is one size: 1 % of 40960 and of 40999 is 409.
  ClusterView close = QuotaView({MakeGpu("GPU-a", "A", 40960), MakeGpu("GPU-b", "B", 40999)});
  EXPECT_EQ(Patched(InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "1"}}), "team"),
                    close)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"],
            "409");
  EXPECT_NE(QuotaError(InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "3"}}), "team"), close)
                .find("1228 MiB on \"A\", 1229 MiB on \"B\""),
            std::string::npos);
}

TEST(WebhookQuotaTest, OnlyGpusThePodCouldLandOnCountAndHealthDoesNotMatter) {
  core::Gpu sick = MakeGpu("GPU-sick", "A100", 81920);
  sick.healthy = false;  // it may come back: the pod could land there then
  ClusterView with_sick = QuotaView({MakeGpu("GPU-a", "A100", 40960), sick});
  EXPECT_NE(
      QuotaError(InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}}), "team"), with_sick)
          .find("different sizes"),
      std::string::npos);
  // GPUs in MIG or time-slicing mode take no vGPU slice; an MPS GPU takes only MPS shares.
  ClusterView modes = QuotaView({MakeGpu("GPU-a", "A100", 40960),
                                 MakeGpu("GPU-m", "A100", 81920, core::SharingMode::kMigDynamic),
                                 MakeGpu("GPU-t", "A100", 24576, core::SharingMode::kTimeslice),
                                 MakeGpu("GPU-p", "A100", 16384, core::SharingMode::kMps)});
  EXPECT_EQ(Patched(InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}}), "team"),
                    modes)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"],
            "20480");
  Json mps = InNamespace(
      PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}, {"nvidia.com/gpucores", "30"}}), "team");
  mps["metadata"]["annotations"] = {{"nvidia.com/vgpu-mode", "mps"}};
  mps["spec"]["hostIPC"] = true;
  EXPECT_EQ(Patched(mps, modes)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"], "8192");
  // An MPS share by its alias, without memory: the whole MPS GPU, written beside the alias (which takes
  // gpumem).
  const Json alias = InNamespace(PodWithLimits({{"nvidia.com/mps-core", "50"}}), "team");
  const Json alias_mutated = Patched(alias, modes);
  EXPECT_EQ(alias_mutated["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"], "16384");
  auto alias_request = core::DerivePodRequest(alias_mutated, core::ResourceConfig{});
  ASSERT_TRUE(alias_request.ok()) << alias_request.error().message;
  EXPECT_EQ(alias_request->containers[0].share, core::ShareKind::kMps);
  EXPECT_EQ(alias_request->containers[0].memory_mib, 16384);
  auto alias_again = MutationPatch(alias_mutated, SchedulerConfig{}, modes);
  ASSERT_TRUE(alias_again.ok());
  EXPECT_TRUE(alias_again->empty()) << alias_again->dump();
}

TEST(WebhookQuotaTest, WhatCannotBeConvertedIsRefusedWithTheReason) {
  const ClusterView view = QuotaView({MakeGpu("GPU-a", "NVIDIA A100-SXM4-80GB", 81920)});
  const Json percent = InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}}), "team");
  // No GPU passes the pod's filters: its MiB are unknown.
  Json nowhere = percent;
  nowhere["metadata"]["annotations"] = {{"nvidia.com/use-gputype", "H100"}};
  EXPECT_NE(QuotaError(nowhere, view).find("no GPU in the cluster passes the pod's GPU filters"),
            std::string::npos)
      << QuotaError(nowhere, view);
  ClusterView empty = QuotaView({});
  EXPECT_NE(QuotaError(percent, empty).find("no GPU in the cluster"), std::string::npos);
  // The nodes are not listed yet.
  ClusterView unlisted = QuotaView({});
  unlisted.visit_gpus = [](const std::function<void(const core::Gpu&)>&) -> Status {
    return Error{"the nodes are not listed yet"};
  };
  const std::string not_listed = QuotaError(percent, unlisted);
  EXPECT_NE(not_listed.find("not known yet (the nodes are not listed yet)"), std::string::npos) << not_listed;
  // A dynamic MIG pod's memory is its profile's; an exclusive pod takes no gpumem.
  Json mig = percent;
  mig["metadata"]["annotations"] = {{"nvidia.com/vgpu-mode", "mig"}};
  EXPECT_NE(QuotaError(mig, view).find("dynamic MIG pod"), std::string::npos) << QuotaError(mig, view);
  Json mig_mib = InNamespace(PodWithLimits({{"nvidia.com/gpumem", "9728"}}), "team");
  mig_mib["metadata"]["annotations"] = {{"nvidia.com/vgpu-mode", "mig"}};
  EXPECT_EQ(QuotaError(mig_mib, view), "(accepted)") << "MiB are counted as written";
  Json exclusive = InNamespace(PodWithLimits({{"nvidia.com/gpu", "1"}}), "team");
  exclusive["metadata"]["annotations"] = {{"nvidia.com/vgpu-mode", "exclusive"}};
  EXPECT_NE(QuotaError(exclusive, view).find("is exclusive, which takes whole GPUs"), std::string::npos)
      << QuotaError(exclusive, view);
  exclusive["metadata"]["namespace"] = "other";
  EXPECT_EQ(QuotaError(exclusive, view), "(accepted)");
  // A container that is not an object beside the rewritten one: refused as
  // derivation refuses it, never thrown at.
  Json junk = percent;
  junk["spec"]["containers"].insert(junk["spec"]["containers"].begin(), Json("junk"));
  const std::string junk_error = QuotaError(junk, view);
  EXPECT_NE(junk_error.find("spec.containers[0] is a string; expected a container object"), std::string::npos)
      << junk_error;
  EXPECT_EQ(junk_error, QuotaError(InNamespace(junk, "other"), view));
  // A percentage out of range is refused as anywhere, naming the field.
  for (const char* bad : {"0", "101", "abc", "-5"}) {
    const std::string why =
        QuotaError(InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", bad}}), "team"), view);
    EXPECT_NE(why.find("nvidia.com/gpumem-percentage"), std::string::npos) << bad << ": " << why;
    if (std::string_view(bad) != "abc") {
      EXPECT_NE(why.find("from 1 to 100"), std::string::npos) << bad << ": " << why;
    }
  }
}

TEST(WebhookQuotaTest, UnknownQuotasRefuseOnlyWhatWouldNeedARewrite) {
  ClusterView view = QuotaView({MakeGpu("GPU-a", "A100", 40960)});
  view.gpu_memory_quota = [](const std::string&) {
    return NamespaceQuota{"the ResourceQuotas are not listed yet (last error: connection refused)", {}};
  };
  const std::string why =
      QuotaError(InNamespace(PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}}), "team"), view);
  for (const char* part : {"container \"app\" asks nvidia.com/gpumem-percentage 50",
                           "whether namespace \"team\" has one is not known",
                           "(the ResourceQuotas are not listed yet (last error: connection refused))",
                           "ask nvidia.com/gpumem in MiB"}) {
    EXPECT_NE(why.find(part), std::string::npos) << part << " in: " << why;
  }
  EXPECT_EQ(QuotaError(InNamespace(PodWithLimits({{"nvidia.com/gpumem", "3000"}}), "team"), view),
            "(accepted)");
  EXPECT_EQ(QuotaError(InNamespace(PodWithLimits({{"cpu", "1"}}), "team"), view), "(accepted)");
  // The resource names are the config's.
  SchedulerConfig config;
  config.resources.gpu_memory_name = "example.com/vmem";
  config.resources.gpu_memory_percent_name = "example.com/vmem-percent";
  ClusterView named = QuotaView({MakeGpu("GPU-a", "A100", 40960)});
  Json renamed =
      Patched(InNamespace(PodWithLimits({{"example.com/vmem-percent", "50"}}), "team"), named, config);
  EXPECT_EQ(renamed["spec"]["containers"][0]["resources"]["limits"]["example.com/vmem"], "20480")
      << renamed.dump();
  EXPECT_NE(QuotaError(InNamespace(PodWithLimits({{"example.com/vmem-percent", "50"}}), "team"), view, config)
                .find("requests.example.com/vmem"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::scheduler
