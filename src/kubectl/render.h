// What `kubectl tessera` prints: the `top` tables and `describe pod`, from a
// ClusterView. Pure functions of their inputs (no I/O), so that tests check the
// text a user reads.
//
// Numbers are what is *allocated* (the slices in the pods' annotations),
// against what each GPU offers (its inventory); live use is in tessera-node's
// metrics (docs/observability.md). Memory is in MiB ("Mi"), cores in percent
// of one GPU.
#pragma once

#include <string>
#include <vector>

#include "kubectl/cluster_view.h"

namespace tessera::kubectl {

// One line per node: GPUs (healthy/all), memory, cores and vGPU slots
// allocated against offered, GPU pods, and the inventory's state ("ok",
// "stale (…)", "none", "corrupt: …").
std::string TopNodes(const ClusterView& view);

// One line per GPU of every node with a readable inventory (or of `node`).
std::string TopGpus(const ClusterView& view, const std::string& node = "");

// One line per pod that asks for a GPU or carries an allocation, in namespace
// `ns` ("" = all namespaces); terminal pods are left out (their slices are
// free). STATUS is "placed", "pending", "unplaced" (bound by another scheduler
// without an allocation) or "corrupt: …" / "mismatch: …".
std::string TopPods(const ClusterView& view, const std::string& ns);

struct DescribeOptions {
  std::string scheduler_name = "tessera-scheduler";  // the name the webhook sets
  std::vector<Json> events;                          // the pod's Events, oldest first
  std::string events_error;                          // why they could not be listed ("" = listed)
};

// The pod's slices (GPU, memory, cores, which node) and why it is where it is:
// who placed it and how its slices sit on its GPUs, or, for a pod not placed
// yet, its scheduling condition and the verdict of tessera's own fit (core)
// on every node against the current inventories and allocations.
std::string DescribePod(const ClusterView& view, const PodView& pod, const DescribeOptions& options);

}  // namespace tessera::kubectl
