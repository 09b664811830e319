// Streams, events, peer access and copies of the CUDA backend
// (memory and IPC: cuda_memory.cpp; graphs: cuda_graphs.cpp).
#include "backend/cuda/cuda_backend.hpp"

#include <optional>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/driver_api.hpp"
#include "backend/pointer_check.hpp"
#include "common/config.hpp"
#include "common/log.hpp"

namespace gpustripe {
namespace {

const BoolSetting kCheckPointers{"GPUSTRIPE_CUDA_CHECK_POINTERS", "yes",
                                 "CUDA backend: check each copy's pointers against the devices named (one driver "
                                 "query per pointer) so a wrong one is refused before anything is written; no saves "
                                 "the queries once a program is known to pass correct pointers"};

cudaStream_t cu_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t cu_event(EventHandle e) { return static_cast<cudaEvent_t>(e); }

// cuMemcpyDtoDAsync of cuda.h (CUresult f(CUdeviceptr, CUdeviceptr, size_t, CUstream)), without
// cuda.h; null where the driver lacks it.
using CopyDtoDFn = int (*)(unsigned long long, unsigned long long, size_t, void*);
CopyDtoDFn copy_dtod_fn() {
  static CopyDtoDFn fn = reinterpret_cast<CopyDtoDFn>(driver_entry_point("cuMemcpyDtoDAsync"));
  return fn;
}

}  // namespace

CudaBackend::CudaBackend() : check_pointers_(kCheckPointers.get()) {
  GS_CUDA(cudaGetDeviceCount(&device_count_), -1);
  GS_REQUIRE(device_count_ > 0, GPUSTRIPE_ERR_NOT_SUPPORTED, "CUDA backend: no CUDA GPU is visible");
  GS_LOG_INFO(Subsys::Backend, "CUDA backend: %d GPUs", device_count_);
}

void CudaBackend::check_device(const char* call, const char* what, int dev) const {
  if (dev < 0 || dev >= device_count_)
    GS_THROW(GPUSTRIPE_ERR_INVALID_DEVICE, "%s: %s %d is not a device (CUDA sees GPUs 0..%d)", call, what, dev,
             device_count_ - 1);
}

bool CudaBackend::thread_stream(StreamHandle s) const { return cu_stream(s) == cudaStreamPerThread; }

int CudaBackend::stream_device(StreamHandle s, const char* call) const {
  // Streams made here are looked up: cudaStreamGetDevice on a stream being captured
  // fails and invalidates the capture, and the engine captures on its own streams.
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = own_streams_.find(s);
    if (it != own_streams_.end()) return it->second;
  }
  int dev = -1;
  // The implicit streams' handles (a framework's default stream) name the current device's.
  if (cu_stream(s) == cudaStreamLegacy || cu_stream(s) == cudaStreamPerThread) {
    GS_CUDA(cudaGetDevice(&dev), -1);
    return dev;
  }
  cudaError_t err = cudaStreamGetDevice(cu_stream(s), &dev);
  if (err != cudaSuccess) throw_cuda_error(err, call, -1);
  return dev;
}

bool CudaBackend::can_access_peer(int dev, int peer) {
  check_device("can_access_peer", "dev", dev);
  check_device("can_access_peer", "peer", peer);
  if (dev == peer) return false;
  int ok = 0;
  GS_CUDA(cudaDeviceCanAccessPeer(&ok, dev, peer), dev);
  return ok != 0;
}

void CudaBackend::enable_peer_access(int dev, int peer) {
  check_device("enable_peer_access", "dev", dev);
  check_device("enable_peer_access", "peer", peer);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (peers_enabled_.count({dev, peer})) return;
  }
  DeviceGuard guard(dev);
  cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // enabled earlier by someone else in this process (torch, NCCL): fine
  } else if (err != cudaSuccess) {
    throw_cuda_error(err, format("cudaDeviceEnablePeerAccess(peer %d)", peer).c_str(), dev);
  }
  std::lock_guard<std::mutex> lock(mu_);
  peers_enabled_.insert({dev, peer});
}

StreamHandle CudaBackend::create_stream(int dev) {
  check_device("create_stream", "dev", dev);
  DeviceGuard guard(dev);
  cudaStream_t s = nullptr;
  GS_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), dev);
  std::lock_guard<std::mutex> lock(mu_);
  own_streams_[s] = dev;
  return s;
}

void CudaBackend::destroy_stream(StreamHandle s) {
  GS_REQUIRE(s != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "destroy_stream: null stream");
  {
    std::lock_guard<std::mutex> lock(mu_);
    own_streams_.erase(s);
  }
  GS_CUDA(cudaStreamDestroy(cu_stream(s)), -1);
}

EventHandle CudaBackend::create_event(int dev, bool timing) {
  check_device("create_event", "dev", dev);
  DeviceGuard guard(dev);
  cudaEvent_t e = nullptr;
  GS_CUDA(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), dev);
  return e;
}

void CudaBackend::destroy_event(EventHandle e) {
  GS_REQUIRE(e != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "destroy_event: null event");
  GS_CUDA(cudaEventDestroy(cu_event(e)), -1);
}

void CudaBackend::record_event(EventHandle e, StreamHandle s) {
  GS_REQUIRE(e != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "record_event: null event");
  int dev = stream_device(s, "record_event");
  DeviceGuard guard(dev);
  GS_CUDA(cudaEventRecord(cu_event(e), cu_stream(s)), dev);
}

void CudaBackend::wait_event(StreamHandle s, EventHandle e) {
  GS_REQUIRE(e != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "wait_event: null event");
  int dev = stream_device(s, "wait_event");
  DeviceGuard guard(dev);
  GS_CUDA(cudaStreamWaitEvent(cu_stream(s), cu_event(e), 0), dev);
}

namespace {
// A completion query's answer: done, not yet, or the error it reported.
bool complete(cudaError_t err, const char* call) {
  if (err == cudaErrorNotReady) return false;
  if (err != cudaSuccess) throw_cuda_error(err, call, -1);
  return true;
}
}  // namespace

bool CudaBackend::query_event(EventHandle e) {
  GS_REQUIRE(e != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "query_event: null event");
  return complete(cudaEventQuery(cu_event(e)), "cudaEventQuery");
}

bool CudaBackend::query_stream(StreamHandle s) {
  GS_REQUIRE(s != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "query_stream: null stream");
  return complete(cudaStreamQuery(cu_stream(s)), "cudaStreamQuery");
}

void CudaBackend::synchronize_event(EventHandle e) {
  GS_REQUIRE(e != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "synchronize_event: null event");
  GS_CUDA(cudaEventSynchronize(cu_event(e)), -1);
}

void CudaBackend::synchronize_stream(StreamHandle s) {
  int dev = stream_device(s, "synchronize_stream");
  GS_CUDA(cudaStreamSynchronize(cu_stream(s)), dev);
}

float CudaBackend::elapsed_ms(EventHandle start, EventHandle end) {
  GS_REQUIRE(start && end, GPUSTRIPE_ERR_INVALID_ARGUMENT, "elapsed_ms: null event");
  float ms = 0;
  GS_CUDA(cudaEventElapsedTime(&ms, cu_event(start), cu_event(end)), -1);
  return ms;
}

void CudaBackend::check_range(const char* call, const char* what, const void* p, int dev, size_t bytes) {
  check_pointer_not_null(call, what, p, bytes);
  if (!check_pointers_) return;
  check_pointer_range(call, what, p, dev, bytes, pointer_info(p));
}

void CudaBackend::copy_async(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, StreamHandle s) {
  if (dst_dev != kHostDevice) check_device("copy_async", "dst_dev", dst_dev);
  if (src_dev != kHostDevice) check_device("copy_async", "src_dev", src_dev);
  if (bytes == 0) return;
  check_range("copy_async", "dst", dst, dst_dev, bytes);
  check_range("copy_async", "src", src, src_dev, bytes);
  enqueue_copy(dst, dst_dev, src, src_dev, bytes, s);
}

void CudaBackend::copy_async_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                                        StreamHandle s) {
  if (dst_dev != kHostDevice) check_device("copy_async", "dst_dev", dst_dev);
  if (src_dev != kHostDevice) check_device("copy_async", "src_dev", src_dev);
  if (bytes == 0) return;
  check_pointer_not_null("copy_async", "dst", dst, bytes);
  check_pointer_not_null("copy_async", "src", src, bytes);
  enqueue_copy(dst, dst_dev, src, src_dev, bytes, s);
}

void CudaBackend::enqueue_copy(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, StreamHandle s) {
  int dev = stream_device(s, "copy_async");
  // cudaMemcpyPeerAsync cannot be captured into a graph; under capture a UVA copy does
  // the same peer copy (the engine enables peer access before it captures).
  // Asked for peer copies only: a small host copy (eager messages) notices every call.
  const bool peer = dst_dev >= 0 && src_dev >= 0 && dst_dev != src_dev;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (peer) GS_CUDA(cudaStreamIsCapturing(cu_stream(s), &capture), dev);
  if (peer && capture == cudaStreamCaptureStatusNone) {
    // Names both GPUs and its stream: no current device needed, so none is switched to and back
    // (two runtime calls in a pulled message's latency: the receiver's GPU is current, the copy
    // runs on a stream of the sender's). Only the null stream is the current device's.
    std::optional<DeviceGuard> guard;
    if (s == nullptr) guard.emplace(dev);
    cudaError_t err = cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, cu_stream(s));
    if (err != cudaSuccess)
      throw_cuda_error(err, format("cudaMemcpyPeerAsync(GPU %d -> GPU %d, %zu bytes)", src_dev, dst_dev, bytes).c_str(),
                       dev);
    return;
  }
  DeviceGuard guard(dev);
  if (dst_dev >= 0 && dst_dev == src_dev && s != nullptr && copy_dtod_fn()) {
    // Both ends in one GPU's address space (its own memory, or a peer's mapped into its context:
    // an RMA put pushed by the origin's copy engine): the driver's device-to-device copy, as UCX's
    // cuda_ipc issues its puts. The driver's copy calls cost the host less per call than the
    // runtime's cudaMemcpyAsync (bench/results/*small-copy-cost*), which a small copy's latency
    // is made of. Not on the null stream, which the runtime may take as the per-thread default
    // stream and the driver as the legacy one.
    const int r = copy_dtod_fn()(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), bytes, s);
    GS_REQUIRE(r == 0, GPUSTRIPE_ERR_CUDA, "cuMemcpyDtoDAsync(%zu bytes) on GPU %d: CUDA driver error %d", bytes, dev,
               r);
  } else {
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cu_stream(s));
    if (err != cudaSuccess) throw_cuda_error(err, format("cudaMemcpyAsync(%zu bytes)", bytes).c_str(), dev);
  }
}

void CudaBackend::copy_batch_prechecked(const BatchCopy* copies, size_t n, StreamHandle s) {
  if (n == 0) return;
  for (size_t i = 0; i < n; ++i) {
    if (copies[i].dst_dev != kHostDevice) check_device("copy_batch", "dst_dev", copies[i].dst_dev);
    if (copies[i].src_dev != kHostDevice) check_device("copy_batch", "src_dev", copies[i].src_dev);
    check_pointer_not_null("copy_batch", "dst", copies[i].dst, copies[i].bytes);
    check_pointer_not_null("copy_batch", "src", copies[i].src, copies[i].bytes);
  }
  if (n == 1) {
    enqueue_copy(copies[0].dst, copies[0].dst_dev, copies[0].src, copies[0].src_dev, copies[0].bytes, s);
    return;
  }
  int dev = stream_device(s, "copy_batch");
  DeviceGuard guard(dev);  // once for the batch, not per copy
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  GS_CUDA(cudaStreamIsCapturing(cu_stream(s), &capture), dev);
#if CUDART_VERSION >= 13000
  if (capture == cudaStreamCaptureStatusNone && !batch_refused_.load(std::memory_order_relaxed)) {
    thread_local std::vector<void*> dsts;
    thread_local std::vector<const void*> srcs;
    thread_local std::vector<size_t> sizes;
    dsts.clear();
    srcs.clear();
    sizes.clear();
    for (size_t i = 0; i < n; ++i)
      if (copies[i].bytes) {
        dsts.push_back(copies[i].dst);
        srcs.push_back(copies[i].src);
        sizes.push_back(copies[i].bytes);
      }
    if (dsts.empty()) return;
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;  // sources may be written by earlier work on s
    size_t attr_index = 0;
    cudaError_t err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attr, &attr_index, 1,
                                           cu_stream(s));
    if (err == cudaSuccess) return;
    cudaGetLastError();  // a refused batch enqueued nothing: fall back to one call per copy
    batch_refused_.store(true, std::memory_order_relaxed);
    GS_LOG_INFO(Subsys::Backend, "cudaMemcpyBatchAsync refused a batch of %zu copies (%s): copies go one by one",
                dsts.size(), cudaGetErrorString(err));
  }
#endif
  for (size_t i = 0; i < n; ++i) {
    const BatchCopy& c = copies[i];
    if (c.bytes == 0) continue;
    cudaError_t err = c.dst_dev >= 0 && c.src_dev >= 0 && c.dst_dev != c.src_dev && capture == cudaStreamCaptureStatusNone
                          ? cudaMemcpyPeerAsync(c.dst, c.dst_dev, c.src, c.src_dev, c.bytes, cu_stream(s))
                          : cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, cu_stream(s));
    if (err != cudaSuccess)
      throw_cuda_error(err, format("batched copy (GPU %d -> GPU %d, %zu bytes)", c.src_dev, c.dst_dev, c.bytes).c_str(),
                       dev);
  }
}

void CudaBackend::memset_async(void* dst, int dev, int value, size_t bytes, StreamHandle s) {
  if (dev != kHostDevice) check_device("memset_async", "dev", dev);
  if (bytes == 0) return;
  check_range("memset_async", "dst", dst, dev, bytes);
  int sdev = stream_device(s, "memset_async");
  DeviceGuard guard(sdev);
  GS_CUDA(cudaMemsetAsync(dst, value, bytes, cu_stream(s)), sdev);
}

}  // namespace gpustripe
