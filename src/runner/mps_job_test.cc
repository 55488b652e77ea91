#include "runner/mps_job.h"

#include <gtest/gtest.h>

namespace tessera::runner {
namespace {

TEST(MpsJobTest, OneGpuAndNoCorePolicy) {
  SliceRequest slice;
  EXPECT_TRUE(CheckMpsFlags(slice).ok());
  slice.gpus = 2;
  EXPECT_NE(CheckMpsFlags(slice).error().message.find("--mps runs on one GPU (--gpus 2 given)"),
            std::string::npos);
  slice.gpus = 1;
  slice.core_policy = "force";
  EXPECT_NE(CheckMpsFlags(slice).error().message.find("--core-policy"), std::string::npos);
}

TEST(MpsJobTest, TheJobIsAClientWithTheSlicesLimitsOnItsOneGpu) {
  ReservedSlice slice;
  slice.entry.job_id = "job-1";
  slice.entry.slices.devices = {core::DeviceSlice{"GPU-a", 8192, 30}};
  LocalGpus local;
  local.simulated = true;
  local.job_env = {{"TESSERA_SIM_STATE", "/tmp/state"}, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "90"}};
  core::Gpu gpu;
  gpu.uuid = "GPU-a";
  gpu.index = 1;
  InstallPaths paths;
  paths.bin_dir = "/nonexistent";
  const MpsDaemonPlace place = MpsDaemonPlaceOf(gpu, local, paths);
  EXPECT_EQ(place.pipe_dir, "/tmp/state/mps/gpu1");  // where `tessera sim mps --gpu 1` looks
  EXPECT_EQ(place.log_dir, "/tmp/state/mps/gpu1/log");
  EXPECT_EQ(place.control_binary, "tessera-sim-mps-control");
  auto spec = BuildMpsJobSpec(slice, place, local, {"./infer"});
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->set_env.at("CUDA_MPS_PIPE_DIRECTORY"), "/tmp/state/mps/gpu1");
  EXPECT_EQ(spec->set_env.at("CUDA_VISIBLE_DEVICES"), "GPU-a");
  EXPECT_EQ(spec->set_env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M");
  EXPECT_EQ(spec->set_env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");  // not an inherited value
  EXPECT_EQ(spec->prepend_path_env.count("LD_PRELOAD"), 0u);               // no libvgpu

  slice.entry.slices.devices[0].cores = 0;
  EXPECT_EQ(
      BuildMpsJobSpec(slice, place, local, {"./infer"})->set_env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
      "100");
  slice.entry.slices.devices.push_back(core::DeviceSlice{"GPU-b", 8192, 30});
  EXPECT_FALSE(BuildMpsJobSpec(slice, place, local, {"./infer"}).ok());
}

}  // namespace
}  // namespace tessera::runner
