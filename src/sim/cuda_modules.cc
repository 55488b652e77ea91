// Modules, libraries, functions and kernel launches. Modules and libraries
// hold no code: every function name resolves, and every global is a 256-byte
// device allocation. A kernel runs for the configured default time, or, when
// its name starts with sim_busy, for the nanoseconds in its first parameter,
// booked on the GPU's shared timeline after the stream's earlier work.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

uint64_t KernelDurationNs(CUfunction f, void** params, void** extra) {
  const uint64_t dflt = R().state->file()->default_kernel_ns;
  if (!f->busy) return dflt;
  uint64_t v = 0;
  if (params != nullptr && params[0] != nullptr) {
    std::memcpy(&v, params[0], sizeof(v));
    return v;
  }
  if (extra != nullptr) {
    void* buffer = nullptr;
    size_t size = 0;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != nullptr) {
        size = *static_cast<size_t*>(extra[i + 1]);
      }
    }
    if (buffer != nullptr && size >= sizeof(v)) {
      std::memcpy(&v, buffer, sizeof(v));
      return v;
    }
  }
  return dflt;
}

CUresult EnqueueKernel(CUstream s, CUfunction f, uint64_t duration_ns) {
  if (CUresult r = CheckMpsServer(); r != CUDA_SUCCESS) return r;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    CUgraphNode_st node;
    node.kind = NodeKind::kKernel;
    node.func = f;
    node.duration_ns = duration_ns;
    node.kernel.func = f;
    return CaptureNode(s, std::move(node));
  }
  BookKernel(s, duration_ns);
  return CUDA_SUCCESS;
}

// An MPS client's kernels run on its share of the device, beside the other
// clients' (MPS on MIG devices is not simulated: those book as usual).
void BookKernel(CUstream s, uint64_t duration_ns) {
  Runtime& rt = R();
  const int gpu = s->ctx->gpu;
  const int64_t ns = static_cast<int64_t>(duration_ns);
  StateLock lock(*rt.state);
  const auto booked = MpsShare(gpu) > 0 && rt.gpu_gi[gpu] < 0
                          ? rt.state->BookSharedKernelLocked(gpu, rt.pid, StreamReadyNs(s), ns, MpsShare(gpu))
                          : rt.state->BookKernelLocked(gpu, rt.pid, StreamReadyNs(s), ns, rt.gpu_gi[gpu]);
  s->last_end_ns = booked.second;
}

// The function (or library kernel) `name` of a module or library, made on
// first use: any name resolves.
template <typename Function>
Function* FunctionNamed(std::map<std::string, std::unique_ptr<Function>>& functions, const char* name,
                        CUmodule module) {
  auto& f = functions[name];
  if (!f) {
    f = std::make_unique<Function>();
    f->module = module;
    f->name = name;
    f->busy = std::strncmp(name, "sim_busy", 8) == 0;
    f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
    f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = 32;
    f->attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = 80;
    f->attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = 80;
    f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 49152;
    R().live.insert(f.get());
  }
  return f.get();
}

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

// Any image loads (the simulator runs no code).
CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext c) {
    auto* m = new CUmod_st();
    m->ctx = c;
    R().live.insert(m);
    *module = m;
    return CUDA_SUCCESS;
  });
}
CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (access(fname, R_OK) != 0) return CUDA_ERROR_FILE_NOT_FOUND;
  return cuModuleLoadData(module, fname);
}
CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return cuModuleLoadData(module, image);
}
CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return cuModuleLoadData(module, fatCubin);
}

CUresult cuModuleUnload(CUmodule hmod) {
  return OnHandle(hmod, [&] {
    for (auto& [name, f] : hmod->functions) R().live.erase(f.get());
    for (auto& [name, p] : hmod->globals) FreeDevice(p);
    DestroyHandle(hmod);
    return CUDA_SUCCESS;
  });
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return GetFrom(hmod, hfunc, [&] { return FunctionNamed(hmod->functions, name, hmod); });
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(hmod, [&] {
    // Any name is a 256-byte global, allocated on first use.
    auto it = hmod->globals.find(name);
    if (it == hmod->globals.end()) {
      CUdeviceptr p;
      if (CUresult r = AllocDevice(hmod->ctx->gpu, 256, AllocKind::kGlobal, hmod->ctx, &p, 256);
          r != CUDA_SUCCESS)
        return r;
      it = hmod->globals.emplace(name, p).first;
    }
    if (dptr != nullptr) *dptr = it->second;
    if (bytes != nullptr) *bytes = 256;
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                           CUlibraryOption*, void**, unsigned int) {
  if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    auto* l = new CUlib_st();
    R().live.insert(l);
    *library = l;
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                               void** jitOptionsValues, unsigned int numJitOptions,
                               CUlibraryOption* libraryOptions, void** libraryOptionValues,
                               unsigned int numLibraryOptions) {
  if (fileName == nullptr || access(fileName, R_OK) != 0) return CUDA_ERROR_FILE_NOT_FOUND;
  return cuLibraryLoadData(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                           libraryOptionValues, numLibraryOptions);
}

CUresult cuLibraryUnload(CUlibrary library) {
  return OnHandle(library, [&] {
    for (auto& [name, k] : library->kernels) R().live.erase(k.get());
    DestroyHandle(library);
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return GetFrom(library, pKernel, [&] { return FunctionNamed(library->kernels, name, nullptr); });
}

CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  return GetFrom(kernel, pFunc, [&] { return kernel; });
}

CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (pi == nullptr || attrib < 0 || attrib >= 16) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(hfunc, [&] {
    *pi = hfunc->attrs[attrib];
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  if (attrib < 0 || attrib >= 16) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(hfunc, [&] {
    hfunc->attrs[attrib] = value;
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncSetCacheConfig(CUfunction, CUfunc_cache) {
  return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  return GetFrom(hfunc, name, [&] { return hfunc->name.c_str(); });
}

// Occupancy: every block size up to 1024 fits, limited by threads per SM.
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction, int blockSize, size_t) {
  if (numBlocks == nullptr || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  *numBlocks = std::max(1, std::min(32, 2048 / blockSize));
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func, int blockSize,
                                                              size_t dynamicSMemSize, unsigned int) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, func, blockSize, dynamicSMemSize);
}

CUresult cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction, CUoccupancyB2DSize,
                                          size_t, int blockSizeLimit) {
  if (minGridSize == nullptr || blockSize == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *blockSize = blockSizeLimit > 0 ? std::min(blockSizeLimit, 1024) : 1024;
  *minGridSize = 2 * 108;
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize, CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit, unsigned int) {
  return cuOccupancyMaxPotentialBlockSize(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                          dynamicSMemSize, blockSizeLimit);
}

CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction, int numBlocks, int) {
  if (dynamicSmemSize == nullptr || numBlocks <= 0) return CUDA_ERROR_INVALID_VALUE;
  *dynamicSmemSize = 166912 / static_cast<size_t>(numBlocks);
  return CUDA_SUCCESS;
}

// ----- launches -----
static CUresult Launch(CUfunction f, CUstream h, void** params, void** extra) {
  return OnStream(h, [&](CUstream s) {
    if (!Valid(f)) return CUDA_ERROR_INVALID_HANDLE;
    return EnqueueKernel(s, f, KernelDurationNs(f, params, extra));
  });
}

CUresult cuLaunchKernel(CUfunction f, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, CUstream s, void** params, void** extra) {
  return Launch(f, s, params, extra);
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream s, void** params,
                             void** extra) {
  return Launch(f, PerThread(s), params, extra);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->hStream, params, extra);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, PerThread(config->hStream), params, extra);
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int, unsigned int, unsigned int, unsigned int,
                                   unsigned int, unsigned int, unsigned int, CUstream s, void** params) {
  return Launch(f, s, params, nullptr);
}
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int, unsigned int, unsigned int, unsigned int,
                                        unsigned int, unsigned int, unsigned int, CUstream s, void** params) {
  return Launch(f, PerThread(s), params, nullptr);
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

// Functions and kernels.
CUresult cuFuncGetModule(CUmodule* hmod, CUfunction f) {
  return GetFrom(f, hmod, [&] { return f->module; });
}
CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction f) {
  return GetFrom(f, state, [&] { return CU_FUNCTION_LOADING_STATE_LOADED; });
}
CUresult cuFuncLoad(CUfunction f) {
  return OnHandle(f, [] { return CUDA_SUCCESS; });
}
CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice) {
  return cuFuncGetAttribute(pi, attrib, kernel);
}
CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice) {
  return cuFuncSetAttribute(kernel, attrib, val);
}
CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  return cuFuncGetName(name, kernel);
}
CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache, CUdevice) {
  return cuFuncLoad(kernel);
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
