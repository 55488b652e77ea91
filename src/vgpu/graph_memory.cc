#include "vgpu/graph_memory.h"

#include <vector>

#include "vgpu/log.h"
#include "vgpu/runtime.h"

namespace tessera::vgpu {
namespace {

// Graph allocations are mapped in whole pages of the virtual memory
// management granularity; reserving per allocation rounded up to it never
// falls short of what the driver maps.
constexpr uint64_t kGraphGranularity = 2ull << 20;
constexpr int kMaxChildDepth = 8;

uint64_t round_up(uint64_t bytes) {
  uint64_t r = (bytes + kGraphGranularity - 1) / kGraphGranularity * kGraphGranularity;
  return r < bytes ? ~0ull : r;
}

uint64_t add_saturating(uint64_t a, uint64_t b) {
  return a + b < a ? ~0ull : a + b;
}

// Walks `graph` (and its child graphs), adding alloc node sizes to `out` and
// collecting the addresses allocated and freed in it.
GraphMemory::ScanResult scan_graph(Runtime& rt, CUgraph graph, GraphMemoryNeeds* out, int depth,
                                   std::vector<CUdeviceptr>* allocated, std::vector<CUdeviceptr>* freed) {
  const RealCuda& cu = rt.cuda;
  if (cu.cuGraphGetNodes == nullptr || cu.cuGraphNodeGetType == nullptr ||
      cu.cuGraphMemAllocNodeGetParams == nullptr)
    return GraphMemory::ScanResult::kOk;
  size_t count = 0;
  if (cu.cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0)
    return GraphMemory::ScanResult::kOk;
  std::vector<CUgraphNode> nodes(count);
  if (cu.cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return GraphMemory::ScanResult::kOk;
  if (count < nodes.size()) nodes.resize(count);
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (cu.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      CUDA_MEM_ALLOC_NODE_PARAMS params{};
      if (cu.cuGraphMemAllocNodeGetParams(node, &params) != CUDA_SUCCESS ||
          params.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        continue;
      CUdevice dev = params.poolProps.location.id;
      if (!rt.cuda_device_visible(dev)) return GraphMemory::ScanResult::kHiddenDevice;
      allocated->push_back(params.dptr);
      int index = rt.region_index_for_cuda_device(dev);
      if (index < 0 || index >= static_cast<int>(kRegionMaxDevices)) continue;  // not accounted
      out->bytes[index] = add_saturating(out->bytes[index], round_up(params.bytesize));
      out->any = true;
    } else if (type == CU_GRAPH_NODE_TYPE_MEM_FREE && cu.cuGraphMemFreeNodeGetParams != nullptr) {
      CUdeviceptr p = 0;
      if (cu.cuGraphMemFreeNodeGetParams(node, &p) == CUDA_SUCCESS) freed->push_back(p);
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && cu.cuGraphChildGraphNodeGetGraph != nullptr &&
               depth < kMaxChildDepth) {
      CUgraph child = nullptr;
      if (cu.cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS && child != nullptr &&
          scan_graph(rt, child, out, depth + 1, allocated, freed) == GraphMemory::ScanResult::kHiddenDevice)
        return GraphMemory::ScanResult::kHiddenDevice;
    }
  }
  return GraphMemory::ScanResult::kOk;
}

}  // namespace

GraphMemory::ScanResult GraphMemory::scan(Runtime& rt, CUgraph graph, GraphMemoryNeeds* out) {
  *out = GraphMemoryNeeds{};
  std::vector<CUdeviceptr> allocated, freed;
  ScanResult result = scan_graph(rt, graph, out, 0, &allocated, &freed);
  for (CUdeviceptr p : allocated) {
    bool found = false;
    for (CUdeviceptr f : freed) found = found || f == p;
    out->leaves_live = out->leaves_live || !found;
  }
  return result;
}

uint64_t GraphMemory::stream_key(CUstream stream, bool per_thread) {
  if (stream == CU_STREAM_PER_THREAD || (stream == nullptr && per_thread)) return 0;
  return stream == nullptr ? reinterpret_cast<uint64_t>(CU_STREAM_LEGACY)
                           : reinterpret_cast<uint64_t>(stream);
}

bool GraphMemory::driver_reserved(Runtime& rt, int device, uint64_t* out) {
  if (rt.cuda.cuDeviceGetGraphMemAttribute == nullptr) return false;
  for (int i = 0; i < rt.cuda_device_count; ++i) {
    if (rt.cuda_devices[i].region_index != device) continue;
    cuuint64_t value = 0;
    if (rt.cuda.cuDeviceGetGraphMemAttribute(rt.cuda_handles[i], CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                                             &value) != CUDA_SUCCESS)
      return false;
    *out = value;
    return true;
  }
  return false;
}

void GraphMemory::settle_locked(Runtime& rt, int device, uint64_t target) {
  if (target > charged_[device]) {
    // The driver already holds it: account it as it is.
    rt.region.reserve(device, target - charged_[device], /*force=*/true);
  } else if (target < charged_[device]) {
    rt.region.release(device, charged_[device] - target);
  }
  charged_[device] = target;
}

bool GraphMemory::before_commit(Runtime& rt, uint64_t exec, const GraphMemoryNeeds* needs, uint64_t stream,
                                const char* what, GraphMemoryTicket* ticket) {
  *ticket = GraphMemoryTicket{};
  if (!rt.accounting) return true;
  GraphMemoryNeeds need;
  if (needs != nullptr) {
    if (!needs->any) return true;
    ticket->devices = *needs;
    need = *needs;
  } else {
    if (!any_.load(std::memory_order_acquire)) return true;
    std::lock_guard<std::mutex> guard(mu_);
    auto it = execs_.find(exec);
    if (it == execs_.end()) return true;
    const ExecRecord& rec = it->second;
    ticket->devices = rec.needs;
    need = rec.needs;
    // Still mapped from its last launch or upload into this stream, and
    // nothing since that makes the driver remap: nothing new is needed.
    bool same_stream = rec.mapped && stream != 0 && rec.stream == stream;
    for (uint32_t d = 0; d < kRegionMaxDevices; ++d) {
      if (same_stream && rec.epoch[d] == epoch_[d]) need.bytes[d] = 0;
    }
  }
  // Reserved outside mu_: a refused reservation re-reads the pools (reconcile()).
  for (uint32_t d = 0; d < kRegionMaxDevices; ++d) {
    if (need.bytes[d] == 0) continue;
    if (!rt.reserve(static_cast<int>(d), need.bytes[d], what)) {
      for (uint32_t u = 0; u < d; ++u) rt.release(static_cast<int>(u), ticket->reserved[u]);
      *ticket = GraphMemoryTicket{};
      return false;
    }
    ticket->reserved[d] = need.bytes[d];
  }
  ticket->active = true;
  ticket->exec = exec;
  ticket->stream = stream;
  return true;
}

void GraphMemory::after_commit(Runtime& rt, const GraphMemoryTicket& ticket, CUresult rc, uint64_t exec) {
  if (!ticket.active) return;
  std::lock_guard<std::mutex> guard(mu_);
  for (uint32_t d = 0; d < kRegionMaxDevices; ++d) {
    if (ticket.devices.bytes[d] == 0) continue;
    int device = static_cast<int>(d);
    // The reservation joins the charge, which then moves to what the pool holds.
    charged_[d] += ticket.reserved[d];
    uint64_t held = 0;
    if (!driver_reserved(rt, device, &held)) {
      // The driver cannot say: keep what was reserved for a call that succeeded.
      held = rc == CUDA_SUCCESS ? charged_[d] : charged_[d] - ticket.reserved[d];
    }
    settle_locked(rt, device, held);
    if (rc != CUDA_SUCCESS) continue;
    // A mapping into another stream than the device's last one, or of a graph
    // that leaves memory allocated, may make the driver remap other graphs.
    if (ticket.stream == 0 || ticket.stream != last_stream_[d]) ++epoch_[d];
    if (ticket.devices.leaves_live) ++epoch_[d];
    last_stream_[d] = ticket.stream;
  }
  if (rc != CUDA_SUCCESS) return;
  auto it = execs_.find(exec);
  if (it != execs_.end()) {
    it->second.mapped = true;
    it->second.stream = ticket.stream;
    for (uint32_t d = 0; d < kRegionMaxDevices; ++d) it->second.epoch[d] = epoch_[d];
  }
}

void GraphMemory::instantiated(uint64_t exec, const GraphMemoryNeeds& needs) {
  std::lock_guard<std::mutex> guard(mu_);
  // A new executable may reuse a destroyed one's address: a fresh record.
  if (!needs.any) {
    execs_.erase(exec);
    return;
  }
  ExecRecord& rec = execs_[exec];
  rec = ExecRecord{};
  rec.needs = needs;
  any_.store(true, std::memory_order_release);
}

void GraphMemory::destroyed(Runtime& rt, uint64_t exec) {
  if (!any_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> guard(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  GraphMemoryNeeds needs = it->second.needs;
  execs_.erase(it);
  for (uint32_t d = 0; d < kRegionMaxDevices; ++d) {
    uint64_t held = 0;
    // The driver keeps a destroyed graph's memory in its pool until trimmed;
    // whatever it says it holds is what stays charged.
    if (needs.bytes[d] != 0 && driver_reserved(rt, static_cast<int>(d), &held))
      settle_locked(rt, static_cast<int>(d), held);
  }
}

void GraphMemory::trimmed(Runtime& rt, int device) {
  if (device < 0 || device >= static_cast<int>(kRegionMaxDevices)) return;
  std::lock_guard<std::mutex> guard(mu_);
  // Trimmed memory is mapped again at the next launch.
  for (auto& [exec, rec] : execs_)
    if (rec.needs.bytes[device] != 0) rec.mapped = false;
  ++epoch_[device];
  uint64_t held = 0;
  if (charged_[device] != 0 && driver_reserved(rt, device, &held)) settle_locked(rt, device, held);
}

bool GraphMemory::reconcile(Runtime& rt) {
  if (!any_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> guard(mu_);
  bool went_down = false;
  for (uint32_t d = 0; d < kRegionMaxDevices; ++d) {
    uint64_t held = 0;
    if (charged_[d] == 0 || !driver_reserved(rt, static_cast<int>(d), &held)) continue;
    went_down = went_down || held < charged_[d];
    settle_locked(rt, static_cast<int>(d), held);
  }
  return went_down;
}

void GraphMemory::reset_in_child() {
  execs_.clear();
  for (uint32_t d = 0; d < kRegionMaxDevices; ++d) {
    charged_[d] = 0;
    epoch_[d] = 0;
    last_stream_[d] = 0;
  }
  any_.store(false, std::memory_order_relaxed);
}

}  // namespace tessera::vgpu
