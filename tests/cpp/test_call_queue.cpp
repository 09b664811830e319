// CallQueue (src/mpi/call_queue.hpp): a team's calls run on its worker in the order posted, a
// failed job's error reaches the poster at its next post, drain and check (and the jobs after it
// still run: each releases what it holds), drain returns only once every job posted has run,
// a full queue holds the poster until the worker catches up, and the queue's end runs what is
// queued. wait(job) returns once that job has run, not waiting for later ones, and throws only
// an error of a job up to it. latency_us(job) is its time from post to the end of its run,
// counting its wait behind earlier jobs, and negative before it ran.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "mpi/call_queue.hpp"

using gpustripe::Error;
using gpustripe::mpi::CallQueue;

TEST(CallQueue, RunsJobsInPostedOrderOnTheWorker) {
  std::vector<int> ran;
  std::atomic<bool> off_caller{true};
  const auto caller = std::this_thread::get_id();
  CallQueue q;
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(q.post([&, i] {
      if (std::this_thread::get_id() == caller) off_caller = false;
      ran.push_back(i);
    }), uint64_t(i + 1));
  q.drain("test");
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
  EXPECT_TRUE(off_caller);
  EXPECT_EQ(q.done(), 100u);
  EXPECT_EQ(q.posted(), 100u);
}

TEST(CallQueue, DrainWaitsForAJobStillRunning) {
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::atomic<bool> finished{false};
  CallQueue q;
  EXPECT_TRUE(q.idle());
  q.post([gate, &finished] {
    gate.wait();
    finished = true;
  });
  EXPECT_FALSE(q.idle());  // the job waits for the gate, not yet opened
  std::thread opener([&go] { go.set_value(); });
  q.drain("test");  // returns only after the job ran, whenever the gate opens
  EXPECT_TRUE(finished);
  EXPECT_TRUE(q.idle());
  opener.join();
}

TEST(CallQueue, WaitForAJobReturnsWithoutTheLaterOnes) {
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::atomic<bool> first{false};
  CallQueue q;
  const uint64_t job = q.post([&first] { first = true; });
  q.post([gate] { gate.wait(); });  // runs until the gate opens, after wait() returned
  q.post([] { throw std::runtime_error("a later job failed"); });
  q.wait(job, "test");  // returns although the second job holds the worker
  EXPECT_TRUE(first);
  EXPECT_LT(q.done(), 3u);
  go.set_value();
  EXPECT_THROW(q.wait(3, "test"), std::runtime_error);  // its own error
  EXPECT_NO_THROW(q.wait(job, "test"));                // not the first job's
  EXPECT_NO_THROW(q.wait(2, "test"));
}

TEST(CallQueue, AFailedJobsErrorReachesThePosterAndLaterJobsStillRun) {
  std::atomic<int> after{0};
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  CallQueue q;
  q.post([gate] {
    gate.wait();  // fails only once the next job is queued
    throw std::runtime_error("peer gone");
  });
  q.post([&after] { ++after; });
  go.set_value();
  EXPECT_THROW(q.drain("test"), std::runtime_error);
  EXPECT_EQ(after.load(), 1);  // ran: it releases what it holds
  EXPECT_THROW(q.check(), std::runtime_error);
  EXPECT_THROW(q.post([] {}), std::runtime_error);
  EXPECT_THROW(q.drain("test"), std::runtime_error);  // stays
}

TEST(CallQueue, AFullQueueHoldsThePosterUntilTheWorkerCatchesUp) {
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::atomic<int> ran{0};
  std::promise<void> started;
  CallQueue q;
  q.post([gate, &started] {  // the worker holds this one until the gate opens
    started.set_value();
    gate.wait();
  });
  started.get_future().wait();  // out of the queue: the queue holds only what follows
  for (size_t i = 0; i < CallQueue::kMaxQueued; ++i) q.post([&ran] { ++ran; });
  std::atomic<bool> posted{false};
  std::thread poster([&] {
    q.post([&ran] { ++ran; });
    posted = true;
  });
  // The queue is full (the worker is in the first job): the poster waits for it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(posted);
  go.set_value();
  poster.join();
  q.drain("test");
  EXPECT_TRUE(posted);
  EXPECT_EQ(ran.load(), static_cast<int>(CallQueue::kMaxQueued) + 1);
}

TEST(CallQueue, ItsEndRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    CallQueue q;
    for (int i = 0; i < 20; ++i)
      q.post([&ran] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ++ran;
      });
  }
  EXPECT_EQ(ran.load(), 20);
}

TEST(CallQueue, LatencyCountsTheWaitBehindEarlierJobsAndTheRun) {
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  CallQueue q;
  const uint64_t first = q.post([gate] { gate.wait(); });  // held until the gate opens
  const uint64_t second = q.post([] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
  EXPECT_LT(q.latency_us(first), 0.0);  // not run yet
  EXPECT_LT(q.latency_us(second), 0.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  go.set_value();
  q.drain("test");
  EXPECT_GE(q.latency_us(first), 20000.0);
  EXPECT_GE(q.latency_us(second), 25000.0);  // behind the first, then its own 5 ms
  EXPECT_LT(q.latency_us(0), 0.0);           // no job 0
  EXPECT_LT(q.latency_us(second + 1), 0.0);  // never posted
  for (size_t i = 0; i < CallQueue::kLatenciesKept; ++i) q.post([] {});
  q.drain("test");
  EXPECT_LT(q.latency_us(first), 0.0);  // its slot taken by a later job
  EXPECT_GE(q.latency_us(q.posted()), 0.0);
}
