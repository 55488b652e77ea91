// Graphs, stream capture and memory pools of the simulated driver.
// (First version: capture and graphs are not simulated yet.)
#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

CUresult LaunchGraphOn(CUgraphExec, CUstream) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CaptureNode(CUstream, CUgraphNode_st) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
void TrimPoolsOnSync() {}

}  // namespace tessera::sim::cuda
