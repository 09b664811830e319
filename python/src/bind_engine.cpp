// gpustripe.Context (the C++ Context: topology + backend + planner + engine), its copies,
// raw device buffers for tests and tools, and the p2p benchmark library.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "bench/bench.hpp"
#include "bindings.hpp"
#include "common/error.hpp"
#include "core/context.hpp"

namespace gpustripe::py {
namespace {

void* as_ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

// Sizes arrive as Python ints of any size, so that a negative one, or one past 2**64 (a
// wrapped size), is a gpustripe.Error naming the call (ERR_INVALID_SIZE), not nanobind's
// "incompatible function arguments"; what fits in 64 bits goes on to the engine's own range checks.
uint64_t byte_count(const nb::int_& bytes, const char* call) {
  PyObject* o = bytes.ptr();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  GS_REQUIRE(overflow >= 0 && (overflow > 0 || v >= 0), GPUSTRIPE_ERR_INVALID_SIZE,
             "%s: bytes is negative: a size cannot be negative", call);
  if (overflow == 0) return static_cast<uint64_t>(v);
  const unsigned long long u = PyLong_AsUnsignedLongLong(o);
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    GS_THROW(GPUSTRIPE_ERR_INVALID_SIZE, "%s: bytes is 2**64 or more", call);
  }
  return u;
}

// A stream argument: 0 means the context's default for the source device (see copy.h).
StreamHandle stream_for(Context& ctx, uintptr_t stream, int dev) {
  return stream ? reinterpret_cast<StreamHandle>(stream) : ctx.default_stream(dev);
}

nb::dict row_dict(const BenchRow& r) {
  nb::dict d;
  d["op"] = r.op;
  d["method"] = r.method;
  d["src"] = r.src;
  d["dst"] = r.dst;
  d["bytes"] = r.bytes;
  d["us"] = r.us;
  d["gbps"] = r.gbps;
  d["min_us"] = r.min_us;
  d["max_us"] = r.max_us;
  if (r.reps) d["reps"] = r.reps;
  if (!r.paths.empty()) d["plan"] = r.paths;
  return d;
}

void bind_engine(nb::module_& m) {
  nb::class_<Context>(m, "Context",
                      "The node's GPUs (or emulated devices where none is visible), their planner and the "
                      "multi-path engine. Thread-safe; make one per process (gpustripe.default_context()).")
      .def(nb::init<>())
      .def_prop_ro("device_count", &Context::device_count)
      .def_prop_ro("backend_name", [](Context& c) { return std::string(c.backend_name()); })
      .def_prop_ro("emulated", &Context::emulated)
      .def_prop_ro("device_label", &Context::device_label,
                   "What results files call the device: the GPU name, or emulated-<topology>")
      .def_prop_ro("topology_name", [](Context& c) { return c.topology().name; })
      .def(
          "copy_async",
          [](Context& c, uintptr_t dst, int dst_dev, uintptr_t src, int src_dev, const nb::int_& n, uintptr_t stream) {
            const uint64_t bytes = byte_count(n, "copy_async");
            without_gil([&] {
              StreamHandle s = bytes ? stream_for(c, stream, src_dev) : nullptr;
              c.engine().copy_async(as_ptr(dst), dst_dev, as_ptr(src), src_dev, bytes, s);
            });
          },
          nb::arg("dst"), nb::arg("dst_dev"), nb::arg("src"), nb::arg("src_dev"), nb::arg("bytes"),
          nb::arg("stream") = 0, "Raw-pointer copy ordered on `stream` (a cudaStream_t of src_dev as int; 0: default)")
      .def(
          "copy",
          [](Context& c, uintptr_t dst, int dst_dev, uintptr_t src, int src_dev, const nb::int_& n, uintptr_t stream) {
            const uint64_t bytes = byte_count(n, "copy");
            without_gil([&] {
              StreamHandle s = bytes ? stream_for(c, stream, src_dev) : nullptr;
              if (bytes) c.engine().copy(as_ptr(dst), dst_dev, as_ptr(src), src_dev, bytes, s);
              else c.engine().copy_async(as_ptr(dst), dst_dev, as_ptr(src), src_dev, 0, nullptr);
            });
          },
          nb::arg("dst"), nb::arg("dst_dev"), nb::arg("src"), nb::arg("src_dev"), nb::arg("bytes"),
          nb::arg("stream") = 0, "copy_async, then waits for the stream")
      .def(
          "pointer_device",
          [](Context& c, uintptr_t p) {
            PointerInfo info = c.backend().pointer_info(as_ptr(p));
            return info.kind == MemoryKind::Device ? info.device : -1;
          },
          "The GPU owning device memory at `p`, or -1 for host memory")
      .def("plan", [](Context& c, int src, int dst, const nb::int_& bytes) {
        GS_REQUIRE(c.planner(), GPUSTRIPE_ERR_NOT_SUPPORTED, "this context has no planner");
        return c.planner()->plan(src, dst, byte_count(bytes, "plan")).describe();
      }, "The planner's split of a transfer, in short form")
      .def("stats", [](Context& c) {
        EngineStats s = c.engine().stats();
        nb::dict d;
        d["plain_copies"] = s.plain_copies;
        d["schedules"] = s.schedules;
        d["graph_captures"] = s.graph_captures;
        d["graph_launches"] = s.graph_launches;
        d["staging_bytes"] = s.staging_bytes;
        d["graphs"] = c.engine().uses_graphs();
        return d;
      }, "Counters of the engine (plain copies, schedules, graph captures and launches, staging bytes)")
      // Raw device buffers: for tests and tools that have no torch/cupy (emulated devices).
      .def("alloc_device", [](Context& c, int dev, const nb::int_& bytes) {
        return reinterpret_cast<uintptr_t>(c.backend().alloc_device(dev, byte_count(bytes, "alloc_device")));
      })
      .def("free_device", [](Context& c, uintptr_t p) { c.backend().free_device(as_ptr(p)); })
      .def("upload", [](Context& c, uintptr_t dst, int dev, nb::bytes data) {
        Backend& b = c.backend();
        void* pinned = b.alloc_pinned(data.size());
        std::memcpy(pinned, data.c_str(), data.size());
        StreamHandle s = b.create_stream(dev);
        b.copy_async(as_ptr(dst), dev, pinned, kHostDevice, data.size(), s);
        b.synchronize_stream(s);
        b.destroy_stream(s);
        b.free_pinned(pinned);
      }, "Writes bytes to device memory (synchronous)")
      .def("download", [](Context& c, uintptr_t src, int dev, const nb::int_& n) {
        const uint64_t bytes = byte_count(n, "download");
        Backend& b = c.backend();
        void* pinned = b.alloc_pinned(bytes);
        StreamHandle s = b.create_stream(dev);
        b.copy_async(pinned, kHostDevice, as_ptr(src), dev, bytes, s);
        b.synchronize_stream(s);
        b.destroy_stream(s);
        nb::bytes out(static_cast<const char*>(pinned), bytes);
        b.free_pinned(pinned);
        return out;
      }, "Reads device memory (synchronous)")
      .def("bench_methods", [](Context& c) {
        std::vector<std::string> missing;
        std::vector<std::string> have = bench_methods(c, &missing);
        return std::make_pair(have, missing);
      }, "(methods this context can benchmark, ['method: why not', ...])")
      .def(
          "bench_p2p",
          [](Context& c, std::vector<std::pair<int, int>> pairs, std::vector<uint64_t> sizes,
             std::vector<uint64_t> latency_sizes, std::vector<std::string> methods, bool bidirectional, int warmup,
             int reps, int latency_reps, nb::object progress) {
            BenchOptions o;
            o.pairs = std::move(pairs);
            o.sizes = std::move(sizes);
            o.latency_sizes = std::move(latency_sizes);
            o.methods = std::move(methods);
            o.bidirectional = bidirectional;
            o.warmup = warmup;
            o.reps = reps;
            o.latency_reps = latency_reps;
            BenchProgress cb;
            if (!progress.is_none())
              cb = [&progress](const BenchRow& r) {
                nb::gil_scoped_acquire gil;
                progress(row_dict(r));
              };
            std::vector<BenchRow> rows = without_gil([&] { return run_p2p_bench(c, o, cb); });
            nb::list out;
            for (const BenchRow& r : rows) out.append(row_dict(r));
            return out;
          },
          nb::arg("pairs"), nb::arg("sizes"), nb::arg("latency_sizes"), nb::arg("methods"), nb::arg("bidirectional"),
          nb::arg("warmup"), nb::arg("reps"), nb::arg("latency_reps"), nb::arg("progress") = nb::none(),
          "Runs the p2p benchmark (src/bench); rows as dicts in the results format");
}

BindingRegistrar reg(30, bind_engine);

}  // namespace
}  // namespace gpustripe::py
