// `tessera sim status|inject-xid|reset` against a live simulated GPU: the
// status view shows this process and its memory, an injected XID reaches an
// NVML event set, a GPU reset applies a pending MIG mode (and refuses a GPU in
// use), reset refuses while a process is attached, and --state is accepted
// before or after the action.
#include <cuda.h>
#include <nvml.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "sim_test_util.h"

namespace {

std::string tessera_bin;

// Runs `tessera ARGS` through the shell; `env` ("NAME=value ") prefixes it.
int Run(const std::string& args, std::string* out, const std::string& env = "") {
  return simtest::Shell(env + tessera_bin + " " + args, out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: sim_cli_test <path to tessera>\n");
    return 2;
  }
  tessera_bin = argv[1];
  simtest::UseFreshState("2xA100-80GB", false);
  std::string out;
  SIM_CHECK_EQ(Run("sim status", &out), 1);  // no state yet
  SIM_CHECK(out.find("no simulator state") != std::string::npos);

  SIM_OK(cuInit(0));
  simtest::UseDevice(1);
  CUdeviceptr p;
  SIM_OK(cuMemAlloc(&p, 700ull << 20));

  SIM_CHECK_EQ(Run("sim status", &out), 0);
  SIM_CHECK(out.find("NVIDIA A100-SXM4-80GB") != std::string::npos);
  SIM_CHECK(out.find("1000MiB / 81920MiB") != std::string::npos);  // 300 context + 700
  SIM_CHECK(out.find(std::to_string(getpid())) != std::string::npos);

  // --state DIR names the state whatever $TESSERA_SIM_STATE says, before or
  // after the action (docs/sim.md); two different directories are refused.
  const std::string dir = getenv("TESSERA_SIM_STATE");
  const std::string elsewhere = "TESSERA_SIM_STATE=/nonexistent/tessera-sim ";
  SIM_CHECK_EQ(Run("sim status", &out, elsewhere), 1);
  SIM_CHECK_EQ(Run("sim status --state " + dir, &out, elsewhere), 0);
  SIM_CHECK(out.find("1000MiB / 81920MiB") != std::string::npos);
  SIM_CHECK_EQ(Run("sim --state " + dir + " status", &out, elsewhere), 0);
  SIM_CHECK(out.find("1000MiB / 81920MiB") != std::string::npos);
  SIM_CHECK_EQ(Run("sim --state " + dir + " status --state " + dir, &out, elsewhere), 0);
  SIM_CHECK_EQ(Run("sim --state " + dir + " status --state /tmp/other", &out), 2);
  SIM_CHECK(out.find("--state given twice") != std::string::npos);

  SIM_OK(nvmlInit());
  nvmlDevice_t dev;
  SIM_OK(nvmlDeviceGetHandleByIndex(1, &dev));
  nvmlEventSet_t set;
  SIM_OK(nvmlEventSetCreate(&set));
  SIM_OK(nvmlDeviceRegisterEvents(dev, nvmlEventTypeXidCriticalError, set));
  SIM_CHECK_EQ(Run("sim inject-xid --gpu 1 --xid 79", &out), 0);
  nvmlEventData_t data{};
  SIM_OK(nvmlEventSetWait(set, &data, 2000));
  SIM_CHECK(data.device == dev && data.eventData == 79);
  SIM_CHECK_EQ(Run("sim inject-xid --gpu 1 --xid 48 --state " + dir, &out, elsewhere), 0);
  SIM_OK(nvmlEventSetWait(set, &data, 2000));
  SIM_CHECK(data.device == dev && data.eventData == 48);
  SIM_CHECK(Run("sim inject-xid --gpu 7 --xid 79", &out) != 0);
  SIM_CHECK(Run("sim inject-xid --gpu 1 --xid 79 --gpu-instance 1 --compute-instance 0", &out) != 0);
  SIM_CHECK(out.find("no compute instance 0 in GPU instance 1") != std::string::npos);
  SIM_OK(nvmlEventSetFree(set));

  // A GPU reset applies an A100's pending MIG mode and keeps the rest of the
  // state; it is refused on a GPU a process uses, unless forced.
  nvmlDevice_t gpu0;
  SIM_OK(nvmlDeviceGetHandleByIndex(0, &gpu0));
  nvmlReturn_t activation;
  SIM_OK(nvmlDeviceSetMigMode(gpu0, NVML_DEVICE_MIG_ENABLE, &activation));
  SIM_CHECK_EQ(activation, NVML_ERROR_RESET_REQUIRED);
  SIM_CHECK_EQ(Run("sim status", &out), 0);
  SIM_CHECK(out.find("Off*") != std::string::npos &&
            out.find("pending until the GPU is reset") != std::string::npos);
  SIM_CHECK_EQ(Run("sim reset --gpu 0", &out), 0);
  SIM_CHECK(out.find("MIG mode now enabled") != std::string::npos);
  unsigned cur = 0, pending = 0;
  SIM_OK(nvmlDeviceGetMigMode(gpu0, &cur, &pending));
  SIM_CHECK(cur == NVML_DEVICE_MIG_ENABLE && pending == NVML_DEVICE_MIG_ENABLE);
  SIM_CHECK_EQ(Run("sim reset --gpu 1", &out), 1);  // this process holds memory on GPU 1
  SIM_CHECK(out.find(std::to_string(getpid())) != std::string::npos &&
            out.find("--force") != std::string::npos);
  SIM_CHECK_EQ(Run("sim status", &out), 0);
  SIM_CHECK(out.find("1000MiB / 81920MiB") != std::string::npos);  // nothing else changed

  SIM_CHECK_EQ(Run("sim reset", &out), 1);  // this process is attached
  SIM_CHECK(out.find("--force") != std::string::npos);
  SIM_OK(cuMemFree(p));
  SIM_OK(nvmlShutdown());
  SIM_CHECK_EQ(Run("sim reset --force --state " + dir, &out, elsewhere), 0);
  SIM_CHECK(out.find("removed") != std::string::npos);
  SIM_CHECK_EQ(Run("sim status", &out), 1);
  return simtest::Finish("sim_cli_test");
}
