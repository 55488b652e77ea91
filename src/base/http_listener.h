// HttpListener: an httplib server, the port it is bound to, and the thread
// running its accept loop — started and stopped so that nothing is left
// behind.
//
// What it works around (cpp-httplib 0.11, Debian's):
//  - Server::stop() acts only once the accept loop runs (is_running()). A
//    stop() issued before the listening thread got there is lost, and the loop
//    then blocks in accept() for good: a Stop() right after Start() hung in
//    its join. Stop() here repeats stop() until the loop has returned.
//  - A bound socket whose loop never ran is never closed (neither stop() nor
//    the destructor closes it). httplib binds with SO_REUSEPORT, so such a
//    socket keeps taking a share of the connections to that port, which no one
//    ever answers — even after another server binds the port. (This is what
//    made the first webhook-over-TLS test hang: its port probe leaked one.)
//    Listen() therefore starts the loop as soon as the port is bound.
//
// Stop() returns once the loop and its worker threads are done: a connection
// still in its TLS handshake, or idle in keep-alive, holds its worker for at
// most the server's read or keep-alive timeout (5 s by default).
//
// Every HTTP endpoint of tessera's daemons goes through it (the scheduler's
// extender, webhook and metrics; the node agent's metrics and health).
//
// Thread-safety: Listen/Stop from one thread; server() may be configured only
// before Listen.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "base/result.h"

namespace httplib {
class Server;
}

namespace tessera {

class HttpListener {
 public:
  explicit HttpListener(std::unique_ptr<httplib::Server> server);
  ~HttpListener();  // Stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  httplib::Server& server() { return *server_; }

  // Binds `address`:`port` (0 = any free port) and starts serving on a
  // thread. Returns the port; fails when it cannot be bound (nothing is left
  // open then).
  Result<int> Listen(const std::string& address, int port);
  // Stops serving and waits for the loop and its workers. Idempotent.
  void Stop();

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> done_{false};  // the accept loop has returned
};

}  // namespace tessera
