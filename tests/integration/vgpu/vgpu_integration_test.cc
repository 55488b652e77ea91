// libvgpu.so against the simulated GPU: programs written to the CUDA driver API
// (vgpu_probe) run with the library preloaded, as a container's processes
// would, and the tests assert what those programs and the region observe.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <cuda.h>
#include <nvml.h>

#include "base/testing.h"
#include "testing/process.h"
#include "testing/sim_gpu.h"
#include "vgpu/region.h"

namespace {

using tessera::testing::Env;
constexpr uint64_t kMiB = 1ull << 20;

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

struct ProbeRun {
  int exit_code = -1;
  std::string out;
  std::string err;

  // The fields of the n-th output line that starts with `op` (0-based).
  std::vector<std::string> line(const std::string& op, int n = 0) const {
    std::istringstream in(out);
    std::string l;
    while (std::getline(in, l)) {
      auto w = words(l);
      if (!w.empty() && w[0] == op && n-- == 0) return w;
    }
    return {};
  }
  int rc(const std::string& op, int n = 0) const {
    auto w = line(op, n);
    return w.size() >= 2 ? std::stoi(w[1]) : -999;
  }
  uint64_t value(const std::string& op, size_t field, int n = 0) const {
    auto w = line(op, n);
    if (w.size() <= field || w[field].empty() || w[field][0] == '-') return ~0ull;
    return std::stoull(w[field]);
  }
};

// A probe left running (it ends with "hold").
struct Held {
  pid_t pid = -1;
  int out_fd = -1;
  std::string out;
};

class VgpuTest : public ::testing::Test {
 protected:
  // The sim charges each process's first context 300 MiB, as a real driver
  // charges some; libvgpu measures it (NVML) and counts it.
  void TearDown() override {
    for (Held& h : held_) stop(h);
  }

  // The probe with `ops` as a container's process: on two simulated A100s, the
  // region at region_, `extra` over the environment, libvgpu preloaded when
  // `preload`. With `wrapper`, runs wrapper[0] with the rest of `wrapper`, then
  // the probe's path and `ops`, as arguments.
  tessera::testing::Command probe(const std::vector<std::string>& ops, const Env& extra, bool preload,
                                  const std::vector<std::string>& wrapper = {}) {
    std::vector<std::string> argv = wrapper;
    argv.push_back(TESSERA_VGPU_PROBE);
    argv.insert(argv.end(), ops.begin(), ops.end());
    tessera::testing::Command c =
        tessera::testing::ContainerCommand(sim_, std::move(argv), region_, preload ? TESSERA_VGPU_LIB : "");
    for (const auto& [k, v] : extra) c.env[k] = v;
    return c;
  }

  ProbeRun run(const std::vector<std::string>& ops, const Env& extra = {}, bool preload = true) {
    tessera::testing::Outcome o = tessera::testing::RunToEnd(probe(ops, extra, preload), dir_);
    ProbeRun r;
    r.exit_code = o.exit_code;
    r.out = std::move(o.out);
    r.err = std::move(o.err);
    return r;
  }

  // Starts a probe whose last operation is "hold" (without waiting for it).
  size_t spawn_holding(std::vector<std::string> ops, const Env& extra = {},
                       const std::vector<std::string>& wrapper = {}) {
    ops.push_back("hold");
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    int err_fd = open((dir_ + "/held-err").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    Held h;
    tessera::testing::Command c = probe(ops, extra, true, wrapper);
    c.stdout_fd = p[1];
    c.stderr_fd = err_fd;
    h.pid = tessera::testing::Spawn(c);
    close(p[1]);
    close(err_fd);
    h.out_fd = p[0];
    held_.push_back(h);
    return held_.size() - 1;
  }

  // Reads a held probe's output until it prints `marker` (or exits).
  Held& wait_for(size_t index, const char* marker = "holding") {
    Held& h = held_[index];
    char buf[4096];
    while (h.out.find(marker) == std::string::npos) {
      pollfd pfd{h.out_fd, POLLIN, 0};
      if (poll(&pfd, 1, 100000) <= 0) break;
      ssize_t n = read(h.out_fd, buf, sizeof(buf));
      if (n <= 0) break;
      h.out.append(buf, static_cast<size_t>(n));
    }
    return h;
  }

  Held& start_holding(std::vector<std::string> ops, const Env& extra = {}) {
    return wait_for(spawn_holding(std::move(ops), extra));
  }

  std::string held_err() { return tmp_.Read("held-err"); }

  void kill9(Held& h) {
    if (h.pid <= 0) return;
    kill(h.pid, SIGKILL);
    waitpid(h.pid, nullptr, 0);
    close(h.out_fd);
    h.pid = -1;
  }
  void stop(Held& h) { kill9(h); }

  std::string uuid(int i) {
    if (uuids_.empty()) {
      ProbeRun r = run({"init", "uuid:0", "uuid:1"}, {}, false);
      uuids_.push_back(r.line("uuid", 0).at(2));
      uuids_.push_back(r.line("uuid", 1).at(2));
    }
    return uuids_.at(static_cast<size_t>(i));
  }

  // Container-wide usage and peak of a device, read from the region file as
  // the node agent would (after returning the memory of exited processes).
  std::pair<uint64_t, uint64_t> region_usage(const std::string& device_uuid) {
    tessera::vgpu::SharedRegion r;
    char err[256] = {};
    if (!r.open_file(region_.c_str(), err, sizeof(err))) return {~0ull, ~0ull};
    r.reclaim_dead();  // as the node agent does before reporting
    const auto* raw = r.raw();
    for (uint32_t i = 0; i < raw->header.device_count.load(); ++i) {
      if (device_uuid == raw->devices[i].uuid)
        return {raw->devices[i].memory_used.load(), raw->devices[i].memory_peak.load()};
    }
    return {0, 0};
  }

  // The context-overhead state and bytes the region at `path` records for device entry 0.
  std::pair<uint64_t, uint64_t> context_overhead(const std::string& path) {
    tessera::vgpu::SharedRegion r;
    char err[256] = {};
    if (!r.open_file(path.c_str(), err, sizeof(err), /*create=*/false)) return {~0ull, ~0ull};
    return {r.raw()->devices[0].context_overhead_state.load(),
            r.raw()->devices[0].context_overhead_bytes.load()};
  }

  // The process slot of the region at `path` whose (container) pid is `pid`: its host_pid, or -1.
  int64_t slot_host_pid(const std::string& path, uint32_t pid) {
    tessera::vgpu::SharedRegion r;
    char err[256] = {};
    if (!r.open_file(path.c_str(), err, sizeof(err), /*create=*/false)) return -1;
    for (uint32_t i = 0; i < tessera::vgpu::kRegionMaxProcesses; ++i) {
      const auto& s = r.raw()->processes[i];
      if (s.state.load() == tessera::vgpu::kSlotActive && s.pid == pid)
        return static_cast<int64_t>(s.host_pid.load());
    }
    return -1;
  }

  tessera::testing::TempDir tmp_{"tessera-vgpu-it"};
  const std::string dir_ = tmp_.path();
  const std::string region_ = dir_ + "/region/vgpu.region";
  const tessera::testing::SimGpu sim_{
      .gpus = "2xA100-80GB", .state_dir = dir_ + "/sim", .lib_dir = TESSERA_SIM_LIB_DIR};
  std::vector<std::string> uuids_;
  std::vector<Held> held_;
};

TEST_F(VgpuTest, WithoutTheLibraryTheProgramSeesTheBareSim) {
  ProbeRun r = run({"init", "ctx:0", "alloc:2000", "meminfo", "totalmem:0", "count"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}}, /*preload=*/false);
  EXPECT_EQ(r.rc("alloc"), CUDA_SUCCESS) << r.out << r.err;
  EXPECT_EQ(r.value("meminfo", 3), 80ull * 1024 * kMiB);
  EXPECT_EQ(r.value("totalmem", 2), 80ull * 1024 * kMiB);
  EXPECT_EQ(r.value("count", 2), 2u);
  EXPECT_EQ(r.err.find("[tessera]"), std::string::npos);
}

TEST_F(VgpuTest, LimitHoldsThroughEachInterceptionPath) {
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    // 1000 MiB: 300 MiB context + 600 + 100 fit exactly; 200 more does not.
    ProbeRun r = run({"init", "ctx:0", std::string("path:") + path, "alloc:600", "alloc:200", "alloc:100",
                      "meminfo", "allocb:1", "free", "meminfo"},
                     {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.value("path", 2), 0u) << r.out;
    EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS) << r.out << r.err;
    EXPECT_EQ(r.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY) << r.out;
    EXPECT_EQ(r.rc("alloc", 2), CUDA_SUCCESS) << r.out;
    EXPECT_EQ(r.value("meminfo", 2, 0), 0u) << r.out;  // free: exactly at the limit
    EXPECT_EQ(r.value("meminfo", 3, 0), 1000 * kMiB);  // total: the limit
    EXPECT_EQ(r.rc("allocb"), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(r.value("meminfo", 2, 1), 100 * kMiB) << r.out;  // freed 100 MiB came back
    // One log line for the refusal, naming limit, usage and request.
    EXPECT_NE(r.err.find("limit 1048576000 bytes, used 943718400, requested 209715200"), std::string::npos)
        << r.err;
  }
}

TEST_F(VgpuTest, ProcAddressHonoursVersionAndPerThreadFlag) {
  ProbeRun r =
      run({"init", "procaddr:cuMemAlloc:13000:0", "procaddr:cuLaunchKernel:13000:2",
           "procaddr:cuLaunchKernel:13000:1", "procaddr:cuCtxCreate:13000:0", "procaddr:cuMemcpy:13000:0",
           "procaddr:cuGetProcAddress:13000:0", "dlsym:cuMemAlloc_v2", "dlsym:cuMemcpy",
           "dlsymnext:cuMemFree_v2", "dlsymnext:malloc", "dlsym:nvmlDeviceGetMemoryInfo:libnvidia-ml.so.1"},
          {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.line("procaddr", 0),
            (std::vector<std::string>{"procaddr", "0", "libvgpu.so", "cuMemAlloc_v2"}));
  EXPECT_EQ(r.line("procaddr", 1),
            (std::vector<std::string>{"procaddr", "0", "libvgpu.so", "cuLaunchKernel_ptsz"}));
  EXPECT_EQ(r.line("procaddr", 2),
            (std::vector<std::string>{"procaddr", "0", "libvgpu.so", "cuLaunchKernel"}));
  EXPECT_EQ(r.line("procaddr", 3),
            (std::vector<std::string>{"procaddr", "0", "libvgpu.so", "cuCtxCreate_v4"}));
  // Not intercepted: straight to the driver.
  EXPECT_EQ(r.line("procaddr", 4).at(2), "libcuda.so.1");
  EXPECT_EQ(r.line("procaddr", 5),
            (std::vector<std::string>{"procaddr", "0", "libvgpu.so", "cuGetProcAddress_v2"}));
  EXPECT_EQ(r.line("dlsym", 0), (std::vector<std::string>{"dlsym", "libvgpu.so", "cuMemAlloc_v2"}));
  EXPECT_EQ(r.line("dlsym", 1).at(1), "libcuda.so.1");
  EXPECT_EQ(r.line("dlsymnext", 0), (std::vector<std::string>{"dlsymnext", "libvgpu.so", "cuMemFree_v2"}));
  EXPECT_EQ(r.line("dlsymnext", 1).at(2), "malloc");
  EXPECT_NE(r.line("dlsymnext", 1).at(1), "libvgpu.so");
  EXPECT_EQ(r.line("dlsym", 2), (std::vector<std::string>{"dlsym", "libvgpu.so", "nvmlDeviceGetMemoryInfo"}));
}

TEST_F(VgpuTest, LegacyProcAddressEntryPointIsInterceptedToo) {
  ProbeRun r = run({"init", "procaddrlegacy:cuMemAlloc:11040:0", "procaddrlegacy:cuMemFreeAsync:11080:2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.line("procaddrlegacy", 0),
            (std::vector<std::string>{"procaddrlegacy", "0", "libvgpu.so", "cuMemAlloc_v2"}));
  auto async = r.line("procaddrlegacy", 1);
  if (async.at(1) == "0") {  // only when the driver has stream-ordered allocation
    EXPECT_EQ(async, (std::vector<std::string>{"procaddrlegacy", "0", "libvgpu.so", "cuMemFreeAsync_ptsz"}));
  }
}

TEST_F(VgpuTest, WorksWhenNvmlIsAbsent) {
  // A library directory holding the driver but not NVML.
  std::string libs = dir_ + "/cuda-only";
  ASSERT_EQ(mkdir(libs.c_str(), 0700), 0);
  ASSERT_EQ(
      symlink((std::string(TESSERA_SIM_LIB_DIR) + "/libcuda.so.1").c_str(), (libs + "/libcuda.so.1").c_str()),
      0);
  ProbeRun r = run({"init", "ctx:0", "alloc:600", "alloc:300", "alloc:200", "meminfo", "nvml"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}, {"LD_LIBRARY_PATH", libs}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.value("nvmlcount", 1), ~0ull) << r.out;  // the program itself finds no NVML
  // Without NVML the context cannot be measured (and TESSERA_CONTEXT_OVERHEAD
  // is unset), so only the allocations count.
  EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS) << r.out << r.err;
  EXPECT_EQ(r.rc("alloc", 1), CUDA_SUCCESS);
  EXPECT_EQ(r.rc("alloc", 2), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(r.value("meminfo", 2), 100 * kMiB);
  // The region says so, and the container's next process does not try again.
  EXPECT_EQ(context_overhead(region_),
            std::make_pair(tessera::vgpu::kContextOverheadUnmeasurable, uint64_t{0}));
  ProbeRun next =
      run({"init", "ctx:0", "meminfo"},
          {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}, {"LD_LIBRARY_PATH", libs}, {"LIBCUDA_LOG_LEVEL", "3"}});
  EXPECT_EQ(next.value("meminfo", 2), 1000 * kMiB) << next.out;
  EXPECT_EQ(next.err.find("context overhead on"), std::string::npos) << next.err;
}

TEST_F(VgpuTest, ContextOverheadIsMeasuredOnceAndTheFigureReusedByLaterProcesses) {
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}, {"LIBCUDA_LOG_LEVEL", "3"}};
  ProbeRun first = run({"init", "ctx:0", "meminfo"}, env);
  EXPECT_NE(first.err.find("context overhead on " + uuid(0) + " measured: 314572800 bytes"),
            std::string::npos)
      << first.err;
  EXPECT_EQ(first.value("meminfo", 2), 700 * kMiB) << first.out;
  EXPECT_EQ(context_overhead(region_), std::make_pair(tessera::vgpu::kContextOverheadMeasured, 300 * kMiB));
  ProbeRun later = run({"init", "ctx:0", "meminfo"}, env);
  EXPECT_EQ(later.err.find("context overhead on"), std::string::npos) << later.err;  // no NVML query
  EXPECT_EQ(later.value("meminfo", 2), 700 * kMiB) << later.out;                     // charged all the same
}

TEST_F(VgpuTest, PoolsAreChargedWhatTheyHold) {
  // 1000 MiB: 300 context; a pool that keeps what is freed into it.
  ProbeRun r = run({"init", "ctx:0", "poolcreate", "poolalloc:400", "meminfo", "asyncfree", "meminfo",
                    "alloc:400", "poolalloc:400", "meminfo", "asyncfree", "pooltrim", "meminfo", "alloc:400"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.line("poolcreate").at(1) == "unsupported") GTEST_SKIP() << "the simulator has no memory pools";
  ASSERT_EQ(r.rc("poolcreate"), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.rc("poolalloc", 0), CUDA_SUCCESS) << r.out << r.err;
  EXPECT_EQ(r.value("meminfo", 2, 0), 300 * kMiB) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 1), 300 * kMiB) << r.out;  // freed into the pool: still held
  EXPECT_EQ(r.rc("alloc", 0), CUDA_ERROR_OUT_OF_MEMORY);     // so a plain allocation does not fit
  EXPECT_EQ(r.rc("poolalloc", 1), CUDA_SUCCESS) << r.out;    // but the pool can serve it again
  EXPECT_EQ(r.value("meminfo", 2, 2), 300 * kMiB) << r.out;
  EXPECT_EQ(r.rc("pooltrim"), CUDA_SUCCESS);
  EXPECT_EQ(r.value("meminfo", 2, 3), 700 * kMiB) << r.out;  // trimmed: given back
  EXPECT_EQ(r.rc("alloc", 1), CUDA_SUCCESS) << r.out;
}

// Graph memory nodes: the driver maps an executable graph's allocations when
// it is launched (or uploaded) and keeps them in the device's graph memory
// pool, across launches and after the graph is destroyed, until
// cuDeviceGraphMemTrim; the slice is charged what the pool holds.
TEST_F(VgpuTest, GraphMemoryIsChargedWhileThePoolHoldsItAndReleasedByTrim) {
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    // 1000 MiB: 300 context; a graph alloc -> memset -> free of 400 MiB.
    ProbeRun r = run({"init",           "ctx:0",        std::string("graphpath:") + path,
                      "graph:400:free", "meminfo",      "graphlaunch",
                      "meminfo",        "graphlaunch",  "meminfo",
                      "alloc:400",      "graphtrim",    "meminfo",
                      "alloc:400",      "free",         "graphlaunch",
                      "meminfo",        "graphdestroy", "meminfo",
                      "graphtrim",      "meminfo"},
                     {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (r.line("graph").at(1) == "unsupported") GTEST_SKIP() << "the simulator has no graph memory nodes";
    EXPECT_EQ(r.value("graphpath", 2), 0u) << r.out;
    ASSERT_EQ(r.rc("graph"), CUDA_SUCCESS) << r.out << r.err;
    int m = 0;
    auto free_now = [&] { return r.value("meminfo", 2, m++); };
    EXPECT_EQ(free_now(), 700 * kMiB) << r.out;  // instantiated: nothing mapped yet
    EXPECT_EQ(r.rc("graphlaunch", 0), CUDA_SUCCESS) << r.out << r.err;
    EXPECT_EQ(free_now(), 300 * kMiB) << r.out;  // freed by the graph, still held by its pool
    EXPECT_EQ(r.rc("graphlaunch", 1), CUDA_SUCCESS) << r.out << r.err;
    EXPECT_EQ(free_now(), 300 * kMiB) << r.out;             // a relaunch maps nothing new
    EXPECT_EQ(r.rc("alloc", 0), CUDA_ERROR_OUT_OF_MEMORY);  // so plain memory does not fit
    EXPECT_EQ(r.rc("graphtrim"), CUDA_SUCCESS);
    EXPECT_EQ(free_now(), 700 * kMiB) << r.out;  // trimmed: given back
    EXPECT_EQ(r.rc("alloc", 1), CUDA_SUCCESS) << r.out;
    EXPECT_EQ(r.rc("graphlaunch", 2), CUDA_SUCCESS) << r.out;  // mapped again
    EXPECT_EQ(free_now(), 300 * kMiB) << r.out;
    EXPECT_EQ(r.rc("graphdestroy"), CUDA_SUCCESS);
    EXPECT_EQ(free_now(), 300 * kMiB) << r.out;  // destroyed: the pool keeps the memory
    EXPECT_EQ(r.rc("graphtrim", 1), CUDA_SUCCESS);
    EXPECT_EQ(free_now(), 700 * kMiB) << r.out;
    EXPECT_EQ(r.err.find("cuGraph"), std::string::npos) << r.err;  // no refusal but the plain alloc's
  }
}

TEST_F(VgpuTest, GraphHoldingMemoryIsSeenByTheContainersOtherProcessesAndReclaimedWhenItDies) {
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}};
  ProbeRun first = run({"init", "ctx:0"}, env);  // measures the context once
  ASSERT_EQ(first.exit_code, 0) << first.err;
  Held& h = start_holding({"init", "ctx:0", "graph:200:keep", "graphlaunch"}, env);
  if (h.out.find("graph unsupported") != std::string::npos) GTEST_SKIP() << "no graph memory nodes";
  ASSERT_NE(h.out.find("graphlaunch 0"), std::string::npos) << h.out << held_err();
  EXPECT_EQ(region_usage(uuid(0)).first, 500 * kMiB);  // its context and the live graph allocation
  ProbeRun other = run({"init", "ctx:0", "meminfo", "alloc:300"}, env);
  EXPECT_EQ(other.value("meminfo", 2), 200 * kMiB) << other.out;
  EXPECT_EQ(other.rc("alloc"), CUDA_ERROR_OUT_OF_MEMORY);
  kill9(h);
  EXPECT_EQ(region_usage(uuid(0)).first, 0u);
}

TEST_F(VgpuTest, GraphsTakingTurnsInOneStreamAreNotChargedTwice) {
  // 1000 MiB: 300 context; two graphs of 300 MiB, each freeing what it allocates,
  // launched in turn into one stream: each keeps its mapping, relaunches need no more.
  ProbeRun r = run({"init", "ctx:0", "graph:300:free", "graph:300:free", "graphlaunch:0", "graphlaunch:1",
                    "meminfo", "graphlaunch:0", "graphlaunch:1", "graphlaunch:0", "meminfo", "graphattr"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.line("graph").at(1) == "unsupported") GTEST_SKIP() << "the simulator has no graph memory nodes";
  for (int i = 0; i < 5; ++i) EXPECT_EQ(r.rc("graphlaunch", i), CUDA_SUCCESS) << i << "\n" << r.out << r.err;
  EXPECT_EQ(r.value("meminfo", 2, 0), 100 * kMiB) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 1), 100 * kMiB) << r.out;
  EXPECT_EQ(r.value("graphattr", 3), 600 * kMiB) << r.out;  // what the pool holds is what is charged
}

TEST_F(VgpuTest, GraphAllocationPastTheLimitFailsCleanly) {
  // 1000 MiB: 300 context; a graph that would map 800 MiB.
  ProbeRun r = run({"init", "ctx:0", "graph:800:free", "meminfo", "graphlaunch", "graphupload", "meminfo",
                    "graphattr", "alloc:700"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.line("graph").at(1) == "unsupported") GTEST_SKIP() << "the simulator has no graph memory nodes";
  ASSERT_EQ(r.rc("graph"), CUDA_SUCCESS) << r.out;  // instantiation maps nothing: allowed
  EXPECT_EQ(r.rc("graphlaunch"), CUDA_ERROR_OUT_OF_MEMORY) << r.out;
  EXPECT_EQ(r.rc("graphupload"), CUDA_ERROR_OUT_OF_MEMORY) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 0), 700 * kMiB) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 1), 700 * kMiB) << r.out;  // usage unchanged
  EXPECT_EQ(r.value("graphattr", 3), 0u) << r.out;           // the driver was never asked
  EXPECT_EQ(r.rc("alloc"), CUDA_SUCCESS) << r.out;           // and nothing else changed
  EXPECT_EQ(region_usage(uuid(0)).first, 0u);                // the probe has exited
  // One line per refusal, naming limit, usage and request.
  EXPECT_NE(r.err.find("cuGraphLaunch refused: out of memory on " + uuid(0) +
                       ": limit 1048576000 bytes, used 314572800, requested 838860800"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cuGraphUpload refused"), std::string::npos) << r.err;
}

TEST_F(VgpuTest, CapturedStreamOrderedAllocationIsChargedWhenTheGraphRuns) {
  ProbeRun r =
      run({"init", "ctx:0", "graphcapture:300", "meminfo", "graphupload", "meminfo", "graphlaunch", "meminfo",
           "graphtrim", "meminfo", "graphdestroy", "graphcapture:800", "graphlaunch", "meminfo"},
          {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.line("graphcapture").at(1) == "unsupported")
    GTEST_SKIP() << "the simulator has no graph memory nodes";
  ASSERT_EQ(r.rc("graphcapture", 0), CUDA_SUCCESS) << r.out << r.err;
  EXPECT_EQ(r.value("meminfo", 2, 0), 700 * kMiB) << r.out;  // captured: not a pool allocation
  EXPECT_EQ(r.rc("graphupload"), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 1), 400 * kMiB) << r.out;  // uploaded: mapped
  EXPECT_EQ(r.rc("graphlaunch", 0), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 2), 400 * kMiB) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 3), 700 * kMiB) << r.out;  // trimmed
  ASSERT_EQ(r.rc("graphcapture", 1), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.rc("graphlaunch", 1), CUDA_ERROR_OUT_OF_MEMORY) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 4), 700 * kMiB) << r.out;
}

TEST_F(VgpuTest, GraphMemoryProgramWithoutTheLibraryBehavesAsOnTheBareSim) {
  ProbeRun r = run({"init", "ctx:0", "graph:800:free", "meminfo", "graphlaunch", "meminfo", "graphtrim",
                    "meminfo", "graphcapture:300", "graphlaunch", "graphattr"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}}, /*preload=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.line("graph").at(1) == "unsupported") GTEST_SKIP() << "the simulator has no graph memory nodes";
  const uint64_t device = 80ull * 1024 * kMiB, context = 300 * kMiB;
  EXPECT_EQ(r.rc("graph"), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 0), device - context) << r.out;
  EXPECT_EQ(r.rc("graphlaunch", 0), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 1), device - context - 800 * kMiB) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 2), device - context) << r.out;
  EXPECT_EQ(r.rc("graphcapture"), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.rc("graphlaunch", 1), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.value("graphattr", 3), 300 * kMiB) << r.out;  // the pool after the trim and the second graph
  EXPECT_EQ(r.err.find("[tessera]"), std::string::npos);
}

TEST_F(VgpuTest, GraphAllocatingOnAHiddenDeviceIsRefused) {
  std::string granted = uuid(1);
  std::string json = R"({"version":1,"node":"n","containers":[{"name":"app","devices":[{"uuid":")" + granted +
                     R"(","memoryMiB":2000,"cores":0}]}]})";
  // Container ordinal 0 is driver device 1; raw CUdevice 0 is the hidden GPU.
  ProbeRun r = run({"init", "ctx:0", "graph:100:free:0", "graph:100:free:1"}, {{"TESSERA_ALLOCATION", json}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.line("graph").at(1) == "unsupported") GTEST_SKIP() << "the simulator has no graph memory nodes";
  EXPECT_EQ(r.line("graph", 0),
            (std::vector<std::string>{"graph", std::to_string(CUDA_ERROR_INVALID_DEVICE), "instantiate"}))
      << r.out;
  EXPECT_EQ(r.line("graph", 1), (std::vector<std::string>{"graph", "0", "instantiate"})) << r.out << r.err;
  EXPECT_NE(r.err.find("refused: the graph allocates on a device this container was not granted"),
            std::string::npos)
      << r.err;
}

TEST_F(VgpuTest, GraphEntryPointsAreInterceptedThroughEveryPath) {
  ProbeRun r =
      run({"init", "procaddr:cuGraphInstantiate:13000:0", "procaddr:cuGraphInstantiateWithFlags:13000:0",
           "procaddr:cuGraphInstantiate:11000:0", "procaddr:cuGraphUpload:13000:2",
           "procaddr:cuDeviceGraphMemTrim:13000:0", "procaddr:cuGraphExecUpdate:13000:0",
           "dlsym:cuGraphExecDestroy", "dlsymnext:cuGraphInstantiateWithParams"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto names = [&](const char* op, int n) {
    auto w = r.line(op, n);
    return w.size() >= 2 ? std::vector<std::string>(w.end() - 2, w.end()) : w;
  };
  EXPECT_EQ(names("procaddr", 0), (std::vector<std::string>{"libvgpu.so", "cuGraphInstantiateWithFlags"}));
  EXPECT_EQ(names("procaddr", 1), (std::vector<std::string>{"libvgpu.so", "cuGraphInstantiateWithFlags"}));
  EXPECT_EQ(names("procaddr", 2), (std::vector<std::string>{"libvgpu.so", "cuGraphInstantiate_v2"}));
  EXPECT_EQ(names("procaddr", 3), (std::vector<std::string>{"libvgpu.so", "cuGraphUpload_ptsz"}));
  EXPECT_EQ(names("procaddr", 4), (std::vector<std::string>{"libvgpu.so", "cuDeviceGraphMemTrim"}));
  EXPECT_EQ(names("procaddr", 5), (std::vector<std::string>{"libvgpu.so", "cuGraphExecUpdate_v2"}));
  EXPECT_EQ(names("dlsym", 0), (std::vector<std::string>{"libvgpu.so", "cuGraphExecDestroy"}));
  EXPECT_EQ(names("dlsymnext", 0), (std::vector<std::string>{"libvgpu.so", "cuGraphInstantiateWithParams"}));
}

TEST_F(VgpuTest, ActiveOomKillerTerminatesAProcessOverTheLimitThroughAnUnseenPath) {
  // Module globals are device memory the library cannot see being allocated.
  // Limit: the measured 300 MiB context + 2 MiB; 1024 globals take ~4 MiB.
  std::vector<std::string> ops{"init", "ctx:0", "alloc:1", "globals:1024", "meminfo", "alloc:1"};
  ProbeRun tolerant = run(ops, {{"CUDA_DEVICE_MEMORY_LIMIT", "302m"}});
  EXPECT_EQ(tolerant.exit_code, 0) << tolerant.err;
  EXPECT_EQ(tolerant.rc("globals"), CUDA_SUCCESS) << tolerant.out;
  EXPECT_EQ(tolerant.err.find("ACTIVE_OOM_KILLER"), std::string::npos);

  ProbeRun killed = run(ops, {{"CUDA_DEVICE_MEMORY_LIMIT", "302m"}, {"ACTIVE_OOM_KILLER", "true"}});
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL) << killed.out << killed.err;
  EXPECT_NE(killed.err.find("ACTIVE_OOM_KILLER: the container uses"), std::string::npos) << killed.err;
  EXPECT_TRUE(killed.line("meminfo").empty()) << "terminated at its next memory query";

  // Within the limit, the killer leaves the process alone.
  ProbeRun fine = run(ops, {{"CUDA_DEVICE_MEMORY_LIMIT", "400m"},
                            {"ACTIVE_OOM_KILLER", "true"},
                            {"TESSERA_REGION", dir_ + "/other-container/vgpu.region"}});
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
}

TEST_F(VgpuTest, ForkedChildIsAccountedSeparatelyAndReclaimed) {
  ProbeRun r = run({"init", "ctx:0", "alloc:100", "fork:200", "alloc:600", "fork:1"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rc("child", 0), CUDA_SUCCESS) << r.out << r.err;  // its own context and 200 MiB fit
  // The child has exited: its 500 MiB come back, and the parent fills the limit exactly.
  EXPECT_EQ(r.rc("alloc", 1), CUDA_SUCCESS) << r.out;
  // A second child cannot even get its context in.
  EXPECT_EQ(r.rc("child", 1), CUDA_ERROR_OUT_OF_MEMORY) << r.out;
}

TEST_F(VgpuTest, IpcImportsAreNotCountedTwice) {
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "2000m"}};
  std::string handle = dir_ + "/ipc-handle";
  Held& exporter = start_holding({"init", "ctx:0", "alloc:500", "ipcexport:" + handle}, env);
  if (exporter.out.find("ipcexport unsupported") != std::string::npos)
    GTEST_SKIP() << "no IPC in the simulator";
  ASSERT_NE(exporter.out.find("ipcexport 0"), std::string::npos) << exporter.out << held_err();
  // Exporter: 300 context + 500. Importer: its own 300 context, and nothing for the import.
  ProbeRun importer = run({"init", "ctx:0", "meminfo", "ipcimport:" + handle, "meminfo"}, env);
  EXPECT_EQ(importer.rc("ipcimport"), CUDA_SUCCESS) << importer.out << importer.err;
  EXPECT_EQ(importer.value("meminfo", 2, 0), 900 * kMiB) << importer.out;
  EXPECT_EQ(importer.value("meminfo", 2, 1), 900 * kMiB) << importer.out;
}

TEST_F(VgpuTest, OversubscribedAllocationsBeyondTheDeviceAreServedAsManagedMemoryAndReportedAsSpilled) {
  // 100 GiB granted on an 80 GiB device whose managed memory may exceed it
  // (the part that does not fit stays in host memory, docs/sim.md).
  Env env{
      {"TESSERA_SIM_CONFIG", "gpus:\n  - model: A100-80GB\n    count: 2\nmanaged_oversubscription: true\n"},
      {"CUDA_DEVICE_MEMORY_LIMIT", "100g"},
      {"CUDA_OVERSUBSCRIBE", "true"},
      {"LIBCUDA_LOG_LEVEL", "3"}};
  size_t h = spawn_holding({"init", "ctx:0", "alloc:60000", "alloc:30000", "meminfo", "alloc:20000",
                            "alloc:12100", "meminfo", "free", "meminfo", "ready"},
                           env);
  Held& held = wait_for(h);
  ProbeRun r;
  r.out = held.out;
  const uint64_t limit = 100ull * 1024 * kMiB;
  EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS) << r.out << held_err();  // fits the device
  EXPECT_EQ(r.rc("alloc", 1), CUDA_SUCCESS) << r.out << held_err();  // does not: managed memory
  EXPECT_EQ(r.value("meminfo", 3, 0), limit) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 0), limit - 90300 * kMiB) << r.out;  // 300 context + 60000 + 30000
  EXPECT_EQ(r.rc("alloc", 2), CUDA_ERROR_OUT_OF_MEMORY) << r.out;      // the limit still holds
  EXPECT_EQ(r.rc("alloc", 3), CUDA_SUCCESS) << r.out;                  // up to it exactly, all of it spilled
  EXPECT_EQ(r.value("meminfo", 2, 1), 0u) << r.out;
  EXPECT_NE(held_err().find("cuMemAlloc of 31457280000 bytes oversubscribed: served as managed memory"),
            std::string::npos)
      << held_err();
  {
    // The region reports what was spilled (the node agent's memory_spilled).
    tessera::vgpu::SharedRegion region;
    char err[256] = {};
    ASSERT_TRUE(region.open_file(region_.c_str(), err, sizeof(err), /*create=*/false)) << err;
    const auto& device = region.raw()->devices[0];
    EXPECT_EQ(device.memory_used.load(), 90300 * kMiB);
    EXPECT_EQ(device.memory_peak.load(), limit);
    EXPECT_EQ(device.memory_spilled.load(), 30000 * kMiB) << "the 12100 MiB one was freed again";
  }
  EXPECT_EQ(r.value("meminfo", 2, 2), 12100 * kMiB) << r.out;  // the freed spill came back
  // The physical device is full; the rest of the managed memory lives on the host.
  ProbeRun bare = run({"init", "nvml"}, {{"TESSERA_SIM_CONFIG", env["TESSERA_SIM_CONFIG"]}}, false);
  EXPECT_EQ(bare.value("nvmlmem", 6, 0), 80ull * 1024 * kMiB) << bare.out;
}

TEST_F(VgpuTest, OversubscribedLimitIsReportedAndFailedSpillsGiveTheReservationBack) {
  // 100 GiB granted on an 80 GiB device. By default the simulator charges
  // managed memory to the device too (no managed_oversubscription), so an
  // allocation past the physical size fails even as managed memory: the
  // reservation must come back and the view stay right.
  ProbeRun r = run({"init", "ctx:0", "meminfo", "alloc:90000", "meminfo", "alloc:1000", "meminfo"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "100g"}, {"CUDA_OVERSUBSCRIBE", "true"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const uint64_t limit = 100ull * 1024 * kMiB;
  EXPECT_EQ(r.value("meminfo", 3, 0), limit);
  EXPECT_EQ(r.value("meminfo", 2, 0), limit - 300 * kMiB) << r.out;  // beyond the device's real free memory
  EXPECT_EQ(r.rc("alloc", 0), CUDA_ERROR_OUT_OF_MEMORY) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 1), limit - 300 * kMiB);  // nothing kept for the failed call
  EXPECT_EQ(r.rc("alloc", 1), CUDA_SUCCESS);
  EXPECT_EQ(r.value("meminfo", 2, 2), limit - 1300 * kMiB);
}

TEST_F(VgpuTest, ViewsReportTheSliceInCudaAndNvml) {
  ProbeRun r = run({"init", "ctx:0", "alloc:700", "meminfo", "totalmem:0", "totalmem:1", "nvml"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT_0", "3g"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  uint64_t limit = 3072 * kMiB, used = 1000 * kMiB;  // 300 context + 700
  EXPECT_EQ(r.value("meminfo", 2), limit - used) << r.out;
  EXPECT_EQ(r.value("meminfo", 3), limit);
  EXPECT_EQ(r.value("totalmem", 2, 0), limit);
  EXPECT_EQ(r.value("totalmem", 2, 1), 80ull * 1024 * kMiB);  // device 1 has no limit
  EXPECT_EQ(r.value("nvmlcount", 2), 2u) << r.out;
  auto m = r.line("nvmlmem", 0);
  ASSERT_EQ(m.size(), 7u) << r.out;
  EXPECT_EQ(m[1], "0");
  EXPECT_EQ(std::stoull(m[4]), limit);         // total
  EXPECT_EQ(std::stoull(m[5]), limit - used);  // free, as cuMemGetInfo says
  EXPECT_EQ(std::stoull(m[6]), used);          // used
  EXPECT_EQ(r.value("nvmlmem2", 3, 0), limit);
  EXPECT_EQ(r.value("nvmlmem2", 4, 0), limit - used);
  EXPECT_EQ(r.value("nvmlmem", 4, 1), 80ull * 1024 * kMiB);
}

// The entries of an "nvmlprocs" line as pid -> usedGpuMemory.
std::map<uint64_t, uint64_t> process_list(const std::vector<std::string>& line) {
  std::map<uint64_t, uint64_t> out;
  for (size_t i = 3; i < line.size(); ++i) {
    size_t eq = line[i].find('=');
    out[std::stoull(line[i].substr(0, eq))] = std::stoull(line[i].substr(eq + 1));
  }
  return out;
}

TEST_F(VgpuTest, ProcessListsShowOnlyTheContainersOwnProcessesWithTheMemoryTheSliceAccounts) {
  // Another container on the same GPU (its own region): 300 MiB context + 3000.
  Held& other =
      start_holding({"init", "ctx:0", "alloc:3000"},
                    {{"CUDA_DEVICE_MEMORY_LIMIT", "5000m"}, {"TESSERA_REGION", dir_ + "/other/vgpu.region"}});
  ASSERT_NE(other.out.find("alloc 0"), std::string::npos) << other.out << held_err();
  const uint64_t other_pid = static_cast<uint64_t>(other.pid);  // `other` dangles once more probes are held
  // This container: one process holding 300 + 500 MiB, and the one asking (300 + 100).
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "2000m"}};
  Held& mine = start_holding({"init", "ctx:0", "alloc:500"}, env);
  ASSERT_NE(mine.out.find("alloc 0"), std::string::npos) << mine.out << held_err();
  const uint64_t mine_pid = static_cast<uint64_t>(mine.pid);
  ProbeRun bare = run({"init", "nvmlprocs:c3:0:16"}, {}, false);
  EXPECT_EQ(process_list(bare.line("nvmlprocs")).size(), 2u) << bare.out;  // the driver lists both containers
  EXPECT_EQ(process_list(bare.line("nvmlprocs"))[other_pid], 3300 * kMiB) << bare.out;

  ProbeRun r =
      run({"init", "ctx:0", "alloc:100", "pid", "nvmlprocs:c3:0:16", "nvmlprocs:c2:0:16", "nvmlprocs:c1:0:16",
           "nvmlprocs:c3:0:null", "nvmlprocs:c2:0:1", "nvmlprocs:c3:0:2", "nvmlprocs:g3:0:16",
           "nvmlprocs:g2:0:null", "nvmlprocs:g1:0:4", "nvmlprocs:c3:1:16", "nvml"},
          env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const uint64_t me = r.value("pid", 1);
  const std::map<uint64_t, uint64_t> expected{{mine_pid, 800 * kMiB}, {me, 400 * kMiB}};
  for (int v = 0; v < 3; ++v) {  // _v3, _v2 and v1 alike
    SCOPED_TRACE(v);
    auto line = r.line("nvmlprocs", v);
    ASSERT_GE(line.size(), 3u) << r.out;
    EXPECT_EQ(line[1], "0") << r.out;
    EXPECT_EQ(process_list(line), expected) << r.out;
  }
  // The list adds up to the memory view's "used".
  EXPECT_EQ(r.value("nvmlmem", 6, 0), 1200 * kMiB) << r.out;
  // NVML's buffer protocol, with the container's count.
  EXPECT_EQ(r.rc("nvmlprocs", 3), NVML_ERROR_INSUFFICIENT_SIZE) << r.out;
  EXPECT_EQ(r.value("nvmlprocs", 2, 3), 2u);
  EXPECT_EQ(r.rc("nvmlprocs", 4), NVML_ERROR_INSUFFICIENT_SIZE) << r.out;
  EXPECT_EQ(r.value("nvmlprocs", 2, 4), 2u);
  EXPECT_EQ(r.rc("nvmlprocs", 5), NVML_SUCCESS) << r.out;  // exactly big enough
  EXPECT_EQ(process_list(r.line("nvmlprocs", 5)), expected);
  // Graphics lists go through the same filter (the simulator has no graphics contexts).
  for (int i = 6; i <= 8; ++i) {
    EXPECT_EQ(r.rc("nvmlprocs", i), NVML_SUCCESS) << r.out;
    EXPECT_EQ(r.value("nvmlprocs", 2, i), 0u) << r.out;
  }
  EXPECT_EQ(r.rc("nvmlprocs", 9), NVML_SUCCESS) << r.out;  // a device the container does not use
  EXPECT_EQ(r.value("nvmlprocs", 2, 9), 0u) << r.out;
  // The other container sees its own process only, with its own accounting.
  ProbeRun theirs = run({"init", "nvmlprocs:c3:0:16"}, {{"CUDA_DEVICE_MEMORY_LIMIT", "5000m"},
                                                        {"TESSERA_REGION", dir_ + "/other/vgpu.region"}});
  EXPECT_EQ(process_list(theirs.line("nvmlprocs")), (std::map<uint64_t, uint64_t>{{other_pid, 3300 * kMiB}}))
      << theirs.out << theirs.err;
  // With control disabled the driver's list is passed through.
  ProbeRun off = run({"init", "nvmlprocs:c3:0:16"}, {{"CUDA_DISABLE_CONTROL", "true"}});
  EXPECT_EQ(process_list(off.line("nvmlprocs")).size(), 2u) << off.out;
}

TEST_F(VgpuTest, PerProcessUtilisationShowsOnlyTheContainersOwnProcesses) {
  // Another container keeps the device busy (2 ms kernels, one after the other, until killed).
  size_t o =
      spawn_holding({"init", "ctx:0", "pid", "ready", "busy:2000:1000000"},
                    {{"CUDA_DEVICE_MEMORY_LIMIT", "5000m"}, {"TESSERA_REGION", dir_ + "/other/vgpu.region"}});
  Held& other = wait_for(o, "ready");
  ASSERT_NE(other.out.find("ready"), std::string::npos) << other.out << held_err();
  const uint64_t other_pid = static_cast<uint64_t>(held_[o].pid);
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "2000m"}};
  ProbeRun r = run({"init", "ctx:0", "busy:2000:20", "pid", "nvmlutil:0", "nvmlutil:1"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ProbeRun bare = run({"nvmlutil:0"}, {}, false);
  EXPECT_EQ(process_list(bare.line("nvmlutil")).count(other_pid), 1u) << bare.out;  // the driver shows it
  auto mine = process_list(r.line("nvmlutil", 0));
  EXPECT_EQ(r.rc("nvmlutil", 0), NVML_SUCCESS) << r.out;
  EXPECT_EQ(mine.size(), 1u) << r.out;
  EXPECT_EQ(mine.count(r.value("pid", 1)), 1u) << r.out;
  EXPECT_EQ(r.rc("nvmlutil", 1), NVML_ERROR_NOT_FOUND) << r.out;  // nothing of ours ran on device 1
}

// Reads a file (e.g. under /proc) whole; empty when it cannot be read.
std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last NSpid entry of a host process: its pid in its own pid namespace.
uint32_t innermost_pid(pid_t host_pid) {
  std::string status = read_file("/proc/" + std::to_string(host_pid) + "/status");
  size_t at = status.find("NSpid:");
  if (at == std::string::npos) return 0;
  auto w = words(status.substr(at + 6, status.find('\n', at) - at - 6));
  return w.empty() ? 0 : static_cast<uint32_t>(std::stoul(w.back()));
}

// A container's process in its own pid namespace with its own /proc (as in a
// pod): getpid() is 1 there while the driver knows it by its host pid. The
// simulator is pointed at a bind mount of the host's /proc (TESSERA_SIM_PROC,
// docs/sim.md) so that, like a kernel driver, it names processes by host pid.
class PidNamespaceTest : public VgpuTest {
 protected:
  void SetUp() override {
    VgpuTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "pid namespaces need root here";
    host_proc_ = dir_ + "/hostproc";
    ASSERT_EQ(mkdir(host_proc_.c_str(), 0755), 0);
  }

  // Starts `ops` (then "hold") in a new pid and mount namespace; returns the
  // held index. Chain: unshare --mount (private) -> sh binds the host's /proc
  // at host_proc_ -> exec unshare --pid --fork --kill-child --mount-proc -> the probe, pid 1.
  // --kill-child: killing the held pid (unshare) kills the probe too, which
  // would otherwise outlive the test as an orphaned namespace init.
  size_t start_in_namespace(std::vector<std::string> ops, Env env) {
    env["TESSERA_SIM_PROC"] = host_proc_;
    return spawn_holding(std::move(ops), env,
                         {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                          "mount --bind /proc \"$TESSERA_SIM_PROC\" && exec unshare --pid --fork "
                          "--kill-child --mount-proc \"$@\"",
                          "sh"});
  }

  // The probe's host pid: the only child of the inner unshare (which kept the
  // spawned pid through the execs).
  pid_t probe_host_pid(const Held& h) {
    auto w =
        words(read_file("/proc/" + std::to_string(h.pid) + "/task/" + std::to_string(h.pid) + "/children"));
    return w.size() == 1 ? static_cast<pid_t>(std::stol(w[0])) : -1;
  }

  // What the node agent does: find the slot of the container process whose
  // host pid is `host`, by the pid it has in its namespace (the last NSpid
  // entry), and write `host` into it (compare-exchange from 0, generation
  // re-checked).
  bool agent_writes_host_pid(const std::string& region, pid_t host) {
    uint32_t inner = innermost_pid(host);
    tessera::vgpu::SharedRegion r;
    char err[256] = {};
    if (inner == 0 || !r.open_file(region.c_str(), err, sizeof(err), /*create=*/false)) return false;
    for (uint32_t i = 0; i < tessera::vgpu::kRegionMaxProcesses; ++i) {
      auto& s = r.raw()->processes[i];
      if (s.state.load() != tessera::vgpu::kSlotActive || s.pid != inner) continue;
      uint64_t generation = s.generation, zero = 0;
      if (!s.host_pid.compare_exchange_strong(zero, static_cast<uint64_t>(host))) return false;
      if (s.generation != generation) {
        uint64_t mine = static_cast<uint64_t>(host);
        s.host_pid.compare_exchange_strong(mine, 0);
        return false;
      }
      return true;
    }
    return false;
  }

  std::string host_proc_;
};

TEST_F(PidNamespaceTest, NvmlMatchingWorksOnceTheNodeAgentWritesTheHostPid) {
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "2000m"}};
  for (bool agent : {false, true}) {
    SCOPED_TRACE(agent ? "host pid written by the agent" : "host pid unknown");
    std::string region = dir_ + (agent ? "/with-agent" : "/without-agent") + "/vgpu.region";
    env["TESSERA_REGION"] = region;
    std::string go = dir_ + (agent ? "/go-agent" : "/go");
    size_t h = start_in_namespace(
        {"init", "pid", "ready", "waitfile:" + go, "ctx:0", "alloc:500", "meminfo", "nvmlprocs:c3:0:16"},
        env);
    Held& ready = wait_for(h, "ready");
    if (ready.out.find("ready") == std::string::npos) GTEST_SKIP() << "no pid namespace here: " << held_err();
    EXPECT_NE(ready.out.find("pid 1\n"), std::string::npos) << ready.out;  // pid 1 of its namespace
    pid_t host = probe_host_pid(held_[h]);
    ASSERT_GT(host, 1);
    EXPECT_EQ(slot_host_pid(region, 1), 0);  // libvgpu cannot know it from inside
    if (agent) {
      ASSERT_TRUE(agent_writes_host_pid(region, host));
    }
    { std::ofstream(go.c_str()) << "go"; }
    Held& done = wait_for(h);
    ASSERT_NE(done.out.find("holding"), std::string::npos) << done.out << held_err();
    ProbeRun r;
    r.out = done.out;
    // The driver knows the process by its host pid only.
    ProbeRun bare = run({"nvmlprocs:c3:0:16"}, {}, false);
    EXPECT_EQ(process_list(bare.line("nvmlprocs")).count(static_cast<uint64_t>(host)), 1u) << bare.out;
    if (!agent) {
      // The silent failure this contract fixes: the context cannot be
      // measured (not charged: 2000 - 500 free) and the process does not
      // find itself in its own process list.
      EXPECT_EQ(r.value("meminfo", 2), 1500 * kMiB) << r.out;
      EXPECT_EQ(r.value("nvmlprocs", 2), 0u) << r.out;
      // The region remembers why, so that only a process that knows its host
      // pid tries again — as one in the host's namespace does.
      EXPECT_EQ(context_overhead(region).first, tessera::vgpu::kContextOverheadHostPidUnknown);
      Env host_env = env;
      host_env["LIBCUDA_LOG_LEVEL"] = "3";
      ProbeRun host_side = run({"init", "ctx:0", "meminfo"}, host_env);
      EXPECT_NE(host_side.err.find("measured: 314572800 bytes"), std::string::npos) << host_side.err;
      EXPECT_EQ(context_overhead(region),
                std::make_pair(tessera::vgpu::kContextOverheadMeasured, 300 * kMiB));
    } else {
      EXPECT_EQ(r.value("meminfo", 2), 1200 * kMiB) << r.out;  // 300 MiB context measured and charged
      EXPECT_EQ(process_list(r.line("nvmlprocs")),
                (std::map<uint64_t, uint64_t>{{static_cast<uint64_t>(host), 800 * kMiB}}))
          << r.out;
    }
    kill9(held_[h]);
  }
}

TEST_F(PidNamespaceTest, ActiveOomKillerFindsAProcessByItsHostPidEvenAsPidOne) {
  // As in ActiveOomKillerTerminatesAProcessOverTheLimitThroughAnUnseenPath,
  // inside a pid namespace: the container's process is pid 1 there.
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "302m"},
          {"ACTIVE_OOM_KILLER", "true"},
          {"TESSERA_CONTEXT_OVERHEAD", "300m"}};
  std::string go = dir_ + "/go";
  size_t h = start_in_namespace(
      {"init", "ready", "waitfile:" + go, "ctx:0", "alloc:1", "globals:1024", "meminfo"}, env);
  Held& ready = wait_for(h, "ready");
  if (ready.out.find("ready") == std::string::npos) GTEST_SKIP() << "no pid namespace here: " << held_err();
  ASSERT_TRUE(agent_writes_host_pid(region_, probe_host_pid(held_[h])));
  { std::ofstream(go.c_str()) << "go"; }
  Held& done = wait_for(h);                                            // until it prints "holding" or ends
  EXPECT_EQ(done.out.find("meminfo"), std::string::npos) << done.out;  // terminated at its next memory query
  EXPECT_NE(held_err().find("ACTIVE_OOM_KILLER: the container uses"), std::string::npos) << held_err();
  int status = 0;
  ASSERT_EQ(waitpid(held_[h].pid, &status, 0), held_[h].pid);
  held_[h].pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL) << status;
}

TEST_F(VgpuTest, AllocationAnnotationSelectsDevicesByUuid) {
  std::string b = uuid(1);
  std::string json = R"({"version":1,"node":"n","containers":[{"name":"other","devices":[{"uuid":")" +
                     uuid(0) +
                     R"(","memoryMiB":100,"cores":10}]},)"
                     R"({"name":"app","devices":[{"uuid":")" +
                     b + R"(","memoryMiB":2000,"cores":30}]}]})";
  ProbeRun r = run(
      {"init", "count", "uuid:0", "uuid:1", "totalmem:0", "ctx:0", "alloc:1700", "alloc:1", "nvml",
       "nvmluuid:" + uuid(0), "nvmluuid:" + b},
      {{"TESSERA_ALLOCATION", json}, {"TESSERA_CONTAINER_NAME", "app"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.value("count", 2), 1u) << r.out;
  EXPECT_EQ(r.line("uuid", 0).at(2), b);  // container ordinal 0 is the granted GPU
  EXPECT_EQ(r.rc("uuid", 1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(r.value("totalmem", 2), 2000 * kMiB);  // the annotation wins over CUDA_DEVICE_MEMORY_LIMIT
  EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS) << r.err;
  EXPECT_EQ(r.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(r.value("nvmlcount", 2), 1u);
  EXPECT_EQ(r.line("nvmlmem", 0).at(3), b);
  EXPECT_EQ(r.rc("nvmluuid", 0), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(r.rc("nvmluuid", 1), NVML_SUCCESS);
}

TEST_F(VgpuTest, NvmlLookupsBySerialAndPciBusIdFindOnlyGrantedDevices) {
  std::string b = uuid(1);
  ProbeRun ident = run({"nvmlident:0", "nvmlident:1"}, {}, false);
  auto hidden = ident.line("nvmlident", 0), granted = ident.line("nvmlident", 1);
  ASSERT_EQ(hidden.size(), 4u) << ident.out;
  ASSERT_EQ(granted.size(), 4u) << ident.out;
  std::vector<std::string> ops;
  for (const auto& d : {hidden, granted})
    for (const std::string& op : {"nvmlserial:" + d[2], "nvmlpci:v1:" + d[3], "nvmlpci:v2:" + d[3]})
      ops.push_back(op);
  ProbeRun bare = run(ops, {}, false);
  for (const char* op : {"nvmlserial", "nvmlpci"})
    for (int i = 0; i < (op == std::string("nvmlpci") ? 4 : 2); ++i)
      EXPECT_EQ(bare.rc(op, i), NVML_SUCCESS) << bare.out;
  std::string json = R"({"version":1,"node":"n","containers":[{"name":"app","devices":[{"uuid":")" + b +
                     R"(","memoryMiB":2000,"cores":0}]}]})";
  ProbeRun r = run(ops, {{"TESSERA_ALLOCATION", json}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rc("nvmlserial", 0), NVML_ERROR_NOT_FOUND) << r.out;
  EXPECT_EQ(r.rc("nvmlpci", 0), NVML_ERROR_NOT_FOUND) << r.out;  // the v1 name
  EXPECT_EQ(r.rc("nvmlpci", 1), NVML_ERROR_NOT_FOUND) << r.out;  // _v2
  EXPECT_EQ(r.rc("nvmlserial", 1), NVML_SUCCESS) << r.out;
  EXPECT_EQ(r.rc("nvmlpci", 2), NVML_SUCCESS) << r.out;
  EXPECT_EQ(r.rc("nvmlpci", 3), NVML_SUCCESS) << r.out;
}

TEST_F(VgpuTest, LegacyContextEntryPointsNeitherReachHiddenDevicesNorEscapeTheLimit) {
  // Device 0 (CUdevice 0) is hidden; the container holds device 1 with 2000 MiB.
  std::string json = R"({"version":1,"node":"n","containers":[{"name":"app","devices":[{"uuid":")" + uuid(1) +
                     R"(","memoryMiB":2000,"cores":0}]}]})";
  Env env{{"TESSERA_ALLOCATION", json}};
  // Without the library, the pre-3.2 cuCtxCreate reaches device 0 like any other.
  ProbeRun bare = run({"init", "lctx:direct:0", "alloc:3000"}, {}, false);
  EXPECT_EQ(bare.rc("lctx"), CUDA_SUCCESS) << bare.out;
  EXPECT_EQ(bare.rc("alloc"), CUDA_SUCCESS) << bare.out;
  for (const char* path : {"direct", "dlsym", "next", "procaddr"}) {
    SCOPED_TRACE(path);
    std::string p = path;
    ProbeRun r =
        run({"init", "lctx:" + p + ":0", "lctx:" + p + ":1", "meminfo", "alloc:1000", "alloc:1000"}, env);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.rc("lctx", 0), CUDA_ERROR_INVALID_DEVICE) << r.out;  // hidden
    EXPECT_EQ(r.rc("lctx", 1), CUDA_SUCCESS) << r.out;
    EXPECT_EQ(r.value("meminfo", 2), 1700 * kMiB) << r.out;  // the slice, its context charged
    EXPECT_EQ(r.value("meminfo", 3), 2000 * kMiB) << r.out;
    EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS) << r.out;
    EXPECT_EQ(r.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY) << r.out;
  }
  // cuGetProcAddress at the CUDA versions that had them answers with the hooks of exactly those entry points.
  ProbeRun pa = run({"init", "procaddr:cuCtxCreate:3000:0", "procaddr:cuCtxDestroy:3000:0",
                     "procaddr:cuDevicePrimaryCtxRelease:10000:0", "procaddr:cuDevicePrimaryCtxReset:10000:0",
                     "procaddr:cuDevicePrimaryCtxReset:11000:0"},
                    env);
  int k = 0;
  for (const char* sym : {"cuCtxCreate", "cuCtxDestroy", "cuDevicePrimaryCtxRelease",
                          "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2"})
    EXPECT_EQ(pa.line("procaddr", k++), (std::vector<std::string>{"procaddr", "0", "libvgpu.so", sym}))
        << pa.out;
  // Contexts destroyed or released through the old entry points give their charge back.
  for (const char* path : {"direct", "dlsym", "next", "procaddr"}) {
    SCOPED_TRACE(path);
    std::string p = path;
    std::vector<std::vector<std::string>> cases = {{"init", "lctx:" + p + ":1", "lctxdestroy:" + p},
                                                   {"init", "ctx:0", "lprimary:" + p + ":release:1"},
                                                   {"init", "ctx:0", "lprimary:" + p + ":reset:1"},
                                                   {"init", "ctx:0"}};
    for (size_t c = 0; c < cases.size(); ++c) {
      size_t h = spawn_holding(cases[c], env);
      Held& held = wait_for(h);
      EXPECT_EQ(held.out.find(" missing"), std::string::npos) << held.out;
      EXPECT_EQ(region_usage(uuid(1)).first, c + 1 < cases.size() ? 0 : 300 * kMiB) << c << "\n" << held.out;
      kill9(held_[h]);
    }
  }
}

TEST_F(VgpuTest, PreCuda32EntryPointsWith32BitSizesAreRefused) {
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}};
  const std::vector<std::string> names = {"cuMemAlloc",       "cuMemAllocPitch", "cuMemGetInfo",
                                          "cuDeviceTotalMem", "cuArrayCreate",   "cuArray3DCreate"};
  for (const char* path : {"direct", "dlsym", "next", "procaddr"}) {
    SCOPED_TRACE(path);
    std::vector<std::string> ops{"init", "ctx:0"};
    for (const auto& n : names) ops.push_back(std::string("l32:") + path + ":" + n);
    ops.push_back("meminfo");
    ProbeRun r = run(ops, env);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (size_t i = 0; i < names.size(); ++i) {
      auto w = r.line("l32", static_cast<int>(i));
      ASSERT_EQ(w.size(), 3u) << r.out;
      EXPECT_EQ(w[1], names[i]);
      // Refused wherever it is reachable; the simulator does not export these
      // names, so a lookup through its handle or cuGetProcAddress finds nothing.
      if (w[2] != "missing") {
        EXPECT_EQ(w[2], std::to_string(CUDA_ERROR_NOT_SUPPORTED)) << r.out;
      }
    }
    if (std::string(path) == "direct" || std::string(path) == "next") {
      EXPECT_EQ(r.line("l32", 0).at(2), std::to_string(CUDA_ERROR_NOT_SUPPORTED))
          << r.out;  // reached libvgpu
    }
    EXPECT_EQ(r.value("meminfo", 2), 700 * kMiB) << r.out;  // nothing was allocated
  }
}

TEST_F(VgpuTest, MalformedAnnotationFallsBackToHamiVariablesWithOneLogLine) {
  ProbeRun r = run({"init", "ctx:0", "alloc:800", "alloc:1"},
                   {{"TESSERA_ALLOCATION", "{\"version\":1,"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1100m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS);
  EXPECT_EQ(r.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(r.err.find("[tessera] error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("TESSERA_ALLOCATION ignored"), std::string::npos) << r.err;
}

TEST_F(VgpuTest, DisableControlPassesEverythingThrough) {
  ProbeRun r = run({"init", "ctx:0", "alloc:2000", "meminfo"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_DISABLE_CONTROL", "true"}});
  EXPECT_EQ(r.rc("alloc"), CUDA_SUCCESS) << r.err;
  EXPECT_EQ(r.value("meminfo", 3), 80ull * 1024 * kMiB);
}

TEST_F(VgpuTest, UnknownPointerIsStillFreedByTheDriver) {
  ProbeRun r = run({"init", "ctx:0", "freebogus", "alloc:10", "free", "meminfo"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}});
  ProbeRun bare = run({"init", "ctx:0", "freebogus"}, {}, false);
  EXPECT_EQ(r.rc("freebogus"), bare.rc("freebogus"));  // the driver's own answer
  EXPECT_EQ(r.rc("free"), CUDA_SUCCESS);
  EXPECT_EQ(r.value("meminfo", 2), 1024 * kMiB - 300 * kMiB);
}

TEST_F(VgpuTest, StormOfEightProcessesByEightThreadsEndsExactlyAtTheLimit) {
  const uint64_t limit = 4000 * kMiB;
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "4000m"}};
  std::string go = dir_ + "/go";
  std::vector<size_t> procs;
  for (int p = 0; p < 8; ++p)
    procs.push_back(spawn_holding({"init", "ctx:0", "ready", "waitfile:" + go, "storm:8:4"}, env));
  for (size_t p : procs) wait_for(p, "ready");
  { std::ofstream(go.c_str()) << "go"; }
  uint64_t granted = 0;
  int contexts = 0;
  for (size_t p : procs) {
    Held& h = wait_for(p);
    auto w = words(h.out.substr(h.out.find("storm")));
    ASSERT_GE(w.size(), 3u) << h.out << held_err();
    granted += std::stoull(w[1]);
    EXPECT_EQ(w[2], "0") << "allocations failed with something other than out-of-memory";
    contexts += h.out.find("ctx 0") != std::string::npos;
  }
  EXPECT_EQ(contexts, 8) << held_err();
  auto [used, peak] = region_usage(uuid(0));
  EXPECT_EQ(used, limit);  // ends exactly at the limit...
  EXPECT_EQ(peak, limit);  // ...and never went past it
  // What the programs got plus the measured contexts is the limit exactly
  // (the context figure is the one libvgpu measured and stored).
  uint64_t context = 0;
  {
    tessera::vgpu::SharedRegion r;
    char err[256];
    ASSERT_TRUE(r.open_file(region_.c_str(), err, sizeof(err))) << err;
    context = r.raw()->devices[0].context_overhead_bytes.load();
  }
  EXPECT_EQ(context, 300 * kMiB);
  EXPECT_EQ(granted + 8 * context, limit);
  // The physical device agrees: nothing was allocated behind the ledger's back.
  ProbeRun bare = run({"init", "nvml"}, {}, false);
  EXPECT_EQ(bare.value("nvmlmem", 6, 0), limit) << bare.out;

  // kill -9 them all: the memory comes back for the next process.
  for (size_t p : procs) kill9(held_[p]);
  ProbeRun after = run({"init", "ctx:0", "meminfo", "alloc:3700", "alloc:1"}, env);
  EXPECT_EQ(after.value("meminfo", 2), limit - 300 * kMiB) << after.out << after.err;
  EXPECT_EQ(after.rc("alloc", 0), CUDA_SUCCESS);
  EXPECT_EQ(after.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(VgpuTest, SixtyFourThreadsOfOneProcessFillTheLimitExactly) {
  ProbeRun r = run({"init", "ctx:0", "storm:64:1", "meminfo"}, {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.value("storm", 1), 700 * kMiB) << r.out;  // 1000 - 300 context
  EXPECT_EQ(r.value("storm", 2), 0u);                   // only out-of-memory refusals
  EXPECT_EQ(r.value("meminfo", 2), 0u);
  EXPECT_EQ(region_usage(uuid(0)).second, 1000 * kMiB);  // peak: never past the limit
}

TEST_F(VgpuTest, KilledProcessGivesItsMemoryBack) {
  Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "3000m"}};
  Held& a = start_holding({"init", "ctx:0", "alloc:2000"}, env);
  ASSERT_NE(a.out.find("alloc 0"), std::string::npos) << a.out << held_err();
  // Another process of the container: 300 (A's context) + 2000 + 300 (its own) leaves 400.
  ProbeRun b = run({"init", "ctx:0", "meminfo", "alloc:500"}, env);
  EXPECT_EQ(b.value("meminfo", 2), 400 * kMiB) << b.out << b.err;
  EXPECT_EQ(b.rc("alloc"), CUDA_ERROR_OUT_OF_MEMORY);
  kill9(a);
  ProbeRun c = run({"init", "ctx:0", "meminfo", "alloc:2500"}, env);
  EXPECT_EQ(c.value("meminfo", 2), 2700 * kMiB) << c.out << c.err;
  EXPECT_EQ(c.rc("alloc"), CUDA_SUCCESS);
  EXPECT_EQ(region_usage(uuid(0)).first, 0u);  // c exited normally: its slot was reclaimed too
}

TEST_F(VgpuTest, CorruptOrForeignRegionIsRefusedNeverTrusted) {
  std::string junk(4096, 'x');
  for (size_t size : {junk.size(), sizeof(tessera::vgpu::Region)}) {
    SCOPED_TRACE(size);
    std::string dir = region_.substr(0, region_.rfind('/'));
    mkdir(dir.c_str(), 0700);
    {
      std::string content(size, 'x');
      std::ofstream(region_.c_str(), std::ios::binary | std::ios::trunc) << content;
    }
    ProbeRun r = run({"init", "ctx:0", "alloc:600", "alloc:200", "alloc:100"},
                     {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
    EXPECT_NE(r.err.find("refus"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(region_), std::string::npos) << r.err;
    // The limit still holds for the process on its own...
    EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS) << r.out;
    EXPECT_EQ(r.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(r.rc("alloc", 2), CUDA_SUCCESS);
    // ...and the file was not touched.
    std::ifstream in(region_.c_str(), std::ios::binary);
    std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(after, std::string(size, 'x'));
  }
}

TEST_F(VgpuTest, ExplicitContextOverheadOverridesMeasurement) {
  ProbeRun r = run({"init", "ctx:0", "meminfo", "ctxrelease:0"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}, {"TESSERA_CONTEXT_OVERHEAD", "100m"}});
  EXPECT_EQ(r.value("meminfo", 2), 900 * kMiB) << r.out << r.err;
  EXPECT_EQ(r.rc("ctxrelease"), CUDA_SUCCESS);
}

TEST_F(VgpuTest, CreatedContextsAreChargedOncePerDeviceAndReleased) {
  ProbeRun r = run({"init", "ctxcreate:0", "meminfo", "ctx:0", "meminfo", "ctxrelease:0", "ctxcreate:0",
                    "meminfo", "ctxdestroy", "ctxdestroy"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rc("ctxcreate"), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 0), 700 * kMiB) << r.out;
  EXPECT_EQ(r.value("meminfo", 2, 1), 700 * kMiB) << r.out;  // a second context: no second charge
  EXPECT_EQ(r.value("meminfo", 2, 2), 700 * kMiB) << r.out;
}

TEST_F(VgpuTest, EveryAllocationPathIsCountedAndReleased) {
  const uint64_t limit = 2000 * kMiB, base = limit - 300 * kMiB;
  ProbeRun r = run({"init",      "ctx:0",
                    "meminfo",   "pitch:1000:100",
                    "meminfo",   "free",
                    "meminfo",   "managed:100",
                    "meminfo",   "free",
                    "meminfo",   "host:100",
                    "meminfo",   "vmm:64",
                    "meminfo",   "vmmfree",
                    "meminfo",   "array:256:256",
                    "meminfo",   "arrayfree",
                    "meminfo",   "array3d:64:64:8",
                    "meminfo",   "arrayfree",
                    "meminfo",   "mipmap:256:256:4",
                    "meminfo",   "mipmapfree",
                    "meminfo",   "async:100",
                    "meminfo",   "asyncfree",
                    "meminfo",   "alloc:1699",
                    "managed:2", "pitch:1048576:2"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "2000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int m = 0;  // index of the next meminfo line
  auto free_now = [&] { return r.value("meminfo", 2, m++); };
  ASSERT_EQ(free_now(), base) << r.out;
  // Pitched: the driver's pitch x height.
  ASSERT_EQ(r.rc("pitch"), CUDA_SUCCESS) << r.out;
  uint64_t pitch = r.value("pitch", 2);
  EXPECT_GE(pitch, 1000u);
  EXPECT_EQ(free_now(), base - pitch * 100);
  EXPECT_EQ(free_now(), base);
  // Managed memory counts.
  EXPECT_EQ(r.rc("managed"), CUDA_SUCCESS) << r.out;
  EXPECT_EQ(free_now(), base - 100 * kMiB);
  EXPECT_EQ(free_now(), base);
  // Host memory does not.
  EXPECT_EQ(r.rc("host"), CUDA_SUCCESS);
  EXPECT_EQ(free_now(), base);
  std::vector<std::string> unsupported;
  auto check = [&](const char* op, uint64_t at_least) {
    if (r.line(op).size() >= 2 && r.line(op)[1] == "unsupported") {
      unsupported.push_back(op);
      m += 2;
      return;
    }
    EXPECT_EQ(r.rc(op), CUDA_SUCCESS) << op << "\n" << r.out;
    uint64_t during = free_now();
    EXPECT_LE(during, base - at_least) << op;
    EXPECT_EQ(free_now(), base) << op << " not released";
  };
  check("vmm", 64 * kMiB);
  check("array", 256 * 256 * 16);
  check("array3d", 64 * 64 * 8 * 16);
  check("mipmap", 256 * 256 * 16);
  check("async", 100 * kMiB);
  // Arrays are charged exactly what the driver says they occupy.
  int meminfo_after_array = 8;  // index of the meminfo line right after "array"
  for (const char* op : {"array", "array3d", "mipmap"}) {
    auto w = r.line(op);
    if (w.size() >= 3 && w[1] == "0" && w[2] != "0") {
      EXPECT_EQ(r.value("meminfo", 2, meminfo_after_array), base - std::stoull(w[2])) << op << "\n" << r.out;
    }
    meminfo_after_array += 2;
  }
  // At the limit, every path is refused.
  EXPECT_EQ(r.rc("alloc"), CUDA_SUCCESS);
  EXPECT_EQ(r.rc("managed", 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(r.rc("pitch", 1), CUDA_ERROR_OUT_OF_MEMORY);
  if (!unsupported.empty()) {
    std::string list;
    for (auto& u : unsupported) list += u + " ";
    GTEST_SKIP() << "the simulator does not implement: " << list;
  }
}

// ---------------------------------------------------------------- a hostile tenant
//
// A process of the container can write the region file and set its own
// children's environment. docs/security.md lists what libvgpu holds against
// that, and these tests back each line.

// The allocation payload granting `mib` of GPU `gpu_uuid` to container "app".
std::string Payload(const std::string& gpu_uuid, int mib) {
  return R"({"version":1,"node":"n","containers":[{"name":"app","devices":[{"uuid":")" + gpu_uuid +
         R"(","memoryMiB":)" + std::to_string(mib) + R"(,"cores":0}]}]})";
}

class HostileTenantTest : public VgpuTest {
 protected:
  // A limits file granting `mib` on GPU 0, read-only as tessera run leaves it.
  std::string write_limits(int mib, const std::string& name = "limits.json") {
    const std::string path = dir_ + "/" + name;
    tmp_.Write(name, Payload(uuid(0), mib));
    chmod(path.c_str(), 0444);
    return path;
  }
};

// The attack of issue 19: fill the slice, raise the region's limit, zero its
// sums, allocate again. Without a limits file the process's own configuration
// (its environment at start) is the authority.
TEST_F(HostileTenantTest, ARewrittenRegionLimitAndZeroedSumsAreRestoredAndRefused) {
  // 1000 MiB: 300 MiB context + 700 fills it.
  ProbeRun r = run({"init", "ctx:0", "alloc:700", "tamper:81920", "alloc:1000", "meminfo", "allocb:1"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS) << r.out << r.err;
  EXPECT_EQ(r.rc("tamper"), 0) << r.out;
  EXPECT_EQ(r.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY) << r.out << r.err;
  EXPECT_EQ(r.rc("allocb"), CUDA_ERROR_OUT_OF_MEMORY) << r.out;
  EXPECT_EQ(r.value("meminfo", 3), 1000 * kMiB) << r.out;  // the view shows the real limit
  EXPECT_EQ(r.value("meminfo", 2), 0u) << r.out;           // and no free memory
  EXPECT_NE(r.err.find("the memory limit of " + uuid(0) + " was changed from outside libvgpu"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the usage sum of " + uuid(0) + " was changed from outside libvgpu"),
            std::string::npos)
      << r.err;
  // The region says what is true again (read while a process holds the same).
  start_holding({"init", "ctx:0", "alloc:700", "tamper:81920", "alloc:1000"},
                {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  EXPECT_EQ(region_usage(uuid(0)).first, 1000 * kMiB);
}

// Zeroing the slots as well: the process's own record of what it reserved
// says otherwise.
TEST_F(HostileTenantTest, ZeroedSlotsOfTheAllocatingProcessAreRestoredFromItsOwnRecord) {
  ProbeRun r = run({"init", "ctx:0", "alloc:700", "tamper:1000:slots", "alloc:500"},
                   {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY) << r.out << r.err;
  EXPECT_NE(r.err.find("this process's usage of " + uuid(0) + " was changed from outside libvgpu"),
            std::string::npos)
      << r.err;
}

// Another process empties every record while the holder keeps its memory, then
// starts a new process: the new one's first reservation consults NVML, which
// shows the holder's memory.
TEST_F(HostileTenantTest, ANewProcessAfterEveryRecordWasEmptiedIsRefusedOnTheDriversFigures) {
  const Env env{{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}};
  start_holding({"init", "ctx:0", "alloc:700"}, env);
  ASSERT_EQ(run({"tamper:1000:slots"}, env).rc("tamper"), 0);
  ASSERT_EQ(region_usage(uuid(0)).first, 0u);
  ProbeRun r = run({"init", "ctx:0", "alloc:500"}, env);
  EXPECT_NE(r.rc("ctx"), CUDA_SUCCESS) << r.out << r.err;  // even its context does not fit
  EXPECT_NE(r.rc("alloc"), CUDA_SUCCESS) << r.out;
  EXPECT_NE(r.err.find("the driver shows this container's processes holding"), std::string::npos) << r.err;
}

// The tenant starts a process with a larger limit in its environment: without
// a limits file, the stricter of its own and the container's first process's
// holds.
TEST_F(HostileTenantTest, AChildWithALargerLimitInItsEnvironmentGetsTheContainersLimit) {
  start_holding({"init", "ctx:0", "alloc:100"}, {{"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  ProbeRun r = run({"init", "ctx:0", "alloc:2000", "totalmem:0"}, {{"CUDA_DEVICE_MEMORY_LIMIT", "80g"}});
  EXPECT_EQ(r.rc("alloc"), CUDA_ERROR_OUT_OF_MEMORY) << r.out << r.err;
  EXPECT_EQ(r.value("totalmem", 2), 1000 * kMiB) << r.out;
}

// With a limits file, the environment does not count at all: not a larger
// TESSERA_ALLOCATION, not HAMi's variables, not CUDA_DISABLE_CONTROL, not a
// region rewritten to agree with them.
TEST_F(HostileTenantTest, ALimitsFileOutranksTheEnvironmentAndTheRegion) {
  const std::string limits = write_limits(1000);
  for (const Env& env : std::vector<Env>{
           {{"TESSERA_ALLOCATION", Payload(uuid(0), 81920)}},
           {{"CUDA_DEVICE_MEMORY_LIMIT", "80g"}},
           {{"CUDA_DISABLE_CONTROL", "true"}},
       }) {
    Env e = env;
    e["TESSERA_LIMITS"] = limits;
    SCOPED_TRACE(e.begin()->first);
    ProbeRun r = run({"init", "tamper:81920", "ctx:0", "alloc:2000", "totalmem:0", "count"}, e);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.rc("alloc"), CUDA_ERROR_OUT_OF_MEMORY) << r.out << r.err;
    EXPECT_EQ(r.value("totalmem", 2), 1000 * kMiB) << r.out;
    EXPECT_EQ(r.value("count", 2), 1u) << r.out;                // only the file's GPU
    EXPECT_NE(r.err.find(limits), std::string::npos) << r.err;  // a line says why
  }
}

// The limits file may appear after the process started (tessera-node writes it
// once it knows the pod): from then on it holds.
TEST_F(HostileTenantTest, ALimitsFileThatAppearsLaterAppliesFromThen) {
  const std::string limits = dir_ + "/later.json";
  const std::string go = dir_ + "/go";
  size_t h =
      spawn_holding({"init", "ctx:0", "alloc:2000", "ready", "waitfile:" + go, "sleep:150", "alloc:1000"},
                    {{"TESSERA_LIMITS", limits}});
  ASSERT_NE(wait_for(h, "ready").out.find("alloc 0\nready"), std::string::npos)  // before: no limit
      << held_[h].out << held_err();
  write_limits(1000, "later.json");
  tmp_.Write("go", "");
  Held& held = wait_for(h);
  EXPECT_NE(held.out.find("alloc 2\nholding"), std::string::npos)
      << held.out << held_err();  // after: refused
  EXPECT_NE(held_err().find("limits file " + limits + " appeared"), std::string::npos) << held_err();
  EXPECT_EQ(held_err().find("changed from outside libvgpu"), std::string::npos) << held_err();
}

// The window before tessera-node has written the node's limits file: the
// pod's own limits (the annotation bind wrote, a read-only Downward API file
// from the webhook) hold from the first call, not the environment the tenant
// sets, and a rewritten region changes nothing.
TEST_F(HostileTenantTest, ThePodsOwnLimitsHoldBeforeTheNodesFileExists) {
  const std::string pod_limits = write_limits(1000, "pod-limits.json");
  ProbeRun r = run({"init", "ctx:0", "alloc:700", "tamper:81920", "alloc:1000", "meminfo"},
                   {{"TESSERA_LIMITS", dir_ + "/not-yet.json"},
                    {"TESSERA_POD_LIMITS", pod_limits},
                    {"CUDA_DEVICE_MEMORY_LIMIT", "80g"},
                    {"CUDA_DISABLE_CONTROL", "true"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rc("alloc", 0), CUDA_SUCCESS) << r.out << r.err;
  EXPECT_EQ(r.rc("alloc", 1), CUDA_ERROR_OUT_OF_MEMORY) << r.out << r.err;
  EXPECT_EQ(r.value("meminfo", 3), 1000 * kMiB) << r.out;
  EXPECT_NE(r.err.find("the pod's own limits (" + pod_limits + ", read-only) apply"), std::string::npos)
      << r.err;
}

// A pod tessera did not place, under unplaced_pods: refuse: the node's file
// says so, and dropping TESSERA_UNPLACED_PODS from the environment does not
// bring the GPUs back.
TEST_F(HostileTenantTest, AnUnplacedPodsRefusalInTheLimitsFileHoldsWithoutItsVariable) {
  tmp_.Write("unplaced.json", R"({"version":1,"unplaced":"refuse"})");
  ProbeRun r = run({"init", "count", "ctx:0"},
                   {{"TESSERA_LIMITS", dir_ + "/unplaced.json"}, {"CUDA_DEVICE_MEMORY_LIMIT", "80g"}});
  EXPECT_EQ(r.value("count", 2), 0u) << r.out << r.err;
  EXPECT_NE(r.rc("ctx"), CUDA_SUCCESS) << r.out;
  EXPECT_NE(r.err.find("did not place this pod (refuse)"), std::string::npos) << r.err;
}

// The compute side (issue 19): a process that lifts its region's quota to
// 100 % and fills its budget, then launches, is still held to the limits
// file's cores: the limiter binds to the file's quota, puts the region's
// fields back (logged) and throttles the launches. Without the repair the
// 2^50 ns budget would admit every launch at once and nothing would wait.
TEST_F(HostileTenantTest, ARewrittenComputeQuotaAndBudgetAreRestoredAndHeld) {
  const std::string limits = dir_ + "/cores.json";
  tmp_.Write("cores.json", R"({"version":1,"node":"n","containers":[{"name":"app","devices":[{"uuid":")" +
                               uuid(0) + R"(","memoryMiB":1000,"cores":20}]}]})");
  chmod(limits.c_str(), 0444);
  // Lifted before the first launch, and again half-way.
  ProbeRun r = run({"init", "ctx:0", "ctamper", "busy:2000:20", "ctamper", "busy:2000:20"},
                   {{"TESSERA_LIMITS", limits},
                    {"CUDA_DEVICE_SM_LIMIT", "100"},
                    {"GPU_CORE_UTILIZATION_POLICY", "force"}});  // default would let a lone tenant burst
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rc("ctamper"), 0) << r.out;
  EXPECT_EQ(r.rc("busy"), CUDA_SUCCESS) << r.out << r.err;
  EXPECT_NE(r.err.find("the compute quota of " + uuid(0) + " was changed from outside libvgpu"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the compute budget of " + uuid(0) + " was changed from outside libvgpu"),
            std::string::npos)
      << r.err;
  tessera::vgpu::SharedRegion region;
  char err[256] = {};
  ASSERT_TRUE(region.open_file(region_.c_str(), err, sizeof(err))) << err;
  const auto& entry = region.raw()->devices[0];
  EXPECT_EQ(entry.core_quota_percent.load(), 20u);  // what the file says again
  // 80 ms of device time at 20 %: the limiter made the launches wait.
  EXPECT_GT(entry.throttled_ns.load(), 0u);
  EXPECT_LT(entry.budget_ns.load(), INT64_C(1) << 40);
}

// A limits file that is there but cannot be used: nothing is visible.
TEST_F(HostileTenantTest, AnInvalidLimitsFileLeavesNoGpuVisible) {
  tmp_.Write("bad.json", "{\"version\":1,");
  ProbeRun r = run({"init", "count", "ctx:0"},
                   {{"TESSERA_LIMITS", dir_ + "/bad.json"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1000m"}});
  EXPECT_EQ(r.value("count", 2), 0u) << r.out;
  EXPECT_NE(r.rc("ctx"), CUDA_SUCCESS) << r.out;
  EXPECT_NE(r.err.find("limits file " + dir_ + "/bad.json cannot be used"), std::string::npos) << r.err;
}

}  // namespace
