#include "node/config.h"

#include "base/files.h"
#include "base/log.h"
#include "base/yaml_config.h"
#include "contract/container_contract.h"
#include "node/mig/mig_settings.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

namespace tessera::node {
namespace {

constexpr size_t kMaxUnixSocketPath = 107;  // sizeof(sockaddr_un::sun_path) - 1

std::string Dirname(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The spelling of each enumerator in the configuration, in declaration order.
const std::vector<std::string> kVisibleDevicesNames = {"webhook", "device-ids", "all"};
const std::vector<std::string> kUnplacedPodsNames = {std::string(contract::kUnplacedRefuse),
                                                     std::string(contract::kUnplacedWholeGpu)};

template <typename Enum>
bool ParseName(const std::vector<std::string>& names, const std::string& text, Enum& out) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (text == names[i]) {
      out = static_cast<Enum>(i);
      return true;
    }
  }
  return false;
}

bool ParseVisibleDevices(const std::string& text, VisibleDevicesMode& out) {
  return ParseName(kVisibleDevicesNames, text, out);
}

// The YAML keys, each bound to its field of `c` (base/yaml_config.h has the
// rules every key follows).
config::YamlConfig YamlKeys(NodeConfig& c) {
  config::YamlConfig keys(" (see tessera-node --help for the accepted keys)");
  keys.String("resource_name", &c.resource_name)
      .Int("split_count", &c.split_count)
      .Number("memory_scaling", &c.memory_scaling)
      .Number("core_scaling", &c.core_scaling)
      .Bool("disable_core_limit", &c.disable_core_limit)
      .String("plugin_dir", &c.plugin_dir)
      .Bool("pre_start_required", &c.pre_start_required)
      .Int("kubelet_poll_ms", &c.kubelet_poll_ms)
      .String("libvgpu_host_path", &c.libvgpu_host_path)
      .String("libvgpu_container_path", &c.libvgpu_container_path)
      .Bool("ld_so_preload", &c.ld_so_preload)
      .String("region_host_dir", &c.region_host_dir)
      .String("region_container_dir", &c.region_container_dir)
      .Choice(
          "visible_devices", kVisibleDevicesNames,
          [&c](const std::string& v) { ParseVisibleDevices(v, c.visible_devices); },
          [&c] { return std::string(VisibleDevicesModeName(c.visible_devices)); })
      .Choice(
          "unplaced_pods", kUnplacedPodsNames,
          [&c](const std::string& v) { ParseUnplacedPodsPolicy(v, c.unplaced_pods); },
          [&c] { return std::string(UnplacedPodsPolicyName(c.unplaced_pods)); })
      .String("nvml_library", &c.nvml_library)
      .Bool("kubernetes", &c.kubernetes)
      .String("kubeconfig", &c.kubeconfig)
      .String("api_server", &c.api_server)
      .Int("heartbeat_seconds", &c.heartbeat_seconds)
      .String("pod_resources_socket", &c.pod_resources_socket)
      .Int("monitor_interval_ms", &c.monitor_interval_ms)
      .String("metrics_address", &c.metrics_address)
      .Int("metrics_port", &c.metrics_port)
      .Int("region_grace_seconds", &c.region_grace_seconds)
      .Bool("active_oom_killer", &c.active_oom_killer)
      .Int("memory_tolerance_mib", &c.memory_tolerance_mib)
      .String("mig_layout_file", &c.mig_layout_file)
      .String("mig_config", &c.mig_config)
      .String("mig_strategy", &c.mig_strategy)
      .String("mig_gpus", &c.mig_gpus)
      .Int("mig_retry_seconds", &c.mig_retry_seconds)
      .String("node_name", &c.node_name)
      .String("node_config_file", &c.node_config_file)
      .String("log_level", &c.log_level);
  return keys;
}

// The keys a node's entry in the overrides file may set.
Status AllowPerNode(const std::string& key) {
  static const std::set<std::string> kNodeLevel = {
      "split_count",   "memory_scaling",    "core_scaling",        "disable_core_limit",
      "ld_so_preload", "active_oom_killer", "memory_tolerance_mib"};
  if (kNodeLevel.count(key)) return Status::Ok();
  return Error{"key '" + key +
               "' cannot be overridden per node (allowed: split_count, memory_scaling, core_scaling, "
               "disable_core_limit, ld_so_preload, active_oom_killer, memory_tolerance_mib)"};
}

bool IsDnsLabelChar(char c) {
  return std::islower(static_cast<unsigned char>(c)) || std::isdigit(c) || c == '-';
}

Status ValidateResourceName(const std::string& name) {
  const std::string what = "resource_name '" + name + "'";
  auto slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) {
    return Error{what + " must be '<domain>/<name>', e.g. nvidia.com/gpu"};
  }
  std::string domain = name.substr(0, slash);
  std::string leaf = name.substr(slash + 1);
  if (domain.empty() || domain.find('.') == std::string::npos ||
      !std::all_of(domain.begin(), domain.end(), [](char c) { return IsDnsLabelChar(c) || c == '.'; })) {
    return Error{what + ": the domain must be a lower-case DNS name such as nvidia.com"};
  }
  if (domain == "kubernetes.io" || (domain.size() > 14 && domain.ends_with(".kubernetes.io"))) {
    return Error{what + ": the kubernetes.io domain is reserved for built-in resources"};
  }
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (leaf.empty() || leaf.size() > 63 || !alnum(leaf.front()) || !alnum(leaf.back()) ||
      !std::all_of(leaf.begin(), leaf.end(),
                   [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; })) {
    return Error{what +
                 ": the name after '/' must be 1-63 letters, digits, '-', '_' or '.', starting and ending "
                 "with a letter or digit"};
  }
  return Status::Ok();
}

Status RequireAbsolute(const char* key, const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return Error{std::string(key) + " must be an absolute path, got '" + path + "'"};
  }
  return Status::Ok();
}

}  // namespace

const char* UnplacedPodsPolicyName(UnplacedPodsPolicy policy) {
  return kUnplacedPodsNames.at(static_cast<size_t>(policy)).c_str();
}

bool ParseUnplacedPodsPolicy(const std::string& text, UnplacedPodsPolicy& out) {
  return ParseName(kUnplacedPodsNames, text, out);
}

const char* VisibleDevicesModeName(VisibleDevicesMode mode) {
  return kVisibleDevicesNames.at(static_cast<size_t>(mode)).c_str();
}

std::string NodeConfig::KubeletSocketPath() const {
  return files::Join(plugin_dir, "kubelet.sock");
}

std::string NodeConfig::PluginSocketName() const {
  std::string name = resource_name;
  std::replace(name.begin(), name.end(), '/', '-');
  return "tessera-" + name + ".sock";
}

std::string NodeConfig::PluginSocketPath() const {
  return files::Join(plugin_dir, PluginSocketName());
}

std::string NodeConfig::PreloadFileHostPath() const {
  return files::Join(Dirname(libvgpu_host_path), "ld.so.preload");
}

std::string NodeConfig::RegionFileContainerPath() const {
  return files::Join(region_container_dir, host::kRegionFileName);
}

Status Validate(const NodeConfig& c) {
  TESSERA_RETURN_IF_ERROR(ValidateResourceName(c.resource_name));
  if (c.split_count < 1 || c.split_count > 1024) {
    return Error{"split_count must be between 1 and 1024, got " + std::to_string(c.split_count)};
  }
  if (!(c.memory_scaling > 0.0) || c.memory_scaling > 100.0) {
    return Error{"memory_scaling must be > 0 and <= 100 (1 = physical memory, > 1 = oversubscription), got " +
                 std::to_string(c.memory_scaling)};
  }
  if (!(c.core_scaling >= 0.01) || c.core_scaling > 100.0) {
    return Error{
        "core_scaling must be between 0.01 and 100 (1 = the whole GPU, > 1 oversubscribes compute), got " +
        std::to_string(c.core_scaling)};
  }
  if (c.kubelet_poll_ms < 10 || c.kubelet_poll_ms > 60000) {
    return Error{"kubelet_poll_ms must be between 10 and 60000, got " + std::to_string(c.kubelet_poll_ms)};
  }
  for (auto [key, path] :
       {std::pair{"plugin_dir", &c.plugin_dir}, std::pair{"libvgpu_host_path", &c.libvgpu_host_path},
        std::pair{"libvgpu_container_path", &c.libvgpu_container_path},
        std::pair{"region_host_dir", &c.region_host_dir},
        std::pair{"region_container_dir", &c.region_container_dir}}) {
    TESSERA_RETURN_IF_ERROR(RequireAbsolute(key, *path));
  }
  if (c.PluginSocketPath().size() > kMaxUnixSocketPath || c.KubeletSocketPath().size() > kMaxUnixSocketPath) {
    return Error{"plugin_dir '" + c.plugin_dir + "' is too long: socket paths must fit in " +
                 std::to_string(kMaxUnixSocketPath) + " bytes"};
  }
  if (c.nvml_library.empty()) return Error{"nvml_library must not be empty"};
  if (c.heartbeat_seconds < 1 || c.heartbeat_seconds > 3600) {
    return Error{"heartbeat_seconds must be between 1 and 3600, got " + std::to_string(c.heartbeat_seconds)};
  }
  if (!c.pod_resources_socket.empty()) {
    TESSERA_RETURN_IF_ERROR(RequireAbsolute("pod_resources_socket", c.pod_resources_socket));
    if (c.pod_resources_socket.size() > kMaxUnixSocketPath) {
      return Error{"pod_resources_socket '" + c.pod_resources_socket +
                   "' is too long for a unix socket path"};
    }
  }
  if (c.monitor_interval_ms < 100 || c.monitor_interval_ms > 60000) {
    return Error{"monitor_interval_ms must be between 100 and 60000, got " +
                 std::to_string(c.monitor_interval_ms)};
  }
  if (c.metrics_port < 0 || c.metrics_port > 65535) {
    return Error{"metrics_port must be between 1 and 65535 (0 = no metrics endpoint), got " +
                 std::to_string(c.metrics_port)};
  }
  if (c.metrics_port > 0 && c.metrics_address.empty()) return Error{"metrics_address must not be empty"};
  if (c.region_grace_seconds < 0 || c.region_grace_seconds > 7 * 86400) {
    return Error{"region_grace_seconds must be between 0 and 604800, got " +
                 std::to_string(c.region_grace_seconds)};
  }
  if (c.memory_tolerance_mib < 0 || c.memory_tolerance_mib > 1048576) {
    return Error{"memory_tolerance_mib must be between 0 and 1048576, got " +
                 std::to_string(c.memory_tolerance_mib)};
  }
  TESSERA_RETURN_IF_ERROR(mig::ValidateMigSettings(c));
  if (!log::ParseLevel(c.log_level).ok()) {
    return Error{"log_level '" + c.log_level + "' must be trace, debug, info, warn or error"};
  }
  return Status::Ok();
}

Status ApplyYaml(const std::string& yaml_text, const std::string& source_name, NodeConfig& config) {
  return YamlKeys(config).Apply(yaml_text, source_name);
}

Status ApplyYamlFile(const std::string& path, NodeConfig& config) {
  TESSERA_ASSIGN_OR_RETURN_WRAP(const std::string text, files::Read(path), "config file");
  return ApplyYaml(text, path, config);
}

Status ApplyNodeOverrides(NodeConfig& config) {
  if (config.node_config_file.empty()) return Status::Ok();
  TESSERA_ASSIGN_OR_RETURN_WRAP(const std::string text, files::Read(config.node_config_file),
                                "node_config_file");
  const std::string& source = config.node_config_file;
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return Status::Ok();
    if (!root.IsMap() || (root["nodes"] && !root["nodes"].IsMap() && !root["nodes"].IsNull()) ||
        root.size() != (root["nodes"] ? 1u : 0u)) {
      return Error{
          source +
          ": expected 'nodes:' mapping node names to overrides, e.g. nodes: {gpu-1: {split_count: 4}}"};
    }
    YAML::Node nodes = root["nodes"];
    if (!nodes) return Status::Ok();
    // Every entry is checked, not only ours: a typo for another node is still a typo.
    for (const auto& entry : nodes) {
      NodeConfig scratch = config;
      std::string name = entry.first.as<std::string>();
      TESSERA_RETURN_IF_ERROR(
          YamlKeys(scratch).Apply(entry.second, source + ": node '" + name + "'", AllowPerNode));
      TESSERA_RETURN_IF_ERROR_WRAP(Validate(scratch), source + ": node '" + name + "'");
    }
    if (config.node_name.empty()) return Status::Ok();
    if (YAML::Node mine = nodes[config.node_name]) {
      return YamlKeys(config).Apply(mine, source + ": node '" + config.node_name + "'", AllowPerNode);
    }
    return Status::Ok();
  } catch (const YAML::Exception& e) {
    return Error{source + ": not valid YAML: " + e.what()};
  }
}

CommandLine ParseCommandLine(int argc, const char* const* argv, const std::string& env_node_name) {
  CommandLine result;
  NodeConfig flags;  // flag values land here; only the ones given are copied over
  std::string config_file;
  std::string visible_devices = "webhook";
  std::string unplaced_pods = "refuse";

  CLI::App app{
      "tessera-node: the tessera agent on a GPU node. Discovers GPUs through NVML, serves the kubelet\n"
      "device-plugin API (v1beta1) for the configured resource and mounts libvgpu into GPU containers,\n"
      "publishes the node's GPU inventory for tessera-scheduler, ties each container's region to its pod\n"
      "(kubelet PodResources) and removes those of pods that are gone, serves Prometheus metrics, and\n"
      "kills processes that take their container past its memory limit behind libvgpu's back when\n"
      "ACTIVE_OOM_KILLER says so. Settings come from built-in defaults, then --config, then flags, then\n"
      "this node's entry in the per-node overrides file. Every flag has a YAML key of the same name with\n"
      "'_' for '-'. docs/node.md has the deployment, every key and every metric.",
      "tessera-node"};
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(36);

  std::vector<std::pair<CLI::Option*, std::function<void(NodeConfig&)>>> bound;
  auto bind = [&](CLI::Option* opt, std::function<void(NodeConfig&)> copy) {
    bound.emplace_back(opt, std::move(copy));
  };

  app.add_option("-c,--config", config_file, "YAML configuration file (keys as below, '_' for '-')");
  bind(app.add_option("--resource-name", flags.resource_name, "extended resource advertised to the kubelet"),
       [&](NodeConfig& c) { c.resource_name = flags.resource_name; });
  bind(app.add_option("--split-count", flags.split_count,
                      "devices advertised per GPU: how many vGPUs may share one GPU (1-1024)"),
       [&](NodeConfig& c) { c.split_count = flags.split_count; });
  bind(app.add_option("--memory-scaling", flags.memory_scaling,
                      "memory offered per GPU = physical memory x this; > 1 oversubscribes (sets "
                      "CUDA_OVERSUBSCRIBE in containers)"),
       [&](NodeConfig& c) { c.memory_scaling = flags.memory_scaling; });
  bind(app.add_option("--core-scaling", flags.core_scaling,
                      "compute offered per GPU = 100% x this (0.01-100); > 1 oversubscribes compute"),
       [&](NodeConfig& c) { c.core_scaling = flags.core_scaling; });
  bind(app.add_flag("--disable-core-limit", flags.disable_core_limit,
                    "do not throttle compute in containers (sets GPU_CORE_UTILIZATION_POLICY=disable)"),
       [&](NodeConfig& c) { c.disable_core_limit = flags.disable_core_limit; });
  bind(app.add_option(
           "--plugin-dir", flags.plugin_dir,
           "kubelet device-plugin directory: kubelet.sock is there and the plugin socket is made there"),
       [&](NodeConfig& c) { c.plugin_dir = flags.plugin_dir; });
  bind(app.add_flag("--pre-start-required", flags.pre_start_required,
                    "ask the kubelet to call PreStartContainer before each container start"),
       [&](NodeConfig& c) { c.pre_start_required = flags.pre_start_required; });
  bind(app.add_option("--kubelet-poll-ms", flags.kubelet_poll_ms,
                      "how often kubelet.sock is checked for a kubelet restart (10-60000)"),
       [&](NodeConfig& c) { c.kubelet_poll_ms = flags.kubelet_poll_ms; });
  bind(app.add_option("--libvgpu-host-path", flags.libvgpu_host_path,
                      "libvgpu.so on the host; the ld.so.preload file is written next to it"),
       [&](NodeConfig& c) { c.libvgpu_host_path = flags.libvgpu_host_path; });
  bind(app.add_option("--libvgpu-container-path", flags.libvgpu_container_path,
                      "where libvgpu.so is mounted inside GPU containers"),
       [&](NodeConfig& c) { c.libvgpu_container_path = flags.libvgpu_container_path; });
  bind(app.add_flag("--ld-so-preload", flags.ld_so_preload,
                    "mount a preload file over /etc/ld.so.preload (default true); --ld-so-preload=false sets "
                    "LD_PRELOAD "
                    "instead"),
       [&](NodeConfig& c) { c.ld_so_preload = flags.ld_so_preload; });
  bind(app.add_option("--region-host-dir", flags.region_host_dir,
                      "host directory holding one region directory per GPU container"),
       [&](NodeConfig& c) { c.region_host_dir = flags.region_host_dir; });
  bind(app.add_option("--region-container-dir", flags.region_container_dir,
                      "where a container's region directory is mounted (libvgpu's default is /tmp/tessera)"),
       [&](NodeConfig& c) { c.region_container_dir = flags.region_container_dir; });
  bind(app.add_option(
              "--visible-devices", visible_devices,
              "who sets NVIDIA_VISIBLE_DEVICES: webhook (Downward API), device-ids (from the kubelet's "
              "picks) or all")
           ->check(CLI::IsMember(kVisibleDevicesNames)),
       [&](NodeConfig& c) { ParseVisibleDevices(visible_devices, c.visible_devices); });
  bind(app.add_option("--unplaced-pods", unplaced_pods,
                      "GPU containers of pods tessera-scheduler did not place (no allocation annotation): "
                      "refuse (no GPU visible, an Event on the pod) or whole-gpu (the kubelet's GPUs whole, "
                      "published as held so the scheduler places nothing else there)")
           ->check(CLI::IsMember(kUnplacedPodsNames)),
       [&](NodeConfig& c) { ParseUnplacedPodsPolicy(unplaced_pods, c.unplaced_pods); });
  bind(app.add_option("--nvml-library", flags.nvml_library, "NVML library to dlopen"),
       [&](NodeConfig& c) { c.nvml_library = flags.nvml_library; });
  bind(app.add_option("--kubernetes", flags.kubernetes,
                      "talk to the API server: publish the GPU inventory annotation, watch this node's pods, "
                      "record Events (false: device plugin, metrics and enforcement only; the scheduler then "
                      "cannot place pods here)"),
       [&](NodeConfig& c) { c.kubernetes = flags.kubernetes; });
  bind(app.add_option("--kubeconfig", flags.kubeconfig,
                      "kubeconfig file (default: in-cluster service account, then $KUBECONFIG, then "
                      "~/.kube/config)"),
       [&](NodeConfig& c) { c.kubeconfig = flags.kubeconfig; });
  bind(app.add_option("--api-server", flags.api_server, "API server URL, overriding the one configured"),
       [&](NodeConfig& c) { c.api_server = flags.api_server; });
  bind(app.add_option("--heartbeat-seconds", flags.heartbeat_seconds,
                      "the GPU inventory annotation is rewritten at least this often (1-3600); changes are "
                      "written at once"),
       [&](NodeConfig& c) { c.heartbeat_seconds = flags.heartbeat_seconds; });
  bind(app.add_option(
           "--pod-resources-socket", flags.pod_resources_socket,
           "the kubelet's PodResources socket, to learn which pod owns each region (\"\" = not used: "
           "regions are then never removed)"),
       [&](NodeConfig& c) { c.pod_resources_socket = flags.pod_resources_socket; });
  bind(app.add_option("--monitor-interval-ms", flags.monitor_interval_ms,
                      "how often GPUs are sampled, regions read and cleaned up and memory limits enforced "
                      "(100-60000)"),
       [&](NodeConfig& c) { c.monitor_interval_ms = flags.monitor_interval_ms; });
  bind(app.add_option("--metrics-address", flags.metrics_address, "address the metrics endpoint listens on"),
       [&](NodeConfig& c) { c.metrics_address = flags.metrics_address; });
  bind(app.add_option("--metrics-port", flags.metrics_port,
                      "port of the Prometheus endpoint /metrics (and /healthz); 0 = none"),
       [&](NodeConfig& c) { c.metrics_port = flags.metrics_port; });
  bind(app.add_option("--region-grace-seconds", flags.region_grace_seconds,
                      "a region directory is kept at least this long after Allocate before it may be removed "
                      "for want of an owner"),
       [&](NodeConfig& c) { c.region_grace_seconds = flags.region_grace_seconds; });
  bind(app.add_option(
           "--active-oom-killer", flags.active_oom_killer,
           "for containers that do not set ACTIVE_OOM_KILLER: kill a process whose container is over "
           "its memory limit as the driver counts it (false: report it only)"),
       [&](NodeConfig& c) { c.active_oom_killer = flags.active_oom_killer; });
  bind(app.add_option("--memory-tolerance-mib", flags.memory_tolerance_mib,
                      "driver-counted usage above a container's limit that enforcement lets pass (rounding)"),
       [&](NodeConfig& c) { c.memory_tolerance_mib = flags.memory_tolerance_mib; });
  bind(app.add_option(
           "--mig-layout-file", flags.mig_layout_file,
           "mig-parted layout file (version: v1) whose configuration the Node's nvidia.com/mig.config "
           "label names; \"\" = MIG not managed"),
       [&](NodeConfig& c) { c.mig_layout_file = flags.mig_layout_file; });
  bind(
      app.add_option("--mig-config", flags.mig_config,
                     "the layout's configuration to apply while the Node has no nvidia.com/mig.config label"),
      [&](NodeConfig& c) { c.mig_config = flags.mig_config; });
  bind(app.add_option("--mig-strategy", flags.mig_strategy,
                      "MIG devices as nvidia.com/gpu (single: one profile everywhere) or "
                      "nvidia.com/mig-<profile> (mixed)")
           ->check(CLI::IsMember({"single", "mixed"})),
       [&](NodeConfig& c) { c.mig_strategy = flags.mig_strategy; });
  bind(app.add_option("--mig-gpus", flags.mig_gpus,
                      "GPU indices whose MIG layout tessera-node manages (\"0,2\") or all; the others keep "
                      "vGPU slices"),
       [&](NodeConfig& c) { c.mig_gpus = flags.mig_gpus; });
  bind(app.add_option("--mig-retry-seconds", flags.mig_retry_seconds,
                      "how often a MIG layout blocked by an instance in use is tried again (1-3600)"),
       [&](NodeConfig& c) { c.mig_retry_seconds = flags.mig_retry_seconds; });
  bind(app.add_option("--node-name", flags.node_name, "this node's name (default: $NODE_NAME)"),
       [&](NodeConfig& c) { c.node_name = flags.node_name; });
  bind(app.add_option("--log-level", flags.log_level, "trace, debug, info, warn or error")
           ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"})),
       [&](NodeConfig& c) { c.log_level = flags.log_level; });
  bind(app.add_option("--node-config-file", flags.node_config_file,
                      "per-node overrides (YAML 'nodes: {<node>: {split_count: .., memory_scaling: .., "
                      "core_scaling: .., disable_core_limit: .., ld_so_preload: .., active_oom_killer: .., "
                      "memory_tolerance_mib: ..}}')"),
       [&](NodeConfig& c) { c.node_config_file = flags.node_config_file; });
  app.set_version_flag("--version", std::string("tessera-node ") + "0.1.0");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.exit_now = true;
    result.output = app.help();
    return result;
  } catch (const CLI::CallForAllHelp&) {
    result.exit_now = true;
    result.output = app.help("", CLI::AppFormatMode::All);
    return result;
  } catch (const CLI::CallForVersion& e) {
    result.exit_now = true;
    result.output = e.what();
    return result;
  } catch (const CLI::ParseError& e) {
    result.exit_now = true;
    result.exit_code = 2;
    result.output = std::string("tessera-node: ") + e.what() + "\nRun with --help for the accepted flags.";
    return result;
  }

  NodeConfig config;
  config.node_name = env_node_name;
  auto fail = [&](const Error& error) {
    result.exit_now = true;
    result.exit_code = 2;
    result.output = "tessera-node: invalid configuration: " + error.message;
    return result;
  };
  if (!config_file.empty()) {
    if (auto s = ApplyYamlFile(config_file, config); !s.ok()) return fail(s.error());
  }
  for (auto& [opt, copy] : bound) {
    if (opt->count() > 0) copy(config);
  }
  if (auto s = Validate(config); !s.ok()) return fail(s.error());
  if (auto s = ApplyNodeOverrides(config); !s.ok()) return fail(s.error());
  if (auto s = Validate(config); !s.ok()) return fail(s.error());
  result.config = std::move(config);
  return result;
}

}  // namespace tessera::node
