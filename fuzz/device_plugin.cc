// Fuzz target: tessera-node's device plugin, from the bytes of the kubelet's
// gRPC requests. gRPC hands the service a message parsed from the wire; here
// each input is parsed as an AllocateRequest and as a
// PreferredAllocationRequest (protobuf's own parser, as gRPC uses it) and,
// where it parses, served by DevicePluginService::Allocate and
// ::GetPreferredAllocation.
//
// The node has two GPUs with 10 and 4 slots; libvgpu and the preload file
// exist; regions go to a scratch folder emptied after every input.
//
// Properties: an answer names exactly one response per container request, a
// preferred allocation names allocation_size devices that
// include the must-include ones, all of them offered (available or
// must-include) and none twice when the request lists none twice; every
// refusal has a message.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "base/log.h"
#include "fuzz_support.h"
#include "node/device_state.h"
#include "node/plugin_service.h"

using namespace tessera;

namespace {

std::string g_dir;  // scratch folder: libvgpu, the preload file, regions; removed at exit

struct Fixture {
  node::NodeConfig config;
  node::DeviceState state;
  std::unique_ptr<node::DevicePluginService> service;

  Fixture() {
    log::SetLevel(log::Level::kError);  // one line per Allocate would drown the fuzzer's output
    const char* tmp = std::getenv("TMPDIR");
    g_dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessera-fuzz-plugin-XXXXXX";
    if (mkdtemp(g_dir.data()) == nullptr) fuzz::Fail(__FILE__, __LINE__, "mkdtemp", g_dir);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(g_dir, ec);
    });
    config.libvgpu_host_path = g_dir + "/lib/libvgpu.so";
    config.region_host_dir = g_dir + "/regions";
    std::filesystem::create_directories(g_dir + "/lib");
    std::ofstream(config.libvgpu_host_path) << "not really a library\n";
    std::ofstream(config.PreloadFileHostPath()) << config.libvgpu_container_path << "\n";

    std::vector<core::Gpu> gpus(2);
    gpus[0].uuid = "GPU-1a2b3c4d-0000-1111-2222-333344445555";
    gpus[0].slots = 10;
    gpus[1].uuid = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
    gpus[1].index = 1;
    gpus[1].slots = 4;
    state.SetGpus(gpus);
    int counter = 0;
    service = std::make_unique<node::DevicePluginService>(
        config, state, [counter]() mutable { return "r" + std::to_string(counter++); });
  }

  void EmptyRegions() const {
    std::error_code ec;
    std::filesystem::remove_all(config.region_host_dir, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  if (size > static_cast<size_t>(INT32_MAX)) return 0;
  const int length = static_cast<int>(size);

  v1beta1::AllocateRequest allocate;
  if (allocate.ParseFromArray(data, length)) {
    v1beta1::AllocateResponse response;
    grpc::Status status = fixture.service->Allocate(nullptr, &allocate, &response);
    fixture.EmptyRegions();
    if (status.ok()) {
      FUZZ_CHECK(response.container_responses_size() == allocate.container_requests_size(),
                 allocate.ShortDebugString());
    } else {
      FUZZ_CHECK(!status.error_message().empty(), allocate.ShortDebugString());
    }
  }

  v1beta1::PreferredAllocationRequest preferred;
  if (preferred.ParseFromArray(data, length)) {
    v1beta1::PreferredAllocationResponse response;
    grpc::Status status = fixture.service->GetPreferredAllocation(nullptr, &preferred, &response);
    if (!status.ok()) {
      FUZZ_CHECK(!status.error_message().empty(), preferred.ShortDebugString());
      return 0;
    }
    FUZZ_CHECK(response.container_responses_size() == preferred.container_requests_size(),
               preferred.ShortDebugString());
    for (int i = 0; i < preferred.container_requests_size(); ++i) {
      const auto& request = preferred.container_requests(i);
      const auto& ids = response.container_responses(i).deviceids();
      const std::set<std::string> chosen(ids.begin(), ids.end());
      const std::set<std::string> available(request.available_deviceids().begin(),
                                            request.available_deviceids().end());
      const std::set<std::string> must(request.must_include_deviceids().begin(),
                                       request.must_include_deviceids().end());
      FUZZ_CHECK(ids.size() == request.allocation_size(), preferred.ShortDebugString());
      for (const auto& id : must) FUZZ_CHECK(chosen.count(id) == 1, "must-include " + id + " left out");
      for (const auto& id : chosen) {
        FUZZ_CHECK(available.count(id) + must.count(id) > 0, "chose " + id + ", which was not offered");
      }
      // A kubelet lists each device once; then no device is named twice.
      if (available.size() == static_cast<size_t>(request.available_deviceids_size()) &&
          must.size() == static_cast<size_t>(request.must_include_deviceids_size())) {
        FUZZ_CHECK(chosen.size() == static_cast<size_t>(ids.size()), "a device named twice");
      }
    }
  }
  return 0;
}
