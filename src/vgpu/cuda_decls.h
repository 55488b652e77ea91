// cuda.h (the published driver-API contract) plus the few ABI entry points a
// driver still exports but that CUDA 13's cuda.h no longer declares under
// their own names (older cudart builds ask for them through cuGetProcAddress).
// Written from the signatures documented for those CUDA versions.
#pragma once

#include <cuda.h>

// cuda.h maps these names to newer ABI versions with macros; libvgpu needs
// the exact symbol names.
#undef cuGetProcAddress
#undef cuCtxCreate

extern "C" {
// CUDA 11.3 - 11.8: no symbolStatus argument.
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
// CUDA 3.2 - 11.3.
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
// CUDA 11.4 - 12.4.
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                        CUdevice dev);
// Per-thread-default-stream variants: same signatures as their base entry
// points (cuda.h declares them only when CUDA_API_PER_THREAD_DEFAULT_STREAM is set).
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void** kernelParams, void** extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void** kernelParams);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream);
}
