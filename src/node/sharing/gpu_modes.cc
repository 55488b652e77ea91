#include "node/sharing/gpu_modes.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "node/mig/mig_settings.h"

namespace tessera::node::sharing {
namespace {

using core::SharingMode;

GpuMode ModeFrom(SharingMode mode, std::string source) {
  GpuMode out;
  out.mode = mode;
  out.source = std::move(source);
  return out;
}

bool AllDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string part = text.substr(begin, end - begin);
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    parts.push_back(part);
    begin = end + 1;
  }
  return parts;
}

// GFD's product label: the model with spaces as '-'.
std::string GfdProduct(std::string model) {
  std::replace(model.begin(), model.end(), ' ', '-');
  return model;
}

// A rule's `gpus`, parsed.
struct Selector {
  bool all = false;
  std::set<int> indices;
  std::set<std::string> uuids;
  std::string model;

  bool Matches(const core::Gpu& gpu) const {
    return all || indices.count(gpu.index) > 0 || uuids.count(gpu.uuid) > 0 ||
           (!model.empty() && (model == gpu.model || model == GfdProduct(gpu.model)));
  }
  bool ByIndexOnly() const { return all || (uuids.empty() && model.empty()); }
};

Result<Selector> ParseSelector(const std::string& text, const std::string& where) {
  Selector selector;
  if (text == "all") {
    selector.all = true;
    return selector;
  }
  if (text.empty()) return Error{where + " must name GPUs: all, indices (\"0,2\"), UUIDs or a model name"};
  const auto parts = SplitCommas(text);
  const bool listed = std::all_of(parts.begin(), parts.end(),
                                  [](const std::string& p) { return AllDigits(p) || p.starts_with("GPU-"); });
  if (!listed) {
    selector.model = text;  // a model name may hold anything but is one name
    return selector;
  }
  for (const auto& part : parts) {
    if (AllDigits(part)) {
      if (part.size() > 4 || std::stoi(part) > 1023)
        return Error{where + ": GPU index '" + part + "' is too large"};
      selector.indices.insert(std::stoi(part));
    } else {
      selector.uuids.insert(part);
    }
  }
  return selector;
}

Result<std::string> ScalarText(const YAML::Node& node, const std::string& where) {
  if (!node.IsScalar()) return Error{where + " must be a single value"};
  return node.Scalar();
}

Result<int64_t> IntegerValue(const YAML::Node& node, const std::string& where, int64_t min, int64_t max) {
  const std::string text = node.IsScalar() ? node.Scalar() : "";
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (!node.IsScalar() || text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return Error{where + " must be an integer, got '" + (node.IsScalar() ? text : "a collection") + "'"};
  }
  if (value < min || value > max) {
    return Error{where + " must be between " + std::to_string(min) + " and " + std::to_string(max) +
                 ", got " + text};
  }
  return value;
}

Result<bool> BoolValue(const YAML::Node& node, const std::string& where) {
  const std::string text = node.IsScalar() ? node.Scalar() : "";
  if (text == "true") return true;
  if (text == "false") return false;
  return Error{where + " must be true or false, got '" + text + "'"};
}

// The name check of node/config.cc's resource_name, in short: <domain>/<name>.
Status CheckResourceName(const std::string& name, const std::string& where) {
  auto slash = name.find('/');
  auto ok_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
  };
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size() ||
      name.find('/', slash + 1) != std::string::npos ||
      name.substr(0, slash).find('.') == std::string::npos ||
      !std::all_of(name.begin(), name.end(), [&](char c) { return ok_char(c) || c == '/'; })) {
    return Error{where + " '" + name + "' must be '<domain>/<name>', e.g. nvidia.com/gpu.shared"};
  }
  return Status::Ok();
}

Result<SharingRule> ParseRule(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) return Error{where + " must be a mapping {gpus, mode, ...}"};
  SharingRule rule;
  if (!node["gpus"]) return Error{where + ".gpus is missing: all, indices (\"0,2\"), UUIDs or a model name"};
  if (!node["mode"]) return Error{where + ".mode is missing: " + std::string(core::kSharingModeList)};
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const std::string at = where + "." + key;
    const YAML::Node value = entry.second;
    if (key == "gpus") {
      if (value.IsSequence()) {
        for (size_t i = 0; i < value.size(); ++i) {
          TESSERA_ASSIGN_OR_RETURN(std::string item,
                                   ScalarText(value[i], at + "[" + std::to_string(i) + "]"));
          rule.gpus += (i == 0 ? "" : ",") + item;
        }
      } else {
        TESSERA_ASSIGN_OR_RETURN(rule.gpus, ScalarText(value, at));
      }
    } else if (key == "mode") {
      TESSERA_ASSIGN_OR_RETURN(const std::string text, ScalarText(value, at));
      auto mode = core::ParseSharingMode(text);
      if (!mode)
        return Error{at + " must be " + std::string(core::kSharingModeList) + ", got '" + text + "'"};
      rule.mode = *mode;
    } else if (key == "replicas") {
      TESSERA_ASSIGN_OR_RETURN(const int64_t n, IntegerValue(value, at, 0, 1024));
      rule.replicas = static_cast<int>(n);
    } else if (key == "resource") {
      TESSERA_ASSIGN_OR_RETURN(rule.resource, ScalarText(value, at));
      TESSERA_RETURN_IF_ERROR(CheckResourceName(rule.resource, at));
    } else if (key == "rename_by_default") {
      TESSERA_ASSIGN_OR_RETURN(rule.rename_by_default, BoolValue(value, at));
    } else if (key == "fail_requests_greater_than_one") {
      TESSERA_ASSIGN_OR_RETURN(const bool fail, BoolValue(value, at));
      rule.fail_requests_greater_than_one = fail;
    } else if (key == "memory_split") {
      TESSERA_ASSIGN_OR_RETURN(const std::string text, ScalarText(value, at));
      if (text == "equal") {
        rule.memory_split = MemorySplit::kEqual;
      } else if (text != "none") {
        return Error{at + " must be none or equal, got '" + text + "'"};
      }
    } else if (key == "mps_active_thread_percentage") {
      TESSERA_ASSIGN_OR_RETURN(const int64_t pct, IntegerValue(value, at, 1, 100));
      rule.mps_active_thread_percentage = static_cast<int>(pct);
    } else if (key == "mps_pinned_memory_mib") {
      TESSERA_ASSIGN_OR_RETURN(rule.mps_pinned_memory_mib, IntegerValue(value, at, 1, int64_t{1} << 20));
    } else {
      return Error{where + ": unknown key '" + key +
                   "' (gpus, mode, replicas, resource, rename_by_default, fail_requests_greater_than_one, "
                   "memory_split, mps_active_thread_percentage, mps_pinned_memory_mib)"};
    }
    seen.insert(key);
  }
  TESSERA_RETURN_IF_ERROR(ParseSelector(rule.gpus, where + ".gpus"));
  const std::string mode = core::SharingModeName(rule.mode);
  auto only = [&](const std::string& key, std::initializer_list<SharingMode> modes) -> Status {
    if (seen.count(key) == 0) return Status::Ok();
    if (std::find(modes.begin(), modes.end(), rule.mode) != modes.end()) return Status::Ok();
    std::string names;
    for (SharingMode m : modes)
      names += (names.empty() ? "" : " and ") + std::string(core::SharingModeName(m));
    return Error{where + "." + key + " applies to mode " + names + " only, not " + mode};
  };
  TESSERA_RETURN_IF_ERROR(only("replicas", {SharingMode::kTimeslice, SharingMode::kMps}));
  TESSERA_RETURN_IF_ERROR(only("resource", {SharingMode::kTimeslice, SharingMode::kMps}));
  TESSERA_RETURN_IF_ERROR(only("rename_by_default", {SharingMode::kTimeslice, SharingMode::kMps}));
  TESSERA_RETURN_IF_ERROR(
      only("fail_requests_greater_than_one", {SharingMode::kTimeslice, SharingMode::kMps}));
  TESSERA_RETURN_IF_ERROR(only("memory_split", {SharingMode::kTimeslice}));
  TESSERA_RETURN_IF_ERROR(only("mps_active_thread_percentage", {SharingMode::kMps}));
  TESSERA_RETURN_IF_ERROR(only("mps_pinned_memory_mib", {SharingMode::kMps}));
  if (rule.mode == SharingMode::kTimeslice && rule.replicas < 1) {
    return Error{where + ".replicas must be at least 1 for mode timeslice (replicas per GPU)"};
  }
  if (rule.mode == SharingMode::kMps && rule.replicas == 0) {
    for (const char* key : {"resource", "rename_by_default", "fail_requests_greater_than_one",
                            "mps_active_thread_percentage", "mps_pinned_memory_mib"}) {
      if (seen.count(key) > 0) {
        return Error{where + "." + key +
                     " sizes NVIDIA-style MPS replicas: set replicas (without it, tessera-scheduler sizes "
                     "each client from its request)"};
      }
    }
  }
  if (!rule.resource.empty() && rule.rename_by_default) {
    return Error{where + ": resource and rename_by_default both name the replicas' resource; set one"};
  }
  if (core::IsMigMode(rule.mode) && !ParseSelector(rule.gpus, "").value().ByIndexOnly()) {
    return Error{where + ".gpus '" + rule.gpus + "': mode " + mode +
                 " selects GPUs by index or all (as mig_gpus and mig_dynamic_gpus do)"};
  }
  return rule;
}

// One GPU's mode as one input claims it.
struct Claim {
  GpuMode mode;
  bool weak = false;  // NVIDIA's "all": yields to every explicit claim
  const SharingRule* rule = nullptr;
};

std::string Describe(const core::Gpu& gpu) {
  return "GPU " + std::to_string(gpu.index) + " (" + gpu.uuid + ")";
}

std::string IndexList(const std::vector<const core::Gpu*>& gpus) {
  std::string out;
  for (const auto* gpu : gpus) out += (out.empty() ? "" : ", ") + std::to_string(gpu->index);
  return out;
}

}  // namespace

Result<std::vector<SharingRule>> ParseSharingRules(std::string_view yaml_text) {
  std::vector<SharingRule> rules;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Error{std::string("sharing is not valid YAML: ") + e.what()};
  }
  if (!root || root.IsNull()) return rules;
  if (!root.IsSequence()) {
    return Error{"sharing must be a list of rules, e.g. [{gpus: \"0\", mode: timeslice, replicas: 4}]"};
  }
  try {
    for (size_t i = 0; i < root.size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(SharingRule rule, ParseRule(root[i], "sharing[" + std::to_string(i) + "]"));
      rules.push_back(std::move(rule));
    }
  } catch (const YAML::Exception& e) {
    return Error{std::string("sharing: ") + e.what()};
  }
  return rules;
}

Status ValidateSharingSettings(const NodeConfig& config) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<SharingRule> rules, ParseSharingRules(config.sharing));
  if (!config.nvidia_config_file.empty() && config.nvidia_config_file.front() != '/') {
    return Error{"nvidia_config_file must be an absolute path, got '" + config.nvidia_config_file + "'"};
  }
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].mode == SharingMode::kMigStatic && config.mig_layout_file.empty()) {
      return Error{"sharing[" + std::to_string(i) +
                   "] puts GPUs in mode mig, which follows a layout: set mig_layout_file"};
    }
  }
  return Status::Ok();
}

Status FoldMigRules(NodeConfig& config) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<SharingRule> rules, ParseSharingRules(config.sharing));
  struct Fold {
    SharingMode mode;
    std::string* key;
    const char* name;
    const char* unset;  // the key's default: a rule may replace only that
  };
  for (const Fold& fold :
       {Fold{SharingMode::kMigStatic, &config.mig_gpus, "mig_gpus", "all"},
        Fold{SharingMode::kMigDynamic, &config.mig_dynamic_gpus, "mig_dynamic_gpus", "none"}}) {
    bool all = false;
    std::set<int> indices;
    std::string sources;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (rules[i].mode != fold.mode) continue;
      const Selector selector = ParseSelector(rules[i].gpus, "").value();
      all = all || selector.all;
      indices.insert(selector.indices.begin(), selector.indices.end());
      sources += (sources.empty() ? "" : ", ") + ("sharing[" + std::to_string(i) + "]");
    }
    if (sources.empty()) continue;
    std::string folded = "all";
    if (!all) {
      folded.clear();
      for (int index : indices) folded += (folded.empty() ? "" : ",") + std::to_string(index);
    }
    if (*fold.key != fold.unset && *fold.key != folded) {
      return Error{std::string(fold.name) + " is '" + *fold.key + "' and " + sources + " (mode " +
                   core::SharingModeName(fold.mode) + ") select '" + folded +
                   "': say which GPUs are in this mode in one place"};
    }
    *fold.key = folded;
  }
  return Status::Ok();
}

const GpuMode* ModeAssignment::Find(const std::string& uuid) const {
  for (const auto& gpu : gpus) {
    if (gpu.uuid == uuid) return &gpu;
  }
  return nullptr;
}

std::map<std::string, std::vector<GpuMode>> ModeAssignment::ReplicaResources() const {
  std::map<std::string, std::vector<GpuMode>> out;
  for (const auto& gpu : gpus) {
    if ((gpu.mode == SharingMode::kTimeslice || gpu.mode == SharingMode::kMps) && gpu.replicas > 0) {
      out[gpu.resource_name].push_back(gpu);
    }
  }
  return out;
}

Status CheckResourceNames(const NodeConfig& config, const std::vector<core::Gpu>& gpus,
                          const ModeAssignment& modes) {
  // One device plugin per resource name (the kubelet's rule): replicas never
  // share a name with the vGPU devices, and one name is one mode.
  std::vector<const core::Gpu*> vgpu_plugin;  // GPUs whose devices the vGPU plugin advertises
  for (size_t g = 0; g < gpus.size(); ++g) {
    const GpuMode& mode = modes.gpus[g];
    if (mode.mode == SharingMode::kVgpu || mode.mode == SharingMode::kExclusive ||
        mode.mode == SharingMode::kMigDynamic || (mode.mode == SharingMode::kMps && mode.replicas == 0)) {
      vgpu_plugin.push_back(&gpus[g]);
    }
  }
  std::map<std::string, const GpuMode*> first_of_resource;
  for (size_t g = 0; g < gpus.size(); ++g) {
    const GpuMode& mode = modes.gpus[g];
    if (mode.replicas == 0 || core::IsMigMode(mode.mode)) continue;
    if (mode.resource_name == config.resource_name && !vgpu_plugin.empty()) {
      return Error{
          mode.source + ": the " + core::SharingModeName(mode.mode) + " replicas of " + Describe(gpus[g]) +
          " would be advertised as " + mode.resource_name + ", which the devices of GPU(s) " +
          IndexList(vgpu_plugin) +
          " are advertised as (resource_name); the kubelet takes one device plugin per resource "
          "name and kube-scheduler could not tell them apart: rename the replicas (renameByDefault / "
          "rename, or resource / rename_by_default) or set resource_name"};
    }
    if (mode.resource_name == config.resource_name && !config.mig_layout_file.empty() &&
        config.mig_strategy == "single") {
      return Error{mode.source + ": the replicas of " + Describe(gpus[g]) + " would be advertised as " +
                   mode.resource_name + ", which mig_strategy single advertises MIG devices as: rename them"};
    }
    auto [it, inserted] = first_of_resource.emplace(mode.resource_name, &mode);
    if (!inserted && it->second->mode != mode.mode) {
      return Error{mode.source + " and " + it->second->source + " advertise " + mode.resource_name + " as " +
                   core::SharingModeName(mode.mode) + " and " + core::SharingModeName(it->second->mode) +
                   " replicas: one resource name, one mode (a container could not tell which it gets)"};
    }
  }
  return Status::Ok();
}

Result<ModeAssignment> AssignModes(const NodeConfig& config, const std::vector<core::Gpu>& gpus,
                                   const NvidiaConfig* nvidia) {
  ModeAssignment result;
  TESSERA_ASSIGN_OR_RETURN(const std::vector<SharingRule> rules, ParseSharingRules(config.sharing));
  std::vector<std::vector<Claim>> claims(gpus.size());
  auto claim = [&](size_t g, GpuMode mode, bool weak = false, const SharingRule* rule = nullptr) {
    mode.uuid = gpus[g].uuid;
    mode.index = gpus[g].index;
    claims[g].push_back(Claim{std::move(mode), weak, rule});
  };

  // The MIG keys (the sharing list's mig rules were folded into them).
  if (!config.mig_layout_file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(const mig::MigGpuSelection layout, mig::ParseMigGpus(config.mig_gpus));
    for (size_t g = 0; g < gpus.size(); ++g) {
      if (gpus[g].mig_capable && layout.Contains(gpus[g].index)) {
        claim(g, ModeFrom(SharingMode::kMigStatic, "mig_gpus"));
      }
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const mig::MigGpuSelection dynamic,
                           mig::ParseMigDynamicGpus(config.mig_dynamic_gpus));
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (!dynamic.empty() && gpus[g].mig_capable && dynamic.Contains(gpus[g].index)) {
      claim(g, ModeFrom(SharingMode::kMigDynamic, "mig_dynamic_gpus"));
    }
  }

  // tessera's rules.
  for (size_t r = 0; r < rules.size(); ++r) {
    const SharingRule& rule = rules[r];
    if (core::IsMigMode(rule.mode)) continue;  // folded into the MIG keys above
    const std::string source = "sharing[" + std::to_string(r) + "]";
    const Selector selector = ParseSelector(rule.gpus, source).value();
    bool any = false;
    for (size_t g = 0; g < gpus.size(); ++g) {
      if (!selector.Matches(gpus[g])) continue;
      any = true;
      GpuMode mode;
      mode.mode = rule.mode;
      mode.replicas = rule.replicas;
      mode.source = source;
      mode.memory_split = rule.memory_split;
      mode.mps_active_thread_percentage = rule.mps_active_thread_percentage;
      mode.mps_pinned_memory_mib = rule.mps_pinned_memory_mib;
      if (rule.replicas > 0) {
        mode.resource_name = !rule.resource.empty() ? rule.resource
                             : rule.rename_by_default
                                 ? std::string(kReplicaResource) + std::string(kSharedSuffix)
                                 : std::string(kReplicaResource);
        mode.fail_requests_greater_than_one =
            rule.fail_requests_greater_than_one.value_or(rule.mode == SharingMode::kMps);
      }
      claim(g, std::move(mode), false, &rule);
    }
    if (!any) result.notes.push_back(source + " (gpus '" + rule.gpus + "') selects no GPU of this node");
  }

  // NVIDIA's file.
  if (nvidia != nullptr && nvidia->strategy != NvidiaSharingStrategy::kNone) {
    const bool mps = nvidia->strategy == NvidiaSharingStrategy::kMps;
    const std::string section = mps ? "sharing.mps" : "sharing.timeSlicing";
    for (const auto& ignored : nvidia->ignored) {
      result.notes.push_back("nvidia_config_file: '" + ignored + "' has no effect in tessera");
    }
    std::vector<const core::Gpu*> by_index;
    for (const auto& gpu : gpus) by_index.push_back(&gpu);
    std::sort(by_index.begin(), by_index.end(), [](auto* a, auto* b) { return a->index < b->index; });
    for (size_t r = 0; r < nvidia->sharing.resources.size(); ++r) {
      const NvidiaReplicatedResource& resource = nvidia->sharing.resources[r];
      const std::string source = "nvidia_config_file " + section + ".resources[" + std::to_string(r) + "]";
      if (resource.name != kReplicaResource) {
        return Error{source + ": tessera does not time-slice MIG devices (" + resource.name +
                     "); share whole GPUs (nvidia.com/gpu) or use a MIG mode for the GPU"};
      }
      GpuMode mode;
      mode.mode = mps ? SharingMode::kMps : SharingMode::kTimeslice;
      mode.replicas = resource.replicas;
      mode.resource_name = resource.AdvertisedName();
      mode.renamed = !resource.rename.empty();
      mode.fail_requests_greater_than_one = nvidia->sharing.fail_requests_greater_than_one;
      mode.source = source;
      std::set<std::string> wanted;  // UUIDs
      bool weak = false;
      switch (resource.devices.kind) {
        case NvidiaDeviceSelection::Kind::kAll:
          weak = true;
          for (const auto* gpu : by_index) wanted.insert(gpu->uuid);
          break;
        case NvidiaDeviceSelection::Kind::kCount:
          for (size_t i = 0; i < by_index.size() && i < static_cast<size_t>(resource.devices.count); ++i) {
            wanted.insert(by_index[i]->uuid);
          }
          break;
        case NvidiaDeviceSelection::Kind::kList:
          for (const auto& ref : resource.devices.list) {
            if (IsMigDeviceRef(ref)) {
              return Error{source + ": devices names MIG device '" + ref +
                           "': tessera shares whole GPUs this way, not MIG devices"};
            }
            const core::Gpu* found = nullptr;
            for (const auto* gpu : by_index) {
              if ((AllDigits(ref) && std::to_string(gpu->index) == ref) || gpu->uuid == ref) found = gpu;
            }
            if (found == nullptr) {
              result.notes.push_back(source + ": device '" + ref + "' is not on this node");
            } else {
              wanted.insert(found->uuid);
            }
          }
          break;
      }
      for (size_t g = 0; g < gpus.size(); ++g) {
        if (wanted.count(gpus[g].uuid) > 0) claim(g, mode, weak);
      }
    }
  }

  // One mode per GPU.
  for (size_t g = 0; g < gpus.size(); ++g) {
    std::vector<Claim>& mine = claims[g];
    const bool has_strong = std::any_of(mine.begin(), mine.end(), [](const Claim& c) { return !c.weak; });
    if (has_strong) std::erase_if(mine, [](const Claim& c) { return c.weak; });
    if (mine.size() > 1) {
      return Error{Describe(gpus[g]) + " is selected by " + mine[0].mode.source + " (" +
                   core::SharingModeName(mine[0].mode.mode) + ") and by " + mine[1].mode.source + " (" +
                   core::SharingModeName(mine[1].mode.mode) + "): a GPU is in one mode"};
    }
    GpuMode mode = mine.empty() ? ModeFrom(SharingMode::kVgpu, "default") : mine[0].mode;
    mode.uuid = gpus[g].uuid;
    mode.index = gpus[g].index;
    if (mode.resource_name.empty()) mode.resource_name = config.resource_name;
    if (mode.replicas > 0) {
      mode.renamed = mode.renamed || mode.resource_name != kReplicaResource;
    }
    if (mode.mode == SharingMode::kMps && mode.replicas > 0) {
      if (mode.mps_active_thread_percentage == 0)
        mode.mps_active_thread_percentage = std::max(1, 100 / mode.replicas);
      if (mode.mps_pinned_memory_mib == 0) {
        mode.mps_pinned_memory_mib = gpus[g].memory_mib / mode.replicas;
      } else if (mode.mps_pinned_memory_mib > gpus[g].memory_mib) {
        return Error{mode.source + ": mps_pinned_memory_mib " + std::to_string(mode.mps_pinned_memory_mib) +
                     " is more than the " + std::to_string(gpus[g].memory_mib) + " MiB of " +
                     Describe(gpus[g])};
      }
    }
    result.gpus.push_back(std::move(mode));
  }

  TESSERA_RETURN_IF_ERROR(CheckResourceNames(config, gpus, result));
  return result;
}

}  // namespace tessera::node::sharing
