// IPC memory handles: a handle names the exporting process (pid and start
// time) and a range of its device heap's memfd; the importing process maps
// that range through <TESSERA_SIM_PROC>/<pid>/fd/<fd>, so both see the same
// memory. IPC event handles are not supported.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

namespace {

// The payload of a CUipcMemHandle (64 opaque bytes in the real ABI).
struct IpcPayload {
  uint32_t magic;
  int32_t pid;
  uint64_t start_time;
  uint32_t gpu;
  int32_t fd;  // the owner's heap memfd
  uint64_t heap_off;
  uint64_t heap_len;
  uint64_t size;
};
static_assert(sizeof(IpcPayload) <= sizeof(CUipcMemHandle));
constexpr uint32_t kIpcMagic = 0x49504331;  // "IPC1"

}  // namespace

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    Allocation* a = FindAllocation(dptr);
    if (a == nullptr || a->kind != AllocKind::kDevice || a->heap_len == 0) return CUDA_ERROR_INVALID_VALUE;
    IpcPayload p{};
    p.magic = kIpcMagic;
    p.pid = R().pid;
    p.start_time = ProcessStartTime(R().pid);
    p.gpu = static_cast<uint32_t>(a->gpu);
    p.fd = R().heaps[a->gpu].fd();
    p.heap_off = a->heap_off;
    p.heap_len = a->heap_len;
    p.size = a->size;
    std::memset(handle, 0, sizeof(*handle));
    std::memcpy(handle->reserved, &p, sizeof(p));
    return CUDA_SUCCESS;
  });
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int) {
  if (pdptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext ctx) {
    IpcPayload p;
    std::memcpy(&p, handle.reserved, sizeof(p));
    if (p.magic != kIpcMagic) return CUDA_ERROR_INVALID_VALUE;
    if (p.pid == R().pid) return CUDA_ERROR_INVALID_CONTEXT;  // not in the exporting process
    if (!ProcessAlive(p.pid, p.start_time)) return CUDA_ERROR_INVALID_VALUE;
    char path[512];
    std::snprintf(path, sizeof(path), "%s/%d/fd/%d", ProcRoot(), p.pid, p.fd);
    const int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
    void* m = mmap(nullptr, p.heap_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd,
                   static_cast<off_t>(p.heap_off));
    close(fd);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    Allocation a;
    a.base = reinterpret_cast<uint64_t>(m);
    a.size = p.size;
    a.gpu = static_cast<int>(p.gpu);
    a.kind = AllocKind::kIpc;
    a.ctx = ctx;
    a.ipc_map = m;
    a.ipc_map_len = p.heap_len;
    R().allocs[a.base] = a;
    *pdptr = a.base;
    return CUDA_SUCCESS;
  });
}
CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return Entry([&]() -> CUresult {
    auto it = R().allocs.find(dptr);
    if (it == R().allocs.end() || it->second.kind != AllocKind::kIpc) return CUDA_ERROR_INVALID_VALUE;
    munmap(it->second.ipc_map, it->second.ipc_map_len);
    R().allocs.erase(it);
    return CUDA_SUCCESS;
  });
}

CUresult cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  (void)pHandle;
  (void)event;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  (void)phEvent;
  (void)handle;
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
