// The compute limiter inside libvgpu.so: binds the controller (controller.h)
// and the estimates (estimator.h) to the driver's launch entry points.
//
// Every launch hook calls before_launch() before handing the launch to the
// driver and after_launch() with the driver's answer:
//
//   compute::LaunchGate gate = compute::before_launch(rt, f, stream, per_thread);
//   CUresult rc = <real launch>;
//   compute::after_launch(gate, rc);
//
// before_launch() waits (sleeping) while the container's budget on the
// launch's device is spent, and charges the launch its estimated device time;
// after_launch() takes the charge back if the driver refused the launch. One
// launch in Estimates::kSampleEvery (and the first ones of a kernel) is
// measured with a pair of timing events recorded around it; completed samples
// are read (cuEventQuery, never a blocking call) on later launches and while
// waiting, and correct the charges.
//
// A process whose container has no compute quota on any device (or whose
// policy is `disable`, or CUDA_DISABLE_CONTROL) pays one atomic load per
// launch: no system call, no driver call.
//
// Thread-safety: any thread. Nothing here holds a lock while waiting, and
// nothing waits for GPU work, so a launch made from a host callback or while
// the application holds its own locks cannot deadlock on the limiter.
#pragma once

#include <cstdint>

#include "vgpu/cuda_decls.h"

namespace tessera::vgpu {
class Runtime;
}

namespace tessera::vgpu::compute {

struct LaunchGate {
  int device = -1;  // region device index; -1 = not limited
  int sample = -1;  // sample slot recording this launch; -1 = not sampled
  void* entry = nullptr;
  CUstream stream = nullptr;  // as given to the driver (CU_STREAM_PER_THREAD for _ptsz's null stream)
  uint64_t charged = 0;
};

// `key` identifies what runs: the CUfunction (or CUkernel), or the CUgraphExec.
LaunchGate before_launch(Runtime& rt, const void* key, CUstream stream, bool per_thread);
void after_launch(const LaunchGate& gate, CUresult rc);

}  // namespace tessera::vgpu::compute
