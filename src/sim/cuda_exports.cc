// Error strings and symbol lookup (cuGetProcAddress) of the simulated driver.
//
// cuGetProcAddress answers for every function the library exports: it maps an
// API base name and the caller's CUDA version to the versioned ABI name the real
// driver would return (cuMemAlloc -> cuMemAlloc_v2, cuCtxCreate -> _v4 from
// 13.0, ...), picks the _ptds/_ptsz variant for per-thread default-stream
// callers, and resolves that name among this library's own exports (so the
// answer is always exactly the exported set; there is no second list to drift).
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {
namespace {

struct Versioned {
  const char* base;
  int min_version;
  const char* name;
};

// Base name -> versioned ABI name, from the CUDA version that introduced it.
// Later rows for the same base win when the caller's version is high enough.
const Versioned kVersioned[] = {
    {"cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2"},
    {"cuCtxCreate", 3020, "cuCtxCreate_v2"},
    {"cuCtxCreate", 13000, "cuCtxCreate_v4"},
    {"cuModuleGetGlobal", 3020, "cuModuleGetGlobal_v2"},
    {"cuMemGetInfo", 3020, "cuMemGetInfo_v2"},
    {"cuMemAlloc", 3020, "cuMemAlloc_v2"},
    {"cuMemAllocPitch", 3020, "cuMemAllocPitch_v2"},
    {"cuMemFree", 3020, "cuMemFree_v2"},
    {"cuMemGetAddressRange", 3020, "cuMemGetAddressRange_v2"},
    {"cuMemAllocHost", 3020, "cuMemAllocHost_v2"},
    {"cuMemHostGetDevicePointer", 3020, "cuMemHostGetDevicePointer_v2"},
    {"cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2"},
    {"cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2"},
    {"cuMemcpyDtoD", 3020, "cuMemcpyDtoD_v2"},
    {"cuMemcpyDtoA", 3020, "cuMemcpyDtoA_v2"},
    {"cuMemcpyAtoD", 3020, "cuMemcpyAtoD_v2"},
    {"cuMemcpyHtoA", 3020, "cuMemcpyHtoA_v2"},
    {"cuMemcpyAtoH", 3020, "cuMemcpyAtoH_v2"},
    {"cuMemcpyAtoA", 3020, "cuMemcpyAtoA_v2"},
    {"cuMemcpyHtoAAsync", 3020, "cuMemcpyHtoAAsync_v2"},
    {"cuMemcpyAtoHAsync", 3020, "cuMemcpyAtoHAsync_v2"},
    {"cuMemcpy2D", 3020, "cuMemcpy2D_v2"},
    {"cuMemcpy2DUnaligned", 3020, "cuMemcpy2DUnaligned_v2"},
    {"cuMemcpy3D", 3020, "cuMemcpy3D_v2"},
    {"cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2"},
    {"cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2"},
    {"cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2"},
    {"cuMemcpy2DAsync", 3020, "cuMemcpy2DAsync_v2"},
    {"cuMemcpy3DAsync", 3020, "cuMemcpy3DAsync_v2"},
    {"cuMemsetD8", 3020, "cuMemsetD8_v2"},
    {"cuMemsetD16", 3020, "cuMemsetD16_v2"},
    {"cuMemsetD32", 3020, "cuMemsetD32_v2"},
    {"cuMemsetD2D8", 3020, "cuMemsetD2D8_v2"},
    {"cuMemsetD2D16", 3020, "cuMemsetD2D16_v2"},
    {"cuMemsetD2D32", 3020, "cuMemsetD2D32_v2"},
    {"cuArrayCreate", 3020, "cuArrayCreate_v2"},
    {"cuArrayGetDescriptor", 3020, "cuArrayGetDescriptor_v2"},
    {"cuArray3DCreate", 3020, "cuArray3DCreate_v2"},
    {"cuArray3DGetDescriptor", 3020, "cuArray3DGetDescriptor_v2"},
    {"cuCtxDestroy", 4000, "cuCtxDestroy_v2"},
    {"cuCtxPopCurrent", 4000, "cuCtxPopCurrent_v2"},
    {"cuCtxPushCurrent", 4000, "cuCtxPushCurrent_v2"},
    {"cuStreamDestroy", 4000, "cuStreamDestroy_v2"},
    {"cuEventDestroy", 4000, "cuEventDestroy_v2"},
    {"cuMemHostRegister", 6050, "cuMemHostRegister_v2"},
    {"cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2"},
    {"cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxReset", 11000, "cuDevicePrimaryCtxReset_v2"},
    {"cuDevicePrimaryCtxSetFlags", 11000, "cuDevicePrimaryCtxSetFlags_v2"},
    {"cuIpcOpenMemHandle", 11000, "cuIpcOpenMemHandle_v2"},
    {"cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2"},
    {"cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3"},
    {"cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2"},
    {"cuGraphInstantiate", 11000, "cuGraphInstantiate_v2"},
    {"cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags"},
    {"cuGraphExecUpdate", 12000, "cuGraphExecUpdate_v2"},
    {"cuGetProcAddress", 12000, "cuGetProcAddress_v2"},
    {"cuGraphAddKernelNode", 12000, "cuGraphAddKernelNode_v2"},
    {"cuGraphKernelNodeGetParams", 12000, "cuGraphKernelNodeGetParams_v2"},
    {"cuGraphKernelNodeSetParams", 12000, "cuGraphKernelNodeSetParams_v2"},
    {"cuGraphExecKernelNodeSetParams", 12000, "cuGraphExecKernelNodeSetParams_v2"},
    {"cuMemPrefetchAsync", 12020, "cuMemPrefetchAsync_v2"},
    {"cuMemAdvise", 12020, "cuMemAdvise_v2"},
    {"cuGraphGetEdges", 12030, "cuGraphGetEdges_v2"},
    {"cuGraphNodeGetDependencies", 12030, "cuGraphNodeGetDependencies_v2"},
    {"cuGraphNodeGetDependentNodes", 12030, "cuGraphNodeGetDependentNodes_v2"},
    {"cuGraphAddDependencies", 12030, "cuGraphAddDependencies_v2"},
    {"cuGraphRemoveDependencies", 12030, "cuGraphRemoveDependencies_v2"},
    {"cuGraphAddNode", 12030, "cuGraphAddNode_v2"},
    {"cuEventElapsedTime", 12080, "cuEventElapsedTime_v2"},
};

void* SelfHandle() {
  static void* handle = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&SelfHandle), &info) == 0 || info.dli_fname == nullptr) {
      return static_cast<void*>(nullptr);
    }
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }();
  return handle;
}

// Only names of this library's driver API (cu*), never internal helpers.
void* LookUp(const std::string& name) {
  if (name.size() < 3 || name.compare(0, 2, "cu") != 0) return nullptr;
  void* self = SelfHandle();
  if (self == nullptr) return nullptr;
  void* p = dlsym(self, name.c_str());
  if (p == nullptr) return nullptr;
  // dlsym searches dependencies too; accept only symbols defined here.
  Dl_info a{}, b{};
  if (dladdr(p, &a) == 0 || dladdr(reinterpret_cast<void*>(&SelfHandle), &b) == 0 ||
      a.dli_fbase != b.dli_fbase) {
    return nullptr;
  }
  return p;
}

CUresult ProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                     CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  std::string name = symbol;
  for (const Versioned& v : kVersioned) {
    if (std::strcmp(symbol, v.base) == 0 && cudaVersion >= v.min_version) name = v.name;
  }
  void* p = nullptr;
  if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    p = LookUp(name + "_ptds");
    if (p == nullptr) p = LookUp(name + "_ptsz");
  }
  if (p == nullptr) p = LookUp(name);
  if (p == nullptr && name != symbol) p = LookUp(symbol);
  if (p == nullptr) {
    if (status != nullptr) {
      *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = p;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

// An error's name is its enumerator's spelling.
#define ERROR_TEXT(code, text) \
  { code, #code, text }

const ErrorText kErrors[] = {
    ERROR_TEXT(CUDA_SUCCESS, "no error"),
    ERROR_TEXT(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    ERROR_TEXT(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    ERROR_TEXT(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    ERROR_TEXT(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    ERROR_TEXT(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    ERROR_TEXT(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    ERROR_TEXT(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    ERROR_TEXT(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    ERROR_TEXT(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    ERROR_TEXT(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    ERROR_TEXT(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    ERROR_TEXT(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    ERROR_TEXT(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    ERROR_TEXT(CUDA_ERROR_NOT_READY, "device not ready"),
    ERROR_TEXT(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    ERROR_TEXT(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    ERROR_TEXT(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
               "part or all of the requested memory range is already mapped"),
    ERROR_TEXT(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
               "pointer does not correspond to a registered memory region"),
    ERROR_TEXT(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    ERROR_TEXT(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    ERROR_TEXT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    ERROR_TEXT(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
               "operation failed due to a previous error during capture"),
    ERROR_TEXT(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
               "attempt to terminate a thread-local capture sequence from another thread"),
    ERROR_TEXT(CUDA_ERROR_ILLEGAL_STATE, "the resource is in an illegal state"),
    ERROR_TEXT(CUDA_ERROR_MPS_CONNECTION_FAILED,
               "MPS client failed to connect to the MPS control daemon or the MPS server"),
    ERROR_TEXT(CUDA_ERROR_MPS_RPC_FAILURE,
               "the remote procedural call between the MPS server and the MPS client failed"),
    ERROR_TEXT(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests"),
    ERROR_TEXT(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,
               "the hardware resources required to create MPS client have been exhausted"),
    ERROR_TEXT(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server"),
    ERROR_TEXT(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef ERROR_TEXT

// The name or the text of an error; CUDA_ERROR_INVALID_VALUE (and NULL) for a
// value that is not one.
CUresult DescribeError(CUresult error, const char* ErrorText::*field, const char** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == error) {
      *out = e.*field;
      return CUDA_SUCCESS;
    }
  }
  *out = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return Guard([&]() -> CUresult { return ProcAddress(symbol, pfn, cudaVersion, flags, symbolStatus); });
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return Guard([&]() -> CUresult { return ProcAddress(symbol, pfn, cudaVersion, flags, nullptr); });
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  return DescribeError(error, &ErrorText::text, pStr);
}

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  return DescribeError(error, &ErrorText::name, pStr);
}

// The runtime's private tables are not simulated.
CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  (void)pExportTableId;
  if (ppExportTable != nullptr) *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuProfilerStart(void) {
  return CUDA_SUCCESS;
}
CUresult cuProfilerStop(void) {
  return CUDA_SUCCESS;
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
