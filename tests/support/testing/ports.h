// TCP on 127.0.0.1 for tests of servers: a port to give a server, and raw
// connections to see whether (and how) it listens.
#pragma once

namespace tessera::testing {

// A port nothing listens on now (bound and closed again without listening, so
// nothing is left behind on it); -1 when none could be had.
int FreePort();

// A TCP connection to 127.0.0.1:`port` that has sent nothing; the caller
// closes it. -1 when the connection failed (errno says why).
int ConnectToLoopback(int port);

// True when nothing listens on `port`: a connection is refused. (A listening
// socket left behind would still complete connections into its backlog,
// answered by nobody.)
bool NothingListensOn(int port);

}  // namespace tessera::testing
