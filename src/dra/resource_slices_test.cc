#include "dra/resource_slices.h"

#include <gtest/gtest.h>

namespace tessera::dra {
namespace {

using Json = nlohmann::json;

core::Gpu Gpu(int index, int64_t memory_mib = 81920) {
  core::Gpu g;
  g.index = index;
  g.uuid = "GPU-0000000" + std::to_string(index) + "-0000-0000-0000-000000000000";
  g.model = "NVIDIA A100-SXM4-80GB";
  g.memory_mib = memory_mib;
  return g;
}

DraConfig Config() {
  DraConfig c;
  c.node_name = "node-a";
  return c;
}

SystemDetails Details() {
  SystemDetails d;
  d.driver_version = "535.104.05";
  d.cuda_driver_version = "12.2";
  d.gpus.push_back({"GPU-00000000-0000-0000-0000-000000000000", "Ampere", "0000:3b:00.0", "8.0"});
  return d;
}

TEST(ResourceSlicesTest, VgpuDeviceHasAttributesAndConsumableCapacity) {
  auto devices = BuildDevices(Config(), {Gpu(1), Gpu(0)}, Details());
  ASSERT_TRUE(devices.ok()) << devices.error().message;
  ASSERT_EQ(devices->size(), 2u);
  const Json& d = (*devices)[0];
  EXPECT_EQ(d["name"], "gpu-0") << "index order";
  EXPECT_EQ(d["allowMultipleAllocations"], true);
  EXPECT_EQ(d["attributes"]["driverVersion"]["version"], "535.104.5") << "a semantic version";
  EXPECT_EQ(d["attributes"]["cudaDriverVersion"]["version"], "12.2.0");
  EXPECT_EQ(d["attributes"]["cudaComputeCapability"]["version"], "8.0.0");
  EXPECT_EQ(d["attributes"]["architecture"]["string"], "Ampere");
  EXPECT_EQ(d["attributes"]["resource.kubernetes.io/pciBusID"]["string"], "0000:3b:00.0");
  EXPECT_EQ(
      d["capacity"]["memory"],
      (Json{{"value", "80Gi"},
            {"requestPolicy",
             {{"default", "80Gi"}, {"validRange", {{"min", "1Mi"}, {"max", "80Gi"}, {"step", "1Mi"}}}}}}));
  EXPECT_EQ(d["capacity"]["cores"],
            (Json{{"value", "100"},
                  {"requestPolicy",
                   {{"default", "100"}, {"validRange", {{"min", "1"}, {"max", "100"}, {"step", "1"}}}}}}));
  EXPECT_FALSE((*devices)[1]["attributes"].contains("architecture")) << "details of GPU 1 are unknown";
}

TEST(ResourceSlicesTest, PoliciesFollowTheConfiguration) {
  DraConfig c = Config();
  c.memory_default = "4Gi";
  c.memory_min = "1Gi";
  c.memory_step = "1Gi";
  c.cores_default = "10";
  c.cores_min = "5";
  c.cores_step = "5";
  auto devices = BuildDevices(c, {Gpu(0, 40000)}, {});  // 39.06 GiB: max is the last whole step
  ASSERT_TRUE(devices.ok()) << devices.error().message;
  const Json& memory = (*devices)[0]["capacity"]["memory"];
  EXPECT_EQ(memory["value"], "40000Mi");
  EXPECT_EQ(memory["requestPolicy"]["default"], "4Gi");
  EXPECT_EQ(memory["requestPolicy"]["validRange"]["max"], "39Gi");
  EXPECT_EQ((*devices)[0]["capacity"]["cores"]["requestPolicy"]["validRange"]["min"], "5");

  c.memory_default = "1536Mi";  // not min + a multiple of 1Gi
  auto bad = BuildDevices(c, {Gpu(0)}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("memory request policy: default 1536Mi"), std::string::npos)
      << bad.error().message;
  c.memory_default = "";
  c.memory_min = "100Gi";
  bad = BuildDevices(c, {Gpu(0)}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("min 100Gi is above the GPU's 80Gi"), std::string::npos)
      << bad.error().message;
}

TEST(ResourceSlicesTest, WholeModeAndUnhealthyGpus) {
  DraConfig c = Config();
  c.device_mode = DeviceMode::kWhole;
  core::Gpu sick = Gpu(1);
  sick.healthy = false;
  auto devices = BuildDevices(c, {Gpu(0), sick}, {});
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1u) << "an unhealthy GPU is not published";
  EXPECT_FALSE((*devices)[0].contains("allowMultipleAllocations"));
  EXPECT_EQ((*devices)[0]["capacity"]["memory"], (Json{{"value", "80Gi"}}));
}

TEST(ResourceSlicesTest, ManyDevicesMakeSeveralSlicesOfOnePool) {
  std::vector<Json> devices;
  for (int i = 0; i < 200; ++i) devices.push_back({{"name", "gpu-" + std::to_string(i)}});
  auto slices = BuildResourceSlices(Config(), devices, 7);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0]["spec"]["devices"].size(), 128u);
  EXPECT_EQ(slices[1]["spec"]["devices"].size(), 72u);
  for (const auto& s : slices) {
    EXPECT_EQ(s["spec"]["pool"], (Json{{"name", "node-a"}, {"generation", 7}, {"resourceSliceCount", 2}}));
  }
  EXPECT_EQ(slices[1]["metadata"]["name"], "node-a-gpu.tessera.io-1");
  EXPECT_EQ(BuildResourceSlices(Config(), std::vector<Json>{}, 1).size(), 1u)
      << "an empty pool is one empty slice";
}

TEST(ResourceSlicesTest, SemverOfNvidiaVersions) {
  EXPECT_EQ(ToSemver("550.54.15"), "550.54.15");
  EXPECT_EQ(ToSemver("535.104.05"), "535.104.5");
  EXPECT_EQ(ToSemver("12.4"), "12.4.0");
  EXPECT_EQ(ToSemver("12"), "12.0.0");
  EXPECT_EQ(ToSemver(""), "");
  EXPECT_EQ(ToSemver("1.2.3.4"), "");
  EXPECT_EQ(ToSemver("r535"), "");
}

}  // namespace
}  // namespace tessera::dra
