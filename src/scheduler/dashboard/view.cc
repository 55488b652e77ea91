#include "scheduler/dashboard/view.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include "core/mig/geometry.h"

namespace tessera::scheduler::dashboard {
namespace {

using Json = nlohmann::json;

constexpr size_t kListedProblems = 20;  // problems and pending pods named in the overview
constexpr int kDefaultLimit = 50;
constexpr int kMaxLimit = 500;

ApiAnswer Answer(int status, const Json& body) {
  return {status, body.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

ApiAnswer Problem(int status, const std::string& message) {
  return Answer(status, Json{{"error", message}});
}

Json Nullable(bool present, double value) {
  return present ? Json(value) : Json(nullptr);
}

Json ShapeJson(const core::TaskShape& s) {
  Json j = {{"gpus", s.gpus}, {"cores", s.cores}};
  if (s.gpu_memory_percent >= 0) {
    j["memoryPercent"] = s.gpu_memory_percent;
  } else if (s.gpu_memory_mib == 0) {
    j["memory"] = "whole GPU";
  } else {
    j["memoryMiB"] = s.gpu_memory_mib;
  }
  if (!s.use_types.empty()) j["types"] = s.use_types;
  return j;
}

// The instances of the node's MIG GPUs: those its inventory lists, and the
// scheduler's claims matched to them or added as not created yet.
std::vector<MigInstanceRecord> MigInstancesOf(
    const core::NodeState& state, const std::map<std::string, std::vector<PendingMigInstance>>& claims) {
  std::vector<MigInstanceRecord> out;
  for (const core::GpuState& g : state.gpus()) {
    if (!core::IsMigMode(g.gpu.mode)) continue;
    for (const core::MigDevice& d : g.gpu.mig_devices) {
      out.push_back({g.gpu.uuid, g.gpu.index, d.profile, d.start, d.size, d.memory_mib, d.uuid, d.healthy,
                     d.used_by, ""});
    }
  }
  for (const auto& [pod, instances] : claims) {
    for (const PendingMigInstance& claim : instances) {
      const int start = static_cast<int>(claim.instance.start);
      auto listed = std::find_if(out.begin(), out.end(), [&](const MigInstanceRecord& m) {
        return m.gpu_uuid == claim.gpu_uuid && m.profile == claim.instance.profile && m.start == start &&
               m.pod.empty();
      });
      if (listed != out.end()) {
        listed->pod = pod;
        continue;
      }
      MigInstanceRecord m{claim.gpu_uuid, 0, claim.instance.profile, start, 0, 0, "", true, "", pod};
      if (const int g = state.IndexOf(claim.gpu_uuid); g >= 0) {
        const core::Gpu& gpu = state.gpus()[static_cast<size_t>(g)].gpu;
        m.gpu_index = gpu.index;
        auto model = core::mig::RecogniseModel({gpu.model, static_cast<uint64_t>(gpu.memory_mib), 0});
        const core::mig::Profile* p = model.ok() ? (*model)->FindProfile(m.profile) : nullptr;
        if (p != nullptr) {
          m.size = static_cast<int>(p->memory_slices);
          m.memory_mib = static_cast<int64_t>(p->memory_mib);
        }
      }
      out.push_back(std::move(m));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const MigInstanceRecord& a, const MigInstanceRecord& b) {
    return a.gpu_index != b.gpu_index ? a.gpu_index < b.gpu_index : a.start < b.start;
  });
  return out;
}

// Memory of the held instances on GPU `uuid` ("" = every GPU of the node).
int64_t MigHeldMiB(const NodeRecord& n, const std::string& uuid = "") {
  int64_t mib = 0;
  for (const MigInstanceRecord& m : n.mig) {
    if (m.held() && (uuid.empty() || m.gpu_uuid == uuid)) mib += m.memory_mib;
  }
  return mib;
}

Json MigInstanceJson(const MigInstanceRecord& m) {
  return {{"profile", m.profile},
          {"start", m.start},
          {"size", m.size > 0 ? Json(m.size) : Json(nullptr)},
          {"memoryMiB", m.memory_mib},
          {"uuid", m.uuid.empty() ? Json(nullptr) : Json(m.uuid)},
          {"state", m.uuid.empty() ? "pending" : "created"},
          {"healthy", m.healthy},
          {"pod", m.pod.empty() ? Json(nullptr) : Json(m.pod)},
          {"usedBy", m.used_by.empty() ? Json(nullptr) : Json(m.used_by)}};
}

const char* NodeStatus(const View& view, size_t i) {
  const NodeRecord& n = *view.nodes[i];
  if (!n.error.empty()) return n.InventoryStatus();
  return view.stale[i] ? "stale" : "ok";
}

// Usage of a node's GPUs from the view's snapshot.
struct NodeUse {
  int reporting = 0;  // GPUs with usage
  double memory_used_mib = 0;
  double utilization = 0;  // sum of percent
};

NodeUse UseOf(const View& view, const NodeRecord& n) {
  NodeUse u;
  for (const core::GpuState& g : n.state.gpus()) {
    if (const GpuUsageRecord* r = view.UsageOf(g.gpu.uuid)) {
      ++u.reporting;
      u.memory_used_mib += r->memory_used_mib;
      u.utilization += r->utilization;
    }
  }
  return u;
}

Json MetricsStatusJson(const View& view, const std::string& node, int64_t now_ms) {
  if (!view.usage || view.usage->source != "nodes") {
    return {{"source", "prometheus"}};
  }
  auto it = view.usage->nodes.find(node);
  if (it == view.usage->nodes.end()) return {{"source", "nodes"}, {"state", "not scraped yet"}};
  const ScrapeStatus& s = it->second;
  Json j = {{"source", "nodes"}, {"state", s.error.empty() ? "ok" : "error"}, {"checkedAt", s.at_ms}};
  if (!s.error.empty()) j["error"] = s.error;
  if (s.ok_at_ms) j["ageSeconds"] = (now_ms - s.ok_at_ms) / 1000;
  return j;
}

Json NodeRowJson(const View& view, size_t i) {
  const NodeRecord& n = *view.nodes[i];
  const core::GpuTotals t = core::TotalsOf(n.state.gpus());
  const NodeUse use = UseOf(view, n);
  const bool reports = use.reporting > 0;
  size_t pods = 0;
  if (auto it = view.pods_by_node->find(n.name); it != view.pods_by_node->end()) pods = it->second.size();
  size_t held = 0;
  for (const MigInstanceRecord& m : n.mig) held += m.held() ? 1 : 0;
  Json j = {{"name", n.name},
            {"status", NodeStatus(view, i)},
            {"gpus", n.state.gpus().size()},
            {"healthyGpus", t.healthy},
            {"memory",
             {{"capacityMiB", t.memory_mib},
              {"allocatedMiB", t.memory_allocated_mib + MigHeldMiB(n)},
              {"usedMiB", Nullable(reports, use.memory_used_mib)}}},
            {"cores",
             {{"capacity", t.cores},
              {"allocated", t.cores_allocated},
              {"used", Nullable(reports, use.utilization)}}},
            {"slots", {{"total", t.slots}, {"used", t.slots_used}}},
            {"replicas", {{"gpus", t.replica_gpus}, {"total", t.replicas}}},
            {"migInstances", {{"total", n.mig.size()}, {"held", held}}},
            {"pods", pods},
            {"fragmentation",
             n.mix_key && n.free_milli > 0 ? Json(n.fragment_milli / double(n.free_milli)) : Json(nullptr)},
            {"metrics", MetricsStatusJson(view, n.name, view.built_ms)}};
  if (!n.error.empty()) j["message"] = n.error;
  if (!n.heartbeat.empty()) j["heartbeat"] = n.heartbeat;
  return j;
}

int64_t ParseCount(const std::string& text, int64_t fallback, int64_t max, const char* name,
                   std::string& error) {
  if (text.empty()) return fallback;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0 || v > max) {
    error = std::string(name) + " '" + text + "' must be a whole number from 0 to " + std::to_string(max);
  }
  return v;
}

Json SliceUsageJson(const View& view, const std::string& uuid, const PodRecord& pod,
                    const std::string& container) {
  const GpuUsageRecord* r = view.UsageOf(uuid);
  if (!r) return nullptr;
  for (const SliceUsage& s : r->slices) {
    if (s.ns == pod.ns && s.pod == pod.name && (s.container == container || s.container.empty())) {
      return {{"memoryUsedMiB", s.memory_used_mib},
              {"memoryLimitMiB", s.memory_limit_mib},
              {"computeShare", s.compute_share}};
    }
  }
  return nullptr;
}

Json PodJson(const View& view, const PodRecord& p) {
  Json request = {{"gpus", p.gpus}, {"cores", p.cores}};
  if (p.memory_percent >= 0) {
    request["memoryPercent"] = p.memory_percent;
  } else if (p.memory_mib > 0) {
    request["memoryMiB"] = p.memory_mib;
  } else if (p.gpus > 0) {
    request["memory"] = "whole GPU";
  }
  Json j = {{"namespace", p.ns},
            {"name", p.name},
            {"node", p.node},
            {"phase", p.phase},
            {"state", p.pending() ? "pending" : "bound"},
            {"request", request},
            {"created", p.created}};
  Json slices = Json::array();
  double used = 0, share = 0;
  bool reported = false;
  if (p.allocation) {
    for (const auto& c : p.allocation->containers) {
      for (const auto& d : c.devices) {
        Json s = {
            {"container", c.container}, {"uuid", d.uuid}, {"memoryMiB", d.memory_mib}, {"cores", d.cores}};
        if (c.init) s["init"] = true;
        if (!d.mig_profile.empty()) s["mig"] = {{"profile", d.mig_profile}, {"start", d.mig_start}};
        Json u = SliceUsageJson(view, d.uuid, p, c.container);
        if (!u.is_null()) {
          reported = true;
          used += u["memoryUsedMiB"].get<double>();
          share += u["computeShare"].get<double>();
        }
        s["usage"] = std::move(u);
        slices.push_back(std::move(s));
      }
    }
  }
  j["slices"] = std::move(slices);
  j["memoryUsedMiB"] = Nullable(reported, used);
  j["computeShare"] = Nullable(reported, share);
  std::string problem;
  if (!p.allocation_error.empty()) problem = p.allocation_error;
  if (!p.request_error.empty()) problem += (problem.empty() ? "" : "; ") + p.request_error;
  if (!problem.empty()) j["problem"] = problem;
  if (!p.waiting_reason.empty() || !p.waiting_message.empty()) {
    j["waiting"] = {{"reason", p.waiting_reason}, {"message", p.waiting_message}};
  }
  return j;
}

bool PodHasProblem(const PodRecord& p) {
  return !p.allocation_error.empty() || !p.request_error.empty() || (!p.pending() && !p.allocation);
}

std::string OverviewJson(const View& view) {
  Json nodes = {{"total", view.nodes.size()}, {"ok", 0}, {"stale", 0}, {"noInventory", 0}, {"unreadable", 0}};
  core::GpuTotals t;
  int64_t idle = 0, with_slices = 0, reporting = 0, mig_gpus = 0, mig_instances = 0, mig_held = 0;
  // GPUs per sharing mode, every mode listed (0 when none).
  Json modes = Json::object();
  for (core::SharingMode m :
       {core::SharingMode::kVgpu, core::SharingMode::kExclusive, core::SharingMode::kTimeslice,
        core::SharingMode::kMps, core::SharingMode::kMigStatic, core::SharingMode::kMigDynamic}) {
    modes[core::SharingModeName(m)] = 0;
  }
  double mem_used = 0, util = 0, reporting_mem_cap = 0, fragment = 0, free_milli = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> models;  // model -> gpus, MiB
  Json node_problems = Json::array();
  size_t node_problem_count = 0;
  for (size_t i = 0; i < view.nodes.size(); ++i) {
    const NodeRecord& n = *view.nodes[i];
    const std::string status = NodeStatus(view, i);
    nodes[status == "no-inventory" ? "noInventory" : status] =
        nodes[status == "no-inventory" ? "noInventory" : status].get<int64_t>() + 1;
    if (status != "ok") {
      ++node_problem_count;
      if (node_problems.size() < kListedProblems) {
        node_problems.push_back({{"name", n.name},
                                 {"status", status},
                                 {"message", n.error.empty() ? "inventory heartbeat " + n.heartbeat +
                                                                   " is older than inventoryStaleSeconds"
                                                             : n.error}});
      }
    }
    mig_held += MigHeldMiB(n);
    mig_instances += static_cast<int64_t>(n.mig.size());
    for (const core::GpuState& g : n.state.gpus()) {
      mig_gpus += core::IsMigMode(g.gpu.mode) ? 1 : 0;
      modes[core::SharingModeName(g.gpu.mode)] = modes[core::SharingModeName(g.gpu.mode)].get<int64_t>() + 1;
      t.Add(g);
      idle += g.idle() && g.gpu.usable() ? 1 : 0;
      with_slices += g.idle() ? 0 : 1;
      auto& m = models[g.gpu.model];
      m.first += 1;
      m.second += g.gpu.memory_mib;
      if (const GpuUsageRecord* r = view.UsageOf(g.gpu.uuid)) {
        ++reporting;
        mem_used += r->memory_used_mib;
        util += r->utilization;
        reporting_mem_cap += static_cast<double>(g.gpu.memory_mib);
      }
    }
    if (n.error.empty() && n.mix_key) {
      fragment += n.fragment_milli;
      free_milli += static_cast<double>(n.free_milli);
    }
  }
  const bool reports = reporting > 0;
  Json fragmentation;
  if (!view.mix.key) {
    fragmentation = {{"share", nullptr},
                     {"reason",
                      "no GPU requests seen yet: there are no typical requests to "
                      "measure the free capacity against"}};
  } else {
    Json shapes = Json::array();
    for (const core::MixEntry& e : view.mix.mix) {
      Json s = ShapeJson(e.shape);
      s["weight"] = e.weight;
      shapes.push_back(std::move(s));
    }
    fragmentation = {{"share", free_milli > 0 ? Json(fragment / free_milli) : Json(0.0)},
                     {"fragmentMilliGpu", fragment},
                     {"freeMilliGpu", free_milli},
                     {"source", view.mix.source},
                     {"shapes", std::move(shapes)}};
  }
  // Pods.
  int64_t bound = 0, pending = 0, pod_problem_count = 0;
  std::vector<const PodRecord*> waiting;
  Json pod_problems = Json::array();
  for (const auto& p : view.pods->pods) {
    if (p->pending()) {
      ++pending;
      waiting.push_back(p.get());
    } else {
      ++bound;
    }
    if (PodHasProblem(*p)) {
      ++pod_problem_count;
      if (pod_problems.size() < kListedProblems) {
        std::string message = p->allocation_error;
        if (!p->request_error.empty()) message += (message.empty() ? "" : "; ") + p->request_error;
        if (message.empty())
          message = "bound to " + p->node + " without a tessera.io/allocation (not placed by tessera)";
        pod_problems.push_back({{"namespace", p->ns}, {"name", p->name}, {"message", message}});
      }
    }
  }
  // The longest waiting first (creation timestamps are RFC 3339 UTC: they sort as text).
  const size_t shown = std::min(waiting.size(), kListedProblems);
  std::partial_sort(waiting.begin(), waiting.begin() + static_cast<ptrdiff_t>(shown), waiting.end(),
                    [](const PodRecord* a, const PodRecord* b) {
                      return a->created != b->created ? a->created < b->created : a->key() < b->key();
                    });
  Json pending_items = Json::array();
  for (size_t k = 0; k < shown; ++k) {
    const PodRecord& p = *waiting[k];
    Json item = PodJson(view, p);
    if (!item.contains("waiting")) {
      item["waiting"] = {{"reason", ""},
                         {"message", p.request_error.empty() ? "not scheduled yet (no PodScheduled condition)"
                                                             : p.request_error}};
    }
    pending_items.push_back(std::move(item));
  }
  Json model_list = Json::array();
  for (const auto& [model, m] : models)
    model_list.push_back({{"model", model}, {"gpus", m.first}, {"memoryMiB", m.second}});

  Json usage = {
      {"source", view.usage->source}, {"rounds", view.usage->rounds}, {"updatedAt", view.usage->updated_ms}};
  if (!view.usage->prometheus_url.empty()) usage["url"] = view.usage->prometheus_url;
  if (!view.usage->error.empty()) usage["error"] = view.usage->error;
  if (view.usage->source == "nodes") {
    int64_t ok = 0, failed = 0;
    Json errors = Json::array();
    for (const auto& [node, s] : view.usage->nodes) {
      if (s.error.empty()) {
        ++ok;
      } else {
        ++failed;
        if (errors.size() < kListedProblems) errors.push_back({{"node", node}, {"error", s.error}});
      }
    }
    usage["nodesOk"] = ok;
    usage["nodesFailed"] = failed;
    usage["errors"] = std::move(errors);
  }
  Json status = {{"apiServer",
                  {{"ok", view.status.api_error.empty()},
                   {"checkedAt", view.status.api_checked_ms},
                   {"okAt", view.status.api_ok_ms}}},
                 {"ready", view.status.not_ready.empty()},
                 {"usage", std::move(usage)}};
  if (!view.status.api_error.empty()) status["apiServer"]["error"] = view.status.api_error;
  if (!view.status.not_ready.empty()) status["notReady"] = view.status.not_ready;

  Json j = {
      {"generation", view.generation},
      {"builtAt", view.built_ms},
      {"status", std::move(status)},
      {"nodes", std::move(nodes)},
      {"gpus",
       {{"total", t.gpus},
        {"healthy", t.healthy},
        {"unhealthy", t.gpus - t.healthy},
        {"idle", idle},
        {"withSlices", with_slices},
        {"slotsTotal", t.slots},
        {"slotsUsed", t.slots_used},
        {"mig", mig_gpus},
        {"migInstances", mig_instances},
        {"modes", std::move(modes)},
        {"replicaGpus", t.replica_gpus},
        {"replicas", t.replicas},
        {"reporting", reporting}}},
      {"memory",
       {{"capacityMiB", t.memory_mib},
        {"allocatedMiB", t.memory_allocated_mib + mig_held},
        {"usedMiB", Nullable(reports, mem_used)},
        {"reportingCapacityMiB", reporting_mem_cap}}},
      {"cores", {{"capacity", t.cores}, {"allocated", t.cores_allocated}, {"used", Nullable(reports, util)}}},
      {"fragmentation", std::move(fragmentation)},
      {"pods",
       {{"total", view.pods->pods.size()},
        {"bound", bound},
        {"pending", pending},
        {"problems", pod_problem_count}}},
      {"pending", {{"total", pending}, {"items", std::move(pending_items)}}},
      {"problems",
       {{"nodes", std::move(node_problems)},
        {"nodesTotal", node_problem_count},
        {"pods", std::move(pod_problems)},
        {"podsTotal", pod_problem_count}}},
      {"models", std::move(model_list)}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string NamespacesJson(const View& view) {
  struct Ns {
    int64_t pods = 0, pending = 0, slices = 0, mig = 0, memory = 0, cores = 0, problems = 0;
    double used = 0;
    bool reported = false;
  };
  std::map<std::string, Ns> by_ns;
  for (const auto& p : view.pods->pods) {
    Ns& n = by_ns[p->ns];
    ++n.pods;
    n.pending += p->pending() ? 1 : 0;
    n.problems += PodHasProblem(*p) ? 1 : 0;
    if (!p->allocation) continue;
    for (const auto& c : p->allocation->containers) {
      if (c.init) continue;
      for (const auto& d : c.devices) {
        ++(d.mig_profile.empty() ? n.slices : n.mig);
        n.memory += d.memory_mib;
        n.cores += d.cores;
        if (const GpuUsageRecord* r = view.UsageOf(d.uuid)) {
          for (const SliceUsage& s : r->slices) {
            if (s.ns == p->ns && s.pod == p->name && s.container == c.container) {
              n.used += s.memory_used_mib;
              n.reported = true;
            }
          }
        }
      }
    }
  }
  Json items = Json::array();
  for (const auto& [name, n] : by_ns) {
    items.push_back({{"name", name},
                     {"pods", n.pods},
                     {"pending", n.pending},
                     {"slices", n.slices},
                     {"migInstances", n.mig},
                     {"memoryMiB", n.memory},
                     {"cores", n.cores},
                     {"problems", n.problems},
                     {"memoryUsedMiB", Nullable(n.reported, n.used)}});
  }
  return Json{{"generation", view.generation}, {"items", std::move(items)}}.dump(
      -1, ' ', false, Json::error_handler_t::replace);
}

bool SameMix(const core::WorkloadMix& a, const core::WorkloadMix& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i].shape == b[i].shape) || a[i].weight != b[i].weight) return false;
  }
  return true;
}

}  // namespace

const char* NodeRecord::InventoryStatus() const {
  if (error.empty()) return "ok";
  return has_inventory ? "unreadable" : "no-inventory";
}

const NodeRecord* View::FindNode(const std::string& name) const {
  auto it = node_index.find(name);
  return it == node_index.end() ? nullptr : nodes[it->second].get();
}

const GpuUsageRecord* View::UsageOf(const std::string& uuid) const {
  if (!usage) return nullptr;
  auto it = usage->gpus.find(uuid);
  return it == usage->gpus.end() ? nullptr : it->second.get();
}

MixInput ViewBuilder::MixOfPods(const PodsSnapshot& pods) {
  if (pods.generation == pods_mix_generation_) return {pods_mix_key_, pods_mix_, "pods"};
  pods_mix_generation_ = pods.generation;
  core::MixCounter counter;
  for (const auto& p : pods.pods) {
    if (p->has_shape) counter.Add(p->shape);
  }
  core::WorkloadMix mix = counter.total() ? counter.Typical() : core::WorkloadMix{};
  if (!SameMix(mix, pods_mix_) || (pods_mix_key_ == 0 && !mix.empty())) {
    pods_mix_ = mix;
    pods_mix_key_ = mix.empty() ? 0 : (pods_mix_key_ | (uint64_t{1} << 63)) + 1;
  }
  return {pods_mix_key_, pods_mix_, "pods"};
}

std::shared_ptr<const View> ViewBuilder::Build(const ClusterState& state, const PodIndex& pod_index,
                                               std::shared_ptr<const UsageSnapshot> usage, MixInput mix,
                                               SourceStatus status, int64_t now_ms) {
  auto view = std::make_shared<View>();
  view->generation = ++generation_;
  view->built_ms = now_ms;
  view->status = std::move(status);
  view->usage = usage ? std::move(usage) : std::make_shared<UsageSnapshot>();
  // Pods: shared with the last view while the index is unchanged.
  if (last_ && last_->pods->generation == pod_index.generation()) {
    view->pods = last_->pods;
    view->pods_by_node = last_->pods_by_node;
  } else {
    auto pods = std::make_shared<PodsSnapshot>(pod_index.Snapshot());
    auto by_node = std::make_shared<std::unordered_map<std::string, std::vector<uint32_t>>>();
    for (uint32_t i = 0; i < pods->pods.size(); ++i) {
      if (!pods->pods[i]->pending()) (*by_node)[pods->pods[i]->node].push_back(i);
    }
    view->pods = std::move(pods);
    view->pods_by_node = std::move(by_node);
  }
  if (mix.mix.empty()) mix = MixOfPods(*view->pods);
  if (mix.mix.empty()) mix.key = 0;
  view->mix = std::move(mix);

  // Nodes: reuse every record whose node did not change; copy the others
  // under the cluster state's reader lock, compute outside it.
  std::unordered_map<std::string, std::shared_ptr<const NodeRecord>> previous;
  if (last_) {
    previous.reserve(last_->nodes.size());
    for (const auto& n : last_->nodes) previous.emplace(n->name, n);
  }
  struct Entry {
    std::shared_ptr<const NodeRecord> record;  // reused, or
    std::shared_ptr<NodeRecord> fresh;         // copied now
    bool stale = false;
  };
  std::vector<Entry> entries;
  entries.reserve(previous.size());
  state.VisitNodes([&](const ClusterState::NodeVisit& v) {
    Entry e;
    e.stale = v.stale;
    auto it = previous.find(v.name);
    if (it != previous.end() && it->second->epoch == v.epoch && it->second->version == v.state.version() &&
        it->second->mig_version == v.mig_version && it->second->heartbeat == v.heartbeat &&
        it->second->error == v.error) {
      e.record = it->second;
    } else {
      auto r = std::make_shared<NodeRecord>();
      r->name = v.name;
      r->epoch = v.epoch;
      r->version = v.state.version();
      r->has_inventory = v.has_inventory;
      r->error = v.error;
      r->heartbeat = v.heartbeat;
      r->state = v.state;
      r->mig_version = v.mig_version;
      r->mig = MigInstancesOf(v.state, v.mig_claims);
      e.fresh = std::move(r);
    }
    entries.push_back(std::move(e));
  });
  for (Entry& e : entries) {
    const NodeRecord* r = e.record ? e.record.get() : e.fresh.get();
    if (r->mix_key == view->mix.key && !e.fresh) continue;
    if (!e.fresh) e.fresh = std::make_shared<NodeRecord>(*e.record);
    NodeRecord& n = *e.fresh;
    n.mix_key = view->mix.key;
    n.free_milli = 0;
    for (const core::GpuState& g : n.state.gpus()) n.free_milli += g.free_milli();
    n.fragment_milli = view->mix.key && n.error.empty()
                           ? core::FragmentationMeter(n.state, view->mix.mix, /*use_memory=*/false).current()
                           : 0;
    e.record = std::move(e.fresh);
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.record->name < b.record->name; });
  view->nodes.reserve(entries.size());
  view->stale.reserve(entries.size());
  view->node_index.reserve(entries.size());
  for (Entry& e : entries) {
    view->node_index.emplace(e.record->name, static_cast<uint32_t>(view->nodes.size()));
    view->stale.push_back(e.stale ? 1 : 0);
    view->nodes.push_back(std::move(e.record));
  }
  view->overview_json = OverviewJson(*view);
  view->namespaces_json = NamespacesJson(*view);
  last_ = view;
  return view;
}

ApiAnswer NodesPage(const View& view, const ListQuery& query) {
  std::string error;
  const int64_t offset = ParseCount(query.offset, 0, INT32_MAX, "offset", error);
  const int64_t limit = ParseCount(query.limit, kDefaultLimit, kMaxLimit, "limit", error);
  if (!error.empty()) return Problem(400, error);
  static const std::vector<std::string> kSorts = {"", "name", "status", "allocated", "fragmentation"};
  if (std::find(kSorts.begin(), kSorts.end(), query.sort) == kSorts.end())
    return Problem(400, "sort '" + query.sort + "' must be name, status, allocated or fragmentation");
  std::vector<uint32_t> match;
  match.reserve(view.nodes.size());
  for (uint32_t i = 0; i < view.nodes.size(); ++i) {
    const NodeRecord& n = *view.nodes[i];
    if (!query.q.empty() && n.name.find(query.q) == std::string::npos) continue;
    if (!query.state.empty() && query.state != NodeStatus(view, i)) continue;
    match.push_back(i);
  }
  auto share = [&](uint32_t i) {
    const NodeRecord& n = *view.nodes[i];
    int64_t cap = 0, used = 0;
    for (const auto& g : n.state.gpus()) {
      cap += g.gpu.memory_mib;
      used += g.used.memory_mib;
    }
    return cap ? double(used) / double(cap) : -1.0;
  };
  auto frag = [&](uint32_t i) {
    const NodeRecord& n = *view.nodes[i];
    return n.free_milli > 0 && n.mix_key ? n.fragment_milli / double(n.free_milli) : -1.0;
  };
  if (query.sort == "status") {
    std::stable_sort(match.begin(), match.end(), [&](uint32_t a, uint32_t b) {
      // Problems first.
      const bool a_ok = std::string_view(NodeStatus(view, a)) == "ok";
      const bool b_ok = std::string_view(NodeStatus(view, b)) == "ok";
      return a_ok < b_ok;
    });
  } else if (query.sort == "allocated") {
    std::stable_sort(match.begin(), match.end(), [&](uint32_t a, uint32_t b) { return share(a) > share(b); });
  } else if (query.sort == "fragmentation") {
    std::stable_sort(match.begin(), match.end(), [&](uint32_t a, uint32_t b) { return frag(a) > frag(b); });
  }
  Json items = Json::array();
  for (int64_t k = offset; k < static_cast<int64_t>(match.size()) && k < offset + limit; ++k)
    items.push_back(NodeRowJson(view, match[static_cast<size_t>(k)]));
  return Answer(200, {{"generation", view.generation},
                      {"total", match.size()},
                      {"offset", offset},
                      {"limit", limit},
                      {"items", std::move(items)}});
}

// One GPU as the node page lists it and the GPU page starts from: inventory,
// allocation and, when its node reports, its usage (else null).
// A GPU in MIG mode adds its instances; their held memory is allocated.
Json GpuJson(const NodeRecord& n, const core::GpuState& g, const GpuUsageRecord* u) {
  Json j = {{"uuid", g.gpu.uuid},
            {"index", g.gpu.index},
            {"model", g.gpu.model},
            {"healthy", g.gpu.healthy},
            {"mode", core::SharingModeName(g.gpu.mode)},
            {"memoryMiB", g.gpu.memory_mib},
            {"cores", g.gpu.cores},
            {"slots", g.gpu.slots},
            {"allocated",
             {{"memoryMiB", g.used.memory_mib + MigHeldMiB(n, g.gpu.uuid)},
              {"cores", g.used.cores},
              {"slots", g.used.slots},
              {"exclusive", g.used.exclusive}}},
            {"memoryUsedMiB", Nullable(u, u ? u->memory_used_mib : 0)},
            {"utilization", Nullable(u, u ? u->utilization : 0)}};
  if (!g.gpu.held_by.empty()) j["heldBy"] = g.gpu.held_by;
  // Replicas kube-scheduler counts (timeslice, MPS split NVIDIA-style): tessera
  // allocates nothing of such a GPU.
  if (g.gpu.replicas > 0) j["replicas"] = g.gpu.replicas;
  if (core::IsMigMode(g.gpu.mode)) {
    Json instances = Json::array();
    for (const MigInstanceRecord& m : n.mig) {
      if (m.gpu_uuid == g.gpu.uuid) instances.push_back(MigInstanceJson(m));
    }
    j["migInstances"] = std::move(instances);
  }
  return j;
}

ApiAnswer NodeDetail(const View& view, const std::string& name) {
  auto it = view.node_index.find(name);
  if (it == view.node_index.end())
    return Problem(404, "node '" + name + "' is not known to tessera-scheduler");
  const NodeRecord& n = *view.nodes[it->second];
  Json j = NodeRowJson(view, it->second);
  Json gpus = Json::array();
  for (const core::GpuState& g : n.state.gpus()) {
    gpus.push_back(GpuJson(n, g, view.UsageOf(g.gpu.uuid)));
  }
  j["gpuList"] = std::move(gpus);
  Json pods = Json::array();
  if (auto p = view.pods_by_node->find(name); p != view.pods_by_node->end()) {
    for (uint32_t i : p->second) {
      if (pods.size() >= kMaxLimit) break;
      pods.push_back(PodJson(view, *view.pods->pods[i]));
    }
  }
  j["podList"] = std::move(pods);
  j["generation"] = view.generation;
  return Answer(200, j);
}

ApiAnswer GpuDetail(const View& view, const std::string& node, const std::string& uuid) {
  const NodeRecord* n = view.FindNode(node);
  if (!n) return Problem(404, "node '" + node + "' is not known to tessera-scheduler");
  const int index = n->state.IndexOf(uuid);
  if (index < 0) return Problem(404, "node '" + node + "' has no GPU " + uuid + " in its inventory");
  const core::GpuState& g = n->state.gpus()[static_cast<size_t>(index)];
  const GpuUsageRecord* u = view.UsageOf(uuid);
  auto history = [](const std::vector<UsagePoint>& points) {
    Json h = Json::array();
    for (const UsagePoint& p : points) h.push_back({p.at_ms, p.value});
    return h;
  };
  Json slices = Json::array();
  std::map<std::tuple<std::string, std::string, int>, std::string> mig_containers;  // (pod, profile, start)
  if (auto p = view.pods_by_node->find(node); p != view.pods_by_node->end()) {
    for (uint32_t i : p->second) {
      const PodRecord& pod = *view.pods->pods[i];
      if (!pod.allocation) continue;
      for (const auto& c : pod.allocation->containers) {
        for (const auto& d : c.devices) {
          if (d.uuid != uuid) continue;
          if (!d.mig_profile.empty()) {
            // A MIG instance, not a slice: its container joins the instance's entry.
            mig_containers[{pod.key(), d.mig_profile, d.mig_start}] = c.container;
            continue;
          }
          Json s = {{"namespace", pod.ns},       {"pod", pod.name},  {"container", c.container},
                    {"memoryMiB", d.memory_mib}, {"cores", d.cores}, {"init", c.init}};
          s["usage"] = nullptr;
          if (u) {
            for (const SliceUsage& su : u->slices) {
              if (su.ns == pod.ns && su.pod == pod.name && su.container == c.container) {
                s["usage"] = {{"memoryUsedMiB", su.memory_used_mib},
                              {"memoryLimitMiB", su.memory_limit_mib},
                              {"computeShare", su.compute_share},
                              {"history", history(su.history)}};
              }
            }
          }
          slices.push_back(std::move(s));
        }
      }
    }
  }
  Json j = GpuJson(*n, g, u);
  if (j.contains("migInstances")) {
    for (Json& m : j["migInstances"]) {
      if (m["pod"].is_null()) continue;
      auto c = mig_containers.find(
          {m["pod"].get<std::string>(), m["profile"].get<std::string>(), m["start"].get<int>()});
      if (c != mig_containers.end()) m["container"] = c->second;
    }
  }
  j["generation"] = view.generation;
  j["node"] = node;
  j["history"] = u ? history(u->history) : Json::array();
  j["slices"] = std::move(slices);
  j["metrics"] = MetricsStatusJson(view, node, view.built_ms);
  if (std::string over = g.Overcommit(); !over.empty()) j["overcommit"] = over;
  return Answer(200, j);
}

ApiAnswer PodsPage(const View& view, const ListQuery& query) {
  std::string error;
  const int64_t offset = ParseCount(query.offset, 0, INT32_MAX, "offset", error);
  const int64_t limit = ParseCount(query.limit, kDefaultLimit, kMaxLimit, "limit", error);
  if (!error.empty()) return Problem(400, error);
  if (!query.state.empty() && query.state != "pending" && query.state != "bound" && query.state != "problem")
    return Problem(400, "state '" + query.state + "' must be pending, bound or problem");
  int64_t total = 0;
  Json items = Json::array();
  for (const auto& p : view.pods->pods) {
    if (!query.ns.empty() && p->ns != query.ns) continue;
    if (!query.node.empty() && p->node != query.node) continue;
    if (!query.q.empty() && p->name.find(query.q) == std::string::npos) continue;
    if (query.state == "pending" && !p->pending()) continue;
    if (query.state == "bound" && p->pending()) continue;
    if (query.state == "problem" && !PodHasProblem(*p)) continue;
    if (total >= offset && total < offset + limit) items.push_back(PodJson(view, *p));
    ++total;
  }
  return Answer(200, {{"generation", view.generation},
                      {"total", total},
                      {"offset", offset},
                      {"limit", limit},
                      {"items", std::move(items)}});
}

}  // namespace tessera::scheduler::dashboard
