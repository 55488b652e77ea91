// cuGetProcAddress / cuGetProcAddress_v2: how cudart (11.3+) finds every
// driver entry point. The driver decides which ABI version of `symbol` fits the
// caller's CUDA version and stream flags; libvgpu then hands out its hook for
// exactly that version (e.g. cuMemAlloc -> cuMemAlloc_v2, cuLaunchKernel with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM -> cuLaunchKernel_ptsz).
#include <cstring>

#include "vgpu/hooks.h"
#include "vgpu/runtime.h"

#define TESSERA_EXPORT extern "C" __attribute__((visibility("default")))

namespace tessera::vgpu {
namespace {

struct CudaHook {
  const char* symbol;
  void* hook;
  const char* base;
  int since;
  bool ptsz;
};

const CudaHook kCudaHooks[] = {
#define TESSERA_ROW(sym, decl, base, since, ptsz) \
  {#sym, reinterpret_cast<void*>(&::sym), base, since, ptsz != 0},
    TESSERA_CUDA_HOOKS(TESSERA_ROW)
#undef TESSERA_ROW
};
constexpr int kCudaHookCount = sizeof(kCudaHooks) / sizeof(kCudaHooks[0]);

struct NvmlHook {
  const char* symbol;
  void* hook;
};

const NvmlHook kNvmlHooks[] = {
#define TESSERA_ROW(sym) {#sym, reinterpret_cast<void*>(&::sym)},
    TESSERA_NVML_HOOKS(TESSERA_ROW)
#undef TESSERA_ROW
};

// The driver's entry point behind each row of kCudaHooks (resolved once, when
// libvgpu initialised).
struct RealPointers {
  void* at[kCudaHookCount] = {};
  explicit RealPointers(const RealCuda& cuda) {
    int k = 0;
#define TESSERA_REAL(sym, decl, base, since, ptsz) at[k++] = reinterpret_cast<void*>(cuda.sym);
    TESSERA_CUDA_HOOKS(TESSERA_REAL)
#undef TESSERA_REAL
  }
};

void* real_pointer(const RealCuda& cuda, int index) {
  static const RealPointers reals(cuda);
  return reals.at[index];
}

}  // namespace

void* find_hook(const char* name) {
  if (name == nullptr) return nullptr;
  if (name[0] == 'c' && name[1] == 'u') {
    for (const CudaHook& h : kCudaHooks)
      if (strcmp(h.symbol, name) == 0) return h.hook;
  } else if (strncmp(name, "nvml", 4) == 0) {
    for (const NvmlHook& h : kNvmlHooks)
      if (strcmp(h.symbol, name) == 0) return h.hook;
  }
  return nullptr;
}

void* substitute_proc_address(const char* symbol, void* found, int cuda_version, uint64_t flags) {
  if (symbol == nullptr || found == nullptr) return found;
  Runtime& rt = runtime();
  bool known_base = false;
  for (int i = 0; i < kCudaHookCount; ++i) {
    if (strcmp(kCudaHooks[i].base, symbol) != 0) continue;
    known_base = true;
    if (real_pointer(rt.cuda, i) == found) return kCudaHooks[i].hook;
  }
  if (!known_base) {
    // A base name of its own that the driver resolves to an entry point
    // listed under another base (cuGraphInstantiateWithFlags is both).
    for (int i = 0; i < kCudaHookCount; ++i)
      if (real_pointer(rt.cuda, i) == found) return kCudaHooks[i].hook;
    return found;
  }
  // The driver answered with an address that is not one of its exported entry
  // points: choose the ABI version the same way it does.
  bool want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  for (int pass = 0; pass < 2; ++pass) {
    int best = -1;
    for (int i = 0; i < kCudaHookCount; ++i) {
      const CudaHook& h = kCudaHooks[i];
      if (strcmp(h.base, symbol) != 0 || h.since > cuda_version || h.ptsz != want_ptsz) continue;
      if (best < 0 || h.since > kCudaHooks[best].since) best = i;
    }
    if (best >= 0) return kCudaHooks[best].hook;
    want_ptsz = false;  // entry points without a per-thread variant
  }
  return found;
}

}  // namespace tessera::vgpu

TESSERA_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* symbolStatus) {
  tessera::vgpu::Runtime& rt = tessera::vgpu::runtime();
  if (rt.cuda.cuGetProcAddress_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = rt.cuda.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (rc == CUDA_SUCCESS && pfn != nullptr)
    *pfn = tessera::vgpu::substitute_proc_address(symbol, *pfn, cudaVersion, flags);
  return rc;
}

TESSERA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  tessera::vgpu::Runtime& rt = tessera::vgpu::runtime();
  CUresult rc;
  if (rt.cuda.cuGetProcAddress != nullptr)
    rc = rt.cuda.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  else if (rt.cuda.cuGetProcAddress_v2 != nullptr)
    rc = rt.cuda.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
  else
    return CUDA_ERROR_NOT_INITIALIZED;
  if (rc == CUDA_SUCCESS && pfn != nullptr)
    *pfn = tessera::vgpu::substitute_proc_address(symbol, *pfn, cudaVersion, flags);
  return rc;
}
