// CUDA arrays and mipmapped arrays: device allocations laid out as rows of
// elements (width x channels x format size), which copies address by
// (x in bytes, y, z). A mipmapped array is one allocation holding all levels.
#include <algorithm>
#include <cstring>
#include <memory>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {
namespace {

size_t FormatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 4;
  }
}

// Fills the geometry of an array (or mip level) from its descriptor.
CUresult Geometry(CUarray_st* a, const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (d.Width == 0 || (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  a->desc = d;
  a->elem_bytes = FormatBytes(d.Format) * d.NumChannels;
  a->row_bytes = d.Width * a->elem_bytes;
  a->height = std::max<size_t>(d.Height, 1);
  return CUDA_SUCCESS;
}

size_t ArrayBytes(const CUarray_st& a) {
  return a.row_bytes * a.height * std::max<size_t>(a.desc.Depth, 1);
}

CUresult CreateArray(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext ctx) {
    auto a = std::make_unique<CUarray_st>();
    if (CUresult r = Geometry(a.get(), d); r != CUDA_SUCCESS) return r;
    if (CUresult r = AllocDevice(ctx->gpu, ArrayBytes(*a), AllocKind::kArray, ctx, &a->storage, 512);
        r != CUDA_SUCCESS) {
      return r;
    }
    R().live.insert(a.get());
    *out = a.release();
    return CUDA_SUCCESS;
  });
}

// What an array or mipmapped array costs on the device: what the simulator
// charged for its storage (`otherwise` if that is not an allocation).
CUresult MemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUdeviceptr storage, uint64_t otherwise) {
  std::memset(req, 0, sizeof(*req));
  const Allocation* alloc = FindAllocation(storage);
  req->size = alloc != nullptr ? alloc->charged : otherwise;
  req->alignment = 512;
  return CUDA_SUCCESS;
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = p->Width;
  d.Height = p->Height;
  d.Depth = 0;
  d.Format = p->Format;
  d.NumChannels = p->NumChannels;
  return CreateArray(pHandle, d);
}

CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(pHandle, *p);
}

CUresult cuArrayDestroy(CUarray a) {
  return OnHandle(a, [&] {
    if (!a->owned) return CUDA_ERROR_INVALID_HANDLE;  // a mipmap level
    FreeDevice(a->storage);
    DestroyHandle(a);
    return CUDA_SUCCESS;
  });
}

CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* d, CUarray a) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(a, [&] {
    d->Width = a->desc.Width;
    d->Height = a->desc.Height;
    d->Format = a->desc.Format;
    d->NumChannels = a->desc.NumChannels;
    return CUDA_SUCCESS;
  });
}

CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* d, CUarray a) {
  return GetFrom(a, d, [&] { return a->desc; });
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                unsigned int numMipmapLevels) {
  if (pHandle == nullptr || desc == nullptr || numMipmapLevels == 0) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext ctx) -> CUresult {
    auto m = std::make_unique<CUmipmappedArray_st>();
    m->desc = *desc;
    CUDA_ARRAY3D_DESCRIPTOR level = *desc;
    size_t total = 0;
    for (unsigned i = 0; i < numMipmapLevels; ++i) {
      auto a = std::make_unique<CUarray_st>();
      if (CUresult r = Geometry(a.get(), level); r != CUDA_SUCCESS) return r;
      a->owned = false;
      a->storage = total;  // offset for now
      total += (ArrayBytes(*a) + 511) / 512 * 512;
      m->levels.push_back(std::move(a));
      level.Width = std::max<size_t>(level.Width / 2, 1);
      if (level.Height > 0) level.Height = std::max<size_t>(level.Height / 2, 1);
      if (level.Depth > 0) level.Depth = std::max<size_t>(level.Depth / 2, 1);
    }
    if (CUresult r = AllocDevice(ctx->gpu, total, AllocKind::kArray, ctx, &m->storage, 512);
        r != CUDA_SUCCESS) {
      return r;
    }
    for (auto& a : m->levels) {
      a->storage += m->storage;
      R().live.insert(a.get());
    }
    R().live.insert(m.get());
    *pHandle = m.release();
    return CUDA_SUCCESS;
  });
}

CUresult cuMipmappedArrayGetLevel(CUarray* pLevelArray, CUmipmappedArray m, unsigned int level) {
  if (pLevelArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(m, [&] {
    if (level >= m->levels.size()) return CUDA_ERROR_INVALID_VALUE;
    *pLevelArray = m->levels[level].get();
    return CUDA_SUCCESS;
  });
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
  return OnHandle(m, [&] {
    for (auto& a : m->levels) R().live.erase(a.get());
    FreeDevice(m->storage);
    DestroyHandle(m);
    return CUDA_SUCCESS;
  });
}

CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUarray a, CUdevice) {
  if (req == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A mipmap level's storage is part of its mipmapped array's allocation.
  return OnHandle(a, [&] { return MemoryRequirements(req, a->owned ? a->storage : 0, ArrayBytes(*a)); });
}

CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUmipmappedArray m,
                                               CUdevice) {
  if (req == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(m, [&] { return MemoryRequirements(req, m->storage, 0); });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
