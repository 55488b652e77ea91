// Copies and memsets: one 3D copy for every memory type (host, device,
// unified, arrays) under all cuMemcpy* entry points, and the cuMemset* family,
// each blocking or in stream order. Host<->device copies take the time the
// configured copy bandwidth gives them on the stream; memsets take none. On a
// capturing stream they become graph nodes instead.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

uint64_t CopyTimeNs(uint64_t bytes) {
  const uint64_t bw = R().state->file()->copy_bandwidth_bytes_per_s;
  return bw == 0 ? 0 : static_cast<uint64_t>(static_cast<double>(bytes) * 1e9 / bw);
}

void AdvanceStreamForCopy(CUstream s, uint64_t bytes) {
  s->last_end_ns = std::max(StreamReadyNs(s), MonotonicNs()) + static_cast<int64_t>(CopyTimeNs(bytes));
}

namespace {

// Resolves one side of a copy to a host-addressable pointer at (x, y, z).
CUresult CopyEndpoint(CUmemorytype type, const void* host, CUdeviceptr dev, CUarray array, size_t x, size_t y,
                      size_t z, size_t pitch, size_t height, size_t width, size_t rows, size_t depth,
                      uint8_t** base, size_t* row_pitch, size_t* slice_pitch) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      if (host == nullptr) return CUDA_ERROR_INVALID_VALUE;
      *row_pitch = pitch ? pitch : width;
      *slice_pitch = *row_pitch * (height ? height : rows);
      *base = static_cast<uint8_t*>(const_cast<void*>(host)) + z * *slice_pitch + y * *row_pitch + x;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: {
      *row_pitch = pitch ? pitch : width;
      *slice_pitch = *row_pitch * (height ? height : rows);
      const uint64_t start = dev + z * *slice_pitch + y * *row_pitch + x;
      const uint64_t span = (depth - 1) * *slice_pitch + (rows - 1) * *row_pitch + width;
      if (type == CU_MEMORYTYPE_DEVICE && FindAllocation(start, span) == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      *base = reinterpret_cast<uint8_t*>(start);
      return CUDA_SUCCESS;
    }
    case CU_MEMORYTYPE_ARRAY: {
      if (!Valid(array)) return CUDA_ERROR_INVALID_HANDLE;
      *row_pitch = array->row_bytes;
      *slice_pitch = array->row_bytes * array->height;
      const size_t depth_total = std::max<size_t>(array->desc.Depth, 1);
      if (x + width > array->row_bytes || y + rows > array->height || z + depth > depth_total) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      *base = reinterpret_cast<uint8_t*>(array->storage) + z * *slice_pitch + y * *row_pitch + x;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

CUresult Copy3D(const CUDA_MEMCPY3D& c) {
  const size_t width = c.WidthInBytes, rows = std::max<size_t>(c.Height, 1),
               depth = std::max<size_t>(c.Depth, 1);
  if (width == 0) return CUDA_SUCCESS;
  uint8_t *src, *dst;
  size_t sp, ss, dp, ds;
  if (CUresult r = CopyEndpoint(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcArray, c.srcXInBytes, c.srcY,
                                c.srcZ, c.srcPitch, c.srcHeight, width, rows, depth, &src, &sp, &ss);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = CopyEndpoint(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstArray, c.dstXInBytes, c.dstY,
                                c.dstZ, c.dstPitch, c.dstHeight, width, rows, depth, &dst, &dp, &ds);
      r != CUDA_SUCCESS) {
    return r;
  }
  for (size_t z = 0; z < depth; ++z) {
    for (size_t y = 0; y < rows; ++y) {
      std::memmove(dst + z * ds + y * dp, src + z * ss + y * sp, width);
    }
  }
  return CUDA_SUCCESS;
}

CUresult Memset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  const size_t row_bytes = width * elem;
  if (pitch == 0) pitch = row_bytes;
  if (FindAllocation(dst, (height - 1) * pitch + row_bytes) == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t y = 0; y < height; ++y) {
    uint8_t* row = reinterpret_cast<uint8_t*>(dst + y * pitch);
    if (elem == 1) {
      std::memset(row, static_cast<int>(value & 0xFF), width);
    } else if (elem == 2) {
      const uint16_t v = static_cast<uint16_t>(value);
      for (size_t i = 0; i < width; ++i) std::memcpy(row + i * 2, &v, 2);
    } else {
      const uint32_t v = value;
      for (size_t i = 0; i < width; ++i) std::memcpy(row + i * 4, &v, 4);
    }
  }
  return CUDA_SUCCESS;
}

namespace {

enum class Sync { kBlocking, kAsync };

// Performs `work`, a copy or memset moving `bytes` between host and device,
// with the ordering of stream `h`: blocking, after the stream's earlier work
// (the legacy stream's implicit order included) and then for the copy time;
// async, queued after the stream's work without the caller waiting. A
// capturing stream records node() instead.
template <typename Work, typename Node>
CUresult InStreamOrder(CUstream h, Sync sync, uint64_t bytes, Work&& work, Node&& node) {
  bool done = false;  // queued (async) or captured: nothing to wait for
  const CUresult ordered = WaitFor([&](int64_t* wait_until) {
    return OnStream(h, [&](CUstream s) {
      if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        done = true;
        if (sync == Sync::kBlocking) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        return CaptureNode(s, node());
      }
      if (sync == Sync::kBlocking) {
        *wait_until = StreamReadyNs(s);  // device work that precedes it
        return CUDA_SUCCESS;
      }
      done = true;
      if (CUresult r = work(); r != CUDA_SUCCESS) return r;
      AdvanceStreamForCopy(s, bytes);
      return CUDA_SUCCESS;
    });
  });
  if (ordered != CUDA_SUCCESS || done) return ordered;
  if (CUresult r = Entry(work); r != CUDA_SUCCESS) return r;
  const uint64_t t = CopyTimeNs(bytes);
  if (t > 0) SleepUntilNs(MonotonicNs() + static_cast<int64_t>(t));
  return CUDA_SUCCESS;
}

// A copy of `bytes` between host and device (0: device to device), blocking
// after the NULL stream's work, or queued on `h`.
CUresult DoCopy(const CUDA_MEMCPY3D& c, uint64_t bytes, CUstream h, Sync sync) {
  return InStreamOrder(
      h, sync, bytes, [&] { return Copy3D(c); },
      [&] {
        CUgraphNode_st node;
        node.kind = NodeKind::kMemcpy;
        node.memcpy = c;
        return node;
      });
}

// Memsets take no device time (see docs/sim.md): no bytes of copy time.
CUresult DoMemset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height,
                  CUstream h, Sync sync) {
  return InStreamOrder(
      h, sync, 0, [&] { return Memset(dst, pitch, value, elem, width, height); },
      [&] {
        CUgraphNode_st node;
        node.kind = NodeKind::kMemset;
        node.memset.dst = dst;
        node.memset.pitch = pitch;
        node.memset.value = value;
        node.memset.elementSize = elem;
        node.memset.width = width;
        node.memset.height = height;
        return node;
      });
}

CUDA_MEMCPY3D Linear(CUmemorytype dt, void* dh, CUdeviceptr dd, CUmemorytype st, const void* sh,
                     CUdeviceptr sd, size_t n) {
  CUDA_MEMCPY3D c{};
  c.dstMemoryType = dt;
  c.dstHost = dh;
  c.dstDevice = dd;
  c.srcMemoryType = st;
  c.srcHost = sh;
  c.srcDevice = sd;
  c.WidthInBytes = n;
  c.Height = 1;
  c.Depth = 1;
  return c;
}

CUDA_MEMCPY3D From2D(const CUDA_MEMCPY2D& p) {
  CUDA_MEMCPY3D c{};
  c.srcXInBytes = p.srcXInBytes;
  c.srcY = p.srcY;
  c.srcMemoryType = p.srcMemoryType;
  c.srcHost = p.srcHost;
  c.srcDevice = p.srcDevice;
  c.srcArray = p.srcArray;
  c.srcPitch = p.srcPitch;
  c.dstXInBytes = p.dstXInBytes;
  c.dstY = p.dstY;
  c.dstMemoryType = p.dstMemoryType;
  c.dstHost = p.dstHost;
  c.dstDevice = p.dstDevice;
  c.dstArray = p.dstArray;
  c.dstPitch = p.dstPitch;
  c.WidthInBytes = p.WidthInBytes;
  c.Height = p.Height;
  c.Depth = 1;
  return c;
}

CUDA_MEMCPY3D ArrayCopy(CUmemorytype dt, void* dh, CUdeviceptr dd, CUarray da, size_t doff, CUmemorytype st,
                        const void* sh, CUdeviceptr sd, CUarray sa, size_t soff, size_t n) {
  CUDA_MEMCPY3D c = Linear(dt, dh, dd, st, sh, sd, n);
  c.dstArray = da;
  c.dstXInBytes = da ? doff : 0;
  c.srcArray = sa;
  c.srcXInBytes = sa ? soff : 0;
  return c;
}

// Peer copies: all memory is host-addressable here, so a peer copy is a copy.
// CUDA_MEMCPY3D_PEER is CUDA_MEMCPY3D with the two contexts where the latter
// has its reserved fields.
static_assert(sizeof(CUDA_MEMCPY3D_PEER) == sizeof(CUDA_MEMCPY3D) &&
              offsetof(CUDA_MEMCPY3D_PEER, srcContext) == offsetof(CUDA_MEMCPY3D, reserved0) &&
              offsetof(CUDA_MEMCPY3D_PEER, dstContext) == offsetof(CUDA_MEMCPY3D, reserved1) &&
              offsetof(CUDA_MEMCPY3D_PEER, Depth) == offsetof(CUDA_MEMCPY3D, Depth));
CUDA_MEMCPY3D FromPeer(const CUDA_MEMCPY3D_PEER& p) {
  CUDA_MEMCPY3D c;
  std::memcpy(&c, &p, sizeof(c));
  c.reserved0 = nullptr;
  c.reserved1 = nullptr;
  return c;
}

CUresult Blocking(const CUDA_MEMCPY3D& c, uint64_t bytes) {
  return DoCopy(c, bytes, nullptr, Sync::kBlocking);
}
CUresult Async(const CUDA_MEMCPY3D& c, uint64_t bytes, CUstream s) {
  return DoCopy(c, bytes, s, Sync::kAsync);
}

// Copy time: host<->device bytes; a copy within the device takes none.
uint64_t Bytes3D(const CUDA_MEMCPY3D& c) {
  return c.WidthInBytes * c.Height * std::max<size_t>(c.Depth, 1);
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return Blocking(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyHtoD_v2(dst, src, n); });
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return Blocking(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyDtoH_v2(dst, src, n); });
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Blocking(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyDtoD_v2(dst, src, n); });
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return Async(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n, s);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return cuMemcpyHtoDAsync_v2(dst, src, n, PerThread(s));
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return Async(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return cuMemcpyDtoHAsync_v2(dst, src, n, PerThread(s));
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return Async(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0, s);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return cuMemcpyDtoDAsync_v2(dst, src, n, PerThread(s));
}
// Unified addressing: every pointer is host-addressable in the simulator.
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Blocking(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpy(dst, src, n); });
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return Async(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n, s);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return cuMemcpyAsync(dst, src, n, PerThread(s));
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  return Blocking(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyPeer(dst, dc, src, sc, n); });
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n, CUstream s) {
  return Async(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
                                CUstream s) {
  return cuMemcpyPeerAsync(dst, dc, src, sc, n, PerThread(s));
}
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Blocking(From2D(*p), p->WidthInBytes * p->Height);
}
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) {
  return WithPerThreadDefaultStream([&] { return cuMemcpy2D_v2(p); });
}
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) {
  return cuMemcpy2D_v2(p);
}
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) {
  return cuMemcpy2D_v2_ptds(p);
}
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Async(From2D(*p), p->WidthInBytes * p->Height, s);
}
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream s) {
  return cuMemcpy2DAsync_v2(p, PerThread(s));
}
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Blocking(*p, Bytes3D(*p));
}
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* p) {
  return WithPerThreadDefaultStream([&] { return cuMemcpy3D_v2(p); });
}
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Async(*p, Bytes3D(*p), s);
}
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* p, CUstream s) {
  return cuMemcpy3DAsync_v2(p, PerThread(s));
}
CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3D_v2(&c);
}
CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* p) {
  return WithPerThreadDefaultStream([&] { return cuMemcpy3DPeer(p); });
}
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3DAsync_v2(&c, s);
}
CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  return cuMemcpy3DPeerAsync(p, PerThread(s));
}
CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void* src, size_t n) {
  return Blocking(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n), n);
}
CUresult cuMemcpyHtoA_v2_ptds(CUarray dst, size_t off, const void* src, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyHtoA_v2(dst, off, src, n); });
}
CUresult cuMemcpyAtoH_v2(void* dst, CUarray src, size_t off, size_t n) {
  return Blocking(
      ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n), n);
}
CUresult cuMemcpyAtoH_v2_ptds(void* dst, CUarray src, size_t off, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyAtoH_v2(dst, src, off, n); });
}
CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  return Blocking(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_DEVICE, nullptr, src, nullptr, 0, n),
      0);
}
CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyDtoA_v2(dst, off, src, n); });
}
CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  return Blocking(
      ArrayCopy(CU_MEMORYTYPE_DEVICE, nullptr, dst, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
      0);
}
CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyAtoD_v2(dst, src, off, n); });
}
CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  return Blocking(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, doff, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, soff, n),
      0);
}
CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  return WithPerThreadDefaultStream([&] { return cuMemcpyAtoA_v2(dst, doff, src, soff, n); });
}
CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void* src, size_t n, CUstream s) {
  return Async(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n), n, s);
}
CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t off, const void* src, size_t n, CUstream s) {
  return cuMemcpyHtoAAsync_v2(dst, off, src, n, PerThread(s));
}
CUresult cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  return Async(
      ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n), n, s);
}
CUresult cuMemcpyAtoHAsync_v2_ptsz(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  return cuMemcpyAtoHAsync_v2(dst, src, off, n, PerThread(s));
}

// The memset entry points of one element size (8, 16 or 32 bits): cuMemsetD<bits>_v2,
// cuMemsetD2D<bits>_v2, cuMemsetD<bits>Async, cuMemsetD2D<bits>Async, and the
// per-thread default stream twin (_ptds / _ptsz) of each.
#define MEMSET_ENTRY_POINTS(bits, T)                                                                     \
  CUresult cuMemsetD2D##bits##_v2(CUdeviceptr d, size_t p, T v, size_t w, size_t h) {                    \
    return DoMemset(d, p, v, sizeof(T), w, h, nullptr, Sync::kBlocking);                                 \
  }                                                                                                      \
  CUresult cuMemsetD2D##bits##_v2_ptds(CUdeviceptr d, size_t p, T v, size_t w, size_t h) {               \
    return WithPerThreadDefaultStream([&] { return cuMemsetD2D##bits##_v2(d, p, v, w, h); });            \
  }                                                                                                      \
  CUresult cuMemsetD##bits##_v2(CUdeviceptr d, T v, size_t n) {                                          \
    return cuMemsetD2D##bits##_v2(d, 0, v, n, 1);                                                        \
  }                                                                                                      \
  CUresult cuMemsetD##bits##_v2_ptds(CUdeviceptr d, T v, size_t n) {                                     \
    return cuMemsetD2D##bits##_v2_ptds(d, 0, v, n, 1);                                                   \
  }                                                                                                      \
  CUresult cuMemsetD2D##bits##Async(CUdeviceptr d, size_t p, T v, size_t w, size_t h, CUstream s) {      \
    return DoMemset(d, p, v, sizeof(T), w, h, s, Sync::kAsync);                                          \
  }                                                                                                      \
  CUresult cuMemsetD2D##bits##Async_ptsz(CUdeviceptr d, size_t p, T v, size_t w, size_t h, CUstream s) { \
    return cuMemsetD2D##bits##Async(d, p, v, w, h, PerThread(s));                                        \
  }                                                                                                      \
  CUresult cuMemsetD##bits##Async(CUdeviceptr d, T v, size_t n, CUstream s) {                            \
    return cuMemsetD2D##bits##Async(d, 0, v, n, 1, s);                                                   \
  }                                                                                                      \
  CUresult cuMemsetD##bits##Async_ptsz(CUdeviceptr d, T v, size_t n, CUstream s) {                       \
    return cuMemsetD2D##bits##Async(d, 0, v, n, 1, PerThread(s));                                        \
  }

MEMSET_ENTRY_POINTS(8, unsigned char)
MEMSET_ENTRY_POINTS(16, unsigned short)
MEMSET_ENTRY_POINTS(32, unsigned int)

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
