// Dynamic MIG placement: for a request (memory, optional SM share) on a GPU
// with some instances already there, which profile to create and where.
//
// The profile is the smallest that holds the request (fewest memory slices,
// then compute slices, then MiB) among the allowed ones with a free placement;
// a larger one only when every smaller one that holds it has no free
// placement. The placement is where the GPU stays most useful afterwards:
//
//   Value(S) = the expected share of the GPU's memory slices allocated when
//              the GPU first has to refuse a request, if requests keep coming
//              from the workload mix (profile -> probability) and are placed
//              by this same rule.
//
// It is computed exactly, by dynamic programming over every valid set of
// instances of the model (a few hundred to a few thousand sets: the geometry
// is tiny), once per Placer. Place picks the free start a of the chosen
// profile with the highest Value(S + a); ties go to the lowest start.
// Fragmentation is what this avoids: a placement that strands slices no likely
// profile can use lowers the value of every later state. PlaceFirstFit is the
// baseline: the same profile, its lowest free start.
//
// Thread-safety: a Placer is immutable after construction; Place may be called
// from any thread. Pure functions otherwise.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "core/mig/geometry.h"

namespace tessera::core::mig {

struct PlacementRequest {
  uint64_t memory_mib = 0;  // the instance holds at least this much
  int sm_percent = 0;       // 0-100: at least this share of the whole GPU's SMs (the full profile's); 0 = any
  // Profiles that may be created; empty = every profile without "+me" (media
  // extensions are for layouts, and there is only one of each).
  std::vector<std::string> allowed_profiles;
};

// A workload mix: how likely each profile's size is among requests.
struct MixEntry {
  std::string profile;
  double weight = 0;
};
using ProfileMix = std::vector<MixEntry>;

// The mix tessera assumes when none is configured (docs/mig.md): small
// instances most common. Per profile class on a 7-slice GPU: 1g 0.35, 1g with
// two memory slices 0.10, 2g 0.20, 3g 0.20, 4g 0.05, 7g 0.10; on the A30: 1g
// 0.45, 2g 0.35, 4g 0.20. Never "+me" profiles.
ProfileMix DefaultMix(const Model& model);

// The profiles that hold `request`, smallest first (may be empty).
std::vector<const Profile*> ProfilesFor(const Model& model, const PlacementRequest& request);

class Placer {
 public:
  // `mix` names profiles of `model` (unknown names and weights <= 0 are
  // ignored; weights are normalised). Builds the value table.
  Placer(const Model& model, ProfileMix mix);

  const Model& model() const { return model_; }

  // The instance to create for `request` beside `existing`. Errors: the
  // existing instances are not a valid set; no allowed profile holds the
  // request (naming the largest); none that holds it has a free placement
  // (naming them and what is in the way).
  Result<Instance> Place(std::span<const Instance> existing, const PlacementRequest& request) const;

  // Value (above) of a valid set of instances, in [0, 1]; an error for an
  // invalid one.
  Result<double> Value(std::span<const Instance> instances) const;

 private:
  struct Slot {
    size_t profile;  // index into model_.profiles
    uint32_t start;
    uint32_t mask;  // memory slices
  };
  Result<uint32_t> StateOf(std::span<const Instance> instances) const;
  bool Valid(uint32_t state) const;
  double Solve(uint32_t state);
  // Index of the profile `request_profile` falls back to in `state`, with its
  // free slots; -1 when none has room.
  int Chain(uint32_t state, size_t request_profile, std::vector<size_t>* free_slots) const;

  const Model& model_;
  std::vector<std::pair<size_t, double>> mix_;  // profile index, normalised weight
  std::vector<Slot> slots_;
  std::vector<std::vector<size_t>> holders_;  // per profile: profiles that hold it, smallest first
  std::unordered_map<uint32_t, double> value_;
};

// First-fit: the same profile choice as Placer::Place, at its lowest free start.
Result<Instance> PlaceFirstFit(const Model& model, std::span<const Instance> existing,
                               const PlacementRequest& request);

}  // namespace tessera::core::mig
