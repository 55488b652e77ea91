// What the MIG Allocate benchmarks share: the "container" they start with an
// Allocate answer's environment (the benchmark program itself, run as
// `<program> probe`, which initialises CUDA on its one device and allocates
// 1 GiB there), the machine they run on (a simulated A100-80GB in MIG mode in
// a fresh temp directory, with the NVML MIG driver over it), their
// --iterations argument, and the median / p90 / max of a series.
// Header-only; the including program defines TESSERA_SIM_LIB_DIR and
// TESSERA_SIM_NVML.
#pragma once

#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "host/nvml_api.h"
#include "host/nvml_mig.h"

namespace tessera::bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

struct Stats {
  double median, p90, max;
};
inline Stats Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 9 / 10)], v.back()};
}

inline int Probe() {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUdeviceptr pointer = 0;
  int count = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count != 1 ||
      cuDeviceGet(&device, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS || cuMemAlloc(&pointer, size_t{1} << 30) != CUDA_SUCCESS) {
    return 1;
  }
  return 0;
}

// Runs this program as the container's process; true when it could use its device.
inline bool RunContainer(const std::string& self, const std::string& state_dir, const std::string& visible) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string a = "TESSERA_SIM_STATE=" + state_dir, b = "NVIDIA_VISIBLE_DEVICES=" + visible;
    std::string c = std::string("LD_LIBRARY_PATH=") + TESSERA_SIM_LIB_DIR;
    char* env[] = {a.data(), b.data(), c.data(), nullptr};
    std::string probe = "probe";
    char* argv[] = {const_cast<char*>(self.c_str()), probe.data(), nullptr};
    ::execve(self.c_str(), argv, env);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// `--iterations N` (at least 1), else `fallback`.
inline int IterationsArg(int argc, char** argv, int fallback = 50) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0) return std::max(1, std::atoi(argv[i + 1]));
  }
  return fallback;
}

struct SimMigMachine {
  std::string root;       // the temp directory (the caller removes it)
  std::string state_dir;  // TESSERA_SIM_STATE
  std::string self;       // this program, to run as the container
  std::unique_ptr<host::NvmlLibrary> library;
  std::unique_ptr<host::NvmlMigDriver> driver;
};

// One A100-80GB in MIG mode under /tmp/<prefix>-XXXXXX, exported into this
// process's environment so the driver and the containers see it.
inline Result<SimMigMachine> StartSimMigMachine(const std::string& prefix) {
  SimMigMachine machine;
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return Error{"cannot make a directory like " + pattern};
  machine.root = pattern;
  machine.state_dir = machine.root + "/sim";
  std::filesystem::create_directories(machine.state_dir);
  ::setenv("TESSERA_SIM_CONFIG", "gpus:\n  - model: A100-80GB\n    mig: true\n", 1);
  ::setenv("TESSERA_SIM_STATE", machine.state_dir.c_str(), 1);
  machine.self = std::filesystem::read_symlink("/proc/self/exe");
  TESSERA_ASSIGN_OR_RETURN(machine.library, host::NvmlLibrary::Load(TESSERA_SIM_NVML));
  TESSERA_ASSIGN_OR_RETURN(machine.driver,
                           host::NvmlMigDriver::Load(machine.library->api(), TESSERA_SIM_NVML));
  return machine;
}

}  // namespace tessera::bench
