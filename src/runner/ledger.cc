#include "runner/ledger.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/files.h"

namespace tessera::runner {
namespace {

constexpr int kLedgerVersion = 1;

std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// Reads field 22 (starttime) of /proc/<pid>/stat. The command name (field 2)
// may contain spaces and parentheses, so parsing starts after the last ')'.
Result<uint64_t> ReadStartTicks(pid_t pid) {
  auto read = files::Read("/proc/" + std::to_string(pid) + "/stat");
  if (!read.ok()) return Error{"process " + std::to_string(pid) + " does not exist"};
  const std::string& stat = *read;
  auto close = stat.rfind(')');
  if (close == std::string::npos) return Error{"unreadable /proc/" + std::to_string(pid) + "/stat"};
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  // After ')' come fields 3.. ; starttime is field 22, i.e. the 20th here.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return Error{"short /proc/" + std::to_string(pid) + "/stat"};
  }
  return static_cast<uint64_t>(std::stoull(field));
}

nlohmann::json EntryToJson(const LedgerEntry& e) {
  nlohmann::json holders = nlohmann::json::array();
  for (const auto& h : e.holders) holders.push_back({{"pid", h.pid}, {"startTicks", h.start_ticks}});
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : e.slices.devices) {
    devices.push_back({{"uuid", d.uuid}, {"memoryMiB", d.memory_mib}, {"cores", d.cores}});
  }
  nlohmann::json j = {{"jobId", e.job_id},         {"command", e.command},
                      {"holders", holders},        {"container", e.slices.container},
                      {"devices", devices},        {"region", e.region_path},
                      {"started", e.started_unix}, {"corePolicy", e.core_policy}};
  if (e.mig) {
    const MigInstanceRecord& m = *e.mig;
    j["mig"] = {{"parent", m.parent_uuid}, {"gpuIndex", m.gpu_index},
                {"profile", m.profile},    {"profileId", m.profile_id},
                {"start", m.start},        {"size", m.size},
                {"created", m.created},    {"gpuInstanceId", m.gpu_instance_id},
                {"migUuid", m.mig_uuid},   {"memoryMiB", m.memory_mib},
                {"smCount", m.sm_count}};
  }
  return j;
}

// Added without a version change: a tessera that predates it reads a MIG
// job's entry as a job holding no slice, which is what it is to slices.
MigInstanceRecord MigFromJson(const nlohmann::json& j) {
  MigInstanceRecord m;
  m.parent_uuid = j.at("parent").get<std::string>();
  m.gpu_index = j.at("gpuIndex").get<int>();
  m.profile = j.at("profile").get<std::string>();
  m.profile_id = j.at("profileId").get<uint32_t>();
  m.start = j.at("start").get<uint32_t>();
  m.size = j.at("size").get<uint32_t>();
  m.created = j.at("created").get<bool>();
  m.gpu_instance_id = j.at("gpuInstanceId").get<uint32_t>();
  m.mig_uuid = j.at("migUuid").get<std::string>();
  m.memory_mib = j.at("memoryMiB").get<uint64_t>();
  m.sm_count = j.at("smCount").get<uint32_t>();
  if (m.parent_uuid.empty() || m.profile.empty()) throw std::invalid_argument("a MIG record lacks its GPU");
  return m;
}

LedgerEntry EntryFromJson(const nlohmann::json& j) {
  LedgerEntry e;
  e.job_id = j.at("jobId").get<std::string>();
  e.command = j.at("command").get<std::vector<std::string>>();
  for (const auto& h : j.at("holders")) {
    e.holders.push_back({h.at("pid").get<pid_t>(), h.at("startTicks").get<uint64_t>()});
  }
  e.slices.container = j.at("container").get<std::string>();
  for (const auto& d : j.at("devices")) {
    core::DeviceSlice s{d.at("uuid").get<std::string>(), d.at("memoryMiB").get<int64_t>(),
                        d.at("cores").get<int>()};
    if (s.uuid.empty() || s.memory_mib < 0 || s.cores < 0 || s.cores > 100) {
      throw std::invalid_argument("job " + e.job_id + " has an invalid device slice");
    }
    e.slices.devices.push_back(std::move(s));
  }
  e.region_path = j.at("region").get<std::string>();
  e.started_unix = j.at("started").get<int64_t>();
  e.core_policy = j.value("corePolicy", "");  // added without a version change: older readers ignore it
  if (j.contains("mig")) e.mig = MigFromJson(j.at("mig"));
  if (e.job_id.empty()) throw std::invalid_argument("an entry has an empty jobId");
  return e;
}

Result<std::vector<LedgerEntry>> ParseLedger(const std::string& text, const std::string& path) {
  if (text.empty()) return std::vector<LedgerEntry>{};  // created but never written
  try {
    auto doc = nlohmann::json::parse(text);
    if (!doc.is_object()) throw std::invalid_argument("top level is not an object");
    int version = doc.at("version").get<int>();
    if (version != kLedgerVersion) {
      return Error{"ledger " + path + " has version " + std::to_string(version) +
                   ", this tessera reads version " + std::to_string(kLedgerVersion)};
    }
    std::vector<LedgerEntry> entries;
    for (const auto& j : doc.at("jobs")) entries.push_back(EntryFromJson(j));
    return entries;
  } catch (const std::exception& ex) {
    return Error{"ledger " + path + " is corrupt (" + ex.what() +
                 "); it was left untouched. Stop all `tessera run` jobs, then remove it to start afresh"};
  }
}

// Holds an exclusive flock for its lifetime.
class FileLock {
 public:
  static Result<FileLock> Acquire(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Error{Errno("cannot open lock file " + path)};
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      Error err{Errno("cannot lock " + path)};
      ::close(fd);
      return err;
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace

bool AnyHolderAlive(const LedgerEntry& e) {
  for (const auto& h : e.holders) {
    if (IsAlive(h)) return true;
  }
  return false;
}

bool IsOrphaned(const LedgerEntry& e) {
  return e.mig.has_value() && !AnyHolderAlive(e);
}

LedgerEntry NewEntry(const std::vector<std::string>& command) {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  LedgerEntry e;
  e.job_id = "job-";
  for (int i = 0; i < 8; ++i) e.job_id += kHex[rd() % 16];
  e.command = command;
  e.holders = {SelfProcessId()};
  e.started_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  return e;
}

ProcessId SelfProcessId() {
  auto id = LookupProcessId(getpid());
  return id.ok() ? *id : ProcessId{getpid(), 0};
}

Result<ProcessId> LookupProcessId(pid_t pid) {
  TESSERA_ASSIGN_OR_RETURN(const uint64_t ticks, ReadStartTicks(pid));
  return ProcessId{pid, ticks};
}

bool IsAlive(const ProcessId& id) {
  if (id.pid <= 0) return false;
  auto ticks = ReadStartTicks(id.pid);
  if (!ticks.ok()) return false;
  if (*ticks != id.start_ticks) return false;  // pid reused by another process
  // A zombie has exited; it holds no GPU memory any more.
  auto read = files::Read("/proc/" + std::to_string(id.pid) + "/stat");
  const std::string stat = read.ok() ? *read : "";
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'Z';
}

SliceLedger::SliceLedger(std::string dir) : dir_(std::move(dir)) {}

Status SliceLedger::Update(const std::function<Status(std::vector<LedgerEntry>&)>& mutate) {
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(dir_));
  const std::string path = dir_ + "/ledger.json";
  TESSERA_ASSIGN_OR_RETURN(const FileLock lock, FileLock::Acquire(dir_ + "/ledger.lock"));

  // No file yet (or an unreadable one) reads as an empty ledger.
  auto text = files::Read(path);
  TESSERA_ASSIGN_OR_RETURN(std::vector<LedgerEntry> entries, ParseLedger(text.ok() ? *text : "", path));
  std::erase_if(entries, [](const LedgerEntry& e) { return !e.mig && !AnyHolderAlive(e); });

  TESSERA_RETURN_IF_ERROR(mutate(entries));

  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& e : entries) jobs.push_back(EntryToJson(e));
  nlohmann::json doc = {{"version", kLedgerVersion}, {"jobs", jobs}};
  return files::ReplaceAtomically(path, doc.dump(2) + "\n");
}

Result<std::vector<LedgerEntry>> SliceLedger::List() {
  std::vector<LedgerEntry> out;
  TESSERA_RETURN_IF_ERROR(Update([&](std::vector<LedgerEntry>& entries) {
    out = entries;
    return Status::Ok();
  }));
  return out;
}

Status SliceLedger::Remove(const std::string& job_id) {
  return Update([&](std::vector<LedgerEntry>& entries) {
    std::erase_if(entries, [&](const LedgerEntry& e) { return e.job_id == job_id; });
    return Status::Ok();
  });
}

}  // namespace tessera::runner
