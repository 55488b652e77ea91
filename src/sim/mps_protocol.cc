#include "sim/mps_protocol.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace tessera::sim::mps {
namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : fallback;
}

bool SendAll(int fd, const std::string& s) {
  size_t sent = 0;
  while (sent < s.size()) {
    const ssize_t n = send(fd, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string PipeDirectory() {
  return EnvOr("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps");
}

std::string LogDirectory() {
  return EnvOr("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps");
}

std::string ControlSocketPath(const std::string& pipe_dir) {
  return pipe_dir + "/control";
}

std::string PidFilePath(const std::string& pipe_dir) {
  return pipe_dir + "/nvidia-cuda-mps-control.pid";
}

Reply Request(const std::string& pipe_dir, const std::string& command) {
  Reply reply;
  const std::string path = ControlSocketPath(pipe_dir);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return reply;  // kNoDaemon
  reply.reach = Reach::kDaemonGone;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return reply;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || !SendAll(fd, command + "\n")) {
    close(fd);
    return reply;
  }
  shutdown(fd, SHUT_WR);
  // The daemon answers at once (starting a server takes it a moment): allow 10 s.
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, 10000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      reply.reach = Reach::kAnswered;
      break;
    }
    reply.text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return reply;
}

Result<uint64_t> ParseMemory(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  uint64_t shift = 0;
  if (unit == "K" || unit == "k") {
    shift = 10;
  } else if (unit == "M" || unit == "m") {
    shift = 20;
  } else if (unit == "G" || unit == "g") {
    shift = 30;
  } else if (unit == "T" || unit == "t") {
    shift = 40;
  } else if (!unit.empty()) {
    return Error{"invalid memory value '" + text + "' (a whole number with K, M, G or T, e.g. 8192M)"};
  }
  if (digits == 0 || digits > 15) {
    return Error{"invalid memory value '" + text + "' (a whole number with K, M, G or T, e.g. 8192M)"};
  }
  return std::strtoull(text.substr(0, digits).c_str(), nullptr, 10) << shift;
}

std::string FormatMemory(uint64_t bytes) {
  return std::to_string(bytes >> 20) + "M";
}

Result<std::map<int, uint64_t>> ParsePinnedLimits(const std::string& text) {
  std::map<int, uint64_t> limits;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    const std::string ordinal = eq == std::string::npos ? "" : item.substr(0, eq);
    if (ordinal.empty() || ordinal.find_first_not_of("0123456789") != std::string::npos ||
        ordinal.size() > 4) {
      return Error{"invalid CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry '" + item +
                   "' (expected <ordinal>=<value>)"};
    }
    auto value = ParseMemory(item.substr(eq + 1));
    if (!value.ok()) return value.error();
    limits[std::atoi(ordinal.c_str())] = *value;
  }
  return limits;
}

Result<double> ParsePercentage(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || !std::isfinite(v) || v < 1 || v > 100) {
    return Error{"invalid active thread percentage '" + text + "' (a number from 1 to 100)"};
  }
  return v;
}

std::string ConnectReply::Encode() const {
  std::ostringstream out;
  out << "server " << server_pid << " " << server_start_time << " " << active_thread_percentage;
  for (int g : gpus) {
    const auto it = pinned_limit_bytes.find(g);
    out << " " << g << "=" << (it == pinned_limit_bytes.end() ? 0 : it->second);
  }
  return out.str();
}

Result<ConnectReply> ConnectReply::Decode(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  ConnectReply r;
  if (!(in >> word) || word != "server" ||
      !(in >> r.server_pid >> r.server_start_time >> r.active_thread_percentage)) {
    return Error{text.empty() ? "no answer from the MPS control daemon" : text};
  }
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) return Error{"malformed MPS server answer: " + text};
    const int gpu = std::atoi(word.substr(0, eq).c_str());
    const uint64_t limit = std::strtoull(word.substr(eq + 1).c_str(), nullptr, 10);
    r.gpus.push_back(gpu);
    if (limit > 0) r.pinned_limit_bytes[gpu] = limit;
  }
  return r;
}

}  // namespace tessera::sim::mps
