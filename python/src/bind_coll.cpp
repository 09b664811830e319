// gpustripe.Comm: collectives over GPUs of this process. Buffers are given per rank,
// as arrays (torch, cupy, jax... through DLPack, bfloat16 included) or raw device
// pointers (ints; then count and dtype are required). Calls release the GIL.
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>

#include "bench/nccl_coll.hpp"
#include "bindings.hpp"
#include "coll/coll_bench.hpp"
#include "coll/comm.hpp"
#include "common/error.hpp"
#include "core/context.hpp"

namespace gpustripe::py {
namespace {

using coll::Comm;
using coll::DataType;

// One per-rank buffer argument.
struct Buf {
  uintptr_t ptr = 0;
  size_t elems = 0;        // 0 for raw pointers
  std::optional<DataType> dtype;
  std::string framework;   // "torch", "cupy", ... (the array type's top module), "" for raw pointers
};

DataType dtype_of(const nb::dlpack::dtype& d) {
  using code = nb::dlpack::dtype_code;
  auto is = [&](code c, int bits) { return d.code == static_cast<uint8_t>(c) && d.bits == bits && d.lanes == 1; };
  if (is(code::Float, 32)) return GPUSTRIPE_FLOAT32;
  if (is(code::Float, 64)) return GPUSTRIPE_FLOAT64;
  if (is(code::Float, 16)) return GPUSTRIPE_FLOAT16;
  if (is(code::Bfloat, 16)) return GPUSTRIPE_BFLOAT16;
  if (is(code::Int, 32)) return GPUSTRIPE_INT32;
  if (is(code::Int, 64)) return GPUSTRIPE_INT64;
  if (is(code::Int, 8)) return GPUSTRIPE_INT8;
  if (is(code::Int, 16)) return GPUSTRIPE_INT16;
  if (is(code::UInt, 8)) return GPUSTRIPE_UINT8;
  if (is(code::UInt, 16)) return GPUSTRIPE_UINT16;
  if (is(code::UInt, 32)) return GPUSTRIPE_UINT32;
  if (is(code::UInt, 64)) return GPUSTRIPE_UINT64;
  GS_THROW(GPUSTRIPE_ERR_INVALID_TYPE, "array dtype (code %d, %d bits) is none of float32, float64, float16, "
           "bfloat16, int8/16/32/64, uint8/16/32/64", d.code, d.bits);
}

// Arrays without DLPack (numba's): the CUDA array interface's pointer, shape and type.
Buf buf_of_cai(nb::handle h, const char* what, size_t rank) {
  nb::dict cai = nb::cast<nb::dict>(h.attr("__cuda_array_interface__"));
  Buf b;
  b.ptr = nb::cast<uintptr_t>(nb::cast<nb::tuple>(cai["data"])[0]);
  b.elems = 1;
  for (nb::handle d : nb::cast<nb::tuple>(cai["shape"])) b.elems *= nb::cast<size_t>(d);
  std::string t = nb::cast<std::string>(cai["typestr"]);
  const std::pair<const char*, DataType> types[] = {{"f4", GPUSTRIPE_FLOAT32}, {"f8", GPUSTRIPE_FLOAT64},
                                                    {"f2", GPUSTRIPE_FLOAT16}, {"i4", GPUSTRIPE_INT32},
                                                    {"i8", GPUSTRIPE_INT64}};
  for (auto& [code, dt] : types)
    if (t.size() == 3 && t.substr(1) == code) b.dtype = dt;
  GS_REQUIRE(b.dtype.has_value(), GPUSTRIPE_ERR_INVALID_TYPE, "%s[%zu]: array type '%s' is not supported", what, rank,
             t.c_str());
  GS_REQUIRE(!cai.contains("strides") || cai["strides"].is_none() || b.elems <= 1, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "%s[%zu] has strides: pass a contiguous array", what, rank);
  return b;
}

Buf buf_of(nb::handle h, const char* what, size_t rank) {
  Buf b;
  if (nb::isinstance<nb::int_>(h)) {
    b.ptr = nb::cast<uintptr_t>(h);
    return b;
  }
  nb::ndarray<> a;
  if (!nb::try_cast(h, a)) {
    if (nb::hasattr(h, "__cuda_array_interface__")) return buf_of_cai(h, what, rank);
    GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "%s[%zu]: expected a device array (DLPack or __cuda_array_interface__: torch, cupy, numba, ...) or a "
             "pointer (int), got %s",
             what, rank, nb::type_name(h.type()).c_str());
  }
  // C-contiguous only: the collectives address elements by offset.
  int64_t expect = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1)
      GS_REQUIRE(a.stride(d) == expect, GPUSTRIPE_ERR_INVALID_ARGUMENT,
                 "%s[%zu] is not contiguous: make a contiguous copy first", what, rank);
    expect *= a.shape(d);
  }
  b.ptr = reinterpret_cast<uintptr_t>(a.data());
  b.elems = a.size();
  std::string mod = nb::cast<std::string>(nb::handle(h.type()).attr("__module__"));
  b.framework = mod.substr(0, mod.find('.'));
  b.dtype = dtype_of(a.dtype());
  return b;
}

std::vector<Buf> bufs_of(Comm& c, nb::sequence seq, const char* what, bool none_ok = false) {
  size_t n = nb::len(seq);
  GS_REQUIRE(static_cast<int>(n) == c.size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "%s: %zu buffers for %d ranks", what, n,
             c.size());
  std::vector<Buf> out;
  for (size_t i = 0; i < n; ++i) {
    nb::handle h = seq[i];
    out.push_back(none_ok && h.is_none() ? Buf{} : buf_of(h, what, i));
  }
  return out;
}

// The element type: given, or every array's (which must agree).
DataType resolve_dtype(std::optional<std::string> given, const std::vector<std::vector<Buf>*>& lists) {
  std::optional<DataType> dt;
  if (given) dt = coll::parse_dtype(*given);
  for (auto* l : lists)
    for (const Buf& b : *l)
      if (b.dtype) {
        GS_REQUIRE(!dt || *dt == *b.dtype, GPUSTRIPE_ERR_INVALID_TYPE, "arrays of %s and %s in one call",
                   coll::dtype_name(*b.dtype), coll::dtype_name(dt.value()));
        dt = b.dtype;
      }
  GS_REQUIRE(dt.has_value(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "raw pointers need dtype=");
  return *dt;
}

// The count: given, or `elems / per` of the first array of `from`.
size_t resolve_count(std::optional<size_t> given, const std::vector<Buf>& from, size_t per, const char* what) {
  if (given) return *given;
  for (const Buf& b : from)
    if (b.elems) {
      GS_REQUIRE(b.elems % per == 0, GPUSTRIPE_ERR_INVALID_SIZE, "%s holds %zu elements, not a multiple of %zu", what,
                 b.elems, per);
      return b.elems / per;
    }
  GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "raw pointers need count=");
}

std::vector<const void*> cptrs(const std::vector<Buf>& v) {
  std::vector<const void*> out;
  for (auto& b : v) out.push_back(reinterpret_cast<const void*>(b.ptr));
  return out;
}
std::vector<void*> ptrs(const std::vector<Buf>& v) {
  std::vector<void*> out;
  for (auto& b : v) out.push_back(reinterpret_cast<void*>(b.ptr));
  return out;
}
// A blocking call on arrays whose framework queues work on its own streams (torch and
// cupy: often the legacy default stream, which the library's non-blocking streams do not
// wait for): let that work finish first, on every rank's device.
void settle_frameworks(Comm& c, const std::vector<std::vector<Buf>*>& lists, bool have_streams) {
  if (have_streams) return;
  bool torch = false, cupy = false;
  for (auto* l : lists)
    for (const Buf& b : *l) {
      torch = torch || b.framework == "torch";
      cupy = cupy || b.framework == "cupy";
    }
  for (int r = 0; r < c.size(); ++r) {
    if (torch) nb::module_::import_("torch").attr("cuda").attr("synchronize")(c.device(r));
    if (cupy) nb::module_::import_("cupy").attr("cuda").attr("Device")(c.device(r)).attr("synchronize")();
  }
}

Comm::Streams streams_of(Comm& c, std::optional<std::vector<uintptr_t>> s) {
  if (!s) return {};
  GS_REQUIRE(static_cast<int>(s->size()) == c.size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "%zu streams for %d ranks",
             s->size(), c.size());
  Comm::Streams out;
  for (uintptr_t h : *s) out.push_back(reinterpret_cast<StreamHandle>(h));
  return out;
}

// The Python object owns its communicator (Comm is made by a factory, not movable).
struct PyComm {
  std::unique_ptr<Comm> impl;
};

const char* kBufDoc =
    " Buffers: one per rank, device arrays (DLPack or __cuda_array_interface__; count and dtype come from them) or "
    "pointers (int, with count= and dtype=). streams: None (blocking; torch/cupy work queued on the arrays' devices "
    "is waited for first) or one cudaStream_t (int) per rank (asynchronous, stream-ordered).";

void bind_coll(nb::module_& m) {
  using OptSize = std::optional<size_t>;
  using OptStr = std::optional<std::string>;
  using OptStreams = std::optional<std::vector<uintptr_t>>;
  nb::class_<PyComm>(m, "Comm",
                   "A communicator over GPUs of this process (rank r is devices[r]); see gpustripe/coll.h for the "
                   "buffers of each collective and its in-place forms.")
      .def("__init__",
           [](PyComm* self, Context& ctx, std::vector<int> devices, std::map<std::string, std::string> tuning) {
             gpustripe::coll::Tuning t;
             for (const auto& [name, value] : tuning) t.set(name, value);
             new (self) PyComm{Comm::create(ctx, devices, t)};
           },
           nb::arg("context"), nb::arg("devices"), nb::arg("tuning") = std::map<std::string, std::string>(),
           nb::keep_alive<1, 2>(),
           "tuning: the schedules' chunking and crossovers by field name (coll::Tuning in coll/tuning.hpp; "
           "values as text, sizes with K/M/G), for benchmarks and tests that reach other schedules")
      .def_prop_ro("size", [](PyComm& p) { return p.impl->size(); })
      .def("device", [](PyComm& p, int rank) { return p.impl->device(rank); }, nb::arg("rank"))
      .def_prop_ro("last_schedule", [](PyComm& p) { return p.impl->last_schedule(); },
                   "The schedule of the last call and why it was chosen")
      .def("synchronize", [](PyComm& p) { without_gil([&] { p.impl->synchronize(); }); })
      .def(
          "alltoall",
          [](PyComm& pc, nb::sequence send, nb::sequence recv, OptSize count, OptStr dtype, OptStreams streams) {
            Comm& c = *pc.impl;
            auto s = bufs_of(c, send, "send"), r = bufs_of(c, recv, "recv");
            DataType dt = resolve_dtype(dtype, {&s, &r});
            size_t n = resolve_count(count, s, c.size(), "send");
            settle_frameworks(c, {&s, &r}, streams.has_value());
            without_gil([&] { c.alltoall(cptrs(s), ptrs(r), n, dt, streams_of(c, streams)); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count") = nb::none(), nb::arg("dtype") = nb::none(),
          nb::arg("streams") = nb::none(), (std::string("Alltoall; count: elements per peer block.") + kBufDoc).c_str())
      .def(
          "allgather",
          [](PyComm& pc, nb::sequence send, nb::sequence recv, OptSize count, OptStr dtype, OptStreams streams) {
            Comm& c = *pc.impl;
            auto s = bufs_of(c, send, "send"), r = bufs_of(c, recv, "recv");
            DataType dt = resolve_dtype(dtype, {&s, &r});
            size_t n = resolve_count(count, s, 1, "send");
            settle_frameworks(c, {&s, &r}, streams.has_value());
            without_gil([&] { c.allgather(cptrs(s), ptrs(r), n, dt, streams_of(c, streams)); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count") = nb::none(), nb::arg("dtype") = nb::none(),
          nb::arg("streams") = nb::none(), (std::string("Allgather; count: elements per rank.") + kBufDoc).c_str())
      .def(
          "reduce_scatter",
          [](PyComm& pc, nb::sequence send, nb::sequence recv, std::string op, OptSize count, OptStr dtype,
             OptStreams streams) {
            Comm& c = *pc.impl;
            auto s = bufs_of(c, send, "send"), r = bufs_of(c, recv, "recv");
            DataType dt = resolve_dtype(dtype, {&s, &r});
            size_t n = resolve_count(count, r, 1, "recv");
            coll::RedOp ro = coll::parse_redop(op);
            settle_frameworks(c, {&s, &r}, streams.has_value());
            without_gil([&] { c.reduce_scatter(cptrs(s), ptrs(r), n, dt, ro, streams_of(c, streams)); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("op") = "sum", nb::arg("count") = nb::none(),
          nb::arg("dtype") = nb::none(), nb::arg("streams") = nb::none(),
          (std::string("Reduce-scatter (block); count: elements each rank receives; op: sum|prod|max|min.") +
           kBufDoc).c_str())
      .def(
          "allreduce",
          [](PyComm& pc, nb::sequence send, nb::sequence recv, std::string op, OptSize count, OptStr dtype,
             OptStreams streams) {
            Comm& c = *pc.impl;
            auto s = bufs_of(c, send, "send"), r = bufs_of(c, recv, "recv");
            DataType dt = resolve_dtype(dtype, {&s, &r});
            size_t n = resolve_count(count, s, 1, "send");
            coll::RedOp ro = coll::parse_redop(op);
            settle_frameworks(c, {&s, &r}, streams.has_value());
            without_gil([&] { c.allreduce(cptrs(s), ptrs(r), n, dt, ro, streams_of(c, streams)); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("op") = "sum", nb::arg("count") = nb::none(),
          nb::arg("dtype") = nb::none(), nb::arg("streams") = nb::none(),
          (std::string("Allreduce of any count; op: sum|prod|max|min.") + kBufDoc).c_str())
      .def(
          "bcast",
          [](PyComm& pc, nb::sequence bufs, int root, OptSize count, OptStr dtype, OptStreams streams) {
            Comm& c = *pc.impl;
            auto b = bufs_of(c, bufs, "bufs");
            DataType dt = resolve_dtype(dtype, {&b});
            size_t n = resolve_count(count, b, 1, "bufs");
            settle_frameworks(c, {&b}, streams.has_value());
            without_gil([&] { c.bcast(ptrs(b), n, dt, root, streams_of(c, streams)); });
          },
          nb::arg("bufs"), nb::arg("root") = 0, nb::arg("count") = nb::none(), nb::arg("dtype") = nb::none(),
          nb::arg("streams") = nb::none(), (std::string("Broadcast from root.") + kBufDoc).c_str())
      .def(
          "reduce",
          [](PyComm& pc, nb::sequence send, nb::sequence recv, int root, std::string op, OptSize count, OptStr dtype,
             OptStreams streams) {
            Comm& c = *pc.impl;
            auto s = bufs_of(c, send, "send"), r = bufs_of(c, recv, "recv", /*none_ok*/ true);
            DataType dt = resolve_dtype(dtype, {&s, &r});
            size_t n = resolve_count(count, s, 1, "send");
            coll::RedOp ro = coll::parse_redop(op);
            settle_frameworks(c, {&s, &r}, streams.has_value());
            without_gil([&] { c.reduce(cptrs(s), ptrs(r), n, dt, ro, root, streams_of(c, streams)); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("root") = 0, nb::arg("op") = "sum", nb::arg("count") = nb::none(),
          nb::arg("dtype") = nb::none(), nb::arg("streams") = nb::none(),
          (std::string("Reduce to root (recv may hold None for other ranks).") + kBufDoc).c_str());
  m.def(
      "coll_time",
      [](PyComm& pc, const std::string& op, uint64_t bytes, const std::string& dtype, const std::string& redop,
         int warmup, int iters, int trials, bool wait_each) {
        coll::CollTiming t = without_gil([&] {
          return coll::time_collective(*pc.impl, coll::parse_coll_op(op), bytes, coll::parse_dtype(dtype),
                                       coll::parse_redop(redop), warmup, iters, trials,
                                       wait_each ? coll::CallPacing::WaitEach : coll::CallPacing::BackToBack);
        });
        nb::dict d;
        d["us"] = t.us;
        d["min_us"] = t.min_us;
        d["max_us"] = t.max_us;
        d["gbps"] = t.algbw_gbps;
        d["busbw_gbps"] = t.busbw_gbps;
        d["schedule"] = t.schedule;
        d["enqueue_us"] = t.enqueue_us;
        return d;
      },
      nb::arg("comm"), nb::arg("op"), nb::arg("bytes"), nb::arg("dtype") = "float32", nb::arg("redop") = "sum",
      nb::arg("warmup") = 3, nb::arg("iters") = 10, nb::arg("trials") = 5, nb::arg("wait_each") = false,
      "Times a collective nccl-tests style (bytes: size per rank as nccl-tests reports it): median per-call time "
      "of `trials` batches of `iters` back-to-back calls; wait_each: the host waits for every rank's stream "
      "after each call (blocking calls' pace on one process). Returns us, min_us, max_us, gbps (algbw), "
      "busbw_gbps, schedule, enqueue_us (host time per call to return).");
  nb::class_<NcclCollBench>(m, "NcclCollBench",
                            "NCCL's collectives over devices 0..ranks-1 of this process (the benchmark's NCCL "
                            "copy-engine reference: symmetric=True registers ncclMemAlloc buffers as symmetric "
                            "windows; set NCCL_CTA_POLICY=2 before the first communicator of the process)")
      .def(nb::init<int, size_t, bool>(), nb::arg("ranks"), nb::arg("max_bytes"), nb::arg("symmetric") = false)
      .def(
          "time",
          [](NcclCollBench& b, const std::string& op, uint64_t bytes, const std::string& dtype, int warmup, int iters,
             int trials) {
            NcclCollTiming t = without_gil(
                [&] { return b.time(coll::parse_coll_op(op), bytes, coll::parse_dtype(dtype), warmup, iters, trials); });
            nb::dict d;
            d["us"] = t.us;
            d["min_us"] = t.min_us;
            d["max_us"] = t.max_us;
            return d;
          },
          nb::arg("op"), nb::arg("bytes"), nb::arg("dtype") = "float32", nb::arg("warmup") = 3, nb::arg("iters") = 10,
          nb::arg("trials") = 5, "Median per-call time (us, min_us, max_us) as coll_time measures it")
      .def("describe", &NcclCollBench::describe);
  m.def("coll_busbw_factor", [](const std::string& op, int n) { return coll::busbw_factor(coll::parse_coll_op(op), n); },
        "nccl-tests' bus-bandwidth factor of an op on n ranks");
  m.def("dtype_size", [](const std::string& name) { return coll::dtype_size(coll::parse_dtype(name)); });
}

BindingRegistrar reg(50, bind_coll);

}  // namespace
}  // namespace gpustripe::py
