// scale_bench: the real tessera-scheduler against a cluster at Kubernetes'
// size limit (issue 21), as an operator would meet it.
//
//   scale_bench --scheduler build/bin/tessera-scheduler [--nodes 5000 --gpus 8 --pods 40000
//               --iterations 300 --decisions 10000 --shapes 400 --policy tessera --no-streaming
//               --no-dashboard]
//
// 1. Loads the API-server stand-in (in this process) with `nodes` Nodes of
//    `gpus` GPUs each, carrying a tessera inventory and the labels, taints and
//    status a kubelet publishes (~6.6 KB of JSON each), and `pods` Running GPU
//    pods bound to them with tessera allocations (~2.1 KB each).
// 2. Times one full list of pods and of nodes from the stand-in over HTTP (the
//    server's own serving time, reported apart).
// 3. Starts the tessera-scheduler binary against it and times start -> /readyz
//    answering 200; reads VmRSS and VmHWM from /proc/<pid>/status.
// 4. Calls filter, then prioritize over the nodes that passed, over HTTP with
//    all node names (kube-scheduler's nodeCacheCapable form) for `iterations`
//    pods never seen before (a new UID each); prints p50/p99 per verb.
// 5. Makes `decisions` more filter+prioritize rounds for unseen pods of
//    `shapes` different sizes in turn and prints the resident memory every
//    1,000 decisions: it must stay flat.
//
// Times depend on the machine and what else runs on it; the memory figures
// do not (much). docs/benchmarks.md records a run.
#include <httplib.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "../latency_summary.h"
#include "apiserver/fake_apiserver.h"
#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "scheduler/cluster_state.h"
#include "scheduler/scale_testing.h"
#include "scheduler/testing.h"
#include "testing/ports.h"
#include "testing/process.h"

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace ts = tessera::scheduler;

namespace {

std::string StrArg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

int Arg(int argc, char** argv, const char* name, int fallback) {
  return std::atoi(StrArg(argc, argv, name, std::to_string(fallback).c_str()).c_str());
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// VmRSS and VmHWM of `pid`, in MB (10^6 bytes).
struct Memory {
  double rss_mb = 0;
  double hwm_mb = 0;
};
Memory MemoryOf(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  Memory m;
  std::string line;
  while (std::getline(status, line)) {
    long kb = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %ld kB", &kb) == 1) m.rss_mb = kb * 1024.0 / 1e6;
    if (std::sscanf(line.c_str(), "VmHWM: %ld kB", &kb) == 1) m.hwm_mb = kb * 1024.0 / 1e6;
  }
  return m;
}

// CPU seconds (user + system) `pid` has used: what start costs it, whatever
// else runs on the machine.
double CpuSecondsOf(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> fields;
  std::string field;
  for (size_t i = close + 2; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ' ') {
      fields.push_back(field);
      field.clear();
    } else {
      field += text[i];
    }
  }
  // Fields after the name start at the state (field 3): utime is field 14, stime 15.
  if (fields.size() < 13) return -1;
  return (std::stod(fields[11]) + std::stod(fields[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// An HTTP GET of `path` from the stand-in, timed until the whole body is in.
double TimedList(int port, const std::string& path, size_t* bytes) {
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(120, 0);
  const auto t0 = Clock::now();
  auto res = http.Get(path);
  const double ms = Ms(Clock::now() - t0);
  *bytes = res ? res->body.size() : 0;
  return res && res->status == 200 ? ms : -1;
}

// A streaming list of `plural` read from the stand-in by a client that only
// splits lines, until the initial-events-end BOOKMARK: the stand-in's own
// serving time for what the scheduler reads at start. Returns ms (-1 on
// failure); *cpu_s is this process's CPU meanwhile (the stand-in serving and
// the line splitting).
double TimedStreamingList(int port, const std::string& plural, size_t* bytes, double* cpu_s) {
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(120, 0);
  const std::string path = "/api/v1/" + plural +
                           "?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&"
                           "resourceVersionMatch=NotOlderThan&timeoutSeconds=60";
  std::string pending;
  size_t total = 0;
  bool ended = false;
  const double cpu0 = CpuSecondsOf(getpid());
  const auto t0 = Clock::now();
  auto res = http.Get(path, [&](const char* data, size_t n) {
    total += n;
    pending.append(data, n);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      const std::string_view line(pending.data(), nl);
      if (line.find("\"type\":\"BOOKMARK\"") != std::string_view::npos &&
          line.find("initial-events-end") != std::string_view::npos) {
        ended = true;
      }
      pending.erase(0, nl + 1);
    }
    return !ended;  // stop reading at the bookmark
  });
  const double ms = Ms(Clock::now() - t0);
  *cpu_s = CpuSecondsOf(getpid()) - cpu0;
  *bytes = total;
  return ended ? ms : -1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string binary = StrArg(argc, argv, "--scheduler", "");
  if (binary.empty()) {
    std::fprintf(stderr,
                 "usage: scale_bench --scheduler PATH/tessera-scheduler [--nodes 5000 --gpus 8 --pods 40000 "
                 "--iterations 300 --decisions 10000 --shapes 400 --policy tessera]\n");
    return 2;
  }
  const int nodes = Arg(argc, argv, "--nodes", 5000);
  const int gpus = Arg(argc, argv, "--gpus", 8);
  const int pods = Arg(argc, argv, "--pods", 40000);
  const int iterations = Arg(argc, argv, "--iterations", 300);
  const int decisions = Arg(argc, argv, "--decisions", 10000);
  const int shapes = std::max(1, Arg(argc, argv, "--shapes", 400));
  const std::string policy = StrArg(argc, argv, "--policy", "tessera");

  tessera::testing::FakeApiServerOptions so;
  so.history_limit = 1000;
  // --no-streaming: a server from before streaming lists (paginated lists).
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-streaming") == 0) so.streaming_lists = false;
  }
  tessera::testing::FakeApiServer server(so);
  if (auto st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "stand-in: %s\n", st.error().message.c_str());
    return 1;
  }
  std::vector<std::string> names;
  const int placed = ts::testing::PopulateCluster(server, nodes, gpus, pods, &names);
  if (placed < 0) {
    std::fprintf(stderr, "cannot load the stand-in\n");
    return 1;
  }
  size_t node_bytes = 0, pod_bytes = 0;
  for (const Json& n : server.ListObjects("nodes")) node_bytes += n.dump().size();
  for (const Json& p : server.ListObjects("pods")) pod_bytes += p.dump().size();
  std::printf("cluster: %d nodes x %d GPUs (%.1f KB of JSON each), %d GPU pods (%.1f KB each)\n", nodes, gpus,
              node_bytes / 1e3 / std::max(1, nodes), placed, pod_bytes / 1e3 / std::max(1, placed));

  size_t bytes = 0;
  const double list_pods = TimedList(server.port(), "/api/v1/pods", &bytes);
  const double pods_mb = bytes / 1e6;
  const double list_nodes = TimedList(server.port(), "/api/v1/nodes", &bytes);
  std::printf("stand-in serving one full list: pods %.0f ms (%.1f MB), nodes %.0f ms (%.1f MB)\n", list_pods,
              pods_mb, list_nodes, bytes / 1e6);
  if (so.streaming_lists) {
    double pods_cpu = 0, nodes_cpu = 0;
    size_t stream_pod_bytes = 0;
    const double stream_pods = TimedStreamingList(server.port(), "pods", &stream_pod_bytes, &pods_cpu);
    const double stream_nodes = TimedStreamingList(server.port(), "nodes", &bytes, &nodes_cpu);
    std::printf(
        "stand-in serving one streaming list alone: pods %.0f ms (%.2f s CPU, %.1f MB), nodes %.0f ms (%.2f "
        "s "
        "CPU, %.1f MB)\n",
        stream_pods, pods_cpu, stream_pod_bytes / 1e6, stream_nodes, nodes_cpu, bytes / 1e6);
  }

  const int port = tessera::testing::FreePort();
  const int dashboard_port = tessera::testing::FreePort();
  tessera::testing::Command cmd;
  cmd.argv = {binary,
              "--api-server",
              server.url(),
              "--port",
              std::to_string(port),
              "--set",
              "leaderElection.enabled=false",
              "--set",
              "server.bindAddress=127.0.0.1",
              "--set",
              "dashboard.bindAddress=127.0.0.1",
              "--set",
              "dashboard.port=" + std::to_string(dashboard_port),
              "--set",
              "policy.node=" + policy,
              "--set",
              "logLevel=" + StrArg(argc, argv, "--log-level", "info")};
  // --no-dashboard: without the dashboard (its view is rebuilt every second
  // from the whole cluster, on the same two cores as filter and prioritize).
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-dashboard") == 0)
      cmd.argv.insert(cmd.argv.end(), {"--set", "dashboard.enabled=false"});
  }
  cmd.stderr_path = StrArg(argc, argv, "--log", "/tmp/scale_bench_scheduler.log");
  cmd.stdout_path = cmd.stderr_path;
  const double bench_cpu_at_start = CpuSecondsOf(getpid());
  const auto started = Clock::now();
  pid_t pid = tessera::testing::Spawn(cmd);
  if (pid <= 0) {
    std::fprintf(stderr, "cannot start %s\n", binary.c_str());
    return 1;
  }
  httplib::Client http("127.0.0.1", port);
  http.set_keep_alive(true);
  http.set_tcp_nodelay(true);
  http.set_connection_timeout(1, 0);
  http.set_read_timeout(60, 0);
  double ready_ms = -1;
  while (Ms(Clock::now() - started) < 300000) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      std::fprintf(stderr, "tessera-scheduler exited; see %s\n", cmd.stderr_path.c_str());
      return 1;
    }
    if (auto r = http.Get("/readyz"); r && r->status == 200) {
      ready_ms = Ms(Clock::now() - started);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (ready_ms < 0) {
    std::fprintf(stderr, "not ready after 300 s\n");
    tessera::testing::KillAndWait(pid, SIGTERM);
    return 1;
  }
  const Memory at_ready = MemoryOf(pid);
  const double cpu_at_ready = CpuSecondsOf(pid);
  const double stand_in_cpu = CpuSecondsOf(getpid()) - bench_cpu_at_start;
  std::printf(
      "tessera-scheduler (policy %s, %s): ready %.2f s after start (%.2f s of its CPU; the stand-in used "
      "%.2f "
      "s of CPU serving it meanwhile); resident %.0f MB (peak %.0f MB)\n",
      policy.c_str(), so.streaming_lists ? "streaming list offered" : "paginated lists", ready_ms / 1e3,
      cpu_at_ready, stand_in_cpu, at_ready.rss_mb, at_ready.hwm_mb);
  std::printf("load average at ready: %s",
              [] {
                std::ifstream f("/proc/loadavg");
                std::string line;
                std::getline(f, line);
                return line + "\n";
              }()
                  .c_str());
  if (auto m = http.Get("/metrics"); m) {
    for (const char* metric : {"tessera_scheduler_nodes ", "tessera_scheduler_pods ",
                               "tessera_scheduler_inconsistent_annotations_total "}) {
      auto at = m->body.find(std::string("\n") + metric);
      if (at != std::string::npos)
        std::printf("  %s\n", m->body.substr(at + 1, m->body.find('\n', at + 1) - at - 1).c_str());
    }
  }

  const Json all_names = names;
  int seq = 0;
  // One kube-scheduler cycle for a pod never seen before; false on an error.
  auto cycle = [&](int64_t mem, std::vector<double>* filter_ms, std::vector<double>* prio_ms) {
    const int i = seq++;
    Json pod = ts::testing::GpuPod("bench", "new-" + std::to_string(i), 1, mem, 10);
    pod["metadata"]["uid"] = "uid-new-" + std::to_string(i);
    const std::string fbody = Json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", all_names}}.dump();
    const auto t0 = Clock::now();
    auto f = http.Post("/filter", fbody, "application/json");
    const auto t1 = Clock::now();
    if (!f || f->status != 200) return false;
    Json fr = Json::parse(f->body, nullptr, false);
    if (fr.is_discarded() || !fr["NodeNames"].is_array()) return false;
    const std::string pbody = Json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", fr["NodeNames"]}}.dump();
    const auto t2 = Clock::now();
    auto p = http.Post("/prioritize", pbody, "application/json");
    const auto t3 = Clock::now();
    if (!p || p->status != 200) return false;
    if (filter_ms) filter_ms->push_back(Ms(t1 - t0));
    if (prio_ms) prio_ms->push_back(Ms(t3 - t2));
    return true;
  };
  std::vector<double> filter_ms, prio_ms;
  const double cpu_before_latency = CpuSecondsOf(pid);
  for (int i = 0; i < iterations; ++i) {
    if (!cycle(8000, &filter_ms, &prio_ms)) {
      std::fprintf(stderr, "filter/prioritize failed\n");
      tessera::testing::KillAndWait(pid, SIGTERM);
      return 1;
    }
  }
  std::printf("over HTTP, %d unseen pods, %zu NodeNames each:\n  filter:     %s\n  prioritize: %s\n",
              iterations, names.size(), tessera::bench::LatencySummary(filter_ms).c_str(),
              tessera::bench::LatencySummary(prio_ms).c_str());
  std::printf("  tessera-scheduler's CPU per filter + prioritize, mean: %.2f ms\n",
              (CpuSecondsOf(pid) - cpu_before_latency) * 1e3 / std::max(1, iterations));
  const Memory after_latency = MemoryOf(pid);
  std::printf("  resident %.0f MB (peak %.0f MB)\n", after_latency.rss_mb, after_latency.hwm_mb);

  for (int d = 1; d <= decisions; ++d) {
    if (!cycle(1000 + (d % shapes) * 97, nullptr, nullptr)) {
      std::fprintf(stderr, "decision %d failed\n", d);
      tessera::testing::KillAndWait(pid, SIGTERM);
      return 1;
    }
    if (d % 1000 == 0 || d == decisions) {
      const Memory m = MemoryOf(pid);
      std::printf("after %5d decisions (%d shapes in turn): resident %.0f MB (peak %.0f MB)\n", d, shapes,
                  m.rss_mb, m.hwm_mb);
      std::fflush(stdout);
    }
  }
  tessera::testing::KillAndWait(pid, SIGTERM);
  server.Stop();
  return 0;
}
