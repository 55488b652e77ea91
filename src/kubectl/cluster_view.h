// ClusterView: what `kubectl tessera` shows, built from the Nodes and Pods the
// API server returns — the objects tessera-scheduler reads. Per node its GPU
// inventory (the `tessera.io/gpu-inventory` annotation the node agent
// publishes) with every bound pod's slices accounted on it; per pod its slices
// (from tessera's `tessera.io/allocation` annotation, or HAMi's
// `hami.io/vgpu-devices-allocated`) and what it asks for.
//
// Bad objects are shown, never dropped: a node without an inventory, with one
// that does not decode, or with a stale heartbeat; a pod whose allocation
// annotation does not decode or names GPUs its node does not have. Each such
// problem is kept as text on the node or pod.
//
// Allocations are accounted with NodeState::Account, which shows an
// overcommit instead of refusing it (as the node agent's gauges do). A device
// of an allocation that names a MIG instance (dynamic MIG: a profile and a
// placement on its parent GPU) is not a slice: it is matched with the
// instances the inventory lists, or shown as one tessera-node has not created
// yet, on the node's `mig` list.
//
// No I/O; thread-compatible (a plain value).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "core/allocation.h"
#include "core/node_state.h"
#include "core/resource_config.h"

namespace tessera::kubectl {

using Json = nlohmann::json;

// The pod annotation selecting dynamic MIG (HAMi's; scheduler/mig_placement.h
// reads it for placement, which kubectl does not link).
inline constexpr std::string_view kVgpuModeAnnotation = "nvidia.com/vgpu-mode";

enum class InventoryState { kOk, kMissing, kCorrupt };

// One MIG instance on a GPU in MIG mode: one the inventory lists (created),
// one a pod's allocation names and the inventory does not list yet (dynamic
// MIG: tessera-node creates it at Allocate), or both, matched by GPU, profile
// and start.
struct MigInstanceView {
  std::string gpu_uuid;
  int gpu_index = 0;
  std::string profile;  // "1g.10gb"
  int start = 0;        // first memory slice
  int size = 0;         // memory slices; 0 = unknown (a profile tessera has no table for)
  int64_t memory_mib = 0;
  std::string mig_uuid;  // "" = not created yet
  bool healthy = true;
  std::string used_by;    // the inventory's "<ns>/<pod>/<container>" ("" = free, or not listed)
  std::string pod;        // "ns/name" of the pod whose allocation names it ("" = none)
  std::string container;  // of that pod

  // "start:size" as nvidia-smi writes a placement ("6:1"; "6:?" if the size is unknown).
  std::string Placement() const;
  // Who holds it: "ns/pod/container" from the allocation, else the
  // inventory's used_by, else "" (free).
  std::string Holder() const;
};

struct NodeView {
  std::string name;
  InventoryState inventory = InventoryState::kMissing;
  std::string inventory_error;  // kCorrupt: why the annotation could not be read
  std::string heartbeat;        // kOk: as published
  bool stale = false;           // kOk: heartbeat older than ViewOptions::stale_after
  int64_t heartbeat_age_seconds = 0;
  core::NodeState state;              // kOk: the GPUs and what is allocated on them
  std::vector<std::string> pods;      // "ns/name" of pods with slices here
  std::vector<std::string> problems;  // allocations that could not be accounted here
  // kOk: the instances of its GPUs in MIG mode, by GPU index, then start.
  std::vector<MigInstanceView> mig;
};

enum class AllocationSource { kNone, kTessera, kHami };
const char* AllocationSourceName(AllocationSource source);

struct PodView {
  std::string ns;
  std::string name;
  std::string node;    // spec.nodeName, else the node the allocation names ("" = not placed)
  bool bound = false;  // spec.nodeName is set
  std::string phase;
  std::string scheduler_name;
  bool terminal = false;  // Succeeded or Failed: its slices are free again
  bool asks_gpu = false;  // some container names a GPU resource
  // HAMi's nvidia.com/vgpu-mode: mig (case-insensitive), as tessera-scheduler
  // reads it: the pod asks for MIG instances created for it.
  bool asks_dynamic_mig = false;
  AllocationSource source = AllocationSource::kNone;
  std::string allocation_error;                       // the annotation is there but unreadable
  std::vector<core::ContainerAllocation> containers;  // the slices, per container
  std::string accounting_error;                       // the slices do not match the node's inventory
  Json object;                                        // the Pod as the API server returned it

  std::string key() const { return ns + "/" + name; }
};

struct ViewOptions {
  Clock::Wall now = std::chrono::system_clock::now();
  // A heartbeat older than this marks the node stale (tessera-scheduler's
  // inventoryStaleSeconds, default 120); zero = never stale.
  std::chrono::seconds stale_after{120};
  core::ResourceConfig resources;  // the resource names pods ask with
};

struct ClusterView {
  std::vector<NodeView> nodes;  // sorted by name
  std::vector<PodView> pods;    // sorted by namespace, name

  const NodeView* FindNode(const std::string& name) const;
  const PodView* FindPod(const std::string& ns, const std::string& name) const;
};

// `nodes` and `pods` are the items of a Node and a Pod list.
ClusterView BuildClusterView(std::vector<Json> nodes, std::vector<Json> pods,
                             const ViewOptions& options = {});

}  // namespace tessera::kubectl
