#include "core/node_state.h"

#include <algorithm>
#include <utility>

namespace tessera::core {

int GpuState::free_milli() const {
  return free_milli_with(GpuUsage{});
}

int GpuState::free_milli_with(const GpuUsage& added) const {
  if (!gpu.usable() || used.exclusive || added.exclusive || free_slots() - added.slots <= 0) return 0;
  // Free compute in thousandths of what the GPU offers (a GPU offering 200 %
  // with 100 % used is half free, like one offering 100 % with 50 % used).
  const int free_cores_after = std::max(0, free_cores() - added.cores);
  int by_cores = gpu.cores > 0 ? static_cast<int>(free_cores_after * 1000LL / gpu.cores) : 0;
  if (gpu.memory_mib <= 0) return by_cores;
  int64_t by_memory = std::max<int64_t>(0, free_memory_mib() - added.memory_mib) * 1000 / gpu.memory_mib;
  return static_cast<int>(std::min<int64_t>(by_memory, by_cores));
}

void GpuTotals::Add(const GpuState& g) {
  ++gpus;
  healthy += g.gpu.healthy ? 1 : 0;
  if (g.gpu.replicas > 0) {
    ++replica_gpus;
    replicas += g.gpu.replicas;
    return;
  }
  memory_mib += g.gpu.memory_mib;
  memory_allocated_mib += g.used.memory_mib;
  cores += g.gpu.cores;
  cores_allocated += g.used.cores;
  slots += g.gpu.slots;
  slots_used += g.used.slots;
}

GpuTotals TotalsOf(const std::vector<GpuState>& gpus) {
  GpuTotals t;
  for (const GpuState& g : gpus) t.Add(g);
  return t;
}

std::string GpuState::Overcommit() const {
  std::string why;
  auto add = [&](const std::string& part) { why += (why.empty() ? "" : ", ") + part; };
  if (used.memory_mib > gpu.memory_mib) {
    add(std::to_string(used.memory_mib) + " MiB allocated of " + std::to_string(gpu.memory_mib));
  }
  if (used.cores > gpu.cores)
    add(std::to_string(used.cores) + "% cores allocated of " + std::to_string(gpu.cores));
  if (used.slots > gpu.slots)
    add(std::to_string(used.slots) + " vGPUs of " + std::to_string(gpu.slots) + " slots");
  if (used.exclusive && used.slots > 1)
    add("an exclusive slice shares it with " + std::to_string(used.slots - 1) + " other(s)");
  return why;
}

int WorkloadTagOf(const PodAllocation& allocation, const std::vector<GpuState>& gpus) {
  int whole = 0;
  bool any = false;
  for (const ContainerAllocation& c : allocation.containers) {
    if (c.init) continue;
    for (const DeviceSlice& s : c.devices) {
      any = true;
      bool whole_gpu = s.cores >= 100;
      for (const GpuState& g : gpus) {
        if (g.gpu.uuid == s.uuid) whole_gpu = whole_gpu && s.memory_mib >= g.gpu.memory_mib;
      }
      if (!whole_gpu) return 0;
      ++whole;
    }
  }
  return any ? whole : -1;
}

NodeState::NodeState(std::string name, std::vector<Gpu> gpus, HostResources host_capacity)
    : name_(std::move(name)), host_capacity_(host_capacity) {
  gpus_.reserve(gpus.size());
  for (Gpu& g : gpus) gpus_.push_back(GpuState{std::move(g), {}});
  Recount();
}

int NodeState::IndexOf(const std::string& uuid) const {
  for (size_t i = 0; i < gpus_.size(); ++i) {
    if (gpus_[i].gpu.uuid == uuid) return static_cast<int>(i);
  }
  return -1;
}

void NodeState::Recount() {
  free_milli_total_ = 0;
  idle_gpus_ = 0;
  views_.resize(gpus_.size());
  for (size_t i = 0; i < gpus_.size(); ++i) {
    const GpuState& g = gpus_[i];
    GpuFitView& v = views_[i];
    v.memory_mib = g.gpu.memory_mib;
    v.free_memory_mib = g.free_memory_mib();
    v.cores = g.gpu.cores;
    v.free_cores = g.free_cores();
    v.slots = g.gpu.slots;
    v.slots_used = g.used.slots;
    v.free_milli = g.free_milli();
    v.usable = g.gpu.usable();
    v.exclusive = g.used.exclusive;
    v.mps = g.gpu.mode == SharingMode::kMps;
  }
  for (const GpuState& g : gpus_) {
    if (!g.gpu.usable()) continue;
    free_milli_total_ += g.free_milli();
    if (g.idle()) ++idle_gpus_;
  }
}

void NodeState::SetHealthy(int gpu_index, bool healthy) {
  gpus_.at(gpu_index).gpu.healthy = healthy;
  Recount();
  ++version_;
}

// Per GPU, what the pod takes: the sum of its app containers' slices, and for
// init containers (which run alone, one at a time) the largest of them; the
// pod reserves the larger of the two.
Result<std::vector<NodeState::Delta>> NodeState::DeltasOf(const PodAllocation& allocation) const {
  std::vector<GpuUsage> app(gpus_.size());
  std::vector<GpuUsage> init(gpus_.size());
  std::vector<bool> touched(gpus_.size(), false);
  for (const ContainerAllocation& c : allocation.containers) {
    for (const DeviceSlice& s : c.devices) {
      int i = IndexOf(s.uuid);
      if (i < 0) {
        return Error{"node '" + name_ + "' has no GPU " + s.uuid + " (container '" + c.container + "')"};
      }
      if (s.memory_mib < 0 || s.cores < 0 || s.cores > 100) {
        return Error{"container '" + c.container + "': invalid slice of " + s.uuid};
      }
      touched[i] = true;
      if (c.init) {
        GpuUsage& u = init[i];
        u.memory_mib = std::max(u.memory_mib, s.memory_mib);
        u.cores = std::max(u.cores, s.cores);
        u.slots = 1;
        u.exclusive = u.exclusive || s.cores >= 100;
      } else {
        GpuUsage& u = app[i];
        u.memory_mib += s.memory_mib;
        u.cores += s.cores;
        u.slots += 1;
        u.exclusive = u.exclusive || s.cores >= 100;
      }
    }
  }
  std::vector<Delta> deltas;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    if (!touched[i]) continue;
    GpuUsage u;
    u.memory_mib = std::max(app[i].memory_mib, init[i].memory_mib);
    u.cores = std::max(app[i].cores, init[i].cores);
    u.slots = std::max(app[i].slots, init[i].slots);
    u.exclusive = app[i].exclusive || init[i].exclusive;
    deltas.push_back({static_cast<int>(i), u});
  }
  return deltas;
}

Status NodeState::CheckFits(const std::vector<Delta>& deltas, const HostResources& host) const {
  for (const Delta& d : deltas) {
    const GpuState& g = gpus_[d.gpu];
    const std::string where = "node '" + name_ + "' GPU " + g.gpu.uuid;
    if (g.used.exclusive) return Error{where + " is held exclusively by another pod"};
    if (d.usage.exclusive && !g.idle()) return Error{where + " is in use; an exclusive slice needs it idle"};
    if (d.usage.memory_mib > g.free_memory_mib()) {
      return Error{where + ": " + std::to_string(d.usage.memory_mib) + " MiB asked, " +
                   std::to_string(g.free_memory_mib()) + " MiB free"};
    }
    if (d.usage.cores > g.free_cores()) {
      return Error{where + ": " + std::to_string(d.usage.cores) + "% cores asked, " +
                   std::to_string(g.free_cores()) + "% free"};
    }
    if (d.usage.slots > g.free_slots()) return Error{where + " has no free vGPU slot"};
  }
  if (tracks_cpu() && host.cpu_milli > free_cpu_milli()) {
    return Error{"node '" + name_ + "': " + std::to_string(host.cpu_milli) + " milli-CPU asked, " +
                 std::to_string(free_cpu_milli()) + " free"};
  }
  if (tracks_memory() && host.memory_mib > free_host_memory_mib()) {
    return Error{"node '" + name_ + "': " + std::to_string(host.memory_mib) + " MiB host memory asked, " +
                 std::to_string(free_host_memory_mib()) + " free"};
  }
  return Status::Ok();
}

void NodeState::Add(const std::vector<Delta>& deltas, const PodAllocation& allocation,
                    const HostResources& host) {
  for (const Delta& d : deltas) {
    GpuUsage& u = gpus_[d.gpu].used;
    u.memory_mib += d.usage.memory_mib;
    u.cores += d.usage.cores;
    u.slots += d.usage.slots;
    u.exclusive = u.exclusive || d.usage.exclusive;
  }
  host_used_.cpu_milli += host.cpu_milli;
  host_used_.memory_mib += host.memory_mib;
  int tag = WorkloadTagOf(allocation, gpus_);
  if (tag >= 0) ++workload_tags_[tag];
  Recount();
  ++version_;
}

Status NodeState::Apply(const PodAllocation& allocation, const HostResources& host) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<Delta> deltas, DeltasOf(allocation));
  TESSERA_RETURN_IF_ERROR(CheckFits(deltas, host));
  Add(deltas, allocation, host);
  return Status::Ok();
}

Status NodeState::Account(const PodAllocation& allocation, const HostResources& host) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<Delta> deltas, DeltasOf(allocation));
  Add(deltas, allocation, host);
  return Status::Ok();
}

Status NodeState::Release(const PodAllocation& allocation, const HostResources& host) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<Delta> deltas, DeltasOf(allocation));
  for (const Delta& d : deltas) {
    const GpuUsage& u = gpus_[d.gpu].used;
    if (d.usage.memory_mib > u.memory_mib || d.usage.cores > u.cores || d.usage.slots > u.slots) {
      return Error{"node '" + name_ + "' GPU " + gpus_[d.gpu].gpu.uuid +
                   ": releasing more than is in use (was this allocation applied?)"};
    }
  }
  if (host.cpu_milli > host_used_.cpu_milli || host.memory_mib > host_used_.memory_mib) {
    return Error{"node '" + name_ + "': releasing more host CPU/memory than is in use"};
  }
  for (const Delta& d : deltas) {
    GpuUsage& u = gpus_[d.gpu].used;
    u.memory_mib -= d.usage.memory_mib;
    u.cores -= d.usage.cores;
    u.slots -= d.usage.slots;
    if (d.usage.exclusive || u.slots == 0) u.exclusive = false;
  }
  host_used_.cpu_milli -= host.cpu_milli;
  host_used_.memory_mib -= host.memory_mib;
  int tag = WorkloadTagOf(allocation, gpus_);
  if (tag >= 0) {
    auto it = workload_tags_.find(tag);
    if (it != workload_tags_.end() && --it->second == 0) workload_tags_.erase(it);
  }
  Recount();
  ++version_;
  return Status::Ok();
}

}  // namespace tessera::core
