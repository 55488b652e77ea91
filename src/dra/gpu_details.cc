#include "dra/gpu_details.h"

#include <dlfcn.h>
#include <nvml.h>

#include <cctype>
#include <cstdio>

namespace tessera::dra {
namespace {

const char* ArchitectureName(unsigned arch) {
  switch (arch) {
    case NVML_DEVICE_ARCH_KEPLER:
      return "Kepler";
    case NVML_DEVICE_ARCH_MAXWELL:
      return "Maxwell";
    case NVML_DEVICE_ARCH_PASCAL:
      return "Pascal";
    case NVML_DEVICE_ARCH_VOLTA:
      return "Volta";
    case NVML_DEVICE_ARCH_TURING:
      return "Turing";
    case NVML_DEVICE_ARCH_AMPERE:
      return "Ampere";
    case NVML_DEVICE_ARCH_ADA:
      return "Ada Lovelace";
    case NVML_DEVICE_ARCH_HOPPER:
      return "Hopper";
    case NVML_DEVICE_ARCH_BLACKWELL:
      return "Blackwell";
    default:
      return "";
  }
}

template <typename F>
F Symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(::dlsym(handle, name));
}

}  // namespace

std::string ToSemver(const std::string& version) {
  std::vector<unsigned long> parts;
  std::string digits;
  for (size_t i = 0; i <= version.size(); ++i) {
    if (i == version.size() || version[i] == '.') {
      if (digits.empty() || digits.size() > 9) return "";
      parts.push_back(std::stoul(digits));
      digits.clear();
    } else if (std::isdigit(static_cast<unsigned char>(version[i]))) {
      digits += version[i];
    } else {
      return "";
    }
  }
  if (parts.empty() || parts.size() > 3) return "";
  while (parts.size() < 3) parts.push_back(0);
  return std::to_string(parts[0]) + "." + std::to_string(parts[1]) + "." + std::to_string(parts[2]);
}

Result<SystemDetails> ReadSystemDetails(const std::string& nvml_library) {
  void* handle = ::dlopen(nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return Error{"cannot load NVML '" + nvml_library + "': " + ::dlerror()};
  auto init = Symbol<decltype(&nvmlInit_v2)>(handle, "nvmlInit_v2");
  auto shutdown = Symbol<decltype(&nvmlShutdown)>(handle, "nvmlShutdown");
  auto count = Symbol<decltype(&nvmlDeviceGetCount_v2)>(handle, "nvmlDeviceGetCount_v2");
  auto by_index = Symbol<decltype(&nvmlDeviceGetHandleByIndex_v2)>(handle, "nvmlDeviceGetHandleByIndex_v2");
  auto uuid = Symbol<decltype(&nvmlDeviceGetUUID)>(handle, "nvmlDeviceGetUUID");
  auto driver = Symbol<decltype(&nvmlSystemGetDriverVersion)>(handle, "nvmlSystemGetDriverVersion");
  auto cuda = Symbol<decltype(&nvmlSystemGetCudaDriverVersion)>(handle, "nvmlSystemGetCudaDriverVersion");
  auto arch = Symbol<decltype(&nvmlDeviceGetArchitecture)>(handle, "nvmlDeviceGetArchitecture");
  auto pci = Symbol<decltype(&nvmlDeviceGetPciInfo_v3)>(handle, "nvmlDeviceGetPciInfo_v3");
  auto cc =
      Symbol<decltype(&nvmlDeviceGetCudaComputeCapability)>(handle, "nvmlDeviceGetCudaComputeCapability");
  if (!init || !shutdown || !count || !by_index || !uuid) {
    ::dlclose(handle);
    return Error{"NVML '" + nvml_library + "' lacks nvmlInit_v2, nvmlDeviceGetCount_v2 or nvmlDeviceGetUUID"};
  }
  if (init() != NVML_SUCCESS) {
    ::dlclose(handle);
    return Error{"nvmlInit failed"};
  }
  SystemDetails out;
  char text[96] = {};
  if (driver && driver(text, sizeof(text)) == NVML_SUCCESS) out.driver_version = text;
  int cuda_version = 0;
  if (cuda && cuda(&cuda_version) == NVML_SUCCESS && cuda_version > 0) {
    out.cuda_driver_version =
        std::to_string(cuda_version / 1000) + "." + std::to_string((cuda_version % 1000) / 10);
  }
  unsigned n = 0;
  if (count(&n) == NVML_SUCCESS) {
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t device{};
      if (by_index(i, &device) != NVML_SUCCESS) continue;
      GpuDetails g;
      char id[96] = {};
      if (uuid(device, id, sizeof(id)) == NVML_SUCCESS) g.uuid = id;
      nvmlDeviceArchitecture_t a{};
      if (arch && arch(device, &a) == NVML_SUCCESS) g.architecture = ArchitectureName(a);
      nvmlPciInfo_t info{};
      if (pci && pci(device, &info) == NVML_SUCCESS) {
        std::string bus = info.busId;
        for (auto& c : bus) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        // NVML's 8-digit domain ("00000000:3b:00.0") in the kernel's 4-digit form.
        if (bus.size() == 16 && bus.compare(0, 4, "0000") == 0) bus = bus.substr(4);
        g.pci_bus_id = bus;
      }
      int major = 0, minor = 0;
      if (cc && cc(device, &major, &minor) == NVML_SUCCESS) {
        g.compute_capability = std::to_string(major) + "." + std::to_string(minor);
      }
      out.gpus.push_back(std::move(g));
    }
  }
  shutdown();
  ::dlclose(handle);
  return out;
}

}  // namespace tessera::dra
