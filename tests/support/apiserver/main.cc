// tessera-fake-apiserver: runs the API-server stand-in for manual use, e.g.
//   tessera-fake-apiserver --port 8080 &
//   kubectl --server http://127.0.0.1:8080 get pods
#include <csignal>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>

#include "apiserver/fake_apiserver.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) {
  g_stop = 1;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"API-server stand-in for tessera tests (pods, nodes, leases, events, bindings)"};
  tessera::testing::FakeApiServerOptions options;
  options.port = 8080;
  app.add_option("--host", options.host, "address to listen on")->capture_default_str();
  app.add_option("--port", options.port, "port to listen on (0 = any)")->capture_default_str();
  app.add_option("--history", options.history_limit, "watch events kept before 410 Gone")
      ->capture_default_str();
  app.add_option("--token", options.bearer_token, "require this bearer token");
  CLI11_PARSE(app, argc, argv);

  tessera::testing::FakeApiServer server(options);
  if (auto st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  std::printf("listening on %s\n", server.url().c_str());
  std::fflush(stdout);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.Stop();
  return 0;
}
