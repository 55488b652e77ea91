// Build-time check of cuda_decls.h against cuda.h: cuda.h declares the old ABI
// entry points (cuCtxCreate, cuMemAlloc with 32-bit sizes, the _ptsz
// variants, ...) only for the driver's own implementation, under
// __CUDA_API_VERSION_INTERNAL. Compiling libvgpu's declarations after those
// makes any difference in a signature a "conflicting declaration" error.
// Nothing here is linked into anything that runs.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstddef>

#include "vgpu/cuda_decls.h"
