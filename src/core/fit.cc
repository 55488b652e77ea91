#include "core/fit.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <numeric>

namespace tessera::core {
namespace {

bool ContainsIgnoringCase(std::string_view haystack, std::string_view needle) {
  if (needle.empty()) return true;
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  });
  return it != haystack.end();
}

int64_t ResolveMemory(const GpuState& gpu, const ContainerRequest& c) {
  if (c.memory_percent) return gpu.gpu.memory_mib * *c.memory_percent / 100;
  if (c.memory_mib == 0) return gpu.gpu.memory_mib;
  return c.memory_mib;
}

std::string Describe(const GpuState& gpu, int index, const GpuCheck& check) {
  std::string head = gpu.gpu.uuid + " (#" + std::to_string(index) + ", " + gpu.gpu.model + "): ";
  switch (check.reason) {
    case GpuReason::kFits:
      return head + "fits";
    case GpuReason::kUnhealthy:
      return head + "unhealthy";
    case GpuReason::kHeldByUnplacedPod:
      return head + "held whole by pod " + gpu.gpu.held_by + ", which tessera-scheduler did not place";
    case GpuReason::kUuidNotAllowed:
      return head + "excluded by the pod's GPU UUID filter";
    case GpuReason::kTypeNotAllowed:
      return head + "model excluded by the pod's GPU type filter";
    case GpuReason::kHeldExclusively:
      return head + "held exclusively by another vGPU (cores 100)";
    case GpuReason::kNeedsExclusive:
      return head + "in use by " + std::to_string(check.free) + " vGPU(s); cores 100 needs the GPU to itself";
    case GpuReason::kNoFreeSlot:
      return head + "no free vGPU slot (" + std::to_string(check.asked) + " of " +
             std::to_string(check.asked) + " used)";
    case GpuReason::kInsufficientMemory:
      if (check.asked > gpu.gpu.memory_mib) {
        return head + "not enough memory: " + std::to_string(check.asked) +
               " MiB asked, more than the GPU's " + std::to_string(gpu.gpu.memory_mib) + " MiB";
      }
      return head + "not enough memory: " + std::to_string(check.asked) + " MiB asked, " +
             std::to_string(check.free) + " MiB free";
    case GpuReason::kInsufficientCores:
      return head + "not enough cores: " + std::to_string(check.asked) + "% asked, " +
             std::to_string(check.free) + "% free";
    case GpuReason::kUsedBySameContainer:
      return head + "already holds another vGPU of this container";
    case GpuReason::kInMigMode:
      return head + "in MIG mode: it offers MIG devices, not vGPU slices";
    case GpuReason::kReplicasOnly:
      return head + "in " + SharingModeName(gpu.gpu.mode) + " mode with " + std::to_string(gpu.gpu.replicas) +
             " replicas, which kube-scheduler counts: ask for the replicas' resource (e.g. "
             "nvidia.com/gpu.shared) "
             "instead";
    case GpuReason::kModeMismatch:
      return head + "in " + SharingModeName(gpu.gpu.mode) + " mode, which takes " +
             (gpu.gpu.mode == SharingMode::kMps         ? "only MPS shares (nvidia.com/vgpu-mode: mps)"
              : gpu.gpu.mode == SharingMode::kExclusive ? "whole GPUs, not MPS shares"
                                                        : "vGPU slices, not MPS or exclusive requests");
    case GpuReason::kNeedsWholeGpu:
      return head + "in exclusive mode: it takes only a request for the whole GPU (all " +
             std::to_string(gpu.gpu.memory_mib) + " MiB, gpucores 100 or not given)";
  }
  return head;
}

int LanesBetween(const Gpu& a, const Gpu& b) {
  for (const GpuLink& l : a.links) {
    if (l.peer_uuid == b.uuid && l.kind == LinkKind::kNvlink) return std::max(1, l.lanes);
  }
  return 0;
}

// Places one container (all its vGPUs) given the pod's usage so far.
// Returns false and fills `rejections` when it does not fit.
bool PlaceContainer(const NodeState& node, const ContainerRequest& req, const GpuFilter& filter,
                    const std::vector<GpuUsage>& pending, GpuOrder order, ContainerPlacement& out,
                    std::vector<GpuRejection>* rejections) {
  const auto& gpus = node.gpus();
  // Scratch reused across calls on this thread: a scheduler evaluates
  // thousands of nodes per request, and these were three allocations each.
  thread_local std::vector<int> candidates;
  thread_local std::vector<int64_t> memory;
  thread_local std::vector<int> cores;
  thread_local std::vector<int> key;
  candidates.clear();
  memory.assign(gpus.size(), 0);
  cores.assign(gpus.size(), 0);
  key.assign(gpus.size(), 0);
  const auto& views = node.gpu_views();
  for (size_t i = 0; i < gpus.size(); ++i) {
    GpuCheck check = CheckGpuOf(node, static_cast<int>(i), req, filter, pending[i]);
    if (!check.fits()) {
      if (rejections) {
        rejections->push_back({req.name, static_cast<int>(i), gpus[i].gpu.uuid, check,
                               Describe(gpus[i], static_cast<int>(i), check)});
      }
      continue;
    }
    memory[i] = check.memory_mib;
    cores[i] = check.cores;
    // Free milli once this pod's earlier containers are added: the ordering key.
    key[i] = views[i].free_milli_with(pending[i]);
    candidates.push_back(static_cast<int>(i));
  }
  if (static_cast<int>(candidates.size()) < req.gpus) return false;
  // A total order (ties broken by index), so std::sort gives what
  // std::stable_sort gave, without stable_sort's temporary buffer.
  std::sort(candidates.begin(), candidates.end(), [&](int a, int b) {
    if (key[a] != key[b]) return order == GpuOrder::kBinpack ? key[a] < key[b] : key[a] > key[b];
    return a < b;
  });
  std::vector<int> chosen = ChooseGpus(node, candidates, req.gpus);
  out.slices.clear();
  for (int g : chosen) out.slices.push_back({g, memory[g], cores[g], views[g].mps});
  return true;
}

void AddUsage(GpuUsage& u, const SlicePlacement& s) {
  u.memory_mib += s.memory_mib;
  u.cores += s.cores;
  u.slots += 1;
  u.exclusive = u.exclusive || s.cores >= 100;
}

}  // namespace

std::string_view ReasonName(GpuReason reason) {
  // Indexed by GpuReason, in its declaration order.
  static constexpr std::string_view kNames[] = {"fits",
                                                "unhealthy",
                                                "held-by-unplaced-pod",
                                                "uuid-not-allowed",
                                                "type-not-allowed",
                                                "held-exclusively",
                                                "needs-exclusive",
                                                "no-free-slot",
                                                "insufficient-memory",
                                                "insufficient-cores",
                                                "used-by-same-container",
                                                "gpu-in-mig-mode",
                                                "gpu-replicas-only",
                                                "sharing-mode-mismatch",
                                                "exclusive-needs-whole-gpu"};
  static_assert(std::size(kNames) == static_cast<size_t>(GpuReason::kNeedsWholeGpu) + 1);
  const auto i = static_cast<size_t>(reason);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

bool TypeAllowed(const GpuFilter& filter, std::string_view model) {
  if (!filter.use_types.empty()) {
    bool any = false;
    for (const std::string& t : filter.use_types) any = any || ContainsIgnoringCase(model, t);
    if (!any) return false;
  }
  for (const std::string& t : filter.nouse_types) {
    if (ContainsIgnoringCase(model, t)) return false;
  }
  return true;
}

bool UuidAllowed(const GpuFilter& filter, std::string_view uuid) {
  if (!filter.use_uuids.empty() &&
      std::find(filter.use_uuids.begin(), filter.use_uuids.end(), uuid) == filter.use_uuids.end()) {
    return false;
  }
  return std::find(filter.nouse_uuids.begin(), filter.nouse_uuids.end(), uuid) == filter.nouse_uuids.end();
}

bool AsksForWholeGpu(const Gpu& gpu, const ContainerRequest& c) {
  const bool all_memory =
      c.memory_percent ? *c.memory_percent == 100 : (c.memory_mib == 0 || c.memory_mib == gpu.memory_mib);
  return all_memory && (c.cores == 0 || c.cores == 100);
}

GpuCheck CheckGpu(const GpuState& gpu, const ContainerRequest& c, const GpuFilter& filter,
                  const GpuUsage& pending) {
  GpuCheck r;
  if (!gpu.gpu.healthy) return {GpuReason::kUnhealthy};
  if (!gpu.gpu.held_by.empty()) return {GpuReason::kHeldByUnplacedPod};
  // Which share the GPU's mode takes (the rules in fit.h).
  bool whole = false;  // the slice takes the whole GPU: its memory, cores 100
  switch (gpu.gpu.mode) {
    case SharingMode::kMigStatic:
    case SharingMode::kMigDynamic:
      return {GpuReason::kInMigMode};
    case SharingMode::kTimeslice:
      return {GpuReason::kReplicasOnly};
    case SharingMode::kMps:
      if (gpu.gpu.replicas > 0) return {GpuReason::kReplicasOnly};
      if (c.share != ShareKind::kMps) return {GpuReason::kModeMismatch};
      break;
    case SharingMode::kExclusive:
      if (c.share == ShareKind::kMps) return {GpuReason::kModeMismatch};
      if (c.share == ShareKind::kVgpu && !AsksForWholeGpu(gpu.gpu, c)) return {GpuReason::kNeedsWholeGpu};
      whole = true;
      break;
    case SharingMode::kVgpu:
      if (c.share != ShareKind::kVgpu) return {GpuReason::kModeMismatch};
      break;
  }
  if (!UuidAllowed(filter, gpu.gpu.uuid)) return {GpuReason::kUuidNotAllowed};
  if (!TypeAllowed(filter, gpu.gpu.model)) return {GpuReason::kTypeNotAllowed};
  int slots_used = gpu.used.slots + pending.slots;
  r.cores = whole ? 100 : c.cores;
  if (gpu.used.exclusive || pending.exclusive) return {GpuReason::kHeldExclusively};
  if (r.cores >= 100 && slots_used > 0) return {GpuReason::kNeedsExclusive, 0, 0, slots_used};
  if (slots_used >= gpu.gpu.slots) return {GpuReason::kNoFreeSlot, 0, gpu.gpu.slots, 0};
  r.memory_mib = whole ? gpu.gpu.memory_mib : ResolveMemory(gpu, c);
  int64_t free_memory = gpu.free_memory_mib() - pending.memory_mib;
  if (r.memory_mib > free_memory)
    return {GpuReason::kInsufficientMemory, r.memory_mib, r.memory_mib, free_memory};
  int free_cores = gpu.free_cores() - pending.cores;
  if (r.cores > free_cores) return {GpuReason::kInsufficientCores, r.memory_mib, r.cores, free_cores};
  return r;
}

namespace {

bool NoGpuFilter(const GpuFilter& filter) {
  return filter.use_uuids.empty() && filter.nouse_uuids.empty() && filter.use_types.empty() &&
         filter.nouse_types.empty();
}

}  // namespace

GpuCheck CheckGpuOf(const NodeState& node, int gpu, const ContainerRequest& c, const GpuFilter& filter,
                    const GpuUsage& pending) {
  const GpuFitView& v = node.gpu_views()[gpu];
  if (!v.usable || c.share != ShareKind::kVgpu || !NoGpuFilter(filter)) {
    return CheckGpu(node.gpus()[gpu], c, filter, pending);
  }
  // CheckGpu's steps for a healthy vGPU-mode GPU that no unplaced pod holds,
  // a vGPU slice and no filter: the mode, UUID and type checks pass.
  GpuCheck r;
  const int slots_used = v.slots_used + pending.slots;
  r.cores = c.cores;
  if (v.exclusive || pending.exclusive) return {GpuReason::kHeldExclusively};
  if (r.cores >= 100 && slots_used > 0) return {GpuReason::kNeedsExclusive, 0, 0, slots_used};
  if (slots_used >= v.slots) return {GpuReason::kNoFreeSlot, 0, v.slots, 0};
  r.memory_mib = c.memory_percent    ? v.memory_mib * *c.memory_percent / 100
                 : c.memory_mib == 0 ? v.memory_mib
                                     : c.memory_mib;
  const int64_t free_memory = v.free_memory_mib - pending.memory_mib;
  if (r.memory_mib > free_memory)
    return {GpuReason::kInsufficientMemory, r.memory_mib, r.memory_mib, free_memory};
  const int free_cores = v.free_cores - pending.cores;
  if (r.cores > free_cores) return {GpuReason::kInsufficientCores, r.memory_mib, r.cores, free_cores};
  return r;
}

HostResources HostDemandOf(const PodRequest& pod) {
  return {pod.cpu_milli, pod.host_memory_mib};
}

std::vector<int> ChooseGpus(const NodeState& node, std::span<const int> candidates, int count) {
  if (count <= 0) return {};
  if (static_cast<int>(candidates.size()) < count) return {};
  const auto& gpus = node.gpus();
  bool topology = false;
  if (count > 1) {
    int numa = gpus[candidates[0]].gpu.numa_node;
    for (int c : candidates) {
      if (!gpus[c].gpu.links.empty() || gpus[c].gpu.numa_node != numa) topology = true;
    }
  }
  if (!topology) return {candidates.begin(), candidates.begin() + count};

  // Greedy growth from each start, then the best set by
  // (all pairs NVLinked, fewest NUMA nodes, most lanes, earliest candidates).
  struct Quality {
    int linked_pairs_missing = 0;
    int numa_nodes = 0;
    int lanes = 0;
    int position_sum = 0;
    bool operator<(const Quality& o) const {  // "better than"
      if (linked_pairs_missing != o.linked_pairs_missing)
        return linked_pairs_missing < o.linked_pairs_missing;
      if (numa_nodes != o.numa_nodes) return numa_nodes < o.numa_nodes;
      if (lanes != o.lanes) return lanes > o.lanes;
      return position_sum < o.position_sum;
    }
  };
  const int n = static_cast<int>(candidates.size());
  std::vector<int> best;
  Quality best_q;
  for (int start = 0; start < n; ++start) {
    std::vector<int> set{start};  // positions into candidates
    std::vector<bool> in(n, false);
    in[start] = true;
    const int start_numa = gpus[candidates[start]].gpu.numa_node;
    while (static_cast<int>(set.size()) < count) {
      int pick = -1;
      std::tuple<int, int, int> pick_key{-1, -1, 0};
      for (int p = 0; p < n; ++p) {
        if (in[p]) continue;
        int lanes = 0;
        for (int q : set) lanes += LanesBetween(gpus[candidates[q]].gpu, gpus[candidates[p]].gpu);
        int same_numa = gpus[candidates[p]].gpu.numa_node == start_numa ? 1 : 0;
        std::tuple<int, int, int> k{lanes, same_numa, -p};
        if (pick < 0 || k > pick_key) {
          pick = p;
          pick_key = k;
        }
      }
      set.push_back(pick);
      in[pick] = true;
    }
    Quality q;
    std::vector<int> numas;
    for (size_t a = 0; a < set.size(); ++a) {
      q.position_sum += set[a];
      numas.push_back(gpus[candidates[set[a]]].gpu.numa_node);
      for (size_t b = a + 1; b < set.size(); ++b) {
        int lanes = LanesBetween(gpus[candidates[set[a]]].gpu, gpus[candidates[set[b]]].gpu);
        if (lanes == 0) ++q.linked_pairs_missing;
        q.lanes += lanes;
      }
    }
    std::sort(numas.begin(), numas.end());
    q.numa_nodes = static_cast<int>(std::unique(numas.begin(), numas.end()) - numas.begin());
    if (best.empty() || q < best_q) {
      std::sort(set.begin(), set.end());
      best.clear();
      for (int p : set) best.push_back(candidates[p]);
      best_q = q;
    }
  }
  return best;
}

FitResult FitNode(const NodeState& node, const PodRequest& pod, GpuOrder order) {
  FitResult r;
  if (node.tracks_cpu() && pod.cpu_milli > node.free_cpu_milli()) {
    r.node_reason = NodeReason::kInsufficientCpu;
    r.message = "not enough CPU: " + std::to_string(pod.cpu_milli) + " milli asked, " +
                std::to_string(node.free_cpu_milli()) + " free";
    return r;
  }
  if (node.tracks_memory() && pod.host_memory_mib > node.free_host_memory_mib()) {
    r.node_reason = NodeReason::kInsufficientHostMemory;
    r.message = "not enough host memory: " + std::to_string(pod.host_memory_mib) + " MiB asked, " +
                std::to_string(node.free_host_memory_mib()) + " MiB free";
    return r;
  }
  const size_t n = node.gpus().size();
  std::vector<GpuUsage> pending(n);
  auto fail = [&](const ContainerRequest& c, bool init) {
    r.fits = false;
    r.placement = {};
    r.node_reason = NodeReason::kNotEnoughGpus;
    r.message = std::string(init ? "init container '" : "container '") + c.name + "' needs " +
                std::to_string(c.gpus) + " GPU(s); ";
    int usable = 0;
    std::vector<GpuRejection> rejections;
    ContainerPlacement ignored;
    PlaceContainer(node, c, pod.filter, init ? std::vector<GpuUsage>(n) : pending, order, ignored,
                   &rejections);
    usable = static_cast<int>(n - rejections.size());
    r.message += std::to_string(usable) + " of " + std::to_string(n) + " fit";
    for (const GpuRejection& rej : rejections) r.message += "; " + rej.message;
    r.rejections = std::move(rejections);
    return r;
  };
  r.placement.containers.reserve(pod.containers.size() + pod.init_containers.size());
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    const ContainerRequest& c = pod.containers[i];
    if (c.gpus <= 0) continue;
    ContainerPlacement cp{static_cast<int>(i), false, {}};
    if (!PlaceContainer(node, c, pod.filter, pending, order, cp, nullptr)) return fail(c, false);
    for (const SlicePlacement& s : cp.slices) AddUsage(pending[s.gpu], s);
    r.placement.containers.push_back(std::move(cp));
  }
  // Init containers run alone, before the app containers: each is checked
  // against the node without this pod's app usage. Among equally good GPUs they
  // prefer the ones the app containers use, where they reserve nothing extra.
  const std::vector<GpuUsage> none(n);
  for (size_t i = 0; i < pod.init_containers.size(); ++i) {
    const ContainerRequest& c = pod.init_containers[i];
    if (c.gpus <= 0) continue;
    ContainerPlacement cp{static_cast<int>(i), true, {}};
    if (!PlaceContainer(node, c, pod.filter, none, order, cp, nullptr)) return fail(c, true);
    // Reorder: GPUs shared with the app containers first, if they can host it.
    std::vector<int> preferred;
    for (size_t g = 0; g < n; ++g) {
      if (pending[g].slots > 0 && CheckGpu(node.gpus()[g], c, pod.filter).fits()) {
        preferred.push_back(static_cast<int>(g));
      }
    }
    for (const SlicePlacement& s : cp.slices) {
      if (std::find(preferred.begin(), preferred.end(), s.gpu) == preferred.end()) preferred.push_back(s.gpu);
    }
    std::vector<int> chosen = ChooseGpus(node, preferred, c.gpus);
    if (static_cast<int>(chosen.size()) == c.gpus) {
      cp.slices.clear();
      for (int g : chosen) {
        const GpuCheck check = CheckGpu(node.gpus()[g], c, pod.filter);
        cp.slices.push_back({g, check.memory_mib, check.cores, node.gpus()[g].gpu.mode == SharingMode::kMps});
      }
    }
    r.placement.containers.push_back(std::move(cp));
  }
  r.fits = true;
  return r;
}

bool FitsNode(const NodeState& node, const PodRequest& pod) {
  if (node.tracks_cpu() && pod.cpu_milli > node.free_cpu_milli()) return false;
  if (node.tracks_memory() && pod.host_memory_mib > node.free_host_memory_mib()) return false;
  const ContainerRequest* app = nullptr;
  for (const ContainerRequest& c : pod.containers) {
    if (c.gpus <= 0) continue;
    if (app) return FitNode(node, pod).fits;  // a later container sees what earlier ones took
    app = &c;
  }
  // One app container, and init containers each alone against the node (as
  // FitNode places them): each fits where enough GPUs pass the check.
  const int n = static_cast<int>(node.gpus().size());
  auto enough = [&](const ContainerRequest& c) {
    int passing = 0;
    for (int g = 0; g < n && passing < c.gpus; ++g) passing += CheckGpuOf(node, g, c, pod.filter).fits();
    return passing >= c.gpus;
  };
  if (app && !enough(*app)) return false;
  for (const ContainerRequest& c : pod.init_containers) {
    if (c.gpus > 0 && !enough(c)) return false;
  }
  return true;
}

PodAllocation ToAllocation(const NodeState& node, const PodRequest& pod, const Placement& placement) {
  PodAllocation a;
  a.node = node.name();
  for (const ContainerPlacement& cp : placement.containers) {
    ContainerAllocation ca;
    const auto& list = cp.init ? pod.init_containers : pod.containers;
    ca.container =
        cp.container >= 0 && cp.container < static_cast<int>(list.size()) ? list[cp.container].name : "";
    ca.init = cp.init;
    for (const SlicePlacement& s : cp.slices) {
      DeviceSlice slice{node.gpus()[s.gpu].gpu.uuid, s.memory_mib, s.cores};
      slice.mps = s.mps;
      ca.devices.push_back(std::move(slice));
    }
    a.containers.push_back(std::move(ca));
  }
  return a;
}

}  // namespace tessera::core
