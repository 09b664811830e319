#include "mpi/call_marks.hpp"

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::mpi {

CallMarks::~CallMarks() {
  auto destroy = [this](EventHandle e) {
    try {
      backend_.destroy_event(e);
    } catch (const Error& err) {
      GS_LOG_WARN(Subsys::Mpi, "call marks: destroying an event: %s", err.what());
    }
  };
  for (auto& [dev, e] : live_) destroy(e);
  for (auto& [dev, events] : free_)
    for (EventHandle e : events) destroy(e);
}

size_t CallMarks::passed() {
  size_t n = 0;
  while (!live_.empty() && backend_.query_event(live_.front().second)) {
    free_[live_.front().first].push_back(live_.front().second);
    live_.pop_front();
    ++n;
  }
  return n;
}

size_t CallMarks::mark(int device, StreamHandle s) {
  // Queried first: a pool refilled by the marks passed now serves this one.
  const size_t n = passed();
  std::vector<EventHandle>& pool = free_[device];
  EventHandle e;
  if (pool.empty()) {
    e = backend_.create_event(device, false);
    ++created_;
  } else {
    e = pool.back();
    pool.pop_back();
  }
  try {
    backend_.record_event(e, s);
  } catch (...) {
    pool.push_back(e);
    throw;
  }
  live_.emplace_back(device, e);
  return n;
}

}  // namespace gpustripe::mpi
