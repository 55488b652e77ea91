// mig_dynamic_bench: on the simulated GPU (an A100-80GB in MIG mode, in
// tessera-node's mig-dynamic mode), how long the dynamic path takes from the
// kubelet's Allocate to a usable instance:
//  - the Allocate round trip (gRPC over the plugin's unix socket to the vGPU
//    device plugin tessera-node serves, which finds the pod's allocation and
//    creates the GPU instance + compute instance at its placement);
//  - Allocate until a process started with the answer's environment, as a
//    container runtime would, has initialised CUDA on its one MIG device and
//    allocated 1 GiB in it;
//  - the cleanup pass that destroys the instance once its pod is gone.
// Each iteration is one pod asking for one 1g.10gb at the next of the seven
// placements; median, p90 and max over --iterations runs.
//
//   mig_dynamic_bench [--iterations N]
// The program runs itself as the "container" (`mig_dynamic_bench probe`).
#include <cuda.h>
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/log.h"
#include "bench_container.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "host/nvml_api.h"
#include "host/nvml_mig.h"
#include "node/allocate.h"
#include "node/device_state.h"
#include "node/mig/dynamic_mig.h"
#include "node/plugin_server.h"
#include "node/plugin_service.h"

namespace {

using namespace tessera;
using BenchClock = bench::Clock;  // not tessera::Clock (base/clock.h)
using bench::Ms;
using bench::Probe;
using bench::RunContainer;
using bench::Stats;
using bench::Summarise;

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "probe") == 0) return Probe();
  log::SetLevel(*log::ParseLevel("warn"));
  const int iterations = bench::IterationsArg(argc, argv);
  auto machine = bench::StartSimMigMachine("migdynbench");
  if (!machine.ok()) {
    std::fprintf(stderr, "%s\n", machine.error().message.c_str());
    return 1;
  }
  const std::string& root = machine->root;
  const std::string& state_dir = machine->state_dir;
  const std::string& self = machine->self;
  host::NvmlMigDriver& driver = *machine->driver;
  auto listed = driver.List();
  if (!listed.ok() || listed->empty()) return 1;
  core::Gpu gpu;
  gpu.uuid = listed->front().uuid;
  gpu.index = 0;
  gpu.model = listed->front().name;
  gpu.memory_mib = static_cast<int64_t>(listed->front().memory_mib);
  gpu.mig_capable = true;

  // One pod at a time, as the kubelet admits them: its allocation names the
  // next placement.
  std::vector<node::mig::BoundPod> pods;
  node::mig::DynamicMigOptions options;
  options.gpus = {true, {}};
  options.grace_seconds = 0;
  node::mig::DynamicMig dynamic(
      options, &driver, [&]() -> std::optional<std::vector<node::mig::BoundPod>> { return pods; },
      [&]() -> Result<std::set<std::string>> { return std::set<std::string>{}; });
  if (auto prepared = dynamic.Prepare({gpu}); !prepared.ok() || prepared->size() != 1) return 1;

  node::NodeConfig config;
  config.plugin_dir = root;
  node::DeviceState vgpus;  // no vGPU GPU on this node
  node::PluginServer server(config, [&] {
    return std::make_unique<node::DevicePluginService>(config, vgpus, node::RandomUuid, &dynamic);
  });
  if (!server.Start().ok()) return 1;
  auto stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix://" + config.PluginSocketPath(), grpc::InsecureChannelCredentials()));

  std::vector<double> rpc_ms, usable_ms, cleanup_ms;
  for (int i = 0; i < iterations; ++i) {
    node::mig::BoundPod pod;
    pod.pod_namespace = "bench";
    pod.pod_name = "pod-" + std::to_string(i);
    pod.uid = pod.pod_name;
    core::DeviceSlice slice{gpu.uuid, 9728, 0};
    slice.mig_profile = "1g.10gb";
    slice.mig_start = i % 7;
    pod.allocation.containers.push_back({"main", {slice}});
    pods = {pod};

    v1beta1::AllocateRequest allocate;
    allocate.add_container_requests()->add_devices_ids(node::MakeDeviceId(gpu.uuid, i % 7));
    v1beta1::AllocateResponse answer;
    grpc::ClientContext context;
    auto t0 = BenchClock::now();
    grpc::Status status = stub->Allocate(&context, allocate, &answer);
    auto t1 = BenchClock::now();
    if (!status.ok() ||
        !RunContainer(self, state_dir, answer.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"))) {
      std::fprintf(stderr, "iteration %d failed: %s\n", i, status.error_message().c_str());
      return 1;
    }
    auto t2 = BenchClock::now();
    rpc_ms.push_back(Ms(t1 - t0));
    usable_ms.push_back(Ms(t2 - t0));

    pods.clear();  // the pod is gone
    auto t3 = BenchClock::now();
    dynamic.Tick();
    cleanup_ms.push_back(Ms(BenchClock::now() - t3));
    if (!dynamic.Devices().empty()) {
      std::fprintf(stderr, "iteration %d: the instance was not destroyed\n", i);
      return 1;
    }
  }
  server.Stop();

  auto print = [](const char* what, const std::vector<double>& v) {
    Stats s = Summarise(v);
    std::printf("%-58s n=%3zu  median %8.3f ms  p90 %8.3f ms  max %8.3f ms\n", what, v.size(), s.median,
                s.p90, s.max);
  };
  print("Allocate round trip, GI+CI created (gRPC, unix socket)", rpc_ms);
  print("Allocate -> process on its instance, 1 GiB allocated", usable_ms);
  print("cleanup pass destroying the instance of a gone pod", cleanup_ms);
  std::filesystem::remove_all(root);
  return 0;
}
