// This process as a client of the simulated MPS (mps_daemon.h): at cuInit,
// with CUDA_MPS_PIPE_DIRECTORY set, it asks the control daemon there for its
// server (the daemon starts one for the first client), keeps the GPUs the
// server serves and records itself in the shared state as that server's
// client. Then its contexts cost no memory of their own (the server holds the
// context), its allocations stop at its pinned limit, and its kernels run on
// at most its active-thread share of the device, beside the other clients'.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "sim/cuda_internal.h"
#include "sim/mps_protocol.h"

namespace tessera::sim::cuda {

CUresult ConnectToMps(std::vector<int>* visible, std::string* message) {
  const char* pipe_dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (pipe_dir == nullptr || pipe_dir[0] == '\0') return CUDA_SUCCESS;
  Runtime& rt = R();
  const mps::Reply reply = mps::Request(pipe_dir, "client_connect " + std::to_string(rt.pid));
  if (reply.reach == mps::Reach::kNoDaemon) return CUDA_SUCCESS;  // no MPS here: run without it
  if (reply.reach == mps::Reach::kDaemonGone) {
    *message = std::string("no MPS control daemon answers in ") + pipe_dir;
    return CUDA_ERROR_MPS_CONNECTION_FAILED;
  }
  auto server = mps::ConnectReply::Decode(reply.text);
  if (!server.ok()) {
    *message = "MPS: " + server.error().message;
    return CUDA_ERROR_MPS_SERVER_NOT_READY;
  }
  // What the client's environment asks for can only lower what the daemon gives.
  double percentage = server->active_thread_percentage;
  if (const char* env = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); env != nullptr && env[0] != '\0') {
    auto p = mps::ParsePercentage(env);
    if (!p.ok()) {
      *message = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: " + p.error().message;
      return CUDA_ERROR_INVALID_VALUE;
    }
    percentage = std::min(percentage, *p);
  }
  std::map<int, uint64_t> own_limits;  // by this process's device ordinal
  if (const char* env = std::getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); env != nullptr && env[0] != '\0') {
    auto limits = mps::ParsePinnedLimits(env);
    if (!limits.ok()) {
      *message = limits.error().message;
      return CUDA_ERROR_INVALID_VALUE;
    }
    own_limits = *limits;
  }
  // Only the server's GPUs reach an MPS client.
  std::vector<int> served;
  for (int gpu : *visible) {
    for (int s : server->gpus) {
      if (s == gpu) served.push_back(gpu);
    }
  }
  *visible = served;
  rt.mps.server_pid = server->server_pid;
  rt.mps.server_start_time = server->server_start_time;
  for (size_t ordinal = 0; ordinal < served.size(); ++ordinal) {
    const int gpu = served[ordinal];
    rt.mps.share_percent[gpu] = static_cast<uint32_t>(std::lround(percentage));
    const auto own = own_limits.find(static_cast<int>(ordinal));
    const auto dflt = server->pinned_limit_bytes.find(gpu);
    rt.mps.pinned_limit_bytes[gpu] = own != own_limits.end()                    ? own->second
                                     : dflt != server->pinned_limit_bytes.end() ? dflt->second
                                                                                : 0;
  }
  StateLock lock(*rt.state);
  const int slot = rt.state->ProcessSlotLocked(rt.pid, true);
  if (slot >= 0) {
    rt.state->file()->processes[slot].mps_role = kMpsClient;
    rt.state->file()->processes[slot].mps_server_pid = server->server_pid;
  }
  return CUDA_SUCCESS;
}

uint32_t MpsShare(int gpu) {
  return R().mps.share_percent[gpu];
}

CUresult CheckMpsServer() {
  const MpsClient& mps = R().mps;
  if (mps.server_pid == 0 || ProcessAlive(mps.server_pid, mps.server_start_time)) return CUDA_SUCCESS;
  return CUDA_ERROR_MPS_CLIENT_TERMINATED;
}

}  // namespace tessera::sim::cuda
