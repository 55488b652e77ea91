// The limits file: a container's allocation where the container cannot write
// it (docs/security.md). A process of the container can write its region file
// and set its children's environment, so libvgpu takes the limits it enforces
// from this file when there is one (vgpu/config.h).
//
// Allocate creates `<region_host_dir>/<uuid>.limits/` beside the region
// directory `<uuid>/` (not inside it: the container mounts that one
// read-write) and mounts it read-only at contract::kLimitsContainerDir. The
// kubelet does not tell Allocate which pod it serves, so the file is written
// later: each monitor pass, once the kubelet's PodResources ties the region to
// a container and the pod's allocation annotation is known, WriteContainerLimits
// writes that container's entry (the allocation payload with one container)
// to `limits.json` there, atomically (a reader sees the old file or the new),
// and again whenever it would change. Until then libvgpu holds the container
// to its environment's limits, and the node agent's enforcement to the
// allocation annotation.
//
// What a container can do to the read-only mount: nothing, without
// CAP_SYS_ADMIN in the mount's user namespace (remounting it read-write,
// unmounting it or mounting over it all need that capability); a pod that has
// it (privileged) can do anything on the node anyway.
//
// Thread-safety: free functions; the file system is the only shared state.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "core/allocation.h"
#include "node/config.h"
#include "node/node_pods.h"
#include "node/region_catalog.h"

namespace tessera::node {

// `<region_name>.limits`, the directory beside a region directory.
std::string LimitsDirName(const std::string& region_name);

// Creates `<root>/<region_name>.limits/` (mode 0755, the agent's own: the
// container's users cannot write it even where they share the agent's uid
// namespace, and it is mounted read-only anyway). Sets `path` to it.
Status MakeLimitsDirectory(const std::string& root, const std::string& region_name, std::string& path);

// The file for a container of a pod tessera-scheduler did not place: the
// node's policy for such pods, and under whole-gpu the GPUs behind the
// kubelet's device IDs (vgpu::parse_limits reads both forms).
std::string EncodeUnplacedLimits(UnplacedPodsPolicy policy, const std::vector<std::string>& gpu_uuids);

// For each owned region of `regions` whose pod's allocation is in
// `allocations`, or whose pod is among `unplaced` (then with `policy`):
// writes `<root>/<name>.limits/limits.json` when its content differs from
// what is there. A region whose limits directory does not exist (made before
// limits files, or by hand) is skipped. Returns how many files were written;
// errors are logged and skipped.
int WriteContainerLimits(const std::string& root, const std::vector<RegionDir>& regions,
                         const NodeAllocations& allocations, const std::vector<UnplacedPod>& unplaced = {},
                         UnplacedPodsPolicy policy = UnplacedPodsPolicy::kRefuse);

}  // namespace tessera::node
