// The node agent's Prometheus metrics (served on :9394/metrics): per GPU, per
// container and GPU, and the agent's own health. Rendered from the monitor's
// latest snapshot and the agent's counters, so a scrape costs no NVML call and
// no file-system access. Every metric is listed in docs/node.md.
//
// Thread-safety: a pure function.
#pragma once

#include <optional>
#include <string>

#include "node/inventory_publisher.h"
#include "node/node_monitor.h"

namespace tessera::node {

struct AgentStatus {
  std::string node_name;
  std::string version;
  int kubelet_registrations = 0;
  std::optional<PublisherStats> publisher;  // absent when the agent does not talk to the API server
};

// `snapshot` may be null (no monitor pass yet): only the agent's metrics then.
std::string RenderMetrics(const NodeSnapshot* snapshot, const MonitorCounters& counters,
                          const AgentStatus& status);

}  // namespace tessera::node
