// The node agent's Prometheus metrics (served on :9394/metrics): per GPU, per
// MIG device, per container and GPU, and the agent's own health. Rendered from
// the monitor's latest snapshot and the agent's counters, so a scrape costs no
// file-system access and no NVML call — except, on a node whose MIG devices
// tessera-node manages (layouts or mig-dynamic GPUs), one listing of them
// (MigDriver::List), which the agent makes for the scrape. Every metric is
// listed in docs/node.md, the MIG device ones in docs/observability.md.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "host/nvml_mig.h"
#include "node/mig/mig_devices.h"

#include "node/inventory_publisher.h"
#include "node/node_monitor.h"

namespace tessera::node {

struct AgentStatus {
  std::string node_name;
  std::string version;
  int kubelet_registrations = 0;
  std::optional<PublisherStats> publisher;  // absent when the agent does not talk to the API server
};

// One MIG device, as its metrics show it.
struct MigDeviceMetrics {
  std::string gpu_uuid;  // the parent GPU
  int gpu_index = 0;
  std::string mig_uuid;
  std::string profile;  // "1g.10gb"; "profile-<id>" for a profile tessera has no table of
  uint64_t memory_total_bytes = 0;
  uint64_t memory_used_bytes = 0;
  // -1: NVML has none. NVIDIA's NVML answers NOT_SUPPORTED for a MIG device's
  // utilisation (DCGM's profiling metrics are the source), and so does the
  // simulated GPU; the metric is exported where an NVML gives it.
  int utilization_percent = -1;
  uint32_t processes = 0;
  std::optional<ContainerRef> owner;  // the container the kubelet gave it to (dynamic: it was made for)
};

// The MIG devices tessera-node advertises or created on a mig-dynamic GPU
// (`devices`: parent, profile, the container holding it) with what NVML says
// of each now (`listed`: MigDriver::List). A device `listed` no longer has is
// left out.
std::vector<MigDeviceMetrics> MigDeviceMetricsOf(const std::vector<mig::MigDevice>& devices,
                                                 const std::vector<host::MigGpuState>& listed);

// `snapshot` may be null (no monitor pass yet): only the agent's metrics then
// (and the MIG devices').
std::string RenderMetrics(const NodeSnapshot* snapshot, const MonitorCounters& counters,
                          const AgentStatus& status, const std::vector<MigDeviceMetrics>& mig = {});

}  // namespace tessera::node
