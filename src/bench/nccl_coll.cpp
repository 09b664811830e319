#include "bench/nccl_coll.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "bench/nccl_loader.hpp"
#include "common/config.hpp"
#include "common/error.hpp"
#include "common/median.hpp"

#if GPUSTRIPE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpustripe {

#if GPUSTRIPE_HAVE_CUDA
namespace {

void cuda_check(cudaError_t e, const char* what, int dev) {
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "%s on device %d: %s", what, dev, cudaGetErrorString(e));
}

int nccl_type(coll::DataType dt) {
  switch (dt) {
    case GPUSTRIPE_FLOAT32: return kNcclFloat32;
    case GPUSTRIPE_FLOAT64: return kNcclFloat64;
    case GPUSTRIPE_FLOAT16: return kNcclFloat16;
    case GPUSTRIPE_BFLOAT16: return kNcclBfloat16;
    case GPUSTRIPE_INT32: return kNcclInt32;
    case GPUSTRIPE_INT64: return kNcclInt64;
    case GPUSTRIPE_INT8: return kNcclInt8;
    case GPUSTRIPE_UINT8: return kNcclUint8;
    case GPUSTRIPE_UINT32: return kNcclUint32;
    case GPUSTRIPE_UINT64: return kNcclUint64;
    default:
      GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "NCCL has no %s (it has float32/64/16, bfloat16, int8/32/64, uint8/32/64)",
               coll::dtype_name(dt));
  }
}

}  // namespace

struct NcclCollBench::Impl {
  const NcclLibrary& lib = NcclLibrary::get();
  int n = 0;
  size_t max_bytes = 0;
  bool symmetric = false;
  std::vector<NcclComm*> comms;
  std::vector<cudaStream_t> streams;
  std::vector<void*> send, recv;
  std::vector<NcclWindow*> send_win, recv_win;

  void release() {
    for (int r = 0; r < static_cast<int>(streams.size()); ++r)
      if (streams[r]) cudaStreamSynchronize(streams[r]);
    try {
      if (!send_win.empty()) {
        lib.group_start();
        for (int r = 0; r < n; ++r) {
          if (send_win[r]) lib.window_deregister(comms[r], send_win[r]);
          if (recv_win[r]) lib.window_deregister(comms[r], recv_win[r]);
        }
        lib.group_end();
      }
    } catch (const Error&) {
    }
    for (int r = 0; r < n; ++r) {
      cudaSetDevice(r);
      for (void* p : {r < static_cast<int>(send.size()) ? send[r] : nullptr,
                      r < static_cast<int>(recv.size()) ? recv[r] : nullptr}) {
        if (!p) continue;
        if (symmetric) {
          try {
            lib.mem_free(p);
          } catch (const Error&) {
          }
        } else {
          cudaFree(p);
        }
      }
      if (r < static_cast<int>(streams.size()) && streams[r]) cudaStreamDestroy(streams[r]);
    }
    for (NcclComm* c : comms)
      if (c) {
        try {
          lib.comm_destroy(c);
        } catch (const Error&) {
        }
      }
  }

  // One collective on every rank, in one group.
  void call(coll::CollOp op, size_t bytes, coll::DataType dt) {
    const size_t esz = coll::dtype_size(dt);
    const int ty = nccl_type(dt);
    const size_t per_peer = bytes / esz / n;
    lib.group_start();
    for (int r = 0; r < n; ++r) {
      void* s = streams[r];
      switch (op) {
        case coll::CollOp::AllToAll:
          if (lib.has_alltoall()) {
            lib.alltoall(send[r], recv[r], per_peer, ty, comms[r], s);
          } else {
            for (int q = 0; q < n; ++q) {
              lib.send_typed(static_cast<char*>(send[r]) + q * per_peer * esz, per_peer, ty, q, comms[r], s);
              lib.recv_typed(static_cast<char*>(recv[r]) + q * per_peer * esz, per_peer, ty, q, comms[r], s);
            }
          }
          break;
        case coll::CollOp::AllGather: lib.all_gather(send[r], recv[r], per_peer, ty, comms[r], s); break;
        case coll::CollOp::ReduceScatter:
          lib.reduce_scatter(send[r], recv[r], per_peer, ty, kNcclSum, comms[r], s);
          break;
        case coll::CollOp::AllReduce: lib.all_reduce(send[r], recv[r], bytes / esz, ty, kNcclSum, comms[r], s); break;
        case coll::CollOp::Bcast: lib.broadcast(recv[r], recv[r], bytes / esz, ty, 0, comms[r], s); break;
        case coll::CollOp::Reduce:
          GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "the NCCL reference times no reduce");
      }
    }
    lib.group_end();
  }

  void sync() {
    for (int r = 0; r < n; ++r) cuda_check(cudaStreamSynchronize(streams[r]), "cudaStreamSynchronize", r);
  }
};

NcclCollBench::NcclCollBench(int ranks, size_t max_bytes, bool symmetric) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  GS_REQUIRE(m.lib.available(), GPUSTRIPE_ERR_NOT_SUPPORTED, "%s", m.lib.why_not().c_str());
  GS_REQUIRE(!symmetric || m.lib.has_windows(), GPUSTRIPE_ERR_NOT_SUPPORTED,
             "NCCL %s has no symmetric windows (ncclMemAlloc/ncclCommWindowRegister need 2.27+)",
             m.lib.version().c_str());
  int have = 0;
  cudaGetDeviceCount(&have);
  GS_REQUIRE(ranks >= 1 && ranks <= have, GPUSTRIPE_ERR_INVALID_DEVICE, "NCCL reference over %d ranks: %d GPUs here",
             ranks, have);
  m.n = ranks;
  m.max_bytes = max_bytes;
  m.symmetric = symmetric;
  m.comms.assign(ranks, nullptr);
  std::vector<int> devs(ranks);
  for (int r = 0; r < ranks; ++r) devs[r] = r;
  try {
    m.lib.comm_init_all(m.comms.data(), ranks, devs.data());
    m.streams.assign(ranks, nullptr);
    m.send.assign(ranks, nullptr);
    m.recv.assign(ranks, nullptr);
    for (int r = 0; r < ranks; ++r) {
      cuda_check(cudaSetDevice(r), "cudaSetDevice", r);
      cuda_check(cudaStreamCreateWithFlags(&m.streams[r], cudaStreamNonBlocking), "cudaStreamCreate", r);
      if (symmetric) {
        m.send[r] = m.lib.mem_alloc(max_bytes);
        m.recv[r] = m.lib.mem_alloc(max_bytes);
      } else {
        cuda_check(cudaMalloc(&m.send[r], max_bytes), "cudaMalloc", r);
        cuda_check(cudaMalloc(&m.recv[r], max_bytes), "cudaMalloc", r);
      }
      cuda_check(cudaMemset(m.send[r], 0, max_bytes), "cudaMemset", r);
      cuda_check(cudaMemset(m.recv[r], 0, max_bytes), "cudaMemset", r);
    }
    if (symmetric) {
      // Window registration is collective: every rank's call in one group.
      m.send_win.assign(ranks, nullptr);
      m.recv_win.assign(ranks, nullptr);
      m.lib.group_start();
      for (int r = 0; r < ranks; ++r) {
        m.send_win[r] = m.lib.window_register(m.comms[r], m.send[r], max_bytes, kNcclWinCollSymmetric);
        m.recv_win[r] = m.lib.window_register(m.comms[r], m.recv[r], max_bytes, kNcclWinCollSymmetric);
      }
      m.lib.group_end();
    }
  } catch (...) {
    m.release();
    throw;
  }
}

NcclCollBench::~NcclCollBench() { impl_->release(); }

std::string NcclCollBench::describe() const {
  std::string policy = environment_variable("NCCL_CTA_POLICY");
  return format("NCCL %s, ncclCommInitAll over %d GPUs in one process, %s, NCCL_CTA_POLICY=%s",
                impl_->lib.version().c_str(), impl_->n,
                impl_->symmetric ? "buffers from ncclMemAlloc in symmetric windows" : "cudaMalloc buffers",
                policy.empty() ? "unset" : policy.c_str());
}

NcclCollTiming NcclCollBench::time(coll::CollOp op, size_t bytes, coll::DataType dt, int warmup, int iters,
                                   int trials) {
  Impl& m = *impl_;
  const size_t unit = coll::dtype_size(dt) * m.n;
  GS_REQUIRE(bytes > 0 && bytes % unit == 0 && bytes <= m.max_bytes, GPUSTRIPE_ERR_INVALID_SIZE,
             "NCCL reference: %zu bytes must be a positive multiple of %zu, at most %zu", bytes, unit, m.max_bytes);
  GS_REQUIRE(iters > 0 && trials > 0 && warmup >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "iters and trials must be positive, warmup not negative");
  for (int i = 0; i < warmup; ++i) m.call(op, bytes, dt);
  m.sync();
  std::vector<double> per_call;
  for (int k = 0; k < trials; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) m.call(op, bytes, dt);
    m.sync();
    auto t1 = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
  }
  const auto [lo, hi] = std::minmax_element(per_call.begin(), per_call.end());
  return {median_of(per_call), *lo, *hi};
}

#else  // no CUDA: the reference needs real GPUs

struct NcclCollBench::Impl {};
NcclCollBench::NcclCollBench(int, size_t, bool) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "gpustripe was built without CUDA: no NCCL reference");
}
NcclCollBench::~NcclCollBench() = default;
std::string NcclCollBench::describe() const { return ""; }
NcclCollTiming NcclCollBench::time(coll::CollOp, size_t, coll::DataType, int, int, int) { return {}; }

#endif

}  // namespace gpustripe
