#include "core/mig/placement.h"

#include <algorithm>
#include <cassert>
#include <functional>

namespace tessera::core::mig {
namespace {

uint32_t MinSmCount(const Model& model, int sm_percent) {
  if (sm_percent <= 0) return 0;
  const uint64_t whole = model.Whole().sm_count;
  return static_cast<uint32_t>((whole * static_cast<uint64_t>(std::min(sm_percent, 100)) + 99) / 100);
}

bool Allowed(const Profile& p, const std::vector<std::string>& allowed) {
  if (allowed.empty()) return !p.media_extension;
  return std::find(allowed.begin(), allowed.end(), p.name) != allowed.end();
}

// Profiles (indices) holding `memory_mib` and `min_sm` SMs, smallest first
// (the tables are sorted by size).
std::vector<size_t> Holders(const Model& model, uint64_t memory_mib, uint32_t min_sm,
                            const std::vector<std::string>& allowed) {
  std::vector<size_t> out;
  for (size_t i = 0; i < model.profiles.size(); ++i) {
    const Profile& p = model.profiles[i];
    if (Allowed(p, allowed) && p.memory_mib >= memory_mib && p.sm_count >= min_sm) out.push_back(i);
  }
  return out;
}

std::string DescribeRequest(const PlacementRequest& r) {
  std::string out = std::to_string(r.memory_mib) + " MiB";
  if (r.sm_percent > 0) out += " and " + std::to_string(r.sm_percent) + "% of the SMs";
  return out;
}

std::string List(std::span<const Instance> instances) {
  std::string out;
  for (const Instance& in : instances) out += (out.empty() ? "" : ", ") + Describe(in);
  return out.empty() ? "none" : out;
}

Error NothingHolds(const Model& model, const PlacementRequest& request) {
  const Profile* largest = nullptr;
  for (const Profile& p : model.profiles) {
    if (Allowed(p, request.allowed_profiles)) largest = &p;
  }
  if (largest == nullptr)
    return Error{"none of the allowed profiles exists on " + model.key +
                 " (its profiles: " + model.ProfileNames() + ")"};
  return Error{"no MIG profile of " + model.key + " holds " + DescribeRequest(request) +
               " (the largest allowed, " + largest->name + ", has " + std::to_string(largest->memory_mib) +
               " MiB and " + std::to_string(largest->sm_count) + " of " +
               std::to_string(model.Whole().sm_count) + " SMs)"};
}

Error NoRoom(const Model& model, const PlacementRequest& request, const std::vector<size_t>& holders,
             std::span<const Instance> existing) {
  std::string names;
  for (size_t h : holders) names += (names.empty() ? "" : ", ") + model.profiles[h].name;
  return Error{"no free placement on this " + model.key + " for " + DescribeRequest(request) +
               ": every profile that holds it (" + names + ") overlaps or exceeds what is there (" +
               List(existing) + ")"};
}

}  // namespace

std::vector<const Profile*> ProfilesFor(const Model& model, const PlacementRequest& request) {
  std::vector<const Profile*> out;
  for (size_t i :
       Holders(model, request.memory_mib, MinSmCount(model, request.sm_percent), request.allowed_profiles))
    out.push_back(&model.profiles[i]);
  return out;
}

ProfileMix DefaultMix(const Model& model) {
  ProfileMix mix;
  for (const Profile& p : model.profiles) {
    if (p.media_extension) continue;
    double w = 0;
    if (model.compute_slices == 4) {  // A30
      w = p.compute_slices == 1 ? 0.45 : p.compute_slices == 2 ? 0.35 : 0.20;
    } else if (p.compute_slices == 1) {
      w = p.memory_slices == 1 ? 0.35 : 0.10;
    } else {
      w = p.compute_slices == 2 ? 0.20 : p.compute_slices == 3 ? 0.20 : p.compute_slices == 4 ? 0.05 : 0.10;
    }
    mix.push_back({p.name, w});
  }
  return mix;
}

Placer::Placer(const Model& model, ProfileMix mix) : model_(model) {
  double total = 0;
  for (const MixEntry& e : mix) {
    for (size_t i = 0; i < model_.profiles.size(); ++i) {
      if (model_.profiles[i].name == e.profile && e.weight > 0) {
        mix_.push_back({i, e.weight});
        total += e.weight;
      }
    }
  }
  for (auto& [profile, weight] : mix_) weight /= total;

  for (size_t i = 0; i < model_.profiles.size(); ++i) {
    const Profile& p = model_.profiles[i];
    for (uint32_t s : p.starts) slots_.push_back({i, s, ((1u << p.memory_slices) - 1u) << s});
    holders_.push_back(Holders(model_, p.memory_mib, p.sm_count, {}));
  }
  assert(slots_.size() <= 32);

  // Every valid set of instances, each generated once (slots in index order).
  std::function<void(uint32_t, size_t)> enumerate = [&](uint32_t state, size_t next) {
    value_.emplace(state, -1.0);
    for (size_t j = next; j < slots_.size(); ++j) {
      const uint32_t with = state | (1u << j);
      if (Valid(with)) enumerate(with, j + 1);
    }
  };
  enumerate(0, 0);
  for (auto& [state, value] : value_) Solve(state);
}

bool Placer::Valid(uint32_t state) const {
  uint32_t used = 0, compute = 0;
  std::vector<uint32_t> counts(model_.profiles.size(), 0);
  for (size_t j = 0; j < slots_.size(); ++j) {
    if ((state & (1u << j)) == 0) continue;
    const Slot& s = slots_[j];
    const Profile& p = model_.profiles[s.profile];
    if ((used & s.mask) != 0) return false;
    used |= s.mask;
    compute += p.compute_slices;
    if (compute > model_.compute_slices || ++counts[s.profile] > p.max_instances) return false;
  }
  return true;
}

int Placer::Chain(uint32_t state, size_t request_profile, std::vector<size_t>* free_slots) const {
  for (size_t h : holders_[request_profile]) {
    free_slots->clear();
    for (size_t j = 0; j < slots_.size(); ++j) {
      if (slots_[j].profile == h && (state & (1u << j)) == 0 && Valid(state | (1u << j)))
        free_slots->push_back(j);
    }
    if (!free_slots->empty()) return static_cast<int>(h);
  }
  return -1;
}

double Placer::Solve(uint32_t state) {
  double& memo = value_.at(state);
  if (memo >= 0) return memo;
  uint32_t allocated = 0;
  for (size_t j = 0; j < slots_.size(); ++j) {
    if ((state & (1u << j)) != 0) allocated += model_.profiles[slots_[j].profile].memory_slices;
  }
  const double share = static_cast<double>(allocated) / model_.memory_slices;
  double value = 0;
  std::vector<size_t> free_slots;
  for (const auto& [profile, weight] : mix_) {
    if (Chain(state, profile, &free_slots) < 0) {
      value += weight * share;  // refused here: what is allocated is the outcome
      continue;
    }
    double best = 0;
    for (size_t j : free_slots) best = std::max(best, Solve(state | (1u << j)));
    value += weight * best;
  }
  // `memo` is still valid: every state was inserted up front, Solve inserts none.
  memo = mix_.empty() ? share : value;
  return memo;
}

Result<uint32_t> Placer::StateOf(std::span<const Instance> instances) const {
  TESSERA_RETURN_IF_ERROR_WRAP(CheckInstances(model_, instances), "the instances on the GPU");
  uint32_t state = 0;
  for (const Instance& in : instances) {
    for (size_t j = 0; j < slots_.size(); ++j) {
      if (model_.profiles[slots_[j].profile].name == in.profile && slots_[j].start == in.start)
        state |= 1u << j;
    }
  }
  return state;
}

Result<double> Placer::Value(std::span<const Instance> instances) const {
  TESSERA_ASSIGN_OR_RETURN(uint32_t state, StateOf(instances));
  return value_.at(state);
}

Result<Instance> Placer::Place(std::span<const Instance> existing, const PlacementRequest& request) const {
  TESSERA_ASSIGN_OR_RETURN(uint32_t state, StateOf(existing));
  const std::vector<size_t> holders =
      Holders(model_, request.memory_mib, MinSmCount(model_, request.sm_percent), request.allowed_profiles);
  if (holders.empty()) return NothingHolds(model_, request);
  for (size_t h : holders) {
    int best = -1;
    double best_value = -1;
    for (size_t j = 0; j < slots_.size(); ++j) {  // ascending start within a profile
      if (slots_[j].profile != h || (state & (1u << j)) != 0) continue;
      const uint32_t with = state | (1u << j);
      if (!Valid(with)) continue;
      const double v = value_.at(with);
      if (v > best_value + 1e-12) {
        best_value = v;
        best = static_cast<int>(j);
      }
    }
    if (best >= 0) return Instance{model_.profiles[h].name, slots_[static_cast<size_t>(best)].start};
  }
  return NoRoom(model_, request, holders, existing);
}

Result<Instance> PlaceFirstFit(const Model& model, std::span<const Instance> existing,
                               const PlacementRequest& request) {
  TESSERA_RETURN_IF_ERROR_WRAP(CheckInstances(model, existing), "the instances on the GPU");
  const std::vector<size_t> holders =
      Holders(model, request.memory_mib, MinSmCount(model, request.sm_percent), request.allowed_profiles);
  if (holders.empty()) return NothingHolds(model, request);
  for (size_t h : holders) {
    const Profile& p = model.profiles[h];
    for (uint32_t s : p.starts) {
      if (CanAdd(model, existing, {p.name, s})) return Instance{p.name, s};
    }
  }
  return NoRoom(model, request, holders, existing);
}

}  // namespace tessera::core::mig
