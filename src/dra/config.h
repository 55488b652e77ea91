// DraConfig: everything tessera-dra (the DRA kubelet plugin, docs/dra.md) can
// be told. Defaults follow the kubelet's and the DRA helper's conventions;
// every key is a command-line flag (tessera-dra --help).
//
// Thread-safety: a plain value, built once at start.
#pragma once

#include <string>

#include "base/result.h"
#include "host/paths.h"

namespace tessera::dra {

// The DRA driver name: spec.driver of tessera's ResourceSlices, the domain of
// its attributes and capacities, the DeviceClass selectors' driver.
inline constexpr const char* kDefaultDriverName = "gpu.tessera.io";
// The CDI kind of the devices tessera-dra prepares (vendor/class).
inline constexpr const char* kCdiKind = "tessera.io/gpu";
// The opaque configuration tessera-dra reads from claims and classes.
inline constexpr const char* kConfigApiVersion = "tessera.io/v1alpha1";
inline constexpr const char* kGpuConfigKind = "GpuConfig";

// How the node's GPUs are published.
enum class DeviceMode {
  kVgpu,   // allowMultipleAllocations with consumable memory and cores: claims share a GPU, libvgpu enforces
  kWhole,  // one claim per GPU, no capacity policies
};
const char* DeviceModeName(DeviceMode mode);

struct DraConfig {
  std::string driver_name = kDefaultDriverName;
  std::string node_name;  // NODE_NAME; also the pool name

  // --- the kubelet ---------------------------------------------------------
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";  // <driver>-reg.sock goes here
  std::string plugins_dir = "/var/lib/kubelet/plugins";            // <driver>/dra.sock goes here
  // Checkpoint of prepared claims; "" = <plugins_dir>/<driver>.
  std::string state_dir;
  std::string cdi_dir = "/var/run/cdi";  // where the container runtime reads CDI specs

  // --- what a prepared claim gives the container (as tessera-node's Allocate)
  std::string libvgpu_host_path = host::kDefaultLibvgpuPath;
  std::string libvgpu_container_path = host::kDefaultLibvgpuPath;
  bool ld_so_preload = true;
  // Region directories, one per claim, and their limits directories beside
  // them. Not tessera-node's directory: its clean-up owns what is there.
  std::string region_host_dir = "/var/lib/tessera/dra-regions";
  std::string region_container_dir = "/tmp/tessera";
  // Adds /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia<index> to the CDI
  // spec (false on nodes without them, e.g. the simulated GPU).
  bool device_nodes = true;

  // --- ResourceSlices --------------------------------------------------------
  DeviceMode device_mode = DeviceMode::kVgpu;
  // Request policies (Kubernetes quantities) of the consumable capacities.
  // "" for a default = the device's whole capacity.
  std::string memory_default;
  std::string memory_min = "1Mi";
  std::string memory_step = "1Mi";
  std::string cores_default = "100";
  std::string cores_min = "1";
  std::string cores_step = "1";
  // GPUs published as MIG partitions (mig_partitions.h): "none", "all" (every
  // MIG-capable GPU) or indices ("0,2"). tessera-dra turns MIG mode on there
  // and owns their instances.
  std::string mig_gpus = "none";
  bool publish_slices = true;
  bool remove_slices_on_exit = false;
  int resync_seconds = 30;  // the inventory is re-read and the slices re-checked this often

  // --- discovery and the API ------------------------------------------------
  std::string nvml_library = host::kNvmlLibraryName;
  std::string kubeconfig;  // "" = in-cluster, then $KUBECONFIG, then ~/.kube/config
  std::string api_server;  // overrides the server URL

  std::string log_level = "info";

  std::string StateDir() const;
  std::string PluginDir() const;               // <plugins_dir>/<driver>
  std::string DraSocketPath() const;           // <plugin dir>/dra.sock
  std::string RegistrationSocketPath() const;  // <registry_dir>/<driver>-reg.sock
  std::string PreloadFileHostPath() const;     // ld.so.preload beside libvgpu on the host
  std::string RegionFileContainerPath() const;
};

// Checks names, paths and quantities; the message names the flag.
Status Validate(const DraConfig& config);

struct CommandLine {
  DraConfig config;
  bool exit_now = false;
  int exit_code = 0;
  std::string output;  // --help text or the error
};

// Parses argv; `env_node_name` is NODE_NAME. Bad input: exit_now, code 2.
CommandLine ParseCommandLine(int argc, const char* const* argv, const std::string& env_node_name);

}  // namespace tessera::dra
