#include "testing/node_cluster.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/allocation_codec.h"
#include "host/nvml_api.h"
#include "host/nvml_inventory.h"
#include "testing/ports.h"

namespace tessera::testing {

namespace fs = std::filesystem;
using Json = nlohmann::json;

NodeCluster::NodeCluster(NodeClusterOptions options)
    : options_(std::move(options)),
      tmp_(options_.temp_prefix),
      sim_{.gpus = options_.sim_gpus, .state_dir = tmp_.Path("sim"), .config = options_.sim_config} {}

NodeCluster::~NodeCluster() {
  Stop();
}

Result<std::vector<core::Gpu>> NodeCluster::Start() {
  for (const char* dir : {"dp", "lib", "regions", "view", "sim", "podres"}) tmp_.MakeDir(dir);
  if (options_.libvgpu.empty()) {
    tmp_.Write("lib/libvgpu.so", "stand-in");
  } else {
    std::error_code error;
    fs::copy_file(options_.libvgpu, tmp_.Path("lib/libvgpu.so"), error);
    if (error) return Error{"cannot copy " + options_.libvgpu + ": " + error.message()};
  }
  sim_.Export();

  FakeApiServerOptions api_options;
  api_options.bookmark_interval = std::chrono::milliseconds(200);
  api_options.keep_alive_seconds = 1;
  api_ = std::make_unique<FakeApiServer>(api_options);
  if (auto started = api_->Start(); !started.ok()) return started.error().Wrap("the API-server stand-in");
  Json node = {{"metadata", {{"name", options_.node_name}}}};
  if (!options_.node_labels.empty()) node["metadata"]["labels"] = options_.node_labels;
  if (auto created = api_->CreateObject("nodes", node); !created.ok())
    return created.error().Wrap("the Node " + options_.node_name);

  kubelet_ = std::make_unique<KubeletStandIn>(tmp_.Path("dp"), tmp_.Path("podres/kubelet.sock"));
  if (!kubelet_->Start()) return Error{"the kubelet stand-in did not start in " + tmp_.Path("dp")};
  metrics_port_ = FreePort();
  if (metrics_port_ < 0) return Error{"no free port for tessera-node's metrics"};

  auto library = host::NvmlLibrary::Load(TESSERA_SIM_NVML);
  if (!library.ok()) return std::move(library).error();
  const host::NvmlApi& api = (*library)->api();  // before the library moves into the inventory
  host::NvmlInventory inventory(api, std::move(library).value());
  return inventory.Discover();
}

std::map<std::string, std::string> NodeCluster::DefaultNodeFlags() const {
  return {{"--node-name", options_.node_name},
          {"--api-server", api_ ? api_->url() : ""},
          {"--plugin-dir", Path("dp")},
          {"--pod-resources-socket", Path("podres/kubelet.sock")},
          {"--libvgpu-host-path", Path("lib/libvgpu.so")},
          {"--region-host-dir", Path("regions")},
          {"--region-container-dir", Path("view")},
          {"--nvml-library", TESSERA_SIM_NVML},
          {"--kubelet-poll-ms", "50"},
          {"--monitor-interval-ms", "200"},
          {"--heartbeat-seconds", "2"},
          {"--metrics-address", "127.0.0.1"},
          {"--metrics-port", std::to_string(metrics_port_)},
          {"--split-count", "4"}};
}

Status NodeCluster::StartNode(const std::map<std::string, std::string>& overrides) {
  if (!api_ || !kubelet_) return Error{"StartNode before a successful Start"};
  if (node_ > 0) return Error{"tessera-node is already running (pid " + std::to_string(node_) + ")"};
  std::map<std::string, std::string> flags = DefaultNodeFlags();
  for (const auto& [flag, value] : overrides) flags[flag] = value;
  std::vector<std::string> argv = {TESSERA_NODE_BINARY};
  for (const auto& [flag, value] : flags) argv.push_back(flag + "=" + value);
  node_ = Spawn({.argv = argv, .stdout_path = Path("node.log"), .stderr_path = Path("node.log")});
  if (node_ < 0) return Error{"cannot start " + std::string(TESSERA_NODE_BINARY)};
  return Status::Ok();
}

void NodeCluster::StopNode() {
  KillAndWait(node_, SIGTERM);
}

void NodeCluster::Stop() {
  for (pid_t& pid : containers_) KillAndWait(pid, SIGKILL);
  containers_.clear();
  StopNode();
  if (kubelet_) kubelet_->Stop();
  if (api_) api_->Stop();
}

std::string NodeCluster::NodeLog() const {
  return tmp_.Read("node.log");
}

std::optional<core::NodeInventory> NodeCluster::PublishedInventory() const {
  auto node = api_->GetObject("nodes", "", options_.node_name);
  if (!node) return std::nullopt;
  auto text = node->value("/metadata/annotations"_json_pointer, Json::object())
                  .value(std::string(core::kInventoryAnnotation), "");
  auto inventory = core::DecodeInventory(text);
  if (!inventory.ok()) return std::nullopt;
  return *inventory;
}

std::string NodeCluster::Label(const std::string& key) const {
  auto node = api_->GetObject("nodes", "", options_.node_name);
  if (!node) return "";
  return node->value("/metadata/labels"_json_pointer, Json::object()).value(key, "");
}

std::vector<std::string> NodeCluster::NodeEvents(const std::string& reason) const {
  std::vector<std::string> messages;
  for (const Json& event : api_->ListObjects("events")) {
    const Json involved = event.value("involvedObject", Json::object());
    if (involved.value("kind", "") == "Node" && involved.value("name", "") == options_.node_name &&
        event.value("reason", "") == reason) {
      messages.push_back(event.value("message", ""));
    }
  }
  return messages;
}

Result<std::string> NodeCluster::BindPod(const std::string& ns, const std::string& name,
                                         std::vector<core::DeviceSlice> slices) {
  core::PodAllocation allocation;
  allocation.node = options_.node_name;
  allocation.containers.push_back({"main", std::move(slices), false});
  auto text = core::EncodeAllocation(allocation);
  if (!text.ok()) return std::move(text).error();
  Json pod = {
      {"metadata",
       {{"name", name},
        {"namespace", ns},
        {"annotations", {{std::string(core::kAllocationAnnotation), *text}}}}},
      {"spec", {{"nodeName", options_.node_name}, {"containers", {{{"name", "main"}, {"image", "cuda"}}}}}},
      {"status", {{"phase", "Running"}}}};
  if (auto created = api_->CreateObject("pods", pod); !created.ok())
    return created.error().Wrap("pod " + ns + "/" + name);
  return *text;
}

std::string NodeCluster::RegionHostDir(const v1beta1::ContainerAllocateResponse& allocated) const {
  for (const auto& mount : allocated.mounts()) {
    if (mount.container_path() == Path("view")) return mount.host_path();
  }
  return "";
}

pid_t NodeCluster::StartContainer(const ContainerProcess& process) {
  if (process.allocated == nullptr) return -1;
  const std::string region_host = RegionHostDir(*process.allocated);
  if (region_host.empty()) return -1;
  std::string env = "env LD_LIBRARY_PATH=" + ShellQuote(TESSERA_SIM_LIB_DIR);
  for (const auto& [name, value] : process.env) env += " " + name + "=" + ShellQuote(value);
  if (!process.allocation.empty()) {
    env += " TESSERA_ALLOCATION=" + ShellQuote(process.allocation) +
           " TESSERA_CONTAINER_NAME=" + ShellQuote(process.container);
  }
  for (const auto& [name, value] : process.allocated->envs()) env += " " + name + "=" + ShellQuote(value);
  if (process.preload_libvgpu) env += " LD_PRELOAD=" + ShellQuote(Path("lib/libvgpu.so"));
  std::string launch = "exec ";
  if (process.own_pid_namespace) {
    tmp_.MakeDir("hostproc");
    env += " TESSERA_SIM_PROC=" + ShellQuote(Path("hostproc"));
    launch =
        "mount --bind /proc " + ShellQuote(Path("hostproc")) +
        " && exec unshare --pid --fork --kill-child --mount-proc ";  // the child dies with the test's kill
  }
  const std::string script = "mount --bind " + ShellQuote(region_host) + " " + ShellQuote(Path("view")) +
                             " && " + launch + env + " " + process.command_line + " > " +
                             ShellQuote(process.output) + " 2>&1";
  const pid_t pid =
      Spawn({.argv = {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script}});
  if (pid > 0) containers_.push_back(pid);
  return pid;
}

void NodeCluster::ForgetContainer(pid_t pid) {
  std::erase(containers_, pid);
}

ShellOutcome NodeCluster::RunCli(const std::string& args) const {
  std::string command = "env";
  for (const auto& [name, value] : sim_.Environment()) command += " " + name + "=" + ShellQuote(value);
  return RunShell(command + " " + ShellQuote(TESSERA_CLI_BINARY) + " " + args);
}

bool MountNamespacesWork() {
  return RunShell("unshare --mount --propagation private true").exit_code == 0;
}

}  // namespace tessera::testing
