// A small harness for the simulator's integration tests. The tests are
// ordinary CUDA driver-API / NVML client programs: each check prints what
// failed, main() returns non-zero if any did. Multi-process scenarios run the
// same program again (fork + exec of /proc/self/exe) with a role argument.
//
// Each test program uses a fresh state directory (TESSERA_SIM_STATE), made
// before the first CUDA/NVML call and inherited by its children.
//
// The pieces every program repeats live here too: making a device's primary
// context current, taking one of the simulator's kernels, running a command.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <cuda.h>
#include <nvml.h>

#include "base/testing.h"
#include "testing/process.h"

namespace simtest {

inline int& Failures() {
  static int failures = 0;
  return failures;
}

#define SIM_CHECK(cond)                                                             \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++simtest::Failures();                                                        \
    }                                                                               \
  } while (0)

#define SIM_CHECK_EQ(a, b)                                                                               \
  do {                                                                                                   \
    auto va_ = (a);                                                                                      \
    auto vb_ = (b);                                                                                      \
    if (!(va_ == static_cast<decltype(va_)>(vb_))) {                                                     \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, \
                   static_cast<long long>(va_), static_cast<long long>(vb_));                            \
      ++simtest::Failures();                                                                             \
    }                                                                                                    \
  } while (0)

// CUDA/NVML call that must succeed (0 is success for both APIs).
#define SIM_OK(call)                                                                   \
  do {                                                                                 \
    int rc_ = static_cast<int>(call);                                                  \
    if (rc_ != 0) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, rc_); \
      ++simtest::Failures();                                                           \
    }                                                                                  \
  } while (0)

// Creates a fresh state directory and points TESSERA_SIM_STATE at it (unless
// this is a child, which inherits its parent's); `gpus`, when given, becomes
// TESSERA_SIM_GPUS. The directory is removed at exit (kept when
// TESSERA_TEST_KEEP_DIRS is set).
inline void UseFreshState(const char* gpus, bool is_child) {
  if (is_child) return;
  static std::unique_ptr<tessera::testing::TempDir> dir;  // destroyed at exit, in this process only
  dir = std::make_unique<tessera::testing::TempDir>("tessera-simtest");
  setenv("TESSERA_SIM_STATE", dir->path().c_str(), 1);
  if (gpus != nullptr) setenv("TESSERA_SIM_GPUS", gpus, 1);
}

// Retains device `ordinal`'s primary context and makes it current; returns
// the context (and the device through `device`, when asked).
inline CUcontext UseDevice(int ordinal, CUdevice* device = nullptr) {
  CUdevice d = 0;
  SIM_OK(cuDeviceGet(&d, ordinal));
  CUcontext ctx = nullptr;
  SIM_OK(cuDevicePrimaryCtxRetain(&ctx, d));
  SIM_OK(cuCtxSetCurrent(ctx));
  if (device != nullptr) *device = d;
  return ctx;
}

// What a CUDA program sees of device `ordinal`: its name, memory and SMs.
struct DeviceView {
  std::string name;
  size_t total_bytes = 0;
  int sms = 0;
};
inline DeviceView ViewDevice(int ordinal) {
  CUdevice d = 0;
  SIM_OK(cuDeviceGet(&d, ordinal));
  char name[128] = {};
  SIM_OK(cuDeviceGetName(name, sizeof(name), d));
  DeviceView view;
  view.name = name;
  SIM_OK(cuDeviceTotalMem(&view.total_bytes, d));
  SIM_OK(cuDeviceGetAttribute(&view.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
  return view;
}

// The simulator's kernel `name` (docs/sim.md lists them), from a module of the
// current context; the module's image is not read, so any bytes do.
inline CUfunction SimKernel(const char* name) {
  CUmodule m = nullptr;
  SIM_OK(cuModuleLoadData(&m, "image"));
  CUfunction f = nullptr;
  SIM_OK(cuModuleGetFunction(&f, m, name));
  return f;
}

// A CUDA array of `width` x `height` (0: one-dimensional) elements of
// `channels` values of `format` each.
inline CUarray NewArray(size_t width, size_t height, CUarray_format format, unsigned channels) {
  CUDA_ARRAY_DESCRIPTOR descriptor{};
  descriptor.Width = width;
  descriptor.Height = height;
  descriptor.Format = format;
  descriptor.NumChannels = channels;
  CUarray array = nullptr;
  SIM_OK(cuArrayCreate(&array, &descriptor));
  return array;
}

// One end of a 2D copy: host memory, device memory or an array, its rows
// `pitch` bytes apart (an array's layout is its own: no pitch).
struct Rows2D {
  CUmemorytype type = CU_MEMORYTYPE_HOST;
  void* host = nullptr;
  CUdeviceptr device = 0;
  CUarray array = nullptr;
  size_t pitch = 0;
};
inline Rows2D HostRows(void* host, size_t pitch) {
  return {CU_MEMORYTYPE_HOST, host, 0, nullptr, pitch};
}
inline Rows2D DeviceRows(CUdeviceptr device, size_t pitch) {
  return {CU_MEMORYTYPE_DEVICE, nullptr, device, nullptr, pitch};
}
inline Rows2D ArrayRows(CUarray array) {
  return {CU_MEMORYTYPE_ARRAY, nullptr, 0, array, 0};
}

// A 2D copy of `height` rows of `width` bytes from `from` to `to`.
inline CUDA_MEMCPY2D Copy2D(const Rows2D& from, const Rows2D& to, size_t width, size_t height) {
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = from.type;
  copy.srcHost = from.host;
  copy.srcDevice = from.device;
  copy.srcArray = from.array;
  copy.srcPitch = from.pitch;
  copy.dstMemoryType = to.type;
  copy.dstHost = to.host;
  copy.dstDevice = to.device;
  copy.dstArray = to.array;
  copy.dstPitch = to.pitch;
  copy.WidthInBytes = width;
  copy.Height = height;
  return copy;
}

// `bytes` from device memory `src` to host memory `dst` as a 3D copy of one
// row (the form a graph memcpy node takes).
inline CUDA_MEMCPY3D Copy3DToHost(CUdeviceptr src, void* dst, size_t bytes) {
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = src;
  copy.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy.dstHost = dst;
  copy.WidthInBytes = bytes;
  copy.Height = 1;
  copy.Depth = 1;
  return copy;
}

// Destroys MIG compute instances `cis`, then GPU instances `gis`, in the order
// given; each destruction must succeed.
inline void DestroyMigInstances(std::initializer_list<nvmlComputeInstance_t> cis,
                                std::initializer_list<nvmlGpuInstance_t> gis) {
  for (nvmlComputeInstance_t ci : cis) SIM_OK(nvmlComputeInstanceDestroy(ci));
  for (nvmlGpuInstance_t gi : gis) SIM_OK(nvmlGpuInstanceDestroy(gi));
}

// Runs `command` with /bin/sh; `out` gets its stdout and stderr. Returns the
// exit code (-1 when the shell could not start).
inline int Shell(const std::string& command, std::string* out) {
  tessera::testing::ShellOutcome r = tessera::testing::RunShell(command);
  *out = r.output;
  return r.exit_code;
}

// A child process running this program with `args`; its stdout is readable
// line by line through `out`, and it reads commands from `in`.
struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;  // child's stdout
  FILE* in = nullptr;   // child's stdin

  std::string ReadLine() {
    char buf[512];
    if (out == nullptr || std::fgets(buf, sizeof(buf), out) == nullptr) return "";
    std::string s = buf;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void Send(const std::string& line) {
    std::fprintf(in, "%s\n", line.c_str());
    std::fflush(in);
  }
  // Waits for exit; returns the exit status (or 128 + signal).
  int Wait() {
    if (in != nullptr) {
      std::fclose(in);
      in = nullptr;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (out != nullptr) {
      std::fclose(out);
      out = nullptr;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

inline Child SpawnSelf(const std::vector<std::string>& args) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) std::exit(2);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    std::vector<char*> argv;
    static std::string self = "/proc/self/exe";
    argv.push_back(const_cast<char*>(self.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  Child c;
  c.pid = pid;
  c.out = fdopen(from_child[0], "r");
  c.in = fdopen(to_child[1], "w");
  return c;
}

inline int Finish(const char* name) {
  if (Failures() == 0) {
    std::printf("%s: PASS\n", name);
    return 0;
  }
  std::printf("%s: %d check(s) FAILED\n", name, Failures());
  return 1;
}

}  // namespace simtest
