#include "testing/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tessera::testing {
namespace {

TEST(PortsTest, AFreePortIsRefusedUntilSomethingListensThere) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  EXPECT_TRUE(NothingListensOn(port));
  EXPECT_LT(ConnectToLoopback(port), 0);

  const int server = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(server, 0);
  const int one = 1;
  ::setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(server, 4), 0);
  EXPECT_FALSE(NothingListensOn(port));
  const int client = ConnectToLoopback(port);
  EXPECT_GE(client, 0);
  if (client >= 0) ::close(client);
  ::close(server);
}

}  // namespace
}  // namespace tessera::testing
