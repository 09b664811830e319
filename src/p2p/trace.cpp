#include "p2p/trace.hpp"

#include <unistd.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/text_file.hpp"

namespace gpustripe::p2p {
namespace {

const StringSetting kTrace{"GPUSTRIPE_P2P_TRACE", "",
                           "Directory for a phase trace of p2p messages and interposed collectives (p2p-trace-<pid>.txt "
                           "per process; bench/mpi/p2p_trace_summary.py and coll_trace_summary.py read them); "
                           "empty: no trace"};

struct Event {
  int64_t ns;
  const char* phase;
  int sender;
  uint64_t send_id, recv_id, bytes;
};

struct State {
  std::string dir = kTrace.get();
  std::mutex mu;
  std::vector<Event> events;
};

State& state() {
  static State* s = new State();  // outlives the endpoints that write it at exit
  return *s;
}

}  // namespace

namespace detail {

std::atomic<int8_t> g_trace_state{-1};

bool trace_read_setting() {
  const bool on = !state().dir.empty();
  g_trace_state.store(on ? 1 : 0, std::memory_order_relaxed);
  return on;
}

void trace_now(const char* phase, int sender, uint64_t send_id, uint64_t recv_id, uint64_t bytes) {
  trace_at(std::chrono::steady_clock::now(), phase, sender, send_id, recv_id, bytes);
}

}  // namespace detail

void trace_at(std::chrono::steady_clock::time_point t, const char* phase, int sender, uint64_t send_id,
              uint64_t recv_id, uint64_t bytes) {
  if (!trace_on()) return;
  int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  s.events.push_back(Event{ns, phase, sender, send_id, recv_id, bytes});
}

void trace_write(int rank) {
  if (!trace_on()) return;
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.events.empty()) return;
  std::string text;
  text.reserve(s.events.size() * 64);
  for (const Event& e : s.events)
    text += format("%lld %d %s %d %llu %llu %llu\n", static_cast<long long>(e.ns), rank, e.phase, e.sender,
                   static_cast<unsigned long long>(e.send_id), static_cast<unsigned long long>(e.recv_id),
                   static_cast<unsigned long long>(e.bytes));
  write_text_file(format("%s/p2p-trace-%d.txt", s.dir.c_str(), static_cast<int>(getpid())), text);
  s.events.clear();
}

}  // namespace gpustripe::p2p
