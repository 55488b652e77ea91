#include "node/agent.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "node/allocate.h"

namespace tessera::node {

std::vector<core::Gpu> ApplyOffer(const NodeConfig& config, std::vector<core::Gpu> gpus) {
  for (auto& gpu : gpus) {
    gpu.memory_mib =
        static_cast<int64_t>(std::floor(static_cast<double>(gpu.memory_mib) * config.memory_scaling));
    gpu.slots = config.split_count;
  }
  return gpus;
}

Status WritePreloadFile(const NodeConfig& config) {
  const std::string path = config.PreloadFileHostPath();
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << config.libvgpu_container_path << "\n";
    out.close();
    if (!out)
      return Error{"cannot write the preload file '" + temp + "' (is the libvgpu directory mounted?)"};
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    ::unlink(temp.c_str());
    return Error{"cannot install the preload file '" + path + "': " + why};
  }
  return Status::Ok();
}

Agent::Agent(NodeConfig config, std::unique_ptr<InventorySource> inventory,
             std::function<std::string()> new_region_name)
    : config_(std::move(config)),
      inventory_(std::move(inventory)),
      plugin_(config_, state_,
              new_region_name ? std::move(new_region_name) : std::function<std::string()>(RandomUuid)),
      registrar_(config_, plugin_) {}

Agent::~Agent() {
  Stop();
}

Status Agent::Start() {
  if (started_) return Status::Ok();
  auto gpus = inventory_->Discover();
  if (!gpus.ok()) return gpus.error().Wrap("GPU discovery");
  if (gpus->empty()) spdlog::warn("no GPUs found: advertising no devices");
  for (const auto& gpu : *gpus) {
    spdlog::info("GPU {} {} '{}': {} MiB, {} SMs, NUMA {}, MIG {}, {} links{}", gpu.index, gpu.uuid,
                 gpu.model, gpu.memory_mib, gpu.sm_count, gpu.numa_node, gpu.mig_capable ? "capable" : "no",
                 gpu.links.size(), gpu.healthy ? "" : ", UNHEALTHY");
  }
  state_.SetGpus(ApplyOffer(config_, std::move(gpus).value()));

  if (config_.ld_so_preload) {
    if (auto s = WritePreloadFile(config_); !s.ok()) return s;
  }
  if (::access(config_.libvgpu_host_path.c_str(), R_OK) != 0) {
    spdlog::warn("libvgpu is not at {} yet: Allocate refuses GPU containers until it is",
                 config_.libvgpu_host_path);
  }

  if (auto s = plugin_.Start(); !s.ok()) return s;
  registrar_.Start();
  if (auto s = inventory_->StartHealthWatch(
          [this](const std::string& uuid, bool healthy, const std::string& reason) {
            if (state_.SetHealth(uuid, healthy)) {
              spdlog::warn("GPU {} is now {} ({})", uuid, healthy ? "healthy" : "unhealthy", reason);
            }
          });
      !s.ok()) {
    registrar_.Stop();
    plugin_.Stop();
    return s.error().Wrap("GPU health watch");
  }
  started_ = true;
  return Status::Ok();
}

void Agent::Stop() {
  if (!started_) return;
  inventory_->StopHealthWatch();
  registrar_.Stop();
  plugin_.Stop();
  started_ = false;
}

}  // namespace tessera::node
