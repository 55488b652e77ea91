#include "host/region_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "vgpu/region_layout.h"

namespace tessera::host {
namespace {

// Closes the descriptor and unmaps on every return path.
struct Mapping {
  int fd = -1;
  void* map = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (map != MAP_FAILED) ::munmap(map, size);
    if (fd >= 0) ::close(fd);
  }
};

// A slot is live while its owner holds the write lock on its byte; asking
// F_OFD_GETLK for a conflicting lock tells without taking anything.
bool SlotOwnerAlive(int fd, uint32_t index) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(vgpu::region_slot_lock_offset(index));
  fl.l_len = 1;
  return ::fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

// Opens, maps (read-only or read-write) and validates the region at `path`.
Status MapRegion(const std::string& path, bool writable, Mapping& m, bool* missing) {
  if (missing) *missing = false;
  m.fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
  if (m.fd < 0) {
    if (errno == ENOENT) {
      if (missing) *missing = true;
      return Error{"no region at " + path + " (no process has used CUDA there yet)"};
    }
    return Error{"cannot open region " + path + ": " + std::strerror(errno)};
  }
  struct stat st {};
  if (::fstat(m.fd, &st) != 0) return Error{"cannot stat region " + path + ": " + std::strerror(errno)};
  if (!S_ISREG(st.st_mode)) return Error{"region " + path + " refused: not a regular file"};
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(vgpu::RegionHeader)) {
    return Error{"region " + path + " refused: file shorter than a region header"};
  }
  m.size = size;
  m.map = ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, m.fd, 0);
  if (m.map == MAP_FAILED) return Error{"cannot map region " + path + ": " + std::strerror(errno)};
  const auto* region = static_cast<const vgpu::Region*>(m.map);
  if (const char* why = vgpu::validate_region_header(region->header, size)) {
    return Error{"region " + path + " refused: " + why};
  }
  return Status::Ok();
}

}  // namespace

const DeviceUsage* RegionSnapshot::Find(const std::string& uuid) const {
  for (const auto& d : devices) {
    if (d.uuid == uuid) return &d;
  }
  return nullptr;
}

Result<RegionSnapshot> ReadRegion(const std::string& path, bool* missing) {
  Mapping m;
  TESSERA_RETURN_IF_ERROR(MapRegion(path, false, m, missing));
  const auto* region = static_cast<const vgpu::Region*>(m.map);

  RegionSnapshot snap;
  snap.created_ns = region->header.created_ns;
  const uint32_t count = region->header.device_count.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < count; ++i) {
    const auto& d = region->devices[i];
    const size_t length = strnlen(d.uuid, sizeof(d.uuid));
    if (length == sizeof(d.uuid)) {
      return Error{"region " + path + " refused: device entry " + std::to_string(i) + " is corrupt"};
    }
    DeviceUsage u;
    u.uuid.assign(d.uuid, length);
    u.memory_limit_bytes = d.memory_limit.load(std::memory_order_relaxed);
    u.memory_peak_bytes = d.memory_peak.load(std::memory_order_relaxed);
    u.oom_refusals = d.oom_refusals.load(std::memory_order_relaxed);
    u.core_quota_percent = d.core_quota_percent.load(std::memory_order_relaxed);
    u.priority = d.priority.load(std::memory_order_relaxed);
    u.gpu_time_used_ns = d.gpu_time_used_ns.load(std::memory_order_relaxed);
    u.throttled_ns = d.throttled_ns.load(std::memory_order_relaxed);
    snap.devices.push_back(std::move(u));
  }

  for (uint32_t i = 0; i < vgpu::kRegionMaxProcesses; ++i) {
    const auto& slot = region->processes[i];
    if (slot.state.load(std::memory_order_relaxed) != vgpu::kSlotActive) continue;
    if (!SlotOwnerAlive(m.fd, i)) continue;
    ProcessUsage p;
    p.pid = slot.pid;
    p.host_pid = slot.host_pid.load(std::memory_order_relaxed);
    p.started_ns = slot.started_ns;
    p.memory_used_bytes.resize(snap.devices.size());
    p.gpu_time_used_ns.resize(snap.devices.size());
    for (size_t d = 0; d < snap.devices.size(); ++d) {
      p.memory_used_bytes[d] = slot.memory_used[d].load(std::memory_order_relaxed);
      p.gpu_time_used_ns[d] = slot.gpu_time_used_ns[d].load(std::memory_order_relaxed);
      snap.devices[d].memory_used_bytes += p.memory_used_bytes[d];
      snap.devices[d].memory_spilled_bytes += slot.memory_spilled[d].load(std::memory_order_relaxed);
    }
    snap.processes.push_back(std::move(p));
  }
  snap.live_processes = static_cast<int>(snap.processes.size());
  return snap;
}

Result<int> RecordHostPids(const std::string& path, const std::vector<HostPid>& pids) {
  Mapping m;
  TESSERA_RETURN_IF_ERROR(MapRegion(path, true, m, nullptr));
  auto* region = static_cast<vgpu::Region*>(m.map);
  int written = 0;
  for (uint32_t i = 0; i < vgpu::kRegionMaxProcesses; ++i) {
    auto& slot = region->processes[i];
    if (slot.state.load(std::memory_order_acquire) != vgpu::kSlotActive) continue;
    if (slot.host_pid.load(std::memory_order_relaxed) != 0) continue;
    // `generation` is a plain word libvgpu writes under its lock; read it
    // atomically so a concurrent claim is seen, never torn.
    const uint64_t generation = std::atomic_ref<uint64_t>(slot.generation).load(std::memory_order_acquire);
    const uint32_t pid = std::atomic_ref<uint32_t>(slot.pid).load(std::memory_order_relaxed);
    auto match =
        std::find_if(pids.begin(), pids.end(), [&](const HostPid& p) { return p.container_pid == pid; });
    if (match == pids.end() || !SlotOwnerAlive(m.fd, i)) continue;
    uint64_t expected = 0;
    if (!slot.host_pid.compare_exchange_strong(expected, match->host_pid, std::memory_order_acq_rel))
      continue;
    if (std::atomic_ref<uint64_t>(slot.generation).load(std::memory_order_acquire) != generation) {
      // The slot changed hands while we wrote: the pid was the previous owner's.
      uint64_t ours = match->host_pid;
      slot.host_pid.compare_exchange_strong(ours, 0, std::memory_order_acq_rel);
      continue;
    }
    ++written;
  }
  return written;
}

}  // namespace tessera::host
