#include "scheduler/webhook.h"

#include <gtest/gtest.h>

#include <tuple>

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
