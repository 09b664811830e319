// The ends of stream-ordered calls whose buffers a caller keeps alive until the GPUs are past
// them (the PyTorch backend's asynchronous calls: it holds their tensors so that the caching
// allocator does not hand their blocks out while a collective still reads or writes them).
//
// A mark is an event recorded on the stream a call ends on; the marks are kept in the order
// they were made, and the oldest ones are queried at each new mark, so a caller learns how many
// of its calls are past with no call of its own. An event whose mark has passed goes back to
// its device's pool: once the pool covers the calls in flight, a call's end creates no event
// (one record and the queries of the oldest marks, all within one call from the caller).
#pragma once
#include <cstddef>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe::mpi {

class CallMarks {
 public:
  explicit CallMarks(Backend& backend) : backend_(backend) {}
  // Destroys the events; the streams they were recorded on need not be done (the driver lets
  // go of a pending event's resources once it completes).
  ~CallMarks();
  CallMarks(const CallMarks&) = delete;
  CallMarks& operator=(const CallMarks&) = delete;

  // Marks the work enqueued on `s` (a stream of `device`) so far. Returns how many of the
  // marks made before it, oldest first, are now known passed: the caller lets go of what it
  // held for that many of its oldest calls (this mark is not among them).
  size_t mark(int device, StreamHandle s);
  // How many more of the oldest marks are passed now (counted as mark() counts them).
  size_t passed();
  // Marks not yet seen passed, and events created so far (each reused once its mark passed).
  size_t in_flight() const { return live_.size(); }
  size_t events_created() const { return created_; }
  struct Stats {
    size_t in_flight = 0, events_created = 0;
  };

 private:
  Backend& backend_;
  std::deque<std::pair<int, EventHandle>> live_;    // (device, event), oldest first
  std::map<int, std::vector<EventHandle>> free_;    // device -> events whose marks passed
  size_t created_ = 0;
};

}  // namespace gpustripe::mpi
