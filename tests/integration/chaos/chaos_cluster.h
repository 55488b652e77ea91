// The cluster a chaos test runs against, every part a real process or a real
// protocol: the API-server stand-in (in this process, where the test injects
// its faults), `nodes` tessera-node binaries, each on its own simulated GPUs
// (src/sim, its own state directory and GPU UUIDs) with its own kubelet
// stand-in (device plugin and PodResources gRPC), and two tessera-scheduler
// binaries with leader election, as the shipped Deployment runs them.
//
// Kill*() sends SIGKILL (no clean-up runs) and reaps; Start*() brings the
// part back with the same flags, identity and directories, as a container
// restart does. RestartKubelet() is the kubelet stand-in's own restart
// (sockets wiped, pods kept).
//
// Thread-safety: every member may be called from any thread; one part is not
// started and killed at once from two threads (the chaos thread alone does).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "apiserver/fake_apiserver.h"
#include "base/result.h"
#include "base/testing.h"
#include "kubelet_standin.h"

namespace tessera::chaos {

struct ChaosClusterOptions {
  int nodes = 3;
  int gpus_per_node = 2;
  int split_count = 4;      // vGPU slots (device-plugin devices) per GPU
  uint64_t fault_seed = 1;  // the API-server stand-in's
  // The schedulers' leaderElection.takeoverSettleSeconds, in ms. The latest a
  // late answer lands is 3 s after it was sent (chaos_test.cc); a successor
  // leads at least 0.5 s (lease - renew) after the predecessor's last bind,
  // so 3 s covers it with room for the watch. 0 shows what happens without.
  int takeover_settle_ms = 3000;
  std::string temp_prefix = "tchaos";
};

class ChaosCluster {
 public:
  static constexpr int kSchedulers = 2;
  static constexpr const char* kResource = "nvidia.com/gpu";

  explicit ChaosCluster(ChaosClusterOptions options);
  // Stop().
  ~ChaosCluster();
  ChaosCluster(const ChaosCluster&) = delete;
  ChaosCluster& operator=(const ChaosCluster&) = delete;

  // The API-server stand-in with the Node objects, the kubelet stand-ins,
  // every tessera-node and both schedulers; returns once each node's plugin
  // registered and published its inventory and both schedulers answer
  // /healthz. An error names what did not come up.
  Status Start();
  // Stops everything (SIGTERM to the binaries); idempotent.
  void Stop();

  tessera::testing::FakeApiServer& api() const { return *api_; }
  const ChaosClusterOptions& options() const { return options_; }

  // Node `i` in [0, nodes).
  std::string NodeName(int i) const;
  // The UUID of GPU `g` of node `i` (fixed in the simulator's configuration).
  static std::string GpuUuid(int node, int gpu);
  tessera::testing::KubeletStandIn& kubelet(int i) const { return *nodes_[i]->kubelet; }
  std::string RegionDir(int i) const;
  int NodeMetricsPort(int i) const { return nodes_[i]->metrics_port; }
  Status StartNode(int i);
  void KillNode(int i);
  bool NodeRunning(int i) const;
  bool RestartKubelet(int i);

  // Scheduler replica `r` in [0, kSchedulers).
  int SchedulerPort(int r) const { return schedulers_[r]->port; }
  std::string SchedulerIdentity(int r) const;
  Status StartScheduler(int r);
  void KillScheduler(int r);
  bool SchedulerRunning(int r) const;
  // The replica the Lease names (it may be dead: a Lease outlives its
  // holder until it expires); -1 when none.
  int LeaseHolder() const;

  // The logs of every binary, for a failure message.
  std::string Logs() const;

 private:
  struct Node {
    std::string name;
    std::string dir;  // root()/n<i>
    std::string sim_config;
    int metrics_port = 0;
    std::unique_ptr<tessera::testing::KubeletStandIn> kubelet;
    mutable std::mutex mu;
    pid_t pid = -1;  // guarded by mu
  };
  struct Scheduler {
    int port = 0;
    mutable std::mutex mu;
    pid_t pid = -1;  // guarded by mu
  };

  const ChaosClusterOptions options_;
  tessera::testing::TempDir tmp_;
  std::unique_ptr<tessera::testing::FakeApiServer> api_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Scheduler>> schedulers_;
};

}  // namespace tessera::chaos
