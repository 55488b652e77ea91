// What the simulator's two C libraries (libcuda.so.1, libnvidia-ml.so.1) share
// at their boundary: no exception may cross it.
#pragma once

#include <new>

namespace tessera::sim {

// Runs an exported function's body: std::bad_alloc becomes `kOutOfMemory`, any
// other exception `kUnknown`.
template <auto kOutOfMemory, auto kUnknown, typename Body>
decltype(kOutOfMemory) CatchAtCBoundary(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return kOutOfMemory;
  } catch (...) {
    return kUnknown;
  }
}

}  // namespace tessera::sim
