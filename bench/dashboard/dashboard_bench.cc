// dashboard_bench: the dashboard over a cluster of Kubernetes' size.
//
//   dashboard_bench [--nodes 5000] [--gpus 8] [--pods 40000] [--requests 200]
//
// Builds a ClusterState of `nodes` × `gpus` GPUs holding `pods` bound GPU pods
// (a tenth of them in each of ten namespaces, slices of 1..8 GiB and 10..50 %
// compute), plus 1 % pending pods with a waiting reason; feeds the same
// objects to a Dashboard whose usage comes from an in-process fetch that
// renders each node's tessera-node metrics (so a usage round measures parsing
// and merging, not a network). Then measures, on this machine:
//  - the view build: cold, warm (nothing changed), after 100 pods changed;
//  - one usage round over every node;
//  - each JSON answer over real HTTP on 127.0.0.1 (median and p99 of
//    `requests` GETs, one client, keep-alive) and its size;
//  - the page weight: the embedded assets plus the overview answer.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "base/prometheus_text.h"
#include "core/allocation_codec.h"
#include "scheduler/dashboard/assets.h"
#include "scheduler/dashboard/dashboard.h"
#include "scheduler/testing.h"

namespace ts = tessera::scheduler;
namespace td = tessera::scheduler::dashboard;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// CPU time of the calling thread, ms: what a step costs whatever else the
// machine runs meanwhile (the wall time is printed beside it).
double ThreadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) / 1e6;
}

struct Placed {
  std::string ns, name;
  int node, gpu;
  int64_t memory;
  int cores;
};

Json PodObject(const Placed& p, bool bound) {
  Json pod = ts::testing::GpuPod(p.ns, p.name, 1, p.memory, p.cores);
  pod["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z";
  if (!bound) {
    pod["status"] = {{"phase", "Pending"},
                     {"conditions",
                      {{{"type", "PodScheduled"},
                        {"status", "False"},
                        {"reason", "Unschedulable"},
                        {"message", "0/5000 nodes are available: 5000 Insufficient nvidia.com/gpumem."}}}}};
    return pod;
  }
  tessera::core::PodAllocation a;
  a.node = "node-" + std::to_string(p.node);
  a.containers.push_back({"app", {{ts::testing::GpuUuid(p.node, p.gpu), p.memory, p.cores}}, false});
  pod["metadata"]["annotations"][std::string(tessera::core::kAllocationAnnotation)] =
      *tessera::core::EncodeAllocation(a);
  pod["spec"]["nodeName"] = a.node;
  pod["status"] = {{"phase", "Running"}};
  return pod;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 5000, gpus = 8, pods = 40000, requests = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--nodes")
      nodes = v;
    else if (flag == "--gpus")
      gpus = v;
    else if (flag == "--pods")
      pods = v;
    else if (flag == "--requests")
      requests = v;
    else {
      std::fprintf(stderr, "usage: %s [--nodes N] [--gpus N] [--pods N] [--requests N]\n", argv[0]);
      return 2;
    }
  }
  std::printf("cluster: %d nodes x %d GPUs, %d bound GPU pods, %d pending\n", nodes, gpus, pods, pods / 100);

  // The cluster.
  ts::ClusterState state;
  std::vector<Json> node_objects;
  for (int n = 0; n < nodes; ++n) {
    Json node = ts::testing::NodeWithGpus("node-" + std::to_string(n), n, gpus, 81920);
    node["status"] = {{"addresses", {{{"type", "InternalIP"}, {"address", "10.0.0.1"}}}}};
    state.UpsertNode(node);
    node_objects.push_back(std::move(node));
  }
  std::vector<Placed> placed;
  std::vector<std::vector<size_t>> by_node(static_cast<size_t>(nodes));
  for (int i = 0; i < pods; ++i) {
    Placed p{"team-" + std::to_string(i % 10),
             "pod-" + std::to_string(i),
             (i / gpus) % nodes,
             i % gpus,
             1024 * (1 + i % 8),
             10 + 10 * (i % 5)};
    by_node[static_cast<size_t>(p.node)].push_back(placed.size());
    placed.push_back(std::move(p));
  }
  std::vector<Json> pod_objects;
  for (const Placed& p : placed) pod_objects.push_back(PodObject(p, true));
  for (int i = 0; i < pods / 100; ++i) {
    pod_objects.push_back(PodObject(
        {"team-" + std::to_string(i % 10), "waiting-" + std::to_string(i), 0, 0, 100000, 10}, false));
  }
  for (const Json& p : pod_objects) state.UpsertPod(p);
  const auto stats = state.Stats();
  std::printf("cluster state: %zu nodes, %zu GPUs, %zu pods accounted\n", stats.nodes, stats.gpus,
              stats.pods);

  // tessera-node's /metrics of each node, rendered on demand.
  auto fetch = [&](const std::string& url, std::chrono::milliseconds) -> tessera::Result<std::string> {
    const int n = std::atoi(url.c_str() + url.rfind('/') + 1);
    tessera::PrometheusText t;
    t.Describe("tessera_gpu_memory_used_bytes", tessera::MetricType::kGauge, "used");
    t.Describe("tessera_gpu_utilization_percent", tessera::MetricType::kGauge, "util");
    t.Describe("tessera_container_memory_used_bytes", tessera::MetricType::kGauge, "used");
    t.Describe("tessera_container_memory_limit_bytes", tessera::MetricType::kGauge, "limit");
    t.Describe("tessera_container_compute_share_percent", tessera::MetricType::kGauge, "share");
    for (int g = 0; g < gpus; ++g) {
      t.Add("tessera_gpu_memory_used_bytes", {{"gpu_uuid", ts::testing::GpuUuid(n, g)}}, 1e9 * (1 + g));
      t.Add("tessera_gpu_utilization_percent", {{"gpu_uuid", ts::testing::GpuUuid(n, g)}}, 10.0 * g);
    }
    for (size_t k : by_node[static_cast<size_t>(n)]) {
      const Placed& p = placed[k];
      tessera::MetricLabels l = {{"namespace", p.ns},
                                 {"pod", p.name},
                                 {"container", "app"},
                                 {"gpu_uuid", ts::testing::GpuUuid(n, p.gpu)},
                                 {"region", p.name}};
      t.Add("tessera_container_memory_used_bytes", l, double(p.memory) * 1048576 / 2);
      t.Add("tessera_container_memory_limit_bytes", l, double(p.memory) * 1048576);
      t.Add("tessera_container_compute_share_percent", l, p.cores / 2.0);
    }
    return t.Render();
  };

  td::DashboardOptions o;
  o.port = 0;
  o.bind_address = "127.0.0.1";
  o.usage.node_url_template = "http://{address}/metrics/{node}";
  o.usage.interval = std::chrono::hours(1);  // rounds only when asked
  o.refresh = std::chrono::hours(1);         // views only when asked
  o.api_probe_interval = std::chrono::hours(1);
  td::DashboardDeps d;
  d.state = &state;
  d.fetch = [&](const std::string& url, std::chrono::milliseconds t) {
    return fetch(url.substr(0, url.rfind('/')) + "/" + url.substr(url.rfind('-') + 1), t);
  };
  td::Dashboard dash(o, d);
  for (const Json& n : node_objects) dash.UpsertNode(n);
  for (const Json& p : pod_objects) dash.UpsertPod(p);

  struct Step {
    double wall = 0, cpu = 0;
  };
  auto measure = [](const auto& f) {
    const double c0 = ThreadCpuMs();
    const auto t0 = Clock::now();
    f();
    return Step{Ms(Clock::now() - t0), ThreadCpuMs() - c0};
  };
  if (auto s = dash.Start(); !s) {  // the first view (no usage yet)
    std::fprintf(stderr, "%s\n", s.error().message.c_str());
    return 1;
  }
  // A usage round on worker threads (wall time only: their CPU is not this thread's).
  const auto r0 = Clock::now();
  dash.RefreshNow(/*with_usage=*/true);
  const double round_and_view = Ms(Clock::now() - r0);
  const Step cold = measure([&] { dash.RefreshNow(false); });  // the first view that joins usage
  const Step warm = measure([&] { dash.RefreshNow(false); });  // nothing changed
  // 100 pods change (a bind each on 100 nodes).
  for (int i = 0; i < 100; ++i) {
    Placed p{"team-0", "new-" + std::to_string(i), i * (nodes / 100), 0, 1024, 10};
    Json pod = PodObject(p, true);
    state.UpsertPod(pod);
    dash.UpsertPod(pod);
  }
  const Step changed = measure([&] { dash.RefreshNow(false); });
  std::printf("\nusage round over %d nodes (8 fetch threads, in-process fetch) + a view: %.0f ms wall\n",
              nodes, round_and_view);
  std::printf(
      "view build (wall / thread CPU ms): after the round %.1f / %.1f, nothing changed %.1f / %.1f, "
      "after 100 binds %.1f / %.1f\n",
      cold.wall, cold.cpu, warm.wall, warm.cpu, changed.wall, changed.cpu);

  httplib::Client http("127.0.0.1", dash.port());
  http.set_keep_alive(true);
  http.set_read_timeout(60);
  struct Case {
    const char* what;
    std::string path;
  };
  const std::vector<Case> cases = {
      {"overview", "/api/overview"},
      {"nodes, page 1 (50)", "/api/nodes?limit=50"},
      {"nodes, sorted by fragmentation", "/api/nodes?limit=50&sort=fragmentation"},
      {"node detail", "/api/nodes/node-42"},
      {"GPU detail", "/api/nodes/node-42/gpus/" + ts::testing::GpuUuid(42, 0)},
      {"pods, page 1 (50)", "/api/pods?limit=50"},
      {"pods, one namespace, page 20", "/api/pods?ns=team-3&offset=1000&limit=50"},
      {"namespaces", "/api/namespaces"},
      {"app.js (asset)", "/app.js"},
  };
  std::printf("\n| answer | median ms | p99 ms | bytes |\n|---|---|---|---|\n");
  size_t overview_bytes = 0;
  for (const Case& c : cases) {
    std::vector<double> times;
    size_t bytes = 0;
    for (int i = 0; i < requests; ++i) {
      auto start = Clock::now();
      auto r = http.Get(c.path.c_str());
      times.push_back(Ms(Clock::now() - start));
      if (!r || r->status != 200) {
        std::fprintf(stderr, "%s: %s\n", c.path.c_str(), r ? r->body.c_str() : "no answer");
        return 1;
      }
      bytes = r->body.size();
    }
    std::sort(times.begin(), times.end());
    if (c.path == "/api/overview") overview_bytes = bytes;
    std::printf("| %s | %.2f | %.2f | %zu |\n", c.what, times[times.size() / 2],
                times[std::min(times.size() - 1, times.size() * 99 / 100)], bytes);
  }
  size_t assets = 0;
  for (const td::Asset& a : td::Assets()) assets += a.body.size();
  std::printf(
      "\npage weight of the overview: %zu bytes of assets (%zu files) + %zu bytes of /api/overview = %zu "
      "bytes (uncompressed)\n",
      assets, td::Assets().size(), overview_bytes, assets + overview_bytes);
  dash.Stop();
  return 0;
}
