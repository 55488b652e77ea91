// Chaos under load (issue 19, item 3): GPU pods flow through admission (the
// mutating webhook), filter, prioritize and bind on the leader's extender,
// and the kubelet's Allocate on the node, while the API-server stand-in
// answers 5xx, answers slowly, answers garbage, drops every watch and
// compacts its history (410 Expired), and while tessera-scheduler (two
// replicas, leader election) and tessera-node are killed with SIGKILL and the
// kubelet stand-in restarts, at moments drawn from a seeded generator.
//
// The test plays the parts that are not tessera's:
//  - kube-apiserver: it calls the webhook (POST /mutate on a replica, as the
//    webhook Service would route it), applies the JSONPatch and creates the
//    pod in the stand-in's store (the stand-in has no admission chain);
//  - kube-scheduler: filter -> prioritize -> bind on the replica the Lease
//    names, the whole cycle retried with a short backoff after any error or
//    "unschedulable", until the API server shows the pod bound;
//  - the kubelet: for a bound pod it reads the pod's allocation (the Downward
//    API's TESSERA_ALLOCATION must not be empty), picks free device IDs on the
//    GPUs the allocation names and admits the container through the node's
//    device plugin (Allocate), retrying while tessera-node is down; the pod
//    then runs for a moment, its containers stop (RemovePod) and it is
//    deleted, so capacity recycles.
//
// What must hold (nothing here depends on timing):
//  - at every snapshot of the API server (taken continuously) and at the end:
//    no GPU over capacity in memory, cores or slices, no pod bound without its
//    allocation (invariants.h);
//  - the kubelet always finds a free device on the GPUs a pod was given;
//  - every pod gets through;
//  - at the end, with faults cleared and every part running again: no region
//    directory or record left on any node, no reservation and no pod left in
//    either scheduler, no slot used in any node's view, every device listed
//    healthy by every kubelet, and the schedulers place exactly one whole-GPU
//    pod per GPU and not one more.
// The throughput achieved is printed (and written to TESSERA_CHAOS_REPORT).
//
// Size and seed (environment; defaults are the short run `make test` does):
// TESSERA_CHAOS_PODS (1000), TESSERA_CHAOS_SEED (19), TESSERA_CHAOS_NODES (3),
// TESSERA_CHAOS_WORKERS (12), TESSERA_CHAOS_LIFETIME_MS (100),
// TESSERA_CHAOS_LATE_ANSWERS (0; 1: some answers take 2-3 s, longer than the
// schedulers' 2 s API timeout, so a Binding lands after its client gave up;
// a new leader waits those out, docs/testing.md),
// TESSERA_CHAOS_TAKEOVER_SETTLE_MS (3000: the schedulers'
// leaderElection.takeoverSettleSeconds; 0 with late answers shows the
// overbooking the settle prevents). `make chaos` runs the long version
// (docs/testing.md).
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "base/testing.h"
#include "chaos_cluster.h"
#include "core/allocation_codec.h"
#include "core/inventory_codec.h"
#include "invariants.h"

namespace tessera::chaos {
namespace {

using Json = nlohmann::json;
using ::tessera::testing::Fault;
using ::tessera::testing::WaitFor;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kNamespace = "chaos";

// ---- settings ---------------------------------------------------------------

struct Settings {
  int pods = 1000;
  uint64_t seed = 19;
  int nodes = 3;
  int workers = 12;
  int lifetime_ms = 100;
  bool late_answers = false;
  int takeover_settle_ms = 3000;
};

// One variable as a whole number in [min, max]; unset keeps `*out`.
Status ReadSetting(const char* name, int64_t min, int64_t max, int64_t* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::Ok();
  const std::string value = text;
  int64_t parsed = 0;
  auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (error != std::errc() || end != value.data() + value.size() || parsed < min || parsed > max) {
    return Error{std::string(name) + "=" + value + " is not a whole number from " + std::to_string(min) +
                 " to " + std::to_string(max)};
  }
  *out = parsed;
  return Status::Ok();
}

Result<Settings> SettingsFromEnvironment() {
  Settings s;
  int64_t pods = s.pods, seed = static_cast<int64_t>(s.seed), nodes = s.nodes, workers = s.workers,
          lifetime = s.lifetime_ms;
  TESSERA_RETURN_IF_ERROR(ReadSetting("TESSERA_CHAOS_PODS", 1, 10'000'000, &pods));
  TESSERA_RETURN_IF_ERROR(ReadSetting("TESSERA_CHAOS_SEED", 0, INT64_MAX, &seed));
  TESSERA_RETURN_IF_ERROR(ReadSetting("TESSERA_CHAOS_NODES", 1, 16, &nodes));
  TESSERA_RETURN_IF_ERROR(ReadSetting("TESSERA_CHAOS_WORKERS", 1, 256, &workers));
  TESSERA_RETURN_IF_ERROR(ReadSetting("TESSERA_CHAOS_LIFETIME_MS", 0, 60'000, &lifetime));
  int64_t late = s.late_answers ? 1 : 0;
  TESSERA_RETURN_IF_ERROR(ReadSetting("TESSERA_CHAOS_LATE_ANSWERS", 0, 1, &late));
  s.late_answers = late == 1;
  int64_t settle = s.takeover_settle_ms;
  TESSERA_RETURN_IF_ERROR(ReadSetting("TESSERA_CHAOS_TAKEOVER_SETTLE_MS", 0, 60'000, &settle));
  s.takeover_settle_ms = static_cast<int>(settle);
  s.pods = static_cast<int>(pods);
  s.seed = static_cast<uint64_t>(seed);
  s.nodes = static_cast<int>(nodes);
  s.workers = static_cast<int>(workers);
  s.lifetime_ms = static_cast<int>(lifetime);
  return s;
}

// ---- small helpers ----------------------------------------------------------

Result<std::string> Base64Decode(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) return Error{"not base64"};
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  return out;
}

// The sum of every sample of `metric` in a Prometheus text; -1 when absent.
double MetricSum(const std::string& text, const std::string& metric) {
  double sum = -1;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.rfind(metric, 0) != 0) continue;
    const char next = line.size() > metric.size() ? line[metric.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    const size_t space = line.rfind(' ');
    sum = std::max(sum, 0.0) + std::strtod(line.c_str() + space + 1, nullptr);
  }
  return sum;
}

std::string HttpGet(int port, const std::string& path) {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(1);
  http.set_read_timeout(5);
  auto res = http.Get(path);
  return res && res->status == 200 ? res->body : "";
}

std::string Annotation(const Json& object, const std::string& key) {
  const Json annotations = object.value("/metadata/annotations"_json_pointer, Json::object());
  return annotations.is_object() ? annotations.value(key, "") : "";
}

// ---- what the run counts ----------------------------------------------------

struct Counters {
  std::atomic<int> pods_done{0};
  std::atomic<int> webhook_retries{0};
  std::atomic<int> cycles{0};         // filter -> prioritize -> bind attempts
  std::atomic<int> cycle_errors{0};   // an error at some verb (or no answer)
  std::atomic<int> unschedulable{0};  // filter found no node (the GPUs were full)
  std::atomic<int> bound_by_lost_answer{0};
  std::atomic<int> allocate_retries{0};
  std::atomic<int> scheduler_kills{0};
  std::atomic<int> node_kills{0};
  std::atomic<int> kubelet_restarts{0};
  std::atomic<int> watch_drops{0};
  std::atomic<int> compactions{0};
  std::atomic<int> fault_rules{0};
  std::atomic<int> snapshots{0};
};

// Problems found, kept unique and bounded.
class Findings {
 public:
  void Add(const std::string& what) {
    std::lock_guard lock(mu_);
    ++count_;
    if (seen_.size() < 50) seen_.insert(what);
  }
  int count() const {
    std::lock_guard lock(mu_);
    return count_;
  }
  std::string Text() const {
    std::lock_guard lock(mu_);
    std::string all;
    for (const auto& s : seen_) all += "  " + s + "\n";
    return all;
  }

 private:
  mutable std::mutex mu_;
  int count_ = 0;               // guarded by mu_
  std::set<std::string> seen_;  // guarded by mu_
};

// ---- the run ----------------------------------------------------------------

class ChaosRun {
 public:
  ChaosRun(ChaosCluster& cluster, const Settings& settings)
      : cluster_(cluster), settings_(settings), held_(settings.nodes) {
    for (int i = 0; i < settings.nodes; ++i) node_names_.push_back(cluster.NodeName(i));
  }

  Counters& counters() { return counters_; }
  Findings& violations() { return violations_; }
  Findings& failures() { return failures_; }

  // Drives every pod with `workers` threads while the chaos and checker
  // threads run; returns when every pod is through (or given up).
  void Drive() {
    std::atomic<bool> driving{true};
    std::thread checker([&] {
      while (driving) {
        CheckSnapshot();
        std::this_thread::sleep_for(20ms);
      }
    });
    std::thread chaos([&] { Chaos(driving); });
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < settings_.workers; ++w) {
      workers.emplace_back([&] {
        for (int i = next++; i < settings_.pods; i = next++) {
          if (auto failure = RunPod(i); failure) failures_.Add(*failure);
        }
      });
    }
    for (auto& t : workers) t.join();
    driving = false;
    chaos.join();
    checker.join();
    CheckSnapshot();
  }

  // Everything back: no fault, every process running.
  Status Heal() {
    cluster_.api().ClearFaults();
    cluster_.api().SetGoneAsHttpStatus(false);
    for (int i = 0; i < settings_.nodes; ++i) TESSERA_RETURN_IF_ERROR(cluster_.StartNode(i));
    for (int r = 0; r < ChaosCluster::kSchedulers; ++r) TESSERA_RETURN_IF_ERROR(cluster_.StartScheduler(r));
    return Status::Ok();
  }

  void CheckSnapshot() {
    const auto nodes = cluster_.api().ListObjects("nodes");
    const auto pods = cluster_.api().ListObjects("pods");
    ++counters_.snapshots;
    for (const auto& v : FindViolations(nodes, pods)) violations_.Add(v);
  }

  // kube-apiserver with the webhook: the pod as admitted and stored; nullopt
  // (with a failure recorded) when it never got through.
  std::optional<Json> Admit(const Json& pod, int index) {
    const Json review = {{"apiVersion", "admission.k8s.io/v1"},
                         {"kind", "AdmissionReview"},
                         {"request",
                          {{"uid", "review-" + std::to_string(index)},
                           {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                           {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
                           {"namespace", kNamespace},
                           {"operation", "CREATE"},
                           {"object", pod}}}};
    const std::string name = pod["metadata"]["name"];
    const auto deadline = Clock::now() + 180s;
    for (int attempt = 0; Clock::now() < deadline; ++attempt) {
      httplib::Client http("127.0.0.1",
                           cluster_.SchedulerPort((index + attempt) % ChaosCluster::kSchedulers));
      http.set_connection_timeout(1);
      http.set_read_timeout(10);
      auto res = http.Post("/mutate", review.dump(), "application/json");
      Json answer = res ? Json::parse(res->body, nullptr, false) : Json();
      if (!answer.is_object() || !answer.contains("response")) {
        ++counters_.webhook_retries;
        std::this_thread::sleep_for(50ms);
        continue;
      }
      const Json& response = answer["response"];
      if (!response.value("allowed", false)) {
        failures_.Add("the webhook denied " + name + ": " + response.dump());
        return std::nullopt;
      }
      Json admitted = pod;
      if (response.contains("patch")) {
        auto text = Base64Decode(response.value("patch", ""));
        Json patch = text.ok() ? Json::parse(*text, nullptr, false) : Json();
        if (!patch.is_array()) {
          failures_.Add("the webhook's patch for " + name + " is not a JSONPatch");
          return std::nullopt;
        }
        admitted = pod.patch(patch);
      }
      if (admitted.value("/spec/schedulerName"_json_pointer, "") != "tessera-scheduler") {
        failures_.Add("the webhook did not route " + name + " to tessera-scheduler: " + admitted.dump());
        return std::nullopt;
      }
      auto created = cluster_.api().CreateObject("pods", admitted);
      if (!created.ok()) {
        failures_.Add("cannot create " + name + ": " + created.error().message);
        return std::nullopt;
      }
      return *created;
    }
    failures_.Add("no webhook answered for " + name);
    return std::nullopt;
  }

  // The node the API server shows `name` bound to; "" while unbound.
  std::string BoundNode(const std::string& name) const {
    auto pod = cluster_.api().GetObject("pods", kNamespace, name);
    return pod ? pod->value("/spec/nodeName"_json_pointer, "") : "";
  }

  enum class Cycle { kBound, kUnschedulable, kError };

  // One scheduling cycle of kube-scheduler with the extender, on `port`.
  Cycle ScheduleOnce(int port, const Json& pod) {
    ++counters_.cycles;
    httplib::Client http("127.0.0.1", port);
    http.set_connection_timeout(1);
    http.set_read_timeout(10);
    http.set_tcp_nodelay(true);
    const Json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", node_names_}};
    auto filter = http.Post("/filter", args.dump(), "application/json");
    Json filtered = filter ? Json::parse(filter->body, nullptr, false) : Json();
    if (!filtered.is_object() || filtered.value("Error", "") != "") return Cycle::kError;
    if (!filtered["NodeNames"].is_array() || filtered["NodeNames"].empty()) return Cycle::kUnschedulable;
    const Json pargs = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", filtered["NodeNames"]}};
    auto prioritize = http.Post("/prioritize", pargs.dump(), "application/json");
    Json scores =
        prioritize && prioritize->status == 200 ? Json::parse(prioritize->body, nullptr, false) : Json();
    // Without scores kube-scheduler still binds, on a node of its own choosing.
    std::string best = filtered["NodeNames"][0];
    int best_score = -1;
    if (scores.is_array()) {
      for (const Json& h : scores) {
        if (h.value("Score", -1) > best_score) {
          best_score = h.value("Score", -1);
          best = h.value("Host", best);
        }
      }
    }
    const Json bargs = {{"PodName", pod["metadata"]["name"]},
                        {"PodNamespace", kNamespace},
                        {"PodUID", pod["metadata"].value("uid", "")},
                        {"Node", best}};
    auto bind = http.Post("/bind", bargs.dump(), "application/json");
    Json bound = bind ? Json::parse(bind->body, nullptr, false) : Json();
    if (!bound.is_object() || bound.value("Error", "") != "") return Cycle::kError;
    return Cycle::kBound;
  }

  // kube-scheduler until the pod is bound; the node, or "" (failure recorded).
  std::string Schedule(const Json& pod, std::mt19937_64& rng) {
    const std::string name = pod["metadata"]["name"];
    const auto deadline = Clock::now() + 180s;
    for (int attempt = 0; Clock::now() < deadline; ++attempt) {
      // kube-scheduler's informer: a Binding whose answer was lost landed.
      if (std::string node = BoundNode(name); !node.empty()) {
        if (attempt > 0) ++counters_.bound_by_lost_answer;
        return node;
      }
      int replica = cluster_.LeaseHolder();
      if (replica < 0) replica = attempt % ChaosCluster::kSchedulers;
      switch (ScheduleOnce(cluster_.SchedulerPort(replica), pod)) {
        case Cycle::kBound:
          if (std::string node = BoundNode(name); !node.empty()) return node;
          failures_.Add("bind of " + name + " succeeded but the API server shows it unbound");
          return "";
        case Cycle::kUnschedulable:
          ++counters_.unschedulable;
          break;
        case Cycle::kError:
          ++counters_.cycle_errors;
          break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(10, 60)(rng)));
    }
    failures_.Add("pod " + name + " was never bound");
    return "";
  }

  int NodeIndex(const std::string& node) const {
    for (size_t i = 0; i < node_names_.size(); ++i) {
      if (node_names_[i] == node) return static_cast<int>(i);
    }
    return -1;
  }

  // The kubelet of `node` starts the pod's container: false (recorded) when
  // it cannot.
  bool StartContainer(const std::string& name, const std::string& node, std::vector<std::string>* ids) {
    const int n = NodeIndex(node);
    if (n < 0) {
      violations_.Add("pod " + name + " is bound to unknown node " + node);
      return false;
    }
    // The Downward API resolves TESSERA_ALLOCATION from the pod as the kubelet sees it.
    auto pod = cluster_.api().GetObject("pods", kNamespace, name);
    const std::string text = pod ? Annotation(*pod, std::string(core::kAllocationAnnotation)) : "";
    auto allocation = core::DecodeAllocation(text);
    if (text.empty() || !allocation.ok()) {
      violations_.Add("the kubelet starts " + name + " on " + node + " without a readable allocation");
      return false;
    }
    {
      std::lock_guard lock(held_[n].mu);
      for (const auto& container : allocation->containers) {
        for (const auto& slice : container.devices) {
          std::string id;
          for (int k = 0; k < cluster_.options().split_count && id.empty(); ++k) {
            const std::string candidate = slice.uuid + "::" + std::to_string(k);
            if (!held_[n].ids.count(candidate)) id = candidate;
          }
          if (id.empty()) {
            violations_.Add("the kubelet of " + node + " has no free device on " + slice.uuid + " for " +
                            name);
            for (const auto& taken : *ids) held_[n].ids.erase(taken);
            ids->clear();
            return false;
          }
          held_[n].ids.insert(id);
          ids->push_back(id);
        }
      }
    }
    const auto deadline = Clock::now() + 180s;
    grpc::Status status;
    while (Clock::now() < deadline) {
      v1beta1::ContainerAllocateResponse answer;
      status =
          cluster_.kubelet(n).AdmitContainer(kNamespace, name, "app", ChaosCluster::kResource, *ids, &answer);
      if (status.ok()) {
        std::string region;
        for (const auto& mount : answer.mounts()) {
          if (mount.container_path() == "/tmp/tessera") region = mount.host_path();
        }
        if (region.empty() || !std::filesystem::is_directory(region)) {
          violations_.Add("Allocate on " + node + " gave " + name + " no region directory ('" + region +
                          "')");
        }
        return true;
      }
      ++counters_.allocate_retries;
      std::this_thread::sleep_for(50ms);
    }
    failures_.Add("the kubelet of " + node + " never admitted " + name + ": " + status.error_message());
    return true;  // its devices are released with the pod
  }

  void Finish(const std::string& name, const std::string& node, const std::vector<std::string>& ids) {
    const int n = NodeIndex(node);
    if (n >= 0) {
      cluster_.kubelet(n).RemovePod(kNamespace, name);
      std::lock_guard lock(held_[n].mu);
      for (const auto& id : ids) held_[n].ids.erase(id);
    }
    if (auto deleted = cluster_.api().DeleteObject("pods", kNamespace, name); !deleted.ok()) {
      failures_.Add("cannot delete " + name + ": " + deleted.error().message);
    }
  }

  // One pod from creation to deletion; a failure, or nullopt.
  std::optional<std::string> RunPod(int index) {
    std::mt19937_64 rng(settings_.seed * 1'000'003 + static_cast<uint64_t>(index));
    const std::string name = "pod-" + std::to_string(index);
    // Mostly one vGPU, some two; memory 1-30 GiB; cores 0-50 %, a few whole GPUs.
    const int gpus = std::uniform_int_distribution<int>(0, 9)(rng) == 0 ? 2 : 1;
    const int memory = std::uniform_int_distribution<int>(1, 30)(rng) * 1024;
    const int pick = std::uniform_int_distribution<int>(0, 39)(rng);
    const int cores = pick == 0 ? 100 : std::array<int, 6>{0, 10, 20, 25, 30, 50}[pick % 6];
    const Json limits = {{"nvidia.com/gpu", std::to_string(gpus)},
                         {"nvidia.com/gpumem", std::to_string(memory)},
                         {"nvidia.com/gpucores", std::to_string(cores)}};
    const Json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", kNamespace}}},
        {"spec",
         {{"containers", {{{"name", "app"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}}}}}}};
    auto created = Admit(pod, index);
    if (!created) return std::nullopt;
    const std::string node = Schedule(*created, rng);
    std::vector<std::string> ids;
    if (!node.empty() && StartContainer(name, node, &ids)) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::uniform_int_distribution<int>(0, settings_.lifetime_ms)(rng)));
    }
    Finish(name, node, ids);
    ++counters_.pods_done;
    return std::nullopt;
  }

  // The chaos: one action every 100-400 ms, drawn from a generator seeded
  // with the run's seed, until `driving` turns false. Killed processes come
  // back after a drawn delay; at most one replica of each kind is down at a
  // time, so the cluster limps rather than stops.
  void Chaos(const std::atomic<bool>& driving) {
    std::mt19937_64 rng(settings_.seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::optional<std::pair<int, Clock::time_point>> scheduler_down, node_down;
    const std::vector<std::string> methods = {"", "GET", "POST", "PATCH", "PUT"};
    const std::vector<std::string> paths = {"", "/pods", "/binding", "/nodes", "/leases", "/events"};
    while (driving) {
      std::this_thread::sleep_for(std::chrono::milliseconds(uniform(100, 400)));
      if (scheduler_down && Clock::now() >= scheduler_down->second) {
        if (auto s = cluster_.StartScheduler(scheduler_down->first); !s.ok())
          failures_.Add(s.error().message);
        scheduler_down.reset();
      }
      if (node_down && Clock::now() >= node_down->second) {
        if (auto s = cluster_.StartNode(node_down->first); !s.ok()) failures_.Add(s.error().message);
        node_down.reset();
      }
      const int action = uniform(0, 15);
      if (action <= 3) {  // 5xx on a share of some requests
        Fault f;
        f.kind = Fault::Kind::kStatus;
        f.method = methods[uniform(0, static_cast<int>(methods.size()) - 1)];
        f.path_contains = paths[uniform(0, static_cast<int>(paths.size()) - 1)];
        f.applies_to = Fault::Applies::kNonWatch;
        f.status = std::array<int, 4>{500, 502, 503, 504}[uniform(0, 3)];
        f.times = uniform(5, 40);
        f.probability = uniform(2, 10) / 10.0;
        cluster_.api().AddFault(f);
        ++counters_.fault_rules;
      } else if (action <= 5) {  // slow answers, some beyond the schedulers' API timeout
        Fault f;
        f.kind = Fault::Kind::kDelay;
        f.path_contains = paths[uniform(0, static_cast<int>(paths.size()) - 1)];
        const bool late = uniform(0, 3) == 0;  // drawn either way: the same seed, the same sequence
        const int late_ms = uniform(2000, 3000), short_ms = uniform(50, 800);
        f.delay = std::chrono::milliseconds(late && settings_.late_answers ? late_ms : short_ms);
        f.times = uniform(3, 20);
        f.probability = 0.3;
        cluster_.api().AddFault(f);
        ++counters_.fault_rules;
      } else if (action == 6) {  // a body that is not JSON (a watch: one garbage line, then the end)
        Fault f;
        f.kind = Fault::Kind::kGarbage;
        f.method = "GET";
        f.path_contains = paths[uniform(1, 4)];
        f.times = uniform(1, 3);
        cluster_.api().AddFault(f);
        ++counters_.fault_rules;
      } else if (action == 7) {
        cluster_.api().DropWatches();
        ++counters_.watch_drops;
      } else if (action == 8) {  // compaction: every watch resumes from a forgotten version, 410 Expired
        cluster_.api().SetGoneAsHttpStatus(uniform(0, 2) == 0);
        cluster_.api().CompactHistory();
        cluster_.api().DropWatches();
        ++counters_.compactions;
      } else if (action <= 10) {
        if (!scheduler_down) {
          const int holder = cluster_.LeaseHolder();
          const int victim =
              holder >= 0 && uniform(0, 2) > 0 ? holder : uniform(0, ChaosCluster::kSchedulers - 1);
          cluster_.KillScheduler(victim);
          ++counters_.scheduler_kills;
          scheduler_down = {victim, Clock::now() + std::chrono::milliseconds(uniform(200, 2500))};
        }
      } else if (action <= 12) {
        if (!node_down) {
          const int victim = uniform(0, settings_.nodes - 1);
          cluster_.KillNode(victim);
          ++counters_.node_kills;
          node_down = {victim, Clock::now() + std::chrono::milliseconds(uniform(100, 2000))};
        }
      } else if (action == 13) {
        if (cluster_.RestartKubelet(uniform(0, settings_.nodes - 1))) {
          ++counters_.kubelet_restarts;
        } else {
          failures_.Add("a kubelet stand-in did not come back");
        }
      } else if (action == 14) {
        cluster_.api().ClearFaults();  // a healthy spell
      }
      // 15: nothing happens.
    }
  }

 private:
  struct HeldDevices {
    std::mutex mu;
    std::set<std::string> ids;  // guarded by mu
  };

  ChaosCluster& cluster_;
  const Settings settings_;
  std::vector<std::string> node_names_;
  std::vector<HeldDevices> held_;  // per node: the device IDs the kubelet gave out
  Counters counters_;
  Findings violations_;
  Findings failures_;
};

// ---- the tests --------------------------------------------------------------

// Sets variables for one test and puts the previous values back (a long run
// gives its own TESSERA_CHAOS_* to the same binary).
class ScopedEnvironment {
 public:
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  void Set(const std::string& name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      ::setenv(name.c_str(), value, 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(ChaosSettingsTest, AMalformedOrOutOfRangeSettingIsRefusedByName) {
  ScopedEnvironment env;
  for (const char* name : {"TESSERA_CHAOS_SEED", "TESSERA_CHAOS_WORKERS", "TESSERA_CHAOS_LIFETIME_MS",
                           "TESSERA_CHAOS_LATE_ANSWERS"}) {
    env.Set(name, nullptr);
  }
  env.Set("TESSERA_CHAOS_PODS", "many");
  auto settings = SettingsFromEnvironment();
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.error().message, "TESSERA_CHAOS_PODS=many is not a whole number from 1 to 10000000");
  env.Set("TESSERA_CHAOS_PODS", "50");
  env.Set("TESSERA_CHAOS_NODES", "0");
  settings = SettingsFromEnvironment();
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.error().message, "TESSERA_CHAOS_NODES=0 is not a whole number from 1 to 16");
  env.Set("TESSERA_CHAOS_NODES", "2x");
  settings = SettingsFromEnvironment();
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.error().message, "TESSERA_CHAOS_NODES=2x is not a whole number from 1 to 16");
  env.Set("TESSERA_CHAOS_NODES", nullptr);
  settings = SettingsFromEnvironment();
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->pods, 50);
  EXPECT_EQ(settings->nodes, 3) << "unset: the default";
}

TEST(ChaosTest, PodsGetThroughFaultsAndKillsWithoutOvercommitOrLeaks) {
  auto settings = SettingsFromEnvironment();
  ASSERT_TRUE(settings.ok()) << settings.error().message;
  ChaosCluster cluster({.nodes = settings->nodes,
                        .fault_seed = settings->seed,
                        .takeover_settle_ms = settings->takeover_settle_ms});
  auto started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started.error().message;
  ASSERT_TRUE(WaitFor([&] {
    const int leader = cluster.LeaseHolder();
    return leader >= 0 && HttpGet(cluster.SchedulerPort(leader), "/readyz") == "ok";
  })) << cluster.Logs();

  ChaosRun run(cluster, *settings);
  const auto begin = Clock::now();
  run.Drive();
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  const uint64_t faults = cluster.api().FaultsInjected();
  Counters& c = run.counters();

  // Every part back and healthy before the leak checks.
  auto healed = run.Heal();
  ASSERT_TRUE(healed.ok()) << healed.error().message << "\n" << cluster.Logs();
  EXPECT_EQ(run.violations().count(), 0) << "violations seen during the run:\n" << run.violations().Text();
  EXPECT_EQ(run.failures().count(), 0) << "pods that did not get through:\n" << run.failures().Text();
  EXPECT_EQ(c.pods_done.load(), settings->pods);

  // No leaked region: every region directory and record is removed once its
  // pod's containers are gone (region_grace_seconds is 1).
  for (int i = 0; i < settings->nodes; ++i) {
    std::vector<std::string> left;
    const bool clean = WaitFor(
        [&] {
          left.clear();
          for (const auto& entry : std::filesystem::directory_iterator(cluster.RegionDir(i))) {
            left.push_back(entry.path().filename().string());
          }
          return left.empty();
        },
        30s);
    std::string names;
    for (const auto& n : left) names += " " + n;
    EXPECT_TRUE(clean) << cluster.NodeName(i) << " kept region entries:" << names;
  }
  // No leaked reservation or pod in either scheduler's view (a reservation
  // whose Binding's fate was unknown expires after reservationTimeoutSeconds).
  for (int r = 0; r < ChaosCluster::kSchedulers; ++r) {
    std::string metrics;
    const bool clean = WaitFor(
        [&] {
          metrics = HttpGet(cluster.SchedulerPort(r), "/metrics");
          return MetricSum(metrics, "tessera_scheduler_ready") == 1 &&
                 MetricSum(metrics, "tessera_scheduler_reservations") == 0 &&
                 MetricSum(metrics, "tessera_scheduler_pods") == 0;
        },
        30s);
    EXPECT_TRUE(clean) << cluster.SchedulerIdentity(r) << " still holds something:\n" << metrics;
    EXPECT_EQ(MetricSum(metrics, "tessera_scheduler_inconsistent_annotations_total"), 0)
        << cluster.SchedulerIdentity(r);
  }
  // No leaked device: each node's own view holds no slot, its kubelet lists
  // every device healthy, and neither saw an overcommitted GPU.
  const size_t devices = static_cast<size_t>(cluster.options().gpus_per_node * cluster.options().split_count);
  for (int i = 0; i < settings->nodes; ++i) {
    std::string metrics;
    const bool clean = WaitFor(
        [&] {
          metrics = HttpGet(cluster.NodeMetricsPort(i), "/metrics");
          return MetricSum(metrics, "tessera_gpu_slots_used") == 0;
        },
        30s);
    EXPECT_TRUE(clean) << cluster.NodeName(i) << "'s view still uses slots:\n" << metrics;
    EXPECT_LE(MetricSum(metrics, "tessera_node_gpu_overcommits_total"), 0) << cluster.NodeName(i);
    EXPECT_TRUE(cluster.kubelet(i).WaitForDevices(
        ChaosCluster::kResource,
        [&](const auto& d) { return tessera::testing::CountHealthy(d) == devices && d.size() == devices; },
        30s))
        << cluster.NodeName(i);
  }

  // The capacity is whole again: one whole-GPU pod per GPU binds, one more does not.
  const int whole_gpus = settings->nodes * cluster.options().gpus_per_node;
  int bound = 0;
  std::string refusal;
  for (int k = 0; k <= whole_gpus; ++k) {
    const std::string name = "whole-" + std::to_string(k);
    const Json limits = {
        {"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "100"}, {"nvidia.com/gpucores", "100"}};
    const Json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", kNamespace}}},
        {"spec",
         {{"containers", {{{"name", "app"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}}}}}}};
    auto created = run.Admit(pod, settings->pods + k);
    ASSERT_TRUE(created.has_value()) << run.failures().Text();
    ChaosRun::Cycle outcome = ChaosRun::Cycle::kError;
    WaitFor([&] {
      const int leader = cluster.LeaseHolder();
      outcome = run.ScheduleOnce(cluster.SchedulerPort(leader < 0 ? 0 : leader), *created);
      return outcome != ChaosRun::Cycle::kError;
    });
    if (outcome == ChaosRun::Cycle::kBound) ++bound;
  }
  EXPECT_EQ(bound, whole_gpus) << "GPUs that were free again after the run";
  run.CheckSnapshot();
  EXPECT_EQ(run.violations().count(), 0) << run.violations().Text();

  const double throughput = c.pods_done / seconds;
  char line[1024];
  std::snprintf(
      line, sizeof(line),
      "chaos: seed %llu%s, %d pods on %d nodes x %d GPUs (%d workers) in %.1f s = %.1f pods/s; "
      "%llu requests answered by a fault (%d fault rules), %d watch drops, %d compactions (410), "
      "%d scheduler kills, %d tessera-node kills, %d kubelet restarts; %d scheduling cycles, "
      "%d with an error, %d unschedulable (full), %d bound by a lost answer, %d Allocate retries, "
      "%d webhook retries; %d snapshots checked, %d violations",
      static_cast<unsigned long long>(settings->seed), settings->late_answers ? " (late answers)" : "",
      c.pods_done.load(), settings->nodes, cluster.options().gpus_per_node, settings->workers, seconds,
      throughput, static_cast<unsigned long long>(faults), c.fault_rules.load(), c.watch_drops.load(),
      c.compactions.load(), c.scheduler_kills.load(), c.node_kills.load(), c.kubelet_restarts.load(),
      c.cycles.load(), c.cycle_errors.load(), c.unschedulable.load(), c.bound_by_lost_answer.load(),
      c.allocate_retries.load(), c.webhook_retries.load(), c.snapshots.load(), run.violations().count());
  std::printf("%s\n", line);
  if (const char* report = std::getenv("TESSERA_CHAOS_REPORT"); report != nullptr && *report != '\0') {
    std::ofstream(report, std::ios::app) << line << "\n";
  }
  if (HasFailure()) std::cerr << cluster.Logs() << std::endl;
}

}  // namespace
}  // namespace tessera::chaos
