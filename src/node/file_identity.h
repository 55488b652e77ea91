// Whether the file at a path is still the one seen before: tessera-node
// re-registers when the kubelet's socket is a new file (a kubelet restart) and
// re-reads the MIG layout file when it was replaced or written.
//
// Header-only; thread-safe (no state).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::node {

// Device and inode tell a replaced file; size and the modification and
// status-change times one written in place.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// nullopt when `path` cannot be stat'ed, or with `socket_only` is not a socket.
inline std::optional<FileIdentity> IdentifyFile(const std::string& path, bool socket_only = false) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (socket_only && !S_ISSOCK(st.st_mode))) return std::nullopt;
  auto ns = [](const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; };
  return FileIdentity{st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim)};
}

}  // namespace tessera::node
