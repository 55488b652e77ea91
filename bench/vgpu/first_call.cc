// vgpu_first_call: prints how long this process's first CUDA calls took, in
// nanoseconds: cuInit, then cuDeviceGet + cuDeviceTotalMem, and with
// --context the first context creation too (cuDevicePrimaryCtxRetain +
// cuCtxSetCurrent). With libvgpu preloaded that includes its whole start-up
// (configuration, loading the driver's entry points, opening the region,
// claiming a slot, listing devices) and, for the context, its charge: reserved
// at once when the container's region already knows the context's size, else
// measured through NVML (nvmlInit, the process list, nvmlShutdown) and stored.
//
//   vgpu_first_call [--context]   ->   "<CUresult> <first calls ns> <context ns>"
#include <cuda.h>
#include <time.h>

#include <cstdio>
#include <cstring>

static long long now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char** argv) {
  bool context = argc > 1 && strcmp(argv[1], "--context") == 0;
  long long start = now_ns();
  CUresult rc = cuInit(0);
  CUdevice dev = 0;
  size_t total = 0;
  if (rc == CUDA_SUCCESS) rc = cuDeviceGet(&dev, 0);
  if (rc == CUDA_SUCCESS) rc = cuDeviceTotalMem_v2(&total, dev);
  long long first = now_ns() - start;
  long long ctx_ns = 0;
  if (context && rc == CUDA_SUCCESS) {
    long long ctx_start = now_ns();
    CUcontext ctx = nullptr;
    rc = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(ctx);
    ctx_ns = now_ns() - ctx_start;
  }
  printf("%d %lld %lld\n", rc, first, ctx_ns);
  return rc == CUDA_SUCCESS ? 0 : 1;
}
