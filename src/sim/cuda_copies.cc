// Copies and memsets: one 3D copy for every memory type (host, device,
// unified, arrays) under all cuMemcpy* entry points, and the cuMemset* family,
// each blocking or in stream order. Host<->device copies take the time the
// configured copy bandwidth gives them on the stream; memsets take none. On a
// capturing stream they become graph nodes instead.
#include <algorithm>
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
      if (!IsLive(array) || array->magic != kArrayMagic) return CUDA_ERROR_INVALID_HANDLE;
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
CUresult InStreamOrder(CUstream h, bool ptds, Sync sync, uint64_t bytes, Work&& work, Node&& node) {
  CUstream s = nullptr;
  int64_t wait_until = 0;
  {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      if (sync == Sync::kBlocking) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      return CaptureNode(s, node());
    }
    if (sync == Sync::kAsync) {
      if (CUresult r = work(); r != CUDA_SUCCESS) return r;
      AdvanceStreamForCopy(s, bytes);
      return CUDA_SUCCESS;
    }
    wait_until = StreamReadyNs(s);
  }
  SleepUntilNs(wait_until);  // device work that precedes it
  {
    LOCKED;
    if (CUresult r = work(); r != CUDA_SUCCESS) return r;
  }
  const uint64_t t = CopyTimeNs(bytes);
  if (t > 0) SleepUntilNs(MonotonicNs() + static_cast<int64_t>(t));
  return CUDA_SUCCESS;
}

CUresult DoCopy(const CUDA_MEMCPY3D& c, uint64_t bytes, CUstream h, bool ptds, Sync sync) {
  return InStreamOrder(
      h, ptds, sync, bytes, [&] { return Copy3D(c); },
      [&] {
        CUgraphNode_st node;
        node.kind = NodeKind::kMemcpy;
        node.memcpy = c;
        return node;
      });
}

// Memsets take no device time (see docs/sim.md): no bytes of copy time.
CUresult DoMemset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height,
                  CUstream h, bool ptds, Sync sync) {
  return InStreamOrder(
      h, ptds, sync, 0, [&] { return Memset(dst, pitch, value, elem, width, height); },
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

// The fields CUDA_MEMCPY2D and CUDA_MEMCPY3D_PEER have in common with CUDA_MEMCPY3D.
template <typename Params>
CUDA_MEMCPY3D PlanarFields(const Params& p) {
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
  return c;
}

CUDA_MEMCPY3D From2D(const CUDA_MEMCPY2D& p) {
  CUDA_MEMCPY3D c = PlanarFields(p);
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
CUDA_MEMCPY3D FromPeer(const CUDA_MEMCPY3D_PEER& p) {
  CUDA_MEMCPY3D c = PlanarFields(p);
  c.srcZ = p.srcZ;
  c.srcLOD = p.srcLOD;
  c.srcHeight = p.srcHeight;
  c.dstZ = p.dstZ;
  c.dstLOD = p.dstLOD;
  c.dstHeight = p.dstHeight;
  c.Depth = p.Depth;
  return c;
}

}  // namespace

}  // namespace tessera::sim::cuda

using namespace tessera::sim;
using namespace tessera::sim::cuda;

extern "C" {

#define COPY_SYNC(c, n) \
  return Guard([&]() -> CUresult { return DoCopy(c, n, nullptr, false, Sync::kBlocking); })
#define COPY_SYNC_PTDS(c, n) \
  return Guard([&]() -> CUresult { return DoCopy(c, n, nullptr, true, Sync::kBlocking); })
#define COPY_ASYNC(c, n, s) return Guard([&]() -> CUresult { return DoCopy(c, n, s, false, Sync::kAsync); })
#define COPY_ASYNC_PTSZ(c, n, s) \
  return Guard([&]() -> CUresult { return DoCopy(c, n, s, true, Sync::kAsync); })

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  COPY_SYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  COPY_SYNC(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  COPY_SYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  COPY_ASYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n, s);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n, s);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0, s);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0, s);
}
// Unified addressing: every pointer is host-addressable in the simulator.
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  COPY_SYNC(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n, s);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n, s);
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n) {
  (void)dc;
  (void)sc;
  COPY_SYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n) {
  (void)dc;
  (void)sc;
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
                           CUstream s) {
  (void)dc;
  (void)sc;
  COPY_ASYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
                                CUstream s) {
  (void)dc;
  (void)sc;
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_SYNC(From2D(*p), p->WidthInBytes * p->Height);
}
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_SYNC_PTDS(From2D(*p), p->WidthInBytes * p->Height);
}
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) {
  return cuMemcpy2D_v2(p);
}
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) {
  return cuMemcpy2D_v2_ptds(p);
}
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_ASYNC(From2D(*p), p->WidthInBytes * p->Height, s);
}
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_ASYNC_PTSZ(From2D(*p), p->WidthInBytes * p->Height, s);
}
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_SYNC(*p, p->WidthInBytes * p->Height * std::max<size_t>(p->Depth, 1));
}
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_SYNC_PTDS(*p, p->WidthInBytes * p->Height * std::max<size_t>(p->Depth, 1));
}
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_ASYNC(*p, p->WidthInBytes * p->Height * std::max<size_t>(p->Depth, 1), s);
}
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_ASYNC_PTSZ(*p, p->WidthInBytes * p->Height * std::max<size_t>(p->Depth, 1), s);
}
CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void* src, size_t n) {
  COPY_SYNC(ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n),
            n);
}
CUresult cuMemcpyHtoA_v2_ptds(CUarray dst, size_t off, const void* src, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n), n);
}
CUresult cuMemcpyAtoH_v2(void* dst, CUarray src, size_t off, size_t n) {
  COPY_SYNC(ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
            n);
}
CUresult cuMemcpyAtoH_v2_ptds(void* dst, CUarray src, size_t off, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n), n);
}
CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  COPY_SYNC(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_DEVICE, nullptr, src, nullptr, 0, n),
      0);
}
CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_DEVICE, nullptr, src, nullptr, 0, n),
      0);
}
CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  COPY_SYNC(
      ArrayCopy(CU_MEMORYTYPE_DEVICE, nullptr, dst, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
      0);
}
CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_DEVICE, nullptr, dst, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
      0);
}
CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  COPY_SYNC(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, doff, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, soff, n),
      0);
}
CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, doff, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, soff, n),
      0);
}
CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void* src, size_t n, CUstream s) {
  COPY_ASYNC(ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n),
             n, s);
}
CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t off, const void* src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n), n, s);
}
CUresult cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  COPY_ASYNC(ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
             n, s);
}
CUresult cuMemcpyAtoHAsync_v2_ptsz(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(
      ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n), n, s);
}

#define MEMSET(dst, pitch, v, e, w, h, s, ptds, sync) \
  return Guard([&]() -> CUresult { return DoMemset(dst, pitch, v, e, w, h, s, ptds, sync); })

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  MEMSET(d, 0, v, 1, n, 1, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) {
  MEMSET(d, 0, v, 1, n, 1, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  MEMSET(d, 0, v, 2, n, 1, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) {
  MEMSET(d, 0, v, 2, n, 1, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
  MEMSET(d, 0, v, 4, n, 1, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) {
  MEMSET(d, 0, v, 4, n, 1, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) {
  MEMSET(d, p, v, 1, w, h, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) {
  MEMSET(d, p, v, 1, w, h, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) {
  MEMSET(d, p, v, 2, w, h, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) {
  MEMSET(d, p, v, 2, w, h, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) {
  MEMSET(d, p, v, 4, w, h, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) {
  MEMSET(d, p, v, 4, w, h, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 1, n, 1, s, false, Sync::kAsync);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 1, n, 1, s, true, Sync::kAsync);
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 2, n, 1, s, false, Sync::kAsync);
}
CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 2, n, 1, s, true, Sync::kAsync);
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 4, n, 1, s, false, Sync::kAsync);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 4, n, 1, s, true, Sync::kAsync);
}
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 1, w, h, s, false, Sync::kAsync);
}
CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 1, w, h, s, true, Sync::kAsync);
}
CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 2, w, h, s, false, Sync::kAsync);
}
CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 2, w, h, s, true, Sync::kAsync);
}
CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 4, w, h, s, false, Sync::kAsync);
}
CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 4, w, h, s, true, Sync::kAsync);
}

CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3D_v2(&c);
}
CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3D_v2_ptds(&c);
}
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3DAsync_v2(&c, s);
}
CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3DAsync_v2_ptsz(&c, s);
}

}  // extern "C"
