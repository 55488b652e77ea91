// What the MIG Allocate benchmarks share: the "container" they start with an
// Allocate answer's environment (the benchmark program itself, run as
// `<program> probe`, which initialises CUDA on its one device and allocates
// 1 GiB there), and the median / p90 / max of a series. Header-only; the
// including program defines TESSERA_SIM_LIB_DIR.
#pragma once

#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

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

}  // namespace tessera::bench
