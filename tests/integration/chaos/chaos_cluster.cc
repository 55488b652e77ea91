#include "chaos_cluster.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "base/number_format.h"
#include "core/inventory_codec.h"
#include "testing/ports.h"
#include "testing/process.h"
#include "testing/sim_gpu.h"

namespace tessera::chaos {

using Json = nlohmann::json;
using ::tessera::testing::WaitFor;
using namespace std::chrono_literals;

namespace {

// Starts `argv` with `env` added, stdout and stderr appended to `log`.
pid_t SpawnLogged(const std::vector<std::string>& argv, const tessera::testing::Env& env,
                  const std::string& log) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  const pid_t pid = tessera::testing::Spawn({.argv = argv, .env = env, .stdout_fd = fd, .stderr_fd = fd});
  ::close(fd);
  return pid;
}

int HttpStatus(int port, const std::string& path) {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(1);
  http.set_read_timeout(5);
  auto res = http.Get(path);
  return res ? res->status : 0;
}

}  // namespace

ChaosCluster::ChaosCluster(ChaosClusterOptions options)
    : options_(std::move(options)), tmp_(options_.temp_prefix) {}

ChaosCluster::~ChaosCluster() {
  Stop();
}

std::string ChaosCluster::NodeName(int i) const {
  return "chaos-node-" + std::to_string(i);
}

std::string ChaosCluster::GpuUuid(int node, int gpu) {
  char text[64];
  std::snprintf(text, sizeof(text), "GPU-c4a05000-%04x-4000-8000-%012x", node, gpu);
  return text;
}

std::string ChaosCluster::RegionDir(int i) const {
  return nodes_[i]->dir + "/regions";
}

std::string ChaosCluster::SchedulerIdentity(int r) const {
  return "chaos-scheduler-" + std::to_string(r);
}

Status ChaosCluster::Start() {
  tessera::testing::FakeApiServerOptions api_options;
  api_options.bookmark_interval = 200ms;
  api_options.keep_alive_seconds = 1;
  api_options.threads = 128;
  api_options.fault_seed = options_.fault_seed;
  api_ = std::make_unique<tessera::testing::FakeApiServer>(api_options);
  if (auto started = api_->Start(); !started.ok()) return started.error().Wrap("the API-server stand-in");

  for (int i = 0; i < options_.nodes; ++i) {
    auto node = std::make_unique<Node>();
    node->name = NodeName(i);
    node->dir = tmp_.Path("n" + std::to_string(i));
    for (const char* sub : {"", "/dp", "/lib", "/regions", "/sim", "/podres"}) {
      tmp_.MakeDir("n" + std::to_string(i) + sub);
    }
    tmp_.Write("n" + std::to_string(i) + "/lib/libvgpu.so", "stand-in");
    node->sim_config = "gpus:\n";
    for (int g = 0; g < options_.gpus_per_node; ++g) {
      node->sim_config += "  - model: A100-80GB\n    uuid: " + GpuUuid(i, g) + "\n";
    }
    node->metrics_port = tessera::testing::FreePort();
    if (node->metrics_port < 0) return Error{"no free port for " + node->name + "'s metrics"};
    node->kubelet = std::make_unique<tessera::testing::KubeletStandIn>(node->dir + "/dp",
                                                                       node->dir + "/podres/kubelet.sock");
    if (!node->kubelet->Start()) return Error{"the kubelet stand-in of " + node->name + " did not start"};
    if (auto created = api_->CreateObject("nodes", {{"metadata", {{"name", node->name}}}}); !created.ok()) {
      return created.error().Wrap("the Node " + node->name);
    }
    nodes_.push_back(std::move(node));
  }
  for (int i = 0; i < options_.nodes; ++i) {
    if (auto started = StartNode(i); !started.ok()) return started;
  }
  for (int i = 0; i < options_.nodes; ++i) {
    const size_t devices = static_cast<size_t>(options_.gpus_per_node * options_.split_count);
    if (!nodes_[i]->kubelet->WaitForDevices(
            kResource, [&](const auto& d) { return tessera::testing::CountHealthy(d) == devices; }, 60s)) {
      return Error{nodes_[i]->name + "'s device plugin never listed its devices:\n" + Logs()};
    }
    const bool published = WaitFor([&] {
      auto node = api_->GetObject("nodes", "", nodes_[i]->name);
      if (!node) return false;
      auto text = node->value("/metadata/annotations"_json_pointer, Json::object())
                      .value(std::string(core::kInventoryAnnotation), "");
      auto inventory = core::DecodeInventory(text);
      return inventory.ok() && static_cast<int>(inventory->gpus.size()) == options_.gpus_per_node;
    });
    if (!published) return Error{nodes_[i]->name + " never published its inventory:\n" + Logs()};
  }

  for (int r = 0; r < kSchedulers; ++r) {
    auto scheduler = std::make_unique<Scheduler>();
    scheduler->port = tessera::testing::FreePort();
    if (scheduler->port < 0) return Error{"no free port for a scheduler"};
    schedulers_.push_back(std::move(scheduler));
  }
  for (int r = 0; r < kSchedulers; ++r) {
    if (auto started = StartScheduler(r); !started.ok()) return started;
  }
  return Status::Ok();
}

void ChaosCluster::Stop() {
  for (auto& s : schedulers_) {
    std::lock_guard lock(s->mu);
    tessera::testing::KillAndWait(s->pid, SIGTERM);
  }
  for (auto& n : nodes_) {
    {
      std::lock_guard lock(n->mu);
      tessera::testing::KillAndWait(n->pid, SIGTERM);
    }
    n->kubelet->Stop();
  }
  if (api_) api_->Stop();
}

Status ChaosCluster::StartNode(int i) {
  Node& node = *nodes_[i];
  std::lock_guard lock(node.mu);
  if (node.pid > 0) return Status::Ok();
  tessera::testing::SimGpu sim{.state_dir = node.dir + "/sim", .config = node.sim_config};
  const std::vector<std::string> argv = {TESSERA_NODE_BIN,
                                         "--node-name=" + node.name,
                                         "--api-server=" + api_->url(),
                                         "--plugin-dir=" + node.dir + "/dp",
                                         "--pod-resources-socket=" + node.dir + "/podres/kubelet.sock",
                                         "--libvgpu-host-path=" + node.dir + "/lib/libvgpu.so",
                                         "--region-host-dir=" + node.dir + "/regions",
                                         "--region-container-dir=/tmp/tessera",
                                         "--nvml-library=" TESSERA_SIM_NVML,
                                         "--kubelet-poll-ms=50",
                                         "--monitor-interval-ms=200",
                                         "--heartbeat-seconds=2",
                                         "--region-grace-seconds=1",
                                         "--metrics-address=127.0.0.1",
                                         "--metrics-port=" + std::to_string(node.metrics_port),
                                         "--split-count=" + std::to_string(options_.split_count)};
  node.pid = SpawnLogged(argv, sim.Environment(), node.dir + "/node.log");
  if (node.pid < 0) return Error{"cannot start tessera-node for " + node.name};
  return Status::Ok();
}

void ChaosCluster::KillNode(int i) {
  std::lock_guard lock(nodes_[i]->mu);
  tessera::testing::KillAndWait(nodes_[i]->pid, SIGKILL);
}

bool ChaosCluster::NodeRunning(int i) const {
  std::lock_guard lock(nodes_[i]->mu);
  return nodes_[i]->pid > 0;
}

bool ChaosCluster::RestartKubelet(int i) {
  return nodes_[i]->kubelet->Restart();
}

Status ChaosCluster::StartScheduler(int r) {
  Scheduler& s = *schedulers_[r];
  {
    std::lock_guard lock(s.mu);
    if (s.pid > 0) return Status::Ok();
    // As deploy/scheduler runs it, with the periods shortened so that a
    // killed leader is replaced within seconds; the API timeout below the
    // reservation timeout, as the configuration requires.
    const std::vector<std::string> argv = {
        TESSERA_SCHEDULER_BIN,
        "--api-server=" + api_->url(),
        "--port=" + std::to_string(s.port),
        "--leader-elect=true",
        "--identity=" + SchedulerIdentity(r),
        "--set=dashboard.enabled=false",
        "--set=leaderElection.namespace=kube-system",
        "--set=leaderElection.leaseDurationSeconds=2",
        "--set=leaderElection.renewDeadlineSeconds=1.5",
        "--set=leaderElection.retryPeriodSeconds=0.25",
        "--set=kube.timeoutSeconds=2",
        "--set=leaderElection.takeoverSettleSeconds=" + FormatNumber(options_.takeover_settle_ms / 1000.0),
        "--set=reservationTimeoutSeconds=5",
        "--set=inventoryStaleSeconds=60"};
    s.pid = SpawnLogged(argv, {}, tmp_.Path("scheduler-" + std::to_string(r) + ".log"));
    if (s.pid < 0) return Error{"cannot start " + SchedulerIdentity(r)};
  }
  if (!WaitFor([&] { return HttpStatus(s.port, "/healthz") == 200; })) {
    return Error{SchedulerIdentity(r) + " never answered /healthz:\n" + Logs()};
  }
  return Status::Ok();
}

void ChaosCluster::KillScheduler(int r) {
  std::lock_guard lock(schedulers_[r]->mu);
  tessera::testing::KillAndWait(schedulers_[r]->pid, SIGKILL);
}

bool ChaosCluster::SchedulerRunning(int r) const {
  std::lock_guard lock(schedulers_[r]->mu);
  return schedulers_[r]->pid > 0;
}

int ChaosCluster::LeaseHolder() const {
  auto lease = api_->GetObject("leases", "kube-system", "tessera-scheduler");
  if (!lease) return -1;
  const std::string holder = lease->value("/spec/holderIdentity"_json_pointer, "");
  for (int r = 0; r < kSchedulers; ++r) {
    if (holder == SchedulerIdentity(r)) return r;
  }
  return -1;
}

std::string ChaosCluster::Logs() const {
  std::string all;
  auto tail = [](const std::string& text) {
    return text.size() > 6000 ? "...\n" + text.substr(text.size() - 6000) : text;
  };
  for (int r = 0; r < kSchedulers; ++r) {
    all += "--- " + SchedulerIdentity(r) + "\n" +
           tail(tessera::testing::ReadFileOrEmpty(tmp_.Path("scheduler-" + std::to_string(r) + ".log")));
  }
  for (const auto& n : nodes_) {
    all +=
        "--- tessera-node " + n->name + "\n" + tail(tessera::testing::ReadFileOrEmpty(n->dir + "/node.log"));
  }
  return all;
}

}  // namespace tessera::chaos
