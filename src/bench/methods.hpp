// The transfer methods a benchmark compares. Each posts a set of transfers that run at
// once (one for p2p, both directions for bibw) on the streams a StreamFork hands out.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe {

class Context;
struct NcclComm;

struct Transfer {
  void* dst;
  int dst_dev;
  const void* src;
  int src_dev;
  uint64_t bytes;
};

// The source GPU's stream of a repetition, and a stream per other GPU, forked from it:
// begin() marks the start of a repetition on the main stream, and a stream of another GPU
// waits for that mark on first use, so work posted on the main stream before it is used
// (the first direction of a bidirectional run) never delays it. join() joins them back.
class StreamFork {
 public:
  StreamFork(Backend& backend, int main_dev);
  ~StreamFork();
  StreamHandle main() const { return streams_[main_dev_]; }
  void begin();
  StreamHandle on(int dev);
  void join();

 private:
  Backend& backend_;
  int main_dev_;
  std::vector<StreamHandle> streams_;
  std::vector<EventHandle> events_;
  std::vector<bool> used_;
  EventHandle fork_ = nullptr;
  bool forked_ = false;
};

class Method {
 public:
  virtual ~Method() = default;
  virtual const char* name() const = 0;
  virtual void post(const std::vector<Transfer>& transfers, StreamFork& streams) = 0;
  // The plan used for the last post (gpustripe only).
  virtual std::string describe() const { return ""; }
};

std::unique_ptr<Method> make_gpustripe_method(Context& ctx);
std::unique_ptr<Method> make_peer_copy_method(Context& ctx);
// Throws ERR_NOT_SUPPORTED with the reason (emulated backend, no libnccl).
std::unique_ptr<Method> make_nccl_method(Context& ctx);

}  // namespace gpustripe
