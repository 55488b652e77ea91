// Applying a mig-parted layout to this node's GPUs through a MigDriver: the
// node half of the layouts of issue 14 (the plan itself is
// src/core/mig/layout.h's).
//
// One call: list the GPUs, resolve the configuration into per-GPU plans
// (ResolveLayout), then, for each MIG-managed GPU the plan touches:
//   - MIG mode: turned on (or off) when it is not. Hopper and later switch at
//     once; A100/A30 leave the change pending until a GPU reset — the GPU is
//     then reported pending and nothing more is done to it (the mode is set
//     once; a later call that finds it pending does not set it again);
//   - instances: DiffInstances against what exists, with the instances a
//     container holds (or that run processes) marked in use; those the
//     layout no longer names are destroyed, except in-use ones, which are
//     left, reported and retried by the caller later; then the missing ones
//     are created at their planned placements (GPU instance + one compute
//     instance spanning it).
// All or nothing per GPU: a failure while creating destroys what this call
// created on that GPU. Nothing at all is applied when the layout is wrong for
// any managed GPU (unknown profile, does not fit, MIG asked of a GPU without
// it, a configuration the file lacks, `single` with several profiles): the
// result is kFailed and names each cause. Applying a layout that is in place
// changes nothing.
//
// Thread-safety: a pure function of its arguments and the driver.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/mig/layout.h"
#include "host/nvml_mig.h"
#include "node/mig/mig_devices.h"

namespace tessera::node::mig {

enum class ApplyState {
  kSuccess,  // every managed GPU is as the layout says
  kPending,  // waiting: a MIG mode change needs a GPU reset, or instances in use block the layout
  kFailed,   // the layout cannot be applied (the messages say why); nothing of it was applied
};

const char* ApplyStateName(ApplyState state);    // "success", "pending", "failed"
const char* ApplyStateReason(ApplyState state);  // the Event's: "MigConfigApplied", "...Pending", "...Failed"

struct ApplyRequest {
  const core::mig::LayoutFile* file = nullptr;
  std::string config;  // the configuration to apply (the node's nvidia.com/mig.config)
  // Whether a GPU index is MIG-managed; the others are left alone whatever the layout says.
  std::function<bool(int index)> managed;
  MigStrategy strategy = MigStrategy::kMixed;
  // MIG UUIDs a container holds (PodResources): never destroyed.
  std::set<std::string> in_use;
};

struct ApplyResult {
  ApplyState state = ApplyState::kSuccess;
  // One sentence per GPU or cause, for the log and the Event.
  std::vector<std::string> messages;
  bool reset_required = false;  // some GPU waits for a reset
  bool blocked = false;         // some instance in use blocks the layout: retry later
  int created = 0;
  int destroyed = 0;

  std::string Summary() const;  // the messages joined with "; "
};

ApplyResult ApplyLayout(host::MigDriver& driver, const ApplyRequest& request);

}  // namespace tessera::node::mig
