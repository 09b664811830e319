// The collectives' C API (gpustripe/coll.h) over coll::Comm.
#include <gpustripe/coll.h>

#include <string>
#include <vector>

#include "coll/comm.hpp"
#include "common/capi_guard.hpp"
#include "core/context_handle.hpp"

struct gpustripe_comm {
  std::unique_ptr<gpustripe::coll::Comm> impl;
  std::string last_schedule;
};

namespace {

using gpustripe::coll::Comm;

Comm& comm_of(gpustripe_comm_t c) {
  GS_REQUIRE(c != nullptr && c->impl, GPUSTRIPE_ERR_INVALID_ARGUMENT, "communicator is NULL");
  return *c->impl;
}

template <class P>
std::vector<P> array_of(P const* ptrs, int n, const char* what) {
  GS_REQUIRE(ptrs != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "%s: the array of %d per-rank pointers is NULL", what,
             n);
  return std::vector<P>(ptrs, ptrs + n);
}

Comm::Streams streams_of(void* const* streams, int n) {
  if (!streams) return {};
  return Comm::Streams(streams, streams + n);
}

}  // namespace

extern "C" {

size_t gpustripe_dtype_size(gpustripe_dtype_t dtype) {
  if (static_cast<int>(dtype) < 0 || dtype >= GPUSTRIPE_DTYPE_COUNT) return 0;
  return gpustripe::coll::dtype_size(dtype);
}

gpustripe_status_t gpustripe_comm_create(gpustripe_comm_t* comm, gpustripe_context_t ctx, const int* devices,
                                         int ndev) {
  return gpustripe::capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(comm);
    *comm = nullptr;
    GS_REQUIRE_ARG(devices);
    GS_REQUIRE(ndev > 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "ndev is %d: a communicator needs at least one device", ndev);
    auto h = std::make_unique<gpustripe_comm>();
    h->impl = Comm::create(gpustripe::context_of(ctx), std::vector<int>(devices, devices + ndev));
    *comm = h.release();
  });
}

gpustripe_status_t gpustripe_comm_destroy(gpustripe_comm_t comm) {
  return gpustripe::capi_guard(__func__, [&] { delete comm; });
}

gpustripe_status_t gpustripe_comm_size(gpustripe_comm_t comm, int* nranks) {
  return gpustripe::capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(nranks);
    *nranks = comm_of(comm).size();
  });
}

gpustripe_status_t gpustripe_comm_device(gpustripe_comm_t comm, int rank, int* device) {
  return gpustripe::capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(device);
    *device = comm_of(comm).device(rank);
  });
}

gpustripe_status_t gpustripe_comm_synchronize(gpustripe_comm_t comm) {
  return gpustripe::capi_guard(__func__, [&] { comm_of(comm).synchronize(); });
}

const char* gpustripe_comm_last_schedule(gpustripe_comm_t comm) {
  if (!comm || !comm->impl) return "";
  comm->last_schedule = comm->impl->last_schedule();
  return comm->last_schedule.c_str();
}

gpustripe_status_t gpustripe_alltoall(gpustripe_comm_t comm, const void* const* sendbufs, void* const* recvbufs,
                                      size_t count, gpustripe_dtype_t dtype, void* const* streams) {
  return gpustripe::capi_guard(__func__, [&] {
    Comm& c = comm_of(comm);
    c.alltoall(array_of(sendbufs, c.size(), "sendbufs"), array_of(recvbufs, c.size(), "recvbufs"), count, dtype,
               streams_of(streams, c.size()));
  });
}

gpustripe_status_t gpustripe_allgather(gpustripe_comm_t comm, const void* const* sendbufs, void* const* recvbufs,
                                       size_t count, gpustripe_dtype_t dtype, void* const* streams) {
  return gpustripe::capi_guard(__func__, [&] {
    Comm& c = comm_of(comm);
    c.allgather(array_of(sendbufs, c.size(), "sendbufs"), array_of(recvbufs, c.size(), "recvbufs"), count, dtype,
                streams_of(streams, c.size()));
  });
}

gpustripe_status_t gpustripe_reduce_scatter(gpustripe_comm_t comm, const void* const* sendbufs,
                                            void* const* recvbufs, size_t count, gpustripe_dtype_t dtype,
                                            gpustripe_redop_t op, void* const* streams) {
  return gpustripe::capi_guard(__func__, [&] {
    Comm& c = comm_of(comm);
    c.reduce_scatter(array_of(sendbufs, c.size(), "sendbufs"), array_of(recvbufs, c.size(), "recvbufs"), count,
                     dtype, op, streams_of(streams, c.size()));
  });
}

gpustripe_status_t gpustripe_allreduce(gpustripe_comm_t comm, const void* const* sendbufs, void* const* recvbufs,
                                       size_t count, gpustripe_dtype_t dtype, gpustripe_redop_t op,
                                       void* const* streams) {
  return gpustripe::capi_guard(__func__, [&] {
    Comm& c = comm_of(comm);
    c.allreduce(array_of(sendbufs, c.size(), "sendbufs"), array_of(recvbufs, c.size(), "recvbufs"), count, dtype, op,
                streams_of(streams, c.size()));
  });
}

gpustripe_status_t gpustripe_bcast(gpustripe_comm_t comm, void* const* bufs, size_t count, gpustripe_dtype_t dtype,
                                   int root, void* const* streams) {
  return gpustripe::capi_guard(__func__, [&] {
    Comm& c = comm_of(comm);
    c.bcast(array_of(bufs, c.size(), "bufs"), count, dtype, root, streams_of(streams, c.size()));
  });
}

gpustripe_status_t gpustripe_reduce(gpustripe_comm_t comm, const void* const* sendbufs, void* const* recvbufs,
                                    size_t count, gpustripe_dtype_t dtype, gpustripe_redop_t op, int root,
                                    void* const* streams) {
  return gpustripe::capi_guard(__func__, [&] {
    Comm& c = comm_of(comm);
    c.reduce(array_of(sendbufs, c.size(), "sendbufs"), array_of(recvbufs, c.size(), "recvbufs"), count, dtype, op,
             root, streams_of(streams, c.size()));
  });
}

}  // extern "C"
