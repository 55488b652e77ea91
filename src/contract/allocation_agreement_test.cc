// core's allocation codec (what the scheduler writes and the node reads) and
// libvgpu's reader (what the container obeys) must agree on which payloads are
// valid and on what a valid one grants: otherwise a container could run with
// limits the scheduler never gave, or without the ones it did. This test feeds
// both the same texts — core's own encoder output for many allocations, and
// every kind of input core rejects (each field missing, of each wrong type, at
// and past its bounds, malformed UUIDs, duplicates, every truncation, single
// corrupted bytes) — and requires the same verdict for every container name.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "contract/container_contract.h"
#include "core/allocation_codec.h"
#include "vgpu/config.h"

namespace tessera {
namespace {

using nlohmann::json;

constexpr const char* kA = "GPU-1a2b3c4d-0000-1111-2222-333344445555";
constexpr const char* kB = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
constexpr const char* kMig = "MIG-0a1b2c3d-0000-1111-2222-333344445555";

// The two readers' verdict on `text` for the container `name` ("" = none given).
struct Verdict {
  bool ok = false;
  std::vector<vgpu::DeviceGrant> grants;
  std::string why;
};

Verdict CoreReads(const std::string& text, const std::string& name) {
  Verdict v;
  auto decoded = core::DecodeAllocation(text);
  if (!decoded.ok()) {
    v.why = decoded.error().message;
    return v;
  }
  auto mine = core::SelectContainerAllocation(*decoded, name);
  if (!mine.ok()) {
    v.why = mine.error().message;
    return v;
  }
  v.ok = true;
  for (const auto& d : mine->devices) {
    v.grants.push_back({d.uuid, static_cast<uint64_t>(d.memory_mib) << 20, d.cores});
  }
  return v;
}

Verdict VgpuReads(const std::string& text, const std::string& name) {
  Verdict v;
  v.ok = vgpu::parse_allocation(text.c_str(), name.empty() ? nullptr : name.c_str(), &v.grants, &v.why);
  return v;
}

// Both readers, every container name the payload could be read for.
void ExpectAgreement(const std::string& text, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const Verdict c = CoreReads(text, name);
    const Verdict g = VgpuReads(text, name);
    ASSERT_EQ(c.ok, g.ok) << "container \"" << name << "\" of " << text << "\n  core: " << c.why
                          << "\n  libvgpu: " << g.why;
    if (!c.ok) continue;
    ASSERT_EQ(c.grants.size(), g.grants.size()) << text;
    for (size_t i = 0; i < c.grants.size(); ++i) {
      EXPECT_EQ(c.grants[i].uuid, g.grants[i].uuid) << text;
      EXPECT_EQ(c.grants[i].memory_bytes, g.grants[i].memory_bytes) << text;
      EXPECT_EQ(c.grants[i].cores, g.grants[i].cores) << text;
    }
  }
}

const std::vector<std::string> kNames = {"", "app", "side", "nope"};

json Valid() {
  return json::parse(std::string(R"({"version":1,"node":"node-a","containers":[)") +
                     R"({"name":"app","devices":[{"uuid":")" + kA + R"(","memoryMiB":3000,"cores":30},)" +
                     R"({"uuid":")" + kB + R"(","memoryMiB":0,"cores":0}]},)" +
                     R"({"name":"side","init":true,"devices":[{"uuid":")" + kMig +
                     R"(","memoryMiB":1048576,"cores":100}]}]})");
}

// Valid() as `change` leaves it: both readers agree on it, for every name.
void ExpectAgreementOnChanged(const std::function<void(json&)>& change) {
  json changed = Valid();
  change(changed);
  ExpectAgreement(changed.dump(), kNames);
}

TEST(AllocationAgreementTest, EveryPayloadCoreWritesLibvgpuReadsTheSame) {
  std::mt19937 rng(42);
  const std::vector<std::string> uuids = {kA, kB, kMig, "MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/7/0",
                                          "GPU-ABCDEF01-abcd-ABCD-0123-456789abcdef"};
  for (int round = 0; round < 500; ++round) {
    core::PodAllocation a;
    a.node = "node-" + std::to_string(round);
    const int containers = 1 + static_cast<int>(rng() % 3);
    std::vector<std::string> names = {"", "nope"};
    for (int c = 0; c < containers; ++c) {
      core::ContainerAllocation entry;
      entry.container = "c" + std::to_string(c);
      entry.init = rng() % 4 == 0;
      names.push_back(entry.container);
      const size_t devices = 1 + rng() % uuids.size();
      for (size_t d = 0; d < devices; ++d) {
        const int64_t memory = rng() % 5 == 0 ? 0 : static_cast<int64_t>(rng() % contract::kMaxMemoryMiB) + 1;
        entry.devices.push_back({uuids[d], memory, static_cast<int>(rng() % 101)});
      }
      a.containers.push_back(std::move(entry));
    }
    auto text = core::EncodeAllocation(a);
    ASSERT_TRUE(text.ok()) << text.error().message;
    ExpectAgreement(*text, names);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(AllocationAgreementTest, EverythingCoreRejectsLibvgpuRejects) {
  ExpectAgreement(Valid().dump(), kNames);
  // Each member missing, and of every wrong type or value.
  const std::vector<json> values = {
      nullptr,          true,          false,         "x", "", 1.5, -1, 0, 1, 2, 100, 101, 1048576, 1048577,
      int64_t{1} << 40, json::array(), json::object()};
  const std::vector<std::string> paths = {
      "/version",
      "/node",
      "/containers",
      "/containers/0",
      "/containers/0/name",
      "/containers/0/init",
      "/containers/0/devices",
      "/containers/0/devices/0",
      "/containers/0/devices/0/uuid",
      "/containers/0/devices/0/memoryMiB",
      "/containers/0/devices/0/cores",
      "/containers/1/init",
      "/containers/1/devices/0/memoryMiB",
  };
  for (const std::string& path : paths) {
    const json::json_pointer field(path);
    ExpectAgreementOnChanged([&field](json& j) {  // the member removed
      json& parent = j[field.parent_pointer()];
      if (parent.is_array()) {
        parent.erase(std::stoul(field.back()));
      } else {
        parent.erase(field.back());
      }
    });
    for (const json& value : values) ExpectAgreementOnChanged([&](json& j) { j[field] = value; });
  }
  // UUIDs, good and bad.
  for (const char* uuid :
       {"GPU-1", "gpu-1a2b3c4d-0000-1111-2222-333344445555", "MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/7",
        "MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/12345/0", "GPU-1a2b3c4d-0000-1111-2222-33334444555g",
        " GPU-1a2b3c4d-0000-1111-2222-333344445555", "MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/1/0"}) {
    ExpectAgreementOnChanged([uuid](json& j) { j["containers"][0]["devices"][0]["uuid"] = uuid; });
  }
  // Duplicates: a UUID twice in a container (also differing in case), a name twice.
  ExpectAgreementOnChanged([](json& j) { j["containers"][0]["devices"][1]["uuid"] = kA; });
  ExpectAgreementOnChanged(
      [](json& j) { j["containers"][0]["devices"][1]["uuid"] = "GPU-1A2B3C4D-0000-1111-2222-333344445555"; });
  ExpectAgreementOnChanged([](json& j) { j["containers"][1]["name"] = "app"; });
  // Empty lists, too many devices, a version from the future, extra members.
  ExpectAgreementOnChanged([](json& j) { j["containers"][1]["devices"] = json::array(); });
  json many = Valid();
  for (size_t i = 0; i <= contract::kMaxDevicesPerContainer; ++i) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-00000000-0000-0000-0000-%012zu", i);
    many["containers"][0]["devices"][i] = {{"uuid", uuid}, {"memoryMiB", 1}, {"cores", 1}};
  }
  ExpectAgreement(many.dump(), kNames);
  many["containers"][0]["devices"].erase(0);
  ExpectAgreement(many.dump(), kNames);
  ExpectAgreementOnChanged([](json& j) {
    j["future"] = {{"anything", 1}};
    j["containers"][0]["devices"][0]["future"] = "x";
  });
  for (const char* text :
       {"", "null", "[]", "1", "{}", "{\"version\":1}", "{\"version\":1.0,\"node\":\"n\"}"}) {
    ExpectAgreement(text, kNames);
  }
}

TEST(AllocationAgreementTest, DynamicMigMembersGetTheSameVerdict) {
  json good = Valid();
  good["containers"][0]["devices"][0]["mig"] = {{"profile", "1g.10gb"}, {"start", 6}};
  ASSERT_TRUE(core::DecodeAllocation(good.dump()).ok());
  ExpectAgreement(good.dump(), kNames);
  const std::vector<json> bad_values = {
      nullptr,
      5,
      "1g.10gb",
      json::array(),
      json::object(),
      {{"profile", "1g.10gb"}},
      {{"start", 6}},
      {{"profile", ""}, {"start", 6}},
      {{"profile", std::string(33, 'g')}, {"start", 6}},
      {{"profile", std::string(32, 'g')}, {"start", 6}},
      {{"profile", 7}, {"start", 6}},
      {{"profile", "1g.10gb"}, {"start", -1}},
      {{"profile", "1g.10gb"}, {"start", 8}},
      {{"profile", "1g.10gb"}, {"start", 7}},
      {{"profile", "1g.10gb"}, {"start", "6"}},
      {{"profile", "1g.10gb"}, {"start", 6.0}},
  };
  for (const json& value : bad_values) {
    ExpectAgreementOnChanged([&value](json& j) { j["containers"][0]["devices"][0]["mig"] = value; });
    // On a MIG UUID, even a well-formed member is refused by both.
    ExpectAgreementOnChanged([&value](json& j) { j["containers"][1]["devices"][0]["mig"] = value; });
  }
}

TEST(AllocationAgreementTest, MpsMembersGetTheSameVerdict) {
  json good = Valid();
  good["containers"][0]["devices"][0]["mps"] = true;
  ASSERT_TRUE(core::DecodeAllocation(good.dump()).ok()) << good.dump();
  ExpectAgreement(good.dump(), kNames);
  for (const json& value : {json(true), json(false), json(nullptr), json(1), json("true"), json::object()}) {
    ExpectAgreementOnChanged([&value](json& j) { j["containers"][0]["devices"][0]["mps"] = value; });
    // On a MIG UUID an MPS share is refused by both.
    ExpectAgreementOnChanged([&value](json& j) { j["containers"][1]["devices"][0]["mps"] = value; });
    for (const auto& [memory, cores] :
         {std::pair{0, 50}, std::pair{1, 0}, std::pair{1, 1}, std::pair{1, 100}}) {
      ExpectAgreementOnChanged([&](json& j) {
        json& d = j["containers"][0]["devices"][0];
        d["mps"] = value;
        d["memoryMiB"] = memory;
        d["cores"] = cores;
      });
    }
    ExpectAgreementOnChanged([&value](json& j) {
      j["containers"][0]["devices"][0]["mps"] = value;
      j["containers"][0]["devices"][0]["mig"] = {{"profile", "1g.10gb"}, {"start", 6}};
    });
  }
}

TEST(AllocationAgreementTest, TruncatedAndCorruptedTextIsRejectedByBoth) {
  const std::string text = Valid().dump();
  for (size_t n = 0; n < text.size(); ++n) ExpectAgreement(text.substr(0, n), {"app"});
  const char replacements[] = {'\0', '"', '\\', '{',    '}',    ',',    ':',   '0',
                               '9',  '-', 'x',  '\x01', '\x7f', '\xc3', '\xff'};
  for (size_t i = 0; i < text.size(); ++i) {
    for (char r : replacements) {
      std::string corrupt = text;
      corrupt[i] = r;
      // libvgpu reads a C string: a NUL ends it, as getenv() would.
      if (r == '\0') corrupt.resize(i);
      ExpectAgreement(corrupt, {"app", "side"});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace tessera
