#include <gpustripe/ipc.h>

#include <memory>

#include "common/capi_guard.hpp"
#include "ipc/channel_handle.hpp"
#include "ipc/wait.hpp"


using namespace gpustripe;

extern "C" {

gpustripe_status_t gpustripe_channel_join(const char* name, int rank, int nranks, gpustripe_channel_t* channel) {
  if (channel) *channel = nullptr;
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(name);
    GS_REQUIRE_ARG(channel);
    auto c = std::make_unique<gpustripe_channel>();
    c->impl = ipc::join_channel_by_name(name, rank, nranks);
    *channel = c.release();
  });
}

gpustripe_status_t gpustripe_channel_destroy(gpustripe_channel_t channel) {
  return capi_guard(__func__, [&] { delete channel; });
}

gpustripe_status_t gpustripe_channel_rank(gpustripe_channel_t channel, int* rank, int* nranks) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(channel);
    if (rank) *rank = channel->impl->rank();
    if (nranks) *nranks = channel->impl->size();
  });
}

}  // extern "C"
