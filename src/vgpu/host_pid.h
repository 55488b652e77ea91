// This process's pid in the driver's pid namespace, when libvgpu can know it.
//
// NVML reports processes by their pid in the initial ("host") pid namespace:
// the kernel driver sees every task there. Inside a Kubernetes pod getpid()
// is the pod's pid, so libvgpu cannot match NVML's per-process figures to its
// own processes unless it knows the host pid. It knows it in one case only:
// when its own pid namespace *is* the initial one. That is decided by the
// inode of /proc/self/ns/pid: the kernel gives the initial pid namespace the
// fixed inode number 0xEFFFFFFC (PROC_PID_INIT_INO, include/linux/proc_ns.h,
// since Linux 3.8); every other namespace gets a dynamically allocated one
// (0xF0000000 and above). Comparing /proc/self/ns/pid with /proc/1/ns/pid
// proves nothing (inside a container pid 1 is the container's init), and
// /proc/self/status NSpid having one entry only says /proc was mounted from
// our own namespace, which is also true in every container.
//
// Elsewhere (a container) the answer is 0 = unknown, and the node agent, which
// runs in the host's namespace, writes the host pid into the process's region
// slot (docs/region.md, ProcessSlot::host_pid).
//
// Thread-safe, no allocation, no exceptions.
#pragma once

#include <cstdint>

namespace tessera::vgpu {

// The inode number of the initial pid namespace.
inline constexpr uint64_t kInitialPidNamespaceInode = 0xEFFFFFFCull;

// Whether the calling process lives in the initial pid namespace, judged from
// `<proc_root>/self/ns/pid`. False when that cannot be read.
bool in_initial_pid_namespace(const char* proc_root = "/proc");

// getpid() when the calling process lives in the initial pid namespace (so the
// driver reports it under that pid), else 0.
uint32_t host_pid_of_self(const char* proc_root = "/proc");

}  // namespace tessera::vgpu
