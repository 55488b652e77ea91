// Fuzz target: the allocation payload's two readers. core::DecodeAllocation
// reads the pod annotation tessera.io/allocation (node agent, scheduler
// restart); libvgpu's parse_allocation reads the same text from the container
// variable TESSERA_ALLOCATION. contract/container_contract.h makes them
// promise the same verdict, and a disagreement is a container running with
// limits the scheduler never gave (or without the ones it did).
//
// Properties: an accepted payload encodes and decodes to itself; for every
// container name (none, each name in the payload, one not in it) both readers
// accept or both refuse, and when they accept they grant the same devices,
// memory and cores.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/allocation_codec.h"
#include "fuzz_support.h"
#include "vgpu/config.h"

using namespace tessera;

namespace {

std::string Describe(const std::vector<vgpu::DeviceGrant>& grants) {
  std::string out;
  for (const auto& g : grants) {
    out += g.uuid + ":" + std::to_string(g.memory_bytes) + ":" + std::to_string(g.cores) + " ";
  }
  return out;
}

void CompareReaders(const std::string& text, const std::string& name) {
  std::vector<vgpu::DeviceGrant> core_grants;
  std::string core_why;
  bool core_ok = false;
  if (auto decoded = core::DecodeAllocation(text); !decoded.ok()) {
    core_why = decoded.error().message;
  } else if (auto mine = core::SelectContainerAllocation(*decoded, name); !mine.ok()) {
    core_why = mine.error().message;
  } else {
    core_ok = true;
    for (const auto& d : mine->devices) {
      core_grants.push_back({d.uuid, static_cast<uint64_t>(d.memory_mib) << 20, d.cores});
    }
  }
  std::vector<vgpu::DeviceGrant> vgpu_grants;
  std::string vgpu_why;
  const bool vgpu_ok =
      vgpu::parse_allocation(text.c_str(), name.empty() ? nullptr : name.c_str(), &vgpu_grants, &vgpu_why);
  FUZZ_CHECK(core_ok == vgpu_ok, "container '" + name + "': core " +
                                     (core_ok ? "accepts" : "refuses: " + core_why) + "; libvgpu " +
                                     (vgpu_ok ? "accepts" : "refuses: " + vgpu_why));
  if (!core_ok) return;
  FUZZ_CHECK(core_grants.size() == vgpu_grants.size(), Describe(core_grants) + "vs " + Describe(vgpu_grants));
  for (size_t i = 0; i < core_grants.size(); ++i) {
    FUZZ_CHECK(core_grants[i].uuid == vgpu_grants[i].uuid &&
                   core_grants[i].memory_bytes == vgpu_grants[i].memory_bytes &&
                   core_grants[i].cores == vgpu_grants[i].cores,
               Describe(core_grants) + "vs " + Describe(vgpu_grants));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::AsText(data, size));
  auto decoded = core::DecodeAllocation(text);
  if (decoded.ok()) {
    auto encoded = core::EncodeAllocation(*decoded);
    FUZZ_CHECK(encoded.ok(), encoded.ok() ? "" : encoded.error().message);
    auto again = core::DecodeAllocation(*encoded);
    FUZZ_CHECK(again.ok() && *again == *decoded, *encoded);
  } else {
    FUZZ_CHECK(!decoded.error().message.empty(), "");
  }

  // An environment variable cannot hold a NUL byte; libvgpu reads a C string.
  if (text.find('\0') != std::string::npos) return 0;
  CompareReaders(text, "");
  CompareReaders(text, "no-such-container");
  if (decoded.ok()) {
    for (const auto& c : decoded->containers) CompareReaders(text, c.container);
  }
  return 0;
}
