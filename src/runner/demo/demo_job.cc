// tessera-demo-job: a small CUDA driver-API program used by `tessera demo`.
// It grabs device memory in steps up to a target, then keeps the GPU busy with
// `sim_busy` kernels (the simulated driver's kernel that occupies the device
// for the nanoseconds in its first parameter) for a while, printing one JSON
// progress line per report interval:
//   {"t":1.20,"busy_ms":350.0,"mem_mib":2048,"oom":1,"kernels":350}
// busy_ms is device time its kernels used (kernel count x kernel length).
// It is an ordinary program: it knows nothing of tessera, and runs the same
// with or without libvgpu.so preloaded.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
  int64_t mem_mib = 0;
  int64_t mem_step_mib = 256;
  int64_t kernel_us = 1000;
  double duration_s = 10;
  int report_ms = 200;
};

void Usage() {
  std::fprintf(stderr,
               "usage: tessera-demo-job [--mem-mib N] [--mem-step-mib N] [--kernel-us N] [--duration-s S] "
               "[--report-ms N]\n");
}

bool Parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    char* end = nullptr;
    double d = std::strtod(v, &end);
    if (end == v || *end != '\0' || d < 0) return false;
    if (a == "--mem-mib")
      o.mem_mib = static_cast<int64_t>(d);
    else if (a == "--mem-step-mib")
      o.mem_step_mib = static_cast<int64_t>(d);
    else if (a == "--kernel-us")
      o.kernel_us = static_cast<int64_t>(d);
    else if (a == "--duration-s")
      o.duration_s = d;
    else if (a == "--report-ms")
      o.report_ms = static_cast<int>(d);
    else
      return false;
  }
  return o.mem_step_mib > 0 && o.kernel_us > 0 && o.report_ms > 0;
}

const char* Name(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "unknown";
}

#define CHECK(call)                                                                \
  do {                                                                             \
    CUresult rc_ = (call);                                                         \
    if (rc_ != CUDA_SUCCESS) {                                                     \
      std::fprintf(stderr, "tessera-demo-job: %s failed: %s\n", #call, Name(rc_)); \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!Parse(argc, argv, opt)) {
    Usage();
    return 2;
  }
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));

  // Memory: take steps until the target; a refused step is counted and the
  // job carries on with what it got, like a framework that backs off.
  std::vector<CUdeviceptr> blocks;
  int64_t mem_mib = 0;
  int oom = 0;
  while (mem_mib < opt.mem_mib) {
    int64_t step = std::min(opt.mem_step_mib, opt.mem_mib - mem_mib);
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, static_cast<size_t>(step) << 20);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      ++oom;
      break;
    }
    CHECK(r);
    // Touch the first MiB: proves the memory is usable without making the
    // simulated GPU commit gigabytes of host memory.
    CHECK(cuMemsetD8(p, 0xab, std::min<size_t>(static_cast<size_t>(step) << 20, 1 << 20)));
    blocks.push_back(p);
    mem_mib += step;
  }

  CUmodule mod;
  static const char kImage[] = "tessera demo module";
  CHECK(cuModuleLoadData(&mod, kImage));
  CUfunction fn;
  CHECK(cuModuleGetFunction(&fn, mod, "sim_busy_demo"));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_report = start;
  uint64_t ns = static_cast<uint64_t>(opt.kernel_us) * 1000;
  void* params[] = {&ns};
  uint64_t kernels = 0;
  for (;;) {
    auto now = Clock::now();
    double t = std::chrono::duration<double>(now - start).count();
    const bool done = t >= opt.duration_s;
    if (now >= next_report || done) {
      std::printf("{\"t\":%.3f,\"busy_ms\":%.3f,\"mem_mib\":%lld,\"oom\":%d,\"kernels\":%llu}\n", t,
                  static_cast<double>(kernels) * static_cast<double>(opt.kernel_us) / 1000.0,
                  static_cast<long long>(mem_mib), oom, static_cast<unsigned long long>(kernels));
      std::fflush(stdout);
      next_report += std::chrono::milliseconds(opt.report_ms);
    }
    if (done) break;
    // Two kernels in flight keep the device saturated between host calls.
    CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    CHECK(cuStreamSynchronize(stream));
    kernels += 2;
  }
  for (CUdeviceptr p : blocks) cuMemFree(p);
  cuStreamDestroy(stream);
  cuModuleUnload(mod);
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}
