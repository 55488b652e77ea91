// vgpu_first_call: prints how long this process's first CUDA calls took
// (cuInit, then cuDeviceGet + cuDeviceTotalMem), in nanoseconds. With libvgpu
// preloaded that includes its whole start-up: configuration, loading the
// driver's entry points, opening the region, claiming a slot, listing devices.
#include <cuda.h>
#include <time.h>

#include <cstdio>

static long long now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main() {
  long long start = now_ns();
  CUresult rc = cuInit(0);
  CUdevice dev = 0;
  size_t total = 0;
  if (rc == CUDA_SUCCESS) rc = cuDeviceGet(&dev, 0);
  if (rc == CUDA_SUCCESS) rc = cuDeviceTotalMem_v2(&total, dev);
  long long took = now_ns() - start;
  printf("%d %lld\n", rc, took);
  return rc == CUDA_SUCCESS ? 0 : 1;
}
