// NodeConfig: everything tessera-node can be told, where it comes from, and how
// it is checked. Layers, later ones winning:
//   built-in defaults < YAML file (--config) < command-line flags
//   < the entry for this node (NODE_NAME) in the per-node overrides file.
// The per-node entry wins over flags because flags are set once for the whole
// DaemonSet while the overrides file names one node explicitly.
//
// Thread-safety: a NodeConfig is a plain value, built once at start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "contract/container_contract.h"
#include "host/paths.h"

namespace tessera::node {

// How NVIDIA_VISIBLE_DEVICES reaches a container (see docs/node.md).
enum class VisibleDevicesMode {
  kWebhook,    // Allocate leaves it alone: the webhook wires it from the pod's allocation annotation
  kDeviceIds,  // Allocate sets the UUIDs of the GPUs behind the device IDs the kubelet picked
  kAll,        // Allocate sets "all"; libvgpu hides the devices the allocation does not name
};

const char* VisibleDevicesModeName(VisibleDevicesMode mode);

// What a GPU container gets when tessera-scheduler did not place its pod (no
// tessera.io/allocation: a namespace the webhook skips, spec.nodeName set by
// hand, another scheduler). Allocate cannot tell such a container apart, so it
// tells libvgpu the policy, and libvgpu applies it when the container has no
// TESSERA_ALLOCATION (docs/node.md, "Pods tessera did not place").
enum class UnplacedPodsPolicy {
  kRefuse,    // no GPU is visible to it; the pod gets an Event saying why
  kWholeGpu,  // the GPUs behind the kubelet's device IDs, whole and unlimited, published as held
};

const char* UnplacedPodsPolicyName(UnplacedPodsPolicy policy);
bool ParseUnplacedPodsPolicy(const std::string& text, UnplacedPodsPolicy& out);

struct NodeConfig {
  // --- what is advertised -------------------------------------------------
  std::string resource_name = std::string(contract::kDefaultGpuResource);
  int split_count = 10;             // devices advertised per GPU (vGPUs that may share it)
  double memory_scaling = 1.0;      // memory offered = physical × this; > 1 oversubscribes
  double core_scaling = 1.0;        // compute offered = 100% × this per GPU
  bool disable_core_limit = false;  // libvgpu does not throttle compute

  // --- kubelet side -------------------------------------------------------
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  bool pre_start_required = false;
  int kubelet_poll_ms = 1000;  // how often the kubelet socket is checked for a restart

  // --- what Allocate mounts ---------------------------------------------
  std::string libvgpu_host_path = host::kDefaultLibvgpuPath;
  std::string libvgpu_container_path = host::kDefaultLibvgpuPath;
  bool ld_so_preload = true;  // mount a preload file over /etc/ld.so.preload
  std::string region_host_dir = host::kDefaultRegionHostDir;
  std::string region_container_dir = "/tmp/tessera";
  VisibleDevicesMode visible_devices = VisibleDevicesMode::kWebhook;
  UnplacedPodsPolicy unplaced_pods = UnplacedPodsPolicy::kRefuse;

  // --- discovery -----------------------------------------------------------
  std::string nvml_library = host::kNvmlLibraryName;

  // --- Kubernetes API: the inventory annotation, this node's pods, Events ---
  bool kubernetes = true;      // false: device plugin, metrics and enforcement only
  std::string kubeconfig;      // "" = in-cluster, then $KUBECONFIG, then ~/.kube/config
  std::string api_server;      // overrides the server URL (e.g. http://127.0.0.1:8080)
  int heartbeat_seconds = 30;  // the inventory is rewritten at least this often

  // --- kubelet PodResources (which pod owns which region) -------------------
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";  // "" = not used

  // --- DRA: tessera-dra's claim regions, enforced too (claim_regions.h) -----
  std::string dra_region_dir = "/var/lib/tessera/dra-regions";  // "" = not scanned
  // false: the enforcement-only role beside tessera-dra: no device plugin is
  // registered and no inventory published; metrics and enforcement run.
  bool device_plugin = true;

  // --- monitoring, metrics, enforcement ------------------------------------
  int monitor_interval_ms = 1000;  // GPU sampling, region scan, cleanup, enforcement
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 9394;         // 0 = no metrics endpoint
  int region_grace_seconds = 300;  // a region is kept at least this long after Allocate
  bool active_oom_killer = false;  // for containers that do not set ACTIVE_OOM_KILLER
  // true: active_oom_killer decides for every container and a container's own
  // ACTIVE_OOM_KILLER is ignored (a hostile tenant cannot turn kills into
  // reports); false: HAMi's convention, the container's variable wins.
  bool active_oom_killer_fixed = false;
  int memory_tolerance_mib = 64;  // driver-counted usage above the limit that is let pass
  // Compute enforcement (Enforcer::ComputePass): a container whose SM
  // utilisation stays above its gpucores + compute_tolerance_percent for
  // compute_window_passes passes is reported (report) or its offenders killed (kill).
  std::string compute_enforcement = "report";
  int compute_tolerance_percent = 10;
  int compute_window_passes = 3;

  // --- MIG (docs/node.md, "MIG") ------------------------------------------
  std::string mig_layout_file;  // mig-parted layout file; "" = tessera-node does not manage MIG
  std::string mig_config;       // configuration applied while the Node has no nvidia.com/mig.config label
  std::string mig_strategy = "mixed";  // single | mixed: how MIG devices are named as resources
  std::string mig_gpus = "all";        // MIG-managed GPU indices ("0,2") or "all"; the rest keep vGPU slices
  int mig_retry_seconds = 30;          // how often a layout blocked by an instance in use is tried again
  // GPUs in mig-dynamic mode: "none", "all" (every GPU with MIG) or indices ("0,2"); their MIG
  // instances are created at Allocate where tessera-scheduler placed them (node/mig/dynamic_mig.h)
  std::string mig_dynamic_gpus = "none";

  // --- sharing modes per GPU (docs/sharing.md; node/sharing/gpu_modes.h) ----
  // YAML text of a list of rules {gpus, mode, replicas?, ...}; in a YAML file
  // the key may be written as a list, which is kept here as its text. "" = none.
  std::string sharing;
  // NVIDIA's device-plugin config file (version: v1); its sharing.timeSlicing
  // or sharing.mps section puts the GPUs it selects in that mode. "" = none.
  std::string nvidia_config_file;
  // With nvidia_config_file a directory: the file used while the Node has no
  // nvidia.com/device-plugin.config label. "" = the directory's only file.
  std::string nvidia_config_default;
  // MPS (docs/sharing.md#mps; node/mps): each mps GPU's control daemon lives
  // in <mps_root>/<GPU uuid>/pipe and .../log; mps_control_binary is run for it.
  std::string mps_root = "/run/tessera/mps";
  std::string mps_control_binary = "nvidia-cuda-mps-control";

  // --- per-node overrides -------------------------------------------------
  std::string node_name;         // from NODE_NAME unless given
  std::string node_config_file;  // YAML: nodes: {<node name>: {split_count: .., ...}}

  std::string log_level = "info";  // trace|debug|info|warn|error

  // Derived paths.
  std::string KubeletSocketPath() const;  // <plugin_dir>/kubelet.sock
  std::string PluginSocketName() const;   // e.g. "tessera-nvidia.com-gpu.sock"
  std::string PluginSocketPath() const;
  // The file mounted over /etc/ld.so.preload: next to libvgpu on the host.
  std::string PreloadFileHostPath() const;
  // The shared-region file inside the container (CUDA_DEVICE_MEMORY_SHARED_CACHE).
  std::string RegionFileContainerPath() const;
};

// Checks ranges and shapes; the message names the key and what is accepted.
Status Validate(const NodeConfig& config);

// Applies the keys present in a YAML document to `config`. Unknown keys and
// wrongly typed values are errors (a typo must not silently keep a default).
Status ApplyYaml(const std::string& yaml_text, const std::string& source_name, NodeConfig& config);
Status ApplyYamlFile(const std::string& path, NodeConfig& config);

// Applies the entry for config.node_name from config.node_config_file, if both
// are set and the entry exists. Only node-level knobs may be overridden there.
Status ApplyNodeOverrides(NodeConfig& config);

// The outcome of parsing the command line.
struct CommandLine {
  NodeConfig config;
  bool exit_now = false;  // --help / --version were printed
  int exit_code = 0;
  std::string output;  // what --help/--version printed, or the error message
};

// Parses argv (CLI11), loading --config and the overrides file, then validates.
// On bad input: exit_now, exit_code 2, output = a message naming the problem.
// `env_node_name` is NODE_NAME from the environment (passed in for tests).
CommandLine ParseCommandLine(int argc, const char* const* argv, const std::string& env_node_name);

}  // namespace tessera::node
