// Node-local paths: the directories and file names on a GPU machine that more
// than one tessera program agrees on — tessera-node (which mounts libvgpu and
// region directories into containers), `tessera run` (which gives its jobs the
// same library and a region of their own) and the tools that read them back.
// Configuration may override the directories; the file names are fixed.
#pragma once

#include <string>

namespace tessera::host {

// NVML's library, searched like the dynamic linker does.
inline constexpr const char* kNvmlLibraryName = "libnvidia-ml.so.1";
// libvgpu's file name, in an install's lib/ and in kDefaultInstallDir.
inline constexpr const char* kLibvgpuFileName = "libvgpu.so";
// Where tessera-node expects libvgpu on the host and mounts it in containers.
inline constexpr const char* kDefaultLibvgpuPath = "/usr/local/tessera/libvgpu.so";
// The region file libvgpu keeps inside a container's (or a job's) region directory.
inline constexpr const char* kRegionFileName = "vgpu.region";
// The host directory under which tessera-node makes one region directory per container.
inline constexpr const char* kDefaultRegionHostDir = "/var/lib/tessera/regions";

// Where `tessera run` records the slices running on this machine and keeps its
// jobs' region directories: $TESSERA_RUN_STATE if set, /run/tessera for root,
// else $XDG_RUNTIME_DIR/tessera, else /tmp/tessera-<uid>.
std::string DefaultRunStateDir();

}  // namespace tessera::host
