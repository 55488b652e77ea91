#include "base/http_listener.h"

#include "base/testing.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <future>

namespace tessera {
namespace {

using testing::ReturnsOrAbort;

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

// A connection to `port` is refused: nothing listens there (a socket left
// behind would still take connections into its backlog).
bool Refused(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = Loopback(port);
  const bool refused =
      fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno == ECONNREFUSED;
  if (fd >= 0) close(fd);
  return refused;
}

std::unique_ptr<HttpListener> MakeListener() {
  auto server = std::make_unique<httplib::Server>();
  server->Get("/ping",
              [](const httplib::Request&, httplib::Response& res) { res.set_content("pong", "text/plain"); });
  return std::make_unique<HttpListener>(std::move(server));
}

TEST(HttpListenerTest, ServesUntilStoppedAndLeavesThePortClosed) {
  auto listener = MakeListener();
  auto port = listener->Listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.error().message;
  httplib::Client client("127.0.0.1", *port);
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  auto answer = client.Get("/ping");
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->body, "pong");
  ReturnsOrAbort([&] { listener->Stop(); }, "HttpListener::Stop");
  EXPECT_TRUE(Refused(*port));
  listener->Stop();  // idempotent
}

TEST(HttpListenerTest, StopRightAfterListenReturns) {
  // Nothing between Listen and Stop: the accept loop has usually not started
  // yet. A single httplib stop() is then lost and the join hangs; the watchdog
  // turns that into a failure.
  for (int i = 0; i < 200; ++i) {
    auto listener = MakeListener();
    auto port = listener->Listen("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.error().message;
    ReturnsOrAbort([&] { listener->Stop(); }, "HttpListener::Stop right after Listen");
    ASSERT_TRUE(Refused(*port)) << "iteration " << i << ": port " << *port << " still takes connections";
  }
}

TEST(HttpListenerTest, APortTakenFailsTheListenAndStopWithoutListenIsHarmless) {
  // A plain listening socket (no SO_REUSEPORT) holds a port.
  int holder = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int taken = ntohs(addr.sin_port);
  auto listener = MakeListener();
  auto port = listener->Listen("127.0.0.1", taken);
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.error().message, "cannot listen on 127.0.0.1:" + std::to_string(taken));
  ReturnsOrAbort([&] { listener.reset(); }, "HttpListener destructor without a loop");
  close(holder);
}

}  // namespace
}  // namespace tessera
