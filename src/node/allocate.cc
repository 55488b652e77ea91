#include "node/allocate.h"

#include "base/files.h"
#include "contract/container_contract.h"

#include "node/device_state.h"
#include "node/limits_file.h"
#include "node/mps/mps_container.h"
#include "node/region_catalog.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>

namespace tessera::node {
namespace {

bool IsRegularFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The region directory is written by whatever user the container runs as, so
// it is world-writable. Set with chmod rather than by changing the umask,
// which is process-wide.
Status MakeRegionDirectory(const std::string& root, const std::string& name, std::string& out_path) {
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(root, 0755));
  out_path = files::Join(root, name);
  if (::mkdir(out_path.c_str(), 0700) != 0) {
    return Error{"cannot create region directory '" + out_path + "': " + std::strerror(errno)};
  }
  if (::chmod(out_path.c_str(), 0777) != 0) {
    return Error{"cannot open up region directory '" + out_path + "': " + std::strerror(errno)};
  }
  return Status::Ok();
}

const core::Gpu* FindGpu(const std::vector<core::Gpu>& gpus, const std::string& uuid) {
  for (const auto& gpu : gpus) {
    if (gpu.uuid == uuid) return &gpu;
  }
  return nullptr;
}

}  // namespace

std::string RandomUuid() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  uint64_t hi = engine(), lo = engine();
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // RFC 4122 variant
  char text[37];
  std::snprintf(text, sizeof(text), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xffff), static_cast<unsigned>(hi & 0xffff),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xffffffffffffULL));
  return text;
}

namespace {

// Everything that can be checked before creating anything; returns the GPUs
// behind the device IDs, in request order.
Result<std::vector<std::string>> CheckRequest(const AllocateContext& context,
                                              const v1beta1::ContainerAllocateRequest& request) {
  const NodeConfig& config = *context.config;
  if (request.devices_ids().empty()) return Error{"the request names no devices"};

  std::vector<std::string> gpu_uuids;
  for (const auto& id : request.devices_ids()) {
    TESSERA_ASSIGN_OR_RETURN(const DeviceId parsed, ParseDeviceId(id));
    const core::Gpu* gpu = FindGpu(*context.gpus, parsed.gpu_uuid);
    if (gpu == nullptr) return Error{"device ID '" + id + "' names a GPU this node does not have"};
    if (parsed.replica >= gpu->slots) {
      return Error{"device ID '" + id + "' is beyond the " + std::to_string(gpu->slots) +
                   " replicas of its GPU"};
    }
    if (std::find(gpu_uuids.begin(), gpu_uuids.end(), gpu->uuid) == gpu_uuids.end())
      gpu_uuids.push_back(gpu->uuid);
  }

  // A GPU in mps mode sized per request (docs/sharing.md#mps): the container
  // is one client of its daemon, which must be running.
  for (const auto& uuid : gpu_uuids) {
    if (FindGpu(*context.gpus, uuid)->mode != core::SharingMode::kMps) continue;
    if (gpu_uuids.size() > 1) {
      return Error{"a container gets one MPS GPU only (it asked for " + std::to_string(gpu_uuids.size()) +
                   " GPUs): each GPU has its own MPS control daemon and a client reaches one"};
    }
    TESSERA_RETURN_IF_ERROR(mps::PipeDirectoryEdits(config.mps_root, config.mps_control_binary, uuid));
  }

  // Without libvgpu in place the container would run with no limits at all:
  // refuse rather than start it unenforced.
  if (!IsRegularFile(config.libvgpu_host_path)) {
    return Error{"libvgpu is not installed on this node: '" + config.libvgpu_host_path +
                 "' is missing (install it there or set libvgpu_host_path)"};
  }
  if (config.ld_so_preload && !IsRegularFile(config.PreloadFileHostPath())) {
    return Error{"the preload file '" + config.PreloadFileHostPath() +
                 "' is missing (tessera-node writes it at start; was it removed?)"};
  }
  return gpu_uuids;
}

}  // namespace

Status CheckContainerRequest(const AllocateContext& context,
                             const v1beta1::ContainerAllocateRequest& request) {
  TESSERA_RETURN_IF_ERROR(CheckRequest(context, request));
  return Status::Ok();
}

Result<v1beta1::ContainerAllocateResponse> AllocateContainer(
    const AllocateContext& context, const v1beta1::ContainerAllocateRequest& request) {
  const NodeConfig& config = *context.config;
  TESSERA_ASSIGN_OR_RETURN(const std::vector<std::string> gpu_uuids, CheckRequest(context, request));

  const std::string region_name = context.new_region_name();
  if (context.in_flight != nullptr) context.in_flight->Add(region_name);
  // The record ties the directory to the kubelet's device IDs, which its
  // PodResources API later ties to a pod (region_catalog.h). Without it the
  // directory could never be attributed or cleaned up: fail instead. It is
  // written first, before the directories it names: an Allocate killed
  // part-way (tessera-node's SIGKILL) then leaves a record without a
  // directory, which the monitor's clean-up removes, never a directory
  // without a record, which nothing may remove.
  RegionRecord record;
  record.resource_name = config.resource_name;
  record.device_ids.assign(request.devices_ids().begin(), request.devices_ids().end());
  record.created_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(config.region_host_dir, 0755));
  TESSERA_RETURN_IF_ERROR(WriteRegionRecord(config.region_host_dir, region_name, record));
  const std::string record_path = files::Join(config.region_host_dir, region_name + ".json");
  std::string region_host_path;
  if (auto s = MakeRegionDirectory(config.region_host_dir, region_name, region_host_path); !s.ok()) {
    ::unlink(record_path.c_str());
    return s.error();
  }
  // Beside it, out of the container's reach, the directory of its limits
  // file, mounted read-only (limits_file.h); the monitor writes the file.
  std::string limits_host_path;
  if (auto s = MakeLimitsDirectory(config.region_host_dir, region_name, limits_host_path); !s.ok()) {
    ::rmdir(region_host_path.c_str());
    ::unlink(record_path.c_str());
    return s.error();
  }

  v1beta1::ContainerAllocateResponse response;
  auto add_mount = [&](const std::string& container_path, const std::string& host_path, bool read_only) {
    auto* mount = response.add_mounts();
    mount->set_container_path(container_path);
    mount->set_host_path(host_path);
    mount->set_read_only(read_only);
  };
  add_mount(config.libvgpu_container_path, config.libvgpu_host_path, true);
  if (config.ld_so_preload) add_mount(kPreloadContainerPath, config.PreloadFileHostPath(), true);
  add_mount(config.region_container_dir, region_host_path, false);
  // An MPS client sized per request: its GPU's pipe directory besides libvgpu
  // (which holds the allocation's limits as for any vGPU container).
  for (const auto& uuid : gpu_uuids) {
    if (FindGpu(*context.gpus, uuid)->mode != core::SharingMode::kMps) continue;
    auto mps = mps::PipeDirectoryEdits(config.mps_root, config.mps_control_binary, uuid);
    if (!mps.ok()) return mps.error();
    for (const auto& m : mps->mounts) add_mount(m.container_path, m.host_path, m.read_only);
    for (const auto& [name, value] : mps->env) (*response.mutable_envs())[name] = value;
  }
  add_mount(contract::kLimitsContainerDir, limits_host_path, true);

  auto& envs = *response.mutable_envs();
  envs[contract::kSharedCacheEnv] = config.RegionFileContainerPath();
  if (!config.ld_so_preload) envs["LD_PRELOAD"] = config.libvgpu_container_path;
  if (config.memory_scaling > 1.0) envs[contract::kOversubscribeEnv] = contract::kEnvTrue;
  if (config.disable_core_limit) envs[contract::kCorePolicyEnv] = contract::kCorePolicyDisable;
  std::string kubelet_gpus;
  for (const auto& uuid : gpu_uuids) kubelet_gpus += (kubelet_gpus.empty() ? "" : ",") + uuid;
  // For a container whose pod tessera did not place (it has no
  // TESSERA_ALLOCATION): what libvgpu gives it, and which GPUs are its own.
  envs[contract::kUnplacedPodsEnv] = UnplacedPodsPolicyName(config.unplaced_pods);
  envs[contract::kKubeletGpusEnv] = kubelet_gpus;
  switch (config.visible_devices) {
    case VisibleDevicesMode::kWebhook:
      break;
    case VisibleDevicesMode::kDeviceIds:
      envs[contract::kVisibleDevicesEnv] = kubelet_gpus;
      break;
    case VisibleDevicesMode::kAll:
      envs[contract::kVisibleDevicesEnv] = contract::kVisibleDevicesAll;
      break;
  }
  (*response.mutable_annotations())[std::string(contract::kRegionDirAnnotation)] = region_host_path;
  return response;
}

Result<std::vector<std::string>> PreferredDevices(
    const std::vector<core::Gpu>& gpus, const v1beta1::ContainerPreferredAllocationRequest& request) {
  const size_t size = request.allocation_size() < 0 ? 0 : static_cast<size_t>(request.allocation_size());
  std::vector<std::string> chosen(request.must_include_deviceids().begin(),
                                  request.must_include_deviceids().end());
  if (chosen.size() > size) {
    return Error{"must_include_deviceIDs names " + std::to_string(chosen.size()) +
                 " devices but allocation_size is " + std::to_string(size)};
  }
  std::set<std::string> used_gpus;
  for (const auto& id : chosen) {
    TESSERA_ASSIGN_OR_RETURN(const DeviceId parsed, ParseDeviceId(id));
    used_gpus.insert(parsed.gpu_uuid);
  }

  // Free replicas per GPU, each list in replica order.
  std::map<std::string, std::vector<std::pair<int, std::string>>> free;
  for (const auto& id : request.available_deviceids()) {
    if (std::find(chosen.begin(), chosen.end(), id) != chosen.end()) continue;
    TESSERA_ASSIGN_OR_RETURN(const DeviceId parsed, ParseDeviceId(id));
    free[parsed.gpu_uuid].emplace_back(parsed.replica, id);
  }
  for (auto& [uuid, replicas] : free) std::sort(replicas.begin(), replicas.end());

  // GPU order for ties: the node's index order, unknown GPUs last by UUID.
  auto rank = [&](const std::string& uuid) {
    for (const auto& gpu : gpus) {
      if (gpu.uuid == uuid) return gpu.index;
    }
    return static_cast<int>(gpus.size()) + 1000;
  };

  while (chosen.size() < size) {
    const std::string* best = nullptr;
    for (int pass = 0; pass < 2 && best == nullptr; ++pass) {
      for (const auto& [uuid, replicas] : free) {
        if (replicas.empty() || (pass == 0 && used_gpus.count(uuid) > 0)) continue;
        if (best == nullptr || replicas.size() > free[*best].size() ||
            (replicas.size() == free[*best].size() && rank(uuid) < rank(*best))) {
          best = &uuid;
        }
      }
    }
    if (best == nullptr) {
      return Error{"only " + std::to_string(chosen.size()) + " devices are available, " +
                   std::to_string(size) + " were asked for"};
    }
    auto& replicas = free[*best];
    chosen.push_back(replicas.front().second);
    replicas.erase(replicas.begin());
    used_gpus.insert(*best);
  }
  return chosen;
}

}  // namespace tessera::node
