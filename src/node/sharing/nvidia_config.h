// NVIDIA's device-plugin configuration file (k8s-device-plugin, `version: v1`),
// read as operators already have it: the `sharing.timeSlicing` and
// `sharing.mps` sections decide which GPUs are shared and how many replicas
// each gets (docs/sharing.md, "NVIDIA's config file").
//
//   version: v1
//   flags: {migStrategy: none}          # migStrategy read; other flags ignored
//   sharing:
//     timeSlicing:                      # or mps: (never both)
//       renameByDefault: false          # true: <name>.shared
//       failRequestsGreaterThanOne: false   # mps: true unless set
//       resources:
//       - name: nvidia.com/gpu          # "gpu" means nvidia.com/gpu
//         replicas: 4                   # >= 2
//         rename: nvidia.com/gpu.ts     # optional
//         devices: all                  # all | a count | [0, "GPU-…", "1:0", "MIG-…"]
//
// What NVIDIA's plugin refuses is refused here with its reason (its message,
// prefixed by where in the file). Beyond it: both sections set is an error
// (NVIDIA silently prefers mps), and two entries of one resource selecting the
// same GPU are an error (NVIDIA ignores `devices` and `rename`; tessera honours
// both, which is what makes the selection per GPU).
//
// Thread-safety: pure functions over values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace tessera::node::sharing {

// `devices:` of one resource: "all", the first `count` GPUs, or a list.
struct NvidiaDeviceSelection {
  enum class Kind { kAll, kCount, kList };
  Kind kind = Kind::kAll;
  int count = 0;
  // As written (an index "0", a MIG index "0:1", "GPU-<uuid>" or
  // "MIG-<uuid>"/"MIG-GPU-<uuid>/<gi>/<ci>").
  std::vector<std::string> list;
  bool operator==(const NvidiaDeviceSelection&) const = default;
};

// Whether a `devices:` list entry names a MIG device (a MIG index or MIG UUID)
// rather than a whole GPU.
bool IsMigDeviceRef(const std::string& ref);

struct NvidiaReplicatedResource {
  std::string name;    // fully qualified: "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
  std::string rename;  // fully qualified; "" = advertised under `name`
  NvidiaDeviceSelection devices;
  int replicas = 0;
  // The name the replicas are advertised under.
  const std::string& AdvertisedName() const { return rename.empty() ? name : rename; }
  bool operator==(const NvidiaReplicatedResource&) const = default;
};

struct NvidiaReplicatedResources {
  bool rename_by_default = false;
  bool fail_requests_greater_than_one = false;
  // With rename_by_default, entries without `rename` have it set to
  // "<name>.shared" here already.
  std::vector<NvidiaReplicatedResource> resources;
};

enum class NvidiaSharingStrategy { kNone, kTimeSlicing, kMps };

// GFD's spelling, the value of nvidia.com/gpu.sharing-strategy: "none",
// "time-slicing", "mps".
const char* NvidiaSharingStrategyName(NvidiaSharingStrategy strategy);

struct NvidiaConfig {
  NvidiaSharingStrategy strategy = NvidiaSharingStrategy::kNone;
  NvidiaReplicatedResources sharing;  // the active section's; empty for kNone
  std::string mig_strategy;           // flags.migStrategy: "" (unset), none, single or mixed
  // Keys read and accepted but without effect in tessera ("flags.plugin",
  // "resources", ...), for one log line: the file is NVIDIA's as it is.
  std::vector<std::string> ignored;
};

// Parses the file's text (YAML or JSON). `source` prefixes errors, e.g.
// "/etc/nvidia/config.yaml: sharing.timeSlicing.resources[0]: number of
// replicas must be >= 2".
Result<NvidiaConfig> ParseNvidiaConfig(std::string_view text, const std::string& source);

// Reads and parses the file at `path`.
Result<NvidiaConfig> ReadNvidiaConfigFile(const std::string& path);

}  // namespace tessera::node::sharing
