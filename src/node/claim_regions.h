// Claim regions: the region directories tessera-dra makes for DRA claims
// (docs/dra.md), seen by tessera-node's enforcement of last resort.
//
// tessera-dra prepares a claim by making, under its region root
// (--region-host-dir, /var/lib/tessera/dra-regions), `<claim UID>/` (the
// region, mounted read-write into the claim's containers) and beside it
// `<claim UID>.limits/limits.json` (the claim's limits as an allocation
// payload with one entry, `claim:<ns>/<name>`, mounted read-only). tessera-node
// scans that root too (--dra-region-dir) and
//  - takes a claim region's limits from its limits.json, which only
//    tessera-dra writes (the container sees the directory read-only and the
//    root not at all), never from the region or the environment the container
//    controls while the file is readable;
//  - ties the region to a container through the kubelet's PodResources
//    `dynamic_resources`: tessera-dra names each CDI device it returns
//    `<kind>=<claim UID>-<device>[-<share>]`, so a container listing such a
//    CDI device holds the claim whose region is `<claim UID>/`. A claim
//    several containers share has one region; the first container the
//    kubelet lists is named as its owner (Events and metrics), and the
//    enforcer holds all of them together to the claim's limits, as libvgpu does.
// tessera-dra owns these directories: tessera-node never removes or writes
// them (it records host pids in region slots, as it does in its own).
//
// Thread-safety: free functions; the file system is the only shared state.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "node/pod_resources.h"
#include "node/region_catalog.h"

namespace tessera::node {

// Reads `<root>/<region_name>.limits/limits.json`. Errors (a missing or
// malformed file, not one entry named `claim:<ns>/<name>`, a negative or
// out-of-range figure) come back in ClaimLimits::error with no limits.
ClaimLimits ReadClaimLimits(const std::string& root, const std::string& region_name);

// Every claim region under `root` (names shaped like UIDs), its region file
// read and its limits set (RegionDir::claim). A root that does not exist is
// none; one that cannot be listed is an error.
Result<std::vector<RegionDir>> ScanClaimRegions(const std::string& root, const std::string& region_file_name);

// Sets each claim region's owner from the DRA entries of the kubelet's list
// (ContainerDevices::cdi_devices): the first container holding a CDI device
// of the claim. Regions without a claim are left alone.
void AssignClaimOwners(std::vector<RegionDir>& dirs, const std::vector<ContainerDevices>& containers);

// The claim UID a tessera CDI device ID names ("tessera.io/gpu=<UID>-gpu-0"
// -> "<UID>"); "" when the ID is not shaped so.
std::string ClaimUidOfCdiDevice(const std::string& cdi_device_id);

}  // namespace tessera::node
