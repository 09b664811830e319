// CallMarks (src/mpi/call_marks.hpp): the ends of calls a caller holds buffers for, on the
// emulated backend behind a backend that decides which events have passed (the test plays the
// GPU): an event is made only while every earlier one is still in flight, and a caller learns,
// once each and oldest first, how many of its calls are past.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "forwarding_backend.hpp"
#include "mpi/call_marks.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;

namespace {

// Events pass only when the test says so; creations, records and destructions recorded.
struct GatedBackend : ForwardingBackend {
  using ForwardingBackend::ForwardingBackend;
  std::set<EventHandle> passed;
  std::vector<EventHandle> recorded;
  int created = 0, destroyed = 0;
  const char* name() const override { return "gated"; }
  EventHandle create_event(int dev, bool t) override {
    ++created;
    return ForwardingBackend::create_event(dev, t);
  }
  void destroy_event(EventHandle e) override {
    ++destroyed;
    ForwardingBackend::destroy_event(e);
  }
  void record_event(EventHandle e, StreamHandle s) override {
    recorded.push_back(e);
    passed.erase(e);  // recorded again: pending until the test passes it
    ForwardingBackend::record_event(e, s);
  }
  bool query_event(EventHandle e) override { return passed.count(e) > 0; }
};

struct Marks : ::testing::Test {
  Topology topo = load_topology_file("h200x4");
  GatedBackend b{make_emulated_backend(topo)};
  StreamHandle s = b.create_stream(1);
  ~Marks() override { b.destroy_stream(s); }
};

TEST_F(Marks, CallsPastReuseTheirEventAndAreReportedOnce) {
  {
    mpi::CallMarks m(b);
    EXPECT_EQ(m.mark(1, s), 0u);
    for (int i = 0; i < 49; ++i) {
      b.passed.insert(b.recorded.back());  // the GPU got past every call so far
      EXPECT_EQ(m.mark(1, s), 1u);         // the one before this one, reported once
    }
    EXPECT_EQ(b.created, 1) << "an event created per call: the marks already passed are reused";
    EXPECT_EQ(m.events_created(), 1u);
    EXPECT_EQ(b.recorded.size(), 50u);
    EXPECT_EQ(m.passed(), 0u);  // the last mark is still pending
    EXPECT_EQ(m.in_flight(), 1u);
  }
  EXPECT_EQ(b.destroyed, 1);
}

TEST_F(Marks, PendingCallsHoldTheirOwnEventsAndPassOldestFirst) {
  mpi::CallMarks m(b);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m.mark(1, s), 0u);
  EXPECT_EQ(b.created, 3);
  std::vector<EventHandle> ev = b.recorded;
  b.passed.insert(ev[1]);  // a later one passed first: nothing is reported before the oldest
  EXPECT_EQ(m.passed(), 0u);
  b.passed.insert(ev[0]);
  EXPECT_EQ(m.passed(), 2u);
  EXPECT_EQ(m.passed(), 0u);  // reported once
  EXPECT_EQ(m.in_flight(), 1u);
  m.mark(1, s);
  m.mark(1, s);
  EXPECT_EQ(b.created, 3) << "the two passed events serve the next two marks";
  m.mark(1, s);
  EXPECT_EQ(b.created, 4);
  EXPECT_EQ(m.in_flight(), 4u);
}

}  // namespace
