// Dynamic MIG end to end (issue 14 item 3): the tessera-node binary on the
// simulated GPU (two A100-80GB) with GPUs in mig-dynamic mode, the API-server
// and kubelet stand-ins, and tessera-scheduler's own code placing the pods:
//  - seven 9728 MiB pods (HAMi's nvidia.com/vgpu-mode: mig) all go to GPU 0,
//    each gets a 1g.10gb instance created at Allocate where the scheduler
//    placed it, and a container's process sees one 9728 MiB device; a 40 GB
//    pod goes to GPU 1, a second one to its other half, a third is refused;
//    deleting the pods on GPU 0's slices 0-3 destroys their instances after
//    the grace period and the third 40 GB pod fits on GPU 0 again;
//  - a retried Allocate gets the same instance; an Allocate no pod waits for
//    and a placement that is taken are refused and create nothing;
//  - a restart of tessera-node keeps the instances in use and destroys an
//    orphan; a critical XID takes a dynamic GPU's replicas out;
//  - an A100 whose MIG mode is off: pending (unhealthy) until `tessera sim reset`;
//  - mig_dynamic_gpus naming a GPU without MIG: tessera-node does not start.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "base/testing.h"
#include "core/allocation_codec.h"
#include "core/inventory_codec.h"
#include "host/nvml_api.h"
#include "host/nvml_mig.h"
#include "kubelet_standin.h"
#include "scheduler/scheduler.h"
#include "scheduler/testing.h"
#include "scheduler/webhook.h"
#include "testing/node_cluster.h"
#include "testing/process.h"
#include "testing/scheduler_in_process.h"

namespace tessera::node {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using ::tessera::testing::NodeCluster;
using ::tessera::testing::WaitFor;

constexpr const char* kNode = "mig-dyn-1";
constexpr const char* kGpu = "nvidia.com/gpu";
constexpr const char* kTwoA100s =
    "gpus:\n  - model: A100-80GB\n    mig: true\n  - model: A100-80GB\n    mig: true\n";

size_t Healthy(const std::vector<v1beta1::Device>& devices) {
  size_t n = 0;
  for (const auto& d : devices) n += d.health() == "Healthy";
  return n;
}

class MigDynamicTest : public ::testing::Test {
 protected:
  void SetUpCluster(const std::string& sim_config = kTwoA100s) {
    cluster_ = std::make_unique<NodeCluster>(
        testing::NodeClusterOptions{.node_name = kNode, .sim_config = sim_config, .temp_prefix = "tmd"});
    auto started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started.error().message;
  }

  void TearDown() override {
    if (scheduler_) scheduler_->Stop();
    if (!cluster_) return;
    cluster_->Stop();
    if (HasFailure()) std::cerr << "tessera-node log:\n" << cluster_->NodeLog() << std::endl;
  }

  void StartNode(std::map<std::string, std::string> overrides = {}) {
    std::map<std::string, std::string> flags = {
        {"--metrics-port", "0"}, {"--mig-dynamic-gpus", "all"}, {"--region-grace-seconds", "2"}};
    for (const auto& [flag, value] : overrides) flags[flag] = value;
    ASSERT_TRUE(cluster_->StartNode(flags).ok());
  }

  void StartScheduler() {
    auto scheduler =
        ::tessera::testing::StartReadyScheduler(::tessera::testing::LoopbackSchedulerConfig("it"),
                                                ::tessera::testing::ClientOfApiServer(cluster_->api().url()));
    ASSERT_TRUE(scheduler.ok()) << scheduler.error().message;
    scheduler_ = std::move(scheduler).value();
  }

  std::vector<core::Gpu> PublishedGpus() const {
    auto inventory = cluster_->PublishedInventory();
    return inventory ? inventory->gpus : std::vector<core::Gpu>{};
  }

  // The extender's /filter then /bind for `pod` on this node, as kube-scheduler
  // calls them. The filter is retried while the scheduler has not yet seen
  // what it needs (the inventory, freed instances). "" when bound, else why not.
  std::string Schedule(const std::string& name, int memory_mib, std::chrono::milliseconds patience = 30s) {
    // A HAMi-style pod: container "app" asks for one vGPU of `memory_mib`, nvidia.com/vgpu-mode: mig,
    // as tessera's webhook admits it.
    Json pod = scheduler::testing::MigPod("ml", name, memory_mib);
    auto patch = scheduler::MutationPatch(pod, scheduler::SchedulerConfig{}, 0);
    if (!patch.ok()) return "webhook: " + patch.error().message;
    auto created = cluster_->api().CreateObject("pods", pod.patch(*patch));
    if (!created.ok()) return "create: " + created.error().message;
    httplib::Client http("127.0.0.1", scheduler_->port());
    const Json args = {{"Pod", *created}, {"Nodes", nullptr}, {"NodeNames", {kNode}}};
    Json filtered;
    WaitFor(
        [&] {
          auto res = http.Post("/filter", args.dump(), "application/json");
          filtered = res ? Json::parse(res->body, nullptr, false) : Json();
          return filtered.is_object() && filtered["NodeNames"].is_array() &&
                 filtered["NodeNames"].size() == 1;
        },
        patience);
    if (!filtered.is_object() || !filtered["NodeNames"].is_array() || filtered["NodeNames"].size() != 1) {
      return "filter: " + filtered.dump();
    }
    const Json bind = {{"PodName", name},
                       {"PodNamespace", "ml"},
                       {"PodUID", (*created)["metadata"].value("uid", "")},
                       {"Node", kNode}};
    auto res = http.Post("/bind", bind.dump(), "application/json");
    if (!res) return "bind: no answer";
    Json answer = Json::parse(res->body, nullptr, false);
    if (!answer.is_object() || answer.value("Error", "x") != "") return "bind: " + res->body;
    return "";
  }

  // The pod's one MIG device as the scheduler's allocation names it.
  core::DeviceSlice Placed(const std::string& name) const {
    auto pod = cluster_->api().GetObject("pods", "ml", name);
    if (!pod) return {};
    auto text = (*pod)["metadata"]["annotations"].value(std::string(core::kAllocationAnnotation), "");
    auto allocation = core::DecodeAllocation(text);
    if (!allocation.ok() || allocation->containers.empty() || allocation->containers[0].devices.empty())
      return {};
    return allocation->containers[0].devices[0];
  }

  // The kubelet admitting `container` of `pod`: it asks the plugin's
  // preferred device among those no container holds, then allocates it.
  grpc::Status Admit(const std::string& pod, const std::string& container,
                     v1beta1::ContainerAllocateResponse* answer, std::string* device = nullptr) {
    v1beta1::PreferredAllocationRequest preferred;
    auto* request = preferred.add_container_requests();
    for (const auto& d : cluster_->kubelet().devices(kGpu)) {
      if (!held_.count(d.id())) request->add_available_deviceids(d.id());
    }
    request->set_allocation_size(1);
    v1beta1::PreferredAllocationResponse chosen;
    auto status = cluster_->kubelet().GetPreferredAllocation(preferred, &chosen);
    if (!status.ok()) return status;
    if (chosen.container_responses_size() != 1 || chosen.container_responses(0).deviceids_size() != 1) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "no preferred device");
    }
    const std::string id = chosen.container_responses(0).deviceids(0);
    if (device != nullptr) *device = id;
    status = cluster_->kubelet().AdmitContainer("ml", pod, container, kGpu, {id}, answer);
    if (status.ok()) held_[id] = pod;
    return status;
  }

  void DeletePod(const std::string& pod) {
    ASSERT_TRUE(cluster_->api().DeleteObject("pods", "ml", pod).ok());
    cluster_->kubelet().RemovePod("ml", pod);
    std::erase_if(held_, [&](const auto& entry) { return entry.second == pod; });
  }

  // The container's environment as the kubelet builds it: Allocate's
  // variables, then the pod's own (which win), a Downward API annotation the
  // pod lacks resolving to "".
  std::map<std::string, std::string> KubeletEnv(const std::string& pod_name, const std::string& container,
                                                const v1beta1::ContainerAllocateResponse& answer) const {
    std::map<std::string, std::string> env(answer.envs().begin(), answer.envs().end());
    auto pod = cluster_->api().GetObject("pods", "ml", pod_name);
    if (!pod) return env;
    const Json annotations = (*pod)["metadata"].value("annotations", Json::object());
    for (const Json& c : (*pod)["spec"]["containers"]) {
      if (c.value("name", "") != container) continue;
      for (const Json& e : c.value("env", Json::array())) {
        std::string field = e.value("/valueFrom/fieldRef/fieldPath"_json_pointer, "");
        if (e.contains("value")) {
          env[e["name"]] = e["value"];
        } else if (field.rfind("metadata.annotations['", 0) == 0) {
          const std::string key = field.substr(22, field.size() - 24);
          env[e["name"]] = annotations.value(key, "");
        }
      }
    }
    return env;
  }

  // Runs mig_probe as the container's process would: on the simulated GPU,
  // with only the Allocate answer's variables.
  std::string Probe(const v1beta1::ContainerAllocateResponse& answer, int alloc_mib = 0) const {
    std::string command =
        "env -i TESSERA_SIM_STATE=" + cluster_->sim().state_dir + " LD_LIBRARY_PATH=" + TESSERA_SIM_LIB_DIR;
    for (const auto& [k, v] : answer.envs()) command += " " + k + "=" + v;
    command += std::string(" ") + TESSERA_MIG_PROBE + " " + std::to_string(alloc_mib);
    return testing::RunShell(command).output;
  }

  // The GPUs' instances as NVML (the simulator) lists them.
  std::vector<host::MigGpuState> NvmlGpus() const {
    auto library = host::NvmlLibrary::Load(TESSERA_SIM_NVML);
    if (!library.ok()) return {};
    auto driver = host::NvmlMigDriver::Load((*library)->api(), TESSERA_SIM_NVML);
    if (!driver.ok()) return {};
    auto gpus = (*driver)->List();
    return gpus.ok() ? *gpus : std::vector<host::MigGpuState>{};
  }

  std::vector<std::string> NodeEvents(const std::string& reason) const {
    std::vector<std::string> messages;
    for (const auto& e : cluster_->api().ListObjects("events")) {
      if (e.value("/involvedObject/kind"_json_pointer, "") == "Node" && e.value("reason", "") == reason) {
        messages.push_back(e.value("message", ""));
      }
    }
    return messages;
  }

  std::unique_ptr<NodeCluster> cluster_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::map<std::string, std::string> held_;  // device ID -> pod
};

TEST_F(MigDynamicTest, TheIssueScenarioThroughTheScheduler) {
  SetUpCluster();
  StartNode();
  // Seven replicas per A100, no instance yet, both GPUs listed in mig-dynamic mode.
  ASSERT_TRUE(cluster_->kubelet().WaitForDevices(
      kGpu, [](const auto& d) { return Healthy(d) == 14; }, 60s))
      << cluster_->NodeLog();
  ASSERT_TRUE(WaitFor([&] {
    auto gpus = PublishedGpus();
    return gpus.size() == 2 && gpus[0].mode == core::SharingMode::kMigDynamic &&
           gpus[1].mode == core::SharingMode::kMigDynamic && gpus[0].mig_devices.empty() &&
           gpus[0].slots == 0;
  })) << cluster_->NodeLog();
  const std::string gpu0 = PublishedGpus()[0].uuid, gpu1 = PublishedGpus()[1].uuid;
  StartScheduler();

  // Nothing waits: an Allocate is refused and creates nothing.
  v1beta1::AllocateRequest stray;
  stray.add_container_requests()->add_devices_ids(gpu0 + "::6");
  v1beta1::AllocateResponse stray_answer;
  auto refused = cluster_->kubelet().Allocate(stray, &stray_answer);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.error_message().find("no pod bound to this node waits"), std::string::npos)
      << refused.error_message();

  // Seven 9728 MiB pods: all on GPU 0, each its own 1g.10gb.
  std::map<std::string, v1beta1::ContainerAllocateResponse> answers;
  for (int i = 0; i < 7; ++i) {
    const std::string name = "small-" + std::to_string(i);
    ASSERT_EQ(Schedule(name, 9728), "") << cluster_->NodeLog();
    const core::DeviceSlice placed = Placed(name);
    EXPECT_EQ(placed.uuid, gpu0);
    EXPECT_EQ(placed.mig_profile, "1g.10gb");
    if (i == 0) {
      // The kubelet's first call gets no answer to it (a timeout): it asks again
      // and the container gets the same instance.
      v1beta1::AllocateRequest retried;
      retried.add_container_requests()->add_devices_ids(gpu0 + "::0");
      v1beta1::AllocateResponse first;
      ASSERT_TRUE(cluster_->kubelet().Allocate(retried, &first).ok());
      std::string device;
      ASSERT_TRUE(Admit(name, "app", &answers[name], &device).ok());
      EXPECT_EQ(answers[name].envs().at("NVIDIA_VISIBLE_DEVICES"),
                first.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"));
      EXPECT_EQ(device.rfind(gpu0, 0), 0u) << device;  // steered to the instance's GPU
      continue;
    }
    auto status = Admit(name, "app", &answers[name]);
    ASSERT_TRUE(status.ok()) << name << ": " << status.error_message() << cluster_->NodeLog();
    EXPECT_EQ(answers[name].envs().at("NVIDIA_VISIBLE_DEVICES").rfind("MIG-", 0), 0u);
  }
  // The container, its pod admitted by the webhook, sees Allocate's MIG device:
  // no pod variable hides it.
  for (const auto& [name, answer] : answers) {
    const auto env = KubeletEnv(name, "app", answer);
    EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), answer.envs().at("NVIDIA_VISIBLE_DEVICES")) << name;
    EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES").rfind("MIG-", 0), 0u) << name;
  }
  std::set<std::string> instances;
  for (const auto& [name, answer] : answers) instances.insert(answer.envs().at("NVIDIA_VISIBLE_DEVICES"));
  EXPECT_EQ(instances.size(), 7u);
  // The inventory lists them on GPU 0 with the container each is for.
  ASSERT_TRUE(WaitFor([&] {
    auto gpus = PublishedGpus();
    if (gpus.size() != 2 || gpus[0].mig_devices.size() != 7) return false;
    return std::all_of(gpus[0].mig_devices.begin(), gpus[0].mig_devices.end(), [](const core::MigDevice& d) {
      return d.used_by.rfind("ml/small-", 0) == 0 && d.used_by.ends_with("/app");
    });
  })) << cluster_->NodeLog();

  // A container's process sees exactly its instance.
  const auto& first = answers["small-0"];
  std::string seen = Probe(first, 9000);
  EXPECT_NE(seen.find("1|NVIDIA A100-SXM4-80GB MIG 1g.10gb|9728|14"), std::string::npos) << seen;
  EXPECT_NE(seen.find("ALLOC 9000 OK"), std::string::npos) << seen;
  EXPECT_NE(Probe(first, 9800).find("ALLOC 9800 FAILED"), std::string::npos);

  // 40 GB pods: GPU 0 is full, GPU 1 takes two; a third has no room.
  for (const char* name : {"big-1", "big-2"}) {
    ASSERT_EQ(Schedule(name, 40000), "");
    EXPECT_EQ(Placed(name).uuid, gpu1);
    EXPECT_EQ(Placed(name).mig_profile, "3g.40gb");
    v1beta1::ContainerAllocateResponse answer;
    auto status = Admit(name, "app", &answer);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_NE(Probe(answer).find("|NVIDIA A100-SXM4-80GB MIG 3g.40gb|40192|42"), std::string::npos);
  }
  EXPECT_NE(Schedule("big-3", 40000, 3s).find("filter"), std::string::npos);

  // The pods on GPU 0's slices 0-3 are deleted: after the grace period their
  // instances are gone, and the scheduler fits the 40 GB pod there.
  std::set<std::string> freed;
  for (int i = 0; i < 7; ++i) {
    const std::string name = "small-" + std::to_string(i);
    if (Placed(name).mig_start < 4) {
      freed.insert(answers[name].envs().at("NVIDIA_VISIBLE_DEVICES"));
      DeletePod(name);
    }
  }
  ASSERT_EQ(freed.size(), 4u);
  ASSERT_TRUE(WaitFor([&] {
    auto gpus = PublishedGpus();
    return gpus.size() == 2 && gpus[0].mig_devices.size() == 3;
  })) << cluster_->NodeLog();
  for (const auto& gpu : NvmlGpus()) {
    for (const auto& i : gpu.instances) EXPECT_EQ(freed.count(i.mig_uuid), 0u) << i.mig_uuid;
  }
  ASSERT_TRUE(cluster_->api().DeleteObject("pods", "ml", "big-3").ok());
  ASSERT_EQ(Schedule("big-4", 40000), "");
  EXPECT_EQ(Placed("big-4").uuid, gpu0);
  EXPECT_EQ(Placed("big-4").mig_start, 0);
  v1beta1::ContainerAllocateResponse big;
  auto status = Admit("big-4", "app", &big);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(Probe(big).find("1|NVIDIA A100-SXM4-80GB MIG 3g.40gb|40192|42"), std::string::npos);
}

TEST_F(MigDynamicTest, ATakenPlacementIsRefusedAndRestartKeepsInstancesInUse) {
  SetUpCluster();
  StartNode();
  ASSERT_TRUE(cluster_->kubelet().WaitForDevices(
      kGpu, [](const auto& d) { return Healthy(d) == 14; }, 60s))
      << cluster_->NodeLog();
  ASSERT_TRUE(WaitFor([&] { return PublishedGpus().size() == 2; }));
  const std::string gpu0 = PublishedGpus()[0].uuid, gpu1 = PublishedGpus()[1].uuid;
  auto slice = [](const std::string& gpu, const char* profile, int start) {
    core::DeviceSlice d{gpu, 9728, 0};
    d.mig_profile = profile;
    d.mig_start = start;
    return d;
  };
  // As tessera-scheduler's bind leaves them: two pods on GPU 0.
  std::map<std::string, std::string> kept;
  for (auto [name, start] : {std::pair{"a", 6}, std::pair{"b", 5}}) {
    ASSERT_TRUE(cluster_->BindPod("ml", name, {slice(gpu0, "1g.10gb", start)}).ok());
    v1beta1::ContainerAllocateResponse answer;
    auto status = Admit(name, "main", &answer);
    ASSERT_TRUE(status.ok()) << status.error_message() << cluster_->NodeLog();
    kept[name] = answer.envs().at("NVIDIA_VISIBLE_DEVICES");
  }
  // A pod whose placement overlaps b's instance: refused, nothing created.
  ASSERT_TRUE(cluster_->BindPod("ml", "clash", {slice(gpu0, "2g.20gb", 4)}).ok());
  v1beta1::ContainerAllocateResponse clash;
  auto refused = Admit("clash", "main", &clash);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.error_message().find("2g.20gb@4"), std::string::npos) << refused.error_message();
  EXPECT_NE(refused.error_message().find("taken"), std::string::npos) << refused.error_message();
  ASSERT_TRUE(cluster_->api().DeleteObject("pods", "ml", "clash").ok());
  ASSERT_EQ(NvmlGpus().at(0).instances.size(), 2u);

  // tessera-node stops; meanwhile an instance nobody asked for appears on GPU 1.
  cluster_->StopNode();
  {
    auto library = host::NvmlLibrary::Load(TESSERA_SIM_NVML);
    ASSERT_TRUE(library.ok());
    auto driver = host::NvmlMigDriver::Load((*library)->api(), TESSERA_SIM_NVML);
    ASSERT_TRUE(driver.ok());
    ASSERT_TRUE((*driver)->CreateInstance(1, 9, 4).ok());  // 3g.40gb@4
  }
  ASSERT_EQ(NvmlGpus().at(1).instances.size(), 1u);
  StartNode();
  // The orphan goes; a's and b's instances stay, the same ones, listed as theirs.
  ASSERT_TRUE(WaitFor([&] { return NvmlGpus().at(1).instances.empty(); })) << cluster_->NodeLog();
  std::set<std::string> now;
  const auto after = NvmlGpus();
  for (const auto& i : after.at(0).instances) now.insert(i.mig_uuid);
  EXPECT_EQ(now, (std::set<std::string>{kept["a"], kept["b"]}));
  ASSERT_TRUE(WaitFor([&] {
    auto gpus = PublishedGpus();
    return gpus.size() == 2 && gpus[0].mig_devices.size() == 2 &&
           gpus[0].mig_devices[0].used_by == "ml/b/main" && gpus[0].mig_devices[1].used_by == "ml/a/main" &&
           gpus[1].mig_devices.empty();
  })) << cluster_->NodeLog();

  // A critical XID on GPU 1: its replicas turn unhealthy, and the inventory says so.
  auto xid = cluster_->RunCli("sim inject-xid --gpu 1 --xid 79");
  ASSERT_EQ(xid.exit_code, 0) << xid.output;
  ASSERT_TRUE(cluster_->kubelet().WaitForDevices(
      kGpu, [](const auto& d) { return Healthy(d) == 7; }, 30s))
      << cluster_->NodeLog();
  for (const auto& d : cluster_->kubelet().devices(kGpu)) {
    EXPECT_EQ(d.health() == "Healthy", d.id().rfind(gpu0, 0) == 0) << d.id();
  }
  EXPECT_TRUE(WaitFor([&] {
    auto gpus = PublishedGpus();
    return gpus.size() == 2 && gpus[0].healthy && !gpus[1].healthy;
  }));
}

TEST_F(MigDynamicTest, AnAmpereModeChangeIsPendingUntilReset) {
  SetUpCluster("gpus:\n  - model: A100-80GB\n");
  StartNode();
  ASSERT_TRUE(WaitFor([&] { return !NodeEvents("MigDynamicPending").empty(); })) << cluster_->NodeLog();
  EXPECT_NE(NodeEvents("MigDynamicPending")[0].find("pending until the GPU is reset"), std::string::npos);
  ASSERT_TRUE(cluster_->kubelet().WaitForDevices(
      kGpu, [](const auto& d) { return d.size() == 7; }, 60s));
  EXPECT_EQ(Healthy(cluster_->kubelet().devices(kGpu)), 0u);
  ASSERT_TRUE(WaitFor([&] {
    auto gpus = PublishedGpus();
    return gpus.size() == 1 && gpus[0].mode == core::SharingMode::kMigDynamic && !gpus[0].healthy;
  }));
  std::this_thread::sleep_for(1s);  // passes go by: still one Event
  EXPECT_EQ(NodeEvents("MigDynamicPending").size(), 1u);

  auto reset = cluster_->RunCli("sim reset --gpu 0");
  ASSERT_EQ(reset.exit_code, 0) << reset.output;
  ASSERT_TRUE(cluster_->kubelet().WaitForDevices(
      kGpu, [](const auto& d) { return Healthy(d) == 7; }, 60s))
      << cluster_->NodeLog();
  EXPECT_TRUE(WaitFor([&] {
    auto gpus = PublishedGpus();
    return gpus.size() == 1 && gpus[0].healthy;
  }));
}

TEST_F(MigDynamicTest, AGpuWithoutMigCannotBeDynamic) {
  SetUpCluster("gpus:\n  - model: A100-80GB\n    mig: true\n  - model: L4\n");
  StartNode({{"--mig-dynamic-gpus", "1"}});
  pid_t pid = cluster_->node_pid();
  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return ::waitpid(pid, &status, WNOHANG) == pid; })) << cluster_->NodeLog();
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(cluster_->NodeLog().find("mig_dynamic_gpus names GPU"), std::string::npos) << cluster_->NodeLog();
  EXPECT_NE(cluster_->NodeLog().find("which has no MIG"), std::string::npos);
}

}  // namespace
}  // namespace tessera::node
