#include "coll/coll_bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "coll/executor.hpp"
#include "common/error.hpp"
#include "common/median.hpp"
#include "common/text_file.hpp"

namespace gpustripe::coll {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// CallPacing::FromIdle: a flag every rank's stream waits on before the call, timing events
// around it, and a watchdog that releases the flag if the call never returns (a call that waits
// on its host for the GPUs it holds back).
class IdleStart {
 public:
  IdleStart(Backend& be, const std::vector<int>& devs) : be_(be) {
    area_ = std::aligned_alloc(kPage, kPage);
    GS_REQUIRE(area_, GPUSTRIPE_ERR_NO_MEMORY, "a page for the from-idle flag");
    std::memset(area_, 0, kPage);
    flag_ = be_.register_host(area_, kPage);
    if (!flag_) {
      std::free(area_);
      GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "timing calls from idle GPUs: the %s backend has no stream flags",
               be_.name());
    }
    for (int d : devs) {
      start_.push_back(be_.create_event(d, true));
      end_.push_back(be_.create_event(d, true));
    }
    probe_ = be_.alloc_device(devs[0], 4);
    probe_dev_ = devs[0];
    watchdog_ = std::thread([this] { watch(); });
  }
  ~IdleStart() {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    for (EventHandle e : start_) be_.destroy_event(e);
    for (EventHandle e : end_) be_.destroy_event(e);
    be_.free_device(probe_);
    be_.unregister_host(area_);
    std::free(area_);
  }

  // Holds every stream back, enqueues `call`, records its end, releases the streams. Returns the
  // host time of the call's enqueue.
  template <class Call>
  double enqueue(const std::vector<StreamHandle>& streams, Call&& call) {
    const uint32_t v = ++seq_;
    for (size_t r = 0; r < streams.size(); ++r) {
      be_.stream_wait_flag(streams[r], flag_, v);
      be_.record_event(start_[r], streams[r]);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      armed_ = v;
      armed_at_ = Clock::now();
    }
    cv_.notify_all();
    const auto t0 = Clock::now();
    call();
    const double enq = us_since(t0);
    for (size_t r = 0; r < streams.size(); ++r) be_.record_event(end_[r], streams[r]);
    std::lock_guard<std::mutex> l(mu_);
    armed_ = 0;
    release(v);
    return enq;
  }

  // After the streams were synchronised: the call's GPU time (the slowest rank's).
  double gpu_us() {
    bool forced;
    {
      std::lock_guard<std::mutex> l(mu_);
      forced = forced_;
    }
    GS_REQUIRE(!forced, GPUSTRIPE_ERR_NOT_SUPPORTED,
               "timing calls from idle GPUs: the call did not return while its GPUs were held back (it waits on "
               "its host for them): no from-idle time for this schedule");
    double us = 0;
    for (size_t r = 0; r < start_.size(); ++r) us = std::max(us, 1e3 * be_.elapsed_ms(start_[r], end_[r]));
    return us;
  }

  // The least time for a host to start work on a GPU and see it end: a 4-byte memset on `s`.
  double round_trip_us(StreamHandle s) {
    const auto t0 = Clock::now();
    be_.memset_async(probe_, probe_dev_, 0, 4, s);
    be_.synchronize_stream(s);
    return us_since(t0);
  }

 private:
  static constexpr size_t kPage = 4096;
  static constexpr auto kPatience = std::chrono::seconds(2);

  void release(uint32_t v) { reinterpret_cast<std::atomic<uint32_t>*>(area_)->store(v, std::memory_order_release); }

  void watch() {
    std::unique_lock<std::mutex> l(mu_);
    while (!quit_) {
      if (armed_ && Clock::now() - armed_at_ > kPatience) {
        forced_ = true;
        release(armed_);
        armed_ = 0;
      }
      cv_.wait_for(l, std::chrono::milliseconds(100));
    }
  }

  Backend& be_;
  void* area_ = nullptr;
  uint32_t* flag_ = nullptr;
  uint32_t seq_ = 0;
  std::vector<EventHandle> start_, end_;
  void* probe_ = nullptr;
  int probe_dev_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t armed_ = 0;  // the value a held-back call waits for (0: none)
  Clock::time_point armed_at_;
  bool forced_ = false, quit_ = false;
  std::thread watchdog_;
};

}  // namespace

double busbw_factor(CollOp op, int n) {
  switch (op) {
    case CollOp::AllReduce: return 2.0 * (n - 1) / n;
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::AllToAll: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

CollOp parse_coll_op(const std::string& name) {
  for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Bcast,
                    CollOp::Reduce})
    if (name == coll_op_name(op)) return op;
  GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT,
           "unknown collective '%s' (alltoall, allgather, reduce_scatter, allreduce, bcast, reduce)", name.c_str());
}

CollTiming time_collective(Comm& comm, CollOp op, size_t bytes, DataType dt, RedOp redop, int warmup, int iters,
                           int trials, CallPacing pacing) {
  const int n = comm.size();
  const size_t esz = dtype_size(dt);
  const bool per_block = op == CollOp::AllToAll || op == CollOp::AllGather || op == CollOp::ReduceScatter;
  const size_t unit = per_block ? esz * n : esz;
  GS_REQUIRE(bytes > 0 && bytes % unit == 0, GPUSTRIPE_ERR_INVALID_SIZE,
             "%s of %zu bytes: must be a positive multiple of %zu (element size%s)", coll_op_name(op), bytes, unit,
             per_block ? " times ranks" : "");
  GS_REQUIRE(iters > 0 && trials > 0 && warmup >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "iters and trials must be positive, warmup not negative");
  const size_t count = bytes / unit;
  size_t send_bytes = bytes, recv_bytes = bytes;
  if (op == CollOp::AllGather) send_bytes = bytes / n;
  if (op == CollOp::ReduceScatter) recv_bytes = bytes / n;

  Backend& be = comm.backend();
  std::vector<const void*> send(n);
  std::vector<void*> recv(n), owned;
  Comm::Streams streams;
  for (int r = 0; r < n; ++r) {
    int dev = comm.device(r);
    void* s = be.alloc_device(dev, send_bytes);
    void* d = be.alloc_device(dev, recv_bytes);
    owned.push_back(s);
    owned.push_back(d);
    send[r] = s;
    recv[r] = d;
    streams.push_back(be.create_stream(dev));
    be.memset_async(s, dev, 0, send_bytes, streams.back());
    be.memset_async(d, dev, 0, recv_bytes, streams.back());
  }
  auto call = [&] {
    switch (op) {
      case CollOp::AllToAll: comm.alltoall(send, recv, count, dt, streams); break;
      case CollOp::AllGather: comm.allgather(send, recv, count, dt, streams); break;
      case CollOp::ReduceScatter: comm.reduce_scatter(send, recv, count, dt, redop, streams); break;
      case CollOp::AllReduce: comm.allreduce(send, recv, count, dt, redop, streams); break;
      case CollOp::Bcast: comm.bcast(recv, count, dt, 0, streams); break;
      case CollOp::Reduce: comm.reduce(send, recv, count, dt, redop, 0, streams); break;
    }
  };
  auto sync = [&] {
    for (StreamHandle s : streams) be.synchronize_stream(s);
  };

  CollTiming t;
  std::vector<double> per_call, enqueue, gpu, round_trip;
  try {
    for (int i = 0; i < warmup; ++i) call();
    sync();
    std::vector<int> devs;
    for (int r = 0; r < n; ++r) devs.push_back(comm.device(r));
    std::unique_ptr<IdleStart> idle = pacing == CallPacing::FromIdle ? std::make_unique<IdleStart>(be, devs) : nullptr;
    for (int k = 0; k < trials; ++k) {
      if (idle) {
        // Each call alone: the trial's figure is the mean over its calls of GPU time + round trip.
        double g = 0, rt = 0, enq = 0;
        for (int i = 0; i < iters; ++i) {
          enq += idle->enqueue(streams, call);
          sync();
          g += idle->gpu_us();
          rt += idle->round_trip_us(streams[0]);
        }
        gpu.push_back(g / iters);
        round_trip.push_back(rt / iters);
        enqueue.push_back(enq / iters);
        per_call.push_back((g + rt) / iters);
        continue;
      }
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) call();
      const double issued = us_since(t0);
      sync();
      enqueue.push_back(issued / iters);
      per_call.push_back(us_since(t0) / iters);
    }
  } catch (...) {
    comm.synchronize();
    for (StreamHandle s : streams) be.destroy_stream(s);
    for (void* p : owned) be.free_device(p);
    throw;
  }
  comm.synchronize();
  const std::string trace_file = Executor::trace_path();
  const std::string trace = trace_file.empty() ? "" : comm.trace_text();
  if (!trace.empty()) {
    std::string text = file_exists(trace_file) ? read_text_file(trace_file, "coll trace") : "";
    text += format("%s n=%d %zu B: %s\n", coll_op_name(op), n, bytes, comm.last_schedule().c_str()) + trace;
    write_text_file(trace_file, text);
  }
  for (StreamHandle s : streams) be.destroy_stream(s);
  for (void* p : owned) be.free_device(p);

  t.enqueue_us = median_of(enqueue);
  if (!gpu.empty()) {
    t.gpu_us = median_of(gpu);
    t.round_trip_us = median_of(round_trip);
  }
  t.us = median_of(per_call);
  t.min_us = *std::min_element(per_call.begin(), per_call.end());
  t.max_us = *std::max_element(per_call.begin(), per_call.end());
  t.algbw_gbps = bytes / (t.us * 1e3);
  t.busbw_gbps = t.algbw_gbps * busbw_factor(op, n);
  t.schedule = comm.last_schedule();
  return t;
}

}  // namespace gpustripe::coll
