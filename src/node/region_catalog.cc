#include "node/region_catalog.h"

#include "base/files.h"
#include "base/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

namespace tessera::node {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Sorted(std::vector<std::string> ids) {
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

bool IsRegionDirName(const std::string& name) {
  if (name.size() != 36) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? name[i] != '-' : !std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

std::string EncodeRegionRecord(const RegionRecord& record) {
  nlohmann::json j = {{"version", kRegionRecordVersion},
                      {"resource", record.resource_name},
                      {"deviceIds", record.device_ids},
                      {"createdUnix", record.created_unix}};
  return j.dump();
}

Result<RegionRecord> DecodeRegionRecord(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Error{"region record is not a JSON object"};
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || version->get<int>() != kRegionRecordVersion) {
    return Error{"region record has no or an unsupported version (this agent reads version " +
                 std::to_string(kRegionRecordVersion) + ")"};
  }
  RegionRecord record;
  auto resource = j.find("resource");
  if (resource == j.end() || !resource->is_string())
    return Error{"region record: 'resource' must be a string"};
  record.resource_name = resource->get<std::string>();
  auto ids = j.find("deviceIds");
  if (ids == j.end() || !ids->is_array()) return Error{"region record: 'deviceIds' must be an array"};
  for (const auto& id : *ids) {
    if (!id.is_string()) return Error{"region record: 'deviceIds' must hold strings"};
    record.device_ids.push_back(id.get<std::string>());
  }
  auto created = j.find("createdUnix");
  if (created == j.end() || !created->is_number_integer()) {
    return Error{"region record: 'createdUnix' must be an integer"};
  }
  record.created_unix = created->get<int64_t>();
  return record;
}

Status WriteRegionRecord(const std::string& dir, const std::string& name, const RegionRecord& record) {
  TESSERA_RETURN_IF_ERROR_WRAP(
      files::ReplaceAtomically(files::Join(dir, name + ".json"), EncodeRegionRecord(record) + "\n"),
      "cannot write region record");
  return Status::Ok();
}

RegionCatalog::RegionCatalog(std::string region_host_dir, std::string region_file_name, Clock* clock,
                             RegionsInFlight* in_flight)
    : root_(std::move(region_host_dir)),
      region_file_name_(std::move(region_file_name)),
      clock_(OrRealClock(clock)),
      in_flight_(in_flight) {}

Result<std::vector<RegionDir>> RegionCatalog::Scan() const {
  std::vector<RegionDir> dirs;
  std::error_code ec;
  if (!fs::exists(root_, ec)) return dirs;
  fs::directory_iterator it(root_, ec);
  if (ec) return Error{"cannot list region directory '" + root_ + "': " + ec.message()};
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Error{"cannot list region directory '" + root_ + "': " + ec.message()};
    const std::string name = it->path().filename().string();
    if (!IsRegionDirName(name)) continue;
    struct stat st {};
    // lstat: a symlink planted here is not a region directory.
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    RegionDir dir;
    dir.name = name;
    dir.path = it->path().string();
    dir.region_file = region_file_name_;
    dir.dev = st.st_dev;
    dir.ino = st.st_ino;

    const std::string record_path = files::Join(root_, name + ".json");
    auto text = files::Read(record_path);
    if (!text.ok()) {
      dir.record_error = "no record " + record_path;
    } else {
      auto record = DecodeRegionRecord(*text);
      if (record.ok()) {
        dir.record = std::move(record).value();
      } else {
        dir.record_error = record_path + ": " + record.error().message;
      }
    }

    auto region = host::ReadRegion(files::Join(dir.path, region_file_name_), &dir.region_missing);
    if (region.ok()) {
      dir.region = std::move(region).value();
    } else if (!dir.region_missing) {
      dir.region_error = region.error().message;
    }
    dirs.push_back(std::move(dir));
  }
  std::sort(dirs.begin(), dirs.end(), [](const RegionDir& a, const RegionDir& b) { return a.name < b.name; });
  return dirs;
}

std::vector<std::string> RegionCatalog::CleanUp(const std::vector<RegionDir>& dirs,
                                                int64_t grace_seconds) const {
  std::vector<std::string> removed;
  const int64_t now = clock_->WallUnixSeconds();
  for (const auto& dir : dirs) {
    if (dir.owner || !dir.record) continue;
    if (now - dir.record->created_unix < grace_seconds) continue;
    // Its Allocate is still running, or answered less than the grace ago: the
    // kubelet may not have started (or listed) the container yet.
    if (in_flight_ != nullptr && in_flight_->Protects(dir.name, grace_seconds)) continue;
    // remove_all does not follow symlinks: whatever the container left in its
    // directory, only that directory's own entries go.
    std::error_code ec;
    fs::remove_all(dir.path, ec);
    if (ec) {
      log::Warn("cannot remove the region directory of a pod that is gone",
                {{"path", dir.path}, {"error", ec.message()}});
      continue;
    }
    // The limits directory beside it (limits_file.h), when Allocate made one.
    fs::remove_all(files::Join(root_, dir.name + ".limits"), ec);
    const std::string record_path = files::Join(root_, dir.name + ".json");
    if (::unlink(record_path.c_str()) != 0 && errno != ENOENT) {
      log::Warn("cannot remove a region record", {{"path", record_path}, {"error", std::strerror(errno)}});
    }
    removed.push_back(dir.name);
  }
  RemoveInterruptedAllocations(grace_seconds);
  return removed;
}

void RegionCatalog::RemoveInterruptedAllocations(int64_t grace_seconds) const {
  const int64_t now = clock_->WallUnixSeconds();
  const std::string own_temp_suffix = ".json.tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::directory_iterator it(root_, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t dot = name.find('.');
    if (dot == std::string::npos || !IsRegionDirName(name.substr(0, dot))) continue;
    const std::string region = name.substr(0, dot);
    const std::string rest = name.substr(dot);
    if (rest.rfind(".json.tmp.", 0) == 0) {
      // files::ReplaceAtomically's temp file, named after its writer's pid.
      if (rest == own_temp_suffix) continue;
      if (::unlink(it->path().c_str()) == 0) {
        log::Info("removed the temp file of a region record an earlier process did not finish",
                  {{"path", it->path().string()}});
      }
      continue;
    }
    if (rest != ".json") continue;
    struct stat st {};
    if (::lstat(files::Join(root_, region).c_str(), &st) == 0 || errno != ENOENT) continue;
    auto text = files::Read(it->path().string());
    auto record = text.ok() ? DecodeRegionRecord(*text) : Result<RegionRecord>(Error{"unreadable"});
    if (!record.ok() || now - record->created_unix < grace_seconds) continue;
    // An Allocate between writing the record and making the directory.
    if (in_flight_ != nullptr && in_flight_->Protects(region, grace_seconds)) continue;
    std::error_code remove_error;
    fs::remove_all(files::Join(root_, region + ".limits"), remove_error);
    if (::unlink(it->path().c_str()) == 0) {
      log::Info("removed the record of an Allocate that did not finish: its region was never made",
                {{"path", it->path().string()}});
    }
  }
}

void AssignOwners(std::vector<RegionDir>& dirs, const std::vector<ContainerDevices>& containers,
                  const std::string& resource_name) {
  AssignOwners(dirs, containers, std::set<std::string>{resource_name});
}

void AssignOwners(std::vector<RegionDir>& dirs, const std::vector<ContainerDevices>& containers,
                  const std::set<std::string>& resource_names) {
  // Newest record per resource and device-ID set.
  std::map<std::pair<std::string, std::vector<std::string>>, RegionDir*> newest;
  for (auto& dir : dirs) {
    dir.owner.reset();
    if (!dir.record || resource_names.count(dir.record->resource_name) == 0) continue;
    auto key = std::pair{dir.record->resource_name, Sorted(dir.record->device_ids)};
    RegionDir*& slot = newest[key];
    if (slot == nullptr || dir.record->created_unix > slot->record->created_unix ||
        (dir.record->created_unix == slot->record->created_unix && dir.name > slot->name)) {
      slot = &dir;
    }
  }
  for (const auto& c : containers) {
    if (resource_names.count(c.resource_name) == 0) continue;
    auto it = newest.find(std::pair{c.resource_name, Sorted(c.device_ids)});
    if (it == newest.end()) continue;
    it->second->owner = ContainerRef{c.pod_namespace, c.pod_name, c.container_name};
  }
}

}  // namespace tessera::node
