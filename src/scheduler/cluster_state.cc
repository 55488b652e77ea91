#include "scheduler/cluster_state.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <thread>

#include "core/allocation_codec.h"
#include "core/inventory_codec.h"

namespace tessera::scheduler {
namespace {

std::string AnnotationOf(const Json& object, std::string_view key) {
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  auto ann = meta->find("annotations");
  if (ann == meta->end() || !ann->is_object()) return "";
  auto v = ann->find(std::string(key));
  if (v == ann->end() || !v->is_string()) return "";
  return v->get<std::string>();
}

std::string NameOf(const Json& object) {
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  auto n = meta->find("name");
  return n != meta->end() && n->is_string() ? n->get<std::string>() : "";
}

bool Terminal(const Json& pod) {
  auto status = pod.find("status");
  if (status == pod.end() || !status->is_object()) return false;
  auto phase = status->find("phase");
  if (phase == status->end() || !phase->is_string()) return false;
  const std::string& p = phase->get_ref<const std::string&>();
  return p == "Succeeded" || p == "Failed";
}

}  // namespace

std::string PodKey(const Json& pod) {
  std::string ns;
  auto meta = pod.find("metadata");
  if (meta != pod.end() && meta->is_object()) {
    auto n = meta->find("namespace");
    if (n != meta->end() && n->is_string()) ns = n->get<std::string>();
  }
  return ns + "/" + NameOf(pod);
}

std::vector<int> ScaleToExtenderScores(const std::vector<std::optional<double>>& scores) {
  double lo = 0, hi = 0;
  bool any = false;
  for (const auto& s : scores) {
    if (!s) continue;
    lo = any ? std::min(lo, *s) : *s;
    hi = any ? std::max(hi, *s) : *s;
    any = true;
  }
  std::vector<int> out;
  out.reserve(scores.size());
  for (const auto& s : scores) {
    if (!s) {
      out.push_back(0);
    } else if (hi == lo) {
      out.push_back(10);
    } else {
      out.push_back(static_cast<int>(std::floor(10.0 * (*s - lo) / (hi - lo))));
    }
  }
  return out;
}

ClusterState::ClusterState(SteadyNow now) : now_(std::move(now)) {
  if (!now_) now_ = [] { return std::chrono::steady_clock::now(); };
}

void ClusterState::RebuildNodeLocked(NodeEntry& entry) {
  const std::string& name = entry.state.name();
  auto keys = keys_by_node_.find(name);
  if (keys == keys_by_node_.end()) return;
  std::vector<std::string> dropped;
  for (const std::string& key : keys->second) {
    if (auto p = pods_.find(key); p != pods_.end()) {
      p->second.applied = entry.error.empty() && entry.state.Apply(p->second.allocation).ok();
      if (!p->second.applied && entry.error.empty()) ++inconsistent_;
    } else if (auto r = reservations_.find(key); r != reservations_.end()) {
      if (!entry.error.empty() || !entry.state.Apply(r->second.allocation).ok()) dropped.push_back(key);
    }
  }
  for (const std::string& key : dropped) {
    reservations_.erase(key);
    keys->second.erase(key);
  }
}

void ClusterState::UpsertNode(const Json& node) {
  const std::string name = NameOf(node);
  if (name.empty()) return;
  std::string text = AnnotationOf(node, core::kInventoryAnnotation);
  // Decode outside the lock.
  NodeEntry fresh;
  fresh.inventory_text = text;
  if (text.empty()) {
    fresh.error = "node " + name + " publishes no " + std::string(core::kInventoryAnnotation) +
                  " annotation (is the tessera node agent running there?)";
    fresh.state = core::NodeState(name, {});
  } else {
    auto inv = core::DecodeInventory(text);
    if (!inv.ok()) {
      fresh.error = "node " + name + ": unreadable " + std::string(core::kInventoryAnnotation) + ": " +
                    inv.error().message;
      fresh.state = core::NodeState(name, {});
    } else if (inv->node != name) {
      fresh.error = "node " + name + ": its inventory names node '" + inv->node + "'";
      fresh.state = core::NodeState(name, {});
    } else {
      fresh.state = core::NodeState(name, inv->gpus);
    }
  }
  std::unique_lock lock(mu_);
  auto it = nodes_.find(name);
  if (it != nodes_.end() && it->second.inventory_text == text) return;
  NodeEntry& entry = nodes_[name];
  entry = std::move(fresh);
  auto slot = slots_.try_emplace(name, slots_.size()).first;
  entry.slot = slot->second;
  entry.epoch = ++next_epoch_;
  RebuildNodeLocked(entry);
}

void ClusterState::DeleteNode(const Json& node) {
  const std::string name = NameOf(node);
  std::unique_lock lock(mu_);
  nodes_.erase(name);
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
    if (auto n = nodes_.find(node); n != nodes_.end()) (void)n->second.state.Release(p->second.allocation);
  }
  if (auto keys = keys_by_node_.find(node); keys != keys_by_node_.end()) keys->second.erase(key);
  pods_.erase(p);
}

void ClusterState::ReleaseReservationLocked(const std::string& key) {
  auto r = reservations_.find(key);
  if (r == reservations_.end()) return;
  const std::string& node = r->second.allocation.node;
  if (auto n = nodes_.find(node); n != nodes_.end()) (void)n->second.state.Release(r->second.allocation);
  if (auto keys = keys_by_node_.find(node); keys != keys_by_node_.end()) keys->second.erase(key);
  reservations_.erase(r);
}

void ClusterState::UpsertPod(const Json& pod) {
  const std::string key = PodKey(pod);
  const bool terminal = Terminal(pod);
  const std::string text = AnnotationOf(pod, core::kAllocationAnnotation);
  std::optional<core::PodAllocation> allocation;
  bool unreadable = false;
  if (!terminal && !text.empty()) {
    auto decoded = core::DecodeAllocation(text);
    if (decoded.ok()) {
      allocation = std::move(decoded).value();
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
  if (auto n = nodes_.find(entry.allocation.node); n != nodes_.end() && n->second.error.empty()) {
    entry.applied = n->second.state.Apply(entry.allocation).ok();
    if (!entry.applied) ++inconsistent_;
  }
  keys_by_node_[entry.allocation.node].insert(key);
  pods_[key] = std::move(entry);
}

void ClusterState::DeletePod(const Json& pod) {
  const std::string key = PodKey(pod);
  std::unique_lock lock(mu_);
  ForgetPodLocked(key);
  ReleaseReservationLocked(key);
}

namespace {

// Runs body(begin, end) over [0, n), split in two halves on two threads when
// the list is long enough to pay for a thread (kube-scheduler runs one
// scheduling cycle at a time, so a request may use the idle core).
void ForRange(size_t n, const std::function<void(size_t, size_t)>& body) {
  constexpr size_t kParallelFrom = 512;
  if (n < kParallelFrom) {
    body(0, n);
    return;
  }
  std::thread helper([&] { body(n / 2, n); });
  body(0, n / 2);
  helper.join();
}

// Everything FitNode and the policies read from a request (container names
// appear in fit messages).
std::string ShapeKey(const core::PodRequest& pod) {
  std::string key;
  auto add = [&key](const core::ContainerRequest& c) {
    key += c.name + ":" + std::to_string(c.gpus) + "," + std::to_string(c.memory_mib) + "," +
           std::to_string(c.memory_percent.value_or(-1)) + "," + std::to_string(c.cores) + "," +
           std::to_string(c.priority) + ";";
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

}  // namespace

std::shared_ptr<ClusterState::EvalCache> ClusterState::CacheFor(const std::string& key) const {
  constexpr size_t kMaxShapes = 256;
  std::lock_guard lock(caches_mu_);
  auto it = caches_.find(key);
  if (it != caches_.end()) return it->second;
  if (caches_.size() >= kMaxShapes) caches_.clear();  // requests in flight keep theirs alive
  auto cache = std::make_shared<EvalCache>();
  caches_[key] = cache;
  return cache;
}

ClusterState::FilterOutcome ClusterState::Filter(const core::PodRequest& pod,
                                                 const std::vector<std::string>& nodes) const {
  // Per node: empty = fits, else the reason.
  std::vector<std::string> reasons(nodes.size());
  std::vector<char> fits(nodes.size(), 0);
  auto cache = CacheFor("fit|" + ShapeKey(pod));
  {
    std::lock_guard cache_lock(cache->mu);
    std::shared_lock lock(mu_);
    if (cache->entries.size() < slots_.size()) cache->entries.resize(slots_.size());
    ForRange(nodes.size(), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const std::string& name = nodes[i];
        auto n = nodes_.find(name);
        if (n == nodes_.end()) {
          reasons[i] = "node " + name + " is unknown to tessera or publishes no " +
                       std::string(core::kInventoryAnnotation) + " annotation";
        } else if (!n->second.error.empty()) {
          reasons[i] = n->second.error;
        } else {
          CachedEval& e = cache->entries[n->second.slot];
          if (e.epoch != n->second.epoch || e.version != n->second.state.version()) {
            core::FitResult fit = core::FitNode(n->second.state, pod);
            e.epoch = n->second.epoch;
            e.version = n->second.state.version();
            e.fits = fit.fits;
            e.reason = fit.fits ? "" : (fit.message.empty() ? "does not fit" : std::move(fit.message));
          }
          if (e.fits) {
            fits[i] = 1;
          } else {
            reasons[i] = e.reason;
          }
        }
      }
    });
  }
  FilterOutcome out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (fits[i]) {
      out.feasible.push_back(nodes[i]);
    } else {
      out.failed[nodes[i]] = std::move(reasons[i]);
    }
  }
  return out;
}

std::vector<int> ClusterState::Prioritize(const core::PodRequest& pod, const core::Policy& policy,
                                          const std::vector<std::string>& nodes) const {
  std::vector<std::optional<double>> scores(nodes.size());
  auto cache =
      CacheFor(std::string(policy.name()) + "@" + std::to_string(policy.epoch()) + "|" + ShapeKey(pod));
  {
    std::lock_guard cache_lock(cache->mu);
    std::shared_lock lock(mu_);
    if (cache->entries.size() < slots_.size()) cache->entries.resize(slots_.size());
    ForRange(nodes.size(), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        auto n = nodes_.find(nodes[i]);
        if (n == nodes_.end() || !n->second.error.empty()) continue;
        CachedEval& e = cache->entries[n->second.slot];
        if (e.epoch != n->second.epoch || e.version != n->second.state.version()) {
          auto c = policy.Evaluate(n->second.state, pod);
          e.epoch = n->second.epoch;
          e.version = n->second.state.version();
          e.score = c ? std::optional<double>(c->score) : std::nullopt;
        }
        scores[i] = e.score;
      }
    });
  }
  return ScaleToExtenderScores(scores);
}

Result<core::PodAllocation> ClusterState::Reserve(const std::string& pod_key, const core::PodRequest& pod,
                                                  const std::string& node, core::GpuOrder order,
                                                  std::chrono::milliseconds ttl) {
  std::unique_lock lock(mu_);
  if (auto p = pods_.find(pod_key); p != pods_.end()) {
    return Error{"pod " + pod_key + " already has an allocation on node " + p->second.allocation.node};
  }
  ReleaseReservationLocked(pod_key);  // a retried bind replaces its earlier reservation
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return Error{"node " + node + " is unknown to tessera (no GPU inventory seen)"};
  if (!n->second.error.empty()) return Error{n->second.error};
  core::FitResult fit = core::FitNode(n->second.state, pod, order);
  if (!fit.fits) return Error{"pod " + pod_key + " no longer fits on node " + node + ": " + fit.message};
  core::PodAllocation allocation = core::ToAllocation(n->second.state, pod, fit.placement);
  if (Status s = n->second.state.Apply(allocation); !s) return s.error().Wrap("node " + node);
  reservations_[pod_key] = Reservation{allocation, now_() + ttl};
  keys_by_node_[node].insert(pod_key);
  return allocation;
}

void ClusterState::Unreserve(const std::string& pod_key) {
  std::unique_lock lock(mu_);
  ReleaseReservationLocked(pod_key);
}

size_t ClusterState::ExpireReservations() {
  const auto now = now_();
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
  for (const auto& [name, n] : nodes_) {
    for (const auto& g : n.state.gpus()) largest = std::max(largest, g.gpu.memory_mib);
  }
  return largest;
}

ClusterStats ClusterState::Stats() const {
  std::shared_lock lock(mu_);
  ClusterStats s;
  for (const auto& [name, n] : nodes_) {
    if (n.error.empty()) {
      ++s.nodes;
      s.gpus += n.state.gpus().size();
    } else {
      ++s.nodes_without_inventory;
    }
  }
  s.pods = pods_.size();
  s.reservations = reservations_.size();
  s.reservations_expired = expired_;
  s.inconsistent = inconsistent_;
  return s;
}

std::optional<core::NodeState> ClusterState::Node(const std::string& name) const {
  std::shared_lock lock(mu_);
  auto n = nodes_.find(name);
  if (n == nodes_.end()) return std::nullopt;
  return n->second.state;
}

std::optional<core::PodAllocation> ClusterState::AllocationOf(const std::string& pod_key) const {
  std::shared_lock lock(mu_);
  if (auto p = pods_.find(pod_key); p != pods_.end()) return p->second.allocation;
  if (auto r = reservations_.find(pod_key); r != reservations_.end()) return r->second.allocation;
  return std::nullopt;
}

}  // namespace tessera::scheduler
