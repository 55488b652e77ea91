// Build-time check of the hook table against the published headers: every
// intercepted entry point has exactly the type cuda.h / nvml.h declares for
// it (the hooks' definitions are also compiled against those declarations, so
// a mismatch there is a compile error too), and each row's cuGetProcAddress
// base name is a prefix of its ABI name.
#include <type_traits>

#include "vgpu/runtime.h"

namespace {

constexpr bool starts_with(const char* s, const char* prefix) {
  while (*prefix != '\0') {
    if (*s++ != *prefix++) return false;
  }
  return true;
}

constexpr bool ends_with(const char* s, const char* suffix) {
  int n = 0, m = 0;
  while (s[n] != '\0') ++n;
  while (suffix[m] != '\0') ++m;
  if (m > n) return false;
  for (int i = 0; i < m; ++i)
    if (s[n - m + i] != suffix[i]) return false;
  return true;
}

#define TESSERA_CHECK_CUDA(sym, decl, base, since, ptsz)                                              \
  static_assert(std::is_same_v<decltype(&::sym), decltype(&::decl)>,                                  \
                #sym " does not have the type cuda.h declares for " #decl);                           \
  static_assert(starts_with(#sym, base), #sym ": base name is not a prefix of the ABI name");         \
  static_assert(since >= 2000 && since <= CUDA_VERSION, #sym ": introduced-in version out of range"); \
  static_assert((ptsz != 0) == ends_with(#sym, "_ptsz"), #sym ": ptsz flag disagrees with the name");
TESSERA_CUDA_HOOKS(TESSERA_CHECK_CUDA)
#undef TESSERA_CHECK_CUDA

#define TESSERA_CHECK_USED(sym) static_assert(std::is_function_v<std::remove_pointer_t<decltype(&::sym)>>);
TESSERA_CUDA_USED(TESSERA_CHECK_USED)
TESSERA_NVML_HOOKS(TESSERA_CHECK_USED)
TESSERA_NVML_USED(TESSERA_CHECK_USED)
#undef TESSERA_CHECK_USED

}  // namespace
