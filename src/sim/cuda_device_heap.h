// Device memory of one GPU as seen by this process: a sparse shared-memory file
// (memfd) as large as twice the device, mapped once. Allocations are ranges of
// it; IPC peers map the same range through /proc/<pid>/fd. Pages cost host
// memory only once touched, and are returned (hole punched) when freed.
//
// Private to the simulated driver (src/sim). Not thread-safe: its users hold
// Runtime::mu (cuda_internal.h).
#pragma once

#include <cstdint>
#include <map>

namespace tessera::sim::cuda {

inline constexpr uint64_t kMiB = 1ull << 20;
// Granularity of VMM allocations and reservations, and of the heap's size.
inline constexpr uint64_t kVmmGranularity = 2 * kMiB;

class DeviceHeap {
 public:
  ~DeviceHeap();
  // Maps the heap on first use.
  bool EnsureMapped(uint64_t device_bytes);
  // An offset of `bytes` (rounded up to `align`), or UINT64_MAX when out of space.
  uint64_t Allocate(uint64_t bytes, uint64_t align);
  void Free(uint64_t offset, uint64_t bytes);
  // Gives the pages of a range back to the host, keeping the range allocated.
  void Discard(uint64_t offset, uint64_t bytes);
  uint8_t* base() const { return base_; }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
};

}  // namespace tessera::sim::cuda
