#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::files {
namespace {

Error Errno(const std::string& what) {
  return Error{what + ": " + std::strerror(errno)};
}

std::string Quoted(const std::string& path) {
  return "'" + path + "'";
}

}  // namespace

Result<std::string> Read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot read " + Quoted(path));
  std::string content;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      Error error = Errno("cannot read " + Quoted(path));
      ::close(fd);
      return error;
    }
    content.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return content;
}

Status ReplaceAtomically(const std::string& path, std::string_view content) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot write " + temp);
  auto fail = [&](const std::string& what, bool close_fd) {
    Error error = Errno(what);
    if (close_fd) ::close(fd);
    ::unlink(temp.c_str());
    return error;
  };
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write " + temp, true);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("cannot flush " + temp, true);
  if (::close(fd) != 0) return fail("cannot flush " + temp, false);
  if (::rename(temp.c_str(), path.c_str()) != 0) return fail("cannot replace " + path, false);
  return Status::Ok();
}

std::string Join(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (out.empty() || out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

Status MakeDirs(const std::string& path, mode_t mode) {
  if (path.empty()) return Error{"cannot create a directory with an empty path"};
  // Each prefix ending before a '/' (and the whole path), in order.
  for (size_t end = 1; end <= path.size(); ++end) {
    if (end != path.size() && path[end] != '/') continue;
    if (path[end - 1] == '/') continue;  // "//" or a trailing '/'
    const std::string partial = path.substr(0, end);
    if (::mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) {
      return Errno("cannot create directory " + Quoted(partial));
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error{"cannot create directory " + Quoted(path) + ": a file of that name is in the way"};
  }
  return Status::Ok();
}

}  // namespace tessera::files
