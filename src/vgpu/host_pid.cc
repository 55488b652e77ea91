#include "vgpu/host_pid.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace tessera::vgpu {

bool in_initial_pid_namespace(const char* proc_root) {
  char path[256];
  if (snprintf(path, sizeof(path), "%s/self/ns/pid", proc_root) >= static_cast<int>(sizeof(path)))
    return false;
  struct stat st {};
  if (stat(path, &st) != 0) return false;  // no /proc, an old kernel, or /proc of another namespace
  return static_cast<uint64_t>(st.st_ino) == kInitialPidNamespaceInode;
}

uint32_t host_pid_of_self(const char* proc_root) {
  return in_initial_pid_namespace(proc_root) ? static_cast<uint32_t>(getpid()) : 0;
}

}  // namespace tessera::vgpu
