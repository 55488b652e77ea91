// The node inventory payload: the GPUs a node offers, published by the node
// agent as the node annotation `tessera.io/gpu-inventory` and read by the
// scheduler:
//
//   {"version": 1, "node": "node-a", "heartbeat": "2026-11-22T02:31:53Z",
//    "gpus": [{"uuid": "GPU-…", "index": 0, "model": "NVIDIA A100-SXM4-80GB",
//              "memoryMiB": 81920, "smCount": 108, "numaNode": 0, "healthy": true,
//              "slots": 10, "cores": 100, "migCapable": true,
//              "mode": "mig-dynamic",   (vgpu|exclusive|timeslice|mps|mig|mig-dynamic)
//              "replicas": 4,           (only timeslice and mps GPUs)
//              "heldBy": "ml/legacy-job",   (optional: held whole by a pod tessera did not place)
//              "links": [{"peer": "GPU-…", "kind": "nvlink", "lanes": 12}],
//              "mig": {"mode": "dynamic",   (optional: only for a GPU in MIG mode)
//                      "devices": [{"uuid": "MIG-…", "profile": "1g.10gb", "start": 6,
//                                   "size": 1, "memoryMiB": 9728, "smCount": 14,
//                                   "healthy": true,
//                                   "usedBy": "ml/train-0/main"}]}}]}   (usedBy optional)
//
// A MIG device's parent is the GPU it is listed under.
//
// "mode" and "replicas" were added within version 1. An inventory without
// "mode" (an older agent's) reads as vgpu, or as the MIG mode its "mig" object
// names. A GPU in a MIG mode is still written with "mig": {"mode":
// "static"|"dynamic", ...}, so an older reader keeps seeing its MIG devices;
// both modes must then agree. An older reader sees a GPU in a new mode as a
// vGPU GPU with its "slots" (agents publish 0 for replica GPUs, 1 for an
// exclusive one): upgrade the scheduler before the agents.
//
// Same policy as the allocation payload: every known field is required and
// checked strictly; unknown members are ignored; an incompatible change bumps
// "version". Encoding validates first. No I/O; thread-safe; no exception escapes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/device.h"

namespace tessera::core {

inline constexpr int kInventoryVersion = 1;
inline constexpr std::string_view kInventoryAnnotation = "tessera.io/gpu-inventory";

// Upper bounds for sanity: no node has more GPUs, no GPU more NVLinks or slots.
inline constexpr int kMaxGpuIndex = 1023;
inline constexpr int kMaxLinkLanes = 64;
inline constexpr int kMaxSlots = 1024;
inline constexpr int kMaxReplicas = 1024;
inline constexpr int kMaxCoresPercent = 10000;                      // core scaling up to 100
inline constexpr size_t kMaxHeldByLength = 253 + 1 + 253;           // namespace/name
inline constexpr size_t kMaxUsedByLength = 253 + 1 + 253 + 1 + 63;  // namespace/pod/container
inline constexpr size_t kMaxMigUuidLength = 128;
inline constexpr size_t kMaxMigProfileLength = 32;
inline constexpr int kMaxMigSlices = 8;  // memory slices of the largest MIG geometry

struct NodeInventory {
  std::string node;
  std::string heartbeat;  // RFC 3339, when the agent last published; staleness is the reader's call
  std::vector<Gpu> gpus;
  bool operator==(const NodeInventory&) const = default;
};

// The rules every inventory obeys: a node name; an RFC 3339 heartbeat; per GPU
// a well-formed UUID unique on the node, a unique index 0..1023, a non-empty
// model, memoryMiB 0..1048576, smCount >= 0, numaNode >= -1, slots 0..1024
// (0 = offers no vGPU), cores 1..10000 (percent of the GPU offered; absent in
// an inventory from before the field existed, which reads as 100), heldBy absent or "<namespace>/<name>";
// a mode of SharingMode; replicas 1..1024 for timeslice, 0..1024 for mps
// (0 = shares sized by tessera-scheduler), 0 for every other mode;
// per link a peer that is another GPU of
// this inventory, listed once, lanes 1..64; "mig" only on a migCapable GPU in
// MIG mode (static or dynamic), and per MIG device a "MIG-…" UUID unique on
// the node, a profile name, a placement start 0..7 and size 1..8 within 8
// memory slices and not overlapping another device of the GPU, memoryMiB up to
// the GPU's, smCount >= 0, usedBy absent or "<namespace>/<pod>/<container>".
// An empty GPU list is valid (a node without GPUs).
Status ValidateInventory(const NodeInventory& inventory);

Result<nlohmann::json> InventoryToJson(const NodeInventory& inventory);
Result<std::string> EncodeInventory(const NodeInventory& inventory);

Result<NodeInventory> InventoryFromJson(const nlohmann::json& json);
Result<NodeInventory> DecodeInventory(std::string_view text);

}  // namespace tessera::core
