#include "coll/reduce.hpp"

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::coll {

void check_reduce_args(const ReduceArgs& a) {
  check_dtype(a.dtype);
  check_redop(a.op);
  GS_REQUIRE(!a.srcs.empty(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "reduction without sources");
  if (a.count == 0) return;
  GS_REQUIRE(a.dst != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "reduction destination is NULL");
  for (size_t i = 0; i < a.srcs.size(); ++i)
    GS_REQUIRE(a.srcs[i] != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "reduction source %zu is NULL", i);
}

namespace {

// Emulated devices live in host memory, and the emulated backend offers no host
// callbacks on its streams: wait for the stream, then reduce on this thread. The
// reduction is thereby ordered after everything before it on s, and everything
// enqueued on s later runs after it, which is all the schedules rely on.
class HostReducer : public Reducer {
 public:
  explicit HostReducer(Backend& b) : backend_(b) {}
  void reduce_async(const ReduceArgs& args, int dev, StreamHandle s) override {
    check_reduce_args(args);
    backend_.synchronize_stream(s);
    reduce_host(args);
  }

 private:
  Backend& backend_;
};

#if GPUSTRIPE_HAVE_CUDA
class CudaReducer : public Reducer {
 public:
  void reduce_async(const ReduceArgs& args, int dev, StreamHandle s) override {
    check_reduce_args(args);
    if (args.count == 0) return;
    // More sources than one launch takes: fold them in groups, accumulating into dst.
    ReduceArgs part = args;
    size_t next = 0;
    bool first = true;
    while (next < args.srcs.size()) {
      part.srcs.clear();
      if (!first) part.srcs.push_back(args.dst);
      size_t room = kMaxKernelSources - part.srcs.size();
      for (size_t i = 0; i < room && next < args.srcs.size(); ++i) part.srcs.push_back(args.srcs[next++]);
      launch_reduce_kernel(part, dev, s);
      first = false;
    }
  }
};
#endif

}  // namespace

std::unique_ptr<Reducer> make_reducer(Backend& backend) {
  if (backend.emulated()) return std::make_unique<HostReducer>(backend);
#if GPUSTRIPE_HAVE_CUDA
  return std::make_unique<CudaReducer>();
#else
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "no reduction for backend '%s' in this build (built without CUDA)",
           backend.name());
#endif
}

}  // namespace gpustripe::coll
