// Checks collectives against a float64 host reference: random inputs per rank, the
// op run through a coll::Comm on any backend, results compared per element with a
// tolerance per type. Shared by the emulated (CI) and the GPU tests.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "coll/comm.hpp"
#include "coll/half.hpp"
#include "common/error.hpp"
#include "coll/types.hpp"

namespace coll_test {

using namespace gpustripe;
using namespace gpustripe::coll;

inline const std::vector<DataType>& all_dtypes() {
  static const std::vector<DataType> v{GPUSTRIPE_FLOAT32, GPUSTRIPE_FLOAT64, GPUSTRIPE_FLOAT16,
                                       GPUSTRIPE_BFLOAT16, GPUSTRIPE_INT32,   GPUSTRIPE_INT64};
  return v;
}
inline const std::vector<RedOp>& all_redops() {
  static const std::vector<RedOp> v{GPUSTRIPE_SUM, GPUSTRIPE_PROD, GPUSTRIPE_MAX, GPUSTRIPE_MIN};
  return v;
}

// Element k of a typed host buffer, as double.
inline double get(DataType dt, const std::vector<uint8_t>& b, size_t k) {
  const uint8_t* p = b.data() + k * dtype_size(dt);
  switch (dt) {
    case GPUSTRIPE_FLOAT32: { float v; std::memcpy(&v, p, 4); return v; }
    case GPUSTRIPE_FLOAT64: { double v; std::memcpy(&v, p, 8); return v; }
    case GPUSTRIPE_FLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return half_to_float(v); }
    case GPUSTRIPE_BFLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_float(v); }
    case GPUSTRIPE_INT32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    default: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
  }
}

inline void put(DataType dt, std::vector<uint8_t>& b, size_t k, double x) {
  uint8_t* p = b.data() + k * dtype_size(dt);
  switch (dt) {
    case GPUSTRIPE_FLOAT32: { float v = static_cast<float>(x); std::memcpy(p, &v, 4); break; }
    case GPUSTRIPE_FLOAT64: std::memcpy(p, &x, 8); break;
    case GPUSTRIPE_FLOAT16: { uint16_t v = float_to_half(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    case GPUSTRIPE_BFLOAT16: { uint16_t v = float_to_bf16(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    case GPUSTRIPE_INT32: { int32_t v = static_cast<int32_t>(x); std::memcpy(p, &v, 4); break; }
    default: { int64_t v = static_cast<int64_t>(x); std::memcpy(p, &v, 8); break; }
  }
}

inline bool is_int(DataType dt) { return dt == GPUSTRIPE_INT32 || dt == GPUSTRIPE_INT64; }

// Random values that keep every reduction exact for integers and well conditioned for
// floats: PROD gets factors near 1 (floats) or in -2..2 (integers).
inline std::vector<uint8_t> random_buffer(DataType dt, RedOp op, size_t count, std::mt19937_64& rng) {
  std::vector<uint8_t> b(count * dtype_size(dt));
  std::uniform_real_distribution<double> uf(op == GPUSTRIPE_PROD ? 0.5 : -1.0, op == GPUSTRIPE_PROD ? 1.5 : 1.0);
  std::uniform_int_distribution<int> ui(op == GPUSTRIPE_PROD ? -2 : -1000, op == GPUSTRIPE_PROD ? 2 : 1000);
  for (size_t k = 0; k < count; ++k) put(dt, b, k, is_int(dt) ? ui(rng) : uf(rng));
  return b;
}

inline double reference(RedOp op, const std::vector<double>& xs) {
  double acc = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) {
    switch (op) {
      case GPUSTRIPE_SUM: acc += xs[i]; break;
      case GPUSTRIPE_PROD: acc *= xs[i]; break;
      case GPUSTRIPE_MAX: acc = std::max(acc, xs[i]); break;
      default: acc = std::min(acc, xs[i]); break;
    }
  }
  return acc;
}

inline double tolerance(DataType dt, double ref, int n) {
  double mag = std::max(1.0, std::fabs(ref));
  switch (dt) {
    case GPUSTRIPE_FLOAT32: return 1e-6 * n * mag;
    case GPUSTRIPE_FLOAT64: return 1e-13 * n * mag;
    case GPUSTRIPE_FLOAT16: return 1e-3 * n * mag;   // rounded once from float: half an ulp is 2^-11
    case GPUSTRIPE_BFLOAT16: return 8e-3 * n * mag;  // half an ulp is 2^-8
    default: return 0;
  }
}

// Device buffers of one test, freed at the end.
class Buffers {
 public:
  explicit Buffers(Backend& b) : b_(b) {}
  ~Buffers() {
    for (void* p : ptrs_) b_.free_device(p);
    for (auto& [dev, s] : streams_) b_.destroy_stream(s);
  }
  void* alloc(int dev, size_t bytes) {
    void* p = b_.alloc_device(dev, bytes ? bytes : 1);
    ptrs_.push_back(p);
    return p;
  }
  StreamHandle stream(int dev) {
    for (auto& [d, s] : streams_)
      if (d == dev) return s;
    streams_.emplace_back(dev, b_.create_stream(dev));
    return streams_.back().second;
  }
  void upload(void* dst, int dev, const std::vector<uint8_t>& data) {
    if (data.empty()) return;
    StreamHandle s = stream(dev);
    b_.copy_async(dst, dev, data.data(), kHostDevice, data.size(), s);
    b_.synchronize_stream(s);
  }
  std::vector<uint8_t> download(const void* src, int dev, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    if (!bytes) return out;
    StreamHandle s = stream(dev);
    b_.copy_async(out.data(), kHostDevice, src, dev, bytes, s);
    b_.synchronize_stream(s);
    return out;
  }

 private:
  Backend& b_;
  std::vector<void*> ptrs_;
  std::vector<std::pair<int, StreamHandle>> streams_;
};

struct Case {
  CollOp op;
  DataType dt = GPUSTRIPE_FLOAT32;
  RedOp redop = GPUSTRIPE_SUM;
  size_t count = 0;  // per the C API's meaning for the op
  bool in_place = false;
  int root = 0;
  bool async = false;  // pass streams, then synchronize them
  int repeats = 1;     // calls on the same buffers, each on fresh data (graph capture and replays)
  std::string describe() const {
    return std::string(coll_op_name(op)) + " " + dtype_name(dt) + " " + redop_name(redop) + " count=" +
           std::to_string(count) + (in_place ? " in-place" : "") + " root=" + std::to_string(root) +
           (async ? " async" : "") + (repeats > 1 ? " x" + std::to_string(repeats) : "");
  }
};

// Runs one case on the communicator; EXPECTs every element of every rank's result.
// Returns the number of mismatching elements (0 on success).
inline size_t run_case(Comm& comm, const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.describe());
  Backend& be = comm.backend();
  const int n = comm.size();
  const size_t esz = dtype_size(c.dt), cnt = c.count;
  std::mt19937_64 rng(seed);
  Buffers bufs(be);

  // Input and output element counts per rank.
  size_t in_n = cnt, out_n = cnt;
  switch (c.op) {
    case CollOp::AllToAll: in_n = out_n = cnt * n; break;
    case CollOp::AllGather: in_n = cnt; out_n = cnt * n; break;
    case CollOp::ReduceScatter: in_n = cnt * n; out_n = cnt; break;
    default: break;
  }
  std::vector<std::vector<uint8_t>> in(n);
  std::vector<const void*> send(n);
  std::vector<void*> recv(n), both(n);
  std::vector<char*> bases(n, nullptr);
  size_t bad = 0;
  for (int rep = 0; rep < std::max(1, c.repeats); ++rep) {
    for (int r = 0; r < n; ++r) {
      const int dev = comm.device(r);
      in[r] = random_buffer(c.dt, c.redop, in_n, rng);
      // The receive buffer starts as garbage, so a result that is not written shows.
      std::vector<uint8_t> junk = random_buffer(c.dt, c.redop, out_n, rng);
      if (c.in_place) {
        size_t alloc = std::max(in_n, out_n) * esz;
        if (!bases[r]) bases[r] = static_cast<char*>(bufs.alloc(dev, alloc));
        char* base = bases[r];
        switch (c.op) {
          case CollOp::AllGather:
            bufs.upload(base, dev, junk);
            bufs.upload(base + r * cnt * esz, dev, in[r]);
            send[r] = base + r * cnt * esz;
            recv[r] = base;
            break;
          case CollOp::ReduceScatter:
            bufs.upload(base, dev, in[r]);
            send[r] = base;
            recv[r] = base + r * cnt * esz;
            break;
          default:
            bufs.upload(base, dev, in[r]);
            send[r] = recv[r] = base;
            break;
        }
      } else {
        if (rep == 0) {
          send[r] = bufs.alloc(dev, in_n * esz);
          recv[r] = nullptr;
          if (c.op != CollOp::Reduce || r == c.root) recv[r] = bufs.alloc(dev, out_n * esz);
        }
        bufs.upload(const_cast<void*>(send[r]), dev, in[r]);
        if (recv[r]) bufs.upload(recv[r], dev, junk);
      }
      both[r] = const_cast<void*>(send[r]);
    }

    Comm::Streams streams;
    if (c.async)
      for (int r = 0; r < n; ++r) streams.push_back(bufs.stream(comm.device(r)));
    switch (c.op) {
      case CollOp::AllToAll: comm.alltoall(send, recv, cnt, c.dt, streams); break;
      case CollOp::AllGather: comm.allgather(send, recv, cnt, c.dt, streams); break;
      case CollOp::ReduceScatter: comm.reduce_scatter(send, recv, cnt, c.dt, c.redop, streams); break;
      case CollOp::AllReduce: comm.allreduce(send, recv, cnt, c.dt, c.redop, streams); break;
      case CollOp::Bcast: comm.bcast(both, cnt, c.dt, c.root, streams); break;
      case CollOp::Reduce: comm.reduce(send, recv, cnt, c.dt, c.redop, c.root, streams); break;
    }
    for (StreamHandle s : streams) be.synchronize_stream(s);

    auto check = [&](int r, size_t k, double got, double want) {
      double tol = tolerance(c.dt, want, n);
      if (!(std::fabs(got - want) <= tol)) {
        if (bad < 5)
          ADD_FAILURE() << "rank " << r << " element " << k << ": got " << got << ", want " << want << " (tol " << tol
                        << ") [" << comm.last_schedule() << "]";
        ++bad;
      }
    };
    for (int r = 0; r < n; ++r) {
      const int dev = comm.device(r);
      if (c.op == CollOp::Reduce && r != c.root) continue;
      const void* res = c.op == CollOp::Bcast ? both[r] : recv[r];
      std::vector<uint8_t> out = bufs.download(res, dev, out_n * esz);
      std::vector<double> xs(n);
      for (size_t k = 0; k < out_n; ++k) {
        double want = 0;
        switch (c.op) {
          case CollOp::AllToAll: want = get(c.dt, in[k / cnt], r * cnt + k % cnt); break;
          case CollOp::AllGather: want = get(c.dt, in[k / cnt], k % cnt); break;
          case CollOp::Bcast: want = get(c.dt, in[c.root], k); break;
          case CollOp::ReduceScatter:
            for (int i = 0; i < n; ++i) xs[i] = get(c.dt, in[i], r * cnt + k);
            want = reference(c.redop, xs);
            break;
          default:
            for (int i = 0; i < n; ++i) xs[i] = get(c.dt, in[i], k);
            want = reference(c.redop, xs);
            break;
        }
        check(r, k, get(c.dt, out, k), want);
      }
    }
  }
  return bad;
}

}  // namespace coll_test
