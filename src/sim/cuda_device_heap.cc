// DeviceHeap: the memfd that backs one GPU's device memory in this process,
// and the first-fit allocator of ranges in it (see cuda_device_heap.h).
#include "sim/cuda_device_heap.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <iterator>

namespace tessera::sim::cuda {

DeviceHeap::~DeviceHeap() {
  // Left mapped: the process is exiting and other threads may still copy.
}

bool DeviceHeap::EnsureMapped(uint64_t device_bytes) {
  if (base_ != nullptr) return true;
  const uint64_t size = ((device_bytes * 2 + kVmmGranularity - 1) / kVmmGranularity) * kVmmGranularity;
  int fd = memfd_create("tessera-sim-device", MFD_CLOEXEC);
  if (fd < 0) return false;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return false;
  }
  fd_ = fd;
  base_ = static_cast<uint8_t*>(p);
  size_ = size;
  // Keep the first granule unused so that no device pointer equals the heap base.
  free_[kVmmGranularity] = size - kVmmGranularity;
  return true;
}

uint64_t DeviceHeap::Allocate(uint64_t bytes, uint64_t align) {
  if (bytes == 0) bytes = 1;
  bytes = (bytes + 4095) & ~uint64_t{4095};
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = (it->first + align - 1) / align * align;
    const uint64_t end = it->first + it->second;
    if (start + bytes > end) continue;
    const uint64_t off = it->first;
    free_.erase(it);
    if (start > off) free_[off] = start - off;
    if (start + bytes < end) free_[start + bytes] = end - (start + bytes);
    return start;
  }
  return UINT64_MAX;
}

void DeviceHeap::Free(uint64_t offset, uint64_t bytes) {
  bytes = (bytes + 4095) & ~uint64_t{4095};
  // Give the pages back to the host.
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));
  auto next = free_.lower_bound(offset);
  uint64_t start = offset, len = bytes;
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && start + len == next->first) {
    len += next->second;
    free_.erase(next);
  }
  free_[start] = len;
}

void DeviceHeap::Discard(uint64_t offset, uint64_t bytes) {
  bytes = (bytes + 4095) & ~uint64_t{4095};
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));
}

}  // namespace tessera::sim::cuda
