// AllocationMap: what this process has allocated, so that a free gives back
// exactly what its allocation reserved, in O(1) regardless of how many
// allocations are live. Keys are driver handles (device pointers, VMM handles,
// array handles) — one map per handle kind, since their values may coincide.
//
// Thread-safe: sharded, each shard behind its own mutex. fork(): call
// lock_all() before, unlock_all() after in both parent and child.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace tessera::vgpu {

struct AllocationRecord {
  int device = -1;       // region device index
  uint64_t bytes = 0;    // what was reserved for it
  bool spilled = false;  // served as managed memory by oversubscription
  uint64_t pool = 0;     // CUmemoryPool it came from (stream-ordered), else 0
};

class AllocationMap {
 public:
  void insert(uint64_t key, const AllocationRecord& record);
  // Removes and returns the record; false when the key is unknown.
  bool take(uint64_t key, AllocationRecord* record);
  bool find(uint64_t key, AllocationRecord* record) const;
  void clear();
  void lock_all();
  void unlock_all();

 private:
  static constexpr int kShards = 32;
  struct alignas(64) Shard {
    mutable std::mutex mu;
    std::unordered_map<uint64_t, AllocationRecord> records;  // guarded by mu
  };
  Shard& shard(uint64_t key) const {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return shards_[h >> 59];
  }
  mutable Shard shards_[kShards];
};

}  // namespace tessera::vgpu
