// CUDA graphs of the CUDA backend: the engine captures a transfer's schedule once per
// size class and replays it with one launch instead of dozens of async calls.
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"

namespace gpustripe {

void CudaBackend::begin_capture(StreamHandle s) {
  int dev = stream_device(s, "begin_capture");
  DeviceGuard guard(dev);
  // Thread-local: other threads' unrelated CUDA calls neither join nor break this capture.
  GS_CUDA(cudaStreamBeginCapture(static_cast<cudaStream_t>(s), cudaStreamCaptureModeThreadLocal), dev);
}

GraphExecHandle CudaBackend::end_capture(StreamHandle s) {
  int dev = stream_device(s, "end_capture");
  DeviceGuard guard(dev);
  cudaGraph_t graph = nullptr;
  GS_CUDA(cudaStreamEndCapture(static_cast<cudaStream_t>(s), &graph), dev);
  cudaGraphExec_t exec = nullptr;
  cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is independent of it
  if (err != cudaSuccess) throw_cuda_error(err, "cudaGraphInstantiate", dev);
  return exec;
}

void CudaBackend::launch_graph(GraphExecHandle g, StreamHandle s) {
  GS_REQUIRE(g != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "launch_graph: null graph");
  int dev = stream_device(s, "launch_graph");
  DeviceGuard guard(dev);
  GS_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(g), static_cast<cudaStream_t>(s)), dev);
}

void CudaBackend::destroy_graph(GraphExecHandle g) {
  if (g == nullptr) return;
  GS_CUDA(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g)), -1);
}

}  // namespace gpustripe
