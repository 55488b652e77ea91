#include "base/http_listener.h"

#include <httplib.h>

#include <chrono>

namespace tessera {

HttpListener::HttpListener(std::unique_ptr<httplib::Server> server) : server_(std::move(server)) {}

HttpListener::~HttpListener() {
  Stop();
}

Result<int> HttpListener::Listen(const std::string& address, int port) {
  if (thread_.joinable()) return Error{"already listening"};
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(address.c_str());
  } else if (!server_->bind_to_port(address.c_str(), port)) {
    bound = -1;
  }
  // A failed bind leaves no socket open (httplib closes it).
  if (bound <= 0) return Error{"cannot listen on " + address + ":" + std::to_string(port)};
  done_ = false;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    done_ = true;
  });
  return bound;
}

void HttpListener::Stop() {
  if (!thread_.joinable()) return;
  while (!done_) {  // see the header: one stop() may come too early
    server_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  thread_.join();
}

}  // namespace tessera
