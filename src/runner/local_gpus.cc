#include "runner/local_gpus.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "contract/container_contract.h"
#include "host/nvml_api.h"
#include "host/nvml_inventory.h"
#include "host/paths.h"

namespace tessera::runner {
namespace {

namespace fs = std::filesystem;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

Result<std::vector<core::Gpu>> DiscoverWith(std::unique_ptr<host::NvmlLibrary> library) {
  const host::NvmlApi& api = library->api();
  host::NvmlInventory inventory(api, std::move(library));
  return inventory.Discover();
}

}  // namespace

InstallPaths DiscoverInstallPaths() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  fs::path bin = ec ? fs::current_path() : exe.parent_path();
  fs::path prefix = bin.parent_path();
  InstallPaths p;
  p.bin_dir = bin.string();
  p.libvgpu = EnvOr("TESSERA_LIBVGPU", (prefix / "lib" / host::kLibvgpuFileName).string());
  p.sim_lib_dir = EnvOr("TESSERA_SIM_LIB_DIR", (prefix / "lib" / "sim").string());
  return p;
}

Result<LocalGpus> OpenLocalGpus(const LocalGpuOptions& options, const InstallPaths& paths) {
  LocalGpus out;
  if (!options.sim_spec) {
    auto real = host::NvmlLibrary::Load(host::kNvmlLibraryName);
    if (real.ok()) {
      out.nvml_library = host::kNvmlLibraryName;
      TESSERA_ASSIGN_OR_RETURN_WRAP(out.gpus, DiscoverWith(std::move(real).value()),
                                    "cannot list the GPUs through NVML");
      return out;
    }
    out.note = "tessera: no NVIDIA driver found (no libnvidia-ml.so.1); using the simulated GPU " +
               EnvOr(contract::kSimGpusEnv, options.default_sim_spec) + " (choose with --sim SPEC)";
  }

  out.simulated = true;
  // An explicit --sim wins; otherwise an inherited TESSERA_SIM_GPUS (as set by
  // a parent `tessera demo`) keeps every invocation on the same simulated node.
  out.sim_spec =
      options.sim_spec ? *options.sim_spec : EnvOr(contract::kSimGpusEnv, options.default_sim_spec);
  ::setenv(contract::kSimGpusEnv, out.sim_spec.c_str(), 1);
  const std::string lib = paths.sim_lib_dir + "/" + host::kNvmlLibraryName;
  if (!fs::exists(lib)) {
    return Error{"the simulated GPU library " + lib +
                 " is missing; build tessera first (make) or set TESSERA_SIM_LIB_DIR"};
  }
  out.nvml_library = lib;
  TESSERA_ASSIGN_OR_RETURN_WRAP(std::unique_ptr<host::NvmlLibrary> sim, host::NvmlLibrary::Load(lib),
                                "cannot load the simulated GPU");
  TESSERA_ASSIGN_OR_RETURN_WRAP(out.gpus, DiscoverWith(std::move(sim)),
                                "the simulated GPU " + out.sim_spec + " did not start");
  out.job_env[contract::kSimGpusEnv] = out.sim_spec;
  if (const char* state = std::getenv(contract::kSimStateEnv); state && *state) {
    out.job_env[contract::kSimStateEnv] = state;
  }
  out.job_path_env["LD_LIBRARY_PATH"] = paths.sim_lib_dir;
  return out;
}

Result<LocalMig> OpenLocalMig(const LocalGpus& local) {
  LocalMig out;
  TESSERA_ASSIGN_OR_RETURN(out.library, host::NvmlLibrary::Load(local.nvml_library));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<host::NvmlMigDriver> driver,
                           host::NvmlMigDriver::Load(out.library->api(), local.nvml_library));
  out.driver = std::move(driver);
  return out;
}

}  // namespace tessera::runner
