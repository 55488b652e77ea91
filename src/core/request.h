// What a pod asks for, in tessera's terms, after defaults are applied.
// Derivation from a pod's container limits (quantities, resource names,
// defaults, validation) lives next to these types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::core {

// What kind of share a container asks for, which decides the GPUs it may use
// (fit.h):
//   kVgpu       a vGPU slice, on vgpu GPUs; a whole-GPU request (all the
//               memory, cores 100 or not given) may also take an exclusive GPU;
//   kMps        an MPS client share (nvidia.com/vgpu-mode: mps, or the
//               nvidia.com/mps-core / mps-memory resources), on mps GPUs whose
//               shares tessera-scheduler sizes (replicas 0), memory and cores
//               accounted like a vGPU slice's;
//   kExclusive  whole GPUs in exclusive mode (nvidia.com/vgpu-mode: exclusive).
enum class ShareKind { kVgpu, kMps, kExclusive };

// One container's GPU request. Every vGPU of the container gets the same slice,
// each on a different physical GPU of the same node.
struct ContainerRequest {
  std::string name;
  int gpus = 0;                       // number of vGPUs
  int64_t memory_mib = 0;             // per vGPU; 0 with memory_percent unset = whole GPU
  std::optional<int> memory_percent;  // per vGPU, percent of the chosen GPU's memory
  int cores = 0;                      // percent per vGPU; 100 = exclusive
  // nvidia.com/priority as given, nullopt when the container gives none. CUDA's
  // and HAMi's convention, lower is more important: 0 = high, 1 and above =
  // low. It does not affect placement; the webhook passes it to the container
  // as CUDA_TASK_PRIORITY, where libvgpu lets a low-priority container yield
  // compute to the others (docs/compute.md). Not given = high.
  std::optional<int> priority;
  ShareKind share = ShareKind::kVgpu;
  bool operator==(const ContainerRequest&) const = default;
};

// Device-selection constraints from pod annotations.
struct GpuFilter {
  std::vector<std::string> use_types;    // nvidia.com/use-gputype: model must contain one of these
  std::vector<std::string> nouse_types;  // nvidia.com/nouse-gputype
  std::vector<std::string> use_uuids;    // nvidia.com/use-gpuuuid
  std::vector<std::string> nouse_uuids;  // nvidia.com/nouse-gpuuuid
  bool operator==(const GpuFilter&) const = default;
};

struct PodRequest {
  std::vector<ContainerRequest> containers;  // app containers that ask for GPUs
  // Init containers that ask for GPUs. They run one at a time before the app
  // containers, so each is placed on its own and does not add to them.
  std::vector<ContainerRequest> init_containers;
  GpuFilter filter;
  // Host resources (the trace benchmark uses them; 0 = not considered).
  int64_t cpu_milli = 0;
  int64_t host_memory_mib = 0;
  bool operator==(const PodRequest&) const = default;
};

}  // namespace tessera::core
