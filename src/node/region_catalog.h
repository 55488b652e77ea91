// RegionCatalog: the per-container region directories under region_host_dir,
// who owns each one, and which of them can go.
//
// Allocate creates `<region_host_dir>/<uuid>/` (mounted into the container)
// and, beside it and out of the container's reach, the record
// `<region_host_dir>/<uuid>.json`: the device IDs the kubelet allocated and
// when. The kubelet never tells Allocate which pod it serves, but its
// PodResources API lists, per pod and container, the device IDs each holds;
// the device IDs join the two. Each device ID belongs to one container at a
// time, so a live container's region is the newest record with exactly the
// container's device IDs (an older record with the same IDs belonged to a pod
// that has gone since).
//
// Cleanup removes a region directory and its record only when all of these
// hold: the kubelet's list was read successfully this pass, no listed
// container owns the directory, and its record is older than the grace period
// (Allocate runs before the container exists, and a kubelet may list a new
// pod's devices a moment later); with a RegionsInFlight registry, also not
// while its Allocate runs or within the grace after it answered, however old
// the record (regions_in_flight.h). A directory without a readable record is
// never removed: what cannot be attributed is reported, not guessed at.
// Allocate writes the record before the directories, so what an Allocate
// killed part-way leaves is a record whose directory does not exist (removed
// past the grace period, with its limits directory) or the temp file of a
// record never renamed into place by an earlier process (removed): the
// kubelet never got an answer naming either, so no container holds them.
//
// Thread-safety: Scan and CleanUp touch only the file system and may run on
// any one thread at a time; the free functions are pure.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "host/region_reader.h"
#include "node/pod_resources.h"
#include "node/regions_in_flight.h"

namespace tessera::node {

inline constexpr int kRegionRecordVersion = 1;

// What Allocate knew about a region directory when it made it.
struct RegionRecord {
  std::string resource_name;
  std::vector<std::string> device_ids;  // as the kubelet sent them
  int64_t created_unix = 0;             // seconds since the epoch
  bool operator==(const RegionRecord&) const = default;
};

std::string EncodeRegionRecord(const RegionRecord& record);
// Strict: the version must match and every field must be present and typed.
Result<RegionRecord> DecodeRegionRecord(const std::string& text);

// Writes `<dir>/<name>.json` atomically (temp file + rename).
Status WriteRegionRecord(const std::string& dir, const std::string& name, const RegionRecord& record);

// A pod's container, as the kubelet names it.
struct ContainerRef {
  std::string pod_namespace;
  std::string pod_name;
  std::string container_name;
  bool operator==(const ContainerRef&) const = default;
};

// The limits of a DRA claim's region (claim_regions.h): what tessera-dra
// wrote to the claim's read-only limits.json when it prepared the claim.
struct ClaimLimits {
  std::string claim;  // "<namespace>/<name>"
  std::string error;  // why limits.json was refused ("" = read)
  // Per GPU UUID: bytes (0 = no limit) and cores (percent; 0 = no limit).
  std::map<std::string, uint64_t> memory_bytes;
  std::map<std::string, int> cores;
};

struct RegionDir {
  std::string name;         // the directory's name (a UUID)
  std::string path;         // its host path
  std::string region_file;  // the region file's name inside it
  dev_t dev = 0;            // identity of the directory: a container's mount of it
  ino_t ino = 0;            // shows the same device and inode
  std::optional<RegionRecord> record;
  std::string record_error;     // why the record is missing or unreadable
  bool region_missing = false;  // no process has used CUDA in the container yet
  std::optional<host::RegionSnapshot> region;
  std::string region_error;  // why the region file was refused (empty when missing or fine)
  std::optional<ContainerRef> owner;
  // A DRA claim's region (tessera-dra's, claim_regions.h): its limits. Unset
  // for tessera-node's own regions.
  std::optional<ClaimLimits> claim;
};

class RegionCatalog {
 public:
  // `region_file_name` is the file libvgpu keeps inside each directory.
  // `clock` dates the clean-up (nullptr: the real clock). `in_flight`, when
  // given, names the regions whose Allocate is running or just answered,
  // which the clean-up keeps; it must outlive the catalog.
  RegionCatalog(std::string region_host_dir, std::string region_file_name, Clock* clock = nullptr,
                RegionsInFlight* in_flight = nullptr);

  const std::string& root() const { return root_; }

  // Every region directory (names shaped like the UUIDs Allocate gives), with
  // its record and its region file read. A root that does not exist yet is an
  // empty catalog; one that cannot be listed is an error.
  Result<std::vector<RegionDir>> Scan() const;

  // Removes the directories of `dirs` that no container owns and whose record
  // is older than `grace_seconds`, with their records. Call only with owners
  // assigned from a successful PodResources list. Returns the removed names;
  // a failure to remove one is logged and the others proceed.
  // Also removes (and logs) what Allocates killed part-way left (above),
  // which is not in the names returned.
  std::vector<std::string> CleanUp(const std::vector<RegionDir>& dirs, int64_t grace_seconds) const;

 private:
  void RemoveInterruptedAllocations(int64_t grace_seconds) const;

  const std::string root_;
  const std::string region_file_name_;
  Clock* const clock_;
  RegionsInFlight* const in_flight_;
};

// Sets each directory's owner from the kubelet's list (entries of
// `resource_name` only): per listed container, the newest record whose
// device IDs are exactly the container's.
void AssignOwners(std::vector<RegionDir>& dirs, const std::vector<ContainerDevices>& containers,
                  const std::string& resource_name);
// The same for regions of several resources (vGPU slices and time-sliced
// replicas): a region is matched within its own resource's containers.
void AssignOwners(std::vector<RegionDir>& dirs, const std::vector<ContainerDevices>& containers,
                  const std::set<std::string>& resource_names);

// True for names Allocate gives region directories (RFC 4122 text form).
bool IsRegionDirName(const std::string& name);

}  // namespace tessera::node
