// The one table of every driver and NVML entry point libvgpu intercepts.
//
// Each row: X(symbol, declared_as, base, since, ptsz)
//   symbol       the exact exported ABI name libvgpu defines;
//   declared_as  the cuda.h / nvml.h declaration whose type it must have
//                (hook_table_check.cc static_asserts it at build time);
//   base         the name cudart passes to cuGetProcAddress for it;
//   since        the CUDA version (1000*major + 10*minor) that introduced
//                this ABI version of `base`;
//   ptsz         1 for the per-thread-default-stream variant.
// Everything not listed passes straight to the driver (libvgpu does not even
// see those calls). Entry points of older ABIs that a driver still exports
// are listed too (their declarations: cuda_decls.h, checked against cuda.h by
// cuda_decls_check.cc): otherwise dlsym(RTLD_NEXT, "cuCtxCreate") or
// cuGetProcAddress("cuCtxCreate", 3000) would reach the driver's unsliced one.
#pragma once

#define TESSERA_CUDA_HOOKS(X)                                                                               \
  X(cuInit, cuInit, "cuInit", 2000, 0)                                                                      \
  X(cuGetProcAddress, cuGetProcAddress, "cuGetProcAddress", 11030, 0)                                       \
  X(cuGetProcAddress_v2, cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0)                                 \
  X(cuDeviceGetCount, cuDeviceGetCount, "cuDeviceGetCount", 2000, 0)                                        \
  X(cuDeviceGet, cuDeviceGet, "cuDeviceGet", 2000, 0)                                                       \
  X(cuDeviceGetByPCIBusId, cuDeviceGetByPCIBusId, "cuDeviceGetByPCIBusId", 4010, 0)                         \
  X(cuDeviceTotalMem, cuDeviceTotalMem, "cuDeviceTotalMem", 2000, 0)                                        \
  X(cuDeviceTotalMem_v2, cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0)                                  \
  X(cuMemGetInfo, cuMemGetInfo, "cuMemGetInfo", 2000, 0)                                                    \
  X(cuMemGetInfo_v2, cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0)                                              \
  X(cuCtxCreate, cuCtxCreate, "cuCtxCreate", 2000, 0)                                                       \
  X(cuCtxCreate_v2, cuCtxCreate_v2, "cuCtxCreate", 3020, 0)                                                 \
  X(cuCtxCreate_v3, cuCtxCreate_v3, "cuCtxCreate", 11040, 0)                                                \
  X(cuCtxCreate_v4, cuCtxCreate_v4, "cuCtxCreate", 12050, 0)                                                \
  X(cuCtxDestroy, cuCtxDestroy, "cuCtxDestroy", 2000, 0)                                                    \
  X(cuCtxDestroy_v2, cuCtxDestroy_v2, "cuCtxDestroy", 4000, 0)                                              \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0)                \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000, 0)             \
  X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, 0)      \
  X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 7000, 0)                   \
  X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, 0)            \
  X(cuMemAlloc, cuMemAlloc, "cuMemAlloc", 2000, 0)                                                          \
  X(cuMemAlloc_v2, cuMemAlloc_v2, "cuMemAlloc", 3020, 0)                                                    \
  X(cuMemAllocPitch, cuMemAllocPitch, "cuMemAllocPitch", 2000, 0)                                           \
  X(cuMemAllocPitch_v2, cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0)                                     \
  X(cuMemAllocManaged, cuMemAllocManaged, "cuMemAllocManaged", 6000, 0)                                     \
  X(cuMemFree_v2, cuMemFree_v2, "cuMemFree", 3020, 0)                                                       \
  X(cuMemCreate, cuMemCreate, "cuMemCreate", 10020, 0)                                                      \
  X(cuMemRelease, cuMemRelease, "cuMemRelease", 10020, 0)                                                   \
  X(cuMemAllocAsync, cuMemAllocAsync, "cuMemAllocAsync", 11020, 0)                                          \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync, "cuMemAllocAsync", 11020, 1)                                     \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0)                  \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 1)             \
  X(cuMemFreeAsync, cuMemFreeAsync, "cuMemFreeAsync", 11020, 0)                                             \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync, "cuMemFreeAsync", 11020, 1)                                        \
  X(cuArrayCreate, cuArrayCreate, "cuArrayCreate", 2000, 0)                                                 \
  X(cuArrayCreate_v2, cuArrayCreate_v2, "cuArrayCreate", 3020, 0)                                           \
  X(cuArray3DCreate, cuArray3DCreate, "cuArray3DCreate", 2000, 0)                                           \
  X(cuArray3DCreate_v2, cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0)                                     \
  X(cuArrayDestroy, cuArrayDestroy, "cuArrayDestroy", 2000, 0)                                              \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0)                      \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, 0)                   \
  X(cuLaunchKernel, cuLaunchKernel, "cuLaunchKernel", 4000, 0)                                              \
  X(cuLaunchKernel_ptsz, cuLaunchKernel, "cuLaunchKernel", 7000, 1)                                         \
  X(cuLaunchKernelEx, cuLaunchKernelEx, "cuLaunchKernelEx", 11060, 0)                                       \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, "cuLaunchKernelEx", 11060, 1)                                  \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, 0)             \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, 1)        \
  X(cuGraphLaunch, cuGraphLaunch, "cuGraphLaunch", 10000, 0)                                                \
  X(cuGraphLaunch_ptsz, cuGraphLaunch, "cuGraphLaunch", 10000, 1)                                           \
  X(cuGraphInstantiate, cuGraphInstantiate, "cuGraphInstantiate", 10000, 0)                                 \
  X(cuGraphInstantiate_v2, cuGraphInstantiate_v2, "cuGraphInstantiate", 11000, 0)                           \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, "cuGraphInstantiate", 12000, 0)               \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, 0)   \
  X(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, \
    1)                                                                                                      \
  X(cuGraphExecUpdate, cuGraphExecUpdate, "cuGraphExecUpdate", 10020, 0)                                    \
  X(cuGraphExecUpdate_v2, cuGraphExecUpdate_v2, "cuGraphExecUpdate", 12000, 0)                              \
  X(cuGraphUpload, cuGraphUpload, "cuGraphUpload", 11010, 0)                                                \
  X(cuGraphUpload_ptsz, cuGraphUpload, "cuGraphUpload", 11010, 1)                                           \
  X(cuGraphExecDestroy, cuGraphExecDestroy, "cuGraphExecDestroy", 10000, 0)                                 \
  X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040, 0)

// Driver entry points libvgpu calls but does not intercept.
#define TESSERA_CUDA_USED(X)                \
  X(cuCtxGetDevice)                         \
  X(cuDeviceGetUuid_v2)                     \
  X(cuDeviceGetAttribute)                   \
  X(cuArrayGetMemoryRequirements)           \
  X(cuMipmappedArrayGetMemoryRequirements)  \
  X(cuMemGetAddressRange_v2)                \
  X(cuMemPoolGetAttribute)                  \
  X(cuDeviceGetMemPool)                     \
  X(cuMemGetAllocationPropertiesFromHandle) \
  X(cuDevicePrimaryCtxGetState)             \
  X(cuCtxPushCurrent_v2)                    \
  X(cuCtxPopCurrent_v2)                     \
  X(cuStreamIsCapturing)                    \
  X(cuGraphGetNodes)                        \
  X(cuGraphNodeGetType)                     \
  X(cuGraphMemAllocNodeGetParams)           \
  X(cuGraphMemFreeNodeGetParams)            \
  X(cuGraphChildGraphNodeGetGraph)          \
  X(cuDeviceGetGraphMemAttribute)

// NVML: X(symbol). Types are checked against nvml.h the same way.
#define TESSERA_NVML_HOOKS(X)                 \
  X(nvmlInit)                                 \
  X(nvmlInit_v2)                              \
  X(nvmlDeviceGetCount)                       \
  X(nvmlDeviceGetHandleByIndex)               \
  X(nvmlInitWithFlags)                        \
  X(nvmlDeviceGetCount_v2)                    \
  X(nvmlDeviceGetHandleByIndex_v2)            \
  X(nvmlDeviceGetHandleByUUID)                \
  X(nvmlDeviceGetHandleByPciBusId_v2)         \
  X(nvmlDeviceGetHandleByPciBusId)            \
  X(nvmlDeviceGetHandleBySerial)              \
  X(nvmlDeviceGetIndex)                       \
  X(nvmlDeviceGetMemoryInfo)                  \
  X(nvmlDeviceGetMemoryInfo_v2)               \
  X(nvmlDeviceGetComputeRunningProcesses)     \
  X(nvmlDeviceGetComputeRunningProcesses_v2)  \
  X(nvmlDeviceGetComputeRunningProcesses_v3)  \
  X(nvmlDeviceGetGraphicsRunningProcesses)    \
  X(nvmlDeviceGetGraphicsRunningProcesses_v2) \
  X(nvmlDeviceGetGraphicsRunningProcesses_v3) \
  X(nvmlDeviceGetProcessUtilization)

#define TESSERA_NVML_USED(X) \
  X(nvmlDeviceGetUUID)       \
  X(nvmlShutdown)
