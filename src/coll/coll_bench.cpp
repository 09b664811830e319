#include "coll/coll_bench.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "coll/executor.hpp"
#include "common/error.hpp"
#include "common/median.hpp"
#include "common/text_file.hpp"

namespace gpustripe::coll {

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
  std::vector<double> per_call, enqueue;
  try {
    for (int i = 0; i < warmup; ++i) call();
    sync();
    for (int k = 0; k < trials; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        call();
        if (pacing == CallPacing::WaitEach) sync();
      }
      auto issued = std::chrono::steady_clock::now();
      sync();
      auto t1 = std::chrono::steady_clock::now();
      enqueue.push_back(std::chrono::duration<double, std::micro>(issued - t0).count() / iters);
      per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
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
  t.us = median_of(per_call);
  t.min_us = *std::min_element(per_call.begin(), per_call.end());
  t.max_us = *std::max_element(per_call.begin(), per_call.end());
  t.algbw_gbps = bytes / (t.us * 1e3);
  t.busbw_gbps = t.algbw_gbps * busbw_factor(op, n);
  t.schedule = comm.last_schedule();
  return t;
}

}  // namespace gpustripe::coll
