#include <gpustripe/p2p.h>

#include <memory>

#include "core/context_handle.hpp"
#include "ipc/channel_handle.hpp"
#include "p2p/endpoint.hpp"

struct gpustripe_endpoint {
  std::unique_ptr<gpustripe::p2p::Endpoint> impl;
};
struct gpustripe_request {
  gpustripe::p2p::RequestPtr impl;
};

using namespace gpustripe;

namespace {

p2p::Endpoint& endpoint_of(gpustripe_endpoint_t ep) {
  GS_REQUIRE(ep != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "endpoint is NULL");
  return *ep->impl;
}

gpustripe_request_t& request_of(gpustripe_request_t* r) {
  GS_REQUIRE(r != nullptr && *r != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "request is NULL");
  return *r;
}

// Fills the status and frees the request; the completion's error, as an Error.
void finish(gpustripe_request_t* r, gpustripe_p2p_status_t* status) {
  p2p::P2pStatus s = (*r)->impl->status();
  if (status) *status = gpustripe_p2p_status_t{s.source, s.tag, s.bytes, s.message_bytes, s.error};
  delete *r;
  *r = nullptr;
  if (s.error != GPUSTRIPE_SUCCESS) GS_THROW(s.error, "%s", s.message.c_str());
}

}  // namespace

extern "C" {

gpustripe_status_t gpustripe_p2p_create(gpustripe_context_t ctx, gpustripe_channel_t channel,
                                        gpustripe_endpoint_t* endpoint) {
  if (endpoint) *endpoint = nullptr;
  return capi_guard(__func__, [&] {
    Context& c = context_of(ctx);
    GS_REQUIRE_ARG(channel);
    GS_REQUIRE_ARG(endpoint);
    auto e = std::make_unique<gpustripe_endpoint>();
    e->impl = std::make_unique<p2p::Endpoint>(*channel->impl, &c.backend(), p2p::engine_copy(c.engine(), channel->impl.get()),
                                                p2p::engine_plain(c.engine()));
    *endpoint = e.release();
  });
}

gpustripe_status_t gpustripe_p2p_destroy(gpustripe_endpoint_t endpoint) {
  return capi_guard(__func__, [&] { delete endpoint; });
}

gpustripe_status_t gpustripe_p2p_isend(gpustripe_endpoint_t endpoint, const void* buf, uint64_t bytes, int dst,
                                       int tag, uint64_t comm, int synchronous, gpustripe_request_t* request) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(request);
    *request = nullptr;
    auto r = std::make_unique<gpustripe_request>();
    r->impl = endpoint_of(endpoint).isend(buf, bytes, dst, tag, comm, synchronous != 0);
    *request = r.release();
  });
}

gpustripe_status_t gpustripe_p2p_irecv(gpustripe_endpoint_t endpoint, void* buf, uint64_t capacity, int src, int tag,
                                       uint64_t comm, gpustripe_request_t* request) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(request);
    *request = nullptr;
    auto r = std::make_unique<gpustripe_request>();
    r->impl = endpoint_of(endpoint).irecv(buf, capacity, src, tag, comm);
    *request = r.release();
  });
}

gpustripe_status_t gpustripe_p2p_test(gpustripe_endpoint_t endpoint, gpustripe_request_t* request, int* done,
                                      gpustripe_p2p_status_t* status) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(done);
    *done = 0;
    p2p::Endpoint& ep = endpoint_of(endpoint);
    gpustripe_request_t r = request_of(request);
    if (!ep.test(r->impl)) {
      try {
        ep.check_peers_for(*r->impl);
      } catch (const Error&) {
        if (!ep.test(r->impl)) throw;  // a finalized peer's last records may complete it
      }
      if (!r->impl->done()) return;
    }
    *done = 1;
    finish(request, status);
  });
}

gpustripe_status_t gpustripe_p2p_wait(gpustripe_endpoint_t endpoint, gpustripe_request_t* request,
                                      gpustripe_p2p_status_t* status) {
  return capi_guard(__func__, [&] {
    p2p::Endpoint& ep = endpoint_of(endpoint);
    ep.wait(request_of(request)->impl);
    finish(request, status);
  });
}

gpustripe_status_t gpustripe_p2p_request_free(gpustripe_request_t* request) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(request);
    delete *request;  // the endpoint keeps an incomplete request alive itself
    *request = nullptr;
  });
}

gpustripe_status_t gpustripe_p2p_iprobe(gpustripe_endpoint_t endpoint, int src, int tag, uint64_t comm, int* found,
                                        gpustripe_p2p_status_t* status) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(found);
    p2p::P2pStatus s;
    *found = endpoint_of(endpoint).iprobe(src, tag, comm, &s) ? 1 : 0;
    if (*found && status) *status = gpustripe_p2p_status_t{s.source, s.tag, s.bytes, s.message_bytes, s.error};
  });
}

}  // extern "C"
