// Lookup of libvgpu's hooks by name, shared by the cuGetProcAddress and dlsym
// paths. Private to libvgpu.so.
#pragma once

#include <cstdint>

namespace tessera::vgpu {

// The hook exported under exactly `name` (a CUDA or NVML entry point in
// hook_table.h), or nullptr.
void* find_hook(const char* name);

// The hook to hand out for a cuGetProcAddress(symbol, version, flags) answer
// `found` from the driver: the one whose real entry point the driver returned,
// else the table's choice for (symbol, version, flags); `found` itself when
// libvgpu does not intercept that entry point.
void* substitute_proc_address(const char* symbol, void* found, int cuda_version, uint64_t flags);

}  // namespace tessera::vgpu
