#include "node/sharing/nvidia_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <set>

#include "base/files.h"

namespace tessera::node::sharing {
namespace {

constexpr std::string_view kPrefix = "nvidia.com/";

bool AllDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// 8-4-4-4-12 hex digits.
bool IsUuidBody(std::string_view text) {
  static constexpr size_t kGroups[] = {8, 4, 4, 4, 12};
  size_t at = 0;
  for (size_t g = 0; g < 5; ++g) {
    if (g > 0) {
      if (at >= text.size() || text[at] != '-') return false;
      ++at;
    }
    for (size_t i = 0; i < kGroups[g]; ++i, ++at) {
      if (at >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[at]))) return false;
    }
  }
  return at == text.size();
}

bool IsGpuUuid(std::string_view ref) {
  return ref.starts_with("GPU-") && IsUuidBody(ref.substr(4));
}

bool IsMigUuid(std::string_view ref) {
  if (!ref.starts_with("MIG-")) return false;
  std::string_view rest = ref.substr(4);
  if (IsUuidBody(rest)) return true;
  // MIG-GPU-<uuid>/<gi>/<ci>
  auto first = rest.find('/');
  if (first == std::string_view::npos) return false;
  auto second = rest.find('/', first + 1);
  if (second == std::string_view::npos) return false;
  return IsGpuUuid(rest.substr(0, first)) && AllDigits(rest.substr(first + 1, second - first - 1)) &&
         AllDigits(rest.substr(second + 1));
}

bool IsMigIndex(std::string_view ref) {
  auto colon = ref.find(':');
  return colon != std::string_view::npos && AllDigits(ref.substr(0, colon)) &&
         AllDigits(ref.substr(colon + 1));
}

// A DNS-1123 subdomain (lower-case alphanumerics, '-' and '.', each label
// starting and ending alphanumeric, at most 253 characters).
bool IsDnsSubdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t begin = 0;
  while (begin <= name.size()) {
    size_t end = name.find('.', begin);
    if (end == std::string_view::npos) end = name.size();
    std::string_view label = name.substr(begin, end - begin);
    auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (label.empty() || label.size() > 63 || !alnum(label.front()) || !alnum(label.back()) ||
        !std::all_of(label.begin(), label.end(), [&](char c) { return alnum(c) || c == '-'; })) {
      return false;
    }
    begin = end + 1;
  }
  return true;
}

// NVIDIA's normalisation: names without the nvidia.com/ prefix get it.
Result<std::string> ResourceName(const YAML::Node& node, const std::string& where) {
  if (!node.IsScalar()) return Error{where + " must be a string"};
  std::string name = node.Scalar();
  if (!name.starts_with(kPrefix)) name = std::string(kPrefix) + name;
  if (!IsDnsSubdomain(std::string_view(name).substr(kPrefix.size()))) {
    return Error{where + ": incorrect format for resource name '" + name +
                 "' (after nvidia.com/ a lower-case DNS subdomain: letters, digits, '-' and '.')"};
  }
  return name;
}

bool IsQuoted(const YAML::Node& node) {
  return node.Tag() == "!";
}

Result<bool> Bool(const YAML::Node& node, const std::string& where) {
  if (node.IsScalar() && !IsQuoted(node)) {
    std::string text = node.Scalar();
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    // YAML 1.1, as NVIDIA's reader (go-yaml) takes it.
    if (text == "true" || text == "yes" || text == "on") return true;
    if (text == "false" || text == "no" || text == "off") return false;
  }
  return Error{where + " must be true or false, got '" + (node.IsScalar() ? node.Scalar() : "a collection") +
               "'"};
}

std::optional<int64_t> Integer(const YAML::Node& node) {
  if (!node.IsScalar() || IsQuoted(node)) return std::nullopt;
  const std::string& text = node.Scalar();
  int64_t value = 0;
  const char* begin = text.data() + (text.starts_with('+') ? 1 : 0);
  auto [ptr, ec] = std::from_chars(begin, text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

Result<NvidiaDeviceSelection> Devices(const YAML::Node& node, const std::string& where) {
  NvidiaDeviceSelection out;
  if (node.IsScalar()) {
    if (auto count = Integer(node)) {
      if (*count <= 0 || *count > 1024) {
        return Error{where + ": devices set as '" + node.Scalar() + "' but a count of devices must be > 0"};
      }
      out.kind = NvidiaDeviceSelection::Kind::kCount;
      out.count = static_cast<int>(*count);
      return out;
    }
    if (node.Scalar() != "all") {
      return Error{where + ": devices set as '" + node.Scalar() +
                   "' but the only valid string input is 'all'"};
    }
    return out;
  }
  if (node.IsSequence()) {
    out.kind = NvidiaDeviceSelection::Kind::kList;
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node item = node[i];
      const std::string text = item.IsScalar() ? item.Scalar() : "";
      const bool ok =
          item.IsScalar() && (AllDigits(text) || IsMigIndex(text) || IsGpuUuid(text) || IsMigUuid(text));
      if (!ok) {
        return Error{where + ": unsupported type for device in devices list: '" +
                     (item.IsScalar() ? text : std::string("a collection")) +
                     "' (a GPU index, a MIG index '<gpu>:<mig>', a GPU-… or MIG-… UUID)"};
      }
      // "00" and "0" are the same GPU.
      out.list.push_back(AllDigits(text) ? std::to_string(std::stoll(text.substr(0, 9))) : text);
    }
    if (out.list.empty()) return Error{where + ": devices is an empty list"};
    return out;
  }
  return Error{where + ": unrecognized type for devices spec (\"all\", a count or a list)"};
}

Result<NvidiaReplicatedResource> Resource(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) return Error{where + " must be a mapping {name, replicas, devices?, rename?}"};
  NvidiaReplicatedResource out;
  if (!node["name"]) return Error{where + ": no resource name specified"};
  TESSERA_ASSIGN_OR_RETURN(out.name, ResourceName(node["name"], where + ".name"));
  if (node["devices"]) {
    TESSERA_ASSIGN_OR_RETURN(out.devices, Devices(node["devices"], where));
  }
  if (!node["replicas"]) return Error{where + ": no replicas specified"};
  auto replicas = Integer(node["replicas"]);
  if (!replicas) {
    return Error{where + ".replicas must be an integer, got '" +
                 (node["replicas"].IsScalar() ? node["replicas"].Scalar() : "a collection") + "'"};
  }
  if (*replicas < 2) return Error{where + ": number of replicas must be >= 2"};
  if (*replicas > 1024) return Error{where + ": number of replicas must be <= 1024 (tessera's bound)"};
  out.replicas = static_cast<int>(*replicas);
  if (node["rename"]) {
    TESSERA_ASSIGN_OR_RETURN(out.rename, ResourceName(node["rename"], where + ".rename"));
  }
  return out;
}

bool IsMigResourceName(const std::string& name) {
  return name.starts_with(std::string(kPrefix) + "mig-");
}

// Two entries of one resource that may name the same device, by what is
// written (the GPU list resolves UUIDs later, in gpu_modes).
std::optional<std::string> Overlap(const NvidiaDeviceSelection& a, const NvidiaDeviceSelection& b) {
  using Kind = NvidiaDeviceSelection::Kind;
  if (a.kind == Kind::kAll || b.kind == Kind::kAll) return std::string("all devices");
  if (a.kind == Kind::kCount && b.kind == Kind::kCount) return std::string("the first devices");
  if (a.kind == Kind::kList && b.kind == Kind::kList) {
    for (const auto& ref : a.list) {
      if (std::find(b.list.begin(), b.list.end(), ref) != b.list.end()) return "device '" + ref + "'";
    }
    return std::nullopt;
  }
  const NvidiaDeviceSelection& count = a.kind == Kind::kCount ? a : b;
  const NvidiaDeviceSelection& list = a.kind == Kind::kCount ? b : a;
  for (const auto& ref : list.list) {
    if (AllDigits(ref) && std::stoll(ref) < count.count) return "GPU " + ref;
  }
  return std::nullopt;
}

Result<NvidiaReplicatedResources> Section(const YAML::Node& node, const std::string& where, bool mps,
                                          std::vector<std::string>& ignored) {
  if (!node.IsMap()) return Error{where + " must be a mapping {renameByDefault, resources, ...}"};
  NvidiaReplicatedResources out;
  out.fail_requests_greater_than_one = mps;  // NVIDIA keeps MPS at true unless the file says otherwise
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (key == "renameByDefault") {
      TESSERA_ASSIGN_OR_RETURN(out.rename_by_default, Bool(entry.second, where + ".renameByDefault"));
    } else if (key == "failRequestsGreaterThanOne") {
      TESSERA_ASSIGN_OR_RETURN(out.fail_requests_greater_than_one,
                               Bool(entry.second, where + ".failRequestsGreaterThanOne"));
    } else if (key != "resources") {
      ignored.push_back(where + "." + key);
    }
  }
  const YAML::Node resources = node["resources"];
  if (!resources || resources.IsNull() || (resources.IsSequence() && resources.size() == 0)) {
    return Error{where + ": no resources specified"};
  }
  if (!resources.IsSequence()) return Error{where + ".resources must be a list"};
  for (size_t i = 0; i < resources.size(); ++i) {
    const std::string at = where + ".resources[" + std::to_string(i) + "]";
    TESSERA_ASSIGN_OR_RETURN(NvidiaReplicatedResource resource, Resource(resources[i], at));
    if (mps) {
      // NVIDIA: "the only supported resource available for MPS are nvidia.com/gpu resources and only with
      // full GPUs"; "Sharing with MPS is currently not supported on devices with MIG enabled".
      if (resource.name != "nvidia.com/gpu") {
        return Error{at + ".name '" + resource.name +
                     "': MPS shares only nvidia.com/gpu (full GPUs); sharing with MPS is not supported on "
                     "MIG devices"};
      }
      for (const auto& ref : resource.devices.list) {
        if (IsMigDeviceRef(ref)) {
          return Error{at + ": devices names MIG device '" + ref +
                       "': sharing with MPS is not supported on devices with MIG enabled"};
        }
      }
    } else if (resource.name != "nvidia.com/gpu" && !IsMigResourceName(resource.name)) {
      return Error{
          at + ".name '" + resource.name +
          "': time-slicing shares only nvidia.com/gpu and the MIG resources (nvidia.com/mig-<profile>)"};
    }
    if (out.rename_by_default && resource.rename.empty()) resource.rename = resource.name + ".shared";
    for (size_t j = 0; j < out.resources.size(); ++j) {
      if (out.resources[j].name != resource.name) continue;
      if (auto both = Overlap(out.resources[j].devices, resource.devices)) {
        return Error{at + " and " + where + ".resources[" + std::to_string(j) + "] both select " + *both +
                     " of " + resource.name + ": each device is shared one way"};
      }
    }
    out.resources.push_back(std::move(resource));
  }
  return out;
}

}  // namespace

bool IsMigDeviceRef(const std::string& ref) {
  return IsMigIndex(ref) || IsMigUuid(ref);
}

const char* NvidiaSharingStrategyName(NvidiaSharingStrategy strategy) {
  switch (strategy) {
    case NvidiaSharingStrategy::kNone:
      return "none";
    case NvidiaSharingStrategy::kTimeSlicing:
      return "time-slicing";
    case NvidiaSharingStrategy::kMps:
      return "mps";
  }
  return "none";
}

Result<NvidiaConfig> ParseNvidiaConfig(std::string_view text, const std::string& source) {
  NvidiaConfig config;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Error{source + ": not valid YAML or JSON: " + e.what()};
  }
  if (!root || root.IsNull()) return config;  // NVIDIA: an empty file is version v1 with defaults
  if (!root.IsMap()) return Error{source + ": expected a mapping with version, flags and sharing"};
  auto fail = [&](const Error& error) { return Error{source + ": " + error.message}; };
  try {
    for (const auto& entry : root) {
      const std::string key = entry.first.Scalar();
      if (key == "version") {
        const std::string version = entry.second.IsScalar() ? entry.second.Scalar() : "";
        if (!version.empty() && version != "v1") return Error{source + ": unknown version: " + version};
      } else if (key == "flags") {
        if (!entry.second.IsMap()) {
          if (entry.second.IsNull()) continue;
          return Error{source + ": flags must be a mapping"};
        }
        for (const auto& flag : entry.second) {
          const std::string name = flag.first.Scalar();
          if (name != "migStrategy") {
            config.ignored.push_back("flags." + name);
            continue;
          }
          const std::string value = flag.second.IsScalar() ? flag.second.Scalar() : "";
          if (value != "none" && value != "single" && value != "mixed") {
            return Error{source + ": flags.migStrategy: invalid --mig-strategy option: " + value +
                         " (none, single or mixed)"};
          }
          config.mig_strategy = value;
        }
      } else if (key != "sharing") {
        config.ignored.push_back(key);  // resources, imex, ...: NVIDIA's own business
      }
    }
    const YAML::Node sharing = root["sharing"];
    if (!sharing || sharing.IsNull()) return config;
    if (!sharing.IsMap()) return Error{source + ": sharing must be a mapping {timeSlicing | mps}"};
    for (const auto& entry : sharing) {
      const std::string key = entry.first.Scalar();
      if (key != "timeSlicing" && key != "mps") config.ignored.push_back("sharing." + key);
    }
    const YAML::Node time_slicing = sharing["timeSlicing"];
    const YAML::Node mps = sharing["mps"];
    const bool has_ts = time_slicing && !time_slicing.IsNull();
    const bool has_mps = mps && !mps.IsNull();
    if (has_ts && has_mps) {
      return Error{source +
                   ": sharing.timeSlicing and sharing.mps are both set: time-slicing and MPS are mutually "
                   "exclusive in one file (NVIDIA's plugin would silently use mps); put the GPUs of the "
                   "other mode in tessera's `sharing` key"};
    }
    if (has_ts) {
      auto section = Section(time_slicing, "sharing.timeSlicing", false, config.ignored);
      if (!section.ok()) return fail(section.error());
      config.strategy = NvidiaSharingStrategy::kTimeSlicing;
      config.sharing = std::move(section).value();
    } else if (has_mps) {
      if (config.mig_strategy == "mixed") {
        return Error{source + ": using --mig-strategy=mixed is not supported with MPS (flags.migStrategy)"};
      }
      auto section = Section(mps, "sharing.mps", true, config.ignored);
      if (!section.ok()) return fail(section.error());
      config.strategy = NvidiaSharingStrategy::kMps;
      config.sharing = std::move(section).value();
    }
  } catch (const YAML::Exception& e) {
    return Error{source + ": " + e.what()};
  }
  return config;
}

Result<NvidiaConfig> ReadNvidiaConfigFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN_WRAP(const std::string text, files::Read(path), "nvidia_config_file");
  return ParseNvidiaConfig(text, path);
}

}  // namespace tessera::node::sharing
