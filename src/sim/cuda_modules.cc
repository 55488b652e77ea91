// Modules, libraries, functions and kernel launches. Modules and libraries
// hold no code: every function name resolves, and every global is a 256-byte
// device allocation. A kernel runs for the configured default time, or, when
// its name starts with sim_busy, for the nanoseconds in its first parameter,
// booked on the GPU's shared timeline after the stream's earlier work.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

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

void BookKernel(CUstream s, uint64_t duration_ns) {
  Runtime& rt = R();
  StateLock lock(*rt.state);
  auto [start, end] = rt.state->BookKernelLocked(s->ctx->gpu, rt.pid, StreamReadyNs(s),
                                                 static_cast<int64_t>(duration_ns), rt.gpu_gi[s->ctx->gpu]);
  (void)start;
  s->last_end_ns = end;
}

}  // namespace tessera::sim::cuda

using namespace tessera::sim;
using namespace tessera::sim::cuda;

extern "C" {

static CUresult NewModule(CUmodule* module) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  int gpu;
  CUcontext c;
  if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
  auto* m = new CUmod_st();
  m->ctx = c;
  R().live.insert(m);
  *module = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  return Guard([&]() -> CUresult {
    if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (access(fname, R_OK) != 0) return CUDA_ERROR_FILE_NOT_FOUND;
    return NewModule(module);
  });
}
CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return Guard([&]() -> CUresult {
    if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return NewModule(module);
  });
}
CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                            CUjit_option* options, void** optionValues) {
  (void)numOptions;
  (void)options;
  (void)optionValues;
  return cuModuleLoadData(module, image);
}
CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return cuModuleLoadData(module, fatCubin);
}

CUresult cuModuleUnload(CUmodule hmod) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(hmod) || hmod->magic != kModuleMagic) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& [name, f] : hmod->functions) R().live.erase(f.get());
    for (auto& [name, p] : hmod->globals) FreeDevice(p);
    R().live.erase(hmod);
    hmod->magic = 0;
    delete hmod;
    return CUDA_SUCCESS;
  });
}

static void InitFunction(CUfunc_st* f, const char* name) {
  f->name = name;
  f->busy = std::strncmp(name, "sim_busy", 8) == 0;
  f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
  f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = 32;
  f->attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = 80;
  f->attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = 80;
  f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 49152;
  R().live.insert(f);
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  return Guard([&]() -> CUresult {
    if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hmod) || hmod->magic != kModuleMagic) return CUDA_ERROR_INVALID_HANDLE;
    auto& slot = hmod->functions[name];
    if (!slot) {
      slot = std::make_unique<CUfunc_st>();
      slot->module = hmod;
      InitFunction(slot.get(), name);
    }
    *hfunc = slot.get();
    return CUDA_SUCCESS;
  });
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  return Guard([&]() -> CUresult {
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hmod) || hmod->magic != kModuleMagic) return CUDA_ERROR_INVALID_HANDLE;
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

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                           void** jitOptionsValues, unsigned int numJitOptions,
                           CUlibraryOption* libraryOptions, void** libraryOptionValues,
                           unsigned int numLibraryOptions) {
  (void)jitOptions;
  (void)jitOptionsValues;
  (void)numJitOptions;
  (void)libraryOptions;
  (void)libraryOptionValues;
  (void)numLibraryOptions;
  return Guard([&]() -> CUresult {
    if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
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
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(library) || library->magic != kLibMagic) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& [name, k] : library->kernels) R().live.erase(k.get());
    R().live.erase(library);
    library->magic = 0;
    delete library;
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  return Guard([&]() -> CUresult {
    if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(library) || library->magic != kLibMagic) return CUDA_ERROR_INVALID_HANDLE;
    auto& slot = library->kernels[name];
    if (!slot) {
      slot = std::make_unique<CUkern_st>();
      InitFunction(slot.get(), name);
    }
    *pKernel = slot.get();
    return CUDA_SUCCESS;
  });
}

CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  return Guard([&]() -> CUresult {
    if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(kernel) || kernel->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = kernel;
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  return Guard([&]() -> CUresult {
    if (pi == nullptr || attrib < 0 || attrib >= 16) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hfunc) || hfunc->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *pi = hfunc->attrs[attrib];
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return Guard([&]() -> CUresult {
    if (attrib < 0 || attrib >= 16) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hfunc) || hfunc->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    hfunc->attrs[attrib] = value;
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  (void)hfunc;
  (void)config;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  return Guard([&]() -> CUresult {
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hfunc) || hfunc->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *name = hfunc->name.c_str();
    return CUDA_SUCCESS;
  });
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                     size_t dynamicSMemSize) {
  (void)func;
  (void)dynamicSMemSize;
  if (numBlocks == nullptr || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  *numBlocks = std::max(1, std::min(32, 2048 / blockSize));
  return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                          CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                          size_t dynamicSMemSize, int blockSizeLimit) {
  (void)func;
  (void)blockSizeToDynamicSMemSize;
  (void)dynamicSMemSize;
  if (minGridSize == nullptr || blockSize == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *blockSize = blockSizeLimit > 0 ? std::min(blockSizeLimit, 1024) : 1024;
  *minGridSize = 2 * 108;
  return CUDA_SUCCESS;
}

// ----- launches -----
static CUresult Launch(CUfunction f, CUstream h, bool ptds, void** params, void** extra) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (!IsLive(f) || f->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  return EnqueueKernel(s, f, KernelDurationNs(f, params, extra));
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void** params,
                        void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem;
  return Guard([&]() -> CUresult { return Launch(f, s, false, params, extra); });
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void** params,
                             void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem;
  return Guard([&]() -> CUresult { return Launch(f, s, true, params, extra); });
}
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return Launch(f, config->hStream, false, params, extra); });
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return Launch(f, config->hStream, true, params, extra); });
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                   CUstream s, void** params) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem;
  return Guard([&]() -> CUresult { return Launch(f, s, false, params, nullptr); });
}
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                        CUstream s, void** params) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem;
  return Guard([&]() -> CUresult { return Launch(f, s, true, params, nullptr); });
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

// Functions and kernels.
CUresult cuFuncGetModule(CUmodule* hmod, CUfunction f) {
  return Guard([&]() -> CUresult {
    if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(f) || f->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *hmod = f->module;
    return CUDA_SUCCESS;
  });
}
CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction f) {
  return Guard([&]() -> CUresult {
    if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(f) || f->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
  });
}
CUresult cuFuncLoad(CUfunction f) {
  return Guard([&]() -> CUresult {
    LOCKED;
    return IsLive(f) && f->magic == kFuncMagic ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  });
}
CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  (void)dev;
  return cuFuncGetAttribute(pi, attrib, kernel);
}
CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  (void)dev;
  return cuFuncSetAttribute(kernel, attrib, val);
}
CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  return cuFuncGetName(name, kernel);
}
CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  (void)config;
  (void)dev;
  return cuFuncLoad(kernel);
}

// Occupancy: every block size up to 1024 fits, limited by threads per SM.
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func, int blockSize,
                                                              size_t dynamicSMemSize, unsigned int flags) {
  (void)flags;
  return cuOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, func, blockSize, dynamicSMemSize);
}
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize, CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit,
                                                   unsigned int flags) {
  (void)flags;
  return cuOccupancyMaxPotentialBlockSize(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                          dynamicSMemSize, blockSizeLimit);
}
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func, int numBlocks,
                                                 int blockSize) {
  (void)func;
  (void)blockSize;
  if (dynamicSmemSize == nullptr || numBlocks <= 0) return CUDA_ERROR_INVALID_VALUE;
  *dynamicSmemSize = 166912 / static_cast<size_t>(numBlocks);
  return CUDA_SUCCESS;
}

}  // extern "C"
