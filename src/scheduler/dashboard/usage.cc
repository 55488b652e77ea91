#include "scheduler/dashboard/usage.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/clock.h"

namespace tessera::scheduler::dashboard {
namespace {

using Json = nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;

// The metrics a round reads.
constexpr const char* kGpuMemoryUsed = "tessera_gpu_memory_used_bytes";
constexpr const char* kGpuUtilization = "tessera_gpu_utilization_percent";
constexpr const char* kContainerMemoryUsed = "tessera_container_memory_used_bytes";
constexpr const char* kContainerMemoryLimit = "tessera_container_memory_limit_bytes";
constexpr const char* kContainerShare = "tessera_container_compute_share_percent";

void Append(std::vector<UsagePoint>& history, const std::vector<UsagePoint>* previous, UsagePoint point,
            size_t keep) {
  if (previous) history = *previous;
  history.push_back(point);
  if (history.size() > keep) history.erase(history.begin(), history.end() - static_cast<ptrdiff_t>(keep));
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

}  // namespace

Result<std::string> HttpGet(const std::string& url, std::chrono::milliseconds timeout) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return Error{"'" + url + "' is not an http:// or https:// URL"};
  const size_t path_start = url.find('/', scheme_end + 3);
  const std::string origin = path_start == std::string::npos ? url : url.substr(0, path_start);
  const std::string path = path_start == std::string::npos ? "/" : url.substr(path_start);
  httplib::Client client(origin);
  if (!client.is_valid()) return Error{"'" + url + "' is not an http:// or https:// URL"};
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(timeout - seconds);
  client.set_connection_timeout(seconds.count(), static_cast<time_t>(micros.count()));
  client.set_read_timeout(seconds.count(), static_cast<time_t>(micros.count()));
  client.set_write_timeout(seconds.count(), static_cast<time_t>(micros.count()));
  auto res = client.Get(path.c_str());
  if (!res) return Error{"GET " + url + ": " + httplib::to_string(res.error())};
  if (res->status != 200) {
    std::string body = res->body.substr(0, 200);
    return Error{"GET " + url + ": HTTP " + std::to_string(res->status) + (body.empty() ? "" : ": " + body)};
  }
  return std::move(res->body);
}

UsageCollector::UsageCollector(UsageOptions options, std::function<std::vector<UsageTarget>()> targets,
                               Fetch fetch)
    : options_(std::move(options)),
      targets_(std::move(targets)),
      fetch_(fetch ? std::move(fetch) : Fetch(HttpGet)),
      thread_(options_.interval, [this] { RunRound(); }) {
  auto empty = std::make_shared<UsageSnapshot>();
  empty->source = options_.prometheus_url.empty() ? "nodes" : "prometheus";
  empty->prometheus_url = options_.prometheus_url;
  published_ = std::move(empty);
}

UsageCollector::~UsageCollector() {
  Stop();
}

void UsageCollector::Start() {
  thread_.Start();
}

void UsageCollector::Stop() {
  thread_.Stop();
}

std::shared_ptr<const UsageSnapshot> UsageCollector::Snapshot() const {
  std::lock_guard lock(mu_);
  return published_;
}

std::string UsageCollector::NodeUrl(const UsageTarget& target) const {
  if (target.address.empty()) return "";
  std::string address = target.address;
  if (address.find(':') != std::string::npos && address.front() != '[')
    address = "[" + address + "]";  // IPv6
  return Replace(Replace(options_.node_url_template, "{address}", address), "{node}", target.node);
}

void UsageCollector::RunRound() {
  if (options_.prometheus_url.empty()) {
    NodesRound();
  } else {
    PrometheusRound();
  }
  Publish();
}

std::vector<std::shared_ptr<const GpuUsageRecord>> UsageCollector::Records(
    const std::vector<MetricSample>& samples, const std::string& node, int64_t now_ms) const {
  std::map<std::string, GpuUsageRecord> by_uuid;
  std::map<std::pair<std::string, std::string>, SliceUsage> slices;  // (uuid, ns/pod/container)
  for (const MetricSample& s : samples) {
    const std::string uuid(s.Label("gpu_uuid"));
    if (uuid.empty()) continue;
    const bool gpu_metric = s.name == kGpuMemoryUsed || s.name == kGpuUtilization;
    const bool slice_metric =
        s.name == kContainerMemoryUsed || s.name == kContainerMemoryLimit || s.name == kContainerShare;
    if (!gpu_metric && !slice_metric) continue;
    GpuUsageRecord& g = by_uuid[uuid];
    g.uuid = uuid;
    g.node = node;
    g.at_ms = now_ms;
    if (s.name == kGpuMemoryUsed) g.memory_used_mib = s.value / kMiB;
    if (s.name == kGpuUtilization) g.utilization = s.value;
    if (!slice_metric) continue;
    const std::string ns(s.Label("namespace")), pod(s.Label("pod")), container(s.Label("container"));
    SliceUsage& slice = slices[{uuid, ns + "/" + pod + "/" + container}];
    slice.ns = ns;
    slice.pod = pod;
    slice.container = container;
    if (s.name == kContainerMemoryUsed) slice.memory_used_mib += s.value / kMiB;
    if (s.name == kContainerMemoryLimit)
      slice.memory_limit_mib = std::max(slice.memory_limit_mib, s.value / kMiB);
    if (s.name == kContainerShare) slice.compute_share += s.value;
  }
  for (auto& [key, slice] : slices) by_uuid[key.first].slices.push_back(std::move(slice));
  std::vector<std::shared_ptr<const GpuUsageRecord>> out;
  std::lock_guard lock(mu_);
  for (auto& [uuid, g] : by_uuid) {
    const auto old = gpus_.find(uuid);
    const GpuUsageRecord* previous = old == gpus_.end() ? nullptr : old->second.get();
    Append(g.history, previous ? &previous->history : nullptr, {now_ms, static_cast<float>(g.utilization)},
           options_.history);
    for (SliceUsage& slice : g.slices) {
      const std::vector<UsagePoint>* before = nullptr;
      if (previous) {
        for (const SliceUsage& p : previous->slices) {
          if (p.ns == slice.ns && p.pod == slice.pod && p.container == slice.container) before = &p.history;
        }
      }
      Append(slice.history, before, {now_ms, static_cast<float>(slice.compute_share)}, options_.history);
    }
    out.push_back(std::make_shared<const GpuUsageRecord>(std::move(g)));
  }
  return out;
}

void UsageCollector::NodesRound() {
  const std::vector<UsageTarget> targets = targets_();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < targets.size(); i = next++) {
      if (thread_.stopping()) return;
      const UsageTarget& t = targets[i];
      const std::string url = NodeUrl(t);
      Result<std::vector<MetricSample>> samples =
          Error{"the node publishes no address to reach its metrics at"};
      if (!url.empty()) {
        auto body = fetch_(url, options_.timeout);
        if (!body.ok()) {
          samples = body.error();
        } else if (auto parsed = ParseMetricsText(*body); parsed.ok()) {
          samples = std::move(parsed);
        } else {
          samples = Error{"GET " + url + ": not Prometheus text: " + parsed.error().message};
        }
      }
      const int64_t now = RealClock::Get()->WallUnixMillis();
      std::vector<std::shared_ptr<const GpuUsageRecord>> records;
      if (samples.ok()) records = Records(*samples, t.node, now);
      std::lock_guard lock(mu_);
      ScrapeStatus& status = nodes_[t.node];
      status.at_ms = now;
      status.error = samples.ok() ? "" : samples.error().message;
      if (samples.ok()) status.ok_at_ms = now;
      // The node's earlier records go; a failed scrape leaves it without usage.
      std::vector<std::string>& uuids = uuids_by_node_[t.node];
      for (const std::string& uuid : uuids) gpus_.erase(uuid);
      uuids.clear();
      for (auto& r : records) {
        uuids.push_back(r->uuid);
        gpus_[r->uuid] = std::move(r);
      }
    }
  };
  const size_t workers = std::min<size_t>(std::max(1, options_.concurrency), targets.size());
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  // Nodes that are gone.
  std::unordered_map<std::string, bool> known;
  for (const UsageTarget& t : targets) known[t.node] = true;
  std::lock_guard lock(mu_);
  for (auto it = nodes_.begin(); it != nodes_.end();)
    it = known.count(it->first) ? std::next(it) : nodes_.erase(it);
  for (auto it = uuids_by_node_.begin(); it != uuids_by_node_.end();) {
    if (known.count(it->first)) {
      ++it;
      continue;
    }
    for (const std::string& uuid : it->second) gpus_.erase(uuid);
    it = uuids_by_node_.erase(it);
  }
}

void UsageCollector::PrometheusRound() {
  std::vector<MetricSample> samples;
  std::string error;
  std::string base = options_.prometheus_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  for (const char* metric :
       {kGpuMemoryUsed, kGpuUtilization, kContainerMemoryUsed, kContainerMemoryLimit, kContainerShare}) {
    const std::string url = base + "/api/v1/query?query=" + metric;
    auto body = fetch_(url, options_.timeout);
    if (!body.ok()) {
      error = body.error().message;
      break;
    }
    Json answer = Json::parse(*body, nullptr, false);
    if (answer.is_discarded() || !answer.is_object() || answer.value("status", "") != "success" ||
        !answer.contains("data") || !answer["data"].is_object() || !answer["data"].contains("result") ||
        !answer["data"]["result"].is_array()) {
      error = "GET " + url + ": not a Prometheus query answer" +
              (answer.is_object() && answer.contains("error") ? ": " + answer["error"].dump() : "");
      break;
    }
    for (const Json& series : answer["data"]["result"]) {
      if (!series.is_object() || !series.contains("metric") || !series.contains("value") ||
          !series["value"].is_array() || series["value"].size() != 2 || !series["value"][1].is_string())
        continue;
      MetricSample s;
      s.name = metric;
      for (const auto& [k, v] : series["metric"].items()) {
        if (v.is_string()) s.labels.emplace_back(k, v.get<std::string>());
      }
      try {
        s.value = std::stod(series["value"][1].get<std::string>());
      } catch (...) {
        continue;  // "NaN" parses; anything else is not a sample
      }
      samples.push_back(std::move(s));
    }
  }
  const int64_t now = RealClock::Get()->WallUnixMillis();
  std::vector<std::shared_ptr<const GpuUsageRecord>> records;
  if (error.empty()) records = Records(samples, "", now);
  std::lock_guard lock(mu_);
  error_ = error;
  gpus_.clear();
  uuids_by_node_.clear();
  for (auto& r : records) gpus_[r->uuid] = std::move(r);
}

void UsageCollector::Publish() {
  std::lock_guard lock(mu_);
  auto s = std::make_shared<UsageSnapshot>();
  s->source = options_.prometheus_url.empty() ? "nodes" : "prometheus";
  s->prometheus_url = options_.prometheus_url;
  s->rounds = ++rounds_;
  s->updated_ms = updated_ms_ = RealClock::Get()->WallUnixMillis();
  s->error = error_;
  s->gpus = gpus_;
  s->nodes = nodes_;
  published_ = std::move(s);
}

}  // namespace tessera::scheduler::dashboard
