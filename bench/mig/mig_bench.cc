// mig_bench: how much of a MIG GPU dynamic placement leaves unallocated when
// the GPU first has to refuse a request, tessera's placement (core/mig
// Placer) against first-fit, per model and request mix.
//
// A stream is a sequence of requests drawn independently from a mix of
// profile sizes: a request for profile p asks for p's memory and p's share of
// the SMs (rounded down to a percent), so the smallest profile that holds it
// is p (or a larger one when p has no room). Requests are placed one after the
// other, nothing is freed, until the first refusal; then the GPU's unallocated
// memory slices and compute slices are recorded. Both policies see the same
// streams (stream s uses seed + s; std::mt19937_64 is specified bit for bit,
// and draws use no std:: distribution).
//
//   mig_bench [--streams N] [--seed S]
//
// Prints a Markdown table (docs/benchmarks.md, "MIG placement").
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/mig/placement.h"

namespace {

using namespace tessera::core::mig;

struct NamedMix {
  std::string name;
  ProfileMix mix;
};

// The mixes streams are drawn from, by profile class (see docs/benchmarks.md).
std::vector<NamedMix> Mixes(const Model& m) {
  auto by_class = [&](double one, double one_wide, double two, double three, double four, double whole) {
    ProfileMix mix;
    for (const Profile& p : m.profiles) {
      if (p.media_extension) continue;
      double w = 0;
      if (p.compute_slices == 1) {
        w = p.memory_slices == 1 ? one : one_wide;
      } else if (p.compute_slices == 2) {
        w = two;
      } else if (p.compute_slices == 3) {
        w = three;
      } else if (p.compute_slices == 4) {
        w = m.compute_slices == 4 ? whole : four;
      } else {
        w = whole;
      }
      if (w > 0) mix.push_back({p.name, w});
    }
    return mix;
  };
  return {
      {"default", DefaultMix(m)},
      {"small-heavy", by_class(0.60, 0.10, 0.15, 0.10, 0.025, 0.025)},
      {"uniform", by_class(1, 1, 1, 1, 1, 1)},
      {"large-heavy", by_class(0.10, 0.05, 0.15, 0.40, 0.15, 0.15)},
  };
}

double Uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

PlacementRequest RequestFor(const Model& m, const Profile& p) {
  return {p.memory_mib, static_cast<int>(p.sm_count * 100 / m.Whole().sm_count), {}};
}

struct Outcome {
  double unallocated_memory = 0;   // share of memory slices
  double unallocated_compute = 0;  // share of compute slices
  double placed = 0;               // instances at the first refusal
};

template <typename Place>
Outcome RunStream(const Model& m, const std::vector<const Profile*>& stream, Place place) {
  std::vector<Instance> on_gpu;
  for (const Profile* p : stream) {
    tessera::Result<Instance> in = place(on_gpu, RequestFor(m, *p));
    if (!in.ok()) break;
    on_gpu.push_back(*in);
  }
  uint32_t memory = 0, compute = 0;
  for (const Instance& in : on_gpu) {
    memory += m.FindProfile(in.profile)->memory_slices;
    compute += m.FindProfile(in.profile)->compute_slices;
  }
  return {1.0 - static_cast<double>(memory) / m.memory_slices,
          1.0 - static_cast<double>(compute) / m.compute_slices, static_cast<double>(on_gpu.size())};
}

}  // namespace

int main(int argc, char** argv) {
  int streams = 20000;
  uint64_t seed = 14;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--streams") == 0 && i + 1 < argc) {
      streams = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: mig_bench [--streams N] [--seed S]\n");
      return 2;
    }
  }
  if (streams <= 0) {
    std::fprintf(stderr, "mig_bench: --streams must be positive\n");
    return 2;
  }

  std::printf("streams per row: %d, seed %llu\n\n", streams, static_cast<unsigned long long>(seed));
  std::printf(
      "| model | stream mix | unallocated memory, first-fit | tessera (default mix) | tessera (stream's mix) "
      "| "
      "unallocated compute, first-fit / tessera / tuned | instances at refusal, first-fit / tessera / tuned "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Model& m : Models()) {
    const auto build_start = std::chrono::steady_clock::now();
    const Placer assumed(m, DefaultMix(m));
    const double build_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - build_start).count();
    for (const NamedMix& named : Mixes(m)) {
      const Placer tuned(m, named.mix);
      double total_weight = 0;
      for (const MixEntry& e : named.mix) total_weight += e.weight;
      Outcome sum[3];
      for (int s = 0; s < streams; ++s) {
        std::mt19937_64 rng(seed + static_cast<uint64_t>(s));
        std::vector<const Profile*> stream;
        for (int k = 0; k < 32; ++k) {  // more than any GPU holds
          double u = Uniform(rng) * total_weight;
          const Profile* p = m.FindProfile(named.mix.back().profile);
          for (const MixEntry& e : named.mix) {
            if (u < e.weight) {
              p = m.FindProfile(e.profile);
              break;
            }
            u -= e.weight;
          }
          stream.push_back(p);
        }
        const Outcome o[3] = {
            RunStream(m, stream, [&](auto& on, const auto& r) { return PlaceFirstFit(m, on, r); }),
            RunStream(m, stream, [&](auto& on, const auto& r) { return assumed.Place(on, r); }),
            RunStream(m, stream, [&](auto& on, const auto& r) { return tuned.Place(on, r); }),
        };
        for (int k = 0; k < 3; ++k) {
          sum[k].unallocated_memory += o[k].unallocated_memory;
          sum[k].unallocated_compute += o[k].unallocated_compute;
          sum[k].placed += o[k].placed;
        }
      }
      auto pct = [&](double v) { return 100.0 * v / streams; };
      std::printf("| %s | %s | %.2f %% | %.2f %% | %.2f %% | %.2f / %.2f / %.2f %% | %.3f / %.3f / %.3f |\n",
                  m.key.c_str(), named.name.c_str(), pct(sum[0].unallocated_memory),
                  pct(sum[1].unallocated_memory), pct(sum[2].unallocated_memory),
                  pct(sum[0].unallocated_compute), pct(sum[1].unallocated_compute),
                  pct(sum[2].unallocated_compute), sum[0].placed / streams, sum[1].placed / streams,
                  sum[2].placed / streams);
    }
    std::fprintf(stderr, "%s: value table built in %.1f ms\n", m.key.c_str(), build_ms);
  }
  return 0;
}
