// dlsym override: programs (and cudart) that dlopen libcuda.so.1 or
// libnvidia-ml.so.1 and look entry points up by name get libvgpu's hooks for
// exactly the names in hook_table.h, and only when the lookup would have found
// the real entry point. Every other lookup behaves as glibc's, including
// RTLD_NEXT relative to the real caller (not to libvgpu), so other
// interposers chained with RTLD_NEXT keep working.
#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include "vgpu/hooks.h"
#include "vgpu/runtime.h"

namespace {

const void* self_base() {
  static const void* base = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(&tessera::vgpu::find_hook), &info);
    return info.dli_fbase;
  }();
  return base;
}

bool is_self(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) != 0 && info.dli_fbase == self_base();
}

bool same_object(const void* a, const void* b) {
  Dl_info ia{}, ib{};
  return dladdr(a, &ia) != 0 && dladdr(b, &ib) != 0 && ia.dli_fbase == ib.dli_fbase;
}

bool interceptable(const char* name) {
  return name != nullptr && ((name[0] == 'c' && name[1] == 'u') || strncmp(name, "nvml", 4) == 0);
}

// RTLD_NEXT as glibc defines it: the first definition in an object loaded
// after the caller's.
void* next_after(const void* caller, const char* name) {
  Dl_info info{};
  link_map* caller_map = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&caller_map), RTLD_DL_LINKMAP) == 0 ||
      caller_map == nullptr)
    return nullptr;
  for (link_map* l = caller_map->l_next; l != nullptr; l = l->l_next) {
    void* h = dlopen(l->l_name[0] != '\0' ? l->l_name : nullptr, RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) continue;
    void* p = tessera::vgpu::real_dlsym(h, name);
    dlclose(h);
    if (p == nullptr) continue;
    Dl_info pinfo{};
    link_map* owner = nullptr;
    // dlsym on a handle also searches its dependencies; keep only a definition in `l` itself.
    if (dladdr1(p, &pinfo, reinterpret_cast<void**>(&owner), RTLD_DL_LINKMAP) != 0 && owner == l) return p;
  }
  return nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  const void* caller = __builtin_return_address(0);
  bool from_self = is_self(caller);
  void* found;
  if (handle == RTLD_NEXT && !from_self) {
    found = next_after(caller, name);
  } else {
    found = tessera::vgpu::real_dlsym(handle, name);  // for our own RTLD_NEXT, glibc's answer is right
  }
  if (found != nullptr && !from_self && interceptable(name)) {
    void* hook = tessera::vgpu::find_hook(name);
    // A library looking up its own symbols (the driver resolving its own
    // entry points) gets its own: only other callers are redirected.
    if (hook != nullptr && !same_object(caller, found)) return hook;
  }
  return found;
}
