#include "core/pod_request.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "core/codec.h"
#include "core/quantity.h"

namespace tessera::core {
namespace {

using nlohmann::json;

// One resource value as the container gave it.
struct Given {
  Quantity value;
  std::string text;  // as written, for messages
};

// A container's tessera resources before defaults, plus the derived request.
struct ParsedContainer {
  bool asks_for_gpus = false;
  bool has_count = false;
  bool has_memory = false;
  bool has_percent = false;
  bool has_cores = false;
  bool has_mps_memory = false;
  bool has_mps_cores = false;
  ContainerRequest request;
};

// The pod's nvidia.com/vgpu-mode, as far as it picks a share kind: "mps",
// "exclusive", or "vgpu" / HAMi's "hami-core" (case-insensitive). nullopt
// when absent or another value ("mig" is dynamic MIG, decided by the
// scheduler; HAMi ignores values it does not know, and so does this).
struct AnnotatedMode {
  std::optional<ShareKind> share;
};

AnnotatedMode ModeAnnotationOf(const json& pod) {
  AnnotatedMode out;
  auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) return out;
  auto annotations = meta->find("annotations");
  if (annotations == meta->end() || !annotations->is_object()) return out;
  auto it = annotations->find(std::string(kSharingModeAnnotation));
  if (it == annotations->end()) return out;
  if (!it->is_string()) return out;
  std::string value = it->get<std::string>();
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (value == "mps") out.share = ShareKind::kMps;
  if (value == "exclusive") out.share = ShareKind::kExclusive;
  if (value == "vgpu" || value == "hami-core") out.share = ShareKind::kVgpu;
  return out;
}

std::string Quote(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

// Reads one resource value (a quantity string, or a JSON integer) from a
// resources.limits / resources.requests object.
Result<std::optional<Given>> ReadResource(const json& list, const std::string& name,
                                          const std::string& where) {
  auto it = list.find(name);
  if (it == list.end()) return std::optional<Given>();
  if (it->is_string()) {
    const std::string text = it->get<std::string>();
    TESSERA_ASSIGN_OR_RETURN_WRAP(Quantity q, Quantity::Parse(text), where + ": " + name);
    return std::optional<Given>(Given{q, text});
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) {
    auto v = static_cast<int64_t>(it->get<uint64_t>());
    return std::optional<Given>(Given{Quantity::FromUnits(v), std::to_string(v)});
  }
  if (it->is_number_integer() && !it->is_number_unsigned()) {
    auto v = it->get<int64_t>();
    return std::optional<Given>(Given{Quantity::FromUnits(v), std::to_string(v)});
  }
  return Error{where + ": " + name + " is " + it->dump() +
               "; expected a quantity string such as \"1\" or \"3000\""};
}

// The value of `name` from limits, falling back to requests.
Result<std::optional<Given>> Lookup(const json* limits, const json* requests, const std::string& name,
                                    const std::string& where) {
  std::optional<Given> limit, request;
  if (limits) {
    TESSERA_ASSIGN_OR_RETURN(limit, ReadResource(*limits, name, where));
  }
  if (requests) {
    TESSERA_ASSIGN_OR_RETURN(request, ReadResource(*requests, name, where));
  }
  if (limit && request && limit->value != request->value) {
    return Error{where + ": " + name + " has limit " + Quote(limit->text) + " but request " +
                 Quote(request->text) +
                 "; Kubernetes requires extended resources to have equal limit and request, so give the same "
                 "value (or only the limit)"};
  }
  return limit ? limit : request;
}

// A whole, non-negative value within [min, max]; `what` describes the unit.
Result<int64_t> WholeInRange(const Given& given, const std::string& name, const std::string& where,
                             int64_t min, int64_t max, const std::string& accepted) {
  const std::string prefix = where + ": " + name + " is " + Quote(given.text) + "; ";
  if (given.value.IsNegative()) return Error{prefix + "it must not be negative; " + accepted};
  if (!given.value.IsInteger()) return Error{prefix + "it must be a whole number; " + accepted};
  int64_t v = *given.value.ToInteger();
  if (v < min || v > max) return Error{prefix + "it must be " + accepted};
  return v;
}

Result<const json*> OptionalObject(const json& parent, const char* key, const std::string& where) {
  auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return static_cast<const json*>(nullptr);
  if (!it->is_object())
    return Error{where + ": " + key + " is a " + it->type_name() + "; expected an object"};
  return &*it;
}

Result<ParsedContainer> ParseContainer(const json& container, const std::string& where,
                                       const ResourceConfig& config, const AnnotatedMode& mode) {
  ParsedContainer out;
  out.request.name = container["name"].get<std::string>();
  TESSERA_ASSIGN_OR_RETURN(const json* resources, OptionalObject(container, "resources", where));
  const json* limits = nullptr;
  const json* requests = nullptr;
  if (resources) {
    TESSERA_ASSIGN_OR_RETURN(limits, OptionalObject(*resources, "limits", where + ": resources"));
    TESSERA_ASSIGN_OR_RETURN(requests, OptionalObject(*resources, "requests", where + ": resources"));
  }

  TESSERA_ASSIGN_OR_RETURN(const std::optional<Given> count,
                           Lookup(limits, requests, config.gpu_count_name, where));
  TESSERA_ASSIGN_OR_RETURN(const std::optional<Given> memory,
                           Lookup(limits, requests, config.gpu_memory_name, where));
  TESSERA_ASSIGN_OR_RETURN(const std::optional<Given> percent,
                           Lookup(limits, requests, config.gpu_memory_percent_name, where));
  TESSERA_ASSIGN_OR_RETURN(const std::optional<Given> cores,
                           Lookup(limits, requests, config.gpu_cores_name, where));
  TESSERA_ASSIGN_OR_RETURN(const std::optional<Given> priority,
                           Lookup(limits, requests, config.gpu_priority_name, where));
  TESSERA_ASSIGN_OR_RETURN(const std::optional<Given> mps_memory,
                           Lookup(limits, requests, config.mps_memory_name, where));
  TESSERA_ASSIGN_OR_RETURN(const std::optional<Given> mps_cores,
                           Lookup(limits, requests, config.mps_cores_name, where));

  out.has_count = count.has_value();
  out.has_memory = memory.has_value();
  out.has_percent = percent.has_value();
  out.has_cores = cores.has_value();
  out.has_mps_memory = mps_memory.has_value();
  out.has_mps_cores = mps_cores.has_value();
  const bool has_mps = out.has_mps_memory || out.has_mps_cores;
  const bool has_slice = out.has_memory || out.has_percent || out.has_cores || has_mps;

  if (!out.has_count && !has_slice) {
    if (priority.has_value()) {
      return Error{where + ": " + config.gpu_priority_name +
                   " is set but the container asks for no GPU; add " + config.gpu_count_name +
                   " (e.g. \"1\") or remove " + config.gpu_priority_name};
    }
    return out;  // not a GPU container
  }

  int64_t gpus = config.default_gpu_count;
  if (out.has_count) {
    const std::string accepted = "1 to " + std::to_string(kMaxGpusPerContainer) + " vGPUs, e.g. \"1\"";
    TESSERA_ASSIGN_OR_RETURN(const int64_t n, WholeInRange(*count, config.gpu_count_name, where, 0,
                                                           kMaxGpusPerContainer, accepted));
    if (n == 0) {
      if (has_slice || priority.has_value()) {
        std::string others;
        for (const auto& [set, name] : {std::pair{out.has_memory, &config.gpu_memory_name},
                                        std::pair{out.has_percent, &config.gpu_memory_percent_name},
                                        std::pair{out.has_cores, &config.gpu_cores_name},
                                        std::pair{out.has_mps_memory, &config.mps_memory_name},
                                        std::pair{out.has_mps_cores, &config.mps_cores_name},
                                        std::pair{priority.has_value(), &config.gpu_priority_name}}) {
          if (set) others += (others.empty() ? "" : ", ") + *name;
        }
        return Error{where + ": " + config.gpu_count_name + " is \"0\" but the container also sets " +
                     others + "; set " + config.gpu_count_name + " to 1 or more, or remove " + others};
      }
      return out;  // "nvidia.com/gpu: 0" alone asks for nothing
    }
    gpus = n;
  }

  if (out.has_memory && out.has_percent) {
    return Error{where + ": both " + config.gpu_memory_name + " and " + config.gpu_memory_percent_name +
                 " are set; give only one: MiB per vGPU (e.g. \"3000\") or percent of the GPU's memory (e.g. "
                 "\"25\")"};
  }
  // The seed platform's MPS names are aliases of gpumem / gpucores that make
  // the container an MPS share; each with its own name is ambiguous.
  for (const auto& [mps_set, mps_name, own_set, own_name] :
       {std::tuple{out.has_mps_memory, &config.mps_memory_name, out.has_memory || out.has_percent,
                   out.has_memory ? &config.gpu_memory_name : &config.gpu_memory_percent_name},
        std::tuple{out.has_mps_cores, &config.mps_cores_name, out.has_cores, &config.gpu_cores_name}}) {
    if (mps_set && own_set) {
      return Error{where + ": both " + *mps_name + " and " + *own_name + " are set; give only one (" +
                   *mps_name + " is its MPS spelling)"};
    }
  }
  ContainerRequest& req = out.request;
  req.gpus = static_cast<int>(gpus);
  req.share = mode.share.value_or(ShareKind::kVgpu);
  if (has_mps) {
    if (mode.share && *mode.share != ShareKind::kMps) {
      return Error{where + ": asks for an MPS share (" +
                   (out.has_mps_memory ? config.mps_memory_name : config.mps_cores_name) +
                   ") but the pod's " + std::string(kSharingModeAnnotation) + " is " +
                   (*mode.share == ShareKind::kExclusive ? "exclusive" : "vgpu") +
                   "; remove one of them, or set the annotation to mps"};
    }
    req.share = ShareKind::kMps;
  }
  if (out.has_memory) {
    const Given& m = *memory;
    std::string accepted =
        "whole MiB per vGPU from 0 (whole GPU) to " + std::to_string(kMaxGpuMemoryMiB) + ", e.g. \"3000\"";
    // A binary suffix is almost always meant as bytes ("8Gi"); say what to write instead.
    if (m.text.ends_with("i") && m.value.IsInteger() && !m.value.IsNegative()) {
      const int64_t mib = *m.value.ToInteger() / (int64_t{1} << 20);
      accepted += " (" + config.gpu_memory_name + " counts MiB: " +
                  (mib >= 1 && mib <= kMaxGpuMemoryMiB
                       ? "for " + m.text + " of memory write \"" + std::to_string(mib) + "\")"
                       : m.text + " of memory is " + std::to_string(mib) + " MiB, outside that range)");
    }
    TESSERA_ASSIGN_OR_RETURN(req.memory_mib,
                             WholeInRange(m, config.gpu_memory_name, where, 0, kMaxGpuMemoryMiB, accepted));
  }
  if (out.has_percent) {
    TESSERA_ASSIGN_OR_RETURN(const int64_t v,
                             WholeInRange(*percent, config.gpu_memory_percent_name, where, 1, 100,
                                          "a whole percent of the GPU's memory from 1 to 100, e.g. \"25\""));
    req.memory_percent = static_cast<int>(v);
  }
  if (out.has_mps_memory) {
    const Given& m = *mps_memory;
    constexpr int64_t kMaxGiB = kMaxGpuMemoryMiB / 1024;
    std::string accepted = "whole GiB of GPU memory from 1 to " + std::to_string(kMaxGiB) + ", e.g. \"8\"";
    if (m.text.ends_with("i") && m.value.IsInteger() && !m.value.IsNegative()) {
      const int64_t gib = *m.value.ToInteger() / (int64_t{1} << 30);
      accepted += " (" + config.mps_memory_name + " counts GiB: " +
                  (gib >= 1 && gib <= kMaxGiB ? "for " + m.text + " write \"" + std::to_string(gib) + "\")"
                                              : m.text + " is outside that range)");
    }
    TESSERA_ASSIGN_OR_RETURN(const int64_t gib,
                             WholeInRange(m, config.mps_memory_name, where, 1, kMaxGiB, accepted));
    req.memory_mib = gib * 1024;
  }
  if (req.share == ShareKind::kExclusive) {
    // Whole GPUs: a size other than "all of it" contradicts the annotation.
    if ((out.has_memory && req.memory_mib != 0) || (req.memory_percent && *req.memory_percent != 100)) {
      return Error{where + ": the pod's " + std::string(kSharingModeAnnotation) +
                   " is exclusive, which gives whole GPUs, but the container sets " +
                   (out.has_memory ? config.gpu_memory_name : config.gpu_memory_percent_name) +
                   "; remove it, or drop the annotation to ask for a vGPU slice"};
    }
    req.memory_mib = 0;
    req.memory_percent.reset();
  } else if (req.memory_mib == 0 && !req.memory_percent) {
    if (config.default_memory_mib > 0) {
      req.memory_mib = config.default_memory_mib;
    } else if (config.default_memory_percent) {
      req.memory_percent = config.default_memory_percent;
    }  // else: the whole GPU
  }
  req.cores = config.default_cores;
  if (out.has_cores) {
    TESSERA_ASSIGN_OR_RETURN(
        const int64_t v,
        WholeInRange(
            *cores, config.gpu_cores_name, where, 0, 100,
            "a whole percent of the GPU's compute from 0 (no limit) to 100 (exclusive), e.g. \"30\""));
    req.cores = static_cast<int>(v);
  }
  if (out.has_mps_cores) {
    TESSERA_ASSIGN_OR_RETURN(const int64_t v,
                             WholeInRange(*mps_cores, config.mps_cores_name, where, 1, 100,
                                          "a whole percent of the GPU's threads from 1 to 100, e.g. \"50\""));
    req.cores = static_cast<int>(v);
  }
  if (req.share == ShareKind::kExclusive) {
    if (out.has_cores && req.cores != 100 && req.cores != 0) {
      return Error{where + ": the pod's " + std::string(kSharingModeAnnotation) +
                   " is exclusive, which gives whole GPUs, but " + config.gpu_cores_name + " is \"" +
                   std::to_string(req.cores) + "\"; remove it or set it to 100"};
    }
    req.cores = 100;
  }
  if (req.share == ShareKind::kMps && req.gpus > 1) {
    // A CUDA process reaches one MPS control daemon (its pipe directory), and
    // tessera-node runs one per GPU: a client cannot span two GPUs.
    return Error{where + ": an MPS share is on one GPU, but " + config.gpu_count_name + " is \"" +
                 std::to_string(req.gpus) +
                 "\"; set it to 1 (an MPS client reaches one GPU's daemon), or use " +
                 "vGPU slices for several GPUs"};
  }
  if (req.share == ShareKind::kMps && req.cores == 0) {
    return Error{where + ": an MPS share needs its active-thread percentage, 1 to 100: set " +
                 config.mps_cores_name + " or " + config.gpu_cores_name +
                 " (e.g. \"50\"); 0, no compute limit, has no MPS meaning"};
  }
  if (priority.has_value()) {
    TESSERA_ASSIGN_OR_RETURN(const int64_t v,
                             WholeInRange(*priority, config.gpu_priority_name, where, 0, INT32_MAX,
                                          "a whole number from 0 to 2147483647, e.g. \"0\" or \"1\""));
    req.priority = static_cast<int>(v);
  }
  out.asks_for_gpus = true;
  return out;
}

// Visits spec.containers then spec.initContainers, checking the structure.
// fn(const json& container, bool init, size_t index, const std::string& where) -> Status.
template <typename Fn>
Status ForEachContainer(const json& pod, Fn&& fn) {
  if (!pod.is_object()) return Error{std::string("pod: expected a JSON object, got ") + pod.type_name()};
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return Error{"pod: spec is missing or not an object"};
  for (bool init : {false, true}) {
    const char* key = init ? "initContainers" : "containers";
    auto list = spec->find(key);
    if (list == spec->end() || list->is_null()) continue;
    if (!list->is_array()) {
      return Error{std::string("pod: spec.") + key + " is a " + list->type_name() + "; expected an array"};
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const json& c = (*list)[i];
      std::string at = std::string("spec.") + key + "[" + std::to_string(i) + "]";
      if (!c.is_object())
        return Error{"pod: " + at + " is a " + c.type_name() + "; expected a container object"};
      auto name = c.find("name");
      if (name == c.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
        return Error{"pod: " + at + ": name is missing or not a non-empty string"};
      }
      std::string where =
          std::string(init ? "init container " : "container ") + Quote(name->get_ref<const std::string&>());
      TESSERA_RETURN_IF_ERROR(fn(c, init, i, where));
    }
  }
  return Status::Ok();
}

Result<std::vector<std::string>> SplitList(const json& annotations, std::string_view key, bool uuids) {
  std::vector<std::string> out;
  auto it = annotations.find(std::string(key));
  if (it == annotations.end()) return out;
  const std::string where = "annotation " + std::string(key);
  if (!it->is_string()) return Error{where + " is a " + std::string(it->type_name()) + "; expected a string"};
  const std::string& value = it->get_ref<const std::string&>();
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    std::string item = value.substr(start, comma - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      if (uuids) TESSERA_RETURN_IF_ERROR(ValidateDeviceUuid(item, where));
      if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    }
    start = comma + 1;
  }
  if (out.empty()) {
    return Error{where + " is " + Quote(value) +
                 ", which names nothing; give a comma-separated list such as " +
                 (uuids ? "\"GPU-1a2b3c4d-0000-1111-2222-333344445555\"" : "\"A100,H100\"") +
                 " or remove the annotation"};
  }
  return out;
}

Result<GpuFilter> ParseFilter(const json& pod) {
  GpuFilter filter;
  auto meta = pod.find("metadata");
  if (meta == pod.end() || meta->is_null()) return filter;
  if (!meta->is_object()) return Error{"pod: metadata is not an object"};
  auto annotations = meta->find("annotations");
  if (annotations == meta->end() || annotations->is_null()) return filter;
  if (!annotations->is_object()) return Error{"pod: metadata.annotations is not an object"};
  struct Field {
    std::string_view key;
    std::vector<std::string>* out;
    bool uuids;
  };
  for (const Field& f : {Field{kUseGpuTypeAnnotation, &filter.use_types, false},
                         Field{kNoUseGpuTypeAnnotation, &filter.nouse_types, false},
                         Field{kUseGpuUuidAnnotation, &filter.use_uuids, true},
                         Field{kNoUseGpuUuidAnnotation, &filter.nouse_uuids, true}}) {
    TESSERA_ASSIGN_OR_RETURN(*f.out, SplitList(*annotations, f.key, f.uuids));
  }
  auto contradict = [](const std::vector<std::string>& use, const std::vector<std::string>& nouse,
                       std::string_view use_key, std::string_view nouse_key) -> Status {
    // Case does not make another GPU: types match case-insensitively in fit,
    // and a UUID's hex digits may be written in either case.
    auto same = [](std::string_view a, std::string_view b) {
      return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
             });
    };
    for (const std::string& u : use) {
      if (std::any_of(nouse.begin(), nouse.end(), [&](const std::string& n) { return same(u, n); })) {
        return Error{"annotations " + std::string(use_key) + " and " + std::string(nouse_key) +
                     " both name " + Quote(u) +
                     "; a GPU cannot be both required and excluded, remove it from one of them"};
      }
    }
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(
      contradict(filter.use_types, filter.nouse_types, kUseGpuTypeAnnotation, kNoUseGpuTypeAnnotation));
  TESSERA_RETURN_IF_ERROR(
      contradict(filter.use_uuids, filter.nouse_uuids, kUseGpuUuidAnnotation, kNoUseGpuUuidAnnotation));
  return filter;
}

}  // namespace

Result<PodRequest> DerivePodRequest(const nlohmann::json& pod, const ResourceConfig& config) {
  PodRequest out;
  const AnnotatedMode mode = pod.is_object() ? ModeAnnotationOf(pod) : AnnotatedMode{};
  auto add = [&](const json& c, bool init, size_t, const std::string& where) -> Status {
    TESSERA_ASSIGN_OR_RETURN(ParsedContainer parsed, ParseContainer(c, where, config, mode));
    if (parsed.asks_for_gpus) (init ? out.init_containers : out.containers).push_back(parsed.request);
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(ForEachContainer(pod, add));
  if (out.containers.empty() && out.init_containers.empty()) return out;
  TESSERA_ASSIGN_OR_RETURN(out.filter, ParseFilter(pod));
  return out;
}

bool AsksForTesseraResources(const nlohmann::json& pod, const ResourceConfig& config) {
  bool asks = false;
  const std::string* names[] = {&config.gpu_count_name,          &config.gpu_memory_name,
                                &config.gpu_memory_percent_name, &config.gpu_cores_name,
                                &config.gpu_priority_name,       &config.mps_memory_name,
                                &config.mps_cores_name};
  auto check = [&](const json& resources, const char* key) {
    auto list = resources.find(key);
    if (list == resources.end() || !list->is_object()) return;
    for (const std::string* name : names) {
      auto it = list->find(*name);
      if (it == list->end()) continue;
      // Derivation treats any other named resource as asking, zero included
      // ("gpumem: 0" alone is one whole GPU; "priority: 0" alone an error):
      // only a zero count alone asks for nothing.
      if (name != &config.gpu_count_name) {
        asks = true;
      } else if (it->is_string()) {
        auto q = Quantity::Parse(it->get_ref<const std::string&>());
        if (!q || !q->IsZero()) asks = true;
      } else if (!(it->is_number() && it->get<double>() == 0)) {
        asks = true;  // malformed or non-zero
      }
    }
  };
  if (!pod.is_object()) return false;
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return false;
  for (const char* key : {"containers", "initContainers"}) {
    auto list = spec->find(key);
    if (list == spec->end() || !list->is_array()) continue;
    for (const json& c : *list) {
      if (!c.is_object()) continue;
      auto resources = c.find("resources");
      if (resources == c.end() || !resources->is_object()) continue;
      check(*resources, "limits");
      check(*resources, "requests");
    }
  }
  return asks;
}

Result<std::vector<ContainerDefaults>> DefaultedLimits(const nlohmann::json& pod,
                                                       const ResourceConfig& config) {
  std::vector<ContainerDefaults> out;
  const AnnotatedMode mode = pod.is_object() ? ModeAnnotationOf(pod) : AnnotatedMode{};
  auto add = [&](const json& c, bool init, size_t index, const std::string& where) -> Status {
    TESSERA_ASSIGN_OR_RETURN(const ParsedContainer parsed, ParseContainer(c, where, config, mode));
    if (!parsed.asks_for_gpus) return Status::Ok();
    ContainerDefaults d{init, index, parsed.request.name, {}};
    const ContainerRequest& r = parsed.request;
    if (!parsed.has_count) d.limits_to_add.emplace_back(config.gpu_count_name, std::to_string(r.gpus));
    // An MPS alias already says what its name would: adding gpumem or
    // gpucores beside it would make the pod ambiguous.
    if (!parsed.has_memory && !parsed.has_percent && !parsed.has_mps_memory) {
      if (r.memory_mib > 0) {
        d.limits_to_add.emplace_back(config.gpu_memory_name, std::to_string(r.memory_mib));
      } else if (r.memory_percent) {
        d.limits_to_add.emplace_back(config.gpu_memory_percent_name, std::to_string(*r.memory_percent));
      }
    }
    if (!parsed.has_cores && !parsed.has_mps_cores && r.cores > 0)
      d.limits_to_add.emplace_back(config.gpu_cores_name, std::to_string(r.cores));
    if (!d.limits_to_add.empty()) out.push_back(std::move(d));
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(ForEachContainer(pod, add));
  // Fail exactly when DerivePodRequest does (the filter annotations too).
  TESSERA_RETURN_IF_ERROR(DerivePodRequest(pod, config));
  return out;
}

}  // namespace tessera::core
