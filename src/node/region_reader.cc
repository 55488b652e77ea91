#include "runner/region_snapshot.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "vgpu/region_layout.h"

namespace tessera::runner {

Result<RegionSnapshot> ReadRegion(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Error{"no region at " + path + " (the job has not used CUDA yet)"};
    return Error{"cannot open region " + path + ": " + std::strerror(errno)};
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Error{"cannot stat region " + path + ": " + std::strerror(errno)};
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(vgpu::RegionHeader)) {
    ::close(fd);
    return Error{"region " + path + " is not a tessera region: file shorter than a region header"};
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    ::close(fd);
    return Error{"cannot map region " + path + ": " + std::strerror(errno)};
  }
  const auto* region = static_cast<const vgpu::Region*>(map);
  if (const char* why = vgpu::validate_region_header(region->header, size)) {
    ::munmap(map, size);
    ::close(fd);
    return Error{"region " + path + " refused: " + why};
  }
  RegionSnapshot snap;
  const uint32_t count = region->header.device_count.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < count; ++i) {
    const auto& d = region->devices[i];
    DeviceUsage u;
    u.uuid.assign(d.uuid, strnlen(d.uuid, sizeof(d.uuid)));
    if (u.uuid.empty()) continue;
    u.memory_limit_bytes = d.memory_limit.load(std::memory_order_relaxed);
    u.memory_used_bytes = d.memory_used.load(std::memory_order_relaxed);
    u.memory_peak_bytes = d.memory_peak.load(std::memory_order_relaxed);
    u.oom_refusals = d.oom_refusals.load(std::memory_order_relaxed);
    u.core_quota_percent = d.core_quota_percent.load(std::memory_order_relaxed);
    u.gpu_time_used_ns = d.gpu_time_used_ns.load(std::memory_order_relaxed);
    u.throttled_ns = d.throttled_ns.load(std::memory_order_relaxed);
    snap.devices.push_back(std::move(u));
  }
  // A slot is live while its owner holds the write lock on its byte; asking
  // F_OFD_GETLK for a conflicting lock tells without taking anything.
  for (uint32_t i = 0; i < vgpu::kRegionMaxProcesses; ++i) {
    if (region->processes[i].state.load(std::memory_order_relaxed) != vgpu::kSlotActive) continue;
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(vgpu::region_slot_lock_offset(i));
    fl.l_len = 1;
    if (::fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) ++snap.live_processes;
  }
  ::munmap(map, size);
  ::close(fd);
  return snap;
}

}  // namespace tessera::runner
