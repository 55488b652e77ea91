#include "dra/config.h"

#include <CLI/CLI.hpp>

#include <sstream>

#include "base/files.h"
#include "base/log.h"
#include "core/quantity.h"

namespace tessera::dra {
namespace {

bool IsDnsSubdomain(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && c != '-' && c != '.') return false;
    if ((i == 0 || i + 1 == name.size()) && !alnum) return false;
  }
  return true;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status CheckQuantity(const std::string& flag, const std::string& text, bool allow_empty) {
  if (text.empty()) {
    if (allow_empty) return Status::Ok();
    return Error{flag + " is empty"};
  }
  auto q = core::Quantity::Parse(text);
  if (!q.ok()) return Error{flag + ": " + q.error().message};
  if (q->IsNegative()) return Error{flag + " is negative: '" + text + "'"};
  if (!q->IsInteger()) return Error{flag + " is not a whole number: '" + text + "'"};
  return Status::Ok();
}

}  // namespace

const char* DeviceModeName(DeviceMode mode) {
  return mode == DeviceMode::kVgpu ? "vgpu" : "whole";
}

std::string DraConfig::StateDir() const {
  return state_dir.empty() ? PluginDir() : state_dir;
}
std::string DraConfig::PluginDir() const {
  return files::Join(plugins_dir, driver_name);
}
std::string DraConfig::DraSocketPath() const {
  return files::Join(PluginDir(), "dra.sock");
}
std::string DraConfig::RegistrationSocketPath() const {
  return files::Join(registry_dir, driver_name + "-reg.sock");
}
std::string DraConfig::PreloadFileHostPath() const {
  return files::Join(Dirname(libvgpu_host_path), "ld.so.preload");
}
std::string DraConfig::RegionFileContainerPath() const {
  return files::Join(region_container_dir, host::kRegionFileName);
}

Status Validate(const DraConfig& c) {
  if (!IsDnsSubdomain(c.driver_name)) {
    return Error{"--driver-name '" + c.driver_name +
                 "' is not a DNS subdomain of at most 63 characters (lower-case letters, digits, '-', '.')"};
  }
  if (c.node_name.empty()) return Error{"the node name is empty: set NODE_NAME or --node-name"};
  for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--registry-dir", c.registry_dir},
                                   {"--plugins-dir", c.plugins_dir},
                                   {"--cdi-dir", c.cdi_dir},
                                   {"--region-host-dir", c.region_host_dir},
                                   {"--region-container-dir", c.region_container_dir},
                                   {"--libvgpu-host-path", c.libvgpu_host_path},
                                   {"--libvgpu-container-path", c.libvgpu_container_path}}) {
    if (path.empty() || path[0] != '/') return Error{flag + " must be an absolute path, not '" + path + "'"};
  }
  if (!c.state_dir.empty() && c.state_dir[0] != '/') {
    return Error{"--state-dir must be an absolute path, not '" + c.state_dir + "'"};
  }
  // A unix socket path holds at most 107 bytes.
  if (c.DraSocketPath().size() > 107 || c.RegistrationSocketPath().size() > 107) {
    return Error{"the socket paths '" + c.DraSocketPath() + "' and '" + c.RegistrationSocketPath() +
                 "' must be at most 107 bytes"};
  }
  TESSERA_RETURN_IF_ERROR(CheckQuantity("--memory-default", c.memory_default, true));
  TESSERA_RETURN_IF_ERROR(CheckQuantity("--memory-min", c.memory_min, false));
  TESSERA_RETURN_IF_ERROR(CheckQuantity("--memory-step", c.memory_step, false));
  TESSERA_RETURN_IF_ERROR(CheckQuantity("--cores-default", c.cores_default, true));
  TESSERA_RETURN_IF_ERROR(CheckQuantity("--cores-min", c.cores_min, false));
  TESSERA_RETURN_IF_ERROR(CheckQuantity("--cores-step", c.cores_step, false));
  if (core::Quantity::Parse(c.memory_step)->IsZero() || core::Quantity::Parse(c.cores_step)->IsZero()) {
    return Error{"--memory-step and --cores-step must be above zero"};
  }
  if (!c.cores_default.empty() && *core::Quantity::Parse(c.cores_default)->ToInteger() > 100) {
    return Error{"--cores-default is above 100 (percent of a GPU)"};
  }
  if (*core::Quantity::Parse(c.cores_min)->ToInteger() > 100) {
    return Error{"--cores-min is above 100 (percent of a GPU)"};
  }
  if (c.resync_seconds < 1) return Error{"--resync-seconds must be at least 1"};
  if (c.mig_gpus != "none" && c.mig_gpus != "all" &&
      (c.mig_gpus.empty() || c.mig_gpus.find_first_not_of("0123456789,") != std::string::npos ||
       c.mig_gpus.front() == ',' || c.mig_gpus.back() == ',' || c.mig_gpus.find(",,") != std::string::npos)) {
    return Error{"--mig-gpus '" + c.mig_gpus + "' is not none, all or GPU indices such as 0,2"};
  }
  if (!log::ParseLevel(c.log_level).ok()) {
    return Error{"--log-level '" + c.log_level + "' is not one of trace, debug, info, warn, error"};
  }
  return Status::Ok();
}

CommandLine ParseCommandLine(int argc, const char* const* argv, const std::string& env_node_name) {
  CommandLine out;
  DraConfig& c = out.config;
  c.node_name = env_node_name;
  CLI::App app{"tessera-dra: tessera's Dynamic Resource Allocation kubelet plugin (docs/dra.md)",
               "tessera-dra"};
  app.add_option("--driver-name", c.driver_name, "DRA driver name (ResourceSlices, DeviceClasses)");
  app.add_option("--node-name", c.node_name, "this node's name (default: $NODE_NAME); also the pool name");
  app.add_option("--registry-dir", c.registry_dir, "kubelet plugin registry directory");
  app.add_option("--plugins-dir", c.plugins_dir, "kubelet plugins directory (<driver>/dra.sock)");
  app.add_option("--state-dir", c.state_dir, "checkpoint directory (default <plugins-dir>/<driver>)");
  app.add_option("--cdi-dir", c.cdi_dir, "CDI spec directory the container runtime reads");
  app.add_option("--libvgpu-host-path", c.libvgpu_host_path, "libvgpu.so on the host");
  app.add_option("--libvgpu-container-path", c.libvgpu_container_path, "where libvgpu.so is mounted");
  app.add_option("--ld-so-preload", c.ld_so_preload, "mount a preload file over /etc/ld.so.preload");
  app.add_option("--region-host-dir", c.region_host_dir, "host directory of per-claim region directories");
  app.add_option("--region-container-dir", c.region_container_dir, "where the region directory is mounted");
  app.add_option("--device-nodes", c.device_nodes, "add /dev/nvidia* device nodes to CDI specs");
  std::string mode = DeviceModeName(c.device_mode);
  app.add_option("--device-mode", mode, "vgpu (shared, consumable memory and cores) or whole")
      ->check(CLI::IsMember({"vgpu", "whole"}));
  app.add_option("--memory-default", c.memory_default, "memory request policy default (\"\" = whole GPU)");
  app.add_option("--memory-min", c.memory_min, "memory request policy validRange.min");
  app.add_option("--memory-step", c.memory_step, "memory request policy validRange.step");
  app.add_option("--cores-default", c.cores_default, "cores request policy default (\"\" = 100)");
  app.add_option("--cores-min", c.cores_min, "cores request policy validRange.min");
  app.add_option("--cores-step", c.cores_step, "cores request policy validRange.step");
  app.add_option("--mig-gpus", c.mig_gpus, "GPUs published as MIG partitions: none, all or indices (0,2)");
  app.add_option("--publish-slices", c.publish_slices, "publish ResourceSlices for this node");
  app.add_option("--remove-slices-on-exit", c.remove_slices_on_exit, "delete this node's slices on SIGTERM");
  app.add_option("--resync-seconds", c.resync_seconds, "how often the inventory and slices are re-checked");
  app.add_option("--nvml-library", c.nvml_library, "NVML library to load");
  app.add_option("--kubeconfig", c.kubeconfig, "kubeconfig (default: in-cluster)");
  app.add_option("--api-server", c.api_server, "API server URL override");
  app.add_option("--log-level", c.log_level, "trace|debug|info|warn|error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out.exit_now = true;
    out.output = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    out.exit_now = true;
    out.exit_code = 2;
    out.output = std::string("tessera-dra: ") + e.what();
    return out;
  }
  c.device_mode = mode == "whole" ? DeviceMode::kWhole : DeviceMode::kVgpu;
  if (auto s = Validate(c); !s.ok()) {
    out.exit_now = true;
    out.exit_code = 2;
    out.output = "tessera-dra: invalid configuration: " + s.error().message;
  }
  return out;
}

}  // namespace tessera::dra
