// Kernel time on the simulated device: sim_busy kernels occupy the GPU's
// shared timeline for the nanoseconds in their first parameter; events record
// device time; synchronisation blocks in wall time; two processes running
// kernels back to back each get about half of the device, and NVML's
// per-process utilisation says so.
#include <cuda.h>
#include <nvml.h>
#include <sys/time.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "sim_test_util.h"

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

CUfunction BusyKernel() {
  simtest::UseDevice(0);
  CUfunction f = simtest::SimKernel("sim_busy_spin");
  return f;
}

void Launch(CUfunction f, uint64_t ns, CUstream s) {
  void* args[] = {&ns};
  SIM_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr));
}

void EventsAndSynchronisation() {
  CUfunction f = BusyKernel();
  CUstream s;
  SIM_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent start, stop;
  SIM_OK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  SIM_OK(cuEventCreate(&stop, CU_EVENT_DEFAULT));

  // Three 20 ms kernels in stream order: 60 ms of device time between the events.
  const auto t0 = Clock::now();
  SIM_OK(cuEventRecord(start, s));
  for (int i = 0; i < 3; ++i) Launch(f, 20'000'000, s);
  SIM_OK(cuEventRecord(stop, s));
  SIM_CHECK_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  SIM_CHECK_EQ(cuEventQuery(stop), CUDA_ERROR_NOT_READY);
  float ms = 0;
  SIM_CHECK_EQ(cuEventElapsedTime(&ms, start, stop), CUDA_ERROR_NOT_READY);
  SIM_OK(cuEventSynchronize(stop));
  SIM_CHECK(MsSince(t0) >= 59.0);  // blocked in wall time until the work was done
  SIM_OK(cuEventQuery(stop));
  SIM_OK(cuStreamQuery(s));
  SIM_OK(cuEventElapsedTime(&ms, start, stop));
  SIM_CHECK(ms >= 59.9f && ms < 200.0f);

  // Other kernels take the configured default (10 µs).
  CUfunction plain = simtest::SimKernel("saxpy");
  SIM_OK(cuEventRecord(start, s));
  SIM_OK(cuLaunchKernel(plain, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
  SIM_OK(cuEventRecord(stop, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_OK(cuEventElapsedTime(&ms, start, stop));
  SIM_CHECK(ms >= 0.0099f && ms < 5.0f);

  // cuLaunchKernelEx and cooperative launches are timed the same way.
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = s;
  uint64_t ns = 30'000'000;
  void* args[] = {&ns};
  SIM_OK(cuEventRecord(start, s));
  SIM_OK(cuLaunchKernelEx(&cfg, f, args, nullptr));
  SIM_OK(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args));
  SIM_OK(cuEventRecord(stop, s));
  const auto t1 = Clock::now();
  SIM_OK(cuCtxSynchronize());
  SIM_CHECK(MsSince(t1) >= 55.0);
  SIM_OK(cuEventElapsedTime(&ms, start, stop));
  SIM_CHECK(ms >= 59.9f && ms < 200.0f);

  // Host functions run in stream order, after the work before them.
  static int64_t host_ran_at_ms = -1;
  const auto t2 = Clock::now();
  static Clock::time_point t2s;
  t2s = t2;
  Launch(f, 25'000'000, s);
  SIM_OK(cuLaunchHostFunc(
      s, [](void*) { host_ran_at_ms = static_cast<int64_t>(MsSince(t2s)); }, nullptr));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK(host_ran_at_ms >= 24);

  // A blocking stream waits for the legacy default stream (and vice versa).
  CUstream blocking;
  SIM_OK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  Launch(f, 20'000'000, nullptr);
  SIM_OK(cuEventRecord(start, blocking));
  Launch(f, 1'000, blocking);
  SIM_OK(cuEventRecord(stop, blocking));
  SIM_OK(cuEventSynchronize(stop));
  SIM_OK(cuStreamSynchronize(nullptr));
  SIM_OK(cuStreamDestroy(blocking));
  SIM_OK(cuEventDestroy(start));
  SIM_OK(cuEventDestroy(stop));
  SIM_OK(cuStreamDestroy(s));
}

// Child role: wait for "go", then launch 10 ms kernels back to back (each
// synchronised) for `ms` of wall time; print how many ran.
int BusyLoop(int ms) {
  SIM_OK(cuInit(0));
  CUfunction f = BusyKernel();
  std::printf("READY\n");
  std::fflush(stdout);
  char line[32];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 2;
  const auto t0 = Clock::now();
  int kernels = 0;
  while (MsSince(t0) < ms) {
    Launch(f, 10'000'000, nullptr);
    SIM_OK(cuStreamSynchronize(nullptr));
    ++kernels;
  }
  std::printf("KERNELS %d\n", kernels);
  std::fflush(stdout);
  return simtest::Failures() == 0 ? 0 : 1;
}

unsigned long long NowUs() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  return static_cast<unsigned long long>(tv.tv_sec) * 1000000ull + tv.tv_usec;
}

void TwoProcessesShareTheDevice() {
  simtest::Child a = simtest::SpawnSelf({"busy", "2000"});
  simtest::Child b = simtest::SpawnSelf({"busy", "2000"});
  SIM_CHECK(a.ReadLine() == "READY");
  SIM_CHECK(b.ReadLine() == "READY");
  a.Send("go");
  b.Send("go");

  // While both run, NVML reports each process at about half the device.
  std::this_thread::sleep_for(std::chrono::milliseconds(1400));
  nvmlDevice_t dev;
  SIM_OK(nvmlDeviceGetHandleByIndex(0, &dev));
  const unsigned long long since = NowUs() - 1'000'000;
  unsigned n = 0;
  SIM_CHECK_EQ(nvmlDeviceGetProcessUtilization(dev, nullptr, &n, since), NVML_ERROR_INSUFFICIENT_SIZE);
  SIM_CHECK_EQ(n, 2u);
  nvmlProcessUtilizationSample_t samples[8];
  n = 8;
  SIM_OK(nvmlDeviceGetProcessUtilization(dev, samples, &n, since));
  SIM_CHECK_EQ(n, 2u);
  for (unsigned i = 0; i < n && i < 8; ++i) {
    SIM_CHECK(static_cast<int>(samples[i].pid) == a.pid || static_cast<int>(samples[i].pid) == b.pid);
    SIM_CHECK(samples[i].smUtil >= 25 && samples[i].smUtil <= 75);
    SIM_CHECK(samples[i].timeStamp > since && samples[i].timeStamp <= NowUs());
  }
  nvmlUtilization_t util;
  SIM_OK(nvmlDeviceGetUtilizationRates(dev, &util));
  SIM_CHECK(util.gpu >= 50);  // wide: a loaded machine wakes the processes late
  // Nothing newer than "now".
  n = 8;
  SIM_CHECK_EQ(nvmlDeviceGetProcessUtilization(dev, samples, &n, NowUs() + 1'000'000), NVML_ERROR_NOT_FOUND);

  const std::string ra = a.ReadLine(), rb = b.ReadLine();
  SIM_CHECK_EQ(a.Wait(), 0);
  SIM_CHECK_EQ(b.Wait(), 0);
  const int ka = ra.rfind("KERNELS ", 0) == 0 ? std::stoi(ra.substr(8)) : 0;
  const int kb = rb.rfind("KERNELS ", 0) == 0 ? std::stoi(rb.substr(8)) : 0;
  // 2 s of 10 ms kernels on one device: at most ~200 in total (fewer when the
  // machine is loaded), about half each.
  SIM_CHECK(ka + kb >= 60 && ka + kb <= 210);
  SIM_CHECK(ka >= (ka + kb) * 3 / 10 && kb >= (ka + kb) * 3 / 10);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "busy") return BusyLoop(std::stoi(argv[2]));
  simtest::UseFreshState("1xA100-80GB", false);
  SIM_OK(cuInit(0));
  SIM_OK(nvmlInit());
  EventsAndSynchronisation();
  TwoProcessesShareTheDevice();
  SIM_OK(nvmlShutdown());
  return simtest::Finish("sim_timing_test");
}
