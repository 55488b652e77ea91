#include "vgpu/allocation_map.h"

namespace tessera::vgpu {

void AllocationMap::insert(uint64_t key, const AllocationRecord& record) {
  Shard& s = shard(key);
  std::lock_guard<std::mutex> guard(s.mu);
  s.records[key] = record;
}

bool AllocationMap::take(uint64_t key, AllocationRecord* record) {
  Shard& s = shard(key);
  std::lock_guard<std::mutex> guard(s.mu);
  auto it = s.records.find(key);
  if (it == s.records.end()) return false;
  *record = it->second;
  s.records.erase(it);
  return true;
}

bool AllocationMap::find(uint64_t key, AllocationRecord* record) const {
  Shard& s = shard(key);
  std::lock_guard<std::mutex> guard(s.mu);
  auto it = s.records.find(key);
  if (it == s.records.end()) return false;
  *record = it->second;
  return true;
}

void AllocationMap::clear() {
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> guard(s.mu);
    s.records.clear();
  }
}

void AllocationMap::lock_all() {
  for (Shard& s : shards_) s.mu.lock();
}

void AllocationMap::unlock_all() {
  for (Shard& s : shards_) s.mu.unlock();
}

}  // namespace tessera::vgpu
