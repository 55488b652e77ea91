// The allocation payload: what the scheduler decided for a pod, as versioned
// JSON. The same text is the pod annotation `tessera.io/allocation` and, via
// the Downward API, the container env var TESSERA_ALLOCATION:
//
//   {"version": 1, "node": "node-a",
//    "containers": [{"name": "app",
//                    "devices": [{"uuid": "GPU-…", "memoryMiB": 3000, "cores": 30}]}]}
//
// A container entry may carry "init": true (an init container; absent =
// false); it is written only when true, so app-only payloads are exactly the
// agreed example above. memoryMiB 0 = no memory limit; cores is percent of the GPU's compute (100 =
// exclusive, 0 = no compute limit). Decoding is strict about the fields it
// knows (presence, JSON type, range, UUID syntax, duplicates) and ignores
// members it does not know, so that a later writer may add optional fields
// without breaking older readers; anything incompatible bumps "version".
// Encoding validates first, so a payload that readers would reject is never
// written. No I/O; thread-safe; no exception escapes.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "contract/container_contract.h"
#include "core/allocation.h"

namespace tessera::core {

// The contract's names (contract/container_contract.h has the rules libvgpu
// applies too; a test holds the two readers to the same verdicts).
inline constexpr int kAllocationVersion = contract::kAllocationVersion;
inline constexpr std::string_view kAllocationAnnotation = contract::kAllocationAnnotation;
inline constexpr std::string_view kAllocationEnvVar = contract::kAllocationEnv;
inline constexpr std::string_view kContainerNameEnvVar = contract::kContainerNameEnv;

// A device may carry "mig": {"profile": "1g.10gb", "start": 6} (added within
// version 1, optional, written only then): dynamic MIG, the instance
// tessera-node creates on the GPU "uuid" at Allocate (docs/mig.md).
inline constexpr size_t kMaxMigProfileNameLength = 32;
// A device may carry "mps": true (added within version 1, optional, written
// only then): an MPS client share, memoryMiB > 0 its pinned memory limit and
// cores 1..100 its active-thread percentage (allocation.h says how the node
// reads it). Not together with "mig".
inline constexpr int kMaxMigStart = 7;

// The rules every allocation obeys: a node name; at least one container; each
// container a non-empty unique name and 1..16 devices; each device a
// well-formed UUID (GPU-… or MIG-…) not repeated within the container,
// memoryMiB 0..1048576, cores 0..100; with a MIG profile (1..32 characters) a
// GPU-… UUID and a start 0..7; an MPS share a GPU-… UUID, memoryMiB >= 1,
// cores 1..100 and no MIG profile. The error names the container and field.
Status ValidateAllocation(const PodAllocation& allocation);

Result<nlohmann::json> AllocationToJson(const PodAllocation& allocation);
Result<std::string> EncodeAllocation(const PodAllocation& allocation);

Result<PodAllocation> AllocationFromJson(const nlohmann::json& json);
// Parses the text (e.g. the annotation value or getenv("TESSERA_ALLOCATION")).
// Truncated or malformed JSON is an error that says where parsing stopped.
Result<PodAllocation> DecodeAllocation(std::string_view text);

// The entry of `container_name` (TESSERA_CONTAINER_NAME). When the name is
// empty and the allocation has exactly one container entry, that entry
// applies. A name that is not in the allocation is an error, even when there
// is only one entry: the payload is then for another container.
Result<ContainerAllocation> SelectContainerAllocation(const PodAllocation& allocation,
                                                      std::string_view container_name);

// One container's limits as libvgpu reads them from a file it cannot write
// (vgpu::parse_limits): version 1, the pod's node, that container's entry
// alone, without MIG instances (the GPU isolates those; libvgpu does not run
// there). tessera-node's limits file and the per-container limits annotation
// bind writes (contract::kLimitsAnnotationPrefix) both hold it. Errors when
// the container is not in the allocation or has no device that is not a MIG
// instance.
Result<std::string> EncodeContainerLimits(const PodAllocation& pod, const std::string& container);

}  // namespace tessera::core
