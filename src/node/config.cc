#include "node/config.h"

#include "base/files.h"
#include "base/log.h"
#include "base/yaml_config.h"
#include "contract/container_contract.h"
#include "node/mig/mig_settings.h"
#include "node/sharing/gpu_modes.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

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

bool IsDnsLabelChar(char c) {
  return std::islower(static_cast<unsigned char>(c)) || std::isdigit(c) || c == '-';
}

// The check of one key's value; the message starts with the key.
template <typename T>
using Check = std::function<Status(const std::string& key, const T& value)>;

Status ValidateResourceName(const std::string& key, const std::string& name) {
  const std::string what = key + " '" + name + "'";
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

Status AbsolutePath(const std::string& key, const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return Error{key + " must be an absolute path, got '" + path + "'"};
  }
  return Status::Ok();
}

// "" (not used) or an absolute path short enough for a unix socket.
Status OptionalSocketPath(const std::string& key, const std::string& path) {
  if (path.empty()) return Status::Ok();
  TESSERA_RETURN_IF_ERROR(AbsolutePath(key, path));
  if (path.size() > kMaxUnixSocketPath) {
    return Error{key + " '" + path + "' is too long for a unix socket path"};
  }
  return Status::Ok();
}

// "" (not used) or an absolute path.
Status OptionalAbsolutePath(const std::string& key, const std::string& path) {
  return path.empty() ? Status::Ok() : AbsolutePath(key, path);
}

Status NotEmpty(const std::string& key, const std::string& value) {
  if (value.empty()) return Error{key + " must not be empty"};
  return Status::Ok();
}

// `note` follows the range in the message, e.g. " (0 = off)".
Check<int> Between(int min, int max, std::string note = "") {
  return [=](const std::string& key, const int& value) -> Status {
    if (value >= min && value <= max) return Status::Ok();
    return Error{key + " must be between " + std::to_string(min) + " and " + std::to_string(max) + note +
                 ", got " + std::to_string(value)};
  };
}

Status CheckMemoryScaling(const std::string& key, const double& value) {
  if (value > 0.0 && value <= 100.0) return Status::Ok();
  return Error{key + " must be > 0 and <= 100 (1 = physical memory, > 1 = oversubscription), got " +
               std::to_string(value)};
}

Status CheckCoreScaling(const std::string& key, const double& value) {
  if (value >= 0.01 && value <= 100.0) return Status::Ok();
  return Error{key + " must be between 0.01 and 100 (1 = the whole GPU, > 1 oversubscribes compute), got " +
               std::to_string(value)};
}

Status CheckComputeEnforcement(const std::string& key, const std::string& value) {
  if (value == "report" || value == "kill") return Status::Ok();
  return Error{key + " '" + value + "' must be report or kill"};
}

Status CheckLogLevel(const std::string& key, const std::string& value) {
  if (log::ParseLevel(value).ok()) return Status::Ok();
  return Error{key + " '" + value + "' must be trace, debug, info, warn or error"};
}

enum Scope { kWholeNode, kPerNode };

// One configuration key: its YAML key, its flag and its check, each bound to
// the same NodeConfig field by the row that made it (Keys()).
struct Key {
  std::string name;  // YAML key; the flag is --name with '-' for '_'
  std::string help;  // the flag's description
  Scope scope = kWholeNode;
  // Declares the YAML key, bound to `config`.
  std::function<void(config::YamlConfig& yaml, NodeConfig& config)> declare;
  // Adds the flag, bound to `flags`; the function returned copies the flag's
  // value from there into a configuration.
  std::function<std::pair<CLI::Option*, std::function<void(NodeConfig&)>>(
      CLI::App& app, const std::string& flag, const std::string& help, NodeConfig& flags)>
      add_flag;
  std::function<Status(const NodeConfig&)> check;  // empty: any value of the type
};

template <typename T>
std::function<Status(const NodeConfig&)> CheckOf(const std::string& name, T NodeConfig::*field,
                                                 Check<T> check) {
  if (!check) return nullptr;
  return [name, field, check](const NodeConfig& c) { return check(name, c.*field); };
}

template <typename T>
void DeclareYaml(config::YamlConfig& yaml, const std::string& name, T* field) {
  if constexpr (std::is_same_v<T, std::string>) {
    yaml.String(name, field);
  } else if constexpr (std::is_same_v<T, bool>) {
    yaml.Bool(name, field);
  } else if constexpr (std::is_same_v<T, int>) {
    yaml.Int(name, field);
  } else {
    static_assert(std::is_same_v<T, double>);
    yaml.Number(name, field);
  }
}

// What a flag bound to `flags.*field` hands on to a configuration.
template <typename T>
std::function<void(NodeConfig&)> CopyFrom(const NodeConfig& flags, T NodeConfig::*field) {
  return [&flags, field](NodeConfig& c) { c.*field = flags.*field; };
}

// A key whose flag takes a value: --split-count 4, --kubernetes false.
template <typename T>
Key Option(std::string name, T NodeConfig::*field, std::type_identity_t<Check<T>> check, Scope scope,
           std::string help) {
  Key key;
  key.name = name;
  key.help = std::move(help);
  key.scope = scope;
  key.declare = [name, field](config::YamlConfig& yaml, NodeConfig& c) {
    DeclareYaml(yaml, name, &(c.*field));
  };
  key.add_flag = [field](CLI::App& app, const std::string& flag, const std::string& text, NodeConfig& flags) {
    return std::pair{app.add_option(flag, flags.*field, text), CopyFrom(flags, field)};
  };
  key.check = CheckOf(name, field, std::move(check));
  return key;
}

// A boolean whose flag takes no value: --disable-core-limit, --ld-so-preload=false.
Key Switch(std::string name, bool NodeConfig::*field, Scope scope, std::string help) {
  Key key = Option(std::move(name), field, nullptr, scope, std::move(help));
  key.add_flag = [field](CLI::App& app, const std::string& flag, const std::string& text, NodeConfig& flags) {
    return std::pair{app.add_flag(flag, flags.*field, text), CopyFrom(flags, field)};
  };
  return key;
}

// A string whose flag accepts only `choices` (the YAML value is left to `check`).
Key OneOf(std::string name, std::string NodeConfig::*field, std::vector<std::string> choices,
          Check<std::string> check, Scope scope, std::string help) {
  Key key = Option(std::move(name), field, std::move(check), scope, std::move(help));
  key.add_flag = [field, choices](CLI::App& app, const std::string& flag, const std::string& text,
                                  NodeConfig& flags) {
    return std::pair{app.add_option(flag, flags.*field, text)->check(CLI::IsMember(choices)),
                     CopyFrom(flags, field)};
  };
  return key;
}

// An enumeration spelled as `names` (in declaration order), in YAML and on the
// command line alike.
template <typename E>
Key Enum(std::string name, E NodeConfig::*field, const std::vector<std::string>& names, Scope scope,
         std::string help) {
  Key key;
  key.name = name;
  key.help = std::move(help);
  key.scope = scope;
  key.declare = [name, field, &names](config::YamlConfig& yaml, NodeConfig& c) {
    yaml.Choice(
        name, names, [&c, field, &names](const std::string& v) { ParseName(names, v, c.*field); },
        [&c, field, &names] { return names.at(static_cast<size_t>(c.*field)); });
  };
  key.add_flag = [field, &names](CLI::App& app, const std::string& flag, const std::string& text,
                                 NodeConfig& flags) {
    auto spelled = std::make_shared<std::string>(names.at(static_cast<size_t>(flags.*field)));
    return std::pair{app.add_option(flag, *spelled, text)->check(CLI::IsMember(names)),
                     std::function<void(NodeConfig&)>(
                         [spelled, field, &names](NodeConfig& c) { ParseName(names, *spelled, c.*field); })};
  };
  return key;
}

// The keys a node's entry in node_config_file may set, joined by `separator`.
std::string PerNodeKeys(const std::vector<Key>& keys, const std::string& separator) {
  std::string joined;
  for (const Key& key : keys) {
    if (key.scope == kPerNode) joined += (joined.empty() ? "" : separator) + key.name;
  }
  return joined;
}

// node_config_file's help names the keys it may set, as the table marks them.
std::vector<Key> WithPerNodeHelp(std::vector<Key> keys) {
  for (Key& key : keys) {
    if (key.name == "node_config_file") {
      key.help = "per-node overrides (YAML 'nodes: {<node>: {" + PerNodeKeys(keys, ": .., ") + ": ..}}')";
    }
  }
  return keys;
}

// The keys, one row each: the YAML key (the flag is the same with '-' for
// '_'), the field it sets, the check of its value alone, whether a node's
// entry in node_config_file may set it, and the flag's --help text. Checks
// across keys stay in Validate. A new key is one row here.
const std::vector<Key>& Keys() {
  static const std::vector<Key> kKeys = WithPerNodeHelp({
      Option("resource_name", &NodeConfig::resource_name, ValidateResourceName, kWholeNode,
             "extended resource advertised to the kubelet"),
      Option("split_count", &NodeConfig::split_count, Between(1, 1024), kPerNode,
             "devices advertised per GPU: how many vGPUs may share one GPU (1-1024)"),
      Option("memory_scaling", &NodeConfig::memory_scaling, CheckMemoryScaling, kPerNode,
             "memory offered per GPU = physical memory x this; > 1 oversubscribes (sets "
             "CUDA_OVERSUBSCRIBE in containers)"),
      Option("core_scaling", &NodeConfig::core_scaling, CheckCoreScaling, kPerNode,
             "compute offered per GPU = 100% x this (0.01-100); > 1 oversubscribes compute"),
      Switch("disable_core_limit", &NodeConfig::disable_core_limit, kPerNode,
             "do not throttle compute in containers (sets GPU_CORE_UTILIZATION_POLICY=disable)"),
      Option("plugin_dir", &NodeConfig::plugin_dir, AbsolutePath, kWholeNode,
             "kubelet device-plugin directory: kubelet.sock is there and the plugin socket is made there"),
      Switch("pre_start_required", &NodeConfig::pre_start_required, kWholeNode,
             "ask the kubelet to call PreStartContainer before each container start"),
      Option("kubelet_poll_ms", &NodeConfig::kubelet_poll_ms, Between(10, 60000), kWholeNode,
             "how often kubelet.sock is checked for a kubelet restart (10-60000)"),
      Option("libvgpu_host_path", &NodeConfig::libvgpu_host_path, AbsolutePath, kWholeNode,
             "libvgpu.so on the host; the ld.so.preload file is written next to it"),
      Option("libvgpu_container_path", &NodeConfig::libvgpu_container_path, AbsolutePath, kWholeNode,
             "where libvgpu.so is mounted inside GPU containers"),
      Switch("ld_so_preload", &NodeConfig::ld_so_preload, kPerNode,
             "mount a preload file over /etc/ld.so.preload (default true); --ld-so-preload=false sets "
             "LD_PRELOAD instead"),
      Option("region_host_dir", &NodeConfig::region_host_dir, AbsolutePath, kWholeNode,
             "host directory holding one region directory per GPU container"),
      Option("region_container_dir", &NodeConfig::region_container_dir, AbsolutePath, kWholeNode,
             "where a container's region directory is mounted (libvgpu's default is /tmp/tessera)"),
      Enum("visible_devices", &NodeConfig::visible_devices, kVisibleDevicesNames, kWholeNode,
           "who sets NVIDIA_VISIBLE_DEVICES: webhook (Downward API), device-ids (from the kubelet's picks) "
           "or all"),
      Enum("unplaced_pods", &NodeConfig::unplaced_pods, kUnplacedPodsNames, kWholeNode,
           "GPU containers of pods tessera-scheduler did not place (no allocation annotation): refuse (no "
           "GPU visible, an Event on the pod) or whole-gpu (the kubelet's GPUs whole, published as held so "
           "the scheduler places nothing else there)"),
      Option("nvml_library", &NodeConfig::nvml_library, NotEmpty, kWholeNode, "NVML library to dlopen"),
      Option("kubernetes", &NodeConfig::kubernetes, nullptr, kWholeNode,
             "talk to the API server: publish the GPU inventory annotation, watch this node's pods, record "
             "Events (false: device plugin, metrics and enforcement only; the scheduler then cannot place "
             "pods here)"),
      Option("kubeconfig", &NodeConfig::kubeconfig, nullptr, kWholeNode,
             "kubeconfig file (default: in-cluster service account, then $KUBECONFIG, then ~/.kube/config)"),
      Option("api_server", &NodeConfig::api_server, nullptr, kWholeNode,
             "API server URL, overriding the one configured"),
      Option("heartbeat_seconds", &NodeConfig::heartbeat_seconds, Between(1, 3600), kWholeNode,
             "the GPU inventory annotation is rewritten at least this often (1-3600); changes are written "
             "at once"),
      Option("pod_resources_socket", &NodeConfig::pod_resources_socket, OptionalSocketPath, kWholeNode,
             "the kubelet's PodResources socket, to learn which pod owns each region (\"\" = not used: "
             "regions are then never removed)"),
      Option("dra_region_dir", &NodeConfig::dra_region_dir, OptionalAbsolutePath, kWholeNode,
             "tessera-dra's region directory (its --region-host-dir): DRA claims' containers are metered and "
             "held to their claims' limits by the enforcement too (\"\" = not scanned)"),
      Switch("device_plugin", &NodeConfig::device_plugin, kWholeNode,
             "advertise GPUs to the kubelet and publish the inventory (default true); false: the "
             "enforcement-only role beside tessera-dra (metrics and the enforcement of last resort only)"),
      Option("monitor_interval_ms", &NodeConfig::monitor_interval_ms, Between(100, 60000), kWholeNode,
             "how often GPUs are sampled, regions read and cleaned up and memory limits enforced "
             "(100-60000)"),
      Option("metrics_address", &NodeConfig::metrics_address, nullptr, kWholeNode,
             "address the metrics endpoint listens on"),
      Option("metrics_port", &NodeConfig::metrics_port, Between(0, 65535, " (0 = no metrics endpoint)"),
             kWholeNode, "port of the Prometheus endpoint /metrics (and /healthz); 0 = none"),
      Option("region_grace_seconds", &NodeConfig::region_grace_seconds, Between(0, 7 * 86400), kWholeNode,
             "a region directory is kept at least this long after Allocate before it may be removed for "
             "want of an owner"),
      Option("active_oom_killer", &NodeConfig::active_oom_killer, nullptr, kPerNode,
             "for containers that do not set ACTIVE_OOM_KILLER: kill a process whose container is over its "
             "memory limit as the driver counts it (false: report it only)"),
      Option("active_oom_killer_fixed", &NodeConfig::active_oom_killer_fixed, nullptr, kWholeNode,
             "true: active_oom_killer decides for every container, and a container's own ACTIVE_OOM_KILLER "
             "(which its tenant controls) is ignored; false: the container's variable wins, as in HAMi"),
      Option("memory_tolerance_mib", &NodeConfig::memory_tolerance_mib, Between(0, 1048576), kPerNode,
             "driver-counted usage above a container's limit that enforcement lets pass (rounding)"),
      OneOf("compute_enforcement", &NodeConfig::compute_enforcement, {"report", "kill"},
            CheckComputeEnforcement, kWholeNode,
            "a container whose SM utilisation (as the driver counts it) stays over its gpucores: report it "
            "(log, Event, metric) or also kill its offending processes (report or kill)"),
      Option("compute_tolerance_percent", &NodeConfig::compute_tolerance_percent, Between(0, 100), kWholeNode,
             "SM utilisation above a container's gpucores that compute enforcement lets pass (0-100)"),
      Option("compute_window_passes", &NodeConfig::compute_window_passes, Between(1, 100), kWholeNode,
             "monitor passes in a row a container must stay over its gpucores before compute enforcement "
             "acts (1-100)"),
      // The MIG keys' checks are mig::ValidateMigSettings, called from Validate.
      Option("mig_layout_file", &NodeConfig::mig_layout_file, nullptr, kWholeNode,
             "mig-parted layout file (version: v1) whose configuration the Node's nvidia.com/mig.config "
             "label names; \"\" = MIG not managed"),
      Option("mig_config", &NodeConfig::mig_config, nullptr, kWholeNode,
             "the layout's configuration to apply while the Node has no nvidia.com/mig.config label"),
      OneOf("mig_strategy", &NodeConfig::mig_strategy, {"single", "mixed"}, nullptr, kWholeNode,
            "MIG devices as nvidia.com/gpu (single: one profile everywhere) or nvidia.com/mig-<profile> "
            "(mixed)"),
      Option("mig_gpus", &NodeConfig::mig_gpus, nullptr, kWholeNode,
             "GPU indices whose MIG layout tessera-node manages (\"0,2\") or all; the others keep vGPU "
             "slices"),
      Option("mig_retry_seconds", &NodeConfig::mig_retry_seconds, nullptr, kWholeNode,
             "how often a MIG layout blocked by an instance in use is tried again (1-3600)"),
      Option("mig_dynamic_gpus", &NodeConfig::mig_dynamic_gpus, nullptr, kPerNode,
             "GPUs in mig-dynamic mode: indices (\"0,2\"), all (every GPU with MIG) or none; tessera-node "
             "creates their MIG instances at Allocate where tessera-scheduler placed them"),
      // The sharing keys' checks are sharing::ValidateSharingSettings, called from Validate.
      Option("sharing", &NodeConfig::sharing, nullptr, kPerNode,
             "sharing mode per GPU: a YAML list of {gpus: all | \"0,2\" | <UUID> | <model>, mode: vgpu | "
             "exclusive | timeslice | mps | mig | mig-dynamic, replicas: N, ...} (docs/sharing.md); GPUs no "
             "rule names are vgpu"),
      Option("nvidia_config_file", &NodeConfig::nvidia_config_file, nullptr, kPerNode,
             "NVIDIA device-plugin config file (version: v1) whose sharing.timeSlicing or sharing.mps "
             "section puts the GPUs it selects in that mode; re-read when it changes. A directory: the "
             "Node label nvidia.com/device-plugin.config names the file, as NVIDIA's config-manager"),
      Option("nvidia_config_default", &NodeConfig::nvidia_config_default, nullptr, kPerNode,
             "with nvidia_config_file a directory: the file used while the Node has no "
             "nvidia.com/device-plugin.config label (\"\" = the directory's only file)"),
      Option("mps_root", &NodeConfig::mps_root, AbsolutePath, kWholeNode,
             "where each mps GPU's MPS control daemon lives: <mps_root>/<GPU uuid>/pipe and .../log"),
      Option("mps_control_binary", &NodeConfig::mps_control_binary, nullptr, kWholeNode,
             "the MPS control program run (-d) for each mps GPU: a path, or a name looked up in PATH"),
      Option("node_name", &NodeConfig::node_name, nullptr, kWholeNode,
             "this node's name (default: $NODE_NAME)"),
      OneOf("log_level", &NodeConfig::log_level, {"trace", "debug", "info", "warn", "error"}, CheckLogLevel,
            kWholeNode, "trace, debug, info, warn or error"),
      Option("node_config_file", &NodeConfig::node_config_file, nullptr, kWholeNode,
             ""),  // the help is WithPerNodeHelp's
  });
  return kKeys;
}

// The YAML keys, each bound to its field of `c` (base/yaml_config.h has the
// rules every key follows).
config::YamlConfig YamlKeys(NodeConfig& c) {
  config::YamlConfig yaml(" (see tessera-node --help for the accepted keys)");
  for (const Key& key : Keys()) key.declare(yaml, c);
  return yaml;
}

Status AllowPerNode(const std::string& name) {
  for (const Key& key : Keys()) {
    if (key.name == name && key.scope == kPerNode) return Status::Ok();
  }
  return Error{"key '" + name + "' cannot be overridden per node (allowed: " + PerNodeKeys(Keys(), ", ") +
               ")"};
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
  for (const Key& key : Keys()) {
    if (key.check) TESSERA_RETURN_IF_ERROR(key.check(c));
  }
  if (c.PluginSocketPath().size() > kMaxUnixSocketPath || c.KubeletSocketPath().size() > kMaxUnixSocketPath) {
    return Error{"plugin_dir '" + c.plugin_dir + "' is too long: socket paths must fit in " +
                 std::to_string(kMaxUnixSocketPath) + " bytes"};
  }
  if (c.metrics_port > 0 && c.metrics_address.empty()) return Error{"metrics_address must not be empty"};
  auto trimmed = [](std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    return path;
  };
  if (!c.dra_region_dir.empty() && trimmed(c.dra_region_dir) == trimmed(c.region_host_dir)) {
    return Error{"dra_region_dir must not be region_host_dir ('" + c.region_host_dir +
                 "'): tessera-dra's claim regions and tessera-node's own are kept apart"};
  }
  if (!c.device_plugin && c.dra_region_dir.empty()) {
    return Error{
        "device_plugin false (the enforcement-only role beside tessera-dra) needs dra_region_dir: "
        "without the device plugin and without claims' regions there is nothing to meter or enforce"};
  }
  TESSERA_RETURN_IF_ERROR(mig::ValidateMigSettings(c));
  return sharing::ValidateSharingSettings(c);
}

namespace {

// `sharing` may be written as a YAML list; the key table holds strings, so
// the list is kept as its (flow-style) text, which gpu_modes parses.
void InlineSharingList(YAML::Node mapping) {
  if (!mapping.IsMap()) return;
  YAML::Node list = mapping["sharing"];
  if (!list || !(list.IsSequence() || list.IsMap())) return;
  list.SetStyle(YAML::EmitterStyle::Flow);
  mapping["sharing"] = YAML::Dump(list);
}

std::string InlineSharingList(const std::string& yaml_text) {
  try {
    YAML::Node root = YAML::Load(yaml_text);
    if (!root.IsMap() || !root["sharing"] || root["sharing"].IsScalar()) return yaml_text;
    InlineSharingList(root);
    return YAML::Dump(root);
  } catch (const YAML::Exception&) {
    return yaml_text;  // Apply reports it
  }
}

}  // namespace

Status ApplyYaml(const std::string& yaml_text, const std::string& source_name, NodeConfig& config) {
  return YamlKeys(config).Apply(InlineSharingList(yaml_text), source_name);
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
      InlineSharingList(entry.second);
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

  app.add_option("-c,--config", config_file, "YAML configuration file (keys as below, '_' for '-')");
  std::vector<std::pair<CLI::Option*, std::function<void(NodeConfig&)>>> bound;
  for (const Key& key : Keys()) {
    std::string flag = "--" + key.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    bound.push_back(key.add_flag(app, flag, key.help, flags));
  }
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
  // mig / mig-dynamic rules of 'sharing' become the MIG keys MigManager and DynamicMig read.
  if (auto s = sharing::FoldMigRules(config); !s.ok()) return fail(s.error());
  if (auto s = Validate(config); !s.ok()) return fail(s.error());
  result.config = std::move(config);
  return result;
}

}  // namespace tessera::node
