// tessera-dra: tessera's Dynamic Resource Allocation kubelet plugin, one per
// GPU node (a DaemonSet; docs/dra.md). Publishes the node's GPUs as
// ResourceSlices, registers with the kubelet, and prepares claims: CDI specs
// that give each container its claim's libvgpu slice.
// Exit codes: 0 after SIGTERM/SIGINT, 1 when starting fails, 2 for an invalid
// configuration.
#include <signal.h>

#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include "base/files.h"
#include "base/log.h"
#include "dra/claim_preparer.h"
#include "dra/config.h"
#include "dra/dra_plugin.h"
#include "dra/gpu_details.h"
#include "dra/resource_slices.h"
#include "host/nvml_inventory.h"
#include "host/nvml_mig.h"
#include "kube/config.h"

namespace {

namespace log = tessera::log;
using tessera::dra::DraConfig;

// The node's GPUs as last discovered, with the health the watch reported.
class Gpus {
 public:
  void Set(std::vector<tessera::core::Gpu> gpus) {
    std::lock_guard lock(mu_);
    for (auto& g : gpus) {
      if (unhealthy_.count(g.uuid)) g.healthy = false;
    }
    gpus_ = std::move(gpus);
  }
  std::vector<tessera::core::Gpu> Get() const {
    std::lock_guard lock(mu_);
    return gpus_;
  }
  void MarkUnhealthy(const std::string& uuid) {
    std::lock_guard lock(mu_);
    unhealthy_.insert(uuid);
    for (auto& g : gpus_) {
      if (g.uuid == uuid) g.healthy = false;
    }
  }

 private:
  mutable std::mutex mu_;
  std::vector<tessera::core::Gpu> gpus_;  // guarded by mu_
  std::set<std::string> unhealthy_;       // guarded by mu_
};

int Run(int argc, char** argv) {
  const char* node_name = std::getenv("NODE_NAME");
  auto command_line = tessera::dra::ParseCommandLine(argc, argv, node_name ? node_name : "");
  if (command_line.exit_now) {
    (command_line.exit_code == 0 ? std::cout : std::cerr) << command_line.output << std::endl;
    return command_line.exit_code;
  }
  const DraConfig config = command_line.config;
  log::SetLevel(*log::ParseLevel(config.log_level));
  log::Info("tessera-dra starting", {{"node", config.node_name},
                                     {"driver", config.driver_name},
                                     {"device_mode", tessera::dra::DeviceModeName(config.device_mode)},
                                     {"cdi_dir", config.cdi_dir}});

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto library = tessera::host::NvmlLibrary::Load(config.nvml_library);
  if (!library.ok()) {
    log::Error("cannot start", {{"error", library.error().message}});
    return 1;
  }
  const tessera::host::NvmlApi& api = (*library)->api();
  std::unique_ptr<tessera::host::NvmlMigDriver> mig;
  if (config.mig_gpus != "none") {
    auto loaded = tessera::host::NvmlMigDriver::Load(api, config.nvml_library);
    if (!loaded.ok()) {
      log::Error("cannot start: --mig-gpus is set but MIG cannot be managed",
                 {{"error", loaded.error().message}});
      return 1;
    }
    mig = std::move(loaded).value();
  }
  tessera::host::NvmlInventory inventory(api, std::move(library).value());
  Gpus gpus;
  auto discovered = inventory.Discover();
  if (!discovered.ok()) {
    log::Error("cannot discover the GPUs", {{"error", discovered.error().message}});
    return 1;
  }
  gpus.Set(*discovered);
  auto details = tessera::dra::ReadSystemDetails(config.nvml_library);
  if (!details.ok()) log::Warn("GPU details unavailable", {{"error", details.error().message}});
  const tessera::dra::SystemDetails system = details.ok() ? *details : tessera::dra::SystemDetails{};
  std::vector<tessera::dra::MigGpu> mig_gpus;
  if (mig) {
    std::vector<std::string> skipped;
    auto selected = tessera::dra::SelectMigGpus(config.mig_gpus, gpus.Get(), *mig, &skipped);
    if (!selected.ok()) {
      log::Error("cannot start: --mig-gpus", {{"error", selected.error().message}});
      return 2;
    }
    for (const auto& why : skipped) log::Error("MIG partitions not published", {{"reason", why}});
    mig_gpus = *selected;
  }

  if (config.ld_so_preload) {
    if (auto s = tessera::files::ReplaceAtomically(config.PreloadFileHostPath(),
                                                   config.libvgpu_container_path + "\n");
        !s.ok()) {
      log::Error("cannot install the preload file (is the libvgpu directory mounted?)",
                 {{"error", s.error().message}});
      return 1;
    }
  }

  tessera::kube::ResolveOptions resolve;
  resolve.kubeconfig = config.kubeconfig;
  resolve.api_server = config.api_server;
  auto client_config = tessera::kube::ResolveConfig(resolve);
  if (!client_config.ok()) {
    log::Error("no Kubernetes API configuration", {{"error", client_config.error().message}});
    return 1;
  }
  tessera::kube::ClientOptions options;
  options.timeout = std::chrono::seconds(10);  // well inside the kubelet's 45 s per call
  std::shared_ptr<tessera::kube::Client> client = tessera::kube::MakeClient(*client_config, options);

  tessera::dra::PreparerDeps deps;
  deps.read_claim = [client](const std::string& ns,
                             const std::string& name) -> tessera::Result<std::optional<nlohmann::json>> {
    auto claim = client->Get(tessera::dra::resources::kResourceClaims, ns, name);
    if (claim.ok()) return std::optional<nlohmann::json>(std::move(*claim));
    if (claim.error().IsNotFound()) return std::optional<nlohmann::json>();
    return tessera::Error{claim.error().message};
  };
  deps.read_pod = [client](const std::string& ns,
                           const std::string& name) -> tessera::Result<std::optional<nlohmann::json>> {
    auto pod = client->Get(tessera::kube::resources::kPods, ns, name);
    if (pod.ok()) return std::optional<nlohmann::json>(std::move(*pod));
    if (pod.error().IsNotFound()) return std::optional<nlohmann::json>();
    return tessera::Error{pod.error().message};
  };
  deps.gpus = [&gpus] { return gpus.Get(); };
  deps.mig = mig.get();
  deps.mig_gpus = [&mig_gpus] { return mig_gpus; };
  tessera::dra::ClaimPreparer preparer(config, deps);
  if (auto s = preparer.Recover(); !s.ok()) {
    log::Error("cannot recover the prepared claims", {{"error", s.error().message}});
    return 1;
  }
  tessera::dra::DraPlugin plugin(config, preparer);
  if (auto s = plugin.Start(); !s.ok()) {
    log::Error("cannot start", {{"error", s.error().message}});
    return 1;
  }

  // ResourceSlices: at start, every resync_seconds, and on a health change.
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false, changed = true;
  tessera::dra::SlicePublisher publisher(config, client);
  if (auto s =
          inventory.StartHealthWatch([&](const std::string& uuid, bool healthy, const std::string& reason) {
            if (healthy) return;
            log::Warn("GPU unhealthy: removed from the ResourceSlices", {{"uuid", uuid}, {"reason", reason}});
            gpus.MarkUnhealthy(uuid);
            std::lock_guard lock(mu);
            changed = true;
            wake.notify_all();
          });
      !s.ok()) {
    log::Warn("no GPU health watch", {{"error", s.error().message}});
  }
  std::thread slices([&] {
    std::unique_lock lock(mu);
    while (!stopping) {
      changed = false;
      lock.unlock();
      if (config.publish_slices) {
        if (auto again = inventory.Discover(); again.ok()) gpus.Set(*again);
        auto pool = tessera::dra::BuildPool(config, gpus.Get(), system, mig_gpus);
        if (!pool.ok()) {
          log::Error("cannot describe the GPUs as devices", {{"error", pool.error().message}});
        } else if (auto writes = publisher.Sync(*pool); !writes.ok()) {
          log::Warn("ResourceSlices not published", {{"error", writes.error().message}});
        } else if (*writes > 0) {
          log::Info("ResourceSlices published",
                    {{"devices", static_cast<int>(pool->devices.size())}, {"writes", *writes}});
        }
      }
      lock.lock();
      wake.wait_for(lock, std::chrono::seconds(config.resync_seconds), [&] { return stopping || changed; });
    }
  });

  int received = 0;
  sigwait(&signals, &received);
  log::Info("stopping", {{"signal", received}});
  {
    std::lock_guard lock(mu);
    stopping = true;
    wake.notify_all();
  }
  slices.join();
  inventory.StopHealthWatch();
  plugin.Stop();
  if (config.publish_slices && config.remove_slices_on_exit) {
    if (auto s = publisher.RemoveAll(); !s.ok())
      log::Warn("ResourceSlices not removed", {{"error", s.error().message}});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Run(argc, argv);
}
