// cuda.h (the published driver-API contract) plus the ABI entry points a
// driver still exports but that CUDA 13's cuda.h declares only for the
// driver's own implementation (under __CUDA_API_VERSION_INTERNAL): older ABI
// versions that older programs and older cudart builds reach by their exact
// names or through cuGetProcAddress. Written from cuda.h's declarations of
// them; cuda_decls_check.cc compiles this header after cuda.h's own
// declarations, so any signature written differently is a compile error.
#pragma once

#include <cuda.h>

#include <cstddef>

// cuda.h maps these names to newer ABI versions with macros; libvgpu needs
// the exact symbol names.
#undef cuGetProcAddress
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDeviceTotalMem
#undef cuMemGetInfo
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuArrayCreate
#undef cuArray3DCreate
#undef cuGraphInstantiate
#undef cuGraphExecUpdate

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
CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams);

// Graphs before CUDA 12.0: instantiation with an error node and log buffer
// (10.0: cuGraphInstantiate, 11.0: _v2; cuda.h maps the name to
// cuGraphInstantiateWithFlags), and cuGraphExecUpdate before its _v2 (10.2).
CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                            char* logBuffer, size_t bufferSize);
CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                               char* logBuffer, size_t bufferSize);
CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode* hErrorNode_out,
                           CUgraphExecUpdateResult* updateResult_out);

// Entry points whose signatures did not change when a newer ABI version was
// added: before 3.2 (cuCtxCreate), 4.0 (cuCtxDestroy) and 11.0 (the primary
// context's Release/Reset).
CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);

// Before CUDA 3.2: 32-bit sizes, dimensions and device pointers.
#ifndef __CUDA_API_VERSION_INTERNAL
typedef unsigned int CUdeviceptr_v1;
typedef struct CUDA_ARRAY_DESCRIPTOR_v1_st {
  unsigned int Width;
  unsigned int Height;
  CUarray_format Format;
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1_st {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v1;
#endif
CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev);
CUresult cuMemGetInfo(unsigned int* free, unsigned int* total);
CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize);
CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes);
CUresult cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* pAllocateArray);
CUresult cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* pAllocateArray);
}

// The v1 descriptors' layout, as cuda.h has it (checked here against whichever
// definition is in force: ours, or cuda.h's in cuda_decls_check.cc).
static_assert(sizeof(CUdeviceptr_v1) == 4);
static_assert(sizeof(CUDA_ARRAY_DESCRIPTOR_v1) == 16);
static_assert(offsetof(CUDA_ARRAY_DESCRIPTOR_v1, Format) == 8);
static_assert(offsetof(CUDA_ARRAY_DESCRIPTOR_v1, NumChannels) == 12);
static_assert(sizeof(CUDA_ARRAY3D_DESCRIPTOR_v1) == 24);
static_assert(offsetof(CUDA_ARRAY3D_DESCRIPTOR_v1, Format) == 12);
static_assert(offsetof(CUDA_ARRAY3D_DESCRIPTOR_v1, Flags) == 20);
