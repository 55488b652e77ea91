#include "node/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::node {
namespace {

Error Errno(const std::string& what) {
  return Error{what + ": " + std::strerror(errno)};
}

}  // namespace

Status ReplaceFileAtomically(const std::string& path, std::string_view content) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot write " + temp);
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      Error error = Errno("cannot write " + temp);
      ::close(fd);
      ::unlink(temp.c_str());
      return error;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Error error = Errno("cannot flush " + temp);
    ::close(fd);
    ::unlink(temp.c_str());
    return error;
  }
  if (::close(fd) != 0) {
    Error error = Errno("cannot flush " + temp);
    ::unlink(temp.c_str());
    return error;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    Error error = Errno("cannot replace " + path);
    ::unlink(temp.c_str());
    return error;
  }
  return Status::Ok();
}

}  // namespace tessera::node
