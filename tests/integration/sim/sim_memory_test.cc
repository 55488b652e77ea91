// The other allocation paths of the simulated driver, each charged against the
// device's capacity: arrays (1D/2D/3D, mipmapped), VMM (cuMemCreate/Map/
// SetAccess), stream-ordered allocation and pools, and IPC handles that map
// the same bytes in another process.
#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sim_test_util.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;

uint64_t Used() {
  size_t free_b = 0, total_b = 0;
  SIM_OK(cuMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

void Arrays() {
  const uint64_t base = Used();
  CUarray a2 = simtest::NewArray(256, 128, CU_AD_FORMAT_FLOAT, 4);
  SIM_CHECK(Used() >= base + 256 * 128 * 16);
  CUDA_ARRAY_DESCRIPTOR back{};
  SIM_OK(cuArrayGetDescriptor(&back, a2));
  SIM_CHECK(back.Width == 256 && back.Height == 128 && back.NumChannels == 4);

  // Host -> 2D array -> host through cuMemcpy2D.
  std::vector<float> src(256 * 128 * 4), dst(src.size(), 0.f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  const CUDA_MEMCPY2D c =
      simtest::Copy2D(simtest::HostRows(src.data(), 256 * 16), simtest::ArrayRows(a2), 256 * 16, 128);
  SIM_OK(cuMemcpy2D(&c));
  const CUDA_MEMCPY2D r =
      simtest::Copy2D(simtest::ArrayRows(a2), simtest::HostRows(dst.data(), 256 * 16), 256 * 16, 128);
  SIM_OK(cuMemcpy2D(&r));
  SIM_CHECK(src == dst);
  SIM_OK(cuArrayDestroy(a2));

  // 1D array with HtoA/AtoH, 3D array, mipmapped array.
  CUarray a1 = simtest::NewArray(1024, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  char msg[16] = "simulated bytes", got[16] = {};
  SIM_OK(cuMemcpyHtoA(a1, 100, msg, sizeof(msg)));
  SIM_OK(cuMemcpyAtoH(got, a1, 100, sizeof(got)));
  SIM_CHECK(std::strcmp(got, msg) == 0);
  SIM_OK(cuArrayDestroy(a1));

  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 64;
  d3.Height = 64;
  d3.Depth = 64;
  d3.Format = CU_AD_FORMAT_HALF;
  d3.NumChannels = 2;
  CUarray a3;
  SIM_OK(cuArray3DCreate(&a3, &d3));
  SIM_CHECK(Used() >= base + 64 * 64 * 64 * 4);
  CUdevice dev0;
  SIM_OK(cuDeviceGet(&dev0, 0));
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  SIM_OK(cuArrayGetMemoryRequirements(&req, a3, dev0));
  SIM_CHECK_EQ(req.size, Used() - base);  // what the array is charged
  CUDA_ARRAY3D_DESCRIPTOR d3b{};
  SIM_OK(cuArray3DGetDescriptor(&d3b, a3));
  SIM_CHECK_EQ(d3b.Depth, 64u);
  SIM_OK(cuArrayDestroy(a3));

  CUmipmappedArray mm;
  SIM_OK(cuMipmappedArrayCreate(&mm, &d3, 4));
  CUarray level3;
  SIM_OK(cuMipmappedArrayGetLevel(&level3, mm, 3));
  CUDA_ARRAY3D_DESCRIPTOR l3{};
  SIM_OK(cuArray3DGetDescriptor(&l3, level3));
  SIM_CHECK(l3.Width == 8 && l3.Height == 8 && l3.Depth == 8);
  SIM_OK(cuMipmappedArrayDestroy(mm));
  SIM_CHECK_EQ(Used(), base);
}

void VirtualMemory() {
  const uint64_t base = Used();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  SIM_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  SIM_CHECK_EQ(gran, 2 * kMiB);
  CUmemGenericAllocationHandle h;
  SIM_CHECK_EQ(cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_OK(cuMemCreate(&h, 4 * gran, &prop, 0));
  SIM_CHECK_EQ(Used(), base + 4 * gran);  // physical memory is charged at creation

  CUdeviceptr va;
  SIM_OK(cuMemAddressReserve(&va, 8 * gran, 0, 0, 0));
  SIM_OK(cuMemMap(va, 4 * gran, 0, h, 0));
  SIM_OK(cuMemMap(va + 4 * gran, 4 * gran, 0, h, 0));  // the same memory twice
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SIM_OK(cuMemSetAccess(va, 8 * gran, &access, 1));
  unsigned long long flags = 0;
  SIM_OK(cuMemGetAccess(&flags, &prop.location, va));
  SIM_CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  const char text[] = "mapped twice";
  SIM_OK(cuMemcpyHtoD(va + 123, text, sizeof(text)));
  char out[sizeof(text)] = {};
  SIM_OK(cuMemcpyDtoH(out, va + 4 * gran + 123, sizeof(out)));
  SIM_CHECK(std::strcmp(out, text) == 0);
  CUmemGenericAllocationHandle again;
  SIM_OK(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + 5)));
  SIM_CHECK(again == h);

  // Released while mapped: memory returns only when the last mapping goes.
  SIM_OK(cuMemRelease(h));
  SIM_CHECK_EQ(Used(), base + 4 * gran);
  SIM_OK(cuMemUnmap(va, 4 * gran));
  SIM_CHECK_EQ(Used(), base + 4 * gran);
  SIM_OK(cuMemUnmap(va + 4 * gran, 4 * gran));
  SIM_CHECK_EQ(Used(), base);
  SIM_OK(cuMemAddressFree(va, 8 * gran));
}

void Pools() {
  const uint64_t base = Used();
  CUstream s;
  SIM_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p;
  SIM_OK(cuMemAllocAsync(&p, 64 * kMiB, s));
  SIM_OK(cuMemsetD8Async(p, 3, 64 * kMiB, s));
  SIM_CHECK_EQ(Used(), base + 64 * kMiB);
  SIM_OK(cuMemFreeAsync(p, s));
  // The default pool trims to its release threshold (0) at synchronisation.
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(Used(), base);

  // A pool of our own with a high release threshold keeps freed memory
  // reserved, reuses it, and gives it back when trimmed.
  CUdevice dev;
  SIM_OK(cuDeviceGet(&dev, 0));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool pool;
  SIM_OK(cuMemPoolCreate(&pool, &props));
  cuuint64_t threshold = ~0ull;
  SIM_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CUdeviceptr q;
  SIM_OK(cuMemAllocFromPoolAsync(&q, 32 * kMiB, pool, s));
  SIM_OK(cuMemFreeAsync(q, s));
  SIM_OK(cuStreamSynchronize(s));
  cuuint64_t reserved = 0, used = 0;
  SIM_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  SIM_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  SIM_CHECK_EQ(reserved, 32 * kMiB);
  SIM_CHECK_EQ(used, 0u);
  SIM_CHECK_EQ(Used(), base + 32 * kMiB);
  CUdeviceptr q2;
  SIM_OK(cuMemAllocFromPoolAsync(&q2, 30 * kMiB, pool, s));
  SIM_CHECK(q2 == q);  // reused
  SIM_CHECK_EQ(Used(), base + 32 * kMiB);
  SIM_OK(cuMemFreeAsync(q2, s));
  SIM_OK(cuMemPoolTrimTo(pool, 0));
  SIM_CHECK_EQ(Used(), base);
  SIM_OK(cuMemPoolDestroy(pool));

  // Stream memory writes and peer copies.
  CUdeviceptr w;
  SIM_OK(cuMemAlloc(&w, 4096));
  SIM_OK(cuStreamWriteValue32(s, w, 0x1234ABCDu, CU_STREAM_WRITE_VALUE_DEFAULT));
  SIM_OK(cuStreamWriteValue64(s, w + 8, 0x0102030405060708ull, CU_STREAM_WRITE_VALUE_DEFAULT));
  CUDA_MEMCPY3D_PEER peer{};
  peer.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  peer.srcDevice = w;
  peer.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  peer.dstDevice = w + 1024;
  peer.WidthInBytes = 16;
  peer.Height = 1;
  peer.Depth = 1;
  SIM_OK(cuMemcpy3DPeerAsync(&peer, s));
  uint64_t words[2] = {};
  SIM_OK(cuMemcpyDtoHAsync(words, w + 1024, sizeof(words), s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(words[0] & 0xFFFFFFFFu, 0x1234ABCDu);
  SIM_CHECK_EQ(words[1], 0x0102030405060708ull);
  SIM_OK(cuMemFree(w));
  SIM_OK(cuStreamDestroy(s));
}

// Child role: open the IPC handle (hex on stdin), check and rewrite the bytes.
int IpcPeer() {
  SIM_OK(cuInit(0));
  simtest::UseDevice(0);
  char hex[256] = {};
  if (std::fgets(hex, sizeof(hex), stdin) == nullptr) return 2;
  CUipcMemHandle h{};
  for (size_t i = 0; i < sizeof(h.reserved); ++i) {
    unsigned v = 0;
    std::sscanf(hex + 2 * i, "%2x", &v);
    h.reserved[i] = static_cast<char>(v);
  }
  CUdeviceptr p;
  SIM_OK(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  char buf[32] = {};
  SIM_OK(cuMemcpyDtoH(buf, p, sizeof(buf)));
  SIM_CHECK(std::strcmp(buf, "from the exporter") == 0);
  const char reply[] = "from the importer";
  SIM_OK(cuMemcpyHtoD(p + 1024, reply, sizeof(reply)));
  SIM_OK(cuIpcCloseMemHandle(p));
  std::printf("DONE\n");
  return simtest::Failures() == 0 ? 0 : 1;
}

void Ipc() {
  CUdeviceptr p;
  SIM_OK(cuMemAlloc(&p, 8 * kMiB));
  const char msg[] = "from the exporter";
  SIM_OK(cuMemcpyHtoD(p, msg, sizeof(msg)));
  CUipcMemHandle h;
  SIM_OK(cuIpcGetMemHandle(&h, p));
  CUdeviceptr self;
  SIM_CHECK_EQ(cuIpcOpenMemHandle(&self, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
               CUDA_ERROR_INVALID_CONTEXT);  // not in the exporting process
  std::string hex;
  char byte[3];
  for (size_t i = 0; i < sizeof(h.reserved); ++i) {
    std::snprintf(byte, sizeof(byte), "%02x", static_cast<unsigned char>(h.reserved[i]));
    hex += byte;
  }
  const uint64_t used_before = Used();
  simtest::Child peer = simtest::SpawnSelf({"ipc-peer"});
  peer.Send(hex);
  SIM_CHECK(peer.ReadLine() == "DONE");
  SIM_CHECK_EQ(peer.Wait(), 0);
  char reply[32] = {};
  SIM_OK(cuMemcpyDtoH(reply, p + 1024, sizeof(reply)));
  SIM_CHECK(std::strcmp(reply, "from the importer") == 0);
  SIM_CHECK_EQ(Used(), used_before);  // the importer's mapping charged nothing
  SIM_OK(cuMemFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "ipc-peer") return IpcPeer();
  simtest::UseFreshState("1xA30", false);
  SIM_OK(cuInit(0));
  simtest::UseDevice(0);
  Arrays();
  VirtualMemory();
  Pools();
  Ipc();
  return simtest::Finish("sim_memory_test");
}
