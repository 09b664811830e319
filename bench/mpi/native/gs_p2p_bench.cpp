// The native baseline of the MPI benchmark: the same OSU-style loop (../osu_loop.hpp)
// over gpustripe's own p2p layer (src/p2p), with MPI used only to launch the ranks and
// open the node's channel. The interposer's figures (mpi_bench with
// libgpustripe_mpi.so, method mpi_gpustripe) are compared against these (method
// gpustripe). Run WITHOUT the interposer preloaded. Buffers come from the gpustripe
// context's backend: real GPUs, or emulated ones where there is none; --alloc picks the
// allocator (Backend::alloc_device_as: VMM, POSIX-fd pool, default pool).
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "../osu_loop.hpp"
#include "common/error.hpp"
#include "core/context.hpp"
#include "ipc/channel.hpp"
#include "p2p/endpoint.hpp"

namespace {

class NativeTransport {
 public:
  NativeTransport(const osu::Options& o, gpustripe::Context& ctx, gpustripe::p2p::Endpoint& ep, int dev)
      : o_(o), ctx_(ctx), ep_(ep), dev_(dev) {}
  std::string method() const { return o_.method.empty() ? "gpustripe" : o_.method; }

  void prepare(int slots, size_t n) {
    bufs_.make(o_, slots, n, [this](size_t b) {
      return static_cast<char*>(o_.device ? ctx_.backend().alloc_device_as(dev_, b, gpustripe::parse_device_alloc(o_.alloc))
                                          : std::malloc(b));
    });
  }
  void release() {
    bufs_.drop([this](char* p) { o_.device ? ctx_.backend().free_device(p) : std::free(p); });
  }
  void isend(int slot, size_t n, int peer, int tag) { reqs_.push_back(ep_.isend(bufs_[slot], n, peer, tag, 1)); }
  void irecv(int slot, size_t n, int peer, int tag) { reqs_.push_back(ep_.irecv(bufs_[slot], n, peer, tag, 1)); }
  void waitall() {
    for (auto& r : reqs_) ep_.wait(r);
    reqs_.clear();
  }

 private:
  const osu::Options& o_;
  gpustripe::Context& ctx_;
  gpustripe::p2p::Endpoint& ep_;
  int dev_;
  osu::Slots bufs_;
  std::vector<gpustripe::p2p::RequestPtr> reqs_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  osu::Options o = osu::parse_options(argc, argv);
  if (o.staged) osu::usage("--staged is a pattern of the MPI client (mpi_bench), not of native p2p");
  try {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local = 0, nlocal = 0, world = 0;
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &nlocal);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (nlocal != world) osu::usage("gpustripe p2p is node-local: run all ranks on one node");
    gpustripe::Context ctx;
    auto ch = gpustripe::ipc::join_channel(
        local, nlocal, [&](char* name) { MPI_Bcast(name, 128, MPI_CHAR, 0, node); }, [&] { MPI_Barrier(node); });
    {
      gpustripe::p2p::Endpoint ep(*ch, &ctx.backend(), gpustripe::p2p::engine_copy(ctx.engine(), ch.get()));
      NativeTransport t(o, ctx, ep, local % ctx.device_count());
      osu::run_sweeps(o, t);
      ep.flush();
      if (o.alloc != "plain" && ep.handle_cache()) {  // which IPC path the buffers took (mapped or streamed)
        gpustripe::ipc::HandleCacheStats c = ep.handle_cache()->stats();
        std::fprintf(stderr, "IPC rank %d alloc=%s map_misses=%llu map_hits=%llu fd_opens=%llu multi_opens=%llu "
                     "pieces_mapped=%llu leases_closed=%llu\n", local, o.alloc.c_str(), static_cast<unsigned long long>(c.misses),
                     static_cast<unsigned long long>(c.hits), static_cast<unsigned long long>(c.fd_opens),
                     static_cast<unsigned long long>(c.multi_opens), static_cast<unsigned long long>(c.pieces_mapped),
                     static_cast<unsigned long long>(c.leases_closed));
      }
      MPI_Barrier(node);
    }
    MPI_Comm_free(&node);
  } catch (const gpustripe::Error& e) {
    std::fprintf(stderr, "gs_p2p_bench: %s: %s\n", gpustripe::status_name(e.status()), e.what());
    MPI_Abort(MPI_COMM_WORLD, 5);
  }
  MPI_Finalize();
  return 0;
}
