#include "node/plugin_server.h"

#include "base/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace tessera::node {
namespace {

constexpr auto kShutdownGrace = std::chrono::seconds(2);

bool StatSocket(const std::string& path, struct stat& st) {
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

PluginServer::PluginServer(const NodeConfig& config, const DeviceState& state,
                           std::function<std::string()> new_region_name)
    : PluginServer(config, [&config, &state, new_region_name = std::move(new_region_name)] {
        return std::make_unique<DevicePluginService>(config, state, new_region_name);
      }) {}

PluginServer::PluginServer(const NodeConfig& config,
                           std::function<std::unique_ptr<ServedDevicePlugin>()> make_service)
    : config_(config), make_service_(std::move(make_service)) {}

PluginServer::~PluginServer() {
  Stop();
}

Status PluginServer::Start() {
  std::lock_guard lock(mu_);
  if (server_) return Status::Ok();
  const std::string path = config_.PluginSocketPath();

  if (::mkdir(config_.plugin_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Error{"cannot create plugin dir '" + config_.plugin_dir + "': " + std::strerror(errno)};
  }
  // A socket left by an earlier run would make the bind fail.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return Error{"'" + path + "' exists and is not a socket; refusing to replace it"};
    if (::unlink(path.c_str()) != 0) {
      return Error{"cannot remove stale socket '" + path + "': " + std::strerror(errno)};
    }
  }

  std::unique_ptr<ServedDevicePlugin> service = make_service_();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return Error{"cannot serve the device plugin on '" + path + "' (bind failed)"};
  if (!StatSocket(path, st)) {
    server->Shutdown();
    return Error{"the device-plugin socket '" + path + "' did not appear after bind"};
  }
  socket_inode_ = st.st_ino;
  service_ = std::move(service);
  server_ = std::move(server);
  log::Info("device plugin serving", {{"resource", config_.resource_name}, {"socket", path}});
  return Status::Ok();
}

void PluginServer::Stop() {
  std::lock_guard lock(mu_);
  if (!server_) return;
  service_->BeginShutdown();
  server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server_->Wait();
  server_.reset();
  service_.reset();
  const std::string path = config_.PluginSocketPath();
  struct stat st {};
  if (StatSocket(path, st) && st.st_ino == socket_inode_) ::unlink(path.c_str());
  socket_inode_ = 0;
  log::Info("device plugin stopped serving", {{"socket", path}});
}

bool PluginServer::serving() const {
  std::lock_guard lock(mu_);
  return server_ != nullptr;
}

bool PluginServer::SocketPresent() const {
  std::lock_guard lock(mu_);
  if (!server_) return false;
  struct stat st {};
  return StatSocket(config_.PluginSocketPath(), st) && st.st_ino == socket_inode_;
}

}  // namespace tessera::node
