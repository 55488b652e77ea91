// What the scheduler's informers keep of each Pod and Node: a projection made
// as the object arrives (client-go's informer transform), so the caches hold
// what scheduling, the workload learner, the dashboard and bind read, and
// never the whole object (a kubelet's Node is ~6.6 KB of JSON, most of it
// images and conditions; a Pod ~2 KB, most of it env, volumes and status).
//
// Kept of a Pod: metadata name, namespace, uid, resourceVersion,
// creationTimestamp, deletionTimestamp, labels (PodDisruptionBudgets select
// by them at preemption) and the annotations under tessera.io/, nvidia.com/
// and hami.io/ (allocation, policies, GPU type/UUID filters, vgpu-mode); spec
// nodeName, schedulerName, priority, and each container's and init
// container's name and resources; status phase, nominatedNodeName (preemption
// holds) and a PodScheduled=False condition (the dashboard's "waiting" reason).
// Kept of a Node: metadata name, resourceVersion, labels and the
// tessera.io/ annotations; spec taints and unschedulable; status addresses
// (the dashboard scrapes the InternalIP).
//
// A tessera.io/gpu-inventory annotation longer than kMaxInventoryBytes is not
// kept: the projection puts kRefusedInventoryAnnotation (its length) in its
// place, logs it, and ClusterState reports the node as having no usable
// inventory with that reason.
//
// PodFields/NodeFields select what the projections read, for the informers
// to decode only that much of each object (kube/selected_json.h): a superset
// of what ProjectPod/ProjectNode keep, so projecting the selected tree gives
// what projecting the whole object gives.
//
// Thread-safety: pure functions; the selections are immutable.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kube/selected_json.h"

namespace tessera::scheduler {

// Kubernetes refuses objects whose annotations add up to more than 256 KiB;
// an inventory of 8 GPUs is ~1.5 KB, of 16 MIG-partitioned GPUs a few tens.
inline constexpr size_t kMaxInventoryBytes = 256 * 1024;
// Set only by ProjectNode: "<bytes>" of an inventory that was too long.
inline constexpr std::string_view kRefusedInventoryAnnotation = "tessera.io/gpu-inventory-refused";

void ProjectPod(nlohmann::json& pod);
void ProjectNode(nlohmann::json& node);

std::shared_ptr<const kube::FieldSelection> PodFields();
std::shared_ptr<const kube::FieldSelection> NodeFields();

}  // namespace tessera::scheduler
