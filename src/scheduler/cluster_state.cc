#include "scheduler/cluster_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_set>

#include "core/allocation_codec.h"
#include "core/inventory_codec.h"
#include "kube/client.h"
#include "kube/typed_api.h"
#include "scheduler/projection.h"

namespace tessera::scheduler {

std::string PodKey(const Json& pod) {
  return kube::NamespaceOf(pod) + "/" + kube::NameOf(pod);
}

namespace {

// ExtenderScores over n entries whose score and name are score_at(k) (a
// pointer, nullptr = infeasible) and name_at(k): what the span version and
// Prioritize share without copying the scores and names into arrays.
template <typename ScoreAt, typename NameAt>
void ExtenderScoresOf(size_t n, const ScoreAt& score_at, const NameAt& name_at, std::vector<int>& out) {
  // core::Placer::Choose over the nodes in name order: a strictly higher
  // score replaces the best so far, so equal scores stay with the first name.
  constexpr size_t kNone = SIZE_MAX;
  size_t chosen = kNone;
  double best = 0;
  double lo = 0;
  for (size_t k = 0; k < n; ++k) {
    const double* s = score_at(k);
    if (!s) continue;
    if (chosen == kNone) {
      chosen = k;
      best = lo = *s;
    } else {
      lo = std::min(lo, *s);
      if (core::Outranks(*s, name_at(k), best, name_at(chosen))) {
        chosen = k;
        best = *s;
      }
    }
  }
  out.assign(n, 0);
  if (chosen == kNone) return;
  for (size_t k = 0; k < n; ++k) {
    const double* s = score_at(k);
    if (!s || k == chosen) continue;
    out[k] = best == lo ? 9 : std::clamp(static_cast<int>(std::floor(9.0 * (*s - lo) / (best - lo))), 0, 9);
  }
  out[chosen] = 10;
}

}  // namespace

void ExtenderScores(std::span<const std::string_view> names, std::span<const std::optional<double>> scores,
                    std::vector<int>& out) {
  ExtenderScoresOf(
      scores.size(), [&](size_t k) { return scores[k] ? &*scores[k] : nullptr; },
      [&](size_t k) { return names[k]; }, out);
}

ClusterState::ClusterState(ClusterStateOptions options)
    : clock_(OrRealClock(options.clock)), stale_after_(options.inventory_stale_after) {}

const ClusterState::NodeEntry* ClusterState::FindLocked(std::string_view name) const {
  auto it = slots_.find(name);
  return it == slots_.end() ? nullptr : &nodes_[it->second];
}

ClusterState::NodeEntry* ClusterState::FindLocked(std::string_view name) {
  auto it = slots_.find(name);
  return it == slots_.end() ? nullptr : &nodes_[it->second];
}

std::string ClusterState::StaleReason(const NodeEntry& entry,
                                      std::chrono::system_clock::time_point now) const {
  if (!IsStale(entry, now)) return "";
  const auto age = std::chrono::duration_cast<std::chrono::seconds>(now - entry.heartbeat).count();
  const auto limit = std::chrono::duration_cast<std::chrono::seconds>(stale_after_).count();
  return "node " + entry.state.name() + ": GPU inventory is stale: last heartbeat " + entry.heartbeat_text +
         ", " + std::to_string(age) + " s ago (inventoryStaleSeconds is " + std::to_string(limit) +
         "; is tessera-node running on this node?)";
}

std::vector<PendingMigInstance> ClusterState::NodeEntry::PendingMig() const {
  std::vector<PendingMigInstance> all;
  for (const auto& [key, instances] : mig_claims) all.insert(all.end(), instances.begin(), instances.end());
  return all;
}

Status ClusterState::ApplyLocked(NodeEntry& entry, const std::string& key,
                                 const core::PodAllocation& allocation) {
  SplitAllocation split = SplitByKind(allocation);
  for (const PendingMigInstance& instance : split.mig) {
    TESSERA_RETURN_IF_ERROR_WRAP(CheckMigInstance(entry.state, instance), "node " + entry.state.name());
  }
  if (!split.vgpu.containers.empty()) TESSERA_RETURN_IF_ERROR(entry.state.Apply(split.vgpu));
  if (!split.mig.empty()) {
    entry.mig_claims[key] = std::move(split.mig);
    ++entry.mig_version;
  }
  return Status::Ok();
}

void ClusterState::ReleaseLocked(NodeEntry& entry, const std::string& key,
                                 const core::PodAllocation& allocation) {
  SplitAllocation split = SplitByKind(allocation);
  if (!split.vgpu.containers.empty()) (void)entry.state.Release(split.vgpu);
  if (entry.mig_claims.erase(key) > 0) ++entry.mig_version;
}

void ClusterState::RebuildNodeLocked(NodeEntry& entry) {
  const std::string& name = entry.state.name();
  auto keys = keys_by_node_.find(name);
  if (keys == keys_by_node_.end()) return;
  std::vector<std::string> dropped;
  for (const std::string& key : keys->second) {
    if (auto p = pods_.find(key); p != pods_.end()) {
      p->second.applied = entry.error.empty() && ApplyLocked(entry, key, p->second.allocation).ok();
      if (!p->second.applied && entry.error.empty()) ++inconsistent_;
    } else if (auto r = reservations_.find(key); r != reservations_.end()) {
      if (!entry.error.empty() || !ApplyLocked(entry, key, r->second.allocation).ok()) dropped.push_back(key);
    }
  }
  for (const std::string& key : dropped) {
    reservations_.erase(key);
    keys->second.erase(key);
  }
}

void ClusterState::UpsertNode(const Json& node) {
  const std::string name = kube::NameOf(node);
  if (name.empty()) return;
  std::string text = kube::AnnotationOf(node, core::kInventoryAnnotation);
  // An inventory too long to be real (ProjectNode leaves its length instead).
  std::string refused = kube::AnnotationOf(node, kRefusedInventoryAnnotation);
  if (text.size() > kMaxInventoryBytes) refused = std::to_string(text.size());
  if (!refused.empty()) text = "refused:" + refused;  // compared below, never decoded
  // Decode outside the lock.
  NodeEntry fresh;
  fresh.present = true;
  fresh.inventory_text = text;
  std::vector<core::Gpu> gpus;
  if (!refused.empty()) {
    fresh.error = "node " + name + ": its " + std::string(core::kInventoryAnnotation) + " annotation is " +
                  refused + " bytes, longer than the " + std::to_string(kMaxInventoryBytes) +
                  " the scheduler reads: refused";
  } else if (text.empty()) {
    fresh.error = "node " + name + " publishes no " + std::string(core::kInventoryAnnotation) +
                  " annotation (is the tessera node agent running there?)";
  } else {
    auto inv = core::DecodeInventory(text);
    if (!inv.ok()) {
      fresh.error = "node " + name + ": unreadable " + std::string(core::kInventoryAnnotation) + ": " +
                    inv.error().message;
    } else if (inv->node != name) {
      fresh.error = "node " + name + ": its inventory names node '" + inv->node + "'";
    } else if (auto heartbeat = kube::ParseMicroTime(inv->heartbeat); !heartbeat.ok()) {
      fresh.error = "node " + name + ": " + std::string(core::kInventoryAnnotation) +
                    ": heartbeat: " + heartbeat.error().message;
    } else {
      fresh.heartbeat = *heartbeat;
      fresh.heartbeat_text = inv->heartbeat;
      gpus = std::move(inv->gpus);
    }
  }
  fresh.state = core::NodeState(name, std::move(gpus));  // no GPUs when the inventory is unusable
  std::unique_lock lock(mu_);
  NodeEntry* current = FindLocked(name);
  if (current && current->inventory_text == text) return;
  const auto& now_gpus = current ? current->state.gpus() : fresh.state.gpus();
  if (current && current->error.empty() && fresh.error.empty() &&
      now_gpus.size() == fresh.state.gpus().size() &&
      std::equal(now_gpus.begin(), now_gpus.end(), fresh.state.gpus().begin(),
                 [](const core::GpuState& a, const core::GpuState& b) { return a.gpu == b.gpu; })) {
    // Only the heartbeat (or the text's formatting) changed: the node's GPUs
    // and usage stay, and so do the cached evaluations.
    current->inventory_text = std::move(fresh.inventory_text);
    current->heartbeat = fresh.heartbeat;
    current->heartbeat_text = std::move(fresh.heartbeat_text);
    return;
  }
  uint32_t slot = 0;
  if (auto it = slots_.find(name); it != slots_.end()) {
    slot = it->second;
  } else if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    slots_.emplace(name, slot);
    ++slots_generation_;
  } else {
    slot = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
    slot_count_.store(nodes_.size(), std::memory_order_relaxed);
    slots_.emplace(name, slot);
    ++slots_generation_;
  }
  NodeEntry& entry = nodes_[slot];
  entry = std::move(fresh);
  entry.epoch = ++next_epoch_;
  RebuildNodeLocked(entry);
}

void ClusterState::DeleteNode(const Json& node) {
  const std::string name = kube::NameOf(node);
  std::unique_lock lock(mu_);
  if (auto it = slots_.find(name); it != slots_.end()) {
    nodes_[it->second] = NodeEntry{};
    free_slots_.push_back(it->second);
    slots_.erase(it);
    ++slots_generation_;
  }
  auto keys = keys_by_node_.find(name);
  if (keys == keys_by_node_.end()) return;
  std::vector<std::string> reserved;
  for (const std::string& key : keys->second) {
    if (auto p = pods_.find(key); p != pods_.end()) p->second.applied = false;
    if (reservations_.count(key)) reserved.push_back(key);
  }
  for (const std::string& key : reserved) {
    reservations_.erase(key);
    keys->second.erase(key);
  }
}

void ClusterState::ForgetPodLocked(const std::string& key) {
  auto p = pods_.find(key);
  if (p == pods_.end()) return;
  const std::string& node = p->second.allocation.node;
  if (p->second.applied) {
    if (NodeEntry* n = FindLocked(node)) ReleaseLocked(*n, key, p->second.allocation);
  }
  if (auto keys = keys_by_node_.find(node); keys != keys_by_node_.end()) keys->second.erase(key);
  if (auto count = pods_by_priority_.find(p->second.priority);
      count != pods_by_priority_.end() && --count->second == 0) {
    pods_by_priority_.erase(count);
  }
  pods_.erase(p);
}

void ClusterState::ReleaseReservationLocked(const std::string& key) {
  auto r = reservations_.find(key);
  if (r == reservations_.end()) return;
  const std::string& node = r->second.allocation.node;
  if (NodeEntry* n = FindLocked(node)) ReleaseLocked(*n, key, r->second.allocation);
  if (auto keys = keys_by_node_.find(node); keys != keys_by_node_.end()) keys->second.erase(key);
  reservations_.erase(r);
}

void ClusterState::UpsertPod(const Json& pod) {
  const core::ResourceConfig resources;  // (the request is not read here)
  UpsertPod(PodDigest(pod, resources));
}

void ClusterState::UpsertPod(const PodDigest& digest) {
  const std::string key = PodKey(digest.pod());
  const bool terminal = digest.terminal();
  std::optional<core::PodAllocation> allocation;
  bool unreadable = false;
  if (!terminal && !digest.allocation_text().empty()) {
    const Result<core::PodAllocation>& decoded = digest.allocation();
    if (decoded.ok()) {
      allocation = decoded.value();
    } else {
      unreadable = true;
    }
  }
  std::unique_lock lock(mu_);
  if (terminal) {
    ForgetPodLocked(key);
    ReleaseReservationLocked(key);
    return;
  }
  if (!allocation) {
    // No (readable) allocation: the pod holds nothing, except a reservation
    // while its bind may still be in flight.
    ForgetPodLocked(key);
    if (unreadable) ++inconsistent_;
    return;
  }
  if (auto p = pods_.find(key); p != pods_.end() && p->second.allocation == *allocation) return;
  ForgetPodLocked(key);
  ReleaseReservationLocked(key);
  PodEntry entry;
  entry.allocation = std::move(*allocation);
  if (auto spec = digest.pod().find("spec"); spec != digest.pod().end() && spec->is_object()) {
    if (auto p = spec->find("priority"); p != spec->end() && p->is_number_integer()) {
      entry.priority = static_cast<int32_t>(
          std::clamp<int64_t>(p->get<int64_t>(), std::numeric_limits<int32_t>::min(), INT32_MAX));
    }
  }
  if (NodeEntry* n = FindLocked(entry.allocation.node); n && n->error.empty()) {
    entry.applied = ApplyLocked(*n, key, entry.allocation).ok();
    if (!entry.applied) ++inconsistent_;
  }
  keys_by_node_[entry.allocation.node].insert(key);
  ++pods_by_priority_[entry.priority];
  pods_[key] = std::move(entry);
}

bool ClusterState::AnyPodBelowPriority(int32_t priority) const {
  std::shared_lock lock(mu_);
  return !pods_by_priority_.empty() && pods_by_priority_.begin()->first < priority;
}

void ClusterState::DeletePod(const Json& pod) {
  const std::string key = PodKey(pod);
  std::unique_lock lock(mu_);
  ForgetPodLocked(key);
  ReleaseReservationLocked(key);
}

namespace {

// Everything FitNode and the policies read from a request (container names
// appear in fit messages).
std::string ShapeKey(const core::PodRequest& pod) {
  std::string key;
  auto add = [&key](const core::ContainerRequest& c) {
    key += c.name + ":" + std::to_string(c.gpus) + "," + std::to_string(c.memory_mib) + "," +
           std::to_string(c.memory_percent.value_or(-1)) + "," + std::to_string(c.cores) + "," +
           std::to_string(c.priority.value_or(-1)) + "," + std::to_string(static_cast<int>(c.share)) + ";";
  };
  for (const auto& c : pod.containers) add(c);
  key += "|";
  for (const auto& c : pod.init_containers) add(c);
  auto list = [&key](const std::vector<std::string>& v) {
    key += "|";
    for (const auto& x : v) key += x + ",";
  };
  list(pod.filter.use_types);
  list(pod.filter.nouse_types);
  list(pod.filter.use_uuids);
  list(pod.filter.nouse_uuids);
  key += "|" + std::to_string(pod.cpu_milli) + "," + std::to_string(pod.host_memory_mib);
  return key;
}

// Dynamic MIG verdicts and scores share one cache, keyed "mig|<shape>".
const std::string kMigCacheKey = "mig|";

// Prioritize caches are keyed "<policy>@<epoch>|<shape>".
std::string ScoresKeyPrefix(std::string_view policy_name, uint64_t epoch) {
  return std::string(policy_name) + "@" + std::to_string(epoch) + "|";
}

}  // namespace

void ClusterState::DropScoresOf(std::string_view policy_name, uint64_t keep_epoch) {
  // The policy's own caches ("tessera@3|…") and those of its GPU-ordered
  // forms ("tessera+gpu-spread@3|…", core::WithGpuOrder), which share its epoch.
  const std::string any = std::string(policy_name) + "@";
  const std::string keep = ScoresKeyPrefix(policy_name, keep_epoch);
  const std::string ordered = std::string(policy_name) + "+gpu-";
  auto stale = [&](const std::string& key) {
    if (key.starts_with(any)) return !key.starts_with(keep);
    if (!key.starts_with(ordered)) return false;
    const size_t at = key.find('@', ordered.size());
    return at != std::string::npos && !key.substr(at).starts_with("@" + std::to_string(keep_epoch) + "|");
  };
  std::vector<std::shared_ptr<EvalCache>> dropped;  // freed after the lock
  std::lock_guard lock(caches_mu_);
  for (auto it = caches_.begin(); it != caches_.end();) {
    if (stale(it->first)) {
      dropped.push_back(std::move(it->second));
      it = caches_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t ClusterState::MaxEvaluationCaches(size_t slots) {
  return std::clamp<size_t>(kMaxCachedEvaluations / std::max<size_t>(slots, 1), kMinEvaluationCaches,
                            kMaxEvaluationCaches);
}

std::shared_ptr<ClusterState::EvalCache> ClusterState::CacheFor(const std::string& key) const {
  // Each cache holds one entry per node slot, so their number is bounded by
  // entries, not shapes (MaxEvaluationCaches). The least recently used one
  // makes room: one or two at a time, since dropping all at once cost a
  // request some 20 ms.
  const size_t bound = MaxEvaluationCaches(slot_count_.load(std::memory_order_relaxed));
  std::vector<std::shared_ptr<EvalCache>> evicted;  // freed after the lock; requests in flight keep theirs
  std::lock_guard lock(caches_mu_);
  auto it = caches_.find(key);
  if (it != caches_.end()) {
    it->second->last_used = ++cache_clock_;
    return it->second;
  }
  // The cluster may have grown since: two out per new one until under the bound.
  for (int i = 0; i < 2 && !caches_.empty() && caches_.size() >= bound; ++i) {
    auto oldest = std::min_element(caches_.begin(), caches_.end(), [](const auto& a, const auto& b) {
      return a.second->last_used < b.second->last_used;
    });
    evicted.push_back(std::move(oldest->second));
    caches_.erase(oldest);
  }
  // The least recently used cache, when no request holds it, is emptied and
  // serves the new key: a cold request neither frees 5,000 entries (their
  // placements and reasons) nor allocates and clears as many anew, which was
  // a tenth of a cold filter's time. Its entries keep their storage until
  // they are filled again; node_epoch 0 marks them empty.
  std::shared_ptr<EvalCache> cache;
  if (!evicted.empty() && evicted.back().use_count() == 1) {
    cache = std::move(evicted.back());
    evicted.pop_back();
    for (CachedEval& e : cache->entries) e.node_epoch = 0;
  } else {
    cache = std::make_shared<EvalCache>();
  }
  cache->last_used = ++cache_clock_;
  caches_[key] = cache;
  return cache;
}

std::vector<uint32_t> ClusterState::SlotsOfLocked(std::span<const std::string_view> nodes) const {
  auto same = [&nodes, this](const NameListMemo& m) {
    if (m.generation != slots_generation_ || m.ends.size() != nodes.size()) return false;
    uint32_t begin = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const uint32_t end = m.ends[i];
      if (nodes[i].size() != end - begin ||
          std::memcmp(nodes[i].data(), m.joined.data() + begin, end - begin)) {
        return false;
      }
      begin = end;
    }
    return true;
  };
  {
    std::lock_guard memo_lock(memo_mu_);
    for (NameListMemo& m : memos_) {
      if (same(m)) {
        m.last_used = ++memo_clock_;
        return m.slots;
      }
    }
  }
  std::vector<uint32_t> slots(nodes.size(), kNoSlot);
  size_t bytes = 0;
  // Repeated names are found here, once per distinct list: a list the memo
  // knows costs nothing more.
  std::vector<char> listed(nodes_.size(), 0);    // by slot
  std::unordered_set<std::string_view> unknown;  // names without a slot, so far
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (auto it = slots_.find(nodes[i]); it != slots_.end()) {
      slots[i] = listed[it->second] ? kRepeat : it->second;
      listed[it->second] = 1;
    } else if (!unknown.insert(nodes[i]).second) {
      slots[i] = kRepeat;
    }
    bytes += nodes[i].size();
  }
  if (bytes > UINT32_MAX) return slots;  // not worth remembering
  std::lock_guard memo_lock(memo_mu_);
  NameListMemo& m = *std::min_element(memos_.begin(), memos_.end(),
                                      [](const auto& a, const auto& b) { return a.last_used < b.last_used; });
  m.generation = slots_generation_;
  m.last_used = ++memo_clock_;
  m.joined.clear();
  m.joined.reserve(bytes);
  m.ends.clear();
  m.ends.reserve(nodes.size());
  for (std::string_view n : nodes) {
    m.joined.append(n);
    m.ends.push_back(static_cast<uint32_t>(m.joined.size()));
  }
  m.slots = slots;
  return slots;
}

std::vector<uint32_t> ClusterState::ResolveLocked(
    std::span<const std::string_view> nodes, std::chrono::system_clock::time_point now,
    std::vector<std::pair<uint32_t, std::string>>* early) const {
  std::vector<uint32_t> slot_at = SlotsOfLocked(nodes);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (slot_at[i] == kRepeat) continue;
    const NodeEntry* n = slot_at[i] == kNoSlot ? nullptr : &nodes_[slot_at[i]];
    if (n && n->error.empty() && !IsStale(*n, now)) continue;
    slot_at[i] = kNoSlot;
    if (early) {
      const auto position = static_cast<uint32_t>(i);
      if (!n) {
        early->emplace_back(position, "node " + std::string(nodes[i]) +
                                          " is unknown to tessera or publishes no " +
                                          std::string(core::kInventoryAnnotation) + " annotation");
      } else if (!n->error.empty()) {
        early->emplace_back(position, n->error);
      } else {
        early->emplace_back(position, StaleReason(*n, now));
      }
    }
  }
  return slot_at;
}

template <typename Evaluate>
void ClusterState::RefreshLocked(EvalCache& cache, const std::vector<uint32_t>& slot_at,
                                 const Evaluate& evaluate) const {
  if (cache.entries.size() < nodes_.size()) cache.entries.resize(nodes_.size());
  std::vector<uint32_t> misses;  // distinct: SlotsOfLocked marks repeated names
  for (uint32_t slot : slot_at) {
    if (!HasNode(slot)) continue;
    const NodeEntry& n = nodes_[slot];
    const CachedEval& e = cache.entries[slot];
    if (e.node_epoch == n.epoch && e.node_version == n.Version()) continue;
    misses.push_back(slot);
  }
  auto refresh = [&](size_t k) {
    // A cold request reads every node once, each in its own corner of
    // memory: ask for the next nodes' entries and their GPUs' compact views
    // ahead of time, so their cache misses overlap this node's work.
    if (k + 8 < misses.size()) __builtin_prefetch(&nodes_[misses[k + 8]].state);
    if (k + 4 < misses.size()) {
      const core::NodeState& ahead = nodes_[misses[k + 4]].state;
      const char* views = reinterpret_cast<const char*>(ahead.gpu_views().data());
      const size_t bytes = ahead.gpu_views().size() * sizeof(core::GpuFitView);
      for (size_t at = 0; at < bytes; at += 64) __builtin_prefetch(views + at);
      __builtin_prefetch(&cache.entries[misses[k + 4]]);
      const MemoSlot& memo = nodes_[misses[k + 4]].memo;
      __builtin_prefetch(&memo, 1);  // written when the node's content changed
      memo.Prefetch();
    }
    const NodeEntry& n = nodes_[misses[k]];
    CachedEval& e = cache.entries[misses[k]];
    evaluate(n, e);
    e.node_epoch = n.epoch;
    e.node_version = n.Version();
  };
  // A warm request has a handful of misses: not worth waking a thread.
  constexpr size_t kShareFrom = 64;
  if (misses.size() < kShareFrom) {
    for (size_t k = 0; k < misses.size(); ++k) refresh(k);
  } else {
    loop_helper_.Run(misses.size(), refresh);
  }
}

void ClusterState::Filter(const core::PodRequest& pod, std::span<const std::string_view> nodes,
                          NodeVerdicts& out, Sharing sharing) const {
  out.feasible.clear();
  out.failed.clear();
  const auto now = clock_->WallNow();
  const bool mig = sharing == Sharing::kDynamicMig;
  auto cache = CacheFor((mig ? kMigCacheKey : "fit|") + ShapeKey(pod));
  std::lock_guard cache_lock(cache->mu);
  std::shared_lock lock(mu_);
  std::vector<std::pair<uint32_t, std::string>> early;  // not evaluated: unknown, no inventory, stale
  const std::vector<uint32_t> slot_at = ResolveLocked(nodes, now, &early);
  if (mig) {
    RefreshLocked(*cache, slot_at,
                  [&pod](const NodeEntry& node, CachedEval& e) { EvaluateMig(node, pod, e); });
  } else {
    RefreshLocked(*cache, slot_at, [&pod](const NodeEntry& node, CachedEval& e) {
      // Only a node that does not fit needs FitNode's placement attempt, for
      // the reason it gives.
      if (core::FitsNode(node.state, pod)) {
        e.fits = true;
        e.reason.clear();
        return;
      }
      core::FitResult fit = core::FitNode(node.state, pod);
      e.fits = fit.fits;
      e.reason = fit.fits ? "" : (fit.message.empty() ? "does not fit" : std::move(fit.message));
    });
  }
  size_t next_early = 0;
  for (size_t i = 0; i < slot_at.size(); ++i) {
    if (slot_at[i] == kRepeat) continue;
    if (slot_at[i] == kNoSlot) {
      out.failed.push_back(std::move(early[next_early++]));
      continue;
    }
    const CachedEval& e = cache->entries[slot_at[i]];
    if (e.fits) {
      out.feasible.push_back(static_cast<uint32_t>(i));
    } else {
      out.failed.emplace_back(static_cast<uint32_t>(i), e.reason);
    }
  }
}

void ClusterState::Prioritize(const core::PodRequest& pod, const core::Policy& policy,
                              std::span<const std::string_view> nodes, NodeScores& out) const {
  std::unique_lock memos(memos_mu_, std::try_to_lock);  // never waits: see memos_mu_
  const bool with_memos = memos.owns_lock();
  ScoreWith(ScoresKeyPrefix(policy.name(), policy.epoch()) + ShapeKey(pod), nodes, out,
            [&](const NodeEntry& node, CachedEval& e) {
              // The whole candidate: bind commits its placement (Reserve).
              core::NodeMemo* memo = with_memos ? node.memo.For(node.epoch, node.Version()) : nullptr;
              policy.EvaluateInto(node.state, pod, e.candidate, memo);
              e.policy_epoch = policy.epoch();
            });
}

void ClusterState::PrioritizeDynamicMig(const core::PodRequest& pod, std::span<const std::string_view> nodes,
                                        NodeScores& out) const {
  // The filter's cache: the same evaluation gives the verdict and the score.
  ScoreWith(kMigCacheKey + ShapeKey(pod), nodes, out,
            [&pod](const NodeEntry& node, CachedEval& e) { EvaluateMig(node, pod, e); });
}

void ClusterState::EvaluateMig(const NodeEntry& node, const core::PodRequest& pod, CachedEval& e) {
  auto placed = PlaceDynamicMig(node.state, pod, node.PendingMig());
  e.fits = placed.ok();
  e.reason = placed.ok() ? "" : placed.error().message;
  e.candidate = placed.ok() ? std::optional<core::Candidate>(core::Candidate{MigPlacementScore(*placed), {}})
                            : std::nullopt;
}

template <typename Evaluate>
void ClusterState::ScoreWith(const std::string& cache_key, std::span<const std::string_view> nodes,
                             NodeScores& out, const Evaluate& evaluate) const {
  out.positions.clear();
  const auto now = clock_->WallNow();
  auto cache = CacheFor(cache_key);
  std::lock_guard cache_lock(cache->mu);
  std::shared_lock lock(mu_);
  const std::vector<uint32_t> slot_at = ResolveLocked(nodes, now, nullptr);
  RefreshLocked(*cache, slot_at, evaluate);
  out.positions.reserve(nodes.size());
  for (size_t i = 0; i < slot_at.size(); ++i) {
    if (slot_at[i] != kRepeat) out.positions.push_back(static_cast<uint32_t>(i));
  }
  ExtenderScoresOf(
      out.positions.size(),
      [&](size_t k) -> const double* {
        const uint32_t slot = slot_at[out.positions[k]];
        if (slot == kNoSlot) return nullptr;
        const std::optional<core::Candidate>& c = cache->entries[slot].candidate;
        return c ? &c->score : nullptr;
      },
      [&](size_t k) { return nodes[out.positions[k]]; }, out.scores);
}

void ClusterState::FirstListings(std::span<const std::string_view> nodes, std::vector<uint32_t>& out) const {
  out.clear();
  std::shared_lock lock(mu_);
  const std::vector<uint32_t> slot_at = SlotsOfLocked(nodes);
  for (size_t i = 0; i < slot_at.size(); ++i) {
    if (slot_at[i] != kRepeat) out.push_back(static_cast<uint32_t>(i));
  }
}

ClusterState::FilterOutcome ClusterState::Filter(const core::PodRequest& pod,
                                                 const std::vector<std::string>& nodes,
                                                 Sharing sharing) const {
  std::vector<std::string_view> views(nodes.begin(), nodes.end());
  NodeVerdicts verdicts;
  Filter(pod, views, verdicts, sharing);
  FilterOutcome out;
  for (uint32_t i : verdicts.feasible) out.feasible.push_back(nodes[i]);
  for (auto& [i, reason] : verdicts.failed) out.failed[nodes[i]] = std::move(reason);
  return out;
}

namespace {

// Every position's score (a repeated name that of its first position), from
// `score` run on the names as views.
template <typename Score>
std::vector<int> ScoresByPosition(const std::vector<std::string>& nodes, const Score& score) {
  std::vector<std::string_view> views(nodes.begin(), nodes.end());
  ClusterState::NodeScores answered;
  score(views, answered);
  std::map<std::string_view, int> by_name;
  for (size_t k = 0; k < answered.positions.size(); ++k)
    by_name[views[answered.positions[k]]] = answered.scores[k];
  std::vector<int> scores;
  for (std::string_view n : views) scores.push_back(by_name.at(n));
  return scores;
}

}  // namespace

std::vector<int> ClusterState::Prioritize(const core::PodRequest& pod, const core::Policy& policy,
                                          const std::vector<std::string>& nodes) const {
  return ScoresByPosition(nodes, [&](std::span<const std::string_view> views, NodeScores& out) {
    Prioritize(pod, policy, views, out);
  });
}

std::vector<int> ClusterState::PrioritizeDynamicMig(const core::PodRequest& pod,
                                                    const std::vector<std::string>& nodes) const {
  return ScoresByPosition(nodes, [&](std::span<const std::string_view> views, NodeScores& out) {
    PrioritizeDynamicMig(pod, views, out);
  });
}

Result<core::PodAllocation> ClusterState::Reserve(const std::string& pod_key, const core::PodRequest& pod,
                                                  const std::string& node, const core::Policy* policy,
                                                  std::chrono::milliseconds ttl, Sharing sharing) {
  if (sharing == Sharing::kVgpu && policy == nullptr)
    return Error{"reserve " + pod_key + ": no policy given"};
  // Prioritize's cache of this policy, epoch and shape, if it exists (never
  // created here). Its mutex is taken before mu_, the order Filter and
  // Prioritize take them in.
  std::shared_ptr<EvalCache> scores;
  if (sharing == Sharing::kVgpu) {
    const std::string key = ScoresKeyPrefix(policy->name(), policy->epoch()) + ShapeKey(pod);
    std::lock_guard caches_lock(caches_mu_);
    if (auto it = caches_.find(key); it != caches_.end()) scores = it->second;
  }
  std::unique_lock<std::mutex> scores_lock;
  if (scores) scores_lock = std::unique_lock(scores->mu);
  std::unique_lock lock(mu_);
  if (auto p = pods_.find(pod_key); p != pods_.end()) {
    return Error{"pod " + pod_key + " already has an allocation on node " + p->second.allocation.node};
  }
  // An earlier bind of this pod whose outcome is unknown (a timeout, a 5xx)
  // keeps its reservation: its Binding may still land, so its GPUs stay held
  // until the informer shows the pod, a bind is refused or it expires. Given
  // back here, a retry's other GPUs and the late Binding's both counted only
  // once the informer caught up: the chaos test saw GPUs double-booked so. A
  // retry to the same node makes the same decision again; to another node it
  // waits.
  if (auto r = reservations_.find(pod_key); r != reservations_.end()) {
    if (r->second.allocation.node != node) {
      return Error{"pod " + pod_key + " has a bind to node " + r->second.allocation.node +
                   " whose outcome is not known yet (its Binding may still land); retry"};
    }
    r->second.deadline = std::max(r->second.deadline, clock_->Now() + ttl);
    return r->second.allocation;
  }
  NodeEntry* n = FindLocked(node);
  if (!n) return Error{"node " + node + " is unknown to tessera (no GPU inventory seen)"};
  if (!n->error.empty()) return Error{n->error};
  if (std::string stale = StaleReason(*n, clock_->WallNow()); !stale.empty()) return Error{stale};
  core::PodAllocation allocation;
  if (sharing == Sharing::kDynamicMig) {
    auto placed = PlaceDynamicMig(n->state, pod, n->PendingMig());
    if (!placed.ok()) {
      return Error{"pod " + pod_key + " no longer fits on node " + node + ": " + placed.error().message};
    }
    allocation = ToMigAllocation(n->state, pod, *placed);
  } else {
    // The candidate prioritize kept for this node, when the node has not
    // changed since; else the policy's evaluation now. Both are what
    // policy.Evaluate gives for the node as it is, so the GPUs are the
    // policy's whichever way they come.
    const uint32_t slot = slots_.find(node)->second;
    const core::CachedEvaluation* cached = nullptr;
    if (scores && slot < scores->entries.size() &&
        scores->entries[slot].Holds(n->epoch, n->Version(), policy->epoch())) {
      cached = &scores->entries[slot];
    }
    std::optional<core::Candidate> fresh;
    if (!cached) fresh = policy->Evaluate(n->state, pod);
    const std::optional<core::Candidate>& candidate = cached ? cached->candidate : fresh;
    if (!candidate) {
      core::FitResult fit = core::FitNode(n->state, pod);
      return Error{"pod " + pod_key + " no longer fits on node " + node + ": " +
                   (fit.message.empty() ? "the policy " + std::string(policy->name()) + " finds no placement"
                                        : fit.message)};
    }
    allocation = core::ToAllocation(n->state, pod, candidate->placement);
    ++(cached ? reserves_from_cache_ : reserves_evaluated_);
  }
  TESSERA_RETURN_IF_ERROR_WRAP(ApplyLocked(*n, pod_key, allocation), "node " + node);
  reservations_[pod_key] = Reservation{allocation, clock_->Now() + ttl};
  keys_by_node_[node].insert(pod_key);
  return allocation;
}

Result<core::PodAllocation> ClusterState::Reserve(const std::string& pod_key, const core::PodRequest& pod,
                                                  const std::string& node, core::GpuOrder order,
                                                  std::chrono::milliseconds ttl, Sharing sharing) {
  static const std::shared_ptr<const core::Policy> binpack = core::MakePolicy("node-binpack").value();
  static const std::shared_ptr<const core::Policy> spread = core::MakePolicy("node-spread").value();
  return Reserve(pod_key, pod, node, order == core::GpuOrder::kSpread ? spread.get() : binpack.get(), ttl,
                 sharing);
}

void ClusterState::Unreserve(const std::string& pod_key) {
  std::unique_lock lock(mu_);
  ReleaseReservationLocked(pod_key);
}

std::optional<std::string> ClusterState::ReservedNode(const std::string& pod_key) const {
  std::shared_lock lock(mu_);
  auto r = reservations_.find(pod_key);
  if (r == reservations_.end()) return std::nullopt;
  return r->second.allocation.node;
}

size_t ClusterState::ExpireReservations() {
  const auto now = clock_->Now();
  std::unique_lock lock(mu_);
  std::vector<std::string> expired;
  for (const auto& [key, r] : reservations_) {
    if (r.deadline <= now) expired.push_back(key);
  }
  for (const std::string& key : expired) ReleaseReservationLocked(key);
  expired_ += expired.size();
  return expired.size();
}

int64_t ClusterState::LargestGpuMemoryMiB() const {
  std::shared_lock lock(mu_);
  int64_t largest = 0;
  for (const NodeEntry& n : nodes_) {
    if (!n.present) continue;
    for (const auto& g : n.state.gpus()) largest = std::max(largest, g.gpu.memory_mib);
  }
  return largest;
}

ClusterStats ClusterState::Stats() const {
  const auto now = clock_->WallNow();
  std::shared_lock lock(mu_);
  ClusterStats s;
  for (const NodeEntry& n : nodes_) {
    if (!n.present) continue;
    for (const auto& [key, instances] : n.mig_claims) s.mig_placements += instances.size();
    if (n.error.empty()) {
      ++s.nodes;
      s.gpus += n.state.gpus().size();
      if (IsStale(n, now)) ++s.nodes_stale;
    } else {
      ++s.nodes_without_inventory;
    }
  }
  s.pods = pods_.size();
  s.reservations = reservations_.size();
  s.reservations_expired = expired_;
  s.inconsistent = inconsistent_;
  s.reserves_from_cache = reserves_from_cache_;
  s.reserves_evaluated = reserves_evaluated_;
  std::lock_guard caches_lock(caches_mu_);
  s.evaluation_caches = caches_.size();
  return s;
}

std::optional<core::NodeState> ClusterState::Node(const std::string& name) const {
  std::shared_lock lock(mu_);
  const NodeEntry* n = FindLocked(name);
  if (!n) return std::nullopt;
  return n->state;
}

void ClusterState::VisitNodes(const std::function<void(const NodeVisit&)>& visit) const {
  const auto now = clock_->WallNow();
  std::shared_lock lock(mu_);
  for (const NodeEntry& n : nodes_) {
    if (!n.present) continue;
    visit(NodeVisit{n.state.name(), n.epoch, n.state, !n.inventory_text.empty(), n.error, n.heartbeat_text,
                    IsStale(n, now), n.mig_claims, n.mig_version});
  }
}

std::optional<core::PodAllocation> ClusterState::AllocationOf(const std::string& pod_key) const {
  std::shared_lock lock(mu_);
  if (auto p = pods_.find(pod_key); p != pods_.end()) return p->second.allocation;
  if (auto r = reservations_.find(pod_key); r != reservations_.end()) return r->second.allocation;
  return std::nullopt;
}

// --- Preemption holds (preemption.h) ---

void ClusterState::SetHold(const std::string& pod_key, const std::string& node, const core::PodRequest& pod,
                           int32_t priority, std::chrono::milliseconds ttl) {
  const auto now = clock_->Now();
  std::unique_lock lock(mu_);
  auto [it, fresh] = holds_.try_emplace(pod_key);
  Hold& h = it->second;
  if (fresh || h.node != node) h.deadline = now + ttl;
  h.node = node;
  h.pod = pod;
  h.priority = priority;
}

void ClusterState::ReleaseHold(const std::string& pod_key) {
  {
    std::shared_lock lock(mu_);  // every pod event asks: most have none
    if (!holds_.count(pod_key)) return;
  }
  std::unique_lock lock(mu_);
  holds_.erase(pod_key);
}

size_t ClusterState::HoldCount() const {
  std::shared_lock lock(mu_);
  return holds_.size();
}

std::vector<std::pair<std::string, int32_t>> ClusterState::HoldsOn(const std::string& node) const {
  std::vector<std::pair<std::string, int32_t>> out;
  std::shared_lock lock(mu_);
  for (const auto& [key, h] : holds_) {
    if (h.node == node) out.emplace_back(key, h.priority);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ClusterState::SetTerminating(const std::string& pod_key, bool terminating) {
  {
    std::shared_lock lock(mu_);
    if (terminating_.count(pod_key) == static_cast<size_t>(terminating)) return;
  }
  std::unique_lock lock(mu_);
  if (terminating) {
    terminating_.insert(pod_key);
  } else {
    terminating_.erase(pod_key);
  }
}

bool ClusterState::HoldsApplyLocked(const std::string& node, const std::string& pod_key,
                                    int32_t priority) const {
  if (holds_.empty()) return false;
  const auto now = clock_->Now();
  for (const auto& [key, h] : holds_) {
    if (h.node == node && key != pod_key && h.priority >= priority && h.deadline > now) return true;
  }
  return false;
}

ClusterState::HeldView ClusterState::HeldViewLocked(const NodeEntry& entry, const std::string& pod_key,
                                                    int32_t priority) const {
  HeldView view{entry.state, ""};
  const std::string& node = entry.state.name();
  const auto now = clock_->Now();
  std::vector<std::pair<const std::string*, const Hold*>> applying;
  for (const auto& [key, h] : holds_) {
    if (h.node == node && key != pod_key && h.priority >= priority && h.deadline > now) {
      applying.emplace_back(&key, &h);
    }
  }
  if (applying.empty()) return view;
  // Higher priority first, as kube-scheduler would bind them; then by key.
  std::sort(applying.begin(), applying.end(), [](const auto& a, const auto& b) {
    return a.second->priority != b.second->priority ? a.second->priority > b.second->priority
                                                    : *a.first < *b.first;
  });
  // The nominees' room is computed on the node without its terminating pods.
  core::NodeState freed = entry.state;
  if (auto keys = keys_by_node_.find(node); keys != keys_by_node_.end()) {
    for (const std::string& key : keys->second) {
      if (!terminating_.count(key)) continue;
      auto p = pods_.find(key);
      if (p == pods_.end() || !p->second.applied) continue;
      (void)freed.Release(SplitByKind(p->second.allocation).vgpu);
    }
  }
  for (const auto& [key, h] : applying) {
    core::FitResult fit = core::FitNode(freed, h->pod);
    const std::string who = "pod " + *key + " (priority " + std::to_string(h->priority) + ")";
    if (!fit.fits) {
      view.blocked = "node " + node + ": its GPUs are held for " + who +
                     ", nominated there after preemption, until its victims are gone";
      return view;
    }
    const core::PodAllocation held = core::ToAllocation(freed, h->pod, fit.placement);
    if (!freed.Apply(held).ok() || !view.state.Account(held).ok()) {
      view.blocked = "node " + node + ": its GPUs are held for " + who + ", nominated there after preemption";
      return view;
    }
  }
  return view;
}

std::optional<core::NodeState> ClusterState::ViewFor(const std::string& pod_key, int32_t priority,
                                                     const std::string& node, std::string* blocked) const {
  std::shared_lock lock(mu_);
  const NodeEntry* n = FindLocked(node);
  if (!n || !n->error.empty()) return std::nullopt;
  HeldView view = HeldViewLocked(*n, pod_key, priority);
  if (blocked) *blocked = view.blocked;
  return std::move(view.state);
}

void ClusterState::ApplyHolds(const std::string& pod_key, int32_t priority, const core::PodRequest& pod,
                              std::span<const std::string_view> nodes, NodeVerdicts& verdicts) const {
  std::shared_lock lock(mu_);
  if (holds_.empty()) return;
  std::vector<uint32_t> feasible;
  bool moved = false;
  for (uint32_t i : verdicts.feasible) {
    const std::string name(nodes[i]);
    const NodeEntry* n = HoldsApplyLocked(name, pod_key, priority) ? FindLocked(name) : nullptr;
    if (!n) {
      feasible.push_back(i);
      continue;
    }
    HeldView view = HeldViewLocked(*n, pod_key, priority);
    std::string reason = view.blocked;
    if (reason.empty()) {
      core::FitResult fit = core::FitNode(view.state, pod);
      if (fit.fits) {
        feasible.push_back(i);
        continue;
      }
      reason = "node " + name +
               ": GPUs held for a pod nominated there after preemption; beside it: " + fit.message;
    }
    verdicts.failed.emplace_back(i, std::move(reason));
    moved = true;
  }
  if (!moved) return;
  verdicts.feasible = std::move(feasible);
  std::sort(verdicts.failed.begin(), verdicts.failed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}

void ClusterState::VisitPodsOn(
    const std::string& node,
    const std::function<void(const std::string&, const core::PodAllocation&, int32_t, bool)>& visit) const {
  std::shared_lock lock(mu_);
  auto keys = keys_by_node_.find(node);
  if (keys == keys_by_node_.end()) return;
  for (const std::string& key : keys->second) {
    if (auto p = pods_.find(key); p != pods_.end()) {
      visit(key, p->second.allocation, p->second.priority, terminating_.count(key) > 0);
    }
  }
}

std::vector<std::pair<std::string, core::PodAllocation>> ClusterState::PodsOn(const std::string& node) const {
  std::vector<std::pair<std::string, core::PodAllocation>> out;
  std::shared_lock lock(mu_);
  auto keys = keys_by_node_.find(node);
  if (keys == keys_by_node_.end()) return out;
  for (const std::string& key : keys->second) {
    if (auto p = pods_.find(key); p != pods_.end()) out.emplace_back(key, p->second.allocation);
  }
  return out;
}

}  // namespace tessera::scheduler
