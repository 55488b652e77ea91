// mig_allocate_bench: on the simulated GPU (an A100-80GB in MIG mode), how
// long tessera-node's MIG path takes:
//  - applying a layout: 7 x 1g.10gb created through NVML (GPU instance at its
//    placement + compute instance), and destroying them again;
//  - from the kubelet's Allocate call (gRPC over the plugin's unix socket, to
//    the MIG device plugin tessera-node serves) to a usable instance: a
//    process started with the answer's environment, as a container runtime
//    would, has initialised CUDA on its one MIG device and allocated 1 GiB in
//    it. Split into the Allocate round trip and the rest.
// Each figure is the median, p90 and max over --iterations runs, devices
// taken round-robin.
//
//   mig_allocate_bench [--iterations N]
// The program runs itself as the "container" (`mig_allocate_bench probe`).
#include <cuda.h>
#include <fcntl.h>
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
#include "node/mig/layout_applier.h"
#include "node/mig/mig_devices.h"
#include "node/mig/mig_plugin_service.h"
#include "node/plugin_server.h"

namespace {

using namespace tessera;
using BenchClock = bench::Clock;  // not tessera::Clock (base/clock.h)
using bench::Ms;
using bench::Probe;
using bench::RunContainer;
using bench::Stats;
using bench::Summarise;

constexpr const char* kLayout = R"(version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-disabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "probe") == 0) return Probe();
  log::SetLevel(*log::ParseLevel("warn"));
  const int iterations = bench::IterationsArg(argc, argv);
  auto machine = bench::StartSimMigMachine("migbench");
  if (!machine.ok()) {
    std::fprintf(stderr, "%s\n", machine.error().message.c_str());
    return 1;
  }
  const std::string& root = machine->root;
  const std::string& state_dir = machine->state_dir;
  const std::string& self = machine->self;
  host::NvmlMigDriver& driver = *machine->driver;
  auto layout = core::mig::ParseLayout(kLayout, "bench.yaml");
  node::mig::ApplyRequest request;
  request.file = &*layout;
  request.managed = [](int) { return true; };

  // Layout apply and teardown.
  std::vector<double> apply_ms, teardown_ms;
  for (int i = 0; i < std::max(3, iterations / 10); ++i) {
    request.config = "all-1g.10gb";
    auto t0 = BenchClock::now();
    auto applied = node::mig::ApplyLayout(driver, request);
    apply_ms.push_back(Ms(BenchClock::now() - t0));
    if (applied.state != node::mig::ApplyState::kSuccess || applied.created != 7) {
      std::fprintf(stderr, "apply failed: %s\n", applied.Summary().c_str());
      return 1;
    }
    request.config = "all-disabled";
    t0 = BenchClock::now();
    auto removed = node::mig::ApplyLayout(driver, request);
    teardown_ms.push_back(Ms(BenchClock::now() - t0));
    if (removed.destroyed != 7) return 1;
  }
  request.config = "all-1g.10gb";
  (void)node::mig::ApplyLayout(driver, request);

  // The MIG device plugin, served as tessera-node serves it.
  node::mig::MigDeviceState state;
  auto gpus = driver.List();
  state.Set(node::mig::MigDevicesOf(
      *gpus, [](int) { return true; }, node::mig::MigStrategy::kMixed));
  node::NodeConfig config;
  config.plugin_dir = root;
  config.resource_name = "nvidia.com/mig-1g.10gb";
  node::PluginServer server(
      config, [&] { return std::make_unique<node::mig::MigPluginService>(config.resource_name, state); });
  if (!server.Start().ok()) return 1;
  auto stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix://" + config.PluginSocketPath(), grpc::InsecureChannelCredentials()));
  const auto devices = state.Get().devices;

  std::vector<double> rpc_ms, usable_ms;
  for (int i = 0; i < iterations; ++i) {
    const std::string& id = devices[static_cast<size_t>(i) % devices.size()].mig_uuid;
    v1beta1::AllocateRequest allocate;
    allocate.add_container_requests()->add_devices_ids(id);
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
  }
  server.Stop();
  request.config = "all-disabled";
  (void)node::mig::ApplyLayout(driver, request);

  auto print = [](const char* what, const std::vector<double>& v) {
    Stats s = Summarise(v);
    std::printf("%-52s n=%3zu  median %8.3f ms  p90 %8.3f ms  max %8.3f ms\n", what, v.size(), s.median,
                s.p90, s.max);
  };
  print("layout apply: 7 x 1g.10gb created", apply_ms);
  print("layout teardown: 7 instances destroyed", teardown_ms);
  print("Allocate round trip (gRPC, unix socket)", rpc_ms);
  print("Allocate -> process on its instance, 1 GiB allocated", usable_ms);
  std::filesystem::remove_all(root);
  return 0;
}
