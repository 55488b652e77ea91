// tessera-node in a stand-in cluster, for end-to-end tests of the node agent:
// the real tessera-node binary on the simulated GPU (src/sim), registered with
// the kubelet stand-in (device plugins + PodResources, tests/support/kubelet)
// and publishing to the API-server stand-in (tests/support/apiserver), which
// holds the Node object. "Containers" are real processes in their own mount
// namespace with the region directory Allocate made bind-mounted where
// Allocate said, as a container runtime does.
//
// How to use it: one NodeCluster per test (it owns a fresh temp directory).
//
//   NodeCluster cluster({.sim_gpus = "2xA100-80GB", .libvgpu = TESSERA_VGPU_LIB});
//   auto gpus = cluster.Start();                        // stand-ins up, Node created
//   ASSERT_TRUE(gpus.ok()) << gpus.error().message;
//   ASSERT_TRUE(cluster.StartNode({{"--split-count", "2"}}).ok());
//   ASSERT_TRUE(cluster.kubelet().WaitForRegistrations(1, 60s)) << cluster.NodeLog();
//   cluster.api().GetObject("nodes", "", cluster.node_name());
//   ... kubelet().AdmitContainer(...), StartContainer({...}), RunCli("sim inject-xid ...")
//
// Link `tessera_node_cluster` (tests/support/CMakeLists.txt); it is built
// with the paths of tessera-node, the simulator's libraries and the tessera
// CLI, and makes a test that links it depend on them. On failure, print
// NodeLog(): the node's stdout and stderr.
//
// Environment: Start() exports the simulated machine's variables into this
// process (SimGpu::Export), so in-process NVML calls, tessera-node and every
// child see the same GPUs. One cluster per process at a time.
//
// Thread-safety: none; drive a cluster from the test's thread. The stand-ins
// it owns are themselves thread-safe (api(), kubelet()).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apiserver/fake_apiserver.h"
#include "base/result.h"
#include "base/testing.h"
#include "core/allocation.h"
#include "core/device.h"
#include "core/inventory_codec.h"
#include "kubelet_standin.h"
#include "testing/process.h"
#include "testing/sim_gpu.h"

namespace tessera::testing {

struct NodeClusterOptions {
  std::string node_name = "gpu-node-1";
  // The simulated machine: TESSERA_SIM_GPUS, unless `sim_config` (TESSERA_SIM_CONFIG,
  // YAML text) is given, which the simulator prefers.
  std::string sim_gpus = "2xA100-80GB";
  std::string sim_config{};
  // Labels the Node object has when it is created.
  std::map<std::string, std::string> node_labels{};
  // The libvgpu.so copied to lib/libvgpu.so (tessera-node's --libvgpu-host-path);
  // empty: a stand-in file, for tests whose containers never load it.
  std::string libvgpu{};
  // The temp directory's name prefix; short, since unix socket paths are limited.
  std::string temp_prefix = "tnc";
};

// One "container" process (see NodeCluster::StartContainer).
struct ContainerProcess {
  // The kubelet's Allocate answer for the container: its mount at the
  // cluster's view/ gives the region directory, its envs the environment.
  const v1beta1::ContainerAllocateResponse* allocated = nullptr;
  // TESSERA_ALLOCATION (with TESSERA_CONTAINER_NAME = `container`); empty:
  // none, as for a pod the webhook never saw.
  std::string allocation{};
  std::string container = "main";
  // Variables set before the Allocate answer's (so that one of those wins).
  Env env{};
  // Whether LD_PRELOAD names the cluster's libvgpu.
  bool preload_libvgpu = true;
  // The program and its arguments, as /bin/sh words (not quoted for you).
  std::string command_line{};
  // Where stdout and stderr go (one file).
  std::string output{};
  // Also a pid namespace of its own, where the process is pid 1. The
  // simulated driver, like a real one, still names it by its host pid: it
  // reads the host's /proc, bind-mounted before the namespace's own is mounted
  // (TESSERA_SIM_PROC).
  bool own_pid_namespace = false;
};

class NodeCluster {
 public:
  explicit NodeCluster(NodeClusterOptions options = {});
  // Stop().
  ~NodeCluster();
  NodeCluster(const NodeCluster&) = delete;
  NodeCluster& operator=(const NodeCluster&) = delete;

  // Makes the directories under root() (dp, lib, regions, view, sim, podres),
  // exports the simulated machine's variables, starts the API-server stand-in
  // with the Node and the kubelet stand-in, and picks the metrics port.
  // Returns the machine's GPUs as NVML (the simulator's) reports them, which is
  // what tessera-node will find; an error names what did not start.
  Result<std::vector<core::Gpu>> Start();

  // The flags StartNode() gives tessera-node before its overrides: these
  // directories, the stand-ins, the simulator's NVML, fast polling (kubelet
  // 50 ms, monitor 200 ms, heartbeat 2 s), metrics on 127.0.0.1:metrics_port()
  // and four slices per GPU.
  std::map<std::string, std::string> DefaultNodeFlags() const;

  // Spawns tessera-node with DefaultNodeFlags(), `overrides` replacing or
  // adding flags ("--flag" -> value), its output in node.log. Does not wait for
  // it: a test waits for what it needs (kubelet().WaitForRegistrations, ...).
  Status StartNode(const std::map<std::string, std::string>& overrides = {});
  // SIGTERM to tessera-node, and waits for it (nothing when it is not running).
  void StopNode();
  pid_t node_pid() const { return node_; }

  // Kills the containers (SIGKILL), stops tessera-node and the stand-ins.
  // Idempotent.
  void Stop();

  // What tessera-node printed so far.
  std::string NodeLog() const;

  // The Node's inventory annotation, decoded; nullopt while absent or invalid.
  std::optional<core::NodeInventory> PublishedInventory() const;
  // The Node's label `key`; "" when absent.
  std::string Label(const std::string& key) const;
  // The messages of the Events on the Node with `reason`, oldest first.
  std::vector<std::string> NodeEvents(const std::string& reason) const;

  // Creates the pod as tessera-scheduler's bind leaves it: on this node,
  // Running, one container "main" whose allocation annotation gives it
  // `slices`. Returns the annotation's text (TESSERA_ALLOCATION), or why the
  // allocation could not be encoded or the pod created.
  Result<std::string> BindPod(const std::string& ns, const std::string& name,
                              std::vector<core::DeviceSlice> slices);

  // The host directory the Allocate answer bind-mounts at view/ (the region
  // directory); "" when it has no such mount.
  std::string RegionHostDir(const v1beta1::ContainerAllocateResponse& allocated) const;

  // Starts a "container" process: /usr/bin/unshare --mount, in which the
  // region directory is bind-mounted at view/ and `process.command_line` runs
  // with this process's environment, LD_LIBRARY_PATH on the simulator's
  // libraries, `process.env`, the allocation's variables, the Allocate
  // answer's, and LD_PRELOAD. Returns its pid (-1 when it could not start);
  // Stop() kills it unless ForgetContainer() was called.
  pid_t StartContainer(const ContainerProcess& process);
  // The test reaped `pid` itself: Stop() leaves it alone.
  void ForgetContainer(pid_t pid);

  // `tessera <args>` (the built CLI, `args` as /bin/sh words) on this
  // cluster's simulated machine; stdout and stderr merged.
  ShellOutcome RunCli(const std::string& args) const;

  const std::string& node_name() const { return options_.node_name; }
  const std::string& root() const { return tmp_.path(); }
  // root() + "/" + relative.
  std::string Path(const std::string& relative) const { return tmp_.Path(relative); }
  // The temp directory under which everything lives (Write, Read, MakeDir).
  const TempDir& dir() const { return tmp_; }
  const SimGpu& sim() const { return sim_; }
  int metrics_port() const { return metrics_port_; }
  // Valid after a successful Start().
  FakeApiServer& api() const { return *api_; }
  KubeletStandIn& kubelet() const { return *kubelet_; }

 private:
  NodeClusterOptions options_;
  TempDir tmp_;
  SimGpu sim_;
  std::unique_ptr<FakeApiServer> api_;
  std::unique_ptr<KubeletStandIn> kubelet_;
  int metrics_port_ = 0;
  pid_t node_ = -1;
  std::vector<pid_t> containers_;
};

// Whether this process may create mount namespaces (root / CAP_SYS_ADMIN),
// which StartContainer needs.
bool MountNamespacesWork();

}  // namespace tessera::testing
