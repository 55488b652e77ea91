// mps_client: a CUDA driver-API program as an MPS client sees the GPU (its
// limits come from the CUDA_MPS_* variables it is started with). Each role
// prints "INIT <cuInit result>" first.
//   mps_client fill <MiB>     allocates MiB - 1, then 1 MiB, then one more byte:
//                             "FILL <r1> <r2> <r3>" (CUresult of each)
//   mps_client busy <seconds> prints READY, waits for a line on stdin, keeps
//                             eight 20 ms sim_busy kernels in flight for that
//                             long: "DONE", or "FAILED <CUresult>" at the
//                             first call that fails
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mps_client fill MiB | busy SECONDS\n");
    return 2;
  }
  const CUresult init = cuInit(0);
  std::printf("INIT %d\n", init);
  std::fflush(stdout);
  if (init != CUDA_SUCCESS) return 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cuDeviceGet(&device, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS) {
    std::printf("NOCONTEXT\n");
    return 1;
  }
  if (std::strcmp(argv[1], "fill") == 0) {
    const size_t limit = std::strtoull(argv[2], nullptr, 10) << 20;
    CUdeviceptr a = 0, b = 0, c = 0;
    const int r1 = cuMemAlloc(&a, limit - (1u << 20));
    const int r2 = cuMemAlloc(&b, 1u << 20);
    const int r3 = cuMemAlloc(&c, 1);
    std::printf("FILL %d %d %d\n", r1, r2, r3);
    return 0;
  }
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
  if (cuModuleLoadData(&module, "image") != CUDA_SUCCESS ||
      cuModuleGetFunction(&kernel, module, "sim_busy_mps_client") != CUDA_SUCCESS) {
    std::printf("NOKERNEL\n");
    return 1;
  }
  std::printf("READY\n");
  std::fflush(stdout);
  char line[16];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 2;
  CUevent done[8];
  for (CUevent& e : done) cuEventCreate(&e, 0);
  uint64_t ns = 20'000'000;
  void* args[] = {&ns};
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(argv[2]));
  for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
    CUresult r = i >= 8 ? cuEventSynchronize(done[i % 8]) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) r = cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);
    if (r == CUDA_SUCCESS) r = cuEventRecord(done[i % 8], nullptr);
    if (r != CUDA_SUCCESS) {
      std::printf("FAILED %d\n", r);
      return 0;
    }
  }
  std::printf("DONE\n");
  return 0;
}
