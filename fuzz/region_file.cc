// Fuzz target: a container's region file, whole, as the processes that open
// it find it. The file is writable from inside the container, so its bytes
// are outside input for libvgpu in every other process of the container
// (vgpu::SharedRegion::open_file and the accounting after it) and for the
// node agent and `tessera ps` (host::ReadRegion, host::RecordHostPids).
//
// Each input is written to a file and opened by both readers. When libvgpu
// accepts the file, the lock word is made a fresh mutex before the accounting
// runs: a garbage lock can only hang the processes of the container that
// wrote it (docs/fuzzing.md), and a fuzzer that hangs learns nothing else.
//
// Properties: every refusal has a reason; an accepted file is a region of
// the exact size; after accounting, the limit of the device libvgpu added
// holds for this process (reserve refuses what does not fit unless forced).
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_support.h"
#include "host/region_reader.h"
#include "vgpu/region.h"

using namespace tessera;

namespace {

std::string g_dir;  // the folder of the file each input is written to; removed at exit

std::string RegionPath() {
  if (g_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    g_dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessera-fuzz-region-XXXXXX";
    if (mkdtemp(g_dir.data()) == nullptr) tessera::fuzz::Fail(__FILE__, __LINE__, "mkdtemp", g_dir);
    std::atexit([] {
      ::unlink((g_dir + "/vgpu.region").c_str());
      ::rmdir(g_dir.c_str());
    });
  }
  return g_dir + "/vgpu.region";
}

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  ::unlink(path.c_str());  // a fresh inode: no mapping of the last run sees it
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FUZZ_CHECK(fd >= 0, path);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    FUZZ_CHECK(n > 0, path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

void Account(vgpu::SharedRegion& region) {
  auto* lock = reinterpret_cast<pthread_mutex_t*>(region.raw()->header.lock);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(lock, &attr);
  pthread_mutexattr_destroy(&attr);

  (void)region.reclaim_dead();
  if (!region.claim_slot()) return;
  const char* uuid = "GPU-1a2b3c4d-0000-1111-2222-333344445555";
  uint64_t limit = 0;
  const int device = region.find_or_add_device(uuid, uint64_t{1} << 30, &limit);
  if (device < 0) return;
  FUZZ_CHECK(device < static_cast<int>(vgpu::kRegionMaxDevices), std::to_string(device));
  FUZZ_CHECK(region.memory_limit(device) == limit, std::to_string(limit));
  const uint64_t before = region.process_memory_used(device);
  for (const uint64_t bytes : {uint64_t{4096}, UINT64_MAX / 2}) {
    const vgpu::ReserveOutcome outcome = region.reserve(device, bytes);
    if (!outcome.ok) continue;
    // Granted: within the limit, computed without wrapping around.
    FUZZ_CHECK(
        outcome.limit == 0 || (outcome.used <= outcome.limit && bytes <= outcome.limit - outcome.used),
        std::to_string(outcome.used) + " + " + std::to_string(bytes) + " > " + std::to_string(outcome.limit));
    region.release(device, bytes);
  }
  FUZZ_CHECK(region.process_memory_used(device) == before,
             std::to_string(before) + " -> " + std::to_string(region.process_memory_used(device)));
  (void)region.memory_used(device);
  (void)region.slot_for_driver_pid(region.own_driver_pid());
  for (uint32_t i = 0; i < vgpu::kRegionMaxProcesses; i += 97) (void)region.slot_driver_pid(i);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = RegionPath();
  WriteFile(path, data, size);

  auto snapshot = host::ReadRegion(path);
  if (snapshot.ok()) {
    FUZZ_CHECK(size == sizeof(vgpu::Region), std::to_string(size));
    FUZZ_CHECK(snapshot->devices.size() <= vgpu::kRegionMaxDevices, std::to_string(snapshot->devices.size()));
  } else {
    FUZZ_CHECK(!snapshot.error().message.empty(), "");
  }
  auto recorded = host::RecordHostPids(path, {{1, 1001}, {0, 1000}});
  if (!recorded.ok()) FUZZ_CHECK(!recorded.error().message.empty(), "");

  char error[256] = {};
  vgpu::SharedRegion region;
  if (!region.open_file(path.c_str(), error, sizeof(error), /*create=*/false)) {
    FUZZ_CHECK(error[0] != '\0', "refused without a reason");
    return 0;
  }
  FUZZ_CHECK(size == sizeof(vgpu::Region), std::to_string(size));
  Account(region);
  return 0;
}
