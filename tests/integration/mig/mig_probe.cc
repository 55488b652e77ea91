// mig_probe: what a container's CUDA program sees. Prints one line,
// "<devices>|<name of device 0>|<total MiB>|<SMs>", then allocates `argv[1]`
// MiB (default 0) on device 0 and prints "ALLOC <MiB> OK" or "ALLOC <MiB> FAILED".
#include <cuda.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (cuInit(0) != CUDA_SUCCESS) {
    std::printf("NOINIT\n");
    return 1;
  }
  int count = 0;
  cuDeviceGetCount(&count);
  if (count == 0) {
    std::printf("0|||\n");
    return 0;
  }
  CUdevice device = 0;
  cuDeviceGet(&device, 0);
  char name[256] = {};
  cuDeviceGetName(name, sizeof(name), device);
  size_t total = 0;
  cuDeviceTotalMem(&total, device);
  int sms = 0;
  cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  std::printf("%d|%s|%zu|%d\n", count, name, total >> 20, sms);
  const long mib = argc > 1 ? std::atol(argv[1]) : 0;
  if (mib > 0) {
    CUcontext context = nullptr;
    cuDevicePrimaryCtxRetain(&context, device);
    cuCtxSetCurrent(context);
    CUdeviceptr pointer = 0;
    const bool ok = cuMemAlloc(&pointer, static_cast<size_t>(mib) << 20) == CUDA_SUCCESS;
    std::printf("ALLOC %ld %s\n", mib, ok ? "OK" : "FAILED");
  }
  return 0;
}
