// scheduler_bench: two measurements of tessera-scheduler.
//
//   scheduler_bench latency [--nodes 5000 --gpus 8 --pods 40000 --iterations 300]
//     One kube-scheduler cycle's extender work, in process: from the
//     ExtenderArgs body (NodeNames = every node) to the filter answer body,
//     then from the prioritize body (NodeNames = those that passed) to its
//     answer body, as the HTTP handler does it. Prints p50/p99/max over the
//     iterations of wall time and of CPU time (all threads of the process);
//     BENCH_COLD=1: a new pod shape every cycle; BENCH_STAGES=1: per-verb times;
//     BENCH_POLICY=<name>: the node policy (policy.node; default the
//     configuration's: tessera since issue 18, binpack before). Every cycle's pod is a new pod (its own UID),
//     as in a cluster, so the extender observes it as an arrival; the running
//     pods are first filtered once each over no nodes (not timed), the arrivals
//     a scheduler that placed them would have observed.
//   scheduler_bench mig [--nodes 1000 --gpus 8 --pods 4000 --iterations 300]
//     The same cycle for a dynamic MIG pod (nvidia.com/vgpu-mode: mig, 9728
//     MiB: a 1g.10gb) over nodes whose GPUs are all mig-dynamic A100-80GB,
//     with `pods` MIG pods bound (1g/2g/3g sizes) and one reservation moving
//     per cycle. Prints filter alone and filter+prioritize; BENCH_COLD=1: a
//     new pod shape every cycle.
//   scheduler_bench e2e [--nodes 100 --pods 2000 --workers 8]
//     Pods bound per second end to end: the API-server stand-in, the real
//     Scheduler (informers, HTTP listener, libcurl client), and `workers`
//     threads playing kube-scheduler over HTTP (filter -> prioritize -> bind).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "../latency_summary.h"
#include "apiserver/fake_apiserver.h"
#include "base/clock.h"
#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "kube/curl_transport.h"
#include "scheduler/extender.h"
#include "scheduler/scheduler.h"
#include "scheduler/testing.h"

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace ts = tessera::scheduler;

namespace {

int Arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// CPU time of the whole process (every thread) in ms: on a machine shared
// with other work this is what a request costs, whatever the wait for a core.
double ProcessCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// The extender's work on one request body, as the HTTP handler does it.
std::pair<int, std::string> FilterCall(ts::Extender& extender, const std::string& body) {
  return extender.FilterBody(body);
}

std::pair<int, std::string> PrioritizeCall(ts::Extender& extender, const std::string& body) {
  return extender.PrioritizeBody(body);
}

// One kube-scheduler cycle's extender work for the pod in `args`: filter,
// then prioritize over the nodes that passed, each timed from request body in
// to answer body out. Building the prioritize request from the filter answer
// is kube-scheduler's work and is not timed.
struct Cycle {
  bool ok = false;                                                                  // both answered 200
  double filter_wall = 0, filter_cpu = 0, prioritize_wall = 0, prioritize_cpu = 0;  // ms
  size_t feasible = 0;
};

Cycle TimedCycle(ts::Extender& extender, const Json& args) {
  const std::string body = args.dump();
  Cycle c;
  const auto w0 = Clock::now();
  const double c0 = ProcessCpuMs();
  auto [fs, filter_out] = FilterCall(extender, body);
  const double c1 = ProcessCpuMs();
  const auto w1 = Clock::now();
  Json filtered = Json::parse(filter_out);
  Json pin = {{"Pod", args["Pod"]}, {"Nodes", nullptr}, {"NodeNames", filtered["NodeNames"]}};
  const std::string prio_body = pin.dump();
  const auto w2 = Clock::now();
  const double c2 = ProcessCpuMs();
  auto [ps, prio_out] = PrioritizeCall(extender, prio_body);
  const double c3 = ProcessCpuMs();
  const auto w3 = Clock::now();
  if (fs != 200 || ps != 200) std::fprintf(stderr, "filter %d / prioritize %d\n", fs, ps);
  c.ok = fs == 200 && ps == 200;
  c.filter_wall = Ms(w1 - w0);
  c.filter_cpu = c1 - c0;
  c.prioritize_wall = Ms(w3 - w2);
  c.prioritize_cpu = c3 - c2;
  c.feasible = filtered["NodeNames"].size();
  return c;
}

int Latency(int argc, char** argv) {
  const int nodes = Arg(argc, argv, "--nodes", 5000);
  const int gpus = Arg(argc, argv, "--gpus", 8);
  const int pods = Arg(argc, argv, "--pods", 40000);
  const int iterations = Arg(argc, argv, "--iterations", 300);
  // Heartbeat staleness is checked on every request as in production, against
  // a wall clock held at the inventories' heartbeat however long the run takes.
  const auto start = std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now());
  const std::string heartbeat = ts::testing::Heartbeat(start);
  tessera::FakeClock clock(start + std::chrono::seconds(30));  // stands still
  ts::ClusterStateOptions options;
  options.clock = &clock;
  ts::ClusterState state(options);
  std::vector<std::string> names;
  for (int n = 0; n < nodes; ++n) {
    names.push_back("node-" + std::to_string(n));
    state.UpsertNode(
        ts::testing::NodeWithGpus(names.back(), n + 1, gpus, 81920, 10, "NVIDIA A100-SXM4-80GB", heartbeat));
  }
  // Running pods, accounted from their annotations as the informer would.
  std::vector<Json> running;
  for (int p = 0; p < pods; ++p) {
    const int64_t mem = 2000 + (p % 7) * 1000;
    const int cores = 5 + (p % 4) * 5;
    Json pod = ts::testing::GpuPod("bench", "run-" + std::to_string(p), 1 + (p % 9 == 0), mem, cores);
    pod["metadata"]["uid"] = "uid-run-" + std::to_string(p);
    auto request = tessera::core::DerivePodRequest(pod, {});
    auto alloc = state.Reserve("bench/run-" + std::to_string(p), *request, names[p % nodes],
                               tessera::core::GpuOrder::kSpread, std::chrono::hours(1));
    if (!alloc.ok()) continue;
    pod["metadata"]["annotations"]["tessera.io/allocation"] = *tessera::core::EncodeAllocation(*alloc);
    pod["status"]["phase"] = "Running";
    state.UpsertPod(pod);
    running.push_back(std::move(pod));
  }
  ts::ExtenderDeps deps;
  deps.state = &state;
  const char* policy = std::getenv("BENCH_POLICY");
  if (policy) deps.config.node_policy = policy;
  ts::Extender extender(std::move(deps));
  // The running pods arrived before: kube-scheduler asked about each of them.
  for (const Json& pod : running) {
    Json arrival = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", Json::array()}};
    if (FilterCall(extender, arrival.dump()).first != 200) {
      std::fprintf(stderr, "filter of a running pod failed\n");
      return 1;
    }
  }
  Json args = {{"Nodes", nullptr}, {"NodeNames", names}};
  const bool cold = std::getenv("BENCH_COLD") != nullptr;
  const bool stages = std::getenv("BENCH_STAGES") != nullptr;
  std::vector<double> wall, cpu;
  size_t feasible = 0;
  auto churn_request = tessera::core::DerivePodRequest(ts::testing::GpuPod("bench", "churn", 1, 1000, 5), {});
  for (int i = 0; i < iterations; ++i) {
    // Between cycles the cluster changes as it would: the previous cycle's
    // pod was bound on some node (here: one reservation moves each cycle).
    state.Unreserve("bench/churn");
    (void)state.Reserve("bench/churn", *churn_request, names[(i * 7919) % nodes],
                        tessera::core::GpuOrder::kSpread, std::chrono::hours(1));
    // Every cycle a new pod (a new UID); BENCH_COLD: of a shape not seen
    // before, so nothing is cached.
    args["Pod"] = ts::testing::GpuPod("default", "new-" + std::to_string(i), 1, cold ? 8000 + i : 8000, 20);
    args["Pod"]["metadata"]["uid"] = "uid-new-" + std::to_string(i);
    const Cycle c = TimedCycle(extender, args);
    if (!c.ok) return 1;
    if (stages) {
      std::printf("filter wall %.2f cpu %.2f; prioritize wall %.2f cpu %.2f ms\n", c.filter_wall,
                  c.filter_cpu, c.prioritize_wall, c.prioritize_cpu);
    }
    wall.push_back(c.filter_wall + c.prioritize_wall);
    cpu.push_back(c.filter_cpu + c.prioritize_cpu);
    feasible = c.feasible;
  }
  auto stats = state.Stats();
  std::printf(
      "latency (%s, node policy %s): %d nodes x %d GPUs, %zu pods cached, %zu feasible; filter+prioritize "
      "(request body in, answer body out) over %d iterations:\n  wall: %s\n  CPU (all threads): %s\n",
      cold ? "new pod shape every cycle" : "same shape, one node changed per cycle",
      policy ? policy : ts::SchedulerConfig{}.node_policy.c_str(), nodes, gpus, stats.pods, feasible,
      iterations, tessera::bench::LatencySummary(wall).c_str(), tessera::bench::LatencySummary(cpu).c_str());
  const auto mix = extender.learner().stats();
  std::printf("  workload mix: %llu pods counted, %zu shapes, learned %llu times\n",
              static_cast<unsigned long long>(mix.counted), mix.mix_shapes,
              static_cast<unsigned long long>(mix.epoch));
  return 0;
}

int MigLatency(int argc, char** argv) {
  const int nodes = Arg(argc, argv, "--nodes", 1000);
  const int gpus = Arg(argc, argv, "--gpus", 8);
  const int pods = Arg(argc, argv, "--pods", 4000);
  const int iterations = Arg(argc, argv, "--iterations", 300);
  const auto start = std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now());
  const std::string heartbeat = ts::testing::Heartbeat(start);
  tessera::FakeClock clock(start + std::chrono::seconds(30));
  ts::ClusterStateOptions options;
  options.clock = &clock;
  ts::ClusterState state(options);
  std::vector<std::string> names;
  for (int n = 0; n < nodes; ++n) {
    names.push_back("node-" + std::to_string(n));
    state.UpsertNode(ts::testing::NodeWithDynamicMigGpus(names.back(), n + 1, gpus, {}, heartbeat));
  }
  // Bound MIG pods: 1g.10gb, 2g.20gb-sized and 3g.40gb-sized in turn.
  const int64_t sizes[] = {9728, 19968, 40000};
  size_t bound = 0;
  for (int p = 0; p < pods; ++p) {
    const std::string name = "run-" + std::to_string(p);
    Json pod = ts::testing::MigPod("bench", name, sizes[p % 3]);
    auto request = tessera::core::DerivePodRequest(pod, {});
    auto alloc = state.Reserve("bench/" + name, *request, names[p % nodes], tessera::core::GpuOrder::kSpread,
                               std::chrono::hours(1), ts::Sharing::kDynamicMig);
    if (!alloc.ok()) continue;
    pod["metadata"]["annotations"]["tessera.io/allocation"] = *tessera::core::EncodeAllocation(*alloc);
    pod["status"]["phase"] = "Running";
    state.UpsertPod(pod);
    ++bound;
  }
  ts::ExtenderDeps deps;
  deps.state = &state;
  ts::Extender extender(std::move(deps));
  Json args = {{"Nodes", nullptr}, {"NodeNames", names}};
  const bool cold = std::getenv("BENCH_COLD") != nullptr;
  std::vector<double> filter_wall, filter_cpu, wall, cpu;
  size_t feasible = 0;
  auto churn = tessera::core::DerivePodRequest(ts::testing::MigPod("bench", "churn", 9728), {});
  for (int i = 0; i < iterations; ++i) {
    state.Unreserve("bench/churn");
    (void)state.Reserve("bench/churn", *churn, names[(i * 7919) % nodes], tessera::core::GpuOrder::kSpread,
                        std::chrono::hours(1), ts::Sharing::kDynamicMig);
    // Cold: 9000 + i MiB, still a 1g.10gb, but a shape never seen before.
    args["Pod"] = ts::testing::MigPod("default", "new-" + std::to_string(i), cold ? 9000 + i : 9728);
    args["Pod"]["metadata"]["uid"] = "uid-new-" + std::to_string(i);
    const Cycle c = TimedCycle(extender, args);
    if (!c.ok) return 1;
    filter_wall.push_back(c.filter_wall);
    filter_cpu.push_back(c.filter_cpu);
    wall.push_back(c.filter_wall + c.prioritize_wall);
    cpu.push_back(c.filter_cpu + c.prioritize_cpu);
    feasible = c.feasible;
  }
  std::printf(
      "mig latency (%s): %d nodes x %d mig-dynamic A100-80GB, %zu MIG pods bound, %zu feasible; over %d "
      "iterations:\n  filter wall: %s\n  filter CPU: %s\n  filter+prioritize wall: %s\n  filter+prioritize "
      "CPU: %s\n",
      cold ? "new pod shape every cycle" : "same shape, one node changed per cycle", nodes, gpus, bound,
      feasible, iterations, tessera::bench::LatencySummary(filter_wall).c_str(),
      tessera::bench::LatencySummary(filter_cpu).c_str(), tessera::bench::LatencySummary(wall).c_str(),
      tessera::bench::LatencySummary(cpu).c_str());
  return 0;
}

bool ScheduleOnce(httplib::Client& http, const Json& pod, const Json& nodes) {
  Json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}};
  auto filter = http.Post("/filter", args.dump(), "application/json");
  if (!filter) return false;
  Json fr = Json::parse(filter->body, nullptr, false);
  if (fr.is_discarded() || !fr["NodeNames"].is_array() || fr["NodeNames"].empty()) return false;
  Json pargs = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", fr["NodeNames"]}};
  auto prio = http.Post("/prioritize", pargs.dump(), "application/json");
  if (!prio) return false;
  Json list = Json::parse(prio->body, nullptr, false);
  if (!list.is_array() || list.empty()) return false;
  std::string best;
  int best_score = -1;
  for (const Json& h : list) {
    if (h["Score"].get<int>() > best_score) {
      best_score = h["Score"];
      best = h["Host"];
    }
  }
  Json bargs = {
      {"PodName", pod["metadata"]["name"]}, {"PodNamespace", "default"}, {"PodUID", ""}, {"Node", best}};
  auto bind = http.Post("/bind", bargs.dump(), "application/json");
  if (!bind) return false;
  Json br = Json::parse(bind->body, nullptr, false);
  bool ok = !br.is_discarded() && br.value("Error", "x").empty();
  static std::atomic<int> reported{0};
  if (!ok && std::getenv("BENCH_VERBOSE") && reported++ < 3)
    std::fprintf(stderr, "bind failed: %s\n", bind->body.c_str());
  return ok;
}

int EndToEnd(int argc, char** argv) {
  const int nodes = Arg(argc, argv, "--nodes", 100);
  const int pods = Arg(argc, argv, "--pods", 2000);
  const int workers = Arg(argc, argv, "--workers", 8);
  tessera::testing::FakeApiServerOptions so;
  so.threads = 128;
  tessera::testing::FakeApiServer server(so);
  if (!server.Start().ok()) return 1;
  Json names = Json::array();
  for (int n = 0; n < nodes; ++n) {
    names.push_back("node-" + std::to_string(n));
    (void)server.CreateObject("nodes", ts::testing::NodeWithGpus(names.back(), n + 1, 8, 81920, 10));
  }
  std::vector<Json> created;
  for (int p = 0; p < pods; ++p) {
    auto r =
        server.CreateObject("pods", ts::testing::GpuPod("default", "pod-" + std::to_string(p), 1, 4000, 10));
    if (r.ok()) created.push_back(*r);
  }
  ts::SchedulerConfig config;
  config.port = 0;
  config.bind_address = "127.0.0.1";
  config.leader_elect = false;
  config.http_threads = workers * 2;
  tessera::kube::CurlTransportOptions t;
  t.server = server.url();
  tessera::kube::ClientOptions o;
  o.qps = 0;
  auto client = std::make_shared<tessera::kube::Client>(std::make_shared<tessera::kube::CurlTransport>(t), o);
  ts::Scheduler scheduler(config, client);
  if (!scheduler.Start().ok()) return 1;
  while (!scheduler.Ready() || scheduler.state().Stats().nodes < size_t(nodes)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::atomic<size_t> next{0};
  std::atomic<int> bound{0};
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      httplib::Client http("127.0.0.1", scheduler.port());
      http.set_keep_alive(true);
      http.set_tcp_nodelay(true);
      for (size_t i = next++; i < created.size(); i = next++) {
        // Like kube-scheduler, a pod whose bind lost a race is scheduled again.
        for (int attempt = 0; attempt < 20; ++attempt) {
          if (ScheduleOnce(http, created[i], names)) {
            ++bound;
            break;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  double seconds = Ms(Clock::now() - start) / 1000.0;
  std::printf("e2e: %d pods over %d nodes x 8 GPUs, %d workers: %d bound in %.2f s = %.0f pods/s\n", pods,
              nodes, workers, bound.load(), seconds, bound.load() / seconds);
  scheduler.Stop();
  server.Stop();
  return bound.load() == pods ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "latency") == 0) return Latency(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "e2e") == 0) return EndToEnd(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "mig") == 0) return MigLatency(argc, argv);
  std::fprintf(stderr, "usage: scheduler_bench latency|mig|e2e [options]\n");
  return 2;
}
