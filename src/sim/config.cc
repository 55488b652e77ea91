#include "sim/config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tessera::sim {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string KnownModels() {
  std::string out;
  for (const std::string& k : ModelKeys()) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// Default topology: GPUs of NVLink-capable models are all connected to each
// other (an NVSwitch board); larger machines split GPUs over two NUMA nodes.
void ApplyDefaults(SimConfig& c, bool default_links, bool default_numa) {
  const int n = static_cast<int>(c.gpus.size());
  for (int i = 0; i < n; ++i) {
    SimGpuConfig& g = c.gpus[i];
    if (g.memory_mib == 0) g.memory_mib = g.model->memory_mib;
    if (g.sm_count == 0) g.sm_count = g.model->sm_count;
    if (default_numa) g.numa_node = (n >= 4 && i >= n / 2) ? 1 : 0;
  }
  if (default_links) {
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        const GpuModel* a = c.gpus[i].model;
        const GpuModel* b = c.gpus[j].model;
        if (a == b && a->nvlink_count > 0) c.nvlinks.push_back({i, j, 1});
      }
    }
  }
}

}  // namespace

std::string SimConfig::Canonical() const {
  std::ostringstream o;
  for (const SimGpuConfig& g : gpus) {
    o << g.model->key << ":" << g.memory_mib << ":" << g.sm_count << ":" << g.numa_node << ":"
      << (g.mig_enabled ? 1 : 0) << ":" << g.uuid << ";";
  }
  o << "links=";
  for (const NvlinkPair& p : nvlinks) o << p.a << "-" << p.b << "x" << p.links << ",";
  o << ";ctx=" << context_overhead_mib << ";bw=" << copy_bandwidth_mb_per_s << ";kernel=" << default_kernel_ns
    << ";drv=" << driver_version;
  if (managed_oversubscription) o << ";managed_oversubscription";  // absent when off: older states stay equal
  return o.str();
}

Result<SimConfig> ParseGpuList(const std::string& list) {
  SimConfig c;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = Trim(item);
    if (item.empty()) continue;
    int count = 1;
    std::string model = item;
    size_t x = item.find_first_of("xX");
    if (x != std::string::npos && x > 0 && item.find_first_not_of("0123456789") == x) {  // "<digits>x<model>"
      count = std::atoi(item.substr(0, x).c_str());
      model = Trim(item.substr(x + 1));
    }
    if (count <= 0 || count > 16) {
      return Error{"TESSERA_SIM_GPUS: bad count in '" + item + "' (1..16)"};
    }
    const GpuModel* m = FindModel(model);
    if (m == nullptr) {
      return Error{"TESSERA_SIM_GPUS: unknown GPU model '" + model + "' (known: " + KnownModels() + ")"};
    }
    for (int i = 0; i < count; ++i) {
      SimGpuConfig gc;
      gc.model = m;
      c.gpus.push_back(gc);
    }
  }
  if (c.gpus.empty()) return Error{"TESSERA_SIM_GPUS: no GPUs in '" + list + "'"};
  if (c.gpus.size() > 16) return Error{"TESSERA_SIM_GPUS: at most 16 GPUs are simulated"};
  ApplyDefaults(c, true, true);
  return c;
}

Result<SimConfig> ParseYamlConfig(const std::string& yaml_text) {
  try {
    YAML::Node root = YAML::Load(yaml_text);
    if (!root.IsMap()) return Error{"TESSERA_SIM_CONFIG: expected a YAML mapping with 'gpus:'"};
    SimConfig c;
    bool any_numa = false;
    const YAML::Node gpus = root["gpus"];
    if (!gpus || !gpus.IsSequence() || gpus.size() == 0) {
      return Error{"TESSERA_SIM_CONFIG: 'gpus' must be a non-empty list"};
    }
    for (const YAML::Node& g : gpus) {
      std::string model = g.IsScalar() ? g.as<std::string>() : g["model"].as<std::string>("");
      const GpuModel* m = FindModel(model);
      if (m == nullptr) {
        return Error{"TESSERA_SIM_CONFIG: unknown GPU model '" + model + "' (known: " + KnownModels() + ")"};
      }
      SimGpuConfig gc;
      gc.model = m;
      int count = 1;
      if (g.IsMap()) {
        count = g["count"].as<int>(1);
        gc.memory_mib = g["memory_mib"].as<uint64_t>(0);
        gc.sm_count = g["sm_count"].as<uint32_t>(0);
        if (g["numa_node"]) {
          gc.numa_node = g["numa_node"].as<int>();
          any_numa = true;
        }
        gc.mig_enabled = g["mig"].as<bool>(false);
        gc.uuid = g["uuid"].as<std::string>("");
        if (gc.mig_enabled && m->mig_memory_slices == 0) {
          return Error{"TESSERA_SIM_CONFIG: model " + m->key + " does not support MIG"};
        }
        if (!gc.uuid.empty() && count != 1) {
          return Error{"TESSERA_SIM_CONFIG: 'uuid' needs count 1"};
        }
        if (!gc.uuid.empty() && gc.uuid.rfind("GPU-", 0) != 0) {
          return Error{"TESSERA_SIM_CONFIG: uuid '" + gc.uuid + "' must start with 'GPU-'"};
        }
      }
      if (count <= 0 || count > 16) return Error{"TESSERA_SIM_CONFIG: 'count' must be 1..16"};
      for (int i = 0; i < count; ++i) c.gpus.push_back(gc);
    }
    if (c.gpus.size() > 16) return Error{"TESSERA_SIM_CONFIG: at most 16 GPUs are simulated"};
    const int n = static_cast<int>(c.gpus.size());
    bool explicit_links = false;
    if (const YAML::Node links = root["nvlink"]) {
      explicit_links = true;
      for (const YAML::Node& p : links) {
        if (!p.IsSequence() || p.size() < 2) {
          return Error{"TESSERA_SIM_CONFIG: nvlink entries are [a, b] or [a, b, links]"};
        }
        NvlinkPair pair{p[0].as<int>(), p[1].as<int>(), p.size() > 2 ? p[2].as<int>() : 1};
        if (pair.a < 0 || pair.b < 0 || pair.a >= n || pair.b >= n || pair.a == pair.b) {
          return Error{"TESSERA_SIM_CONFIG: nvlink pair names a GPU that does not exist"};
        }
        c.nvlinks.push_back(pair);
      }
    }
    c.context_overhead_mib = root["context_overhead_mib"].as<uint64_t>(c.context_overhead_mib);
    c.copy_bandwidth_mb_per_s = root["copy_bandwidth_mb_per_s"].as<uint64_t>(c.copy_bandwidth_mb_per_s);
    if (c.copy_bandwidth_mb_per_s == 0) {
      return Error{"TESSERA_SIM_CONFIG: copy_bandwidth_mb_per_s must be > 0"};
    }
    c.default_kernel_ns = root["default_kernel_us"].as<uint64_t>(c.default_kernel_ns / 1000) * 1000;
    c.managed_oversubscription = root["managed_oversubscription"].as<bool>(false);
    ApplyDefaults(c, !explicit_links, !any_numa);
    return c;
  } catch (const std::exception& e) {
    return Error{std::string("TESSERA_SIM_CONFIG: invalid YAML: ") + e.what()};
  }
}

Result<SimConfig> ConfigFromEnvironment(bool* explicit_out) {
  if (explicit_out) *explicit_out = true;
  if (const char* cfg = std::getenv("TESSERA_SIM_CONFIG"); cfg != nullptr && *cfg != '\0') {
    std::ifstream f(cfg);
    if (f) {
      std::stringstream buf;
      buf << f.rdbuf();
      return ParseYamlConfig(buf.str());
    }
    return ParseYamlConfig(cfg);
  }
  if (const char* gpus = std::getenv("TESSERA_SIM_GPUS"); gpus != nullptr && *gpus != '\0') {
    return ParseGpuList(gpus);
  }
  if (explicit_out) *explicit_out = false;
  return ParseGpuList("1xA100-40GB");
}

}  // namespace tessera::sim
